"""Figures 2 and 3 (hed.report.figures): size, content, readability (no overlapping tick labels)."""

from __future__ import annotations

import itertools

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from kedro_datasets.matplotlib import MatplotlibDataset
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.text import Text

from hed.report.figures import (
    CATEGORIES,
    CATEGORY_COLOURS,
    FIGURE3_MEASURE_LABEL,
    FIGURE3_MIN_WIDTH,
    FIGURE3_TITLE_LEGEND_HEIGHT,
    figure3_size,
    figure_size,
    plot_figure2,
    plot_figure3,
)

RUNS = [("dapo_without_clip", "without_clip"), ("dapo_with_clip", "with_clip")]
WORDS = [
    ("wait", "anthropomorphic"),
    ("so", "reasoning"),
    ("let", "reasoning"),
    ("perhaps", "anthropomorphic"),
    ("maybe", "anthropomorphic"),
    ("the", "other"),
    ("we", "other"),
    ("i", "anthropomorphic"),
    ("alternatively", "reasoning"),
    ("hmm", "anthropomorphic"),
    ("then", "reasoning"),
    ("but", "reasoning"),
    ("now", "reasoning"),
    ("if", "reasoning"),
    ("thus", "reasoning"),
    ("x", "other"),
    ("first", "reasoning"),
    ("check", "reasoning"),
    ("me", "anthropomorphic"),
    ("compute", "reasoning"),
]


def figure2_table(steps, runs=RUNS, source="wandb") -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [
        {
            "run": run,
            "role": role,
            "step": step,
            "anthropomorphic_count": int(rng.integers(0, 900)),
            "pass1": float(rng.uniform(0.1, 0.5)),
            "pass1_source": source,
        }
        for run, role in runs
        for step in steps
    ]
    return pd.DataFrame(rows)


def figure3_table(steps=(20, 80, 200), runs=RUNS) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for (run, role), step in itertools.product(runs, steps):
        shares = np.sort(rng.uniform(0.001, 0.05, len(WORDS)))[::-1]
        for rank, ((word, category), share) in enumerate(zip(WORDS, shares, strict=True), 1):
            rows.append(
                {
                    "run": run,
                    "role": role,
                    "step": step,
                    "rank": rank,
                    "word": word,
                    "category": category,
                    "sampled_prob_share": share,
                }
            )
    return pd.DataFrame(rows)


def save_png(fig, path) -> np.ndarray:
    MatplotlibDataset(filepath=str(path), save_args={"format": "png"}).save(fig)
    return mpimg.imread(path)


def _draw(fig):
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def drawn_tick_labels(axis) -> list[Text]:
    """Tick labels matplotlib draws: visible, non-empty, at a tick inside the view interval."""
    low, high = sorted(axis.get_view_interval())
    eps = 1e-9 * max(1.0, abs(high - low))
    labels = []
    for tick in axis.get_major_ticks():
        if low - eps <= tick.get_loc() <= high + eps:
            labels += [t for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text()]
    return labels


def overlapping_tick_labels(fig) -> list[tuple[str, str]]:
    """Pairs of drawn tick labels of one axis whose boxes intersect."""
    renderer = _draw(fig)
    clashes = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn_tick_labels(axis)]
            for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
                if box_a.overlaps(box_b):
                    clashes.append((a, b))
    return clashes


def text_outside_figure(fig) -> list[str]:
    """Drawn texts (titles, labels, tick labels, legends) not entirely inside the canvas."""
    renderer = _draw(fig)
    all_ticks = {
        id(t)
        for ax in fig.axes
        for axis in (ax.xaxis, ax.yaxis)
        for tick in axis.get_major_ticks()
        for t in (tick.label1, tick.label2)
    }
    texts = [
        t
        for t in fig.findobj(Text)
        if id(t) not in all_ticks and t.get_visible() and t.get_text().strip()
    ]
    texts += [
        t for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) for t in drawn_tick_labels(axis)
    ]
    outside = []
    for text in texts:
        box = text.get_window_extent(renderer)
        if (
            box.x0 < -1
            or box.y0 < -1
            or box.x1 > fig.bbox.width + 1
            or box.y1 > fig.bbox.height + 1
        ):
            outside.append(text.get_text())
    return outside


@pytest.mark.parametrize("n_runs", [1, 2])
def test_figure2_png_has_the_configured_pixel_size_and_is_not_blank(tmp_path, n_runs):
    runs = RUNS[:n_runs]
    fig = plot_figure2(
        figure2_table([20, 40, 80], runs),
        runs,
        single_run=n_runs == 1,
        panel_size=(3.5, 2.8),
        dpi=100,
    )
    image = save_png(fig, tmp_path / "figure2.png")
    width, height = figure_size(n_runs, 1, (3.5, 2.8))
    assert image.shape[:2] == (round(height * 100), round(width * 100))
    assert float(image[..., :3].var()) > 0.01


