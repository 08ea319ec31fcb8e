"""The reporting node of the study explorer: ``build_study_explorer`` → ``study_explorer_html``.

docs/explorer.md describes the page and its ``reporting.explorer`` parameters.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from hed.config.analysis_params import AnalysesParams
from hed.config.params import AggregationParams, ReportingParams, lexicon_param
from hed.core.command_line import mass_refresh_command
from hed.records.sequence import MASS_COLUMNS
from hed.records.shard_checks import records_mass_lexicon
from hed.records.shard_metadata import lexicon_sha256
from hed.report import explorer, token_report

logger = logging.getLogger(__name__)


def build_study_explorer(  # noqa: PLR0917 - Kedro passes the inputs by position
    reporting: ReportingParams | dict[str, Any],
    aggregation: AggregationParams | dict[str, Any],
    analyses: AnalysesParams | dict[str, Any] | None,
    checkpoints: dict[str, Any],
    entropy_thresholds: pd.DataFrame,
    prompts: pd.DataFrame,
    figure2_table: pd.DataFrame,
    *step_tables: Any,
    run_steps: Sequence[tuple[str, str, int]],
) -> str:
    """The ``study_explorer_html`` page: every run, step and chosen response, explorable.

    Args:
        reporting: ``params:reporting``, parsed (:class:`~hed.config.params.ReportingParams`,
            its ``explorer`` options; docs/explorer.md) or the raw dict.
        aggregation: ``params:aggregation``: a step whose records' mass columns were summed
            over another lexicon shows no ``amass`` / ``rmass`` (one warning naming
            ``kedro hed refresh-mass``), as records without them.
        analyses: ``params:analyses``: with ``advantage_shaping`` set and enabled, a hovered
            token shows its advantage under each of its schemes (computed here, per embedded
            response over its prompt's whole group); null or disabled: no advantages.
        checkpoints: generation's ``checkpoints`` (tokenizer folders naming the alternatives).
        entropy_thresholds: one row per (run, step): ``threshold`` (nats), ``top_entropy_frac``.
        prompts: the ``prompts`` table.
        figure2_table: the Figure 2 table (its rows link to their step's responses).
        *step_tables: per (run, step) of ``run_steps``, its ``sequences`` then its
            ``token_records`` (lazy; only the chosen responses' tokens are read whole).
        run_steps: ``(run, role, step)`` of the tables, bound when the pipeline is built.

    Returns:
        One self-contained HTML document (:func:`hed.report.explorer.render_explorer`).

    Raises:
        ConfigError: a malformed ``reporting.explorer`` or ``analyses`` section, or ``steps``
            matching no step.
    """
    options = ReportingParams.of(reporting).explorer
    current = lexicon_sha256(lexicon_param(aggregation))
    step_tables = tuple(
        table if i % 2 == 0 else _current_mass_only(table, current, run_steps[i // 2][0::2])
        for i, table in enumerate(step_tables)
    )
    steps = token_report.step_inputs(run_steps, checkpoints, entropy_thresholds, step_tables)
    shaping = None if analyses is None else AnalysesParams.of(analyses).advantage_shaping
    data = explorer.build_explorer(
        steps,
        options,
        prompts=prompts,
        figure2=figure2_table,
        shaping=shaping,
    )
    for note in data["index"]["notes"]:
        logger.info("study explorer leaves out: %s", note)
    return explorer.render_explorer(data)


def _current_mass_only(records: Any, current: str, run_step: tuple[str, int]) -> Any:
    """``records`` as they are, or without their mass columns when those were summed over
    another lexicon than ``current`` (the page then leaves those measures out)."""
    recorded = records_mass_lexicon(records)
    if recorded in (None, current):
        return records
    run, step = run_step
    logger.warning(
        "%s.step_%s: the study explorer leaves out anthropomorphic_mass / reasoning_mass: they "
        "were computed with another lexicon than the current aggregation.lexicon; refresh them "
        "without re-sampling with `%s`",
        run,
        step,
        mass_refresh_command(),
    )
    schema = pa.schema([f for f in records.schema if f.name not in MASS_COLUMNS])
    if isinstance(records, pa.Table):
        return records.select(schema.names)
    if hasattr(records, "files"):  # a Parquet dataset: the same files, a narrower schema
        return ds.dataset(
            records.files, schema=schema, format="parquet", filesystem=records.filesystem
        )
    return ds.dataset(records.to_table(columns=schema.names))
