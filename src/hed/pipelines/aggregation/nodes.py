"""Nodes of the aggregation pipeline (DESIGN.md §5.2–§5.4, docs/aggregation.md).

Per (run, step), in this order:

1. :func:`check_sequences` — every shard is current (its recorded generation parameters,
   checkpoint and prompt ids match the configuration:
   :mod:`hed.shard_metadata`), and coverage of the responses: shard count,
   every (prompt_index, sample_index) of the prompt set exactly once, each in its shard.
2. :func:`check_token_records` — the token record files are current too, and agree with the
   responses: columns present, keys strictly increasing within each shard (no repeats),
   positions 0..n_tokens−1.
3. :func:`compute_entropy_threshold` — the exact top-ρ selection over the whole step.
4. :func:`map_candidate_words` — the word of every sampled token id, for the top-k candidates.
5. :func:`merge_token_records` — the merged, marked records and the merged responses.
6. :func:`select_high_entropy_positions`, :func:`tabulate_token_probability_mass`,
   :func:`tabulate_category_probability_mass`, :func:`summarise_step` — the per-step tables.

Then :func:`combine_tables` and :func:`combine_high_entropy_positions` stack the per-step
tables of every run and step. Record tables are lazy ``pyarrow.dataset.Dataset`` objects
(:class:`hed.datasets.ArrowParquetDataset`); nodes stream them in record batches, read only
the columns they need, and return streams of tables for large outputs (the dataset writes
them atomically), so memory does not grow with the step.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import shutil
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from hed.atomic_io import owned_temporary_folder
from hed.errors import ConfigError, InputDataError
from hed.lexicon import Lexicon, parse_lexicon
from hed.schema import MERGED_TOKEN_RECORD_SCHEMA, RECORD_KEY, SEQUENCE_SCHEMA, TOKEN_RECORD_SCHEMA
from hed.shard_metadata import GENERATION_METADATA_KEY, stale_field
from hed.thresholds import (
    EntropyThreshold,
    HighEntropyMarker,
    compute_threshold,
    validate_top_entropy_frac,
)
from hed.words import find_words, token_own_words

logger = logging.getLogger(__name__)

_SHARD_FILE = re.compile(r"^shard_\d+(\.sequences)?\.parquet$")

#: One row per high-entropy token (``high_entropy_positions``).
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

_KEYS = list(RECORD_KEY)
_RESPONSE_KEY = "(prompt_index, sample_index)"
_EXAMPLES = 5  # keys quoted in an error message
_READ_BATCH = 65_536  # records per batch read from a Parquet file
_DEFAULT_CHUNK = 524_288  # records per chunk written


@dataclass(frozen=True)
class HighEntropySpill:
    """Where :func:`merge_token_records` leaves the high-entropy rows of a step.

    While the merged records stream to their file, the rows marked high-entropy are also
    appended, unencoded (Arrow IPC), to ``<directory>/rows.arrows`` in the system temp
    folder; the file appears complete (renamed from ``rows.arrows.partial``) only when the
    stream ended. :func:`select_high_entropy_positions` reads and deletes it, so the merged
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
    """Outputs of :func:`merge_token_records`."""

    token_records: Iterator[pa.Table]
    high_entropy_rows: HighEntropySpill
    sequences: pd.DataFrame


# ------------------------------------------------------------------------------- coverage


def check_sequences(
    prompts: pd.DataFrame,
    generation: dict[str, Any],
    prompt_params: dict[str, Any],
    checkpoints: dict[str, Any],
    *shard_sequences: ds.Dataset,
    run: str,
    step: int,
) -> pd.DataFrame:
    """Check that the shards are current and hold every response of the step once, in its shard.

    Before reading the rows, each shard's ``hed.generation`` metadata must match the current
    configuration (:mod:`hed.shard_metadata` lists what is compared): a
    shard made with other sampling parameters, another checkpoint or another prompt set is
    refused, so one step never mixes two configurations.

    Args:
        prompts: ``prompts`` (its ``prompt_index`` column is the expected prompt set, its
            ``prompt_id`` column what each shard must have been generated for).
        generation: ``params:generation`` (``num_shards``, ``samples_per_prompt`` and the
            sampling parameters).
        prompt_params: ``params:prompts`` (chat-template settings).
        checkpoints: ``checkpoints`` (fingerprint of each (run, step)'s checkpoint).
        *shard_sequences: ``<run>.step_<step>.shard_<k>.sequences`` for k = 0, 1, ...
        run, step: the step (bound when the pipeline is built).

    Returns:
        The responses of all shards (SEQUENCE_SCHEMA columns), sorted by (prompt_index,
        sample_index).

    Raises:
        InputDataError: a stale shard (names the file, the field, the recorded and the current
            value and the fix), shards generated with different dtypes, a missing or
            unexpected extra shard, a duplicated prompt, a response in the wrong shard, a
            missing, duplicated or unexpected response, a missing column.
    """
    num_shards, samples = _shard_config(generation)
    label = f"{run}.step_{step}"
    _check_shard_count(shard_sequences, num_shards, label, "sequences")
    current = _CurrentGeneration(generation, prompt_params, checkpoints, prompts)
    dtypes: dict[str, str] = {}
    frames = []
    for shard, dataset in enumerate(shard_sequences):
        recorded = _check_generation_metadata(
            dataset, shard, num_shards, run, step, current=current
        )
        _check_same_dtype(dtypes, recorded, _source(dataset), label)
        table = _read_table(dataset, SEQUENCE_SCHEMA)
        frames.append(table.to_pandas().assign(_shard=shard))
    frame = pd.concat(frames, ignore_index=True)
    sources = [_source(d) for d in shard_sequences]
    _check_response_keys(
        frame, prompts, num_shards=num_shards, samples=samples, sources=sources, label=label
    )
    return (
        frame.sort_values(["prompt_index", "sample_index"])
        .drop(columns="_shard")
        .reset_index(drop=True)
    )


