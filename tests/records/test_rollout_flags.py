"""hed.records.rollout_flags: the share of flagged dump rows per (run, step), from planted
shard metadata (the ``hed.generation`` entries ``score_dump_shard`` writes)."""

from __future__ import annotations

from hed.records.rollout_flags import FlagShare, dump_flag_shares, flag_share_lines


def shard(run, step, shard, flags, unmatched=(), *, num_shards=2, dump_rows=65):
    return {
        "source": "verl_dump",
        "run": run,
        "step": step,
        "shard": shard,
        "num_shards": num_shards,
        "rollouts": {
            "dump_step": step,
            "dump_rows": dump_rows,
            "shard_rows": sum(flags.values()),
            "flags": flags,
            "unmatched_lines": list(unmatched),
        },
    }


def test_flags_are_summed_over_shards_and_worded_as_shares_of_the_scored_rows():
    metadata = [
        # step 3: 64 scored over two shards (33 + 31), 3 ids_differ, line 7 matches no prompt
        shard("dapo", 3, 0, {"ok": 31, "ids_differ": 2, "text_not_round_trip": 0}, [7]),
        shard("dapo", 3, 1, {"ok": 30, "ids_differ": 1, "text_not_round_trip": 0}, [7]),
        # step 1: one shard of two written, nothing flagged
        shard("dapo", 1, 0, {"ok": 4, "ids_differ": 0, "text_not_round_trip": 0}),
        {"source": "sampled", "run": "dapo", "step": 2},  # a sampled shard: not counted
        {"run": "dapo", "step": 2, "shard": 0},  # no source recorded: not counted
    ]
    shares = dump_flag_shares(metadata)
    assert shares == [
        FlagShare("dapo", 1, 4, {"ok": 4, "ids_differ": 0, "text_not_round_trip": 0}, 0, 65,
                  shards=1, num_shards=2),
        FlagShare("dapo", 3, 64, {"ok": 61, "ids_differ": 3, "text_not_round_trip": 0}, 1, 65,
                  shards=2, num_shards=2),
    ]  # fmt: skip
    # 3 / 64 = 4.6875 %; 3 / 68 = 4.41 %; 1 / 68 = 1.47 %
    assert flag_share_lines(shares) == [
        "dapo.step_1 (1 of 2 shards): 4 scored, none flagged",
        "dapo.step_3: 64 scored, 3 ids_differ (4.7 %), 1 no_prompt (not scored)",
        "all 2 steps: 68 scored, 3 ids_differ (4.4 %), 1 no_prompt (not scored)",
    ]
    flags = {"ok": 6, "ids_differ": 1, "text_not_round_trip": 1}
    two_flags = shard("grpo", 5, 0, flags, num_shards=1)
    assert flag_share_lines(dump_flag_shares([two_flags])) == [
        "grpo.step_5: 8 scored, 1 ids_differ (12.5 %), 1 text_not_round_trip (12.5 %)"
    ]


def test_a_run_without_dump_shards_has_no_flag_lines():
    assert dump_flag_shares([{"source": "sampled", "run": "r", "step": 0}]) == []
    assert flag_share_lines([]) == []
