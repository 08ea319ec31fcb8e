"""The figure of ``advantage_shaping_by_step``: which advantage schemes reward hedging.

Pure: the table in, a :class:`matplotlib.figure.Figure` out (the catalog writes the PNG), in
the style of :mod:`hed.report.analysis_figures`.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from hed.core.advantage_shaping import SCHEMES
from hed.report.analysis_figures import PANEL_SIZE, colour, context, empty
from hed.report.figures import figure_size
from hed.report.style import DPI

#: (subset, line style, marker, label) drawn per scheme: a one-step study shows markers only.
SUBSETS = (
    ("high_entropy_anthropomorphic", "-", "o", "high-entropy anthropomorphic"),
    ("high_entropy_reasoning", "--", "^", "high-entropy reasoning"),
)
#: A scheme's points are shifted by this share of the step range (at least 1 step) per scheme,
#: so schemes with equal shares (grpo and grpo_s often) stay visible side by side.
DODGE = 0.02


def plot_advantage_shaping(table: pd.DataFrame, *, dpi: int = DPI) -> Figure:
    """Credit share of high-entropy anthropomorphic (solid) and high-entropy reasoning
    (dashed) tokens over steps, one colour per scheme, one panel per run.

    The credit share of a subset is Σ|A| over its tokens / Σ|A| over the step's tokens
    (both correct and incorrect responses: the table's ``response == "all"`` rows), so a
    scheme whose solid line sits above another's gives hedges more of the step's update.

    Args:
        table: ``advantage_shaping_by_step`` (:mod:`hed.analysis.advantage_shaping`).
        dpi: dots per inch of the saved PNG.
    """
    rows = table[table["response"] == "all"] if len(table) else table
    runs = list(dict.fromkeys(rows["run"])) if len(rows) else []
    schemes = [s for s in SCHEMES if len(rows) and s in set(rows["scheme"])]
    steps = sorted(set(rows["step"])) if len(rows) else []
    span = max(2.0, float(steps[-1] - steps[0])) if steps else 2.0
    with context():
        fig = Figure(
            figsize=figure_size(max(1, len(runs)), 1, PANEL_SIZE), dpi=dpi, layout="constrained"
        )
        axes = fig.subplots(1, max(1, len(runs)), squeeze=False)[0]
        if not runs:
            empty(fig, axes[0], "no graded step")
        for ax, run in zip(axes, runs, strict=False):
            of_run = rows[rows["run"] == run]
            for i, scheme in enumerate(schemes):
                shift = (i - (len(schemes) - 1) / 2) * DODGE * span
                for subset, style, marker, _ in SUBSETS:
                    line = of_run[(of_run["scheme"] == scheme) & (of_run["subset"] == subset)]
                    line = line.sort_values("step")
                    ax.plot(line["step"] + shift, line["credit_share"], linestyle=style,
                            marker=marker, markersize=3.5, color=_colour(scheme),
                            linewidth=1.2)  # fmt: skip
            if len(steps) <= 8:  # a tick at each step (one step: the axis step ± 1)
                ax.set_xticks(steps)
                if len(steps) == 1:
                    ax.set_xlim(steps[0] - 1, steps[0] + 1)
            else:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title(str(run))
            ax.set_xlabel("step")
            ax.set_ylabel("credit share (Σ|A|)")
            ax.set_ylim(bottom=0)
        if runs:  # one key for the colours (schemes), one for the line styles (subsets)
            handles = [Line2D([], [], color=_colour(s), label=s) for s in schemes]
            handles += [Line2D([], [], color="0.3", linestyle=style, marker=marker, label=label)
                        for _, style, marker, label in SUBSETS]  # fmt: skip
            fig.legend(handles=handles, loc="outside lower center", frameon=False, fontsize=6,
                       ncol=2 if len(runs) == 1 else 4)  # fmt: skip
        fig.suptitle("Which advantage schemes reward hedging?")
    return fig


def _colour(scheme: str) -> str:
    """A scheme's colour: by its place in :data:`SCHEMES`, the same on every run and page."""
    return colour(SCHEMES.index(scheme))
