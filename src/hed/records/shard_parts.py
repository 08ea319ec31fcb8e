"""Crash-safe shards: finished sequences kept on disk while a shard is generated.

A shard of a large step takes hours; collecting it in memory and writing it at the end loses
everything to a crash, an OOM kill or a pre-empted job. :class:`ShardParts` is the shard's
*partial area*, a folder beside the shard's files
(``data/02_intermediate/token_records/<run>/step_<step>/.partial/shard_<k>/``)::

    binding.json        what the parts belong to: the shard's generation metadata
                        (sampling, dtype, device, the checkpoint fingerprint, the prompt ids,
                        the chat template, HED's version) and its sha256
    part_000000.parquet one row per finished sequence, written atomically
    part_000001.parquet ...

:meth:`ShardParts.open` returns the sequences kept for the same binding, or discards (with a
log line) parts bound to other parameters or another checkpoint.
:meth:`ShardParts.write_through` passes the sequences of any iterator on (a backend's
``generate``, :class:`hed.decode.backend.DecodingBackend`) and writes them, a part per
``every`` sequences and at the end. The versioned shard files are written by the catalog
only from the complete list, so a partial shard is never taken for a complete one;
:class:`hed.hooks.ShardPartsHooks` removes the area once both shard files are saved.

Sequences are any objects with the attributes of :class:`hed.records.sequence.GeneratedSequence`
(:data:`PART_FIELDS`); they come back as ``GeneratedSequence``. Values round-trip exactly
(int32 / float32 arrays, strings as written).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hed.records.atomic_io import atomic_path, write_error
from hed.records.parquet_files import write_parquet_atomically
from hed.records.sequence import MASS_COLUMNS, GeneratedSequence

logger = logging.getLogger(__name__)

BINDING_FILE = "binding.json"
PART_GLOB = "part_*.parquet"

#: One row per sequence; list columns hold the per-position records.
PART_SCHEMA = pa.schema(
    [
        pa.field("prompt_index", pa.int32()),
        pa.field("prompt_id", pa.string()),
        pa.field("sample_index", pa.int32()),
        pa.field("token_ids", pa.list_(pa.int32())),
        pa.field("entropy", pa.list_(pa.float32())),
        pa.field("logprob", pa.list_(pa.float32())),
        pa.field("topk_token_ids", pa.list_(pa.list_(pa.int32()))),
        pa.field("topk_probs", pa.list_(pa.list_(pa.float32()))),
        pa.field("token_texts", pa.list_(pa.string())),
        pa.field("response_text", pa.string()),
        pa.field("finish_reason", pa.string()),
        *(pa.field(name, pa.list_(pa.float32())) for name in MASS_COLUMNS),  # null: not recorded
    ]
)
PART_FIELDS = tuple(PART_SCHEMA.names)


def binding_key(binding: dict[str, Any]) -> str:
    """sha256 of ``binding`` as canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(binding, sort_keys=True).encode()).hexdigest()


def _first_difference(then: dict[str, Any], now: dict[str, Any], prefix: str = "") -> str:
    for key in sorted(set(then) | set(now)):
        a, b = then.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            if found := _first_difference(a, b, f"{prefix}{key}."):
                return found
        elif a != b:
            return f"{prefix}{key} was {a!r}, now {b!r}"
    return ""


def _list_column(arrays: list[np.ndarray], dtype: Any) -> pa.Array:
    """(n_i,) arrays → list<dtype>."""
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def _matrix_column(arrays: list[np.ndarray], dtype: Any) -> pa.Array:
    """(n_i, k) arrays → list<list<dtype>> (each inner list k long)."""
    k = arrays[0].shape[1] if arrays else 1
    rows = [a.reshape(-1, k) for a in arrays]
    inner = _list_column([r.reshape(-1) for r in rows], dtype)  # one flat list per sequence
    flat = inner.values
    inner_offsets = np.arange(0, len(flat) + 1, k, dtype=np.int32)
    per_position = pa.ListArray.from_arrays(pa.array(inner_offsets), flat)
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), per_position)


