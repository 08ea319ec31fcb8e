"""The run manifest: what a mini-RL training run wrote, and whether a later run can reuse it.

Each trained run keeps ``<checkpoint_root>/mini_rl_run.json``. It is written with
``"status": "training"`` before the first checkpoint and rewritten with ``"status":
"complete"`` after the last one, holding the training fingerprint (a hash of every parameter
that shapes the weights, see :meth:`hed.mini_rl.config.TrainingSpec.fingerprint`), the
checkpoint folders with their greedy validation, the W&B offline run folder and the trainer's
per-step log. A run is reused when its manifest is complete, its fingerprint matches, every
checkpoint folder passes :func:`hed.decode.checkpoints.validate_model_dir` and its W&B log exists;
otherwise it is trained again from scratch.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from hed.decode.checkpoints import discover_steps, model_dir_for_step
from hed.errors import CheckpointError, ConfigError, InputDataError
from hed.mini_rl.config import TrainingSpec
from hed.mini_rl.export import step_dir
from hed.pass1.wandb_offline import find_offline_run_file
from hed.records.atomic_io import atomic_path

logger = logging.getLogger(__name__)

RUN_MANIFEST = "mini_rl_run.json"
STATUS_TRAINING = "training"
STATUS_COMPLETE = "complete"


def manifest_path(checkpoint_root: str | os.PathLike) -> Path:
    """``<checkpoint_root>/mini_rl_run.json``."""
    return Path(checkpoint_root) / RUN_MANIFEST


def read_manifest(checkpoint_root: str | os.PathLike) -> dict[str, Any] | None:
    """The run manifest, or None when there is none (or it is unreadable)."""
    path = manifest_path(checkpoint_root)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("%s is unreadable (%s); the run will be trained again", path, exc)
        return None


def write_manifest(checkpoint_root: str | os.PathLike, manifest: dict[str, Any]) -> Path:
    """Write the run manifest atomically (temporary file, then rename)."""
    path = manifest_path(checkpoint_root)
    with atomic_path(path) as temp:
        temp.write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
    return path


def reusable_manifest(spec: TrainingSpec, fingerprint: str) -> dict[str, Any] | None:
    """The complete manifest of ``spec``'s run when its outputs can be reused as they are.

    Returns:
        The manifest, or None (with the reason logged) when the run must be trained.
    """
    manifest = read_manifest(spec.checkpoint_root)
    if manifest is None:
        return None
    if manifest.get("status") != STATUS_COMPLETE:
        logger.info("Run %s: the previous training did not finish; training again", spec.run)
        return None
    if manifest.get("fingerprint") != fingerprint:
        logger.info(
            "Run %s: training parameters changed since its checkpoints were written; retraining",
            spec.run,
        )
        return None
    try:
        for step in spec.save_steps:
            model_dir_for_step(spec.checkpoint_root, step)
        find_offline_run_file(manifest["wandb_run_dir"])
    except (CheckpointError, InputDataError, KeyError) as exc:
        logger.info("Run %s: %s; training again", spec.run, exc)
        return None
    return manifest


def clear_run_outputs(spec: TrainingSpec) -> None:
    """Remove what an earlier training of ``spec``'s run wrote, before training it again.

    Deletes the ``global_step_<N>`` folders under ``checkpoint_root``, the run manifest and
    the run's W&B folder (``<wandb_dir>/wandb``).

    Raises:
        ConfigError: ``checkpoint_root`` holds ``global_step_<N>`` folders but no mini-RL
            manifest: they were not written by mini_rl and are never deleted.
    """
    root = Path(spec.checkpoint_root)
    try:
        steps = discover_steps(root)
    except CheckpointError:
        steps = []
    if steps and read_manifest(root) is None:
        raise ConfigError(
            f"{root} holds checkpoints (steps {steps}) that mini_rl did not write "
            f"(no {RUN_MANIFEST}); point runs.{spec.run}.checkpoint_root at an empty folder "
            "or delete them"
        )
    for step in steps:
        shutil.rmtree(step_dir(root, step))
    manifest_path(root).unlink(missing_ok=True)
    shutil.rmtree(Path(spec.wandb_dir) / "wandb", ignore_errors=True)
