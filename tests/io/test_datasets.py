import os

import pyarrow as pa
import pytest

from hed.errors import OutputWriteError
from hed.io.datasets import write_parquet_atomically


def test_producer_error_is_not_a_write_error(tmp_path):
    def chunks():
        yield pa.table({"a": [1]})
        raise OSError(5, "shard read failed")

    with pytest.raises(OSError, match="shard read failed"):
        write_parquet_atomically(tmp_path / "x.parquet", chunks())
    assert os.listdir(tmp_path) == []


def test_stream_round_trip_keeps_rows_and_metadata(tmp_path):
    import pyarrow.parquet as pq

    first = pa.table({"a": pa.array([1, 2], pa.int32())}).replace_schema_metadata(
        {"hed.generation": "{}"}
    )
    n = write_parquet_atomically(tmp_path / "x.parquet", iter([first, first]))
    table = pq.read_table(tmp_path / "x.parquet")
    assert n == 4 and table.column("a").to_pylist() == [1, 2, 1, 2]
    assert table.schema.metadata[b"hed.generation"] == b"{}"


def test_unwritable_target_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputWriteError) as err:
        write_parquet_atomically(tmp_path / "file" / "x.parquet", pa.table({"a": [1]}))
    assert "cannot write" in str(err.value) and "\n" not in str(err.value)