def sequences_to_table(sequences: list[Any]) -> pa.Table:
    """Sequences → a table of :data:`PART_SCHEMA`, one row each, in the given order."""
    columns = {
        "prompt_index": pa.array([int(s.prompt_index) for s in sequences], pa.int32()),
        "prompt_id": pa.array([str(s.prompt_id) for s in sequences], pa.string()),
        "sample_index": pa.array([int(s.sample_index) for s in sequences], pa.int32()),
        "token_ids": _list_column([np.asarray(s.token_ids) for s in sequences], np.int32),
        "entropy": _list_column([np.asarray(s.entropy) for s in sequences], np.float32),
        "logprob": _list_column([np.asarray(s.logprob) for s in sequences], np.float32),
        "topk_token_ids": _matrix_column(
            [np.asarray(s.topk_token_ids) for s in sequences], np.int32
        ),
        "topk_probs": _matrix_column([np.asarray(s.topk_probs) for s in sequences], np.float32),
        "token_texts": pa.array([list(s.token_texts) for s in sequences], pa.list_(pa.string())),
        "response_text": pa.array([s.response_text for s in sequences], pa.string()),
        "finish_reason": pa.array([s.finish_reason for s in sequences], pa.string()),
        **{name: _nullable_list_column(sequences, name) for name in MASS_COLUMNS},
    }
    return pa.table(columns, schema=PART_SCHEMA)


def _nullable_list_column(sequences: list[Any], name: str) -> pa.Array:
    """list<float32> of attribute ``name`` per sequence; null where it is None."""
    values = [getattr(s, name, None) for s in sequences]
    return pa.array(
        [None if v is None else np.asarray(v, np.float32) for v in values],
        pa.list_(pa.float32()),
    )


def _split(column: pa.ChunkedArray, dtype: Any, k: int | None = None) -> list[np.ndarray]:
    array = column.combine_chunks()
    offsets = array.offsets.to_numpy()
    values = array.flatten()
    if k is not None:
        flat = values.flatten().to_numpy(zero_copy_only=False).astype(dtype)
        values_np = flat.reshape(-1, k) if len(flat) else np.zeros((0, k), dtype)
    else:
        values_np = values.to_numpy(zero_copy_only=False).astype(dtype)
    return [values_np[offsets[i] : offsets[i + 1]] for i in range(len(array))]


def table_to_sequences(table: pa.Table) -> list[Any]:
    """A :data:`PART_SCHEMA` table → :class:`hed.records.sequence.GeneratedSequence` objects."""

    if table.num_rows == 0:
        return []
    first = table.column("topk_token_ids").combine_chunks()
    k = len(first.flatten()[0]) if len(first.flatten()) else 1
    arrays = {
        "token_ids": _split(table.column("token_ids"), np.int32),
        "entropy": _split(table.column("entropy"), np.float32),
        "logprob": _split(table.column("logprob"), np.float32),
        "topk_token_ids": _split(table.column("topk_token_ids"), np.int32, k),
        "topk_probs": _split(table.column("topk_probs"), np.float32, k),
    }
    plain = {
        name: table.column(name).to_pylist()
        for name in (
            "prompt_index",
            "prompt_id",
            "sample_index",
            "token_texts",
            "response_text",
            "finish_reason",
        )
    }
    for name in MASS_COLUMNS:  # parts written before the columns existed lack them
        if name in table.column_names:
            column = table.column(name).to_pylist()
            arrays[name] = [None if v is None else np.asarray(v, np.float32) for v in column]
    return [
        GeneratedSequence(
            prompt_index=plain["prompt_index"][i],
            prompt_id=plain["prompt_id"][i],
            sample_index=plain["sample_index"][i],
            token_texts=plain["token_texts"][i],
            response_text=plain["response_text"][i],
            finish_reason=plain["finish_reason"][i],
            **{name: values[i] for name, values in arrays.items()},
        )
        for i in range(table.num_rows)
    ]


