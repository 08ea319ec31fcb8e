"""The merge of a step: shards in key order, each record marked with word, category and
whether it is high-entropy.

Shard k holds the prompts with ``prompt_index % num_shards == k``, each shard sorted by
(prompt_index, sample_index, position), so the merge streams all shards at once and takes
prompt after prompt from its shard (memory: one read batch per shard plus a few output
chunks; :class:`hed.records.arrow_stream.ShardCursor`). Words are assigned per chunk of whole
responses (:func:`hed.core.words.find_words`), categories from the
:class:`hed.core.lexicon.Lexicon`,
high-entropy marks by :class:`hed.core.thresholds.HighEntropyMarker` (ties at the threshold in
key order). While the merged chunks stream to their file, the high-entropy rows are set
aside (:class:`HighEntropySpill`) so the merged file is never decoded again to pick them out.
Also here: the word of every sampled token id (:func:`first_sampled_words`), which the
top-k candidates of :mod:`hed.analysis.word_mass` are given.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from hed.core.lexicon import Lexicon
from hed.core.thresholds import EntropyThreshold, HighEntropyMarker
from hed.core.words import find_words, token_own_words
from hed.errors import InputDataError
from hed.records.arrow_stream import (
    DEFAULT_CHUNK,
    ShardCursor,
    column_numpy,
    dataset_source,
    prefetched,
    rechunked,
    record_batches,
)
from hed.records.atomic_io import owned_temporary_folder
from hed.records.schema import (
    HIGH_ENTROPY_POSITION_SCHEMA,
    MERGED_TOKEN_RECORD_SCHEMA,
    TOKEN_RECORD_SCHEMA,
)


@dataclass(frozen=True)
class HighEntropySpill:
    """Where :func:`merge_step` leaves the high-entropy rows of a step.

    While the merged records stream to their file, the rows marked high-entropy are also
    appended, unencoded (Arrow IPC), to ``<directory>/rows.arrows`` in the system temp
    folder; the file appears complete (renamed from ``rows.arrows.partial``) only when the
    stream ended. :func:`read_spill` reads and deletes it, so the merged
    file is never decoded again to pick out 20% of its rows.
    """

    run: str
    step: int
    directory: str

    @property
    def path(self) -> Path:
        """The complete spill file."""
        return Path(self.directory) / "rows.arrows"


class MergedStep(NamedTuple):
    """Outputs of :func:`merge_step` (the node ``merge_token_records``)."""

    token_records: Iterator[pa.Table]
    high_entropy_rows: HighEntropySpill
    sequences: pd.DataFrame


def first_sampled_words(shard_records: tuple[ds.Dataset, ...]) -> pd.DataFrame:
    """Give every token id sampled in the step the word of its text taken alone.

    The top-k candidates of a position were never generated there, so they have no context:
    a candidate's word is the first letter run of its text, lower-cased (``" Wait"`` →
    ``wait``), taken from the first time (shard order, then key order) that id was *sampled*
    anywhere in the step. Candidates never sampled in the step have no known word.

    Args:
        shard_records: the step's shard token records (reads ``token_id`` and ``token_text``).

    Returns:
        token_id (int32), word (string; ``""`` when the text has no letters), sorted by id.
    """
    seen = np.zeros(0, dtype=bool)
    ids, texts = [], []
    for dataset in shard_records:
        for batch in record_batches(dataset, ["token_id", "token_text"]):
            token_id = column_numpy(batch, "token_id", dataset_source(dataset), np.int64)
            if token_id.size and token_id.max() >= seen.size:
                seen = np.concatenate(
                    [seen, np.zeros(int(token_id.max()) + 1 - seen.size, dtype=bool)]
                )
            new = np.flatnonzero(~seen[token_id])
            if new.size:
                first_ids, first_at = np.unique(token_id[new], return_index=True)
                seen[first_ids] = True
                ids.append(first_ids)
                texts.append(batch.column("token_text").take(pa.array(new[first_at])))
    if not ids:
        return pd.DataFrame({"token_id": pd.Series(dtype="int32"), "word": pd.Series(dtype="str")})
    words = token_own_words(pa.concat_arrays([t.cast(pa.string()) for t in texts]))
    frame = pd.DataFrame(
        {"token_id": np.concatenate(ids).astype(np.int32), "word": words.to_pylist()}
    )
    return frame.sort_values("token_id", ignore_index=True)


def merge_step(
    sequences: pd.DataFrame,
    selection: EntropyThreshold,
    shard_records: tuple[ds.Dataset, ...],
    *,
    lexicon: Lexicon,
    chunk_records: int,
) -> MergedStep:
    """Merge the shards into the step's records with word, category and is_high_entropy.

    Nothing is read until the returned stream is consumed (by the dataset's writer), in a
    prefetch thread (:func:`hed.records.arrow_stream.prefetched`).

    Args:
        sequences: the checked responses (their (prompt_index, shard) give the merge order).
        selection: the step's threshold (:func:`hed.core.thresholds.compute_threshold`).
        shard_records: the step's shard token records (already checked).
        lexicon: word → category.
        chunk_records: records per chunk (whole prompts are kept together).

    Returns:
        ``token_records``: a stream of MERGED_TOKEN_RECORD_SCHEMA tables;
        ``high_entropy_rows``: the :class:`HighEntropySpill` that stream fills;
        ``sequences``: the merged responses.
    """
    order = sequences.drop_duplicates("prompt_index")[["prompt_index", "shard"]].to_numpy()
    spill = HighEntropySpill(
        run=selection.run,
        step=selection.step,
        directory=str(owned_temporary_folder(f"hed-{selection.run}.step_{selection.step}-")),
    )
    chunks = merged_chunks(
        shard_records, order, selection, lexicon=lexicon, chunk_records=chunk_records, spill=spill
    )
    return MergedStep(
        token_records=prefetched(chunks), high_entropy_rows=spill, sequences=sequences
    )


def merged_chunks(
    shard_records: tuple[ds.Dataset, ...],
    order: np.ndarray,
    selection: EntropyThreshold,
    *,
    lexicon: Lexicon,
    chunk_records: int,
    spill: HighEntropySpill,
) -> Iterator[pa.Table]:
    """Merged, marked chunks of whole prompts in key order (high-entropy rows also to ``spill``)."""
    cursors = [
        ShardCursor(dataset, [n for n in TOKEN_RECORD_SCHEMA.names if n in dataset.schema.names])
        for dataset in shard_records
    ]
    marker = HighEntropyMarker(selection)
    run_column = pa.array([selection.run], type=pa.string())
    partial = spill.path.with_suffix(".arrows.partial")
    complete = False
    try:
        with (
            pa.OSFile(str(partial), "wb") as sink,
            pa.ipc.new_stream(sink, HIGH_ENTROPY_POSITION_SCHEMA) as high,
        ):
            pieces: list[pa.Table] = []
            n_pending = 0
            for i, (prompt_index, shard) in enumerate(order):
                for piece in cursors[int(shard)].take(int(prompt_index)):
                    pieces.append(piece)
                    n_pending += piece.num_rows
                if n_pending >= chunk_records or (i == len(order) - 1 and pieces):
                    chunk = mark_chunk(pieces, marker, lexicon, run_column)
                    high.write_table(high_entropy_rows(chunk))
                    yield chunk
                    pieces, n_pending = [], 0
        if marker.n_marked != selection.n_high_entropy:  # the checks make this unreachable
            raise InputDataError(
                f"{selection.run}.step_{selection.step}: marked {marker.n_marked} high-entropy "
                f"tokens, expected {selection.n_high_entropy}; the shard files changed during "
                "aggregation"
            )
        partial.replace(spill.path)
        complete = True
    finally:
        if not complete:
            shutil.rmtree(spill.directory, ignore_errors=True)


def high_entropy_rows(chunk: pa.Table) -> pa.Table:
    """The rows of a marked chunk that are high-entropy, as HIGH_ENTROPY_POSITION_SCHEMA."""
    rows = chunk.filter(chunk.column("is_high_entropy")).select(HIGH_ENTROPY_POSITION_SCHEMA.names)
    return rows.cast(HIGH_ENTROPY_POSITION_SCHEMA)


def mark_chunk(
    pieces: list[pa.Table], marker: HighEntropyMarker, lexicon: Lexicon, run: pa.Array
) -> pa.Table:
    """Concatenate whole responses and add word, category and is_high_entropy."""
    # zero-copy: the writer takes chunked columns; "default" promotion fills a mass column that
    # an older shard lacks with nulls (shards of one step may predate the columns or not)
    table = pa.concat_tables(pieces, promote_options="default")
    n = table.num_rows
    columns = {}
    for field in TOKEN_RECORD_SCHEMA:
        if field.name not in table.column_names:  # a mass column of an older shard: null
            columns[field.name] = pa.nulls(n, field.type)
            continue
        column = table.column(field.name)
        if field.name == "run":  # one run per step (checked): a dictionary of one value
            column = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), run)
        elif column.type != field.type:
            column = column.cast(field.type)
        columns[field.name] = column
    special = columns["is_special"].to_numpy()
    sequence_start = columns["position"].to_numpy() == 0
    words = find_words(
        columns["token_text"].combine_chunks(), sequence_start, special, lexicon.words
    )
    columns["word"] = words.to_array()
    columns["category"] = lexicon.categorise(words)
    columns["is_high_entropy"] = pa.array(marker.mark(columns["entropy"].to_numpy(), special))
    return pa.table(columns, schema=MERGED_TOKEN_RECORD_SCHEMA)


def read_spill(spill: HighEntropySpill) -> Iterator[pa.Table]:
    """Stream a step's high-entropy rows (HIGH_ENTROPY_POSITION_SCHEMA) from its spill.

    The spill is read once, then deleted (also when the consumer stops early).

    Returns:
        Tables of about :data:`hed.records.arrow_stream.DEFAULT_CHUNK` rows, in key order.

    Raises:
        InputDataError: the spill is missing (the merge did not complete).
    """
    if not spill.path.is_file():
        raise InputDataError(
            f"{spill.run}.step_{spill.step}: the high-entropy rows of the merge are missing "
            f"({spill.path}); rerun merge_token_records"
        )

    def rows() -> Iterator[pa.Table]:
        try:
            with pa.memory_map(str(spill.path)) as source:
                for batch in pa.ipc.open_stream(source):
                    yield pa.Table.from_batches([batch])
        finally:
            shutil.rmtree(spill.directory, ignore_errors=True)

    return rechunked(rows(), HIGH_ENTROPY_POSITION_SCHEMA, DEFAULT_CHUNK)


def stacked_positions(per_step: tuple[ds.Dataset, ...]) -> Iterator[pa.Table]:
    """Stream every step's ``high_entropy_positions`` as one table (run, step order)."""

    def rows() -> Iterator[pa.Table]:
        for dataset in per_step:
            for batch in record_batches(dataset, HIGH_ENTROPY_POSITION_SCHEMA.names):
                yield pa.Table.from_batches([batch]).cast(HIGH_ENTROPY_POSITION_SCHEMA)

    return prefetched(rechunked(rows(), HIGH_ENTROPY_POSITION_SCHEMA, DEFAULT_CHUNK))
