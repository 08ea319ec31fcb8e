"""Figure 2 and Figure 3 of the QAE analysis (docs/figures.md) drawn as matplotlib Figures.

Pure functions: a table in, a :class:`matplotlib.figure.Figure` out. No pyplot state, no file
I/O (the catalog's ``matplotlib.MatplotlibDataset`` writes the PNG). The tables are those of
the reporting pipeline (``figure2_*`` and ``figure3_table``, docs/figures.md).

Readability at paper size: every panel has labelled axes with units, fonts of 7–9 pt at the
configured panel size, Okabe–Ito colours (distinguishable with the common colour-vision
deficiencies), constrained layout, and tick labels that do not overlap (many steps are thinned
and rotated; words are one per bar row).

The pixel size of a saved PNG is ``figure_size(...) × dpi`` (Figure 2) or
``figure3_size(...) × dpi`` (Figure 3) exactly: the figures are built with ``figsize`` and
``dpi`` and saved without ``bbox_inches="tight"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from hed.report.style import FIGURE2_MEASURE_NAMES, FIGURE2_STYLE, FIGURE3_STYLE

#: Okabe & Ito (2008) colour-blind-safe palette.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}
#: Word categories in legend order (docs/aggregation.md) and their colours.
CATEGORIES = ("anthropomorphic", "reasoning", "other")
CATEGORY_COLOURS = {
    "anthropomorphic": OKABE_ITO["vermillion"],
    "reasoning": OKABE_ITO["blue"],
    "other": "#9E9E9E",  # neutral grey: reads as "the rest" under every CVD simulation
}
PASS1_COLOUR = OKABE_ITO["black"]
#: Marker of the pass@1 line per source (docs/metrics.md), so panels with different sources differ.
SOURCE_MARKERS = {"wandb": "o", "wandb_offline": "D", "csv": "^", "generated": "s"}

FIGURE3_MEASURE_LABEL = "normalised sampled\nprobability (fraction)"

#: Figure 2's bar measures (``reporting.fig2_measure``) and their left-axis labels.
FIGURE2_MEASURES = dict(
    zip(
        FIGURE2_MEASURE_NAMES,
        (
            "anthropomorphic high-entropy\ntokens (count)",
            "anthropomorphic tokens per\n1k high-entropy tokens",
            "anthropomorphic high-entropy\ntokens per 1k tokens",
        ),
        strict=True,
    )
)
#: How a Figure 2 step at zero and a step without data are drawn.
ZERO_MARKER = {
    "marker": "o",
    "markersize": 4.5,
    "markeredgewidth": 1.2,
    "markerfacecolor": "white",
    "linestyle": "none",
}
NO_DATA_STYLE = {"facecolor": "none", "edgecolor": "#9E9E9E", "hatch": "////", "linewidth": 0.0}

#: Text sizes (points) for a panel of about 3.5 × 2.8 in, i.e. two panels across a page.
_RC = {
    "font.size": 8,
    "axes.titlesize": 8.5,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "figure.titlesize": 9.5,
    "axes.spines.top": False,
}
#: The text sizes above, for other figure modules (:mod:`hed.report.dynamics_figures`).
RC_PARAMS = _RC
#: Fonts with CJK glyphs, tried after DejaVu Sans for characters it lacks (lexicon words such
#: as 等等 or 嗯, docs/aggregation.md). Only installed ones are used (see :func:`font_family`).
CJK_FALLBACK_FONTS = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Source Han Sans SC",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "SimHei",
    "Microsoft YaHei",
    "PingFang SC",
    "Hiragino Sans GB",
)


def font_family() -> list[str]:
    """``font.family`` for the figures: DejaVu Sans, then every installed CJK fallback font.

    Matplotlib (≥ 3.6) takes each glyph from the first font of the list that has it, so
    Chinese words draw where a CJK font is installed (e.g. Debian ``fonts-noto-cjk``) and as
    empty boxes otherwise. Fonts that are not installed are left out of the list: naming them
    would make matplotlib log a "findfont" warning for every text.
    """
    from matplotlib import font_manager

    installed = {font.name for font in font_manager.fontManager.ttflist}
    return ["DejaVu Sans", *(name for name in CJK_FALLBACK_FONTS if name in installed)]


_MAX_STEP_TICKS = 8  # more steps than this: let a locator thin the ticks and rotate them

#: Figure 3 is at least this wide (inches), so that its one-line title and its three-column
#: category legend fit at the fonts of ``_RC`` even with a single narrow panel.
FIGURE3_MIN_WIDTH = 5.2
#: Height (inches) added to Figure 3's panels for the figure-level title above them and the
#: category legend below them, so one row of panels keeps its full height for the words.
FIGURE3_TITLE_LEGEND_HEIGHT = 0.7


def figure_size(n_cols: int, n_rows: int, panel_size: Sequence[float]) -> tuple[float, float]:
    """Figure size in inches: ``n_cols × n_rows`` panels of ``panel_size`` (width, height).

    The saved PNG is ``round(width × dpi) × round(height × dpi)`` pixels.
    """
    width, height = (float(v) for v in panel_size)
    return (max(1, n_cols) * width, max(1, n_rows) * height)


def figure3_size(n_cols: int, n_rows: int, panel_size: Sequence[float]) -> tuple[float, float]:
    """Figure 3's size in inches: ``n_cols × n_rows`` panels of ``panel_size`` (width, height)
    plus a band of :data:`FIGURE3_TITLE_LEGEND_HEIGHT` for the title and legend, and at least
    :data:`FIGURE3_MIN_WIDTH` wide.

    The saved PNG is ``round(width × dpi) × round(height × dpi)`` pixels.
    """
    width, height = figure_size(n_cols, n_rows, panel_size)
    return (max(width, FIGURE3_MIN_WIDTH), height + FIGURE3_TITLE_LEGEND_HEIGHT)


def figure2_values(table: pd.DataFrame, measure: str = "count") -> np.ndarray:
    """Figure 2's bar height per row of the Figure 2 table, for ``measure``.

    * ``count``: ``anthropomorphic_count`` (the paper's measure);
    * ``per_1k_high_entropy``: ``anthropomorphic_per_1k_high_entropy`` =
      1000 × anthropomorphic_count / n_high_entropy;
    * ``per_1k_tokens``: 1000 × anthropomorphic_count / n_tokens (n_tokens = the step's N
      non-special tokens), a rate that does not grow with response length.

    Returns:
        (n,) float64; NaN where the measure is undefined (no high-entropy token, no token).

    Raises:
        ValueError: an unknown measure (the reporting pipeline checks it first).
    """
    count = pd.to_numeric(table["anthropomorphic_count"], errors="coerce").to_numpy(float)
    if measure == "count":
        return count
    if measure == "per_1k_high_entropy":
        return pd.to_numeric(
            table["anthropomorphic_per_1k_high_entropy"], errors="coerce"
        ).to_numpy(float)
    if measure == "per_1k_tokens":
        n = pd.to_numeric(table["n_tokens"], errors="coerce").to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(n > 0, 1000.0 * count / np.where(n > 0, n, 1.0), np.nan)
    raise ValueError(f"unknown Figure 2 measure {measure!r}: use one of {list(FIGURE2_MEASURES)}")


def plot_figure2(
    table: pd.DataFrame,
    runs: Sequence[tuple[str, str]],
    *,
    single_run: bool,
    panel_size: Sequence[float] = FIGURE2_STYLE.panel_size,
    dpi: int = FIGURE2_STYLE.dpi,
    measure: str = "count",
    steps: Sequence[int] | None = None,
) -> Figure:
    """Figure 2: anthropomorphic high-entropy tokens (bars) and pass@1 (line) per step.

    One panel per run, in the order of ``runs`` (without_clip first, then with_clip, then
    single runs). Bars on the left axis: :func:`figure2_values` for ``measure`` at each step
    (same y range in every panel so runs compare), the axis label naming the measure
    (:data:`FIGURE2_MEASURES`). A step whose value is 0 gets an open marker on the axis
    (:data:`ZERO_MARKER`); a step of ``steps`` without a value (no row for that run, or an
    undefined rate) gets a hatched slot over the whole height (:data:`NO_DATA_STYLE`), so
    "none counted" and "not measured" look different. Line on the right axis: ``pass1``
    (gaps where a step has none), its marker telling the source (:data:`SOURCE_MARKERS`);
    the figure's legend names each source shown.

    Args:
        table: the Figure 2 table (run, role, step, n_tokens, anthropomorphic_count,
            anthropomorphic_per_1k_high_entropy, pass1, pass1_source).
        runs: ``(run, role)`` per panel, left to right.
        single_run: draw the single-run diagnostic title instead of the paper comparison's.
        panel_size: inches (width, height) of one panel.
        dpi: dots per inch of the saved PNG.
        measure: ``count``, ``per_1k_high_entropy`` or ``per_1k_tokens``.
        steps: the step slots of every panel (e.g. every configured step); default: the
            steps of the table.

    Returns:
        The figure (``figure_size(len(runs), 1, panel_size)`` inches at ``dpi``).

    Raises:
        ValueError: an unknown ``measure``.
    """
    values = figure2_values(table, measure)
    table = table.assign(_value=values)
    slots = sorted({int(s) for s in (table["step"] if steps is None else steps)})
    with mpl.rc_context({**_RC, "font.family": font_family()}):
        fig = Figure(figsize=figure_size(len(runs), 1, panel_size), dpi=dpi, layout="constrained")
        axes = fig.subplots(1, max(1, len(runs)), squeeze=False)[0]
        bar_top = max(1.0, float(np.nanmax(values, initial=0.0))) * 1.15
        handles = {
            "bars": Patch(
                color=CATEGORY_COLOURS["anthropomorphic"],
                label="anthropomorphic high-entropy tokens",
            )
        }
        for ax, (run, role) in zip(axes, runs, strict=False):
            rows = table[table["run"] == run].sort_values("step")
            handles.update(
                _draw_figure2_panel(
                    ax, rows, run=run, role=role, bar_top=bar_top, measure=measure, slots=slots
                )
            )
        fig.legend(
            handles=list(handles.values()),
            loc="outside lower center",
            ncols=1 if len(runs) < 2 else min(3, len(handles)),
            frameon=False,
        )
        if single_run:
            title = (
                "Single-run diagnostic (not the paper's with/without clip-higher comparison): "
                "anthropomorphic high-entropy tokens and pass@1 per step"
            )
        else:
            title = "Anthropomorphic high-entropy tokens and pass@1 over RL training"
        fig.suptitle(title, wrap=True)
    return fig


def _draw_figure2_panel(
    ax,
    rows: pd.DataFrame,
    *,
    run: str,
    role: str,
    bar_top: float,
    measure: str = "count",
    slots: Sequence[int] = (),
) -> dict[str, Line2D | Patch]:
    """Draw one run's panel; return its legend entries (pass@1 line, zero, no data), by label."""
    ax.set_title(f"{run} ({role})")
    ax.set_xlabel("RL training step (global_step)")
    ax.set_ylabel(FIGURE2_MEASURES[measure])
    ax.set_ylim(0, bar_top)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=measure == "count"))
    twin = ax.twinx()
    twin.set_ylabel("pass@1 (fraction of\nsamples correct)")
    twin.spines["top"].set_visible(False)
    if rows.empty and not slots:
        ax.text(0.5, 0.5, "no records", ha="center", va="center", transform=ax.transAxes)
        twin.set_yticks([])
        return {}
    steps = rows["step"].to_numpy(dtype=float)
    every = np.unique(np.concatenate([steps, np.asarray(slots, dtype=float)]))
    gaps = np.diff(every)
    width = 0.6 * (float(gaps.min()) if gaps.size else 1.0)
    value = rows["_value"].to_numpy(dtype=float) if "_value" in rows else figure2_values(rows)
    measured = np.isfinite(value)
    handles: dict[str, Line2D | Patch] = {}
    colour = CATEGORY_COLOURS["anthropomorphic"]
    ax.bar(steps[measured], value[measured], width=width, color=colour)
    zero = measured & (value == 0)
    if zero.any():
        ax.plot(steps[zero], np.zeros(int(zero.sum())), color=colour, clip_on=False, **ZERO_MARKER)
        label = "zero at this step"
        handles[label] = Line2D([], [], color=colour, label=label, **ZERO_MARKER)
    missing = sorted(set(every) - set(steps[measured]))
    if missing:
        ax.bar(missing, [bar_top] * len(missing), width=width, **NO_DATA_STYLE)
        label = "no data at this step"
        handles[label] = Patch(label=label, **NO_DATA_STYLE)
    _step_ticks(ax, every, width)
    if rows.empty:
        twin.set_yticks([])
        return handles
    pass1 = pd.to_numeric(rows["pass1"], errors="coerce").to_numpy(dtype=float)
    if not np.isfinite(pass1).any():
        twin.set_yticks([])
        label = "pass@1: not available"
        handles[label] = Line2D(
            [], [], color=PASS1_COLOUR, linestyle="none", marker="x", label=label
        )
        return handles
    source = ", ".join(str(s) for s in rows["pass1_source"].dropna().unique()) or "unknown"
    label = f"pass@1 (source: {source})"
    style = {
        "color": PASS1_COLOUR,
        "marker": SOURCE_MARKERS.get(source, "o"),
        "markersize": 3.5,
        "linewidth": 1.2,
    }
    twin.plot(steps, pass1, label=label, **style)
    top = float(np.nanmax(pass1))
    twin.set_ylim(0, min(1.0, max(top * 1.25, 0.05)) if top <= 1.0 else top * 1.1)
    return {label: Line2D([], [], label=label, **style), **handles}


