"""Shards an ``--only-missing-outputs`` run would reuse, refused when they were made with other
parameters or from a checkpoint that has changed since (called by :class:`hed.hooks.InputHooks`
before the first node)."""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any

from hed.config.prompt_params import PromptsParams
from hed.decode.checkpoints import checkpoint_fingerprint
from hed.errors import CheckpointError, ConfigError
from hed.records.shard_metadata import GENERATION_METADATA_KEY, StaleField, stale_field

#: Dataset names of shard files (docs/datasets.md): ``<run>.step_<step>.shard_<k>.sequences``.
_SHARD_SEQUENCES = re.compile(r"^(?P<step>.+\.step_\d+)\.shard_\d+\.sequences$")


def check_reused_shards(pipeline: Any, catalog: Any) -> int:
    """Refuse an ``--only-missing-outputs`` run that would reuse shards of other parameters.

    ``--only-missing-outputs`` skips every generation node whose shard file exists, whatever
    parameters made it, and then every aggregation node whose outputs exist: after a change
    of ``generation.temperature`` such a run would finish at once and keep the old records.
    Each shard's ``sequences`` file records its generation parameters (``hed.generation``);
    they are compared here with the current ``params:generation`` and ``params:prompts``
    (sampling parameters, dtype, prompt rendering) and with the checkpoint's content
    fingerprint as it is now (:func:`hed.decode.checkpoints.checkpoint_fingerprint`: a step
    retrained
    at the same path), before anything runs.

    Args:
        pipeline: the pipeline about to run.
        catalog: the run's catalog (``params:generation``, ``params:prompts``, the shards).

    Returns:
        The number of existing shard files checked.

    Raises:
        ConfigError: an existing shard is stale; the message names the file, the parameter,
            both values and the two ways out.
    """
    # only where the run writes shards: an aggregation-only run checks them at the merge
    names = sorted(n for n in pipeline.all_outputs() if _SHARD_SEQUENCES.match(n))
    if not names or "params:generation" not in pipeline.datasets():
        return 0
    generation = catalog.load("params:generation") or {}
    prompt_params = (
        PromptsParams.of(catalog.load("params:prompts")).rendering.as_params()
        if "params:prompts" in catalog
        else None
    )
    checked = 0
    fingerprints: dict[str, dict[str, str] | None] = {}
    for name in names:
        dataset = catalog.get(name)
        if dataset is None or not dataset.exists():
            continue
        records = dataset.load()
        files = getattr(records, "files", None) or [name]
        raw = (records.schema.metadata or {}).get(GENERATION_METADATA_KEY)
        checked += 1
        try:
            recorded = json.loads(raw) if raw else None
        except ValueError:
            recorded = None
        stale = recorded and stale_field(
            recorded,
            generation=generation,
            prompt_params=prompt_params,
            checkpoint=_current_checkpoint(recorded, fingerprints),
            prompt_ids=None,
        )
        shards = recorded and recorded.get("num_shards")
        if not stale and shards and shards != generation.get("num_shards", shards):
            stale = StaleField(
                "generation.num_shards",
                str(shards),
                str(generation.get("num_shards")),
                f"set generation.num_shards: {shards}",
            )
        if stale:
            raise ConfigError(
                f"{files[0]}: stale shard: {stale.field} was {stale.recorded} when it was "
                f"generated but is {stale.current} now, and --only-missing-outputs would reuse "
                f"it; delete {_versions_folder(files[0])} and its token_records next to "
                f"it to regenerate this shard only, run without --only-missing-outputs to "
                f"regenerate every shard, or {stale.restore}"
            )
    return checked


def _current_checkpoint(
    recorded: dict[str, Any], fingerprints: dict[str, dict[str, str] | None]
) -> dict[str, str] | None:
    """The content fingerprint of the checkpoint a shard was generated from, as it is now.

    ``--only-missing-outputs`` also skips ``resolve_checkpoints`` (its ``checkpoints`` file
    exists), so a checkpoint retrained in place would go unnoticed: the folder recorded in the
    shard is fingerprinted again here (once per folder). ``None`` when it is gone.
    """
    model_dir = (recorded.get("checkpoint") or {}).get("model_dir")
    if not model_dir:
        return None
    if model_dir not in fingerprints:
        try:
            fingerprints[model_dir] = checkpoint_fingerprint(model_dir)
        except (CheckpointError, OSError):
            fingerprints[model_dir] = None
    return fingerprints[model_dir]


def _versions_folder(path: str) -> str:
    """The folder of all versions of a file: ``<file>/<version>/<file>`` → ``<file>``."""
    file = PurePosixPath(path)
    return str(file.parent.parent) if file.parent.parent.name == file.name else path
