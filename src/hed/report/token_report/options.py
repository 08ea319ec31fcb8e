"""``reporting.token_report``: the options of a page of responses (shared with the explorer)."""

from __future__ import annotations

from typing import ClassVar

from hed.config.model import Bool, NonNegativeInt, PositiveInt, Section
from hed.core.validators import Steps


class PageOptions(Section):
    """The options of a page of responses (the token report, the explorer)."""

    enabled: Bool = True
    """Build the page (false leaves its node out of the reporting pipeline)."""
    responses_per_step: PositiveInt = 8
    """(prompt_index, sample_index) shown per (run, step); the same ones at every step."""
    max_tokens_per_response: PositiveInt = 2000
    """Tokens shown per response; the page says how many it cut (measures cover them all)."""
    steps: Steps = None
    """Steps to show; null: every step of every run."""
    seed: NonNegativeInt = 0
    """Seed of the shuffle that chooses the responses."""


class TokenReportOptions(PageOptions):
    """``reporting.token_report``: responses coloured by entropy (docs/token_report.md)."""

    section: ClassVar[str] = "reporting.token_report"


#: ``reporting.token_report`` parsed (``None``: every default); one-line ConfigError otherwise.
token_report_options = TokenReportOptions.of