def _step_ticks(ax, steps: np.ndarray, width: float) -> None:
    """Ticks at the checkpoint steps; many steps get a thinned integer locator, rotated."""
    margin = width if steps.size > 1 else 2.5 * width  # one step: keep the bar a bar
    ax.set_xlim(steps.min() - margin, steps.max() + margin)
    if steps.size <= _MAX_STEP_TICKS:
        ax.set_xticks(steps, labels=[str(int(s)) for s in steps])
    else:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
        ax.tick_params(axis="x", labelrotation=45)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")


def plot_figure3(
    table: pd.DataFrame,
    runs: Sequence[tuple[str, str]],
    steps: Sequence[int],
    *,
    top_n: int = 20,
    panel_size: Sequence[float] = FIGURE3_STYLE.panel_size,
    dpi: int = FIGURE3_STYLE.dpi,
) -> Figure:
    """Figure 3: top words at high-entropy positions, per (run, step), coloured by category.

    A grid of panels: one row per run (order of ``runs``), one column per step of ``steps``.
    Each panel has horizontal bars, rank 1 at the top, of length ``sampled_prob_share`` (the
    normalised sampled probability, docs/figures.md); the x range is shared so panels compare.
    A panel without records says so.

    Args:
        table: the Figure 3 table (run, role, step, rank, word, category, sampled_prob_share).
        runs: ``(run, role)`` per row of panels.
        steps: the Figure 3 steps, one per column of panels.
        top_n: number of words per panel (for the title; the table holds the ranks).
        panel_size: inches (width, height) of one panel.
        dpi: dots per inch of the saved PNG.

    Returns:
        The figure (:func:`figure3_size` ``(len(steps), len(runs), panel_size)`` inches at
        ``dpi``).
    """
    n_rows, n_cols = max(1, len(runs)), max(1, len(steps))
    share = pd.to_numeric(table["sampled_prob_share"], errors="coerce").to_numpy(dtype=float)
    x_max = max(1e-3, float(np.nanmax(share, initial=0.0))) * 1.12
    with mpl.rc_context({**_RC, "font.family": font_family()}):
        fig = Figure(
            figsize=figure3_size(n_cols, n_rows, panel_size), dpi=dpi, layout="constrained"
        )
        axes = fig.subplots(n_rows, n_cols, squeeze=False)
        for r, (run, role) in enumerate(runs):
            for c, step in enumerate(steps):
                rows = table[(table["run"] == run) & (table["step"] == step)].sort_values("rank")
                _draw_figure3_panel(
                    axes[r][c], rows, run=run, role=role, step=int(step), top_n=top_n, x_max=x_max
                )
            if not steps:
                axes[r][0].set_title(f"{run}\n{role}")
                axes[r][0].set_axis_off()
                axes[r][0].text(0.5, 0.5, "no step with high-entropy\nword records", ha="center")
        handles = [Patch(color=CATEGORY_COLOURS[c], label=c) for c in shown_categories(table)]
        if handles:
            fig.legend(
                handles=handles,
                loc="outside lower center",
                ncols=len(handles),
                frameon=False,
                title="word category",
            )
        fig.suptitle(
            f"Top {top_n} words at high-entropy positions, by normalised sampled probability",
            wrap=True,  # a safety net: a title wider than the figure wraps instead of being cut
        )
    return fig


