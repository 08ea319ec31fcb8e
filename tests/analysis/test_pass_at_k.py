"""pass@k (Chen et al. 2021) against the closed form 1 − C(n−c, k)/C(n, k) in exact integers."""

from __future__ import annotations

from math import comb

import numpy as np
import pandas as pd
import pytest

from hed.analysis.pass_at_k import pass_at_k, step_pass_at_k
from hed.errors import InputDataError


def closed_form(n: int, c: int, k: int) -> float:
    return 1.0 - comb(n - c, k) / comb(n, k)


@pytest.mark.parametrize("n", [1, 2, 4, 16, 200])
def test_every_n_c_k_equals_the_binomial_closed_form(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            got = pass_at_k(np.array([n]), np.array([c]), k)[0]
            assert got == pytest.approx(closed_form(n, c, k), abs=1e-12), (n, c, k)


def test_large_n_stays_finite_and_exact():
    # C(3000, 1500) overflows float64; the product form does not.
    got = pass_at_k(np.array([3000]), np.array([3]), 1500)[0]
    assert got == pytest.approx(float(1 - comb(2997, 1500) / comb(3000, 1500)), rel=1e-12)


def test_pass_at_1_is_the_correct_share_and_pass_at_n_any_correct():
    assert pass_at_k(np.array([4, 4]), np.array([1, 0]), 1).tolist() == [0.25, 0.0]
    assert pass_at_k(np.array([4, 4]), np.array([1, 0]), 4).tolist() == [1.0, 0.0]


def test_step_table_averages_over_graded_prompts_and_ignores_ungraded():
    sequences = pd.DataFrame(
        {
            "prompt_index": [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2],
            "correct": [True, False, False, False, True, True, False, False, *[None] * 4],
        }
    )
    table = step_pass_at_k(sequences, "r", 8)
    assert table["k"].tolist() == [1, 2, 3, 4]
    expected = [(closed_form(4, 1, k) + closed_form(4, 2, k)) / 2 for k in range(1, 5)]
    np.testing.assert_allclose(table["pass_at_k"], expected, atol=1e-12)
    assert set(table["n_prompts"]) == {2} and set(table["n_samples"]) == {4}
    assert set(table["run"]) == {"r"} and set(table["step"]) == {8}


def test_unequal_sample_counts_stop_at_the_smallest():
    sequences = pd.DataFrame({"prompt_index": [0, 0, 0, 1, 1], "correct": [1, 0, 0, 1, 1]})
    sequences["correct"] = sequences["correct"].astype("boolean")
    table = step_pass_at_k(sequences, "r", 0)
    assert table["k"].tolist() == [1, 2]
    assert table["pass_at_k"].iloc[1] == pytest.approx((closed_form(3, 1, 2) + 1.0) / 2)


def test_no_graded_sample_gives_no_row_and_missing_column_is_refused():
    assert step_pass_at_k(pd.DataFrame({"prompt_index": [0], "correct": [None]}), "r", 0).empty
    with pytest.raises(InputDataError, match=r"r\.step_3\.sequences lacks column"):
        step_pass_at_k(pd.DataFrame({"prompt_index": [0]}), "r", 3)
    with pytest.raises(ValueError):
        pass_at_k(np.array([2]), np.array([1]), 3)