def check_token_records(
    sequences: pd.DataFrame,
    prompts: pd.DataFrame,
    generation: dict[str, Any],
    prompt_params: dict[str, Any],
    checkpoints: dict[str, Any],
    *shard_records: ds.Dataset,
    run: str,
    step: int,
) -> pd.DataFrame:
    """Check every shard's token records: current, and in agreement with the step's responses.

    Each shard's ``hed.generation`` metadata must match the current configuration (as in
    :func:`check_sequences`); each shard must have every token record column, rows in
    strictly increasing (prompt_index, sample_index, position) order (a repeat is a
    duplicated record), and for each of its responses exactly positions ``0 .. n_tokens−1``.

    Args:
        sequences: the checked responses (:func:`check_sequences`).
        prompts: ``prompts``.
        generation: ``params:generation``.
        prompt_params: ``params:prompts``.
        checkpoints: ``checkpoints``.
        *shard_records: ``<run>.step_<step>.shard_<k>.token_records`` for k = 0, 1, ...
        run, step: the step.

    Returns:
        One row per shard: shard, source (file), n_sequences, n_records.

    Raises:
        InputDataError: a stale shard, a missing column or shard, duplicated or out-of-order
            records, records that do not match the responses (named with the file and the
            first keys).
    """
    num_shards, _ = _shard_config(generation)
    label = f"{run}.step_{step}"
    _check_shard_count(shard_records, num_shards, label, "token_records")
    current = _CurrentGeneration(generation, prompt_params, checkpoints, prompts)
    rows = []
    for shard, dataset in enumerate(shard_records):
        source = _source(dataset)
        _check_columns(dataset, TOKEN_RECORD_SCHEMA, source)
        _check_generation_metadata(dataset, shard, num_shards, run, step, current=current)
        found = _scan_record_keys(dataset, shard, source)
        expected = sequences.loc[
            sequences["shard"] == shard, ["prompt_index", "sample_index", "n_tokens"]
        ]
        _compare_records_to_responses(found, expected, source)
        rows.append(
            {
                "shard": shard,
                "source": source,
                "n_sequences": len(expected),
                "n_records": int(found["n_records"].sum()),
            }
        )
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------- threshold


def compute_entropy_threshold(
    shard_report: pd.DataFrame,
    aggregation: dict[str, Any],
    *shard_records: ds.Dataset,
    run: str,
    step: int,
) -> EntropyThreshold:
    """Compute the exact top-ρ high-entropy selection of the whole step (all shards together).

    Reads only ``entropy`` and ``is_special`` (4 bytes per non-special record are kept).

    Args:
        shard_report: :func:`check_token_records`'s report (its row counts size the buffer).
        aggregation: ``params:aggregation`` (``top_entropy_frac``).
        *shard_records: the step's shard token records.
        run, step: the step.

    Returns:
        The :class:`hed.thresholds.EntropyThreshold` (threshold, n_high_entropy, statistics).

    Raises:
        InputDataError: an entropy is NaN, infinite or null (named with file and key), or the
            step has no non-special token.
        ConfigError: ``top_entropy_frac`` outside (0, 1].
    """
    rho = parameter_section(aggregation, "aggregation").get("top_entropy_frac", 0.2)
    validate_top_entropy_frac(rho)
    buffer = np.empty(int(shard_report["n_records"].sum()), dtype=np.float32)
    n = 0
    for dataset in shard_records:
        source = _source(dataset)
        row = 0
        for batch in _batches(dataset, ["entropy", "is_special"]):
            entropy = _column_numpy(batch, "entropy", source, np.float32)
            special = _column_numpy(batch, "is_special", source, np.bool_)
            if not np.isfinite(entropy).all():
                _raise_bad_entropy(
                    dataset, source, row + np.flatnonzero(~np.isfinite(entropy)), entropy
                )
            regular = entropy[~special]
            buffer[n : n + regular.size] = regular
            n += regular.size
            row += batch.num_rows
    if n == 0:
        files = ", ".join(_source(d) for d in shard_records)
        raise InputDataError(
            f"{run}.step_{step}: zero non-special token records in {files}; nothing to threshold"
        )
    selection = compute_threshold(buffer[:n], rho, run=run, step=step)
    logger.info(
        "%s.step_%d: N=%d, %d high-entropy tokens, threshold %.4f nats",
        run,
        step,
        selection.n_tokens,
        selection.n_high_entropy,
        selection.threshold,
    )
    return selection


def tabulate_entropy_threshold(selection: EntropyThreshold) -> pd.DataFrame:
    """One ``entropy_thresholds`` row: run, step, n_tokens, top_entropy_frac, n_high_entropy,
    threshold, p50, p80, p90, p95, frac_below_0_01, mean_entropy (entropies in nats).
    """
    return pd.DataFrame([selection.as_row()])


# ------------------------------------------------------------------------------- words, merge


