"""The advantage-shaping figure: one colour per scheme on every run, a legend naming each."""

from __future__ import annotations

import pandas as pd

from hed.report.shaping_figures import SUBSETS, plot_advantage_shaping


def _table(schemes: list[str], runs=("a", "b"), steps=(0,)) -> pd.DataFrame:
    rows = [
        {
            "run": run,
            "step": step,
            "scheme": scheme,
            "subset": subset,
            "response": "all",
            "credit_share": 0.1 * (i + 1),
        }
        for run in runs
        for step in steps
        for i, scheme in enumerate(schemes)
        for subset, *_ in SUBSETS
    ]
    return pd.DataFrame(rows)


def _colours(fig) -> dict[str, str]:
    return {t.get_label(): t.get_color() for t in fig.legends[0].get_lines()}


def test_a_scheme_keeps_its_colour_whatever_the_others_and_the_legend_names_every_one():
    every = _colours(plot_advantage_shaping(_table(["grpo", "dr_grpo", "top_rho_mask", "gtpo"])))
    two = _colours(plot_advantage_shaping(_table(["gtpo", "top_rho_mask"])))
    assert {"grpo", "dr_grpo", "top_rho_mask", "gtpo"} <= every.keys()
    assert two["gtpo"] == every["gtpo"] and two["top_rho_mask"] == every["top_rho_mask"]
    assert len({every[s] for s in ("grpo", "dr_grpo", "top_rho_mask", "gtpo")}) == 4


def test_one_step_shows_markers_dodged_apart_on_an_integer_step_axis():
    fig = plot_advantage_shaping(_table(["grpo", "grpo_s"], runs=("a",), steps=(20,)))
    ax = fig.axes[0]
    xs = sorted({float(line.get_xdata()[0]) for line in ax.get_lines()})
    assert len(xs) == 2 and xs[0] < 20 < xs[1]  # the two schemes side by side around step 20
    assert {line.get_marker() for line in ax.get_lines()} == {"o", "^"}
    assert all(float(t).is_integer() for t in ax.get_xticks())