class ShardParts:
    """The partial area of one shard: a folder of part files bound to its generation metadata.

    Args:
        folder: the area, e.g. ``.../token_records/<run>/step_<step>/.partial/shard_<k>``.

    Raises:
        OutputWriteError: (from :meth:`open` and :meth:`write`) the folder is not writable.
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self._key: str | None = None
        self._next_part = 0

    def __repr__(self) -> str:
        return f"ShardParts({str(self.folder)!r})"

    def open(self, binding: dict[str, Any], label: str = "") -> list[Any]:
        """Bind the area to ``binding``; return the sequences kept for it.

        Parts bound to anything else (other sampling parameters, dtype, prompts, HED version,
        or another checkpoint fingerprint) are removed with a warning naming the first field
        that differs. A part that cannot be read (not HED's: HED writes them atomically) is
        removed with a warning and its sequences are generated again.

        Args:
            binding: the shard's generation metadata (JSON-serialisable).
            label: the shard, for log lines.

        Returns:
            The kept sequences, in the order they were written.
        """
        key = binding_key(binding)
        label = label or str(self.folder)
        recorded = self._binding()
        if recorded is not None and recorded.get("key") != key:
            n_parts = len(list(self.folder.glob(PART_GLOB)))
            reason = _first_difference(recorded.get("binding") or {}, binding) or "binding differs"
            logger.warning(
                "%s: discarding %d partial part file(s) in %s: they belong to other generation "
                "parameters or another checkpoint (%s)",
                label,
                n_parts,
                self.folder,
                reason,
            )
            self.clear()
        elif recorded is None and self.folder.exists():
            self.clear()  # no binding: left by a process killed while creating the area
        self._write_binding(key, binding)
        self._key = key
        kept: list[Any] = []
        parts = sorted(self.folder.glob(PART_GLOB))
        for part in parts:
            try:
                kept += table_to_sequences(pq.read_table(part, schema=PART_SCHEMA))
            except (pa.ArrowInvalid, OSError, ValueError) as exc:
                logger.warning("%s: removing unreadable part %s (%s)", label, part, exc)
                part.unlink(missing_ok=True)
        self._next_part = 1 + max((int(p.stem.split("_")[1]) for p in parts), default=-1)
        return kept

    def write(self, sequences: list[Any]) -> Path | None:
        """Write ``sequences`` as the next part file (atomically); None when empty.

        Raises:
            RuntimeError: :meth:`open` was not called first.
            OutputWriteError: the folder is not writable or the disk is full.
        """
        if self._key is None:
            raise RuntimeError("ShardParts.write before open()")
        if not sequences:
            return None
        path = self.folder / f"part_{self._next_part:06d}.parquet"
        write_parquet_atomically(path, sequences_to_table(sequences))
        self._next_part += 1
        return path

    def write_through(self, sequences: Iterable[Any], every: int) -> Iterator[Any]:
        """Pass ``sequences`` on, writing a part each ``every`` sequences and at the end.

        Args:
            sequences: any iterator of finished sequences (a backend's output).
            every: sequences per part file (the hf backend's ``batch_size`` writes one part
                per ``generate`` call).
        """
        pending: list[Any] = []
        for sequence in sequences:
            pending.append(sequence)
            yield sequence
            if len(pending) >= max(1, int(every)):
                self.write(pending)
                pending = []
        self.write(pending)

    def clear(self) -> None:
        """Remove the area (after the shard's files are saved, or when its binding is stale)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self._next_part = 0
        partial_root = self.folder.parent
        if partial_root.name == ".partial" and partial_root.is_dir():
            try:
                partial_root.rmdir()  # only when no other shard's area is left
            except OSError:
                pass

    def _binding(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.folder / BINDING_FILE).read_text())
        except (OSError, ValueError):
            return None

    def _write_binding(self, key: str, binding: dict[str, Any]) -> None:
        path = self.folder / BINDING_FILE
        try:
            with atomic_path(path) as temp:
                temp.write_text(
                    json.dumps({"key": key, "binding": binding}, sort_keys=True, indent=1)
                )
        except OSError as exc:
            raise write_error(path, exc) from None


def keep_and_generate(
    parts: ShardParts,
    binding: dict[str, Any],
    generate: Callable[[set[tuple[int, int]]], Iterable[Any]],
    *,
    every: int,
    label: str = "",
) -> tuple[list[Any], int]:
    """The sequences of a shard: those kept in ``parts`` plus newly generated ones.

    Args:
        parts: the shard's partial area.
        binding: the shard's generation metadata.
        generate: called with the kept ``(prompt_index, sample_index)`` pairs; returns an
            iterator of the sequences still missing (any backend).
        every: sequences per part file.
        label: the shard, for the log line.

    Returns:
        ``(every sequence of the shard, number kept)``; logs how many were kept and generated.
    """
    kept = parts.open(binding, label)
    done = {(int(s.prompt_index), int(s.sample_index)) for s in kept}
    if kept:
        logger.info(
            "%s: kept %d finished sequence(s) of an interrupted run from %s",
            label,
            len(kept),
            parts.folder,
        )
    new = list(parts.write_through(generate(done), every))
    logger.info("%s: %d (prompt, sample) pair(s) kept, %d generated", label, len(kept), len(new))
    return kept + new, len(kept)


__all__ = [
    "PART_FIELDS",
    "PART_SCHEMA",
    "ShardParts",
    "binding_key",
    "keep_and_generate",
    "sequences_to_table",
    "table_to_sequences",
]