def map_candidate_words(shard_report: pd.DataFrame, *shard_records: ds.Dataset) -> pd.DataFrame:
    """Give every token id sampled in the step the word of its text taken alone.

    The top-k candidates of a position were never generated there, so they have no context:
    a candidate's word is the first letter run of its text, lower-cased (``" Wait"`` →
    ``wait``), taken from the first time (shard order, then key order) that id was *sampled*
    anywhere in the step. Candidates never sampled in the step have no known word.

    Args:
        shard_report: :func:`check_token_records`'s report (orders this node after the checks).
        *shard_records: the step's shard token records (reads ``token_id`` and ``token_text``).

    Returns:
        token_id (int32), word (string; ``""`` when the text has no letters), sorted by id.
    """
    seen = np.zeros(0, dtype=bool)
    ids, texts = [], []
    for dataset in shard_records:
        for batch in _batches(dataset, ["token_id", "token_text"]):
            token_id = _column_numpy(batch, "token_id", _source(dataset), np.int64)
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


def merge_token_records(
    sequences: pd.DataFrame,
    selection: EntropyThreshold,
    aggregation: dict[str, Any],
    *shard_records: ds.Dataset,
) -> MergedStep:
    """Merge the shards into the step's records with word, category and is_high_entropy.

    Rows come out in (prompt_index, sample_index, position) order: shard k holds the prompts
    with prompt_index % num_shards == k, each shard sorted, so the merge streams all shards at
    once and takes prompt after prompt from its shard (memory: one read batch per shard plus
    a few output chunks). Words are assigned per chunk of whole responses
    (:func:`hed.words.assign_words`), categories from the lexicon, high-entropy marks by
    :class:`hed.thresholds.HighEntropyMarker` (ties at the threshold in key order).

    Args:
        sequences: the checked responses (:func:`check_sequences`).
        selection: the step's threshold (:func:`compute_entropy_threshold`).
        aggregation: ``params:aggregation`` (``lexicon``, ``chunk_records``).
        *shard_records: the step's shard token records (already checked).

    Returns:
        ``token_records``: a stream of MERGED_TOKEN_RECORD_SCHEMA tables (consumed by the
        dataset's writer); ``high_entropy_rows``: the :class:`HighEntropySpill` that stream
        fills with the high-entropy rows; ``sequences``: the merged responses.

    Raises:
        ConfigError: the lexicon is invalid.
    """
    lexicon = parse_lexicon(parameter_section(aggregation, "aggregation").get("lexicon"))
    chunk_records = _chunk_records(aggregation)
    order = sequences.drop_duplicates("prompt_index")[["prompt_index", "shard"]].to_numpy()
    spill = HighEntropySpill(
        run=selection.run,
        step=selection.step,
        directory=str(owned_temporary_folder(f"hed-{selection.run}.step_{selection.step}-")),
    )
    chunks = _merged_chunks(
        shard_records, order, selection, lexicon=lexicon, chunk_records=chunk_records, spill=spill
    )
    return MergedStep(
        token_records=_prefetched(chunks), high_entropy_rows=spill, sequences=sequences
    )


def _merged_chunks(
    shard_records: tuple[ds.Dataset, ...],
    order: np.ndarray,
    selection: EntropyThreshold,
    *,
    lexicon: Lexicon,
    chunk_records: int,
    spill: HighEntropySpill,
) -> Iterator[pa.Table]:
    """Merged, marked chunks of whole prompts in key order (high-entropy rows also to ``spill``)."""
    cursors = [_ShardCursor(dataset, TOKEN_RECORD_SCHEMA.names) for dataset in shard_records]
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
                    chunk = _mark_chunk(pieces, marker, lexicon, run_column)
                    high.write_table(_high_entropy_rows(chunk))
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


def _high_entropy_rows(chunk: pa.Table) -> pa.Table:
    """The rows of a marked chunk that are high-entropy, as HIGH_ENTROPY_POSITION_SCHEMA."""
    rows = chunk.filter(chunk.column("is_high_entropy")).select(HIGH_ENTROPY_POSITION_SCHEMA.names)
    return rows.cast(HIGH_ENTROPY_POSITION_SCHEMA)


def _mark_chunk(
    pieces: list[pa.Table], marker: HighEntropyMarker, lexicon: Lexicon, run: pa.Array
) -> pa.Table:
    """Concatenate whole responses and add word, category and is_high_entropy."""
    table = pa.concat_tables(pieces)  # zero-copy: the writer takes chunked columns
    n = table.num_rows
    columns = {}
    for field in TOKEN_RECORD_SCHEMA:
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


# ------------------------------------------------------------------------------- tables


def select_high_entropy_positions(high_entropy_rows: HighEntropySpill) -> Iterator[pa.Table]:
    """Stream a step's high-entropy rows (HIGH_ENTROPY_POSITION_SCHEMA), set aside by the merge.

    Args:
        high_entropy_rows: the spill :func:`merge_token_records` filled while its merged
            records were written (read once, then deleted).

    Returns:
        A stream of tables of ``high_entropy_positions`` rows in key order: run, step,
        prompt_index, sample_index, position, token_id, token_text, word, category, entropy
        (nats), logprob, prob, topk_token_ids, topk_probs.

    Raises:
        InputDataError: the spill is missing (the merge did not complete).
    """
    spill = high_entropy_rows
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

    return _rechunked(rows(), HIGH_ENTROPY_POSITION_SCHEMA, _DEFAULT_CHUNK)


