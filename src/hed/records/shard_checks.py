"""Checks of a step's shard files before they are merged: staleness, coverage, key order.

A step's shards must be *current* (each file's ``hed.generation`` metadata matches the
configuration: :mod:`hed.records.shard_metadata`), *cover* the step (every (prompt_index,
sample_index) of the prompt set exactly once, in shard ``prompt_index % num_shards``), be in
*key order* (strictly increasing (prompt_index, sample_index, position), so a repeat is a
duplicated record), and their token records must agree with their responses (positions
``0 .. n_tokens−1``). Every failure is an :class:`hed.errors.InputDataError` in one line
naming the file, the first offending keys and the fix. Streaming (one batch per shard) keeps
memory flat: :mod:`hed.records.arrow_stream`. The key checks themselves (coverage, key order,
records against responses) are in :mod:`hed.records.shard_keys`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from hed.core.command_line import update_command
from hed.errors import InputDataError
from hed.records.arrow_stream import column_numpy, dataset_source, record_batches
from hed.records.schema import OPTIONAL_RECORD_COLUMNS, SEQUENCE_SCHEMA, TOKEN_RECORD_SCHEMA
from hed.records.shard_keys import (  # noqa: F401 - check_response_keys, examples re-exported
    RESPONSE_KEY,
    check_response_keys,
    compare_records_to_responses,
    examples,
    raise_bad_entropy,
    scan_record_keys,
)
from hed.records.shard_metadata import (
    GENERATION_METADATA_KEY,
    WORD_MASS_METADATA_KEY,
    mass_lexicon_sha256,
    stale_field,
)

_SHARD_FILE = re.compile(r"^shard_\d+(\.sequences)?\.parquet$")


def checked_responses(
    shard_sequences: tuple[ds.Dataset, ...],
    current: CurrentGeneration,
    *,
    num_shards: int,
    samples: int,
    run: str,
    step: int,
) -> pd.DataFrame:
    """Check that the shards are current and hold every response of the step once, in its shard.

    Args:
        shard_sequences: ``<run>.step_<step>.shard_<k>.sequences`` for k = 0, 1, ...
        current: the configuration the shards are compared with (its ``prompts`` is the
            expected prompt set).
        num_shards, samples: ``generation.num_shards`` and ``generation.samples_per_prompt``.
        run, step: the step.

    Returns:
        The responses of all shards (SEQUENCE_SCHEMA columns), sorted by (prompt_index,
        sample_index).

    Raises:
        InputDataError: a stale shard (names the file, the field, the recorded and the current
            value and the fix), shards generated with different dtypes, a missing or
            unexpected extra shard, a duplicated prompt, a response in the wrong shard, a
            missing, duplicated or unexpected response, a missing column. Shards scored from a
            trainer's dump (``source: verl_dump`` in their metadata) hold the responses the
            dump has, so no response is expected of every prompt × samples_per_prompt.
    """
    label = f"{run}.step_{step}"
    check_shard_count(shard_sequences, num_shards, label, "sequences")
    dtypes: dict[str, str] = {}
    frames = []
    from_dump = True
    for shard, dataset in enumerate(shard_sequences):
        recorded = check_generation_metadata(dataset, shard, num_shards, run, step, current=current)
        check_same_dtype(dtypes, recorded, dataset_source(dataset), label)
        from_dump = from_dump and recorded.get("source") == "verl_dump"
        table = read_table(dataset, SEQUENCE_SCHEMA)
        frames.append(table.to_pandas().assign(_shard=shard))
    frame = pd.concat(frames, ignore_index=True)
    sources = [dataset_source(d) for d in shard_sequences]
    check_response_keys(
        frame,
        current.prompts,
        num_shards=num_shards,
        samples=samples,
        sources=sources,
        label=label,
        every_sample=not from_dump,
    )
    return (
        frame.sort_values(["prompt_index", "sample_index"])
        .drop(columns="_shard")
        .reset_index(drop=True)
    )


def shard_report(
    sequences: pd.DataFrame,
    shard_records: tuple[ds.Dataset, ...],
    current: CurrentGeneration,
    *,
    num_shards: int,
    run: str,
    step: int,
) -> pd.DataFrame:
    """Check every shard's token records: current, and in agreement with the step's responses.

    Each shard's ``hed.generation`` metadata must match ``current`` (as in
    :func:`checked_responses`); each shard must have every token record column, rows in
    strictly increasing (prompt_index, sample_index, position) order, and for each of its
    responses exactly positions ``0 .. n_tokens−1``.

    Args:
        sequences: the checked responses (:func:`checked_responses`).
        shard_records: ``<run>.step_<step>.shard_<k>.token_records`` for k = 0, 1, ...
        current: the configuration the shards are compared with.
        num_shards: ``generation.num_shards``.
        run, step: the step.

    Returns:
        One row per shard: shard, source (file), n_sequences, n_records.

    Raises:
        InputDataError: a stale shard, a missing column or shard, duplicated or out-of-order
            records, records that do not match the responses (named with the file and the
            first keys).
    """
    label = f"{run}.step_{step}"
    check_shard_count(shard_records, num_shards, label, "token_records")
    rows = []
    for shard, dataset in enumerate(shard_records):
        source = dataset_source(dataset)
        check_columns(dataset, TOKEN_RECORD_SCHEMA, source, optional=OPTIONAL_RECORD_COLUMNS)
        check_generation_metadata(dataset, shard, num_shards, run, step, current=current)
        found = scan_record_keys(dataset, shard, source)
        expected = sequences.loc[
            sequences["shard"] == shard, ["prompt_index", "sample_index", "n_tokens"]
        ]
        compare_records_to_responses(found, expected, source)
        rows.append(
            {
                "shard": shard,
                "source": source,
                "n_sequences": len(expected),
                "n_records": int(found["n_records"].sum()),
            }
        )
    return pd.DataFrame(rows)


def non_special_entropies(
    shard_records: tuple[ds.Dataset, ...], n_records: int, *, run: str, step: int
) -> np.ndarray:
    """The entropies (nats, float32) of every non-special record of a step, in shard order.

    Reads only ``entropy`` and ``is_special``, one batch at a time, into one buffer of
    ``n_records`` float32 (4 bytes per record; the returned array is a view of its first N).

    Raises:
        InputDataError: an entropy is NaN, infinite or null (named with file and key), or the
            step has no non-special token.
    """
    buffer = np.empty(n_records, dtype=np.float32)
    n = 0
    for dataset in shard_records:
        source = dataset_source(dataset)
        row = 0
        for batch in record_batches(dataset, ["entropy", "is_special"]):
            entropy = column_numpy(batch, "entropy", source, np.float32)
            special = column_numpy(batch, "is_special", source, np.bool_)
            if not np.isfinite(entropy).all():
                raise_bad_entropy(
                    dataset, source, row + np.flatnonzero(~np.isfinite(entropy)), entropy
                )
            regular = entropy[~special]
            buffer[n : n + regular.size] = regular
            n += regular.size
            row += batch.num_rows
    if n == 0:
        files = ", ".join(dataset_source(d) for d in shard_records)
        raise InputDataError(
            f"{run}.step_{step}: zero non-special token records in {files}; nothing to threshold"
        )
    return buffer[:n]


def check_shard_count(
    datasets: tuple[ds.Dataset, ...], num_shards: int, label: str, kind: str
) -> None:
    """Exactly ``num_shards`` shard datasets of ``kind`` (``sequences``/``token_records``).

    Raises:
        InputDataError: an extra or a missing shard, named.
    """
    if len(datasets) > num_shards:
        extra = ", ".join(
            f"shard {k} ({dataset_source(d)})" for k, d in enumerate(datasets) if k >= num_shards
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
class CurrentGeneration:
    """The current configuration a step's shard files are compared with."""

    generation: dict[str, Any]
    prompt_params: dict[str, Any] | None
    checkpoints: dict[str, Any] | None
    prompts: pd.DataFrame | None

    def checkpoint(self, run: str, step: int) -> dict[str, Any] | None:
        """The ``checkpoints`` entry (fingerprint) of (run, step), or None."""
        steps = ((self.checkpoints or {}).get(run) or {}).get("steps") or {}
        return steps.get(str(step))

    def prompt_ids(self, shard: int, num_shards: int) -> list[str] | None:
        """The prompt ids shard ``shard`` must hold, or None when unknown."""
        if self.prompts is None or "prompt_id" not in self.prompts.columns:
            return None
        mine = self.prompts["prompt_index"].astype(np.int64) % num_shards == shard
        return self.prompts.loc[mine, "prompt_id"].astype(str).tolist()


