"""Δlog p on the fixed response set: per-subset statistics and the words that rose/fell most."""

from __future__ import annotations

import numpy as np
import pytest

from hed.analysis.delta_logprob import delta_by_subset, top_words


def test_subset_statistics_equal_numpy():
    rng = np.random.default_rng(0)
    delta = rng.normal(0.1, 0.5, 300)
    high = rng.uniform(size=300) < 0.2
    category = rng.choice(["anthropomorphic", "reasoning", "other"], 300)
    table = delta_by_subset(delta, high, category, run="r", step=8, base=0).set_index("subset")
    for subset, mask in (
        ("all", np.ones(300, bool)),
        ("high_entropy", high),
        ("other", ~high),
        ("reasoning", category == "reasoning"),
    ):
        row = table.loc[subset]
        assert row["n_tokens"] == mask.sum()
        assert row["mean"] == pytest.approx(delta[mask].mean())
        assert row["mean_abs"] == pytest.approx(np.abs(delta[mask]).mean())
        assert row["p10"] == pytest.approx(np.percentile(delta[mask], 10))
        assert row["p99"] == pytest.approx(np.percentile(delta[mask], 99))
    assert set(table["base_step"]) == {0} and set(table["step"]) == {8}
    only_all = delta_by_subset(delta, None, None, run="r", step=8, base=0)
    assert only_all["subset"].tolist() == ["all"]


def test_words_that_rose_and_fell_most():
    words = np.array(["wait", "wait", "so", "so", "hmm", "the", "", "x"])
    category = np.array(
        ["anthropomorphic"] * 2 + ["reasoning"] * 2 + ["anthropomorphic", "other", "other", "other"]
    )
    delta = np.array([1.0, 0.5, -0.2, -0.4, 3.0, 0.1, 9.0, -9.0])
    table = top_words(delta, words, category, run="r", step=8, base=0, top_n=5, min_count=2)
    assert table[["direction", "rank", "word", "count"]].values.tolist() == [
        ["rose", 1, "wait", 2],
        ["fell", 1, "so", 2],
    ]
    assert table["mean_delta_logprob"].tolist() == pytest.approx([0.75, -0.3])
    loose = top_words(delta, words, category, run="r", step=8, base=0, top_n=2, min_count=1)
    assert loose["word"].tolist() == ["hmm", "wait", "x", "so"]
