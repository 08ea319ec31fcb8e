"""The exact top-ρ selection: count, tie-break, threshold and statistics (DESIGN.md §5.2)."""

from __future__ import annotations

import numpy as np
import pytest

from hed.core.thresholds import (
    HighEntropyMarker,
    compute_threshold,
    count_below,
    high_entropy_count,
    validate_top_entropy_frac,
)
from hed.errors import ConfigError, InputDataError


def select(entropy: np.ndarray, rho: float, chunk: int | None = None) -> np.ndarray:
    """Mark the high-entropy set of records given in key order, optionally chunk by chunk."""
    selection = compute_threshold(entropy.astype(np.float32).copy(), rho, run="r", step=0)
    marker = HighEntropyMarker(selection)
    special = np.zeros(entropy.size, dtype=bool)
    chunk = chunk or entropy.size
    return np.concatenate(
        [
            marker.mark(entropy[i : i + chunk].astype(np.float32), special[i : i + chunk])
            for i in range(0, entropy.size, chunk)
        ]
    )


def reference(entropy: np.ndarray, rho: float) -> np.ndarray:
    """Sort by (−entropy, key) and take the first ⌈ρN⌉ (keys are the positions here)."""
    n_high = high_entropy_count(entropy.size, rho)
    order = np.lexsort((np.arange(entropy.size), -entropy.astype(np.float32)))
    mask = np.zeros(entropy.size, dtype=bool)
    mask[order[:n_high]] = True
    return mask


@pytest.mark.parametrize(
    ("n", "rho", "expected"),
    [
        (10, 0.2, 2),
        (8, 0.2, 2),
        (5, 0.1, 1),
        (100, 0.07, 7),
        (3, 1, 3),
        (1, 0.2, 1),
        (0, 0.2, 0),
        (10, "0.3", 3),
    ],
)
def test_count_is_exact_ceiling(n, rho, expected):
    assert high_entropy_count(n, rho) == expected


def test_float_product_would_overshoot():
    # 0.07 * 100 = 7.000000000000001 in binary floating point: a float ceil gives 8
    assert np.ceil(0.07 * 100) == 8
    assert high_entropy_count(100, 0.07) == 7


@pytest.mark.parametrize("rho", [0, -0.1, 1.5, "abc", None, True])
def test_invalid_rho(rho):
    with pytest.raises(ConfigError, match="top_entropy_frac"):
        validate_top_entropy_frac(rho)


def test_ties_broken_by_key_order():
    # [0,0,0,0,3,3,3,3], ρ = 0.2: ⌈1.6⌉ = 2 tokens; four tie at 3, the first two in key order win
    entropy = np.array([0, 3, 0, 3, 0, 3, 0, 3], dtype=np.float32)
    selection = compute_threshold(entropy.copy(), 0.2, run="r", step=0)
    assert (selection.n_high_entropy, selection.threshold, selection.n_ties_included) == (2, 3.0, 2)
    assert select(entropy, 0.2).nonzero()[0].tolist() == [1, 3]
    sorted_input = np.array([0, 0, 0, 0, 3, 3, 3, 3], dtype=np.float32)
    assert select(sorted_input, 0.2).nonzero()[0].tolist() == [4, 5]


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_selection_matches_sorting_reference(chunk):
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 200))
        entropy = rng.integers(0, 5, n).astype(np.float32) / 2  # many ties
        rho = float(rng.choice([0.05, 0.2, 0.5, 1.0]))
        got = select(entropy, rho, chunk)
        assert got.sum() == high_entropy_count(n, rho)
        assert np.array_equal(got, reference(entropy, rho))


def test_special_tokens_are_never_marked():
    selection = compute_threshold(np.array([1.0, 2.0], dtype=np.float32), 0.5, run="r", step=0)
    marker = HighEntropyMarker(selection)
    mask = marker.mark(np.array([9.0, 2.0, 1.0], dtype=np.float32), np.array([True, False, False]))
    assert mask.tolist() == [False, True, False]


def test_statistics_match_numpy():
    rng = np.random.default_rng(1)
    entropy = np.where(
        rng.random(10_001) < 0.5, rng.exponential(0.003, 10_001), rng.gamma(1.2, 0.8, 10_001)
    )
    entropy = entropy.astype(np.float32)
    selection = compute_threshold(entropy.copy(), 0.2, run="r", step=3)
    wide = entropy.astype(np.float64)
    assert [selection.p50, selection.p80, selection.p90, selection.p95] == pytest.approx(
        np.quantile(wide, [0.5, 0.8, 0.9, 0.95]).tolist(), rel=1e-12
    )
    assert selection.mean_entropy == pytest.approx(wide.mean(), rel=1e-12)
    assert selection.frac_below_0_01 == (wide < 0.01).mean()
    assert selection.threshold == np.sort(entropy)[-selection.n_high_entropy]
    assert list(selection.as_row()) == [
        "run",
        "step",
        "n_tokens",
        "top_entropy_frac",
        "n_high_entropy",
        "threshold",
        "p50",
        "p80",
        "p90",
        "p95",
        "frac_below_0_01",
        "mean_entropy",
    ]


def test_count_below_compares_exactly():
    edge = np.float32(0.01)  # 0.0099999998 < 0.01
    assert (
        count_below(np.array([edge, np.nextafter(edge, np.float32(1))], dtype=np.float32), 0.01)
        == 1
    )


def test_more_than_2_pow_24_values():
    n = 2**24 + 1
    rng = np.random.default_rng(2)
    entropy = rng.random(n, dtype=np.float32) * 4
    selection = compute_threshold(entropy.copy(), 0.2, run="r", step=0)
    assert selection.n_tokens == n and selection.n_high_entropy == high_entropy_count(n, 0.2)
    above = np.count_nonzero(entropy > selection.threshold)
    at_or_above = np.count_nonzero(entropy >= selection.threshold)
    assert above < selection.n_high_entropy <= at_or_above
    assert selection.n_ties_included == selection.n_high_entropy - above


def test_bad_values_fail():
    with pytest.raises(InputDataError, match="nothing to threshold"):
        compute_threshold(np.zeros(0, dtype=np.float32), 0.2, run="r", step=0)
    with pytest.raises(InputDataError, match="nan"):
        compute_threshold(np.array([1.0, np.nan], dtype=np.float32), 0.2, run="r", step=0)