def check_generation_metadata(
    dataset: ds.Dataset,
    shard: int,
    num_shards: int,
    run: str,
    step: int,
    *,
    current: CurrentGeneration | None = None,
) -> dict[str, Any]:
    """Compare a shard file's ``hed.generation`` metadata (when present) with the current setup.

    Checks the shard's place (num_shards, run, step, shard) and, given ``current``, every
    record-shaping parameter (:func:`hed.records.shard_metadata.stale_field`).

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
    source = dataset_source(dataset)
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
            f"but is {stale.current} now; regenerate the shards with `{regenerate_command()}` "
            f"(to regenerate this step only: delete {shard_folder(source)}/ and run generation "
            f"with --only-missing-outputs), or {stale.restore}"
        )
    return meta


def regenerate_command() -> str:
    """This run's ``kedro run`` line (its ``--env``, ``--params``, ``--runner`` kept) with
    generation added and ``--only-missing-outputs`` dropped: run as printed it regenerates every
    shard and then runs what the user asked for (with ``--only-missing-outputs`` it would reuse
    the stale shards and be refused by the pre-run check)."""
    tokens = shlex.split(update_command(["generation"]))
    return shlex.join([t for t in tokens if t != "--only-missing-outputs"])


def shards_mass_lexicon(datasets: Iterable[ds.Dataset]) -> str | None:
    """The lexicon digest the step's shards computed their mass columns with.

    A lexicon change does not make a shard stale (words and categories are post-hoc): the
    digest travels into the merged records (:func:`mass_metadata`), where what reads the mass
    columns compares it with the current lexicon.

    Args:
        datasets: the step's shard token records.

    Returns:
        ``word_mass.lexicon_sha256`` shared by every shard (64 hex digits); ``"mixed"`` when
        shards recorded different ones; None when none recorded one (no mass columns).
    """
    digests = set()
    for dataset in datasets:
        raw = (dataset.schema.metadata or {}).get(GENERATION_METADATA_KEY)
        try:
            meta = json.loads(raw) if raw is not None else {}
        except ValueError:
            meta = {}
        digests.add(mass_lexicon_sha256(meta) if isinstance(meta, dict) else None)
    digests.discard(None)
    return None if not digests else digests.pop() if len(digests) == 1 else "mixed"


def mass_metadata(digest: str | None) -> dict[bytes, bytes]:
    """The merged records' key-value metadata naming the lexicon of their mass columns
    (:data:`hed.records.shard_metadata.WORD_MASS_METADATA_KEY`)."""
    return {WORD_MASS_METADATA_KEY: json.dumps({"word_mass": {"lexicon_sha256": digest}}).encode()}


def records_mass_lexicon(dataset: ds.Dataset) -> str | None:
    """The lexicon digest of a merged (or shard) file's mass columns, None when not recorded."""
    metadata = dataset.schema.metadata or {}
    for key in (WORD_MASS_METADATA_KEY, GENERATION_METADATA_KEY):
        try:
            meta = json.loads(metadata[key]) if key in metadata else None
        except ValueError:
            meta = None
        if isinstance(meta, dict):
            return mass_lexicon_sha256(meta)
    return None


