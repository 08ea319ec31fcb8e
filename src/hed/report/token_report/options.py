"""``reporting.token_report``: the options, the columns the page reads, the responses it shows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import numpy as np

from hed.config.model import Bool, NonNegativeInt, PositiveInt, Section
from hed.core.validators import Steps

FORMAT = "hed.report.token_report/1"
#: Columns of the merged records the page reads (docs/datasets.md; the last three are merged-only).
RECORD_COLUMNS = [
    "prompt_index",
    "sample_index",
    "position",
    "token_id",
    "token_text",
    "entropy",
    "prob",
    "topk_token_ids",
    "topk_probs",
    "is_special",
    "word",
    "category",
    "is_high_entropy",
]
SEQUENCE_COLUMNS = [
    "prompt_index",
    "prompt_id",
    "sample_index",
    "n_tokens",
    "finish_reason",
    "extracted_answer",
    "correct",
]
#: Category codes in the page's data (``cat`` arrays).
CATEGORY_CODES = {"other": 0, "anthropomorphic": 1, "reasoning": 2}
#: Entropies below this (nats) get the lightest colour; the log scale starts here.
ENTROPY_FLOOR = 1e-3
#: Characters of a prompt shown above its responses (the whole prompt is in a fold-out).
PROMPT_PREVIEW_CHARS = 240


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


def choose_keys(keys: Iterable[tuple[int, int]], n: int, seed: int) -> list[tuple[int, int]]:
    """The responses a run shows: ``n`` (prompt_index, sample_index) keys, reproducibly.

    The distinct keys are sorted, shuffled with ``numpy.random.default_rng(seed)`` and the first
    ``n`` kept, then sorted again for display. The same keys are used at every step of a run so
    that a row of the page compares one (prompt, sample) across steps.

    Args:
        keys: (prompt_index, sample_index) pairs, typically the union over the run's steps.
        n: how many to keep (all when there are fewer).
        seed: shuffle seed.

    Returns:
        Sorted list of at most ``n`` keys.
    """
    distinct = sorted({(int(p), int(s)) for p, s in keys})
    if len(distinct) <= n:
        return distinct
    order = np.random.default_rng(seed).permutation(len(distinct))[:n]
    return sorted(distinct[i] for i in order)
