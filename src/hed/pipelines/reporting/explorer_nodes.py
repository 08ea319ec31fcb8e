"""The reporting node of the study explorer: ``build_study_explorer`` → ``study_explorer_html``.

docs/explorer.md describes the page and its ``reporting.explorer`` parameters.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pandas as pd

from hed.config.params import ReportingParams
from hed.report import explorer, token_report

logger = logging.getLogger(__name__)


def build_study_explorer(
    reporting: ReportingParams | dict[str, Any],
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
        ConfigError: a malformed ``reporting.explorer`` section, or ``steps`` matching no step.
    """
    options = ReportingParams.of(reporting).explorer
    steps = token_report.step_inputs(run_steps, checkpoints, entropy_thresholds, step_tables)
    data = explorer.build_explorer(steps, options, prompts=prompts, figure2=figure2_table)
    for note in data["index"]["notes"]:
        logger.info("study explorer leaves out: %s", note)
    return explorer.render_explorer(data)
