"""Entropy of a step's correct and incorrect responses, streamed from the merged records.

For each value of ``correct`` (True, False) over the step's graded responses:

* n_responses, and n_tokens = their non-special tokens;
* mean_entropy = Σ entropy / n_tokens (nats, float64 sums of the float32 records);
* high_entropy_share = n_high_entropy / n_tokens, where a token is high-entropy when it is
  in the *step's* top-ρ set (``is_high_entropy`` of the merged records: one threshold for
  the whole step, so both groups are measured against the same line);
* anthropomorphic_per_1k_tokens = 1000 · n_high_entropy_anthropomorphic / n_tokens, the
  high-entropy tokens whose category is ``anthropomorphic``, per thousand tokens (a rate:
  it does not grow with response length as a raw count does).

Responses with a null ``correct`` (no reference answer) are not in either group.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.dataset as ds

from hed.analysis.covariance import BATCH_RECORDS
from hed.errors import InputDataError
from hed.records.arrow_stream import row_group_batches
from hed.records.response_index import ResponseIndex

#: The category whose high-entropy tokens are counted per 1k tokens.
ANTHROPOMORPHIC = "anthropomorphic"
_COLUMNS = ["prompt_index", "sample_index", "is_special", "entropy", "is_high_entropy", "category"]


def entropy_by_correctness(
    token_records: ds.Dataset,
    index: ResponseIndex,
    correct: np.ndarray,
    batch_records: int = BATCH_RECORDS,
) -> tuple[list[dict[str, Any]], int]:
    """Per-correctness entropy statistics of one step (one streaming pass).

    Args:
        token_records: the step's merged records (prompt_index, sample_index, is_special,
            entropy, is_high_entropy, category are read).
        index: the step's responses.
        correct: (n_responses,) float64: 1.0 correct, 0.0 incorrect, NaN ungraded, in the
            order of ``index``.
        batch_records: records per batch read.

    Returns:
        (rows, n_tokens_all): rows for correct = True then False, each with correct,
        n_responses, n_tokens, mean_entropy, high_entropy_share, n_high_entropy,
        n_high_entropy_anthropomorphic, anthropomorphic_per_1k_tokens (NaN rates for a group
        without tokens); n_tokens_all counts the non-special tokens of every response,
        graded or not (the step's N).

    Raises:
        InputDataError: a column is missing or a record belongs to no response.
    """
    missing = [c for c in _COLUMNS if c not in token_records.schema.names]
    source = str((getattr(token_records, "files", None) or ["token records"])[0])
    if missing:
        raise InputDataError(
            f"{source} lacks column(s) {', '.join(missing)}: rerun the aggregation of this step"
        )
    group = np.where(np.isnan(correct), 2, np.where(correct == 1.0, 0, 1)).astype(np.int64)
    # groups 0 = correct, 1 = incorrect, 2 = ungraded
    tokens, high, anthropomorphic = (np.zeros(3, np.int64) for _ in range(3))
    entropy = np.zeros(3)
    for batch in row_group_batches(token_records, _COLUMNS, batch_records):
        keep = ~batch.column("is_special").to_numpy(zero_copy_only=False)
        prompt = batch.column("prompt_index").to_numpy()[keep]
        sample = batch.column("sample_index").to_numpy()[keep]
        g = group[index.rows(prompt, sample, source)]
        is_high = batch.column("is_high_entropy").to_numpy(zero_copy_only=False)[keep]
        is_anthro = pc.equal(batch.column("category"), ANTHROPOMORPHIC)
        is_anthro = is_anthro.to_numpy(zero_copy_only=False)[keep] & is_high
        tokens += np.bincount(g, minlength=3)
        values = batch.column("entropy").to_numpy().astype(np.float64)[keep]
        entropy += np.bincount(g, weights=values, minlength=3)
        high += np.bincount(g[is_high], minlength=3)
        anthropomorphic += np.bincount(g[is_anthro], minlength=3)
    responses = np.bincount(group, minlength=3)
    rows = []
    for g, value in ((0, True), (1, False)):
        n = int(tokens[g])
        rows.append(
            {
                "correct": value,
                "n_responses": int(responses[g]),
                "n_tokens": n,
                "mean_entropy": float(entropy[g] / n) if n else math.nan,
                "high_entropy_share": float(high[g] / n) if n else math.nan,
                "n_high_entropy": int(high[g]),
                "n_high_entropy_anthropomorphic": int(anthropomorphic[g]),
                "anthropomorphic_per_1k_tokens": 1000.0 * anthropomorphic[g] / n if n else math.nan,
            }
        )
    return rows, int(tokens.sum())


def correctness_values(sequences: pd.DataFrame) -> np.ndarray:
    """(n,) float64 of ``sequences["correct"]``: 1.0, 0.0, NaN where null."""
    correct = sequences["correct"]
    values = np.full(len(correct), np.nan)
    graded = correct.notna().to_numpy()
    values[graded] = correct[graded].astype(bool).to_numpy(dtype=np.float64)
    return values