def check_same_dtype(dtypes: dict[str, str], meta: dict[str, Any], source: str, label: str) -> None:
    """All shards of a step ran in one dtype (``by_device`` resolves per device: bf16 vs fp32)."""
    dtype = meta.get("dtype")
    if dtype is None:
        return
    if dtypes and dtype not in dtypes:
        other, first = next(iter(dtypes.items()))
        raise InputDataError(
            f"{label}: {source} was generated in {dtype} but {first} in {other} (generation.dtype "
            f"by_device is bfloat16 on CUDA and on CPUs with native bfloat16, float32 on other "
            f"CPUs); regenerate one of them on the other "
            f"device or set generation.dtype explicitly"
        )
    dtypes.setdefault(dtype, source)


def shard_folder(source: str) -> str:
    """The folder of a step's shard files: the parent of ``shard_<k>[.sequences].parquet/``."""
    path = Path(source)
    for folder in path.parents:
        if _SHARD_FILE.match(folder.name):
            return str(folder.parent)
    return str(path.parent)


def check_columns(
    dataset: ds.Dataset, schema: pa.Schema, source: str, optional: tuple[str, ...] = ()
) -> None:
    """Every column of ``schema`` is present in ``dataset`` with a type castable to it.

    Columns in ``optional`` may be absent (files written before they existed); when present
    they are checked like the others.

    Raises:
        InputDataError: a missing column, or one whose type cannot be cast.
    """
    present = dataset.schema
    missing = [n for n in schema.names if n not in present.names and n not in optional]
    if missing:
        raise InputDataError(
            f"{source}: missing column(s) {', '.join(missing)}; rerun generation for this shard"
        )
    for field in schema:
        if field.name not in present.names:
            continue
        have = present.field(field.name).type
        if have != field.type:
            try:
                pa.array([], type=have).cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise InputDataError(
                    f"{source}: column {field.name} is {have}, expected {field.type}"
                ) from None


def read_table(dataset: ds.Dataset, schema: pa.Schema) -> pa.Table:
    """The ``schema`` columns of a (small) dataset, checked and cast (:func:`check_columns`)."""
    source = dataset_source(dataset)
    check_columns(dataset, schema, source)
    return dataset.to_table(columns=schema.names).cast(schema)
