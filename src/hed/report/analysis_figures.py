"""Figures of the research analyses (pass@k, entropy–performance fit, runs compared,
sampler–trainer mismatch, Δlog p).

Pure functions: a table in, a :class:`matplotlib.figure.Figure` out (the catalog's
``matplotlib.MatplotlibDataset`` writes the PNG), in the style of :mod:`hed.report.figures`
(Okabe–Ito colours, constrained layout). An empty table gives a figure that says so.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from hed.report.figures import OKABE_ITO, RC_PARAMS, figure_size, font_family
from hed.report.style import DPI

PANEL_SIZE = (3.2, 2.4)
#: Line colours, in order, for steps or runs.
COLOURS = tuple(c for name, c in OKABE_ITO.items() if name != "yellow")


def colour(i: int) -> str:
    """The i-th line colour of the analyses' figures (cycles through ``COLOURS``)."""
    return COLOURS[i % len(COLOURS)]


def empty(fig: Figure, ax, text: str) -> None:
    """A panel with nothing to draw: ``text`` in its centre, no axes."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def context():
    """The analyses' figure style (``RC_PARAMS`` and an installed font) for a ``with`` block."""
    return mpl.rc_context({**RC_PARAMS, "font.family": font_family()})


def plot_pass_at_k(table: pd.DataFrame, *, dpi: int = DPI) -> Figure:
    """pass@k against k, one panel per run, one line per step (darker = later).

    Args:
        table: ``pass_at_k`` (run, step, k, pass_at_k).
        dpi: dots per inch of the saved PNG.
    """
    runs = list(dict.fromkeys(table["run"])) if len(table) else []
    with context():
        fig = Figure(
            figsize=figure_size(max(1, len(runs)), 1, PANEL_SIZE), dpi=dpi, layout="constrained"
        )
        axes = fig.subplots(1, max(1, len(runs)), squeeze=False)[0]
        if not runs:
            empty(fig, axes[0], "no graded samples")
        for ax, run in zip(axes, runs, strict=False):
            rows = table[table["run"] == run]
            steps = sorted(rows["step"].unique())
            cmap = mpl.colormaps["viridis"]
            for i, step in enumerate(steps):
                curve = rows[rows["step"] == step].sort_values("k")
                shade = cmap(0.15 + 0.75 * i / max(1, len(steps) - 1))
                ax.plot(
                    curve["k"],
                    curve["pass_at_k"],
                    marker="o",
                    markersize=3,
                    color=shade,
                    linewidth=1.2,
                    label=f"step {step}",
                )
            ax.set_title(str(run))
            ax.set_xlabel("k (samples per prompt)")
            ax.set_ylabel("pass@k (unbiased)")
            ax.set_ylim(0, 1.02)
            ax.legend(frameon=False, fontsize=6)
        fig.suptitle("pass@k per step (Chen et al. 2021 estimator)")
    return fig


def plot_entropy_performance_fit(
    steps: pd.DataFrame, fits: pd.DataFrame, *, dpi: int = DPI
) -> Figure:
    """pass@1 against mean entropy per step (points) and the fitted R = −a·e^H + b (line).

    Args:
        steps: run, step, mean_entropy (nats), pass1.
        fits: ``entropy_performance_fit`` (run, a, b, r2, ceiling).
        dpi: dots per inch of the saved PNG.
    """
    runs = list(dict.fromkeys(fits["run"])) if len(fits) else []
    with context():
        fig = Figure(figsize=figure_size(1, 1, (4.2, 3.2)), dpi=dpi, layout="constrained")
        ax = fig.subplots()
        if not runs:
            empty(fig, ax, "no run with pass@1 and entropy")
        for i, run in enumerate(runs):
            points = steps[steps["run"] == run].dropna(subset=["mean_entropy", "pass1"])
            fit = fits[fits["run"] == run].iloc[0]
            ax.scatter(points["mean_entropy"], points["pass1"], s=14, color=colour(i), zorder=3)
            for _, p in points.iterrows():
                ax.annotate(
                    str(int(p["step"])),
                    (p["mean_entropy"], p["pass1"]),
                    fontsize=5,
                    xytext=(2, 2),
                    textcoords="offset points",
                )
            label = str(run)
            if pd.notna(fit["a"]):
                h = np.linspace(0.0, max(float(points["mean_entropy"].max()), 1e-3) * 1.05, 100)
                ax.plot(h, fit["b"] - fit["a"] * np.exp(h), color=colour(i), linewidth=1.1)
                label += f": a={fit['a']:.3g}, b={fit['b']:.3g}, R²={fit['r2']:.2f}"
                ax.plot([0.0], [fit["ceiling"]], marker="*", color=colour(i), markersize=7)
            ax.plot([], [], color=colour(i), marker="o", label=label)
        ax.set_xlabel("mean decode-time entropy H (nats)")
        ax.set_ylabel("pass@1 R")
        if runs:
            ax.legend(frameon=False, fontsize=6)
        fig.suptitle("Entropy–performance fit R = −a·exp(H) + b (★ ceiling at H = 0)", wrap=True)
    return fig


