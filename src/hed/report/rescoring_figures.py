"""Figures of the re-scoring analyses (docs/rescoring.md), drawn as matplotlib Figures.

Pure functions: a table in, a :class:`matplotlib.figure.Figure` out (no pyplot state, no file
I/O). One panel per run (columns), Okabe–Ito colours and the fonts of :mod:`hed.report.figures`.

* :func:`plot_entropy_overlap`: ``entropy_overlap`` (80/20 Table 1 as curves): overlap of the
  top-ρ entropy positions with the base and with the final checkpoint, per step.
* :func:`plot_entropy_change`: ``entropy_change_by_percentile`` (80/20 Figure 4): mean entropy
  change per 5% bin of the base checkpoint's entropy, one line per later step.
* :func:`plot_entropy_percentiles`: ``entropy_percentiles_by_step``: p50/p80/p90/p95 (nats) and
  the fraction below 0.01 nats over steps, with the 80/20 paper's Qwen3-8B values
  (p80 = 0.672 nats, 50.64% below 0.01) drawn as dashed reference lines.
"""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from hed.analysis.overlap import REFERENCE_FRAC_BELOW_0_01, REFERENCE_P80_NATS
from hed.report.figures import OKABE_ITO, RC_PARAMS, font_family

#: Inches per run panel (width, height) and the PNG resolution.
PANEL_SIZE = (3.5, 2.8)
DPI = 150
_STEP_COLOURS = [
    OKABE_ITO[name]
    for name in ("blue", "orange", "bluish_green", "vermillion", "reddish_purple", "sky_blue")
]


def _runs(table: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(table["run"])) if len(table) else []


def _figure(n_runs: int, n_rows: int = 1) -> tuple[Figure, np.ndarray]:
    width, height = PANEL_SIZE
    fig = Figure(figsize=(width * max(1, n_runs), height * n_rows), dpi=DPI, layout="constrained")
    return fig, fig.subplots(n_rows, max(1, n_runs), squeeze=False)


def plot_entropy_overlap(table: pd.DataFrame) -> Figure:
    """Overlap with the base and the final step vs step, one panel per run.

    Args:
        table: ``entropy_overlap`` (run, step, k, top_entropy_frac, overlap_with_base,
            overlap_with_final).
    """
    runs = _runs(table)
    with mpl.rc_context({**RC_PARAMS, "font.family": font_family()}):
        fig, axes = _figure(len(runs))
        for ax, run in zip(axes[0], runs, strict=False):
            rows = table[table["run"] == run].sort_values("step")
            ax.plot(
                rows["step"],
                100 * rows["overlap_with_base"],
                "o-",
                color=OKABE_ITO["blue"],
                label="with base (first step)",
            )
            ax.plot(
                rows["step"],
                100 * rows["overlap_with_final"],
                "s--",
                color=OKABE_ITO["vermillion"],
                label="with final (last step)",
            )
            rho = float(rows["top_entropy_frac"].iloc[0])
            ax.set_title(f"{run} (top {100 * rho:g}%, k = {int(rows['k'].iloc[0])})")
            ax.set_xlabel("checkpoint step")
            ax.set_ylabel("overlap of top-entropy positions (%)")
            ax.set_ylim(-2, 102)
            ax.legend(frameon=False)
        if not runs:
            axes[0][0].text(
                0.5, 0.5, "no re-scored steps", ha="center", transform=axes[0][0].transAxes
            )
        fig.suptitle("Overlap of high-entropy positions on a fixed response set")
    return fig


def plot_entropy_change(table: pd.DataFrame) -> Figure:
    """Mean entropy change per base-percentile bin, one line per step after the base.

    Args:
        table: ``entropy_change_by_percentile`` (run, step, base_step, percentile_low,
            percentile_high, mean_change).
    """
    runs = _runs(table)
    with mpl.rc_context({**RC_PARAMS, "font.family": font_family()}):
        fig, axes = _figure(len(runs))
        for ax, run in zip(axes[0], runs, strict=False):
            rows = table[table["run"] == run]
            base = int(rows["base_step"].iloc[0])
            later = sorted(s for s in rows["step"].unique() if s != base)
            for i, step in enumerate(later):
                part = rows[rows["step"] == step].sort_values("percentile_low")
                centre = (part["percentile_low"] + part["percentile_high"]) / 2
                ax.plot(
                    centre,
                    part["mean_change"],
                    "o-",
                    markersize=3,
                    color=_STEP_COLOURS[i % len(_STEP_COLOURS)],
                    label=f"step {step}",
                )
            ax.axhline(0, color="#9E9E9E", linewidth=0.8)
            ax.set_title(f"{run} (base: step {base})")
            ax.set_xlabel(f"entropy percentile at step {base} (%)")
            ax.set_ylabel("mean entropy change (nats)")
            ax.set_xlim(0, 100)
            if later:
                ax.legend(frameon=False)
        fig.suptitle("Entropy change by base-entropy percentile (same responses)")
    return fig


def plot_entropy_percentiles(table: pd.DataFrame) -> Figure:
    """Entropy percentiles (top row) and the fraction below 0.01 nats (bottom row) vs step.

    Dashed lines: the 80/20 paper's Qwen3-8B values at T = 1 (p80 = 0.672 nats; 50.64% of
    tokens below 0.01 nats).

    Args:
        table: ``entropy_percentiles_by_step`` (run, step, p50, p80, p90, p95,
            frac_below_0_01).
    """
    runs = _runs(table)
    with mpl.rc_context({**RC_PARAMS, "font.family": font_family()}):
        fig, axes = _figure(len(runs), n_rows=2)
        for col, run in enumerate(runs):
            rows = table[table["run"] == run].sort_values("step")
            top, bottom = axes[0][col], axes[1][col]
            for i, name in enumerate(("p50", "p80", "p90", "p95")):
                top.plot(
                    rows["step"], rows[name], "o-", markersize=3, color=_STEP_COLOURS[i], label=name
                )
            top.axhline(
                REFERENCE_P80_NATS,
                color=_STEP_COLOURS[1],
                linestyle="--",
                linewidth=0.9,
                label="80/20 p80 (Qwen3-8B)",
            )
            top.set_title(run)
            top.set_ylabel("entropy (nats)")
            top.set_ylim(bottom=0)
            bottom.plot(
                rows["step"],
                100 * rows["frac_below_0_01"],
                "o-",
                markersize=3,
                color=OKABE_ITO["black"],
                label="below 0.01 nats",
            )
            bottom.axhline(
                100 * REFERENCE_FRAC_BELOW_0_01,
                color=OKABE_ITO["black"],
                linestyle="--",
                linewidth=0.9,
                label="80/20 below 0.01 (Qwen3-8B)",
            )
            bottom.set_ylabel("tokens below 0.01 nats (%)")
            bottom.set_xlabel("checkpoint step")
            bottom.set_ylim(0, 100)
        if runs:  # one legend for all panels, below them
            handles = [*axes[0][0].get_lines(), *axes[1][0].get_lines()]
            fig.legend(
                handles=handles,
                labels=[h.get_label() for h in handles],
                loc="outside lower center",
                ncols=4,
                frameon=False,
            )
        fig.suptitle("Generation entropy percentiles by step")
    return fig
