"""GRPO / Dr. GRPO advantages of graded responses: verl's formula on groups with known values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from hed.core.advantage import check_estimators, group_advantages, response_advantages
from hed.errors import ConfigError, InputDataError

from ..dynamics_reference import reference_advantages

EPS = 1e-6


def sequences() -> pd.DataFrame:
    """Six prompts: mixed, all correct, all wrong, two single samples, one ungraded."""
    rows = [
        (0, 0, True), (0, 1, False), (0, 2, False), (0, 3, True),  # mean 0.5, std √(1/3)
        (1, 0, True), (1, 1, True), (1, 2, True),  # all equal: A = 0
        (2, 0, False), (2, 1, False),  # all equal: A = 0
        (3, 0, True),  # one sample, correct: verl's mean 0, std 1
        (4, 0, False),  # one sample, wrong
        (5, 0, None), (5, 1, None),  # no reference answer: not graded
        (6, 1, False), (6, 0, True), (6, 2, False),  # mean 1/3, unordered samples
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["prompt_index", "sample_index", "correct"]).astype(
        {"correct": "boolean"}
    )


def test_grpo_values_are_verls():
    table = response_advantages(sequences()).set_index(["prompt_index", "sample_index"])
    a = table["advantage_grpo"]
    half = 0.5 / (math.sqrt(1 / 3) + EPS)
    assert a.loc[(0, 0)] == pytest.approx(half, abs=1e-15)
    assert a.loc[(0, 1)] == pytest.approx(-half, abs=1e-15)
    assert (a.loc[[(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]] == 0.0).all()  # exactly zero
    assert a.loc[(3, 0)] == pytest.approx(1 / (1 + EPS), abs=1e-15)
    assert a.loc[(4, 0)] == 0.0
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # unbiased, n − 1 = 2
    assert a.loc[(6, 0)] == pytest.approx((2 / 3) / (std + EPS), abs=1e-15)
    assert a.loc[(6, 2)] == pytest.approx((-1 / 3) / (std + EPS), abs=1e-15)
    assert (5, 0) not in a.index  # ungraded


def test_dr_grpo_is_centred_reward():
    table = response_advantages(sequences()).set_index(["prompt_index", "sample_index"])
    d = table["advantage_dr_grpo"]
    assert d.loc[(0, 0)] == 0.5 and d.loc[(0, 2)] == -0.5
    assert d.loc[(3, 0)] == 1.0 and d.loc[(4, 0)] == 0.0
    assert d.loc[(6, 0)] == pytest.approx(2 / 3, abs=1e-15)


def test_group_flags_and_zero_advantage():
    table = response_advantages(sequences())
    assert len(table) == 14
    equal = table.set_index(["prompt_index", "sample_index"])["all_equal"]
    assert equal.loc[[(1, 0), (2, 1)]].all() and not equal.loc[[(0, 0), (3, 0), (4, 0)]].any()
    zero = table["zero_advantage"]
    assert int(zero.sum()) == 3 + 2 + 1  # two all-equal groups and the single wrong sample
    assert table["group_size"].tolist()[:4] == [4, 4, 4, 4]


def test_equals_an_independent_loop():
    seqs = sequences()
    table = response_advantages(seqs).set_index(["prompt_index", "sample_index"])
    for estimator in ("grpo", "dr_grpo"):
        expected = reference_advantages(seqs, estimator)
        got = table[f"advantage_{estimator}"].to_dict()
        assert got.keys() == expected.keys()
        np.testing.assert_allclose(
            [got[k] for k in expected], list(expected.values()), rtol=0, atol=1e-15
        )


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(ConfigError, match="estimator 'ppo'"):
        group_advantages(np.array([0]), np.array([1.0]), "ppo")
    with pytest.raises(InputDataError, match="NaN or infinite"):
        group_advantages(np.array([0, 0]), np.array([1.0, np.nan]))
    with pytest.raises(InputDataError, match="twice"):
        response_advantages(pd.DataFrame({"prompt_index": [0, 0], "sample_index": [1, 1],
                                          "correct": [True, False]}))  # fmt: skip
    with pytest.raises(InputDataError, match="lack column"):
        response_advantages(pd.DataFrame({"prompt_index": [0]}))
    with pytest.raises(ConfigError, match=r"dynamics.estimators"):
        check_estimators(["grpo", "grpo"])
