"""Stream the columns of a Parquet record dataset one row group at a time.

``pyarrow.dataset.Dataset.to_batches`` and ``ParquetFile.iter_batches`` read ahead: measured
on merged steps of 1M and 4M records (``bench/dynamics.py`` synthesis, row groups of 262,144
records, the ten columns the dynamics pipeline reads), Arrow's peak allocation grew from 37 to
85 MB (``to_batches``, no readahead requested) and from 27 to 67 MB (``iter_batches``) with
the file, while reading one row group after the other stayed at 37 MB for both files. The
dynamics pipeline reads steps of up to 50M records, so it reads row group by row group: memory
is about two row groups of the requested columns (the one being read and the last batch of the
previous one; the aggregation writes row groups of ``aggregation.chunk_records``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq


def record_batches(
    dataset: ds.Dataset, columns: list[str], batch_records: int
) -> Iterator[pa.RecordBatch]:
    """Yield ``columns`` of ``dataset`` in batches of at most ``batch_records`` rows, in file
    and row order.

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
