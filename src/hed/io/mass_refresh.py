"""``kedro hed refresh-mass``: every shard's mass columns brought to the current lexicon by
teacher-forced re-scoring of its own responses (:mod:`hed.decode.mass_refresh`), no re-sampling.

A lexicon change never makes a shard stale: the merge categorises words with the current
lexicon at once. Only ``anthropomorphic_mass`` / ``reasoning_mass`` (summed at generation over
the word-start ids of the lexicon of that time) need the model again; what reads them (hedging
propensity) marks or refuses a step whose records carry another lexicon's. This command writes
a new version of each such shard's token records (the versions before are kept, untouched;
sequences are not rewritten), then runs aggregation and what reads its outputs, so that the
merged records carry the refreshed columns.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hed.config.layout import layout_from_params
from hed.config.params import GenerationParams, lexicon_param
from hed.config.prompt_params import PromptsParams
from hed.errors import ConfigError, InputDataError
from hed.records.shard_checks import records_mass_lexicon
from hed.records.shard_metadata import lexicon_sha256

logger = logging.getLogger(__name__)


def shards_to_refresh(
    catalog: Any, parameters: Mapping[str, Any], unrecorded: bool = True
) -> list[str]:
    """The shard token records whose mass columns are not the current lexicon's.

    Args:
        catalog: the session's catalog (shards are ``<run>.step_<step>.shard_<k>.token_records``).
        parameters: the session's parameters (``runs``, ``generation.num_shards``, the lexicon).
        unrecorded: include shards that record no lexicon (generated before the mass columns
            existed: the refresh gives them the columns).

    Returns:
        Dataset names, in (run, step, shard) order; a shard not yet generated is left out.
    """
    layout = layout_from_params(dict(parameters))
    current = lexicon_sha256(lexicon_param(parameters["aggregation"]))
    names = []
    for run, step in layout.run_steps():
        for shard in range(layout.num_shards):
            name = f"{run.name}.step_{step}.shard_{shard}.token_records"
            if not catalog.exists(name):
                continue
            recorded = records_mass_lexicon(catalog.load(name))
            if recorded != current and (unrecorded or recorded is not None):
                names.append(name)
    return names


def check_mass_lexicon(pipeline: Any, catalog: Any, parameters: Mapping[str, Any]) -> None:
    """Before a strict run that tabulates hedging propensity: refuse when a shard's mass
    columns are another lexicon's, with the command that refreshes them (it also re-runs
    aggregation and what reads it, so nothing else is left to do).

    Checked before the staleness of the merged records: their fix (aggregation) would merge
    the same shards and the hedging node would refuse them inside it.

    Args:
        pipeline: the run's pipeline (its node names).
        catalog: the run's catalog.
        parameters: the run's parameters (``reporting.strict``, the lexicon, the layout).

    Raises:
        InputDataError: ``reporting.strict`` is true, the run tabulates hedging propensity and
            a shard's mass columns were computed with another lexicon.
    """
    from hed.config.params import ReportingParams
    from hed.core.command_line import mass_refresh_command

    if not any(node.name.endswith("tabulate_hedging_propensity") for node in pipeline.nodes):
        return
    if not ReportingParams.of(parameters.get("reporting") or {}).strict:
        return
    stale = shards_to_refresh(catalog, parameters, unrecorded=False)
    if stale:
        more = f" (and {len(stale) - 1} more shard file(s))" if len(stale) > 1 else ""
        raise InputDataError(
            f"{stale[0]}{more}: its anthropomorphic_mass / "
            "reasoning_mass were computed with another lexicon than the current "
            "aggregation.lexicon, and reporting.strict is true (hedging_propensity_by_step "
            "reads them); refresh them without re-sampling with "
            f"`{mass_refresh_command()}` (it then re-runs aggregation and what reads it), "
            "restore the lexicon, or set reporting.strict: false to tabulate them marked"
        )


def refresh_study_mass(catalog: Any, parameters: Mapping[str, Any]) -> list[str]:
    """Refresh every shard of :func:`shards_to_refresh` and save it (a new version).

    Args:
        catalog: the session's catalog (``prompts``, ``checkpoints``, the shards).
        parameters: the session's parameters.

    Returns:
        The dataset names rewritten.

    Raises:
        ConfigError: a shard's (run, step) has no entry in ``checkpoints`` (run generation).
        InputDataError, CheckpointError: as :func:`hed.decode.mass_refresh.refresh_shard`.
    """
    from hed.decode.mass_refresh import refresh_shard

    names = shards_to_refresh(catalog, parameters)
    if not names:
        return []
    lexicon = lexicon_param(parameters["aggregation"])
    rendering = PromptsParams.of(parameters["prompts"]).rendering
    threads = GenerationParams.of(parameters["generation"]).torch_threads
    prompts, checkpoints = catalog.load("prompts"), catalog.load("checkpoints")
    for name in names:
        run, step_part, _ = name.split(".", 2)
        step = step_part.removeprefix("step_")
        entry = (checkpoints.get(run) or {}).get("steps", {}).get(step)
        if entry is None:
            raise ConfigError(
                f"{name}: no checkpoint of run {run!r} step {step} in `checkpoints`; run "
                "generation first (`kedro run --pipelines generation --only-missing-outputs`)"
            )
        records = catalog.load(name).to_table()
        refreshed = refresh_shard(
            records, prompts, entry["model_dir"], rendering, lexicon, torch_threads=threads
        )
        catalog.save(name, refreshed)
        logger.info("%s: mass columns refreshed for the current lexicon", name)
    return names


__all__ = ["check_mass_lexicon", "refresh_study_mass", "shards_to_refresh"]