def shown_categories(table: pd.DataFrame) -> list[str]:
    """The categories Figure 3 draws, in legend order (:data:`CATEGORIES`).

    A category outside :data:`CATEGORIES` (a user's lexicon may add one) is drawn in the
    colour of ``other`` and listed as ``other``.
    """
    present = {str(c) for c in table["category"].dropna()} if "category" in table else set()
    if present - set(CATEGORIES):
        present.add("other")
    return [c for c in CATEGORIES if c in present]


def _draw_figure3_panel(
    ax, rows: pd.DataFrame, *, run: str, role: str, step: int, top_n: int, x_max: float
) -> None:
    ax.set_title(f"{run}\n{role}, step {step}")
    ax.set_xlabel(FIGURE3_MEASURE_LABEL)
    ax.set_xlim(0, x_max)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
    if rows.empty:
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            "no high-entropy\nword records",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        return
    y = np.arange(len(rows))
    colours = [CATEGORY_COLOURS.get(str(c), CATEGORY_COLOURS["other"]) for c in rows["category"]]
    ax.barh(y, rows["sampled_prob_share"].to_numpy(dtype=float), color=colours, height=0.75)
    ax.set_yticks(y, labels=[str(w) for w in rows["word"]])
    ax.set_ylim(max(top_n, len(rows)) - 0.5, -0.5)  # rank 1 on top; same bar height in every panel
    ax.tick_params(axis="y", length=0)
