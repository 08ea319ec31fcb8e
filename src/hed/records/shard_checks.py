"""Checks of a step's shard files before they are merged: staleness, coverage, key order.

A step's shards must be *current* (each file's ``hed.generation`` metadata matches the
configuration: :mod:`hed.records.shard_metadata`), *cover* the step (every (prompt_index,
sample_index) of the prompt set exactly once, in shard ``prompt_index % num_shards``), be in
*key order* (strictly increasing (prompt_index, sample_index, position), so a repeat is a
duplicated record), and their token records must agree with their responses (positions
``0 .. n_tokens−1``). Every failure is an :class:`hed.errors.InputDataError` in one line
naming the file, the first offending keys and the fix. Streaming (one batch per shard) keeps
memory flat: :mod:`hed.records.arrow_stream`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from hed.errors import InputDataError
from hed.records.arrow_stream import column_numpy, dataset_source, record_batches
from hed.records.schema import RECORD_KEY, SEQUENCE_SCHEMA, TOKEN_RECORD_SCHEMA
from hed.records.shard_metadata import GENERATION_METADATA_KEY, stale_field

_SHARD_FILE = re.compile(r"^shard_\d+(\.sequences)?\.parquet$")
_KEYS = list(RECORD_KEY)
_RESPONSE_KEY = "(prompt_index, sample_index)"
_EXAMPLES = 5  # keys quoted in an error message


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
            missing, duplicated or unexpected response, a missing column.
    """
    label = f"{run}.step_{step}"
    check_shard_count(shard_sequences, num_shards, label, "sequences")
    dtypes: dict[str, str] = {}
    frames = []
    for shard, dataset in enumerate(shard_sequences):
        recorded = check_generation_metadata(dataset, shard, num_shards, run, step, current=current)
        check_same_dtype(dtypes, recorded, dataset_source(dataset), label)
        table = read_table(dataset, SEQUENCE_SCHEMA)
        frames.append(table.to_pandas().assign(_shard=shard))
    frame = pd.concat(frames, ignore_index=True)
    sources = [dataset_source(d) for d in shard_sequences]
    check_response_keys(
        frame, current.prompts, num_shards=num_shards, samples=samples, sources=sources, label=label
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
        check_columns(dataset, TOKEN_RECORD_SCHEMA, source)
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
            f"but is {stale.current} now; delete {shard_folder(source)}/ and rerun generation "
            f"(`kedro run --pipelines generation --only-missing-outputs`), or {stale.restore}"
        )
    return meta


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


def check_columns(dataset: ds.Dataset, schema: pa.Schema, source: str) -> None:
    """Every column of ``schema`` is present in ``dataset`` with a type castable to it.

    Raises:
        InputDataError: a missing column, or one whose type cannot be cast.
    """
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


def read_table(dataset: ds.Dataset, schema: pa.Schema) -> pa.Table:
    """The ``schema`` columns of a (small) dataset, checked and cast (:func:`check_columns`)."""
    source = dataset_source(dataset)
    check_columns(dataset, schema, source)
    return dataset.to_table(columns=schema.names).cast(schema)


def examples(keys: Iterable[tuple], total: int) -> str:
    """The first keys of ``total`` for a message: ``(1, 0), (3, 1) … (7 in all)``."""
    shown = ", ".join(str(tuple(int(v) for v in key)) for key in list(keys)[:_EXAMPLES])
    return f"{shown}{' …' if total > _EXAMPLES else ''} ({total} in all)"


def check_response_keys(
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
                f"{label}: duplicated responses {_RESPONSE_KEY} {examples(keys, len(repeated))} "
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
            f"{label}: unexpected responses {_RESPONSE_KEY} {examples(keys, len(unexpected))} "
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
            f"{label}: missing responses {_RESPONSE_KEY} {examples(missing, len(missing))}, "
            f"expected in {where}; rerun generation for them"
        )


def scan_record_keys(dataset: ds.Dataset, shard: int, source: str) -> pd.DataFrame:
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
    for batch in record_batches(dataset, [*_KEYS, "shard"]):
        p, s, pos, shard_column = (
            column_numpy(batch, name, source, np.int64) for name in (*_KEYS, "shard")
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
        starts = group_starts(same, previous is not None)
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
            f"{examples(duplicates, n_duplicates)}; rerun generation for this shard"
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


def group_starts(same: np.ndarray, has_previous: bool) -> np.ndarray:
    """Rows where a response (or the continuation of the previous batch's last one) starts.

    Row 0 is the previous batch's last key when ``has_previous``; it is not counted again.
    """
    starts = np.flatnonzero(~same) + 1
    if not has_previous:
        return np.concatenate([[0], starts])
    return np.union1d([1], starts) if same.size else starts


def compare_records_to_responses(found: pd.DataFrame, expected: pd.DataFrame, source: str) -> None:
    """Per response, the records found (:func:`scan_record_keys`) are positions 0..n_tokens−1.

    Raises:
        InputDataError: records without a response, a response without records, or a
            count or first position that does not match ``n_tokens``.
    """
    merged = expected.merge(found, on=["prompt_index", "sample_index"], how="outer", indicator=True)
    orphan = merged[merged["_merge"] == "right_only"]
    if len(orphan):
        keys = orphan[["prompt_index", "sample_index"]].itertuples(index=False)
        raise InputDataError(
            f"{source}: token records of responses {_RESPONSE_KEY} {examples(keys, len(orphan))} "
            f"that have no row in the shard's sequences file"
        )
    absent = merged[(merged["_merge"] == "left_only") & (merged["n_tokens"] > 0)]
    if len(absent):
        keys = absent[["prompt_index", "sample_index"]].itertuples(index=False)
        raise InputDataError(
            f"{source}: no token records for responses {_RESPONSE_KEY} "
            f"{examples(keys, len(absent))}"
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


def raise_bad_entropy(
    dataset: ds.Dataset, source: str, rows: np.ndarray, entropy: np.ndarray
) -> None:
    """Raise the one-line error for non-finite entropies at ``rows`` (keys read back)."""
    keys = dataset.to_table(columns=_KEYS).take(pa.array(rows[:_EXAMPLES]))
    value = entropy[np.flatnonzero(~np.isfinite(entropy))[0]]
    examples = ", ".join(str(tuple(r.values())) for r in keys.to_pylist())
    raise InputDataError(
        f"{source}: column entropy is {value} at (prompt_index, sample_index, position) {examples}"
        f"{' …' if rows.size > _EXAMPLES else ''} ({rows.size} in this batch); "
        "rerun generation for this shard"
    )
