"""hed.records.arrow_stream: the per-prompt cursor, rechunking and the prefetch thread."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from hed.errors import InputDataError
from hed.records.arrow_stream import (
    ShardCursor,
    column_numpy,
    prefetched,
    rechunked,
    record_batches,
)


def test_cursor_hands_out_whole_prompts_across_batch_boundaries(tmp_path):
    prompts = [0, 0, 0, 2, 2, 4, 4, 4, 4, 6]
    path = tmp_path / "shard.parquet"
    pq.write_table(pa.table({"prompt_index": prompts, "row": list(range(10))}), path)
    cursor = ShardCursor(ds.dataset(str(path)), ["prompt_index", "row"])
    cursor._batches = record_batches(ds.dataset(str(path)), ["prompt_index", "row"], batch_rows=4)

    def rows(prompt: int) -> list[int]:
        return [r for piece in cursor.take(prompt) for r in piece.column("row").to_pylist()]

    assert rows(0) == [0, 1, 2]
    assert rows(2) == [3, 4]
    assert rows(4) == [5, 6, 7, 8]  # spans the second and third batch
    assert rows(6) == [9] and rows(8) == []


def test_rechunked_groups_rows_and_yields_one_empty_table_for_nothing():
    schema = pa.schema([pa.field("x", pa.int64())])
    tables = [pa.table({"x": [i, i]}, schema=schema) for i in range(5)]
    sizes = [t.num_rows for t in rechunked(tables, schema, rows=4)]
    assert sizes == [4, 4, 2]
    [empty] = list(rechunked([], schema, rows=4))
    assert empty.num_rows == 0 and empty.schema == schema


def test_prefetched_keeps_order_and_raises_the_producers_error():
    assert list(prefetched(iter(range(50)), depth=2)) == list(range(50))

    def failing():
        yield 1
        raise ValueError("producer broke")

    stream = prefetched(failing())
    assert next(stream) == 1
    with pytest.raises(ValueError, match="producer broke"):
        next(stream)


def test_prefetched_stops_its_thread_when_the_consumer_stops():
    before = threading.active_count()
    stream = prefetched(iter(range(10**6)), depth=2)
    assert next(stream) == 0
    stream.close()  # the consumer gives up early: the producer thread ends
    assert threading.active_count() == before


def test_column_numpy_refuses_nulls_naming_the_file():
    batch = pa.record_batch({"entropy": pa.array([1.0, None], pa.float32())})
    with pytest.raises(InputDataError, match=r"s\.parquet: column entropy has 1 null value"):
        column_numpy(batch, "entropy", "s.parquet", float)
