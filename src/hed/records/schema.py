"""Arrow schemas of HED's record tables (docs/datasets.md).

Column names and types here are part of the user contract: notebooks and downstream
scripts read them by name. Change them only together with ``docs/datasets.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from hed.records.sequence import MASS_COLUMNS

#: One row per generated token of one shard (docs/datasets.md). Units: ``entropy`` in nats,
#: ``logprob`` natural log, ``prob``/``topk_probs`` probabilities, all of softmax(z / T);
#: ``anthropomorphic_mass`` / ``reasoning_mass`` probabilities (the lexicon's word-start mass,
#: :mod:`hed.core.propensity`), null or absent in shards generated before they existed.
TOKEN_RECORD_SCHEMA = pa.schema(
    [
        pa.field("run", pa.dictionary(pa.int32(), pa.string())),
        pa.field("step", pa.int32()),
        pa.field("shard", pa.int16()),
        pa.field("prompt_index", pa.int32()),
        pa.field("sample_index", pa.int16()),
        pa.field("position", pa.int32()),
        pa.field("token_id", pa.int32()),
        pa.field("token_text", pa.string()),
        pa.field("entropy", pa.float32()),
        pa.field("logprob", pa.float32()),
        pa.field("prob", pa.float32()),
        pa.field("topk_token_ids", pa.list_(pa.int32())),
        pa.field("topk_probs", pa.list_(pa.float32())),
        pa.field("is_special", pa.bool_()),
        *(pa.field(name, pa.float32()) for name in MASS_COLUMNS),
    ]
)

#: Token record columns an older shard may lack (read as null; :data:`MASS_COLUMNS`).
OPTIONAL_RECORD_COLUMNS = MASS_COLUMNS

#: Columns that merged (per-step) records add to :data:`TOKEN_RECORD_SCHEMA`.
MERGED_EXTRA_FIELDS = [
    pa.field("word", pa.string()),
    pa.field("category", pa.string()),
    pa.field("is_high_entropy", pa.bool_()),
]

#: Merged records of one (run, step): the raw columns plus word, category, is_high_entropy.
MERGED_TOKEN_RECORD_SCHEMA = pa.schema(list(TOKEN_RECORD_SCHEMA) + MERGED_EXTRA_FIELDS)

#: One row per response (docs/datasets.md).
SEQUENCE_SCHEMA = pa.schema(
    [
        pa.field("run", pa.string()),
        pa.field("step", pa.int32()),
        pa.field("shard", pa.int16()),
        pa.field("prompt_index", pa.int32()),
        pa.field("prompt_id", pa.string()),
        pa.field("sample_index", pa.int16()),
        pa.field("response_text", pa.string()),
        pa.field("n_tokens", pa.int32()),
        pa.field("finish_reason", pa.string()),
        pa.field("extracted_answer", pa.string()),
        pa.field("correct", pa.bool_()),
    ]
)

#: Key columns that identify a token record; the documented tie-break order (docs/aggregation.md).
RECORD_KEY = ("prompt_index", "sample_index", "position")

#: One row per high-entropy token of a step (``high_entropy_positions``): the merged record's
#: key, token, word, category, entropy (nats), logprob, prob and top-k candidates.
HIGH_ENTROPY_POSITION_SCHEMA = pa.schema(
    [
        pa.field("run", pa.string()),
        pa.field("step", pa.int32()),
        pa.field("prompt_index", pa.int32()),
        pa.field("sample_index", pa.int16()),
        pa.field("position", pa.int32()),
        pa.field("token_id", pa.int32()),
        pa.field("token_text", pa.string()),
        pa.field("word", pa.string()),
        pa.field("category", pa.string()),
        pa.field("entropy", pa.float32()),
        pa.field("logprob", pa.float32()),
        pa.field("prob", pa.float32()),
        pa.field("topk_token_ids", pa.list_(pa.int32())),
        pa.field("topk_probs", pa.list_(pa.float32())),
    ]
)

#: The responses a run's checkpoints re-score (``<run>.reference_responses``, docs/rescoring.md):
#: one row per response. ``response_token_ids`` / ``is_special`` are null for a user's file
#: (the re-scoring node tokenizes ``response_text``); ``prompt`` is the user message.
REFERENCE_RESPONSE_SCHEMA = pa.schema(
    [
        pa.field("prompt_index", pa.int32()),
        pa.field("sample_index", pa.int16()),
        pa.field("prompt", pa.string()),
        pa.field("response_text", pa.string()),
        pa.field("response_token_ids", pa.list_(pa.int32())),
        pa.field("is_special", pa.list_(pa.bool_())),
    ]
)

#: Teacher-forced scores of a run's reference responses by one checkpoint
#: (``<run>.step_<step>.shard_<k>.rescored_records``, docs/rescoring.md). Units as in
#: :data:`TOKEN_RECORD_SCHEMA`; ``rank`` = vocabulary entries strictly more probable than the
#: response token (0 = most probable).
RESCORED_RECORD_SCHEMA = pa.schema(
    [
        pa.field("run", pa.dictionary(pa.int32(), pa.string())),
        pa.field("step", pa.int32()),
        pa.field("shard", pa.int16()),
        pa.field("prompt_index", pa.int32()),
        pa.field("sample_index", pa.int16()),
        pa.field("position", pa.int32()),
        pa.field("token_id", pa.int32()),
        pa.field("entropy", pa.float32()),
        pa.field("logprob", pa.float32()),
        pa.field("rank", pa.int32()),
        pa.field("topk_token_ids", pa.list_(pa.int32())),
        pa.field("topk_probs", pa.list_(pa.float32())),
        pa.field("is_special", pa.bool_()),
    ]
)


def record_key_columns(run: str, step: int, shard: int, items: Sequence[Any]) -> dict[str, Any]:
    """The key columns of a shard's token records: one row per token of every sequence.

    Args:
        run, step, shard: the shard's keys (the same on every row).
        items: sequences with ``prompt_index``, ``sample_index`` and ``token_ids`` (length m_i).

    Returns:
        ``run`` (dictionary<int32, string>), ``step`` (int32), ``shard`` (int16),
        ``prompt_index`` (int32), ``sample_index`` (int16), ``position`` (int32, 0 … m_i − 1),
        each of length Σ m_i, in the order of ``items``.
    """
    lengths = np.array([len(s.token_ids) for s in items], dtype=np.int64)
    n = int(lengths.sum())
    return {
        "run": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([run])),
        "step": pa.array(np.full(n, step, np.int32)),
        "shard": pa.array(np.full(n, shard, np.int16)),
        "prompt_index": pa.array(
            np.repeat([s.prompt_index for s in items], lengths).astype(np.int32)
        ),
        "sample_index": pa.array(
            np.repeat([s.sample_index for s in items], lengths).astype(np.int16)
        ),
        "position": pa.array(
            np.concatenate([np.arange(m, dtype=np.int32) for m in lengths])
            if n
            else np.zeros(0, np.int32)
        ),
    }
