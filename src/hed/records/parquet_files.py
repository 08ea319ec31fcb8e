"""Writing one Parquet file atomically: a table or a stream of tables/batches.

:func:`write_parquet_atomically` is how HED writes every local Parquet file it produces: the
catalog's :class:`hed.io.datasets.ArrowParquetDataset` and the crash-safe shard parts
(:mod:`hed.records.shard_parts`). It lives in ``records`` (below ``io``) so that the shard
parts can use it without importing the Kedro datasets.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hed.errors import OutputWriteError
from hed.records.atomic_io import atomic_path, write_error
from hed.records.schema import OPTIONAL_RECORD_COLUMNS

#: What :func:`write_parquet_atomically` accepts as one chunk.
TableLike = pa.Table | pa.RecordBatch | pd.DataFrame


def _to_table(chunk: TableLike, schema: pa.Schema | None) -> pa.Table:
    """Convert a chunk to a table of ``schema`` (when given), keeping its key-value metadata.

    A column of :data:`hed.records.schema.OPTIONAL_RECORD_COLUMNS` that ``schema`` has and the
    chunk lacks (records made before it existed) is written as null.
    """
    if isinstance(chunk, pd.DataFrame):
        if schema is not None:
            absent = [c for c in OPTIONAL_RECORD_COLUMNS if c in schema.names and c not in chunk]
            chunk = chunk.assign(**dict.fromkeys(absent)) if absent else chunk
        return pa.Table.from_pandas(chunk, schema=schema, preserve_index=False)
    if isinstance(chunk, pa.RecordBatch):
        chunk = pa.Table.from_batches([chunk])
    if schema is not None:
        for name in OPTIONAL_RECORD_COLUMNS:
            if name in schema.names and name not in chunk.column_names:
                field = schema.field(name)
                chunk = chunk.append_column(field, pa.nulls(len(chunk), field.type))
    if schema is not None and not chunk.schema.equals(schema, check_metadata=False):
        metadata = chunk.schema.metadata
        chunk = chunk.select(schema.names).cast(schema).replace_schema_metadata(metadata)
    return chunk


def write_parquet_atomically(
    path: str | os.PathLike,
    data: TableLike | Iterable[TableLike],
    schema: pa.Schema | None = None,
    **writer_args: Any,
) -> int:
    """Write one table, or a stream of tables/batches, to a Parquet file atomically.

    The rows go to a temporary file in the target folder, which is fsynced and renamed onto
    ``path`` only when everything was written. On any error (disk full, a failing producer)
    the temporary file is removed and nothing appears at ``path``.

    Args:
        path: target file (local filesystem).
        data: a ``pa.Table``/``pa.RecordBatch``/``pd.DataFrame`` or an iterable of them.
        schema: schema to write; by default the first chunk's.
        **writer_args: passed to ``pyarrow.parquet.ParquetWriter`` (e.g. ``compression``).

    Returns:
        The number of rows written.

    Raises:
        OutputWriteError: the folder is not writable or the disk is full (names ``path``).
    """
    path = Path(path)
    chunks = [data] if isinstance(data, TableLike) else data
    writer_args = {"compression": "zstd", **writer_args}
    writer = None
    n_rows = 0
    with atomic_path(path) as tmp_name:
        try:
            for chunk in chunks:  # errors of the producer propagate as they are
                table = _to_table(chunk, schema)
                with _as_write_error(path):
                    if writer is None:
                        # keep key-value metadata of the first chunk (e.g. generation parameters)
                        schema = (schema or table.schema).with_metadata(table.schema.metadata)
                        writer = pq.ParquetWriter(tmp_name, schema, **writer_args)
                    writer.write_table(table.replace_schema_metadata(schema.metadata))
                n_rows += table.num_rows
            with _as_write_error(path):
                if writer is None:  # an empty stream still gives a valid (empty) file
                    if schema is None:
                        raise OutputWriteError(f"{path}: nothing to write and no schema given")
                    writer = pq.ParquetWriter(tmp_name, schema, **writer_args)
                writer.close()
                writer = None
        except BaseException:
            _close_quietly(writer)
            raise
    return n_rows


@contextmanager
def _as_write_error(path: Path) -> Iterator[None]:
    """Turn an OSError of the writer (disk full, permissions) into a one-line OutputWriteError."""
    try:
        yield
    except OSError as exc:
        raise write_error(path, exc) from None


def _close_quietly(writer: pq.ParquetWriter | None) -> None:
    if writer is not None:
        try:
            writer.close()
        except Exception:
            pass


__all__ = ["TableLike", "write_parquet_atomically"]
