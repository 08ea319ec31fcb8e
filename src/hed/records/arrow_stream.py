"""Streaming Arrow record tables in bounded memory: batches, a per-prompt cursor, prefetch.

The aggregation reads shard files of tens of millions of token records. Everything here
keeps memory bounded by a batch, not a file: :func:`record_batches` reads one batch at a
time (:func:`row_group_batches` one row group at a time, for a single reader of a whole
step), :class:`ShardCursor` hands out one prompt's rows at a time from a sorted shard,
:func:`rechunked` regroups small tables into write-sized ones, and :func:`prefetched` runs a
producer in a thread so that reading and Parquet writing overlap. None of it knows Kedro.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from hed.errors import InputDataError

#: Records per batch read from a Parquet file.
READ_BATCH = 65_536
#: Records per chunk written (``aggregation.chunk_records`` default).
DEFAULT_CHUNK = 524_288


def dataset_source(dataset: ds.Dataset) -> str:
    """The file behind a dataset, for messages (``<in-memory dataset>`` when none)."""
    files = getattr(dataset, "files", None)
    return files[0] if files else "<in-memory dataset>"


def record_batches(
    dataset: ds.Dataset, columns: list[str], batch_rows: int = READ_BATCH
) -> Iterator[pa.RecordBatch]:
    """Stream ``columns`` of a dataset in order, one batch at a time, read when asked for.

    A file-backed dataset is read with ``pyarrow.parquet.ParquetFile.iter_batches`` without
    pre-buffering: a merge that holds one reader per shard then keeps about one batch per
    shard in memory (0.5 GB peak for 20 M records in 8 shards). Pre-buffering holds whole row
    groups (1.2 GB), and ``Dataset.to_batches`` reads ahead of a slow consumer (2.4 GB).
    """
    files = getattr(dataset, "files", None)
    if files and len(files) == 1:
        # through the dataset's filesystem: a local file, or an object on s3:// / gs://
        source = dataset.filesystem.open_input_file(files[0])
        parquet = pq.ParquetFile(source, pre_buffer=False, buffer_size=1 << 20)
        # use_threads=False: the writer of the output keeps the other core busy
        yield from parquet.iter_batches(batch_size=batch_rows, columns=columns, use_threads=False)
    else:
        yield from dataset.to_batches(
            columns=columns, batch_size=batch_rows, batch_readahead=0, use_threads=False
        )


def row_group_batches(
    dataset: ds.Dataset, columns: list[str], batch_records: int
) -> Iterator[pa.RecordBatch]:
    """Yield ``columns`` of ``dataset`` in batches of at most ``batch_records`` rows, in file
    and row order, reading one row group after the other (no read-ahead).

    For a single reader of a whole step (the dynamics tables): ``to_batches`` and
    ``iter_batches`` read ahead, and their peak grows with the file (measured on merged steps
    of 1M and 4M records, ten columns, row groups of 262,144 records: 37 → 85 MB and
    27 → 67 MB of Arrow memory), while one row group at a time stayed at 37 MB for both.
    Memory is about two row groups of the requested columns.

    Args:
        dataset: a Parquet ``FileSystemDataset`` (what ``ArrowParquetDataset.load`` returns,
            local or on an fsspec filesystem); any other dataset is read with ``to_batches``.
        columns: the columns to read.
        batch_records: the largest batch yielded.
    """
    files = getattr(dataset, "files", None)
    filesystem = getattr(dataset, "filesystem", None)
    if not files or filesystem is None or not isinstance(dataset.format, ds.ParquetFileFormat):
        yield from dataset.to_batches(
            columns=columns, batch_size=batch_records, batch_readahead=0, fragment_readahead=0
        )
        return
    for path in files:
        with filesystem.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle, pre_buffer=False)
            for group in range(parquet.num_row_groups):
                table = parquet.read_row_group(group, columns=columns, use_threads=False)
                yield from table.to_batches(max_chunksize=batch_records)
                del table


def column_numpy(batch: pa.RecordBatch, name: str, source: str, dtype: Any) -> np.ndarray:
    """Column ``name`` of ``batch`` as a numpy array of ``dtype``.

    Raises:
        InputDataError: the column has nulls (named with ``source``).
    """
    column = batch.column(name)
    if column.null_count:
        raise InputDataError(
            f"{source}: column {name} has {column.null_count} null value(s); "
            "rerun generation for this shard"
        )
    return column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


class ShardCursor:
    """Reads one shard's records in order and hands them out prompt by prompt.

    The shard must be sorted by ``prompt_index`` (checked before the merge); memory is one
    read batch.
    """

    def __init__(self, dataset: ds.Dataset, columns: list[str]) -> None:
        self._batches = record_batches(dataset, columns)
        self._table: pa.Table | None = None
        self._prompts = np.zeros(0, dtype=np.int64)
        self._at = 0

    def take(self, prompt_index: int) -> list[pa.Table]:
        """All rows of ``prompt_index``, which must be at the front of what is left."""
        pieces = []
        while True:
            if self._at >= self._prompts.size:
                batch = next(self._batches, None)
                if batch is None:
                    return pieces
                self._table = pa.Table.from_batches([batch])
                self._prompts = batch.column("prompt_index").to_numpy()
                self._at = 0
            end = int(np.searchsorted(self._prompts, prompt_index, side="right"))
            if end > self._at:
                pieces.append(self._table.slice(self._at, end - self._at))
                self._at = end
            if self._at < self._prompts.size:  # the next prompt starts in this batch
                return pieces


def rechunked(tables: Iterable[pa.Table], schema: pa.Schema, rows: int) -> Iterator[pa.Table]:
    """Regroup a stream of small tables into tables of about ``rows`` rows (one row group each).

    An empty stream yields one empty table of ``schema`` (so the writer still writes a file).
    """
    pending: list[pa.Table] = []
    n = 0
    any_yielded = False
    for table in tables:
        pending.append(table.cast(schema))
        n += table.num_rows
        if n >= rows:
            yield pa.concat_tables(pending)  # chunked columns: the writer takes them as they are
            any_yielded = True
            pending, n = [], 0
    if pending or not any_yielded:
        yield pa.concat_tables(pending) if pending else schema.empty_table()


_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def prefetched(chunks: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """Produce ``chunks`` in a background thread, up to ``depth`` ahead of the consumer.

    The dataset's writer (Parquet encoding and compression, which release the GIL) then runs
    while the next chunk is read and marked: the two cores of a small machine both work.
    Errors of the producer are raised in the consumer; a consumer that stops early stops it.
    """
    handoff: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if not put(chunk):
                    return
            put(_DONE)
        except BaseException as error:  # handed to the consumer
            put(_Failure(error))
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def consume() -> Iterator[Any]:
        thread = threading.Thread(target=produce, name="hed-aggregation-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item = handoff.get()
                if item is _DONE:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            stop.set()
            thread.join()

    return consume()