@pytest.mark.parametrize(("n_runs", "steps"), [(2, [20, 80, 200]), (1, [20])])
def test_figure3_png_has_the_configured_pixel_size_and_is_not_blank(tmp_path, n_runs, steps):
    runs = RUNS[:n_runs]
    fig = plot_figure3(figure3_table(steps, runs), runs, steps, panel_size=(2.6, 3.6), dpi=100)
    image = save_png(fig, tmp_path / "figure3.png")
    width = max(len(steps) * 2.6, FIGURE3_MIN_WIDTH)  # one narrow panel: the minimum width
    height = n_runs * 3.6 + FIGURE3_TITLE_LEGEND_HEIGHT
    assert figure3_size(len(steps), n_runs, (2.6, 3.6)) == pytest.approx((width, height))
    assert image.shape[:2] == (round(height * 100), round(width * 100))
    assert float(image[..., :3].var()) > 0.01


def test_figure2_panels_bars_line_and_legend():
    table = figure2_table([20, 40, 80])
    fig = plot_figure2(table, RUNS, single_run=False)
    bar_axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in bar_axes] == [
        "dapo_without_clip (without_clip)",
        "dapo_with_clip (with_clip)",
    ]
    left = bar_axes[0]
    heights = [patch.get_height() for patch in left.patches]
    expected = table.loc[table["run"] == "dapo_without_clip", "anthropomorphic_count"].tolist()
    assert heights == expected
    assert "count" in left.get_ylabel() and "step" in left.get_xlabel()
    twin = next(ax for ax in fig.axes if ax is not left and ax.bbox.bounds == left.bbox.bounds)
    assert "pass@1" in twin.get_ylabel()
    np.testing.assert_allclose(
        twin.lines[0].get_ydata(),
        table.loc[table["run"] == "dapo_without_clip", "pass1"].to_numpy(),
    )
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend_texts == ["anthropomorphic high-entropy tokens", "pass@1 (source: wandb)"]
    assert "Single-run" not in fig.get_suptitle()


def test_single_run_figure2_says_it_is_a_diagnostic():
    fig = plot_figure2(figure2_table([0], RUNS[:1]), RUNS[:1], single_run=True)
    assert "Single-run diagnostic" in fig.get_suptitle()


def test_figure2_without_pass1_says_so():
    table = figure2_table([20, 40]).assign(pass1=np.nan, pass1_source=None)
    fig = plot_figure2(table, RUNS, single_run=False)
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "pass@1: not available" in texts


@pytest.mark.parametrize("steps", [[20, 40, 60, 80, 100, 150, 200], list(range(0, 300, 10))])
def test_figure2_tick_labels_do_not_overlap(steps):
    fig = plot_figure2(figure2_table(steps), RUNS, single_run=False)
    assert overlapping_tick_labels(fig) == []
    assert text_outside_figure(fig) == []


@pytest.mark.parametrize("n_runs", [1, 2])
def test_figure2_text_stays_inside_the_canvas(n_runs):
    runs = RUNS[:n_runs]
    fig = plot_figure2(figure2_table([0, 20], runs), runs, single_run=n_runs == 1)
    assert text_outside_figure(fig) == []


def test_figure3_bars_are_shares_coloured_by_category_with_named_measure():
    table = figure3_table()
    fig = plot_figure3(table, RUNS, [20, 80, 200])
    ax = fig.axes[0]
    assert ax.get_title() == "dapo_without_clip\nwithout_clip, step 20"
    assert (
        ax.get_xlabel() == FIGURE3_MEASURE_LABEL
        and "normalised sampled\nprobability" in ax.get_xlabel()
    )
    rows = table[(table["run"] == "dapo_without_clip") & (table["step"] == 20)].sort_values("rank")
    np.testing.assert_allclose([p.get_width() for p in ax.patches], rows["sampled_prob_share"])
    assert [to_hex(p.get_facecolor()) for p in ax.patches] == [
        to_hex(CATEGORY_COLOURS[c]) for c in rows["category"]
    ]
    assert [t.get_text() for t in ax.get_yticklabels()] == rows["word"].tolist()  # rank 1 first
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == list(CATEGORIES)
    assert overlapping_tick_labels(fig) == []
    assert text_outside_figure(fig) == []


@pytest.mark.parametrize("dpi", [100, 200])
@pytest.mark.parametrize(
    ("n_runs", "steps"), [(1, [20]), (1, [20, 80, 200]), (2, [20]), (2, [20, 80, 200])]
)
def test_figure3_text_stays_inside_the_canvas_and_word_labels_do_not_overlap(n_runs, steps, dpi):
    runs = RUNS[:n_runs]
    fig = plot_figure3(figure3_table(steps, runs), runs, steps, dpi=dpi)
    # the figure-level texts that a single narrow panel used to clip are there and drawn
    checked = {t.get_text() for t in fig.findobj(Text) if t.get_visible()}
    legend = fig.legends[0]
    assert fig.get_suptitle().startswith("Top 20 words") and fig.get_suptitle() in checked
    assert legend.get_title().get_text() == "word category"
    assert {t.get_text() for t in legend.get_texts()} == set(CATEGORIES) <= checked
    assert text_outside_figure(fig) == []
    # every panel shows its 20 words, none overlapping its neighbour
    assert all(len(drawn_tick_labels(ax.yaxis)) == len(WORDS) for ax in fig.axes)
    assert overlapping_tick_labels(fig) == []


