"""Hedging propensity per (run, step): the exact word-start mass next to the sampled share.

QAE's Figure 2 (arXiv 2509.22611) counts the anthropomorphic words ("wait", "perhaps", "hmm")
that were *sampled* at high-entropy positions; that count is a noisy estimate of how strongly
the model leans towards hedging. The token records carry the exact quantity the samples
estimate: per position, the probability under softmax(z / T) of starting a word of each lexicon
category, ``<category>_mass`` = Σ_{i ∈ S_c} p_i over the category's word-start token ids S_c
(:mod:`hed.core.propensity`). The mass is an **upper bound** of the probability of starting such
a word: a word-start token such as ``" per"`` also begins words outside the lexicon
("percent"), so the mass counts those too.

Per (run, step), over the step's non-special tokens (merged token records):

* ``mean_anthropomorphic_mass``, ``mean_reasoning_mass``: mean over all positions;
* ``mean_anthropomorphic_mass_high_entropy``, ``mean_reasoning_mass_high_entropy``: mean over
  the high-entropy positions (``is_high_entropy``);
* ``sampled_anthropomorphic_share_high_entropy``, ``sampled_reasoning_share_high_entropy``: the
  share of high-entropy tokens whose word is of the category (what Figure 2 counts, divided by
  the number of high-entropy tokens); ``sampled_anthropomorphic_share``: the same over all
  positions.

Sampled shares count every token of a word (a word of two tokens counts twice); the mass is the
probability at one position of *starting* a word. Both are probabilities in [0, 1].

Words and categories are post-hoc: the sampled shares always follow the current lexicon (the
merge assigns categories), but the mass columns were summed at generation over the word-start
ids of the lexicon of that time, whose digest the merged records carry
(:func:`hed.records.shard_checks.records_mass_lexicon`). When it is not the current lexicon's,
the step is refused (``reporting.strict``) or marked: ``mass_lexicon_current`` false, the mass
means empty, one warning with the ways to bring them back.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.dataset as ds

from hed.core.command_line import mass_refresh_command
from hed.errors import InputDataError
from hed.records.arrow_stream import row_group_batches
from hed.records.sequence import MASS_COLUMNS
from hed.records.shard_checks import records_mass_lexicon

logger = logging.getLogger(__name__)

#: The columns of ``hedging_propensity_by_step`` (docs/datasets.md), in order.
PROPENSITY_COLUMNS = [
    "run",
    "step",
    "n_tokens",
    "n_high_entropy",
    "mass_recorded",
    "mass_lexicon_current",
    "mean_anthropomorphic_mass",
    "mean_reasoning_mass",
    "mean_anthropomorphic_mass_high_entropy",
    "mean_reasoning_mass_high_entropy",
    "sampled_anthropomorphic_share",
    "sampled_anthropomorphic_share_high_entropy",
    "sampled_reasoning_share_high_entropy",
]

_READ = ["is_special", "is_high_entropy", "category", *MASS_COLUMNS]
_BATCH = 262_144


def needs_regeneration_message(run: str, step: int) -> str:
    """The one line logged for a step whose records lack the mass columns."""
    return (
        f"{run}.step_{step}: its token records have no anthropomorphic_mass / reasoning_mass "
        "(generated before HED recorded them): hedging_propensity_by_step leaves the mass "
        f"columns empty; `{mass_refresh_command()}` adds them without re-sampling"
    )


def other_lexicon_message(run: str, step: int, recorded: str, current: str, strict: bool) -> str:
    """The line of a step whose mass columns were computed with another lexicon."""
    then = "was computed with another lexicon" if recorded != "mixed" else "mixes lexicons"
    what = (
        "refused (reporting.strict is true)"
        if strict
        else "hedging_propensity_by_step leaves its mass means empty (mass_lexicon_current false)"
    )
    return (
        f"{run}.step_{step}: the anthropomorphic_mass / reasoning_mass of its token records "
        f"{then} (sha256 {recorded[:12]}, the current aggregation.lexicon is sha256 "
        f"{current[:12]}): {what}; the sampled shares follow the current lexicon. Refresh the "
        f"mass columns without re-sampling (teacher-forced) with `{mass_refresh_command()}`, "
        "or restore the lexicon the shards were generated with"
    )


def step_hedging_propensity(
    records: ds.Dataset,
    run: str,
    step: int,
    lexicon_sha256: str | None = None,
    strict: bool = False,
) -> dict[str, Any]:
    """One row of ``hedging_propensity_by_step`` from a step's merged token records.

    Streams the records one row group at a time (memory: two row groups of six columns).
    Sums are accumulated in float64.

    Args:
        records: ``<run>.step_<step>.token_records`` (MERGED_TOKEN_RECORD_SCHEMA; files merged
            before the mass columns existed lack them or hold nulls).
        run, step: the step.
        lexicon_sha256: the current lexicon's digest
            (:func:`hed.records.shard_metadata.lexicon_sha256`); None: not compared.
        strict: refuse a step whose mass columns were computed with another lexicon.

    Returns:
        {column: value} for :data:`PROPENSITY_COLUMNS`; the mass means are NaN (and
        ``mass_recorded`` False) when any non-special record has no mass, with one warning
        (:func:`needs_regeneration_message`); NaN too (``mass_lexicon_current`` False, one
        warning: :func:`other_lexicon_message`) when the records' mass columns were computed
        with another lexicon; a share or mean over no tokens is NaN.

    Raises:
        InputDataError: ``strict`` and the mass columns were computed with another lexicon.
    """
    recorded_lexicon = records_mass_lexicon(records)
    current = lexicon_sha256 is None or recorded_lexicon in (None, lexicon_sha256)
    if not current:
        message = other_lexicon_message(run, step, recorded_lexicon, lexicon_sha256, strict)
        if strict:
            raise InputDataError(message)
        logger.warning(message)
    present = [c for c in _READ if c in records.schema.names]
    n = n_high = 0
    anthropomorphic = anthropomorphic_high = reasoning_high = 0
    mass = dict.fromkeys(MASS_COLUMNS, 0.0)
    mass_high = dict.fromkeys(MASS_COLUMNS, 0.0)
    recorded = all(c in present for c in MASS_COLUMNS)
    for batch in row_group_batches(records, present, _BATCH):
        keep = ~batch.column("is_special").to_numpy(zero_copy_only=False)
        high = batch.column("is_high_entropy").to_numpy(zero_copy_only=False)[keep]
        category = batch.column("category").to_numpy(zero_copy_only=False)[keep]
        n += int(keep.sum())
        n_high += int(high.sum())
        is_anthropomorphic = category == "anthropomorphic"
        anthropomorphic += int(is_anthropomorphic.sum())
        anthropomorphic_high += int((is_anthropomorphic & high).sum())
        reasoning_high += int(((category == "reasoning") & high).sum())
        for name in MASS_COLUMNS if recorded else ():
            column = batch.column(name)
            values = column.to_numpy(zero_copy_only=False)[keep].astype(np.float64)
            if np.isnan(values).any():  # nulls read as NaN: a shard without the columns
                recorded = False
                break
            mass[name] += float(values.sum())
            mass_high[name] += float(values[high].sum())
    if not recorded:
        logger.warning(needs_regeneration_message(run, step))

    def ratio(total: float, count: int, valid: bool = True) -> float:
        return total / count if count and valid else float("nan")

    mass_valid = recorded and current

    return {
        "run": run,
        "step": step,
        "n_tokens": n,
        "n_high_entropy": n_high,
        "mass_recorded": recorded,
        "mass_lexicon_current": current,
        "mean_anthropomorphic_mass": ratio(mass["anthropomorphic_mass"], n, mass_valid),
        "mean_reasoning_mass": ratio(mass["reasoning_mass"], n, mass_valid),
        "mean_anthropomorphic_mass_high_entropy": ratio(
            mass_high["anthropomorphic_mass"], n_high, mass_valid
        ),
        "mean_reasoning_mass_high_entropy": ratio(mass_high["reasoning_mass"], n_high, mass_valid),
        "sampled_anthropomorphic_share": ratio(anthropomorphic, n),
        "sampled_anthropomorphic_share_high_entropy": ratio(anthropomorphic_high, n_high),
        "sampled_reasoning_share_high_entropy": ratio(reasoning_high, n_high),
    }


def hedging_propensity_by_step(
    records: list[ds.Dataset],
    run_steps: list[tuple[str, int]],
    lexicon_sha256: str | None = None,
    strict: bool = False,
) -> pd.DataFrame:
    """``hedging_propensity_by_step``: :func:`step_hedging_propensity` of every (run, step).

    Returns:
        One row per (run, step) in the given order, columns :data:`PROPENSITY_COLUMNS`.

    Raises:
        InputDataError: ``strict`` and a step's mass columns were computed with another lexicon.
    """
    rows = [
        step_hedging_propensity(data, run, step, lexicon_sha256, strict)
        for data, (run, step) in zip(records, run_steps, strict=True)
    ]
    return pd.DataFrame(rows, columns=PROPENSITY_COLUMNS)


__all__ = [
    "PROPENSITY_COLUMNS",
    "hedging_propensity_by_step",
    "needs_regeneration_message",
    "other_lexicon_message",
    "step_hedging_propensity",
]
