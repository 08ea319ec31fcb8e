"""One mini-RL run: TRL's ``GRPOTrainer`` on CPU, checkpoints and validation at scheduled steps.

:func:`train_run` loads the initial policy, renders the training prompts exactly as HED's
generation pipeline renders its prompts (:func:`hed.decode.prompts.render_prompt`), and runs
``GRPOTrainer`` with the run's GRPOConfig arguments and the reward
:func:`hed.mini_rl.reward.correctness_reward` (``mini_rl.reward``), inside an offline W&B run. A
:class:`CheckpointCallback` handles the schedule: at step 0 (before the first update) and at
every scheduled step it

1. exports the policy as ``<checkpoint_root>/global_step_<N>/actor_hf`` (bf16, tokenizer, EOS
   ids; :mod:`hed.mini_rl.export`),
2. answers the held-out set greedily with that bf16 checkpoint model
   (:func:`hed.mini_rl.validation.greedy_validation`),
3. logs pass@1, the responses' mean entropy and length to W&B in one row together with the
   trainer's step key ``train/global_step`` (the key every trainer row carries).

The trainer itself logs every step (``logging_steps=1``): ``train/reward``,
``train/entropy``, ``train/clip_ratio/{low_mean,high_mean,region_mean}``, ``train/loss``, ...
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import transformers
import trl
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from hed.decode.checkpoints import validate_model_dir
from hed.decode.embedded import ensure_embedded_checkpoint
from hed.decode.prompts import render_prompt
from hed.mini_rl.config import STEP_KEY, TrainingSpec, frame_hash, model_identity
from hed.mini_rl.cpu import CoreMeter, torch_threads_for
from hed.mini_rl.export import as_compute_dtype, checkpoint_copy, eos_ids_of, save_actor_hf
from hed.mini_rl.manifest import (
    STATUS_COMPLETE,
    STATUS_TRAINING,
    clear_run_outputs,
    reusable_manifest,
    write_manifest,
)
from hed.mini_rl.reward import correctness_reward, grader
from hed.mini_rl.rollout_dump import ROLLOUT_FOLDER, RolloutDumper
from hed.mini_rl.validation import ValidationResult, greedy_validation
from hed.mini_rl.wandb_offline import offline_run_folder, offline_wandb_run

logger = logging.getLogger(__name__)

#: Trainer log keys kept per step in the run manifest (``train/`` is W&B's prefix for them).
TRAIN_LOG_KEYS = (
    "loss",
    "reward",
    "reward_std",
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "completions/mean_length",
    "learning_rate",
    "grad_norm",
    "entropy_coef",
    "shaped_advantage/mean",
)


class ThreadBudget(TrainerCallback):
    """Before every step, set torch's threads to the cores other processes leave free.

    Args:
        meter: measures the free cores since the previous step.

    Attributes:
        threads_by_step: ``{step: threads}`` for every step run so far.
    """

    def __init__(self, meter: CoreMeter) -> None:
        self.meter = meter
        self.threads_by_step: dict[int, int] = {}

    def on_step_begin(self, args, state, control, **kwargs):
        """Re-measure and apply."""
        threads = self.meter.free_cores()
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        self.threads_by_step[state.global_step + 1] = threads


class ProgressLog(TrainerCallback):
    """One log line per optimizer step (instead of transformers' printed dictionaries)."""

    def __init__(self, run: str) -> None:
        self.run = run

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Log reward, entropy and clip ratios of the step just logged."""
        logs = logs or {}
        if "entropy" not in logs:
            return
        logger.info(
            "Run %s step %d/%d: reward %s, entropy %.3f, clip ratio low %.4f high %.4f, "
            "%.1f s, %d threads",
            self.run,
            state.global_step,
            state.max_steps,
            f"{logs['reward']:.3f}" if "reward" in logs else "-",
            logs["entropy"],
            logs.get("clip_ratio/low_mean", float("nan")),
            logs.get("clip_ratio/high_mean", float("nan")),
            logs.get("step_time", float("nan")),
            torch.get_num_threads(),
        )


class CheckpointCallback(TrainerCallback):
    """Export, validate and log the policy at step 0 and at every scheduled step.

    Args:
        schedule: checkpoint steps.
        checkpoint: ``checkpoint(model, step) -> dict`` doing the work for one step; its
            results are kept in ``self.checkpoints`` by step.
    """

    def __init__(
        self, schedule: Sequence[int], checkpoint: Callable[[Any, int], dict[str, Any]]
    ) -> None:
        self.schedule = frozenset(schedule)
        self._checkpoint = checkpoint
        self.checkpoints: dict[int, dict[str, Any]] = {}

    def _maybe_checkpoint(self, model: Any, step: int) -> None:
        if step in self.schedule and step not in self.checkpoints:
            self.checkpoints[step] = self._checkpoint(model, step)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """Step 0: the initial policy, before any update."""
        self._maybe_checkpoint(model, state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        """After optimizer step ``state.global_step``."""
        self._maybe_checkpoint(model, state.global_step)


def render_prompts(
    tokenizer: Any, problems: Sequence[str], prompt_params: dict[str, Any]
) -> list[str]:
    """Model inputs of ``problems``: problem + ``instruction_suffix`` through the chat template."""
    suffix = prompt_params.get("instruction_suffix") or ""
    return [render_prompt(tokenizer, str(problem) + suffix, prompt_params) for problem in problems]


def trainer_log_rows(log_history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-step trainer logs (:data:`TRAIN_LOG_KEYS`), one dict per step, with ``step``."""
    rows = []
    for entry in log_history:
        if "step" not in entry or not any(key in entry for key in TRAIN_LOG_KEYS):
            continue
        rows.append(
            {"step": int(entry["step"]), **{k: entry[k] for k in TRAIN_LOG_KEYS if k in entry}}
        )
    return rows


def train_run(
    spec: TrainingSpec, train_set: pd.DataFrame, validation_set: pd.DataFrame, *, fingerprint: str
) -> dict[str, Any]:
    """Train one run and write its checkpoints and offline W&B run.

    Args:
        spec: the run (:func:`hed.mini_rl.config.training_specs`).
        train_set: training problems (``problem``, ``answer``).
        validation_set: held-out problems (``problem``, ``answer``).
        fingerprint: the run's training fingerprint, stored in the manifest.

    Returns:
        The run manifest (status ``complete``): see :mod:`hed.mini_rl.manifest`.
    """
    started = time.monotonic()
    threads_before = torch.get_num_threads()
    meter = CoreMeter()
    threads = torch_threads_for(spec.torch_threads)
    torch.set_num_threads(threads)
    budget = ThreadBudget(meter)
    try:
        tokenizer = AutoTokenizer.from_pretrained(spec.base_model_dir, local_files_only=True)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(
            spec.base_model_dir, dtype=torch.float32, local_files_only=True
        )
        eos_ids = eos_ids_of(model, tokenizer)
        prompt_params = dict(spec.prompt_params)
        dataset = Dataset.from_dict(
            {
                "prompt": render_prompts(tokenizer, train_set["problem"].tolist(), prompt_params),
                "answer": [str(a) for a in train_set["answer"]],
            }
        )
        val_prompts = render_prompts(tokenizer, validation_set["problem"].tolist(), prompt_params)
        val_answers = [str(a) for a in validation_set["answer"]]

        with offline_wandb_run(
            spec.wandb_dir,
            project=spec.wandb_project,
            name=spec.run,
            config={
                "hed_fingerprint": fingerprint,
                "save_steps": list(spec.save_steps),
                **dict(spec.trainer_args),
            },
        ) as run:

            def checkpoint(policy: Any, step: int) -> dict[str, Any]:
                # validate the checkpoint as saved (its bf16 values), computed in bf16 where
                # the CPU has native bf16 (2-3x faster there), else in float32
                frozen = checkpoint_copy(policy, tokenizer, eos_ids)
                model_dir = save_actor_hf(frozen, tokenizer, spec.checkpoint_root, step)
                frozen = as_compute_dtype(frozen)
                result: ValidationResult = greedy_validation(
                    frozen,
                    tokenizer,
                    val_prompts,
                    val_answers,
                    eos_token_ids=eos_ids,
                    max_new_tokens=spec.validation_max_new_tokens,
                    batch_size=spec.validation_batch_size,
                    grade=grader(spec.reward),
                )
                del frozen
                run.log({**result.as_wandb(spec.metric_key), STEP_KEY: step})
                logger.info(
                    "Run %s step %d: held-out pass@1 %.3f, mean entropy %.3f nats, %.1f tokens, %s",
                    spec.run,
                    step,
                    result.pass1,
                    result.mean_entropy,
                    result.mean_length,
                    model_dir,
                )
                return {
                    "model_dir": str(model_dir),
                    "pass1": result.pass1,
                    "mean_entropy": result.mean_entropy,
                    "mean_length": result.mean_length,
                    "n_problems": result.n_problems,
                }

            callback = CheckpointCallback(spec.save_steps, checkpoint)
            Path(spec.checkpoint_root).mkdir(parents=True, exist_ok=True)
            # TRL's output_dir: nothing is saved there (save_strategy "no"), removed afterwards
            with tempfile.TemporaryDirectory(
                prefix=".trl_output.", dir=spec.checkpoint_root
            ) as output_dir:
                args = GRPOConfig(
                    output_dir=output_dir, run_name=spec.run, **dict(spec.trainer_args)
                )
                trainer_class, shaping = GRPOTrainer, {}
                if spec.advantage_shaping is not None:  # entropy advantage / GTPO: TRL lacks them
                    from hed.mini_rl.shaped_trainer import ShapedGRPOTrainer

                    trainer_class = ShapedGRPOTrainer
                    shaping = {"shaping": spec.advantage_shaping}
                trainer = trainer_class(
                    **shaping,
                    model=model,
                    reward_funcs=[  # also dumped as verl's rollouts (docs/rollouts.md)
                        RolloutDumper(
                            correctness_reward(spec.reward),
                            Path(spec.checkpoint_root) / ROLLOUT_FOLDER,
                            tokenizer,
                        )
                    ],
                    args=args,
                    train_dataset=dataset,
                    processing_class=tokenizer,
                    callbacks=[callback, ProgressLog(spec.run)]
                    + ([] if spec.torch_threads else [budget]),
                )
                trainer.remove_callback(PrinterCallback)
                trainer.train()
            wandb_run_dir = offline_run_folder(spec.wandb_dir)
    finally:
        torch.set_num_threads(threads_before)

    return {
        "run": spec.run,
        "status": STATUS_COMPLETE,
        "fingerprint": fingerprint,
        "checkpoint_root": spec.checkpoint_root,
        "steps": sorted(callback.checkpoints),
        "checkpoints": {str(step): value for step, value in sorted(callback.checkpoints.items())},
        "wandb_run_dir": str(wandb_run_dir),
        "wandb_metric_key": spec.metric_key,
        "wandb_step_key": STEP_KEY,
        "train_log": trainer_log_rows(trainer.state.log_history),
        "trainer_args": dict(spec.trainer_args),
        **(
            {"advantage_shaping": spec.advantage_shaping.as_dict()}
            if spec.advantage_shaping is not None
            else {}
        ),
        "wall_time_s": round(time.monotonic() - started, 1),
        "torch_threads": spec.torch_threads
        or {"start": threads, "by_step": budget.threads_by_step},
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": {
            "trl": trl.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
    }


def train_or_reuse(
    spec: TrainingSpec, train_set: pd.DataFrame, validation_set: pd.DataFrame
) -> dict[str, Any]:
    """Reuse the run's checkpoints and W&B run when nothing that shapes them changed, else train.

    The initial policy is materialised first when ``spec.embedded``
    (:func:`hed.decode.embedded.ensure_embedded_checkpoint`). The fingerprint covers the training
    parameters, the task sets' content and the initial weights (:meth:`TrainingSpec.fingerprint`).

    Returns:
        The run manifest (also in ``<checkpoint_root>/mini_rl_run.json``), with ``reused``
        true when nothing was trained.

    Raises:
        ConfigError: the checkpoint root holds checkpoints mini_rl did not write.
        CheckpointError: the initial policy's folder is not a HuggingFace model.
    """

    if spec.embedded:
        ensure_embedded_checkpoint(spec.base_model_dir)
    validate_model_dir(spec.base_model_dir)
    fingerprint = spec.fingerprint(
        frame_hash(train_set, validation_set), model_identity(spec.base_model_dir)
    )
    manifest = reusable_manifest(spec, fingerprint)
    if manifest is not None:
        logger.info(
            "Run %s: reusing checkpoints %s in %s (training parameters unchanged)",
            spec.run,
            manifest["steps"],
            spec.checkpoint_root,
        )
        return {**manifest, "reused": True}
    clear_run_outputs(spec)
    write_manifest(
        spec.checkpoint_root,
        {"run": spec.run, "status": STATUS_TRAINING, "fingerprint": fingerprint},
    )
    logger.info(
        "Run %s: training %d steps on CPU, checkpoints at %s",
        spec.run,
        spec.max_steps,
        list(spec.save_steps),
    )
    manifest = train_run(spec, train_set, validation_set, fingerprint=fingerprint)
    write_manifest(spec.checkpoint_root, manifest)
    return {**manifest, "reused": False}