def test_figure3_panel_without_records_says_so():
    table = figure3_table(steps=(20,))
    fig = plot_figure3(table, RUNS, [20, 80])
    empty = fig.axes[1]
    assert empty.patches == [] or len(empty.patches) == 0
    assert any("no high-entropy" in t.get_text() for t in empty.texts)


def test_category_colours_are_distinct_okabe_ito():
    colours = [to_hex(CATEGORY_COLOURS[c]) for c in CATEGORIES]
    assert len(set(colours)) == 3
    assert to_hex(CATEGORY_COLOURS["anthropomorphic"]) == "#d55e00"


def test_font_family_lists_dejavu_then_only_installed_cjk_fonts(monkeypatch):
    from matplotlib import font_manager

    from hed.report.figures import CJK_FALLBACK_FONTS, font_family

    assert font_family()[0] == "DejaVu Sans"
    installed = {font.name for font in font_manager.fontManager.ttflist}
    assert set(font_family()[1:]) == set(CJK_FALLBACK_FONTS) & installed
    fake = font_manager.FontEntry(fname="/nonexistent.ttf", name="WenQuanYi Zen Hei")
    monkeypatch.setattr(
        font_manager.fontManager, "ttflist", [*font_manager.fontManager.ttflist, fake]
    )
    assert font_family()[-1] == "WenQuanYi Zen Hei"


# ------------------------------------------------------------ Figure 2: zero, no data, measure


def _panel(fig, title):
    return next(ax for ax in fig.axes if ax.get_title() == title)


def test_figure2_step_at_zero_differs_from_a_step_without_data():
    run, role = RUNS[0]
    table = pd.DataFrame(
        {
            "run": [run, run],
            "role": [role, role],
            "step": [0, 8],
            "n_tokens": [1000, 2000],
            "anthropomorphic_count": [5, 0],
            "pass1": [0.1, 0.2],
            "pass1_source": ["generated", "generated"],
        }
    )
    fig = plot_figure2(table, RUNS[:1], single_run=True, steps=[0, 8, 16])
    ax = _panel(fig, f"{run} ({role})")
    bars = [(p.get_x() + p.get_width() / 2, p.get_height(), p.get_hatch()) for p in ax.patches]
    top = ax.get_ylim()[1]
    assert bars == [(0.0, 5.0, None), (8.0, 0.0, None), (16.0, top, "////")]
    [zero] = [line for line in ax.lines if line.get_marker() == "o"]
    assert zero.get_xdata().tolist() == [8.0] and zero.get_ydata().tolist() == [0.0]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "zero at this step" in texts and "no data at this step" in texts
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "8", "16"]


def test_figure2_without_zero_or_gap_has_neither_legend_entry():
    fig = plot_figure2(figure2_table([20, 40]).assign(anthropomorphic_count=[3, 4, 5, 6]), RUNS,
                       single_run=False)  # fmt: skip
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "zero at this step" not in texts and "no data at this step" not in texts


@pytest.mark.parametrize(
    ("measure", "expected", "label"),
    [
        ("count", [4.0, 0.0, 30.0], "tokens (count)"),
        ("per_1k_high_entropy", [20.0, 0.0, 75.0], "per\n1k high-entropy tokens"),
        ("per_1k_tokens", [4.0, 0.0, 15.0], "tokens per 1k tokens"),
    ],
)
def test_figure2_measure_sets_bar_heights_and_axis_label(measure, expected, label):
    run, role = RUNS[0]
    table = pd.DataFrame(
        {
            "run": [run] * 3,
            "role": [role] * 3,
            "step": [0, 10, 20],
            "n_tokens": [1000, 500, 2000],
            "n_high_entropy": [200, 100, 400],
            "anthropomorphic_count": [4, 0, 30],
            "anthropomorphic_per_1k_high_entropy": [20.0, 0.0, 75.0],
            "pass1": [0.1, 0.2, 0.3],
            "pass1_source": ["csv"] * 3,
        }
    )
    fig = plot_figure2(table, RUNS[:1], single_run=True, measure=measure)
    ax = _panel(fig, f"{run} ({role})")
    assert [p.get_height() for p in ax.patches] == expected
    assert ax.get_ylabel().endswith(label)


def test_figure2_unknown_measure_is_refused():
    with pytest.raises(ValueError, match="unknown Figure 2 measure 'ratio'"):
        plot_figure2(figure2_table([0]), RUNS, single_run=False, measure="ratio")


def test_figure3_legend_lists_only_the_categories_shown():
    table = figure3_table(steps=(20,))
    table = table[table["category"] != "anthropomorphic"]
    fig = plot_figure3(table, RUNS, [20])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["reasoning", "other"]
    unknown = table.assign(category=np.where(table["category"] == "other", "hedging", "reasoning"))
    fig = plot_figure3(unknown, RUNS, [20])  # a user category is drawn and listed as `other`
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["reasoning", "other"]
