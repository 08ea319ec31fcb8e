"""Nodes of the metrics pipeline: fetch/read each run's pass@1 sources, combine, select.

``fetch_wandb_history`` and ``read_csv_pass1`` are the pipeline's extract nodes: they read
the external sources named in ``params:metrics`` (the W&B API or an offline run folder, a
user CSV) through :mod:`hed.pass1` (one module per source). Everything after them is pure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pandas as pd

from hed.pass1.config import WANDB_SOURCES, MetricsParams
from hed.pass1.csv_file import read_pass1_csv
from hed.pass1.generated import GENERATED_METRIC, pass1_from_summary
from hed.pass1.selection import PASS1_COLUMNS, select_pass1, to_pass1_rows, warn_missing_steps
from hed.pass1.wandb_source import read_wandb_source

logger = logging.getLogger(__name__)


def fetch_wandb_history(
    metrics_params: MetricsParams | dict[str, Any],
    training_manifest: dict[str, Any] | None = None,
    *,
    run: str,
) -> pd.DataFrame:
    """Fetch the pass@1 history of ``run`` from its ``wandb`` or ``wandb_offline`` source.

    Args:
        metrics_params: ``params:metrics``, parsed (:class:`~hed.pass1.config.MetricsParams`)
            or raw.
        training_manifest: ``mini_rl_manifest`` in the ``mini_dapo`` environment; unused, it
            only orders this node after the training that writes the offline W&B runs.
        run: run name (bound when the pipeline is built).

    Returns:
        ``<run>.metrics_export``: step, pass1, wandb_step, metric_key, step_key, source — every
        step that carries the metric, in logged order (a step logged twice, as a resumed run
        does: its later value), written to ``data/01_raw/metrics/<run>.csv`` so the ``csv``
        source can read it later without network.

    Raises:
        ConfigError: no W&B API key. InputDataError: run or folder not found, metric absent.
    """
    spec = MetricsParams.of(metrics_params).run(run).wandb_source
    history = read_wandb_source(spec, run)
    key = spec.options["metric_key"]
    logger.info("run %s: %d row(s) of %s from %s", run, len(history), key, spec.name)
    return history.assign(source=spec.name)


def read_csv_pass1(metrics_params: MetricsParams | dict[str, Any], *, run: str) -> pd.DataFrame:
    """Read the ``csv`` source of ``run`` (``path``, ``step_column``, ``pass1_column``, ``scale``).

    Returns:
        step, pass1 in file order.

    Raises:
        InputDataError: file missing, a column missing, a non-numeric value.
    """
    options = MetricsParams.of(metrics_params).run(run).source("csv").options
    return read_pass1_csv(
        options["path"],
        step_column=options["step_column"],
        pass1_column=options["pass1_column"],
        scale=options["scale"],
    )


def collect_run_pass1(
    metrics_params: MetricsParams | dict[str, Any],
    wandb_history: pd.DataFrame | None = None,
    csv_pass1: pd.DataFrame | None = None,
    summary_by_step: pd.DataFrame | None = None,
    *,
    run: str,
    checkpoint_steps: Sequence[int],
) -> pd.DataFrame:
    """One row per (step, source) of ``run``; warn about checkpoint steps the figure source lacks.

    Args:
        metrics_params: ``params:metrics``, parsed or raw.
        wandb_history: ``<run>.metrics_export`` when the run has a W&B source.
        csv_pass1: the output of :func:`read_csv_pass1` when the run has a ``csv`` source.
        summary_by_step: when the run has a ``generated`` source.
        run: run name; checkpoint_steps: its checkpoint steps (both bound at build time).

    Returns:
        run, step, pass1, source, metric_key; a step logged twice keeps its last value.
    """
    config = MetricsParams.of(metrics_params).run(run)
    parts = []
    for spec in config.sources:
        if spec.name in WANDB_SOURCES:
            table, key = wandb_history, spec.options["metric_key"]
        elif spec.name == "csv":
            table, key = csv_pass1, spec.options["pass1_column"]
        else:
            table, key = pass1_from_summary(summary_by_step, run), GENERATED_METRIC
        rows = to_pass1_rows(table, run=run, source=spec.name, metric_key=key)
        if spec.name == config.figure_source:
            warn_missing_steps(rows, run=run, source=spec.name, checkpoint_steps=checkpoint_steps)
        parts.append(rows)
    if not parts:
        logger.warning(
            "run %s has no pass@1 source: list one under metrics.runs.%s.sources", run, run
        )
        return pd.DataFrame(columns=PASS1_COLUMNS)
    return pd.concat(parts, ignore_index=True)


def combine_pass1(*run_tables: pd.DataFrame) -> pd.DataFrame:
    """Stack the runs' pass@1 rows into ``pass1`` (run, step, pass1, source, metric_key)."""
    tables = [table for table in run_tables if not table.empty]
    if not tables:
        return pd.DataFrame(columns=PASS1_COLUMNS)
    return pd.concat(tables, ignore_index=True)[PASS1_COLUMNS]


def select_pass1_for_figures(
    pass1: pd.DataFrame,
    metrics_params: MetricsParams | dict[str, Any],
    *,
    checkpoint_steps: dict[str, list[int]],
) -> pd.DataFrame:
    """One pass@1 per (run, step) from each run's ``figure_source``.

    See :func:`hed.pass1.selection.select_pass1` (the same, for use outside the pipeline).

    Returns:
        ``pass1_for_figures``: run, step, pass1 (empty at checkpoint steps without a value),
        pass1_source, has_checkpoint.
    """
    return select_pass1(pass1, MetricsParams.of(metrics_params), checkpoint_steps)
