"""Nodes of the mini_rl pipeline: the task sets, one training run, the manifest of all runs."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from hed.config.mini_rl import MiniRLParams, TaskParams
from hed.config.prompt_params import PromptsParams
from hed.mini_rl.config import training_specs
from hed.mini_rl.tasks import make_task_sets

logger = logging.getLogger(__name__)


def generate_task_sets(task: TaskParams | dict[str, Any]) -> dict[str, pd.DataFrame]:
    """Generate the training and held-out validation problems from a seed.

    Args:
        task: ``params:mini_rl.task``, parsed (:class:`~hed.config.mini_rl.TaskParams`) or raw
            (``num_train``, ``num_validation``, ``seed``, ``kinds``).

    Returns:
        ``{"train": ..., "validation": ...}``: frames with ``problem_index, problem, answer,
        kind``; no problem is in both.
    """
    task = TaskParams.of(task)
    train, validation = make_task_sets(
        num_train=task.num_train,
        num_validation=task.num_validation,
        seed=task.seed,
        **({"kinds": list(task.kinds)} if task.kinds else {}),  # None: every kind
    )
    logger.info("mini_rl task: %d training and %d held-out problems", len(train), len(validation))
    return {"train": train, "validation": validation}


def train_policy(
    train_set: pd.DataFrame,
    validation_set: pd.DataFrame,
    *,
    runs: dict[str, Any],
    mini_rl: MiniRLParams | dict[str, Any],
    prompt_params: PromptsParams | dict[str, Any],
    previous_run: dict[str, Any] | None = None,
    run: str,
) -> dict[str, Any]:
    """Train one run with GRPO (or reuse it) and write its checkpoints and offline W&B run.

    Side effects, like a training job's: ``<checkpoint_root>/global_step_<N>/actor_hf`` for every
    scheduled step, ``<checkpoint_root>/mini_rl_run.json`` and ``<wandb.dir>/<run>/wandb/
    offline-run-*``. Nothing is written when the run is reused.

    Args:
        train_set: training problems.
        validation_set: held-out problems (``raw_prompts`` of the environment).
        runs: ``params:runs`` (the run's ``checkpoint_root`` and analysed ``steps``).
        mini_rl: ``params:mini_rl``, parsed (:class:`~hed.config.mini_rl.MiniRLParams`) or raw.
        prompt_params: ``params:prompts`` (chat template, instruction suffix), so the policy
            is trained on the prompts HED analyses.
        previous_run: the manifest of the run trained before this one; only orders the runs
            (one training at a time: they share the CPU cores).
        run: the run to train (bound when the pipeline is built).

    Returns:
        The run manifest: ``steps``, ``checkpoints`` (model_dir and greedy validation per step),
        ``wandb_run_dir``, ``train_log``, ``wall_time_s``, ``reused``...

    Raises:
        ConfigError: invalid ``mini_rl`` parameters, or a checkpoint root holding checkpoints
            that mini_rl did not write.
    """
    # torch, transformers and trl take seconds to import: only when a run is trained
    from hed.mini_rl.trainer import train_or_reuse

    spec = next(s for s in training_specs(mini_rl, runs, prompt_params) if s.run == run)
    return train_or_reuse(spec, train_set, validation_set)


def collect_training_manifests(*manifests: dict[str, Any]) -> dict[str, Any]:
    """Gather the run manifests into the environment's training manifest.

    Args:
        *manifests: one manifest per trained run, in training order.

    Returns:
        ``{"runs": {<run>: manifest}}``.
    """
    return {"runs": {manifest["run"]: manifest for manifest in manifests}}
