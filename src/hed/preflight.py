"""Checks before the first node of a run: parameters, and shards a run would reuse.

Called by :class:`hed.hooks.ProjectHooks` in ``before_pipeline_run``. A node checks its own
inputs, but at real scale a bad reporting parameter or a stale shard must be caught before
hours of generation, not after.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any

from hed import layout
from hed.errors import ConfigError
from hed.shard_metadata import (
    GENERATION_METADATA_KEY,
    StaleField,
    stale_reused_shard,
)

#: Dataset names of shard files (docs/datasets.md): ``<run>.step_<step>.shard_<k>.sequences``.
_SHARD_SEQUENCES = re.compile(r"^(?P<step>.+\.step_\d+)\.shard_\d+\.sequences$")


def check_reused_shards(pipeline: Any, catalog: Any) -> int:
    """Refuse an ``--only-missing-outputs`` run that would reuse shards of other parameters.

    ``--only-missing-outputs`` skips every generation node whose shard file exists, whatever
    parameters made it, and then every aggregation node whose outputs exist: after a change
    of ``generation.temperature`` such a run would finish at once and keep the old records.
    Each shard's ``sequences`` file records its generation parameters (``hed.generation``);
    they are compared here with the current ``params:generation`` and ``params:prompts``
    (sampling parameters, dtype, prompt rendering) before anything runs.

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
    prompt_params = catalog.load("params:prompts") if "params:prompts" in catalog else None
    checked = 0
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
        stale = recorded and stale_reused_shard(recorded, generation, prompt_params)
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


def _versions_folder(path: str) -> str:
    """The folder of all versions of a file: ``<file>/<version>/<file>`` → ``<file>``."""
    file = PurePosixPath(path)
    return str(file.parent.parent) if file.parent.parent.name == file.name else path


def check_parameters(pipeline: Any, catalog: Any) -> list[str]:
    """Check the parameters every node of the run will read, before the first node runs.

    Nodes check their own parameters, but a bad ``aggregation.top_entropy_frac`` or
    ``reporting.top_n_words`` would otherwise surface only after hours of generation. Checked
    here, for the sections the pipeline reads: ``runs`` (names, roles, steps:
    :func:`hed.layout.layout_from_params`), ``generation`` (sampling parameters, dtype),
    ``aggregation`` (``top_entropy_frac``, the lexicon) and ``reporting`` (section shape,
    ``top_n_words``, ``fig3.steps``). The checks are the nodes' own functions.

    Args:
        pipeline: the pipeline about to run.
        catalog: the run's catalog (holds ``params:<section>``).

    Returns:
        The sections checked, e.g. ``["generation", "aggregation"]``.

    Raises:
        ConfigError: the first invalid value, in the nodes' own one-line wording.
    """
    datasets = pipeline.datasets()
    checked = []
    if "params:runs" in datasets:
        generation = catalog.load("params:generation") if "params:generation" in catalog else {}
        layout.layout_from_params(
            {"runs": catalog.load("params:runs"), "generation": generation or {}}
        )
        checked.append("runs")
    if "params:generation" in datasets:
        from hed.compute_dtype import dtype_name
        from hed.sections import sampling_params_from

        generation = catalog.load("params:generation") or {}
        if not isinstance(generation, dict):
            raise ConfigError(f"parameter `generation` must be a mapping, got {generation!r}")
        sampling_params_from(generation)
        dtype_name(generation.get("dtype"), "cpu")  # the name only: no checkpoint read yet
        checked.append("generation")
    if "params:aggregation" in datasets:
        from hed.lexicon import parse_lexicon
        from hed.sections import parameter_section
        from hed.thresholds import validate_top_entropy_frac

        aggregation = parameter_section(catalog.load("params:aggregation"), "aggregation")
        validate_top_entropy_frac(aggregation.get("top_entropy_frac", 0.2))
        parse_lexicon(aggregation.get("lexicon"))
        checked.append("aggregation")
    if "params:reporting" in datasets:
        from hed.sections import fig3_steps_param, reporting_section, top_n_words_param

        reporting = reporting_section(catalog.load("params:reporting"))
        top_n_words_param(reporting)
        fig3_steps_param(reporting)
        checked.append("reporting")
    return checked
