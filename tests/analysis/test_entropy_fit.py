"""The entropy–performance fit recovers planted a, b (Cui et al. 2505.22617)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hed.analysis.entropy_fit import fit_entropy_performance, fit_runs


def test_exact_points_recover_a_b_and_r2_one():
    h = np.array([0.2, 0.5, 0.9, 1.3, 1.8])
    r = 0.85 - 0.12 * np.exp(h)
    fit = fit_entropy_performance(h, r)
    assert fit["a"] == pytest.approx(0.12, abs=1e-12)
    assert fit["b"] == pytest.approx(0.85, abs=1e-12)
    assert fit["ceiling"] == pytest.approx(0.73, abs=1e-12)
    assert fit["r2"] == pytest.approx(1.0, abs=1e-12)


def test_noisy_points_equal_the_float64_normal_equations():
    rng = np.random.default_rng(0)
    h = rng.uniform(0.1, 2.0, 40)
    r = 0.9 - 0.05 * np.exp(h) + rng.normal(0, 0.01, 40)
    fit = fit_entropy_performance(h, r)
    x = np.exp(h)
    slope, intercept = np.polyfit(x, r, 1)  # r = slope·x + intercept: a = −slope
    assert fit["a"] == pytest.approx(-slope, rel=1e-9)
    assert fit["b"] == pytest.approx(intercept, rel=1e-9)
    pred = intercept + slope * x
    r2 = 1 - ((r - pred) ** 2).sum() / ((r - r.mean()) ** 2).sum()
    assert fit["r2"] == pytest.approx(r2, rel=1e-9)
    assert abs(fit["a"] - 0.05) < 0.005


def test_runs_with_too_few_steps_are_skipped_with_a_reason():
    steps = pd.DataFrame(
        {
            "run": ["a", "a", "a", "b", "c", "c"],
            "step": [0, 1, 2, 0, 0, 1],
            "mean_entropy": [0.5, 1.0, 1.5, 0.7, 0.4, 0.4],
            "pass1": [0.6, 0.5, 0.3, 0.2, 0.1, 0.2],
            "pass1_source": ["wandb"] * 6,
        }
    )
    table = fit_runs(steps)
    assert table["run"].tolist() == ["a", "b", "c"]
    assert table["skipped"].isna().tolist() == [True, False, False]
    assert table.loc[1, "n_steps"] == 1 and np.isnan(table.loc[1, "a"])
    assert "different entropy" in table.loc[2, "skipped"]
    assert table.loc[0, "pass1_source"] == "wandb"
