"""hed.analysis.overlap: the 80/20 overlap and percentile-bin tables on hand-made scores (known
values,
ties at the boundary) and against an independent numpy computation on random tied scores."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from hed.analysis.overlap import (
    CHANGE_COLUMNS,
    entropy_change_by_percentile,
    entropy_overlap,
    entropy_percentiles,
    percentile_bins,
    top_entropy_mask,
)
from hed.errors import ConfigError, InputDataError


def f32(*values):
    return np.array(values, dtype=np.float32)


# ------------------------------------------------------------------ independent computation


def numpy_top_set(entropy: np.ndarray, rho: float) -> set[int]:
    """Indices (key order) of the ⌈ρN⌉ largest entropies, ties by the lower index."""
    k = math.ceil(Fraction(str(rho)) * len(entropy))
    order = np.lexsort([np.arange(len(entropy)), -entropy.astype(np.float64)])
    return set(order[:k].tolist())


def numpy_overlap(entropies: dict[int, np.ndarray], rho: float) -> pd.DataFrame:
    steps = sorted(entropies)
    sets = {s: numpy_top_set(entropies[s], rho) for s in steps}
    base, final = sets[steps[0]], sets[steps[-1]]
    return pd.DataFrame(
        {
            "step": steps,
            "k": [len(sets[s]) for s in steps],
            "overlap_with_base": [len(sets[s] & base) / len(base) for s in steps],
            "overlap_with_final": [len(sets[s] & final) / len(final) for s in steps],
        }
    )


def numpy_change(entropies: dict[int, np.ndarray], width: int) -> pd.DataFrame:
    """Bins by explicit ranking with Python loops: rank i of N in bin floor(100 i / (w N))."""
    steps = sorted(entropies)
    base = entropies[steps[0]]
    n = len(base)
    ranked = sorted(range(n), key=lambda i: (float(base[i]), i))
    bin_of = {idx: (100 * rank) // (width * n) for rank, idx in enumerate(ranked)}
    rows = []
    for s in steps:
        for b in range(100 // width):
            members = [i for i in range(n) if bin_of[i] == b]
            if not members:
                continue
            mb = sum(float(base[i]) for i in members) / len(members)
            ms = sum(float(entropies[s][i]) for i in members) / len(members)
            rows.append((s, b, len(members), mb, ms, ms - mb))
    return pd.DataFrame(rows, columns=["step", "bin", "n_positions", "mean_base", "mean", "change"])


# ------------------------------------------------------------------ hand-made values


def test_overlap_of_hand_made_scores_with_ties_at_the_boundary():
    # N = 10, ρ = 0.2 → k = 2. Base: 0.9 three times (keys 1, 2, 3) → S_base = {1, 2}.
    base = f32(0.5, 0.9, 0.9, 0.9, 0.1, 0.2, 0.3, 0.4, 0.0, 0.05)
    # middle: largest 0.95 at key 3, then 0.9 at keys 2 and 6 (tie, key 2 first) → {3, 2}
    middle = f32(0.5, 0.1, 0.9, 0.95, 0.1, 0.2, 0.9, 0.4, 0.0, 0.05)
    # final: {8, 9}, disjoint from the base, one overlap with the middle: none
    final = f32(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.7, 0.7)
    masks = top_entropy_mask(middle, 0.2)
    assert np.flatnonzero(masks).tolist() == [2, 3]
    table = entropy_overlap("r", {0: base, 5: middle, 9: final}, 0.2)
    assert table["step"].tolist() == [0, 5, 9]
    assert table["n_positions"].tolist() == [10] * 3
    assert table["k"].tolist() == [2] * 3
    assert table["overlap_with_base"].tolist() == [1.0, 0.5, 0.0]
    assert table["overlap_with_final"].tolist() == [0.0, 0.0, 1.0]
    assert (table["base_step"].tolist(), table["final_step"].tolist()) == ([0] * 3, [9] * 3)


def test_k_is_the_exact_ceiling_of_rho_n():
    # N = 7, ρ = 0.2 → ρN = 1.4 → k = 2; all tied → the first two keys
    table = entropy_overlap("r", {0: np.ones(7, np.float32), 1: f32(0, 0, 0, 0, 0, 1, 1)}, 0.2)
    assert table["k"].tolist() == [2, 2]
    assert table["overlap_with_base"].tolist() == [1.0, 0.0]
    # N = 10, ρ = 0.3: 3 exactly (binary 0.3·10 = 3.0000000000000004 would give 4)
    assert entropy_overlap("r", {0: np.arange(10, dtype=np.float32)}, 0.3)["k"].tolist() == [3]


def test_percentile_bins_of_hand_made_scores():
    # N = 40, w = 5 → 20 bins of exactly 2 positions: ascending ranks 2b, 2b + 1
    base = np.arange(40, dtype=np.float32)[::-1].copy()  # key 0 has the largest entropy
    bins = percentile_bins(base, 5)
    assert bins.tolist() == [19 - i // 2 for i in range(40)]
    # ties: all equal → bins in key order
    assert percentile_bins(np.zeros(4, np.float32), 25).tolist() == [0, 1, 2, 3]
    later = base + np.where(np.arange(40) % 2 == 0, 1.0, -1.0).astype(np.float32)
    table = entropy_change_by_percentile("r", {0: base, 3: later}, 5)
    assert list(table.columns) == CHANGE_COLUMNS
    step3 = table[table["step"] == 3]
    assert step3["n_positions"].tolist() == [2] * 20
    # each bin holds one even and one odd key: +1 and −1 → mean change 0
    assert step3["mean_change"].tolist() == [0.0] * 20
    assert step3["mean_base_entropy"].tolist() == [2 * b + 0.5 for b in range(20)]
    assert table[table["step"] == 0]["mean_change"].tolist() == [0.0] * 20
    assert step3["percentile_low"].tolist() == list(range(0, 100, 5))


def test_empty_bins_have_zero_positions_and_nan_means():
    table = entropy_change_by_percentile("r", {0: f32(0.1, 0.2), 1: f32(0.3, 0.1)}, 25)
    assert table["n_positions"].tolist() == [1, 0, 1, 0] * 2
    assert table["mean_change"].isna().tolist() == [False, True, False, True] * 2
    step1 = table[(table["step"] == 1) & (table["n_positions"] > 0)]
    assert step1["mean_change"].round(6).tolist() == [0.2, -0.1]


# ------------------------------------------------------------------ random, heavily tied


@pytest.mark.parametrize("rho", [0.2, 0.05, 1])
def test_tables_equal_an_independent_numpy_computation(rho):
    rng = np.random.default_rng(4)
    n = 997
    entropies = {
        s: np.round(rng.gamma(0.5, 1.0, n), 1).astype(np.float32)  # few distinct values
        for s in (0, 10, 20, 30)
    }
    got = entropy_overlap("r", entropies, rho)
    want = numpy_overlap(entropies, rho)
    pd.testing.assert_frame_equal(got[list(want.columns)], want, check_dtype=False)

    got = entropy_change_by_percentile("r", entropies, 5)
    got = got[got["n_positions"] > 0].reset_index(drop=True)
    want = numpy_change(entropies, 5)
    assert got[["step", "bin", "n_positions"]].values.tolist() == (
        want[["step", "bin", "n_positions"]].values.tolist()
    )
    np.testing.assert_allclose(got["mean_base_entropy"], want["mean_base"], rtol=1e-12)
    np.testing.assert_allclose(got["mean_entropy"], want["mean"], rtol=1e-12)
    np.testing.assert_allclose(got["mean_change"], want["change"], atol=1e-12)


def test_percentiles_row_equals_numpy():
    rng = np.random.default_rng(1)
    entropy = np.where(rng.random(5000) < 0.5, 0.001, rng.gamma(1, 1, 5000)).astype(np.float32)
    row = entropy_percentiles("r", 3, entropy)
    values = entropy.astype(np.float64)
    for name, q in (("p50", 50), ("p80", 80), ("p90", 90), ("p95", 95)):
        assert row[name] == pytest.approx(np.percentile(values, q), abs=1e-12)
    assert row["frac_below_0_01"] == np.mean(entropy < np.float32(0.01))
    assert row["mean_entropy"] == pytest.approx(values.mean(), rel=1e-12)
    assert (row["run"], row["step"], row["n_tokens"]) == ("r", 3, 5000)


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(InputDataError, match="different numbers of positions"):
        entropy_overlap("r", {0: f32(1, 2), 1: f32(1)}, 0.2)
    with pytest.raises(InputDataError, match="no re-scored steps"):
        entropy_overlap("r", {}, 0.2)
    with pytest.raises(ConfigError, match="percentile_bin_width = 7"):
        percentile_bins(f32(1, 2), 7)
