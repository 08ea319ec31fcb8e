"""One row per (run, step) of ``summary_by_step``: sizes, entropy, threshold, category counts.

N, mean_entropy, threshold and n_high_entropy come from the step's ``entropy_thresholds``
row; the high-entropy counts per category are counted in the merged records file (its
``category`` column where ``is_high_entropy``; two columns, about 0.5 s for 20 M records),
so Figure 2's counts are read from the records the step published.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from hed.core.lexicon import Lexicon
from hed.errors import InputDataError
from hed.records.arrow_stream import dataset_source


def step_summary(
    entropy_thresholds: pd.DataFrame,
    sequences: ds.Dataset,
    token_records: ds.Dataset,
    lexicon: Lexicon,
) -> dict[str, Any]:
    """The ``summary_by_step`` row of one step.

    Args:
        entropy_thresholds: ``<run>.step_<step>.entropy_thresholds`` (one row).
        sequences: ``<run>.step_<step>.sequences`` (the merged responses).
        token_records: ``<run>.step_<step>.token_records`` (the merged records).
        lexicon: the categories counted.

    Returns:
        run, step, n_sequences, n_tokens (non-special, = N), mean_response_length (mean
        ``n_tokens`` of the responses, special tokens included), mean_entropy (nats, over N),
        threshold (nats), n_high_entropy, ``n_high_entropy_<category>`` for every lexicon
        category and ``other`` (tokens without letters count as ``other``, so they sum to
        n_high_entropy), pass1_generated (mean of the responses' ``correct`` where not null;
        None when all are).

    Raises:
        InputDataError: the merged file marks another number of high-entropy tokens than
            ``entropy_thresholds`` says (a file of another aggregation: rerun this step).
    """
    threshold = entropy_thresholds.iloc[0]
    responses = sequences.to_table(columns=["n_tokens", "correct"])
    correct = responses.column("correct").drop_null()
    counts = dict.fromkeys(lexicon.categories, 0)
    marked = token_records.to_batches(
        columns=["category"], filter=ds.field("is_high_entropy"), batch_readahead=0
    )
    for batch in marked:
        for item in pc.value_counts(batch.column("category")).to_pylist():
            counts[item["values"]] = counts.get(item["values"], 0) + int(item["counts"])
    if sum(counts.values()) != int(threshold["n_high_entropy"]):
        raise InputDataError(
            f"{dataset_source(token_records)} marks {sum(counts.values())} high-entropy tokens "
            f"but entropy_thresholds of {threshold['run']}.step_{threshold['step']} says "
            f"{threshold['n_high_entropy']}: rerun the aggregation of this step"
        )
    return {
        "run": str(threshold["run"]),
        "step": int(threshold["step"]),
        "n_sequences": responses.num_rows,
        "n_tokens": int(threshold["n_tokens"]),
        "mean_response_length": float(pc.mean(responses.column("n_tokens")).as_py() or 0.0),
        "mean_entropy": float(threshold["mean_entropy"]),
        "threshold": float(threshold["threshold"]),
        "n_high_entropy": int(threshold["n_high_entropy"]),
        **{f"n_high_entropy_{category}": n for category, n in counts.items()},
        "pass1_generated": float(pc.mean(correct.cast(pa.float64())).as_py())
        if len(correct)
        else None,
    }
