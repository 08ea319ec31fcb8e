"""Records written before the word-start mass columns existed stay writable and readable: the
catalog's schema-cast save fills the columns with null (tables and DataFrames)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from hed.records.parquet_files import write_parquet_atomically
from hed.records.schema import MERGED_TOKEN_RECORD_SCHEMA
from hed.records.sequence import MASS_COLUMNS


def old_merged_table() -> pa.Table:
    """Two merged records without the mass columns."""
    names = [n for n in MERGED_TOKEN_RECORD_SCHEMA.names if n not in MASS_COLUMNS]
    rows = [
        {"run": "r", "step": 0, "shard": 0, "prompt_index": 0, "sample_index": 0,
         "position": p, "token_id": 7, "token_text": " wait", "entropy": 1.5, "logprob": -1.0,
         "prob": 0.37, "topk_token_ids": [7], "topk_probs": [0.37], "is_special": False,
         "word": "wait", "category": "anthropomorphic", "is_high_entropy": p == 0}
        for p in range(2)
    ]  # fmt: skip
    schema = pa.schema([MERGED_TOKEN_RECORD_SCHEMA.field(n) for n in names])
    return pa.Table.from_pylist(rows, schema=schema)


def test_a_table_or_frame_without_the_mass_columns_saves_them_as_null(tmp_path):
    old = old_merged_table()
    for name, chunk in (("table", old), ("frame", old.to_pandas())):
        path = tmp_path / f"{name}.parquet"
        write_parquet_atomically(path, chunk, schema=MERGED_TOKEN_RECORD_SCHEMA)
        back = pq.read_table(path)
        assert back.schema.remove_metadata() == MERGED_TOKEN_RECORD_SCHEMA
        for column in MASS_COLUMNS:
            assert back.column(column).null_count == 2
        assert back.column("entropy").to_pylist() == [1.5, 1.5]
