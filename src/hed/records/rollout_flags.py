"""The share of flagged dump rows per (run, step), for the run summary (docs/rollouts.md).

A shard scored from a verl dump (``source: verl_dump``) records in its ``hed.generation``
metadata, under ``rollouts`` (:func:`hed.pipelines.generation.rollout_nodes.score_dump_shard`):

* ``shard_rows``: the responses the shard scored;
* ``flags``: how many of them carry each flag (``ok``, ``ids_differ``, ``text_not_round_trip``,
  :data:`hed.decode.rollouts.FLAGS`);
* ``unmatched_lines``: the dump lines of the whole step that match no prompt (``no_prompt``,
  not scored; every shard of the step records the same list);
* ``dump_rows``: the lines of the step's dump file.

:func:`dump_flag_shares` adds these up per (run, step) from the metadata of the shards a run
wrote; :func:`flag_share_lines` words them. Nothing here reads a dump.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Flags of scored rows that are not ``ok``, in the order the summary names them.
FLAGGED = ("ids_differ", "text_not_round_trip")


@dataclass
class FlagShare:
    """The flags of one (run, step)'s dump rows, summed over the shards a run wrote.

    Attributes:
        run, step: the study run and step (the dump step).
        scored: responses scored (sum of ``shard_rows``).
        flags: scored responses per flag (``ok``, ``ids_differ``, ``text_not_round_trip``).
        no_prompt: dump lines that match no prompt (not scored; union over the shards).
        dump_rows: lines of the step's dump file.
        shards: shards of the step the run wrote; num_shards: shards of the step.
    """

    run: str
    step: int
    scored: int = 0
    flags: dict[str, int] = field(default_factory=dict)
    no_prompt: int = 0
    dump_rows: int = 0
    shards: int = 0
    num_shards: int = 1


def dump_flag_shares(metadata: Iterable[Mapping[str, Any]]) -> list[FlagShare]:
    """Sum the flag counts of dump-scored shards per (run, step).

    Args:
        metadata: the decoded ``hed.generation`` metadata of shard files (one dict per shard
            file; shards not scored from a dump, ``source`` other than ``verl_dump``, and
            metadata without a ``rollouts`` entry are skipped).

    Returns:
        One :class:`FlagShare` per (run, step), sorted by run then step; empty when no shard
        was scored from a dump.
    """
    shares: dict[tuple[str, int], FlagShare] = {}
    unmatched: dict[tuple[str, int], set[int]] = {}
    for meta in metadata:
        rollouts = meta.get("rollouts")
        if meta.get("source") != "verl_dump" or not isinstance(rollouts, Mapping):
            continue
        key = (str(meta.get("run")), int(meta.get("step", rollouts.get("dump_step", -1))))
        share = shares.setdefault(key, FlagShare(*key))
        share.scored += int(rollouts.get("shard_rows") or 0)
        for flag, count in (rollouts.get("flags") or {}).items():
            share.flags[flag] = share.flags.get(flag, 0) + int(count)
        unmatched.setdefault(key, set()).update(rollouts.get("unmatched_lines") or [])
        share.no_prompt = len(unmatched[key])
        share.dump_rows = max(share.dump_rows, int(rollouts.get("dump_rows") or 0))
        share.shards += 1
        share.num_shards = int(meta.get("num_shards") or 1)
    return [shares[key] for key in sorted(shares)]


def _percent(count: int, total: int) -> str:
    return f"{100 * count / total:.1f} %" if total else "n/a"


def flag_share_line(share: FlagShare) -> str:
    """One (run, step) in words, e.g. ``dapo.step_3: 64 scored, 3 ids_differ (4.7 %), 1
    no_prompt (not scored)``.

    Shares are of the scored responses (``ids_differ``, ``text_not_round_trip``); ``none
    flagged`` when every scored response is ``ok``; ``(k of n shards)`` when the run wrote only
    some shards of the step (the counts are of those).
    """
    flagged = [
        f"{share.flags[f]} {f} ({_percent(share.flags[f], share.scored)})"
        for f in FLAGGED
        if share.flags.get(f)
    ]
    parts = [f"{share.scored} scored", *(flagged or ["none flagged"])]
    if share.no_prompt:
        parts.append(f"{share.no_prompt} no_prompt (not scored)")
    partial = (
        f" ({share.shards} of {share.num_shards} shards)" if share.shards < share.num_shards else ""
    )
    return f"{share.run}.step_{share.step}{partial}: {', '.join(parts)}"


def flag_share_lines(shares: list[FlagShare]) -> list[str]:
    """:func:`flag_share_line` of each (run, step), then ``all <n> steps: ...`` summed over
    them when there are several (shares of all scored responses)."""
    lines = [flag_share_line(s) for s in shares]
    if len(shares) > 1:
        total = FlagShare("all", 0, shards=1, num_shards=1)
        for s in shares:
            total.scored += s.scored
            total.no_prompt += s.no_prompt
            for flag, count in s.flags.items():
                total.flags[flag] = total.flags.get(flag, 0) + count
        words = flag_share_line(total).removeprefix("all.step_0")
        lines.append(f"all {len(shares)} steps{words}")
    return lines
