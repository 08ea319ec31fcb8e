"""runs_comparison: measures per (run, step) and deltas to the reference run's same step."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hed.analysis.runs_comparison import compare_runs, step_measures
from hed.errors import ConfigError

SUMMARY = pd.DataFrame(
    {
        "run": ["a", "a", "b", "b", "c"],
        "step": [0, 8, 0, 8, 8],
        "n_tokens": [1000, 2000, 500, 4000, 100],
        "mean_entropy": [0.5, 0.4, 0.6, 0.3, 1.0],
        "n_high_entropy_anthropomorphic": [3, 2, 1, 8, 0],
    }
)
PASS1 = pd.DataFrame(
    {"run": ["a", "a", "b", "b"], "step": [0, 8, 0, 8], "pass1": [0.1, 0.2, 0.3, 0.5]}
)
PASS_AT_K = pd.DataFrame(
    {"run": ["a", "a", "b"], "step": [0, 0, 0], "k": [1, 2, 1], "pass_at_k": [0.1, 0.15, 0.3]}
)


def test_measures_and_deltas_equal_a_hand_computation():
    mismatch = pd.DataFrame(
        {
            "run": ["a", "a", "b"],
            "step": [0, 0, 0],
            "subset": ["all", "other", "all"],
            "kl_k3": [0.01, 0.5, 0.03],
        }
    )
    table, measures = step_measures(SUMMARY, PASS1, PASS_AT_K, {"mismatch": mismatch})
    assert measures[-1] == "mismatch_kl_k3"
    out = compare_runs(table, measures, "a")
    assert out["run"].tolist() == ["a", "a", "b", "b", "c"]
    np.testing.assert_allclose(out["anthropomorphic_per_1k_tokens"], [3.0, 1.0, 2.0, 2.0, 0.0])
    np.testing.assert_allclose(out["delta_anthropomorphic_per_1k_tokens"], [0, 0, -1.0, 1.0, -1.0])
    np.testing.assert_allclose(out["delta_pass1"], [0, 0, 0.2, 0.3, np.nan])
    np.testing.assert_allclose(out["pass_at_max_k"], [0.15, np.nan, 0.3, np.nan, np.nan])
    np.testing.assert_allclose(out["delta_mismatch_kl_k3"], [0, np.nan, 0.02, np.nan, np.nan])
    assert out.loc[4, "delta_mean_entropy"] == pytest.approx(0.6)
    assert set(out["reference_run"]) == {"a"}


def test_unknown_reference_run_is_refused():
    table, measures = step_measures(SUMMARY, PASS1, PASS_AT_K)
    with pytest.raises(ConfigError, match=r"analyses\.reference_run 'z' is not a run"):
        compare_runs(table, measures, "z")