def tabulate_token_probability_mass(
    selection: EntropyThreshold,
    high_entropy_positions: ds.Dataset,
    candidate_words: pd.DataFrame,
    aggregation: dict[str, Any],
) -> pd.DataFrame:
    """Per word: how often and how much probability sits at the step's high-entropy positions.

    Over the high-entropy tokens with a non-empty word (DESIGN.md §6):

    * ``count`` — tokens with that word; ``count_share`` = count ÷ Σ count.
    * ``sampled_prob_sum`` — Σ ``prob`` of those tokens; ``sampled_prob_share`` = ÷ Σ over all
      words (Figure 3's bar height).
    * ``topk_mass`` — every high-entropy position spreads its top-k probabilities over the
      candidates' words: the candidate that is the sampled token gets the token's word in
      context, any other candidate the word of its own text (:func:`map_candidate_words`);
      candidates never sampled in the step (no known text) or with an empty word are left
      out; ``topk_mass_share`` = ÷ Σ over all words.

    Each share sums to 1 over the step's rows. Words only seen as candidates have count 0.

    Returns:
        run, step, word, category, count, count_share, sampled_prob_sum, sampled_prob_share,
        topk_mass, topk_mass_share; sorted by sampled_prob_sum, descending, then word.
    """
    lexicon = parse_lexicon(parameter_section(aggregation, "aggregation").get("lexicon"))
    index: dict[str, int] = {}
    candidate_index = _candidate_word_index(candidate_words, index)
    count = np.zeros(0)
    prob_sum = np.zeros(0)
    topk_mass = np.zeros(0)
    columns = ["token_id", "word", "prob", "topk_token_ids", "topk_probs"]
    for batch in _batches(high_entropy_positions, columns):
        word_idx = _word_indices(batch.column("word"), index)
        size = len(index)
        count = _grow(count, size) + np.bincount(word_idx, minlength=size)
        prob = batch.column("prob").to_numpy(zero_copy_only=False).astype(np.float64)
        prob_sum = _grow(prob_sum, size) + np.bincount(word_idx, weights=prob, minlength=size)
        cand, mass = _candidate_indices(batch, word_idx, candidate_index)
        topk_mass = _grow(topk_mass, size) + np.bincount(cand, weights=mass, minlength=size)
    words = np.array(list(index), dtype=object)
    size = len(words)
    count, prob_sum, topk_mass = _grow(count, size), _grow(prob_sum, size), _grow(topk_mass, size)
    keep = (words != "") & ((count > 0) | (topk_mass > 0))
    frame = pd.DataFrame(
        {
            "run": selection.run,
            "step": selection.step,
            "word": words[keep].astype(str),
            "category": [lexicon.category_of(w) for w in words[keep]],
            "count": count[keep].astype(np.int64),
            "count_share": _share(count[keep]),
            "sampled_prob_sum": prob_sum[keep],
            "sampled_prob_share": _share(prob_sum[keep]),
            "topk_mass": topk_mass[keep],
            "topk_mass_share": _share(topk_mass[keep]),
        }
    )
    return frame.sort_values(
        ["sampled_prob_sum", "topk_mass", "word"], ascending=[False, False, True], ignore_index=True
    )


def tabulate_category_probability_mass(
    token_probability_mass: pd.DataFrame, selection: EntropyThreshold, aggregation: dict[str, Any]
) -> pd.DataFrame:
    """The per-word measures summed per category (every lexicon category and ``other``).

    Shares are over the same denominators as the word table (high-entropy tokens with a
    non-empty word), so each sums to 1 per step.

    Returns:
        run, step, category, count, count_share, sampled_prob_sum, sampled_prob_share,
        topk_mass, topk_mass_share; categories in lexicon order, ``other`` last.
    """
    lexicon = parse_lexicon(parameter_section(aggregation, "aggregation").get("lexicon"))
    sums = token_probability_mass.groupby("category")[
        ["count", "sampled_prob_sum", "topk_mass"]
    ].sum()
    sums = sums.reindex(list(lexicon.categories), fill_value=0)
    frame = pd.DataFrame(
        {
            "run": selection.run,
            "step": selection.step,
            "category": list(lexicon.categories),
            "count": sums["count"].to_numpy().astype(np.int64),
            "count_share": _share(sums["count"].to_numpy()),
            "sampled_prob_sum": sums["sampled_prob_sum"].to_numpy(dtype=np.float64),
            "sampled_prob_share": _share(sums["sampled_prob_sum"].to_numpy(dtype=np.float64)),
            "topk_mass": sums["topk_mass"].to_numpy(dtype=np.float64),
            "topk_mass_share": _share(sums["topk_mass"].to_numpy(dtype=np.float64)),
        }
    )
    return frame


