"""``reporting.explorer``: the study explorer's parameters (docs/explorer.md)."""

from __future__ import annotations

from typing import ClassVar, Literal

from hed.config.model import Bool, NonNegativeInt, PositiveInt, Section
from hed.core.advantage import ESTIMATORS
from hed.core.validators import Steps


class ExplorerOptions(Section):
    """``reporting.explorer`` (parameters_reporting.yml)."""

    section: ClassVar[str] = "reporting.explorer"

    enabled: Bool = True
    """Build the page (false leaves the node out of the reporting pipeline)."""
    responses_per_step: PositiveInt = 16
    """(prompt_index, sample_index) keys embedded per (run, step), the same at every step."""
    max_tokens_per_response: PositiveInt = 2000
    """Tokens embedded per response (the rest is cut, and said); measures cover every token."""
    steps: Steps = None
    """Steps to embed; null: every step of every run."""
    seed: NonNegativeInt = 0
    """Seed of the shuffle that chooses the responses."""
    estimator: Literal[ESTIMATORS] = "grpo"  # type: ignore[valid-type]
    """Advantage estimator of a response: grpo | dr_grpo (hed.core.advantage)."""


#: ``reporting.explorer`` parsed (``None``: every default); one-line ConfigError otherwise.
explorer_options = ExplorerOptions.of
