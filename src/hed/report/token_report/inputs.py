"""What the token report reads: one step's inputs, the chosen responses' rows, token texts.

Only the chosen responses' rows are read from the merged records (:func:`read_response_table`:
a pyarrow filter on prompt_index, sample_index, position). Texts of the top-k alternatives come
from the step checkpoint's tokenizer, else from the records' own ``token_text``
(:func:`vocabulary_texts`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from hed.decode.loading import load_tokenizer as checkpoint_tokenizer
from hed.errors import CheckpointError

logger = logging.getLogger(__name__)


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


def read_response_table(
    records: ds.Dataset,
    keys: Sequence[tuple[int, int]],
    max_tokens: int,
    columns: Sequence[str] = RECORD_COLUMNS,
) -> pa.Table:
    """The merged records of the responses ``keys``, their first ``max_tokens`` positions only.

    Memory-bounded: a pyarrow filter (prompt_index in the keys' prompts, sample_index in their
    samples, position < ``max_tokens``) skips row groups by their statistics and keeps only
    matching rows; the exact (prompt_index, sample_index) pairs are then selected.

    Args:
        records: one step's merged token records (lazy, ``ArrowParquetDataset.load()``).
        keys: (prompt_index, sample_index) pairs.
        max_tokens: positions kept per response.
        columns: record columns to read (must hold prompt_index, sample_index, position).

    Returns:
        An Arrow table of ``columns`` (default :data:`RECORD_COLUMNS`), sorted by
        (prompt_index, sample_index, position).
    """
    prompts = sorted({int(p) for p, _ in keys})
    samples = sorted({int(s) for _, s in keys})
    expr = (
        pc.field("prompt_index").isin(pa.array(prompts, pa.int32()))
        & pc.field("sample_index").isin(pa.array(samples, pa.int16()))
        & (pc.field("position") < max_tokens)
    )
    table = records.to_table(columns=list(columns), filter=expr)
    pair = np.asarray(table["prompt_index"]).astype(np.int64) << 16 | np.asarray(
        table["sample_index"]
    ).astype(np.int64)
    wanted = np.array([int(p) << 16 | int(s) for p, s in keys], dtype=np.int64)
    table = table.filter(pa.array(np.isin(pair, wanted)))
    return table.sort_by(
        [("prompt_index", "ascending"), ("sample_index", "ascending"), ("position", "ascending")]
    )


def read_response_records(
    records: ds.Dataset, keys: Sequence[tuple[int, int]], max_tokens: int
) -> pd.DataFrame:
    """:func:`read_response_table` as a pandas DataFrame (notebooks)."""
    return read_response_table(records, keys, max_tokens).to_pandas()


def load_tokenizer(model_dir: str | Path | None) -> Any | None:
    """The tokenizer saved in ``model_dir`` (:func:`hed.decode.loading.load_tokenizer`, local
    files only), or None when it cannot load: the page then names alternatives from the
    records' own texts."""
    if not model_dir or not Path(model_dir).is_dir():
        return None
    try:
        return checkpoint_tokenizer(str(model_dir))
    except CheckpointError as exc:  # fall back to the records' own texts
        logger.warning("token report: no tokenizer in %s (%s)", model_dir, exc)
        return None


def vocabulary_texts(
    token_ids: Iterable[int], tokenizer: Any | None, known: Mapping[int, str]
) -> dict[int, str]:
    """Text of each token id, for the tooltip's alternatives.

    Args:
        token_ids: ids to name (sampled tokens and top-k alternatives).
        tokenizer: a transformers tokenizer, or None.
        known: ``{token_id: token_text}`` from the records (used without a tokenizer).

    Returns:
        ``{id: text}``: ``tokenizer.decode([id])`` (special tokens kept, no clean-up; a lone
        byte of a multi-byte character decodes to U+FFFD), else the recorded text, else
        ``#<id>``.
    """
    ids = sorted({int(i) for i in token_ids})
    if tokenizer is not None:
        from hed.core.token_text import DECODE_KWARGS

        texts = tokenizer.batch_decode([[i] for i in ids], **DECODE_KWARGS)
        return dict(zip(ids, texts, strict=True))
    return {i: known.get(i, f"#{i}") for i in ids}


@dataclass
class StepInput:
    """What the report reads for one (run, step).

    Attributes:
        run, role, step: identify the step.
        sequences: the step's merged responses (docs/datasets.md), a DataFrame or lazy dataset.
        records: the step's merged token records (lazy dataset or table).
        model_dir: checkpoint folder whose tokenizer names the alternatives (None: no tokenizer).
        threshold: the step's high-entropy threshold in nats (None: unknown).
        top_entropy_frac: ρ of the step (None: unknown).
    """

    run: str
    role: str
    step: int
    sequences: Any
    records: Any
    model_dir: str | None = None
    threshold: float | None = None
    top_entropy_frac: float | None = None


def as_frame(data: Any, columns: Sequence[str]) -> pd.DataFrame:
    if isinstance(data, pd.DataFrame):
        return data[[c for c in columns if c in data.columns]].copy()
    if isinstance(data, ds.Dataset):
        have = set(data.schema.names)
        return data.to_table(columns=[c for c in columns if c in have]).to_pandas()
    if isinstance(data, pa.Table):
        return data.select([c for c in columns if c in data.column_names]).to_pandas()
    raise TypeError(f"expected a DataFrame, pyarrow Table or Dataset, got {type(data).__name__}")


def as_dataset(data: Any) -> ds.Dataset:
    if isinstance(data, ds.Dataset):
        return data
    if isinstance(data, pd.DataFrame):
        data = pa.Table.from_pandas(data, preserve_index=False)
    return ds.dataset(data)


def step_inputs(
    run_steps: Sequence[tuple[str, str, int]],
    checkpoints: Mapping[str, Any],
    entropy_thresholds: pd.DataFrame,
    step_tables: Sequence[Any],
) -> list[StepInput]:
    """One :class:`StepInput` per (run, role, step) of ``run_steps``.

    Args:
        run_steps: ``(run, role, step)`` in the order of ``step_tables``.
        checkpoints: generation's ``checkpoints`` (each step's ``model_dir``: its tokenizer).
        entropy_thresholds: one row per (run, step) with ``threshold`` (nats) and
            ``top_entropy_frac``; a step without a row gets None for both.
        step_tables: per (run, step), its ``sequences`` then its ``token_records``.
    """
    thresholds = {
        (str(r["run"]), int(r["step"])): r for r in entropy_thresholds.to_dict(orient="records")
    }
    steps = []
    for i, (run, role, step) in enumerate(run_steps):
        row = thresholds.get((run, int(step)), {})
        model = ((checkpoints.get(run) or {}).get("steps") or {}).get(str(step)) or {}
        steps.append(
            StepInput(
                run=run,
                role=role,
                step=int(step),
                sequences=step_tables[2 * i],
                records=step_tables[2 * i + 1],
                model_dir=model.get("model_dir"),
                threshold=row.get("threshold"),
                top_entropy_frac=row.get("top_entropy_frac"),
            )
        )
    return steps
