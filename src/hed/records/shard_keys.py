"""Key checks of a step's shard files: every response once, records in key order.

The responses of a step must hold every (prompt_index, sample_index) of the prompt set exactly
once, in shard ``prompt_index % num_shards`` (:func:`check_response_keys`); the token records
of a shard must be in strictly increasing (prompt_index, sample_index, position) order, so a
repeat is a duplicated record (:func:`scan_record_keys`), and be positions
``0 .. n_tokens−1`` of their responses (:func:`compare_records_to_responses`). Used by
:mod:`hed.records.shard_checks`; every failure is an :class:`hed.errors.InputDataError` in one
line naming the file, the first offending keys and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from hed.errors import InputDataError
from hed.records.arrow_stream import column_numpy, record_batches
from hed.records.schema import RECORD_KEY

_KEYS = list(RECORD_KEY)
#: How an error message names a response's key columns.
RESPONSE_KEY = "(prompt_index, sample_index)"
_EXAMPLES = 5  # keys quoted in an error message


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
    every_sample: bool = True,
) -> None:
    """Coverage of (prompt_index, sample_index) over the shards; raise on the first problem.

    ``every_sample`` false (a trainer's dump): a prompt may have any number of responses or
    none, so neither ``sample_index < samples`` nor completeness is required.
    """
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
                f"{label}: duplicated responses {RESPONSE_KEY} {examples(keys, len(repeated))} "
                f"in shard {shard} ({sources[shard]})"
            )
    expected_prompts = np.sort(prompts["prompt_index"].to_numpy().astype(np.int64))
    unexpected = frame[
        ~frame["prompt_index"].isin(expected_prompts)
        | ((frame["sample_index"] >= samples) & every_sample)
        | (frame["sample_index"] < 0)
    ]
    if len(unexpected):
        shard = int(unexpected["_shard"].iloc[0])
        keys = unexpected[["prompt_index", "sample_index"]].itertuples(index=False)
        raise InputDataError(
            f"{label}: unexpected responses {RESPONSE_KEY} {examples(keys, len(unexpected))} "
            f"in shard {shard} ({sources[shard]}): not in the prompt set "
            f"({len(expected_prompts)} prompts) "
            f"× samples_per_prompt ({samples})"
        )
    if not every_sample:
        return
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
            f"{label}: missing responses {RESPONSE_KEY} {examples(missing, len(missing))}, "
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
            f"{source}: token records of responses {RESPONSE_KEY} {examples(keys, len(orphan))} "
            f"that have no row in the shard's sequences file"
        )
    absent = merged[(merged["_merge"] == "left_only") & (merged["n_tokens"] > 0)]
    if len(absent):
        keys = absent[["prompt_index", "sample_index"]].itertuples(index=False)
        raise InputDataError(
            f"{source}: no token records for responses {RESPONSE_KEY} {examples(keys, len(absent))}"
        )
    both = merged[merged["_merge"] == "both"]
    bad = both[(both["n_records"] != both["n_tokens"]) | (both["first_position"] != 0)]
    if len(bad):
        r = bad.iloc[0]
        raise InputDataError(
            f"{source}: response {RESPONSE_KEY} ({int(r.prompt_index)}, {int(r.sample_index)}) "
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


__all__ = [
    "check_response_keys",
    "compare_records_to_responses",
    "examples",
    "group_starts",
    "raise_bad_entropy",
    "scan_record_keys",
]
