"""A miniature DAPO experiment on CPU: real RL checkpoints for HED to analyse (docs/mini_dapo.md).

Modules: :mod:`~hed.mini_rl.tasks` (the arithmetic task sets), :mod:`~hed.mini_rl.reward`
(math-verify correctness), :mod:`~hed.mini_rl.config` (parameters → one training spec per run,
the checkpoint schedule, the training fingerprint), :mod:`~hed.mini_rl.trainer` (TRL's
``GRPOTrainer`` with checkpoint/validation callbacks; train or reuse),
:mod:`~hed.mini_rl.export` (``global_step_<N>/actor_hf`` folders),
:mod:`~hed.mini_rl.validation` (greedy held-out pass@1 and entropy),
:mod:`~hed.mini_rl.wandb_offline` (an offline W&B run that never reaches a server),
:mod:`~hed.mini_rl.manifest` (what a run wrote; reuse) and :mod:`~hed.mini_rl.datasets`
(the task-set file dataset).
"""