def plot_runs_comparison(table: pd.DataFrame, measures: Sequence[str], *, dpi: int = DPI) -> Figure:
    """One panel per measure over steps, one line per run (the reference run dashed).

    Args:
        table: ``runs_comparison`` (run, step, reference_run and the measures).
        measures: the columns to draw, one panel each.
        dpi: dots per inch of the saved PNG.
    """
    measures = [m for m in measures if m in table.columns and table[m].notna().any()]
    runs = list(dict.fromkeys(table["run"])) if len(table) else []
    reference = table["reference_run"].iloc[0] if len(table) else None
    n_cols = min(3, max(1, len(measures)))
    n_rows = max(1, -(-len(measures) // n_cols))
    with context():
        fig = Figure(figsize=figure_size(n_cols, n_rows, PANEL_SIZE), dpi=dpi, layout="constrained")
        axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
        if not measures:
            empty(fig, axes[0], "no measure to compare")
        for ax, measure in zip(axes, measures, strict=False):
            for i, run in enumerate(runs):
                rows = table[table["run"] == run].sort_values("step")
                ax.plot(
                    rows["step"],
                    rows[measure],
                    marker="o",
                    markersize=3,
                    linewidth=1.2,
                    color=colour(i),
                    linestyle="--" if run == reference else "-",
                    label=f"{run}{' (reference)' if run == reference else ''}",
                )
            ax.set_title(measure, fontsize=7)
            ax.set_xlabel("RL training step")
        for ax in axes[len(measures) :]:
            ax.set_axis_off()
        if runs:
            axes[0].legend(frameon=False, fontsize=6)
        fig.suptitle("Runs compared per step")
    return fig


#: Subset line styles of the per-subset figures (mismatch, Δlog p).
SUBSET_STYLE = {
    "all": {"color": OKABE_ITO["black"], "marker": "o"},
    "high_entropy": {"color": OKABE_ITO["vermillion"], "marker": "^"},
    "other": {"color": OKABE_ITO["sky_blue"], "marker": "v"},
    "anthropomorphic": {"color": OKABE_ITO["reddish_purple"], "marker": "s"},
    "reasoning": {"color": OKABE_ITO["bluish_green"], "marker": "D"},
}


def plot_subsets_over_steps(
    table: pd.DataFrame,
    measures: Sequence[str],
    labels: Sequence[str],
    *,
    title: str,
    dpi: int = DPI,
) -> Figure:
    """One row of panels per measure, one column per run, one line per token subset.

    Args:
        table: run, step, subset and the ``measures`` columns (``sampler_trainer_mismatch``,
            ``delta_logprob_by_step``).
        measures: the columns drawn, one row each.
        labels: their y-axis labels.
        title: the figure's title.
        dpi: dots per inch of the saved PNG.
    """
    runs = list(dict.fromkeys(table["run"])) if len(table) else []
    with context():
        size = figure_size(max(1, len(runs)), len(measures), PANEL_SIZE)
        fig = Figure(figsize=size, dpi=dpi, layout="constrained")
        axes = fig.subplots(len(measures), max(1, len(runs)), squeeze=False)
        if not runs:
            empty(fig, axes[0][0], "no rows")
        for c, run in enumerate(runs):
            rows = table[table["run"] == run]
            axes[0][c].set_title(str(run))
            for r, (measure, label) in enumerate(zip(measures, labels, strict=True)):
                ax = axes[r][c]
                for subset, unsorted in rows.groupby("subset", sort=False):
                    style = SUBSET_STYLE.get(str(subset), {"color": "#777777", "marker": "."})
                    group = unsorted.sort_values("step")
                    ax.plot(
                        group["step"],
                        group[measure],
                        markersize=3,
                        linewidth=1.1,
                        label=str(subset),
                        **style,
                    )
                ax.set_ylabel(label, fontsize=6)
                ax.set_xlabel("RL training step")
        if runs:
            axes[0][0].legend(frameon=False, fontsize=6)
        fig.suptitle(title, wrap=True)
    return fig


def plot_hedging_propensity(table: pd.DataFrame, *, dpi: int = DPI) -> Figure:
    """The exact hedging propensity beside Figure 2's sampled counts, one panel per run.

    Per step: the mean anthropomorphic word-start mass at high-entropy positions (solid) and over
    all positions (dotted), and the sampled anthropomorphic share of the high-entropy tokens
    (dashed: Figure 2's count divided by the number of high-entropy tokens), all probabilities.

    Args:
        table: ``hedging_propensity_by_step`` (:mod:`hed.analysis.hedging_propensity`).
        dpi: dots per inch of the saved PNG.
    """
    runs = list(dict.fromkeys(table["run"])) if len(table) else []
    lines = [
        ("mean_anthropomorphic_mass_high_entropy", "-", "mass, high-entropy positions"),
        ("mean_anthropomorphic_mass", ":", "mass, all positions"),
        ("sampled_anthropomorphic_share_high_entropy", "--", "sampled share, high-entropy"),
    ]
    with context():
        fig = Figure(
            figsize=figure_size(max(1, len(runs)), 1, PANEL_SIZE), dpi=dpi, layout="constrained"
        )
        axes = fig.subplots(1, max(1, len(runs)), squeeze=False)[0]
        if not runs:
            empty(fig, axes[0], "no steps")
        for ax, run in zip(axes, runs, strict=False):
            rows = table[table["run"] == run].sort_values("step")
            for i, (column, style, label) in enumerate(lines):
                ax.plot(rows["step"], rows[column], linestyle=style, marker="o", markersize=3,
                        color=colour(i), linewidth=1.2, label=label)  # fmt: skip
            if not rows["mass_recorded"].all():
                ax.text(0.02, 0.95, "some steps lack the mass columns: regenerate them",
                        transform=ax.transAxes, fontsize=6, va="top")  # fmt: skip
            ax.set_title(str(run))
            ax.set_xlabel("step")
            ax.set_ylabel("probability (anthropomorphic)")
            ax.set_ylim(bottom=0)
            ax.legend(frameon=False, fontsize=6)
        fig.suptitle("Hedging propensity: exact word-start mass vs sampled share")
    return fig
