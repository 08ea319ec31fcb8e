"""Figures of the dynamics tables over training steps, one column of panels per run.

Pure functions: a table in, a :class:`matplotlib.figure.Figure` out (the catalog's
``matplotlib.MatplotlibDataset`` writes the PNG), in the style of :mod:`hed.report.figures`
(Okabe–Ito colours, 7–9 pt fonts, constrained layout). A step that the table lists as
skipped (no graded response) is marked with a grey ``×`` on the step axis and named in the
legend, so an absent point never reads as a value.

* :func:`plot_advantage_covariance` — top row: mean Cov(log π, A) per step, one line per
  advantage estimator; bottom row: the zero-advantage share of the responses.
* :func:`plot_entropy_by_correctness` — top row: mean entropy (nats) of correct and of
  incorrect responses; bottom row: anthropomorphic high-entropy tokens per 1k tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from hed.report.figures import OKABE_ITO, RC_PARAMS, figure_size, font_family
from hed.report.style import DYNAMICS_STYLE

#: Inches (width, height) of one panel (:data:`hed.report.style.DYNAMICS_STYLE`).
PANEL_SIZE = DYNAMICS_STYLE.panel_size
ESTIMATOR_STYLE = {
    "grpo": {"color": OKABE_ITO["blue"], "marker": "o", "label": "GRPO advantage"},
    "dr_grpo": {"color": OKABE_ITO["orange"], "marker": "s", "label": "Dr. GRPO advantage"},
}
CORRECT_STYLE = {
    True: {"color": OKABE_ITO["bluish_green"], "marker": "o", "label": "correct responses"},
    False: {"color": OKABE_ITO["vermillion"], "marker": "^", "label": "incorrect responses"},
}
SKIPPED_STYLE = {"color": "#9E9E9E", "marker": "x", "linestyle": "none", "markersize": 5}
SKIPPED_LABEL = "skipped step (no graded response)"


def _skipped_steps(rows: pd.DataFrame) -> list[int]:
    skipped = rows["skipped"].astype("string").fillna("")
    return sorted({int(s) for s in rows.loc[skipped.str.len() > 0, "step"]})


def _mark_skipped(ax, steps: list[int]) -> bool:
    """Grey × at the bottom of the panel at each skipped step; whether there was one."""
    if not steps:
        return False
    ax.plot(steps, [0.02] * len(steps), transform=ax.get_xaxis_transform(), **SKIPPED_STYLE)
    return True


def _step_axis(ax, steps: Sequence[int]) -> None:
    ax.set_xlabel("RL training step (global_step)")
    steps = sorted(set(int(s) for s in steps))
    if steps and len(steps) <= 8:
        ax.set_xticks(steps, labels=[str(s) for s in steps])
    if len(steps) == 1:
        ax.set_xlim(steps[0] - 1, steps[0] + 1)


def _grid(runs: Sequence[tuple[str, str]], panel_size: Sequence[float], dpi: int):
    fig = Figure(figsize=figure_size(len(runs), 2, panel_size), dpi=dpi, layout="constrained")
    axes = fig.subplots(2, max(1, len(runs)), squeeze=False)
    return fig, axes


def plot_advantage_covariance(
    table: pd.DataFrame,
    runs: Sequence[tuple[str, str]],
    *,
    panel_size: Sequence[float] = PANEL_SIZE,
    dpi: int = DYNAMICS_STYLE.dpi,
) -> Figure:
    """Mean Cov(log π, A) (top) and zero-advantage share (bottom) over steps, per run.

    Args:
        table: ``advantage_covariance_by_step`` (run, step, estimator, skipped, mean_cov,
            zero_advantage_share).
        runs: ``(run, role)`` per column, left to right.
        panel_size: inches (width, height) of one panel.
        dpi: dots per inch of the saved PNG.

    Returns:
        The figure (``figure_size(len(runs), 2, panel_size)`` inches at ``dpi``).
    """
    with mpl.rc_context({**RC_PARAMS, "font.family": font_family()}):
        fig, axes = _grid(runs, panel_size, dpi)
        handles: dict[str, Line2D] = {}
        for c, (run, role) in enumerate(runs):
            rows = table[table["run"] == run].sort_values("step")
            top, bottom = axes[0][c], axes[1][c]
            top.set_title(f"{run} ({role})")
            top.set_ylabel("mean Cov(log π, A)\n(nats × advantage)")
            top.axhline(0.0, color="#BDBDBD", linewidth=0.6)
            computed = rows[rows["skipped"].astype("string").fillna("").str.len() == 0]
            for estimator, group in computed.groupby("estimator", sort=False):
                style = ESTIMATOR_STYLE.get(str(estimator), {"label": str(estimator)})
                top.plot(group["step"], group["mean_cov"], markersize=3.5, linewidth=1.2, **style)
                handles[style["label"]] = Line2D([], [], markersize=3.5, **style)
            share = computed.drop_duplicates("step")
            bottom.plot(
                share["step"],
                share["zero_advantage_share"],
                color=OKABE_ITO["black"],
                marker="D",
                markersize=3.5,
                linewidth=1.2,
            )
            bottom.set_ylim(0, 1.05)
            bottom.set_ylabel("zero-advantage share\n(fraction of responses)")
            skipped = _skipped_steps(rows)
            for ax in (top, bottom):
                if _mark_skipped(ax, skipped):
                    handles[SKIPPED_LABEL] = Line2D([], [], label=SKIPPED_LABEL, **SKIPPED_STYLE)
                _step_axis(ax, rows["step"].tolist())
            if rows.empty:
                top.text(0.5, 0.5, "no records", ha="center", va="center", transform=top.transAxes)
        if handles:
            fig.legend(
                handles=list(handles.values()),
                loc="outside lower center",
                ncols=1 if len(runs) < 2 else min(3, len(handles)),
                frameon=False,
            )
        fig.suptitle("Cov(log π, A) and zero-advantage share per step", wrap=True)
    return fig


def plot_entropy_by_correctness(
    table: pd.DataFrame,
    runs: Sequence[tuple[str, str]],
    *,
    panel_size: Sequence[float] = PANEL_SIZE,
    dpi: int = DYNAMICS_STYLE.dpi,
) -> Figure:
    """Mean entropy (top) and anthropomorphic high-entropy tokens per 1k tokens (bottom) of
    correct and incorrect responses over steps, per run.

    Args:
        table: ``entropy_by_correctness`` (run, step, correct, skipped, mean_entropy,
            anthropomorphic_per_1k_tokens).
        runs: ``(run, role)`` per column, left to right.
        panel_size: inches (width, height) of one panel.
        dpi: dots per inch of the saved PNG.

    Returns:
        The figure (``figure_size(len(runs), 2, panel_size)`` inches at ``dpi``).
    """
    with mpl.rc_context({**RC_PARAMS, "font.family": font_family()}):
        fig, axes = _grid(runs, panel_size, dpi)
        handles: dict[str, Line2D] = {}
        for c, (run, role) in enumerate(runs):
            rows = table[table["run"] == run].sort_values("step")
            top, bottom = axes[0][c], axes[1][c]
            top.set_title(f"{run} ({role})")
            top.set_ylabel("mean entropy (nats)")
            bottom.set_ylabel("anthropomorphic high-entropy\ntokens per 1k tokens")
            correct = rows["correct"].map(_as_bool)
            for value, style in CORRECT_STYLE.items():
                group = rows[correct == value]
                if group.empty:
                    continue
                for ax, column in (
                    (top, "mean_entropy"),
                    (bottom, "anthropomorphic_per_1k_tokens"),
                ):
                    values = pd.to_numeric(group[column], errors="coerce")
                    ax.plot(group["step"], values, markersize=3.5, linewidth=1.2, **style)
                handles[style["label"]] = Line2D([], [], markersize=3.5, **style)
            bottom.set_ylim(bottom=0)
            top.set_ylim(bottom=0)
            skipped = _skipped_steps(rows)
            for ax in (top, bottom):
                if _mark_skipped(ax, skipped):
                    handles[SKIPPED_LABEL] = Line2D([], [], label=SKIPPED_LABEL, **SKIPPED_STYLE)
                _step_axis(ax, rows["step"].tolist())
            if rows.empty:
                top.text(0.5, 0.5, "no records", ha="center", va="center", transform=top.transAxes)
        if handles:
            fig.legend(
                handles=list(handles.values()),
                loc="outside lower center",
                ncols=1 if len(runs) < 2 else min(3, len(handles)),
                frameon=False,
            )
        fig.suptitle("Entropy of correct vs incorrect responses per step", wrap=True)
    return fig


def _as_bool(value: object) -> bool | None:
    """``correct`` as read back from CSV (True/False, "True"/"False") or None when empty."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str) and value in ("True", "False", "true", "false"):
        return value.lower() == "true"
    return None
