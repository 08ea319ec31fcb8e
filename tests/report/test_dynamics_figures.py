"""Figures of the dynamics tables (hed.report.dynamics_figures): content, skipped steps,
readability."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hed.report.dynamics_figures import (
    SKIPPED_LABEL,
    plot_advantage_covariance,
    plot_entropy_by_correctness,
)
from hed.report.figures import figure_size

from .test_figures import overlapping_tick_labels, text_outside_figure

RUNS = [("dapo_without_clip", "without_clip"), ("dapo_with_clip", "with_clip")]
STEPS = (0, 8, 16, 24)


def covariance_table(skip=("dapo_with_clip", 8)) -> pd.DataFrame:
    rows = []
    for r, (run, _) in enumerate(RUNS):
        for step in STEPS:
            for e, estimator in enumerate(("grpo", "dr_grpo")):
                skipped = (run, step) == skip
                rows.append(
                    {
                        "run": run,
                        "step": step,
                        "estimator": estimator,
                        "skipped": "no graded response" if skipped else None,
                        "mean_cov": np.nan if skipped else 0.01 * (step + r) / (1 + e),
                        "zero_advantage_share": np.nan if skipped else step / 48 + 0.1 * r,
                    }
                )
    return pd.DataFrame(rows)


def correctness_table() -> pd.DataFrame:
    rows = []
    for run, _ in RUNS:
        for step in STEPS:
            for correct in (True, False):
                rows.append(
                    {
                        "run": run,
                        "step": step,
                        "correct": correct,
                        "skipped": None,
                        "mean_entropy": 0.5 + step / 48 + 0.2 * correct,
                        "anthropomorphic_per_1k_tokens": 3.0 * step if correct else step,
                    }
                )
    return pd.DataFrame(rows)


def test_covariance_figure_draws_each_estimator_and_marks_the_skipped_step():
    table = covariance_table()
    fig = plot_advantage_covariance(table, RUNS, dpi=60)
    assert fig.get_size_inches().tolist() == list(figure_size(2, 2, (3.2, 2.2)))
    right_top = next(ax for ax in fig.axes if ax.get_title() == "dapo_with_clip (with_clip)")
    lines = {line.get_label(): line for line in right_top.lines}
    grpo = lines["GRPO advantage"]
    assert grpo.get_xdata().tolist() == [0, 16, 24]  # the skipped step 8 has no point
    expected = table[(table.run == "dapo_with_clip") & (table.estimator == "grpo")]
    np.testing.assert_allclose(grpo.get_ydata(), expected["mean_cov"].dropna())
    assert "Dr. GRPO advantage" in lines
    skipped = [line for line in right_top.lines if line.get_marker() == "x"]
    assert [line.get_xdata().tolist() for line in skipped] == [[8]]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts == ["GRPO advantage", "Dr. GRPO advantage", SKIPPED_LABEL]
    assert text_outside_figure(fig) == [] and overlapping_tick_labels(fig) == []


def test_correctness_figure_draws_correct_and_incorrect():
    table = correctness_table()
    fig = plot_entropy_by_correctness(table, RUNS, dpi=60)
    left_top = next(ax for ax in fig.axes if ax.get_title() == "dapo_without_clip (without_clip)")
    lines = {line.get_label(): line for line in left_top.lines}
    np.testing.assert_allclose(
        lines["correct responses"].get_ydata(), [0.7 + s / 48 for s in STEPS]
    )
    np.testing.assert_allclose(
        lines["incorrect responses"].get_ydata(), [0.5 + s / 48 for s in STEPS]
    )
    assert "per 1k tokens" in fig.axes[2].get_ylabel()  # the bottom row
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts == ["correct responses", "incorrect responses"]  # nothing skipped
    assert text_outside_figure(fig) == [] and overlapping_tick_labels(fig) == []


@pytest.mark.parametrize("plot", [plot_advantage_covariance, plot_entropy_by_correctness])
def test_single_run_figures_keep_their_text_inside(plot):
    table = covariance_table() if plot is plot_advantage_covariance else correctness_table()
    runs = RUNS[:1]
    fig = plot(table[table.run == runs[0][0]].query("step == 0"), runs, dpi=100)
    assert text_outside_figure(fig) == []
