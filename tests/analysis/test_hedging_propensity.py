"""Hedging propensity of merged records whose mass columns were computed with another lexicon:
marked (mass means empty, ``mass_lexicon_current`` false, one warning), or refused when strict.
A lexicon change never makes the shards stale; only what reads the mass columns notices it."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from hed.analysis.hedging_propensity import step_hedging_propensity
from hed.core.lexicon import parse_lexicon
from hed.errors import InputDataError
from hed.records.shard_checks import mass_metadata, records_mass_lexicon, shards_mass_lexicon
from hed.records.shard_metadata import GENERATION_METADATA_KEY, lexicon_sha256

OLD = lexicon_sha256(parse_lexicon({"anthropomorphic": ["wait"], "reasoning": ["so"]}))
NEW = lexicon_sha256(parse_lexicon({"anthropomorphic": ["wait", "well"], "reasoning": ["so"]}))


def records(digest: str | None) -> ds.Dataset:
    """Four merged records (one special), masses 0.1/0.2/0.3 (+ 0.9 special), categories set
    by the current lexicon; the mass columns' lexicon is ``digest``."""
    table = pa.table(
        {
            "is_special": [False, False, False, True],
            "is_high_entropy": [True, False, False, False],
            "category": ["anthropomorphic", "other", "reasoning", "other"],
            "anthropomorphic_mass": pa.array([0.1, 0.2, 0.3, 0.9], pa.float32()),
            "reasoning_mass": pa.array([0.4, 0.0, 0.2, 0.9], pa.float32()),
        }
    )
    return ds.dataset(table.replace_schema_metadata(mass_metadata(digest)))


def test_the_same_lexicon_gives_the_mass_means():
    row = step_hedging_propensity(records(NEW), "a", 0, NEW)
    assert row["mass_lexicon_current"] and row["mass_recorded"]
    assert row["mean_anthropomorphic_mass"] == pytest.approx(0.2)  # (0.1 + 0.2 + 0.3) / 3
    assert row["mean_reasoning_mass_high_entropy"] == pytest.approx(0.4)
    assert row["sampled_anthropomorphic_share"] == pytest.approx(1 / 3)


def test_another_lexicon_is_marked_with_the_sampled_shares_kept(caplog):
    row = step_hedging_propensity(records(OLD), "a", 0, NEW)
    assert not row["mass_lexicon_current"] and row["mass_recorded"]
    assert np.isnan(row["mean_anthropomorphic_mass"]) and np.isnan(row["mean_reasoning_mass"])
    assert row["sampled_anthropomorphic_share"] == pytest.approx(1 / 3)  # current categories
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(
        f"a.step_0: the anthropomorphic_mass / reasoning_mass of its token records was computed "
        f"with another lexicon (sha256 {OLD[:12]}, the current aggregation.lexicon is sha256 "
        f"{NEW[:12]}): hedging_propensity_by_step leaves its mass means empty"
    )


def test_another_lexicon_is_refused_when_strict():
    refused = r"a\.step_3: .*refused \(reporting.strict is true\).*`kedro hed refresh-mass`"
    with pytest.raises(InputDataError, match=refused):
        step_hedging_propensity(records(OLD), "a", 3, NEW, strict=True)


def test_records_merged_before_the_digest_was_carried_are_read_as_current():
    row = step_hedging_propensity(records(None), "a", 0, NEW, strict=True)
    assert row["mass_lexicon_current"] and row["mean_anthropomorphic_mass"] == pytest.approx(0.2)


def test_the_merge_carries_the_shards_digest():
    def shard(digest: str | None) -> ds.Dataset:
        meta = {"word_mass": {"lexicon_sha256": digest}} if digest else {}
        table = pa.table({"x": [1]}).replace_schema_metadata(
            {GENERATION_METADATA_KEY: json.dumps(meta).encode()}
        )
        return ds.dataset(table)

    assert shards_mass_lexicon([shard(OLD), shard(OLD)]) == OLD
    assert shards_mass_lexicon([shard(OLD), shard(NEW)]) == "mixed"
    assert shards_mass_lexicon([shard(None)]) is None
    assert records_mass_lexicon(shard(OLD)) == OLD  # a shard file read directly
    assert records_mass_lexicon(records(NEW)) == NEW
