"""``reporting.explorer``: the study explorer's parameters (docs/explorer.md)."""

from __future__ import annotations

from typing import ClassVar, Literal

from hed.config.model import PositiveInt
from hed.core.advantage import ESTIMATORS
from hed.report.token_report.options import PageOptions


class ExplorerOptions(PageOptions):
    """``reporting.explorer``: sort, filter, compare every step's responses (docs/explorer.md)."""

    section: ClassVar[str] = "reporting.explorer"

    responses_per_step: PositiveInt = 16
    """(prompt_index, sample_index) embedded per (run, step); the same ones at every step."""
    estimator: Literal[ESTIMATORS] = "grpo"  # type: ignore[valid-type]
    """Advantage estimator of a response: grpo | dr_grpo (hed.core.advantage)."""


#: ``reporting.explorer`` parsed (``None``: every default); one-line ConfigError otherwise.
explorer_options = ExplorerOptions.of