def summarise_step(
    entropy_thresholds: pd.DataFrame,
    sequences: ds.Dataset,
    token_records: ds.Dataset,
    aggregation: dict[str, Any],
) -> pd.DataFrame:
    """One ``summary_by_step`` row, from the step's threshold row and its merged records.

    Columns: run, step, n_sequences, n_tokens (non-special, = N), mean_response_length (mean
    ``n_tokens`` of the responses, special tokens included), mean_entropy (nats, over N),
    threshold, n_high_entropy, ``n_high_entropy_<category>`` for every lexicon category and
    ``other`` (tokens without letters count as ``other``, so they sum to n_high_entropy),
    pass1_generated (mean of the responses' ``correct`` where not null; null when all are).

    N, mean_entropy, threshold and n_high_entropy come from ``entropy_thresholds``; the
    category counts are counted in the merged file (its ``category`` column where
    ``is_high_entropy``; two columns, about 0.5 s for 20 M records), so Figure 2's counts
    are read from the records the step published.

    Args:
        entropy_thresholds: ``<run>.step_<step>.entropy_thresholds`` (one row).
        sequences: ``<run>.step_<step>.sequences`` (the merged responses).
        token_records: ``<run>.step_<step>.token_records`` (the merged records).
        aggregation: ``params:aggregation`` (the lexicon's categories).

    Raises:
        InputDataError: the merged file marks another number of high-entropy tokens than
            ``entropy_thresholds`` says (a file of another aggregation: rerun this step).
    """
    lexicon = parse_lexicon(parameter_section(aggregation, "aggregation").get("lexicon"))
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
            f"{_source(token_records)} marks {sum(counts.values())} high-entropy tokens but "
            f"entropy_thresholds of {threshold['run']}.step_{threshold['step']} says "
            f"{threshold['n_high_entropy']}: rerun the aggregation of this step"
        )
    row = {
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
    return pd.DataFrame([row])


# ------------------------------------------------------------------------------- all steps


def combine_tables(*tables: pd.DataFrame) -> pd.DataFrame:
    """Stack per-step tables (each carries run and step) in (run, step) pipeline order."""
    frames = [t for t in tables if len(t)]
    if not frames:
        return tables[0].iloc[:0] if tables else pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def combine_high_entropy_positions(*per_step: ds.Dataset) -> Iterator[pa.Table]:
    """Stream every step's ``high_entropy_positions`` into one table (run, step order)."""

    def rows() -> Iterator[pa.Table]:
        for dataset in per_step:
            for batch in _batches(dataset, HIGH_ENTROPY_POSITION_SCHEMA.names):
                yield pa.Table.from_batches([batch]).cast(HIGH_ENTROPY_POSITION_SCHEMA)

    return _prefetched(_rechunked(rows(), HIGH_ENTROPY_POSITION_SCHEMA, _DEFAULT_CHUNK))


# ------------------------------------------------------------------------------- helpers


def parameter_section(value: Any, name: str) -> dict[str, Any]:
    """``params:<name>`` as a mapping: ``None`` (an empty YAML section) means every default.

    Raises:
        ConfigError: the section is not a mapping.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(
            f"parameter `{name}` must be a mapping (parameters_{name}.yml), got {value!r}"
        )
    return value


def _shard_config(generation: dict[str, Any]) -> tuple[int, int]:
    values = []
    generation = parameter_section(generation, "generation")
    for name in ("num_shards", "samples_per_prompt"):
        value = generation.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"generation.{name} must be a positive integer, got {value!r}")
        values.append(value)
    return values[0], values[1]


def _chunk_records(aggregation: dict[str, Any]) -> int:
    value = parameter_section(aggregation, "aggregation").get("chunk_records", _DEFAULT_CHUNK)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"aggregation.chunk_records must be a positive integer, got {value!r}")
    return value


def _source(dataset: ds.Dataset) -> str:
    """The file behind a dataset, for messages."""
    files = getattr(dataset, "files", None)
    return files[0] if files else "<in-memory dataset>"


def _check_shard_count(
    datasets: tuple[ds.Dataset, ...], num_shards: int, label: str, kind: str
) -> None:
    if len(datasets) > num_shards:
        extra = ", ".join(
            f"shard {k} ({_source(d)})" for k, d in enumerate(datasets) if k >= num_shards
        )
        raise InputDataError(
            f"{label}: unexpected extra {kind} {extra}: generation.num_shards is {num_shards}"
        )
    if len(datasets) < num_shards:
        missing = ", ".join(f"{label}.shard_{k}.{kind}" for k in range(len(datasets), num_shards))
        raise InputDataError(
            f"{label}: missing shard(s) {missing}: generation.num_shards is {num_shards} but "
            f"{len(datasets)} shard(s) given; rerun generation for the missing shard(s)"
        )


@dataclass(frozen=True)
class _CurrentGeneration:
    """The current configuration a step's shard files are compared with."""

    generation: dict[str, Any]
    prompt_params: dict[str, Any] | None
    checkpoints: dict[str, Any] | None
    prompts: pd.DataFrame | None

    def checkpoint(self, run: str, step: int) -> dict[str, Any] | None:
        steps = ((self.checkpoints or {}).get(run) or {}).get("steps") or {}
        return steps.get(str(step))

    def prompt_ids(self, shard: int, num_shards: int) -> list[str] | None:
        if self.prompts is None or "prompt_id" not in self.prompts.columns:
            return None
        mine = self.prompts["prompt_index"].astype(np.int64) % num_shards == shard
        return self.prompts.loc[mine, "prompt_id"].astype(str).tolist()


def _check_generation_metadata(
    dataset: ds.Dataset,
    shard: int,
    num_shards: int,
    run: str,
    step: int,
    *,
    current: _CurrentGeneration | None = None,
) -> dict[str, Any]:
    """Compare a shard file's ``hed.generation`` metadata (when present) with the current setup.

    Checks the shard's place (num_shards, run, step, shard) and, given ``current``, every
    record-shaping parameter (:func:`hed.shard_metadata.stale_field`).

    Returns:
        The decoded metadata (``{}`` for a file without it).

    Raises:
        InputDataError: a mismatch, in one line naming the file, the field, both values and
            the fix.
    """
    raw = (dataset.schema.metadata or {}).get(GENERATION_METADATA_KEY)
    if raw is None:
        return {}
    try:
        meta = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(meta, dict):
        return {}
    source = _source(dataset)
    if meta.get("num_shards", num_shards) != num_shards:
        extra = ", ".join(f"shard {k}" for k in range(num_shards, int(meta["num_shards"])))
        hint = f"{extra} would be unexpected extra shard(s); " if extra else ""
        raise InputDataError(
            f"{source} was generated with num_shards={meta['num_shards']} but "
            f"generation.num_shards is {num_shards}: {hint}regenerate {run}.step_{step} "
            f"or set generation.num_shards: {meta['num_shards']}"
        )
    found = (meta.get("run", run), meta.get("step", step), meta.get("shard", shard))
    if found != (run, step, shard):
        raise InputDataError(
            f"{source} holds {found[0]}.step_{found[1]}.shard_{found[2]} "
            f"(its hed.generation metadata) but is read as {run}.step_{step}.shard_{shard}"
        )
    if current is None:
        return meta
    checkpoint = current.checkpoint(run, step)
    if checkpoint is None and isinstance(meta.get("checkpoint"), dict):
        raise InputDataError(
            f"{source}: the checkpoints dataset has no entry for {run} step {step}, so the "
            f"shard's checkpoint cannot be checked; rerun `kedro run --pipelines generation "
            f"--nodes resolve_checkpoints` with this configuration"
        )
    stale = stale_field(
        meta,
        generation=current.generation,
        prompt_params=current.prompt_params,
        checkpoint=checkpoint,
        prompt_ids=current.prompt_ids(shard, num_shards),
    )
    if stale is not None:
        raise InputDataError(
            f"{source}: stale shard: {stale.field} was {stale.recorded} when it was generated "
            f"but is {stale.current} now; delete {_shard_folder(source)}/ and rerun generation "
            f"(`kedro run --pipelines generation --only-missing-outputs`), or {stale.restore}"
        )
    return meta


def _check_same_dtype(
    dtypes: dict[str, str], meta: dict[str, Any], source: str, label: str
) -> None:
    """All shards of a step ran in one dtype (``auto`` resolves per device: bf16 vs fp32)."""
    dtype = meta.get("dtype")
    if dtype is None:
        return
    if dtypes and dtype not in dtypes:
        other, first = next(iter(dtypes.items()))
        raise InputDataError(
            f"{label}: {source} was generated in {dtype} but {first} in {other} (generation.dtype "
            f"auto is bfloat16 on CUDA, float32 on CPU); regenerate one of them on the other "
            f"device or set generation.dtype explicitly"
        )
    dtypes.setdefault(dtype, source)


def _shard_folder(source: str) -> str:
    """The folder of a step's shard files: the parent of ``shard_<k>[.sequences].parquet/``."""
    path = Path(source)
    for folder in path.parents:
        if _SHARD_FILE.match(folder.name):
            return str(folder.parent)
    return str(path.parent)


def _check_columns(dataset: ds.Dataset, schema: pa.Schema, source: str) -> None:
    present = dataset.schema
    missing = [name for name in schema.names if name not in present.names]
    if missing:
        raise InputDataError(
            f"{source}: missing column(s) {', '.join(missing)}; rerun generation for this shard"
        )
    for field in schema:
        have = present.field(field.name).type
        if have != field.type:
            try:
                pa.array([], type=have).cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise InputDataError(
                    f"{source}: column {field.name} is {have}, expected {field.type}"
                ) from None


def _read_table(dataset: ds.Dataset, schema: pa.Schema) -> pa.Table:
    source = _source(dataset)
    _check_columns(dataset, schema, source)
    return dataset.to_table(columns=schema.names).cast(schema)


def _batches(
    dataset: ds.Dataset, columns: list[str], batch_rows: int = _READ_BATCH
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


def _column_numpy(batch: pa.RecordBatch, name: str, source: str, dtype: Any) -> np.ndarray:
    column = batch.column(name)
    if column.null_count:
        raise InputDataError(
            f"{source}: column {name} has {column.null_count} null value(s); "
            "rerun generation for this shard"
        )
    return column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _raise_bad_entropy(
    dataset: ds.Dataset, source: str, rows: np.ndarray, entropy: np.ndarray
) -> None:
    keys = dataset.to_table(columns=_KEYS).take(pa.array(rows[:_EXAMPLES]))
    value = entropy[np.flatnonzero(~np.isfinite(entropy))[0]]
    examples = ", ".join(str(tuple(r.values())) for r in keys.to_pylist())
    raise InputDataError(
        f"{source}: column entropy is {value} at (prompt_index, sample_index, position) {examples}"
        f"{' …' if rows.size > _EXAMPLES else ''} ({rows.size} in this batch); "
        "rerun generation for this shard"
    )


def _examples(keys: Iterable[tuple], total: int) -> str:
    shown = ", ".join(str(tuple(int(v) for v in key)) for key in list(keys)[:_EXAMPLES])
    return f"{shown}{' …' if total > _EXAMPLES else ''} ({total} in all)"


def _check_response_keys(
    frame: pd.DataFrame,
    prompts: pd.DataFrame,
    *,
    num_shards: int,
    samples: int,
    sources: list[str],
    label: str,
) -> None:
    """Coverage of (prompt_index, sample_index) over the shards; raise on the first problem."""
    # a prompt in more than one shard
    shards_per_prompt = frame.groupby("prompt_index")["_shard"].unique()
    duplicated = shards_per_prompt[shards_per_prompt.map(len) > 1]
    if len(duplicated):
        prompt, shards = int(duplicated.index[0]), sorted(int(s) for s in duplicated.iloc[0])
        where = " and ".join(f"shard {s} ({sources[s]})" for s in shards)
        more = (
            f" (and {len(duplicated) - 1} more duplicated prompt(s))" if len(duplicated) > 1 else ""
        )
        raise InputDataError(
            f"{label}: duplicated prompt: prompt_index {prompt} appears in {where}{more}"
        )
    # the `shard` column and the sharding rule
    for shard, part in frame.groupby("_shard"):
        wrong_column = part[part["shard"] != shard]
        if len(wrong_column):
            raise InputDataError(
                f"{label}: {sources[shard]} is read as shard {shard} but its column shard holds "
                f"{int(wrong_column['shard'].iloc[0])}"
            )
        foreign = part[part["prompt_index"] % num_shards != shard]
        if len(foreign):
            prompts_ = sorted(set(foreign["prompt_index"].astype(int)))
            raise InputDataError(
                f"{label}: shard {shard} ({sources[shard]}) holds prompt_index "
                f"{', '.join(map(str, prompts_[:_EXAMPLES]))}"
                f"{' …' if len(prompts_) > _EXAMPLES else ''} ({len(prompts_)} in all) of other "
                f"shards: prompt_index % num_shards ({num_shards}) must equal the shard"
            )
        repeated = part[part.duplicated(["prompt_index", "sample_index"])]
        if len(repeated):
            keys = repeated[["prompt_index", "sample_index"]].itertuples(index=False)
            raise InputDataError(
                f"{label}: duplicated responses {_RESPONSE_KEY} {_examples(keys, len(repeated))} "
                f"in shard {shard} ({sources[shard]})"
            )
    expected_prompts = np.sort(prompts["prompt_index"].to_numpy().astype(np.int64))
    unexpected = frame[
        ~frame["prompt_index"].isin(expected_prompts)
        | (frame["sample_index"] >= samples)
        | (frame["sample_index"] < 0)
    ]
    if len(unexpected):
        shard = int(unexpected["_shard"].iloc[0])
        keys = unexpected[["prompt_index", "sample_index"]].itertuples(index=False)
        raise InputDataError(
            f"{label}: unexpected responses {_RESPONSE_KEY} {_examples(keys, len(unexpected))} "
            f"in shard {shard} ({sources[shard]}): not in the prompt set "
            f"({len(expected_prompts)} prompts) "
            f"× samples_per_prompt ({samples})"
        )
    present = set(
        zip(frame["prompt_index"].astype(int), frame["sample_index"].astype(int), strict=True)
    )
    missing = [
        (p, s) for p in expected_prompts.tolist() for s in range(samples) if (p, s) not in present
    ]
    if missing:
        shards = sorted({p % num_shards for p, _ in missing})
        where = ", ".join(f"shard {k} ({sources[k]})" for k in shards)
        raise InputDataError(
            f"{label}: missing responses {_RESPONSE_KEY} {_examples(missing, len(missing))}, "
            f"expected in {where}; rerun generation for them"
        )


def _scan_record_keys(dataset: ds.Dataset, shard: int, source: str) -> pd.DataFrame:
    """One streaming pass over a shard's keys: order, duplicates, per-response counts.

    Returns:
        prompt_index, sample_index, n_records, first_position, last_position per response.

    Raises:
        InputDataError: out-of-order or repeated keys, a wrong ``shard`` column, null keys.
    """
    groups = []
    previous = None  # last key of the previous batch
    duplicates: list[tuple[int, int, int]] = []
    n_duplicates = 0
    row = 0
    for batch in _batches(dataset, [*_KEYS, "shard"]):
        p, s, pos, shard_column = (
            _column_numpy(batch, name, source, np.int64) for name in (*_KEYS, "shard")
        )
        if shard_column.size and (shard_column != shard).any():
            bad = int(shard_column[np.flatnonzero(shard_column != shard)[0]])
            raise InputDataError(
                f"{source} is read as shard {shard} but its column shard holds {bad}"
            )
        if previous is not None:
            p, s, pos = (
                np.concatenate([[v], a]) for v, a in zip(previous, (p, s, pos), strict=True)
            )
        dp, dsample, dpos = np.diff(p), np.diff(s), np.diff(pos)
        same = (dp == 0) & (dsample == 0)
        increasing = (dp > 0) | ((dp == 0) & (dsample > 0)) | (same & (dpos > 0))
        if not increasing.all():
            equal = np.flatnonzero(same & (dpos == 0))
            n_duplicates += equal.size
            duplicates += [
                (p[i + 1], s[i + 1], pos[i + 1]) for i in equal[: _EXAMPLES - len(duplicates)]
            ]
            wrong = np.flatnonzero(~increasing & ~(same & (dpos == 0)))
            if wrong.size:
                i = int(wrong[0])
                raise InputDataError(
                    f"{source}: records are not in (prompt_index, sample_index, position) order: "
                    f"{(int(p[i]), int(s[i]), int(pos[i]))} is followed by "
                    f"{(int(p[i + 1]), int(s[i + 1]), int(pos[i + 1]))} near row {row + i}"
                )
        starts = _group_starts(same, previous is not None)
        ends = np.append(starts[1:], p.size)
        groups.append(
            pd.DataFrame(
                {
                    "prompt_index": p[starts],
                    "sample_index": s[starts],
                    "n_records": ends - starts,
                    "first_position": pos[starts],
                    "last_position": pos[ends - 1],
                }
            )
        )
        previous = (p[-1], s[-1], pos[-1])
        row += batch.num_rows
    if n_duplicates:
        raise InputDataError(
            f"{source}: duplicated token records (prompt_index, sample_index, position) "
            f"{_examples(duplicates, n_duplicates)}; rerun generation for this shard"
        )
    if not groups:
        return pd.DataFrame(
            columns=["prompt_index", "sample_index", "n_records", "first_position", "last_position"]
        )
    frame = pd.concat(groups, ignore_index=True)
    return frame.groupby(["prompt_index", "sample_index"], as_index=False, sort=False).agg(
        n_records=("n_records", "sum"),
        first_position=("first_position", "first"),
        last_position=("last_position", "last"),
    )


def _group_starts(same: np.ndarray, has_previous: bool) -> np.ndarray:
    """Rows where a response (or the continuation of the previous batch's last one) starts.

    Row 0 is the previous batch's last key when ``has_previous``; it is not counted again.
    """
    starts = np.flatnonzero(~same) + 1
    if not has_previous:
        return np.concatenate([[0], starts])
    return np.union1d([1], starts) if same.size else starts


def _compare_records_to_responses(found: pd.DataFrame, expected: pd.DataFrame, source: str) -> None:
    merged = expected.merge(found, on=["prompt_index", "sample_index"], how="outer", indicator=True)
    orphan = merged[merged["_merge"] == "right_only"]
    if len(orphan):
        keys = orphan[["prompt_index", "sample_index"]].itertuples(index=False)
        raise InputDataError(
            f"{source}: token records of responses {_RESPONSE_KEY} {_examples(keys, len(orphan))} "
            f"that have no row in the shard's sequences file"
        )
    absent = merged[(merged["_merge"] == "left_only") & (merged["n_tokens"] > 0)]
    if len(absent):
        keys = absent[["prompt_index", "sample_index"]].itertuples(index=False)
        raise InputDataError(
            f"{source}: no token records for responses {_RESPONSE_KEY} "
            f"{_examples(keys, len(absent))}"
        )
    both = merged[merged["_merge"] == "both"]
    bad = both[(both["n_records"] != both["n_tokens"]) | (both["first_position"] != 0)]
    if len(bad):
        r = bad.iloc[0]
        raise InputDataError(
            f"{source}: response {_RESPONSE_KEY} ({int(r.prompt_index)}, {int(r.sample_index)}) "
            f"has {int(r.n_records)} token records (positions {int(r.first_position)}–"
            f"{int(r.last_position)}) but "
            f"n_tokens = {int(r.n_tokens)} ({len(bad)} response(s) in all)"
        )


class _ShardCursor:
    """Reads one shard's records in order and hands them out prompt by prompt."""

    def __init__(self, dataset: ds.Dataset, columns: list[str]) -> None:
        self._batches = _batches(dataset, columns)
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


def _rechunked(tables: Iterable[pa.Table], schema: pa.Schema, rows: int) -> Iterator[pa.Table]:
    """Regroup a stream of small tables into tables of about ``rows`` rows (one row group each)."""
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


def _prefetched(chunks: Iterator[Any], depth: int = 2) -> Iterator[Any]:
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


def _candidate_word_index(candidate_words: pd.DataFrame, index: dict[str, int]) -> np.ndarray:
    """token_id → index of its word in ``index`` (grown), −1 for unknown ids and empty words."""
    if candidate_words.empty:
        return np.full(0, -1, dtype=np.int64)
    ids = candidate_words["token_id"].to_numpy().astype(np.int64)
    lookup = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    words = candidate_words["word"].fillna("").astype(str).tolist()
    for token_id, word in zip(ids.tolist(), words, strict=True):
        if word:
            lookup[token_id] = index.setdefault(word, len(index))
    return lookup


def _candidate_indices(
    batch: pa.RecordBatch, word_idx: np.ndarray, candidate_index: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Word index and probability of every top-k candidate of a batch with a known word.

    The candidate that is the sampled token itself takes the sampled token's word (its word
    in context, e.g. ``alternatively`` for ``"Altern"``); the others their own word.
    """
    lists = batch.column("topk_token_ids")
    ids = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    mass = (
        pc.list_flatten(batch.column("topk_probs"))
        .to_numpy(zero_copy_only=False)
        .astype(np.float64)
    )
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    row = np.repeat(np.arange(len(lengths)), lengths)
    cand = np.full(ids.size, -1, dtype=np.int64)
    known = (ids >= 0) & (ids < candidate_index.size)
    cand[known] = candidate_index[ids[known]]
    sampled = ids == batch.column("token_id").to_numpy(zero_copy_only=False)[row]
    cand[sampled] = word_idx[row[sampled]]
    keep = cand >= 0
    return cand[keep], mass[keep]


def _word_indices(words: pa.Array | pa.ChunkedArray, index: dict[str, int]) -> np.ndarray:
    """Index in ``index`` (grown) of every word of a batch."""
    encoded = pc.dictionary_encode(words)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    local = np.array(
        [index.setdefault(w or "", len(index)) for w in encoded.dictionary.to_pylist()],
        dtype=np.int64,
    )
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    return local[codes] if local.size else np.zeros(len(words), dtype=np.int64)


def _grow(values: np.ndarray, size: int) -> np.ndarray:
    return np.concatenate([values, np.zeros(size - values.size)]) if values.size < size else values


def _share(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    total = values.sum()
    return values / total if total > 0 else np.full(values.size, np.nan)
