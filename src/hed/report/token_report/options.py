"""``reporting.token_report``: the options, the columns the page reads, the responses it shows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hed.core.validators import non_negative_int, positive_int
from hed.errors import ConfigError

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


@dataclass(frozen=True)
class TokenReportOptions:
    """``reporting.token_report`` (parameters_reporting.yml).

    Attributes:
        responses_per_step: responses shown per (run, step), ≥ 1.
        max_tokens_per_response: tokens shown per response, ≥ 1 (the rest is cut, and said so).
        steps: steps to show, or None for every step of every run.
        seed: seed of the shuffle that chooses the responses.
        enabled: draw the report (``false`` leaves the node out of the reporting pipeline).
    """

    responses_per_step: int = 8
    max_tokens_per_response: int = 2000
    steps: tuple[int, ...] | None = None
    seed: int = 0
    enabled: bool = True


def token_report_options(section: Any) -> TokenReportOptions:
    """Parse ``reporting.token_report``.

    Args:
        section: the mapping from parameters_reporting.yml (``None`` = every default).

    Returns:
        The options.

    Raises:
        ConfigError: not a mapping, an unknown key, or a value of the wrong type/range.
    """
    if section is None:
        return TokenReportOptions()
    if not isinstance(section, Mapping):
        raise ConfigError(
            f"reporting.token_report must be a mapping (parameters_reporting.yml), got {section!r}"
        )
    known = {"enabled", "responses_per_step", "max_tokens_per_response", "steps", "seed"}
    unknown = sorted(set(section) - known)
    if unknown:
        raise ConfigError(f"reporting.token_report: unknown key(s) {unknown}; use {sorted(known)}")
    defaults = TokenReportOptions()
    values: dict[str, Any] = {}
    for key in ("responses_per_step", "max_tokens_per_response"):
        values[key] = positive_int(
            section.get(key, getattr(defaults, key)), f"reporting.token_report.{key}"
        )
    enabled = section.get("enabled", defaults.enabled)
    if not isinstance(enabled, bool):
        raise ConfigError(
            f"reporting.token_report.enabled must be true or false (unquoted), got {enabled!r}"
        )
    seed = non_negative_int(section.get("seed", defaults.seed), "reporting.token_report.seed")
    steps = section.get("steps")
    if isinstance(steps, int) and not isinstance(steps, bool):
        steps = [steps]
    if steps is not None and (
        not isinstance(steps, list | tuple)
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in steps)
    ):
        raise ConfigError(
            "reporting.token_report.steps must be null (every step) or a list of "
            f"non-negative integer steps, got {steps!r}"
        )
    return TokenReportOptions(
        steps=None if steps is None else tuple(sorted(set(steps))),
        seed=seed,
        enabled=enabled,
        **values,
    )


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
