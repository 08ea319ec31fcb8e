"""Nodes of the reporting pipeline: Figure 2 and Figure 3 (tables, PNGs) and ``resolved_config``.

docs/figures.md defines and explains both figures and docs/reporting.md lists
the parameters. :func:`plan_figures` checks the inputs once and decides what the figures show
(panels, Figure 3 steps, omissions); in strict mode it fails with one message naming
everything missing, before any table or figure is written.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from hed.config.layout import StudyLayout, configured_steps, panel_runs, run_roles
from hed.config.params import ReportingParams
from hed.errors import ConfigError, InputDataError
from hed.io import provenance
from hed.report import figures, token_report

logger = logging.getLogger(__name__)

FIGURE2_COLUMNS = [
    "run",
    "role",
    "step",
    "n_tokens",
    "n_high_entropy",
    "anthropomorphic_count",
    "anthropomorphic_per_1k_high_entropy",
    "pass1",
    "pass1_source",
]
FIGURE3_COLUMNS = [
    "run",
    "role",
    "step",
    "rank",
    "word",
    "category",
    "count",
    "count_share",
    "sampled_prob_share",
    "topk_mass_share",
]
PAPER = "paper_reproduction"
SINGLE = "single_run_diagnostic"
#: Tie-break of the Figure 3 ranking: share ↓, then count ↓, then word ↑ (alphabetical).
RANK_ORDER = (("sampled_prob_share", False), ("count", False), ("word", True))
# ------------------------------------------------------------------ configuration helpers


def figure2_kind(runs: StudyLayout | Mapping[str, Any]) -> str:
    """``paper_reproduction`` when ``runs`` has a with_clip and a without_clip run, else
    ``single_run_diagnostic`` (docs/figures.md)."""
    roles = set(run_roles(runs).values())
    return PAPER if {"with_clip", "without_clip"} <= roles else SINGLE


def figure2_dataset(runs: StudyLayout | Mapping[str, Any]) -> str:
    """Catalog name of the Figure 2 table for ``runs``: ``figure2_<kind>`` (file ``<name>.csv``)."""
    return f"figure2_{figure2_kind(runs)}"


def fallback_fig3_steps(steps: Sequence[int]) -> list[int]:
    """Figure 3 steps when ``reporting.fig3.steps`` is unset: first, middle and last of
    ``steps`` (all of them when there are three or fewer)."""
    ordered = sorted(set(int(s) for s in steps))
    if len(ordered) <= 3:
        return ordered
    return [ordered[0], ordered[(len(ordered) - 1) // 2], ordered[-1]]


def sampled_words(mass: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``token_probability_mass_high_entropy`` that Figure 3 can show: a non-empty word
    (docs/aggregation.md) sampled at least once at a high-entropy position (``count`` > 0; the
    table also lists words seen only among the top-k alternatives, with count 0)."""
    words = mass["word"].astype("string")
    count = pd.to_numeric(mass["count"], errors="coerce").fillna(0)
    return mass[words.notna() & (words.str.len() > 0) & (count > 0)]


def _steps_list(steps: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(s)) for s in steps) + "]"


# ------------------------------------------------------------------ nodes


def plan_figures(
    summary_by_step: pd.DataFrame,
    token_probability_mass_high_entropy: pd.DataFrame,
    pass1_for_figures: pd.DataFrame,
    runs: StudyLayout | dict[str, Any],
    reporting: ReportingParams | dict[str, Any],
) -> dict[str, Any]:
    """Check the reporting inputs and decide what Figures 2 and 3 show.

    Missing (an error in strict mode, listed all together in one message): the with_clip /
    without_clip pair, ``reporting.fig3.steps``, word records of a Figure 3 (run, step), any
    pass@1 of a run or at one of its plotted steps, summary rows of a run or of one of its
    configured steps. Non-strict mode lists everything in ``omissions``
    (logged as warnings and kept in ``resolved_config``) and draws what exists; without
    ``fig3.steps`` it uses :func:`fallback_fig3_steps` of the steps that have word records.

    Args:
        summary_by_step: one row per (run, step) (aggregation).
        token_probability_mass_high_entropy: one row per (run, step, word) (aggregation).
        pass1_for_figures: run, step, pass1, pass1_source (metrics).
        runs: ``params:runs``, parsed (:class:`~hed.config.layout.StudyLayout`) or raw.
        reporting: ``params:reporting``.

    Returns:
        ``figure_plan``: strict, figure2_kind, panels (``[run, role]`` in panel order),
        fig3_steps, fig3_steps_from (``reporting.fig3.steps`` or ``fallback``), top_n_words,
        fig2_measure (``reporting.fig2_measure``), fig2_steps (Figure 2's step slots: the
        configured and summary steps of the panels' runs), omissions (one sentence each).

    Raises:
        InputDataError: ``summary_by_step`` has no row of any panel's run (strict or not).
        ConfigError: strict mode and something is missing (one message listing all of it), or
            a malformed ``reporting`` section,
            ``reporting.fig3.steps``, ``reporting.top_n_words`` or ``reporting.fig2_measure``.
    """
    parsed = ReportingParams.of(reporting)
    strict, top_n, fig3_steps = parsed.strict, parsed.top_n_words, parsed.fig3_steps
    measure = parsed.fig2_measure
    panels = panel_runs(runs)
    _refuse_empty_summary(summary_by_step, [run for run, _ in panels])
    kind = figure2_kind(runs)
    missing = [] if kind == PAPER else [_role_pair_gap(panels)]
    notes: list[str] = []
    for run, _ in panels:
        missing += _summary_gaps(summary_by_step, run, list(configured_steps(runs, run)))
        gap, note = _pass1_gaps(pass1_for_figures, summary_by_step, run)
        if strict:  # a pass@1 missing at one plotted step is an error too (README)
            gap, note = gap + note, []
        missing, notes = missing + gap, notes + note

    mass = sampled_words(token_probability_mass_high_entropy)
    fig3_from = "reporting.fig3.steps"
    if fig3_steps is None:
        fig3_from = "fallback"
        fig3_steps = fallback_fig3_steps(mass.loc[mass["run"].isin(dict(panels)), "step"].tolist())
        missing.append(
            "reporting.fig3.steps is not set (the paper used [20, 80, 200]); "
            f"Figure 3 uses steps {_steps_list(fig3_steps)} (first, middle, last with records)"
        )
    missing += _fig3_gaps(mass, panels, fig3_steps)

    if strict and missing:
        raise ConfigError(
            "reporting.strict is true and the figures are incomplete: "
            + "; ".join(f"({i}) {item}" for i, item in enumerate(missing, 1))
            + ". Provide what is missing, or set reporting.strict: false to draw what exists"
        )
    for item in missing + notes:
        logger.warning("reporting leaves out: %s", item)
    return {
        "strict": strict,
        "figure2_kind": kind,
        "panels": [[run, role] for run, role in panels],
        "fig3_steps": [int(s) for s in fig3_steps],
        "fig3_steps_from": fig3_from,
        "top_n_words": top_n,
        "fig2_measure": measure,
        "fig2_steps": _figure2_steps(summary_by_step, runs, panels),
        "omissions": missing + notes,
    }


def _refuse_empty_summary(summary: pd.DataFrame, shown: list[str]) -> None:
    """Strict or not, no figure is drawn from a ``summary_by_step`` without a row of any
    panel's run: the Figure 2 table would be empty yet current."""
    if "run" in summary and summary["run"].isin(shown).any():
        return
    raise InputDataError(
        f"summary_by_step has no row of run(s) {', '.join(shown) or 'none'}, so the Figure 2 "
        "table would be empty; write it again with the aggregation pipeline "
        "(kedro run --pipelines aggregation,reporting)"
    )


def _figure2_steps(
    summary: pd.DataFrame, runs: StudyLayout | Mapping[str, Any], panels: list[tuple[str, str]]
) -> list[int]:
    """Figure 2's step slots: every configured step and every summary step of the panels'
    runs, so that a step one run lacks shows as "no data" in its panel."""
    shown = [run for run, _ in panels]
    steps = set(summary.loc[summary["run"].isin(shown), "step"].astype(int))
    for run in shown:
        steps.update(list(configured_steps(runs, run)))
    return sorted(steps)


def _role_pair_gap(panels: list[tuple[str, str]]) -> str:
    present = ", ".join(f"{run}={role}" for run, role in panels) or "none"
    roles = {role for _, role in panels}
    absent = [role for role in ("without_clip", "with_clip") if role not in roles]
    return (
        f"role pair: no run with role {' or '.join(absent)} (runs: {present}); "
        "Figure 2 is a single-run diagnostic"
    )


def _fig3_gaps(mass: pd.DataFrame, panels: list[tuple[str, str]], steps: list[int]) -> list[str]:
    gaps = []
    for run, _ in panels:
        have = set(mass.loc[mass["run"] == run, "step"].astype(int))
        absent = [s for s in steps if s not in have]
        if absent:
            gaps.append(
                f"run {run}: Figure 3 step(s) {_steps_list(absent)} have no high-entropy "
                "word records in token_probability_mass_high_entropy"
            )
    return gaps


def _summary_gaps(summary: pd.DataFrame, run: str, configured: list[int]) -> list[str]:
    have = set(summary.loc[summary["run"] == run, "step"].astype(int))
    if not have:
        return [f"run {run}: no rows in summary_by_step"]
    absent = [s for s in configured if s not in have]
    if absent:
        return [
            f"run {run}: configured step(s) {_steps_list(absent)} have no rows in summary_by_step"
        ]
    return []


def _pass1_gaps(
    pass1: pd.DataFrame, summary: pd.DataFrame, run: str
) -> tuple[list[str], list[str]]:
    """(missing, notes) about the pass@1 of ``run`` at its summary steps."""
    steps = sorted(set(summary.loc[summary["run"] == run, "step"].astype(int)))
    rows = pass1[pass1["run"] == run]
    source = ", ".join(sorted({str(s) for s in rows["pass1_source"].dropna()})) or "none"
    values = dict(
        zip(rows["step"].astype(int), pd.to_numeric(rows["pass1"], errors="coerce"), strict=True)
    )
    found = [s for s in steps if s in values and math.isfinite(values[s])]
    if steps and not found:
        return [f"run {run}: no pass@1 at any of its steps (figure source: {source})"], []
    absent = [s for s in steps if s not in found]
    if absent:
        return [], [
            f"run {run}: no pass@1 at step(s) {_steps_list(absent)} (figure source: {source})"
        ]
    return [], []


def build_figure2_table(
    summary_by_step: pd.DataFrame, pass1_for_figures: pd.DataFrame, figure_plan: dict[str, Any]
) -> pd.DataFrame:
    """The Figure 2 table: per (run, step), the anthropomorphic high-entropy count and pass@1.

    ``anthropomorphic_count`` is ``n_high_entropy_anthropomorphic`` of ``summary_by_step``;
    ``anthropomorphic_per_1k_high_entropy`` = 1000 × anthropomorphic_count / n_high_entropy
    (empty when a step has no high-entropy token); ``pass1``/``pass1_source`` are matched on
    the exact step (empty when the figure source has no value there).

    Args:
        summary_by_step: one row per (run, step).
        pass1_for_figures: run, step, pass1, pass1_source.
        figure_plan: from :func:`plan_figures` (panels and their order).

    Returns:
        Columns :data:`FIGURE2_COLUMNS`, runs in panel order, steps ascending.
    """
    order = {run: i for i, (run, _) in enumerate(figure_plan["panels"])}
    roles = {run: role for run, role in figure_plan["panels"]}
    summary = summary_by_step[summary_by_step["run"].isin(order)].astype({"step": "int64"})
    pass1 = pass1_for_figures[["run", "step", "pass1", "pass1_source"]].astype({"step": "int64"})
    table = summary.merge(pass1, on=["run", "step"], how="left", validate="one_to_one")
    count = table["n_high_entropy_anthropomorphic"].astype("int64")
    n_high = table["n_high_entropy"].astype("int64")
    table = table.assign(
        role=table["run"].map(roles),
        anthropomorphic_count=count,
        anthropomorphic_per_1k_high_entropy=np.where(
            n_high > 0, 1000.0 * count / n_high.where(n_high > 0, 1), np.nan
        ),
        pass1=pd.to_numeric(table["pass1"], errors="coerce").astype("float64"),
        _order=table["run"].map(order),
    )
    table = table.sort_values(["_order", "step"], kind="stable")
    return (
        table[FIGURE2_COLUMNS]
        .astype({"n_tokens": "int64", "n_high_entropy": "int64"})
        .reset_index(drop=True)
    )


def rank_words(rows: pd.DataFrame, top_n: int) -> pd.DataFrame:
    """The ``top_n`` words of one (run, step) by ``sampled_prob_share``, with ``rank`` 1..n.

    Ties are broken by ``count`` (larger first), then by the word (alphabetical), so ranks
    are reproducible (:data:`RANK_ORDER`).
    """
    columns, ascending = zip(*RANK_ORDER, strict=True)
    ranked = rows.sort_values(list(columns), ascending=list(ascending), kind="stable").head(top_n)
    return ranked.assign(rank=np.arange(1, len(ranked) + 1, dtype=np.int64))


def build_figure3_table(
    token_probability_mass_high_entropy: pd.DataFrame, figure_plan: dict[str, Any]
) -> pd.DataFrame:
    """The Figure 3 table: the top words at high-entropy positions per (run, Figure 3 step).

    The measure is ``sampled_prob_share`` of ``token_probability_mass_high_entropy``: for word
    w, Σ prob over the step's high-entropy tokens with word w ÷ Σ prob over all its
    high-entropy tokens with a non-empty word (docs/figures.md). ``count_share`` and
    ``topk_mass_share`` are carried along as diagnostics.

    Args:
        token_probability_mass_high_entropy: one row per (run, step, word).
        figure_plan: from :func:`plan_figures` (panels, fig3_steps, top_n_words).

    Returns:
        Columns :data:`FIGURE3_COLUMNS`; runs in panel order, steps ascending, rank 1..n.
    """
    mass = sampled_words(token_probability_mass_high_entropy).astype({"step": "int64"})
    parts = []
    for run, role in figure_plan["panels"]:
        for step in figure_plan["fig3_steps"]:
            rows = mass[(mass["run"] == run) & (mass["step"] == int(step))]
            if not rows.empty:
                parts.append(rank_words(rows, int(figure_plan["top_n_words"])).assign(role=role))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in FIGURE3_COLUMNS})
    return pd.concat(parts, ignore_index=True)[FIGURE3_COLUMNS]


def plot_figure2_png(
    figure2_table: pd.DataFrame,
    figure_plan: dict[str, Any],
    reporting: ReportingParams | dict[str, Any],
) -> Figure:
    """Draw Figure 2 (:func:`hed.report.figures.plot_figure2`) at ``reporting.figure2``'s panel
    size and dpi, bars measuring ``reporting.fig2_measure``, one slot per step of ``fig2_steps``.

    Raises:
        ConfigError: a bad ``reporting.figure2`` when ``reporting`` is a raw dict
            (:func:`hed.report.style.figure_style`).
    """
    style = ReportingParams.of(reporting).figure2  # a FigureStyle: checked before the run
    return figures.plot_figure2(
        figure2_table,
        [tuple(panel) for panel in figure_plan["panels"]],
        single_run=figure_plan["figure2_kind"] != PAPER,
        panel_size=style.panel_size,
        dpi=style.dpi,
        measure=figure_plan.get("fig2_measure", "count"),
        steps=figure_plan.get("fig2_steps"),
    )


def plot_figure3_png(
    figure3_table: pd.DataFrame,
    figure_plan: dict[str, Any],
    reporting: ReportingParams | dict[str, Any],
) -> Figure:
    """Draw Figure 3 (:func:`hed.report.figures.plot_figure3`) at ``reporting.figure3``'s panel
    size and dpi.

    Raises:
        ConfigError: a bad ``reporting.figure3`` when ``reporting`` is a raw dict
            (:func:`hed.report.style.figure_style`).
    """
    style = ReportingParams.of(reporting).figure3  # a FigureStyle: checked before the run
    return figures.plot_figure3(
        figure3_table,
        [tuple(panel) for panel in figure_plan["panels"]],
        figure_plan["fig3_steps"],
        top_n=int(figure_plan["top_n_words"]),
        panel_size=style.panel_size,
        dpi=style.dpi,
    )


#: Analyses outputs that ``resolved_config`` names as artifacts (published) when its run wrote them
PUBLISHED_ANALYSES = ("advantage_shaping_by_step", "advantage_shaping_png")


def build_resolved_config(
    *,
    figure_plan: dict[str, Any],
    checkpoints: dict[str, Any],
    entropy_thresholds: pd.DataFrame,
    summary_by_step: pd.DataFrame,
    token_probability_mass_high_entropy: pd.DataFrame,
    pass1_for_figures: pd.DataFrame,
    parameters: dict[str, Any],
    run_context: dict[str, Any],
    artifacts: Sequence[str],
) -> dict[str, Any]:
    """Everything needed to say what produced the figures, as one JSON document.

    Args:
        figure_plan: from :func:`plan_figures` (strict, panels, Figure 3 steps, omissions).
        checkpoints: ``{run: {role, checkpoint_root, steps: {step: {model_dir,
            config_sha256, weights_index_sha256}}}}`` (generation's ``resolve_checkpoints``).
        entropy_thresholds: one row per (run, step): the ρ and threshold each step used.
        summary_by_step, token_probability_mass_high_entropy, pass1_for_figures: the figures'
            inputs; their rows and (run, steps) coverage are recorded.
        parameters: every parameter of the environment (Kedro's ``parameters``).
        run_context: what :class:`hed.hooks.ProvenanceHooks` recorded: env, run_id,
            project_path, git commit, package versions, the resolved path and load version of
            each input of this node, the save path of each output of the run.
        artifacts: names of the reporting outputs (bound when the pipeline is built); the
            run's outputs named in :data:`PUBLISHED_ANALYSES` join them.

    Returns:
        ``resolved_config`` (see docs/reporting.md for the keys).
    """
    context = run_context or {}
    recorded = context.get("inputs") or {}
    inputs = {name: dict(info) for name, info in recorded.items() if name != "figure_plan"}
    for name, frame in {
        "summary_by_step": summary_by_step,
        "token_probability_mass_high_entropy": token_probability_mass_high_entropy,
        "pass1_for_figures": pass1_for_figures,
        "entropy_thresholds": entropy_thresholds,
    }.items():
        inputs.setdefault(name, {})["coverage"] = provenance.table_coverage(frame)
    outputs = context.get("outputs") or {}
    threshold_columns = [
        c
        for c in ("run", "step", "top_entropy_frac", "n_tokens", "n_high_entropy", "threshold")
        if c in entropy_thresholds
    ]
    return provenance.jsonable(
        {
            "format": "hed.resolved_config/1",
            "env": context.get("env"),
            "run_id": context.get("run_id"),
            "project_path": context.get("project_path"),
            "git_commit": context.get("git_commit"),
            "git_dirty": context.get("git_dirty"),
            "packages": context.get("packages"),
            "kedro_run": context.get("kedro_run"),
            "provenance_recorded": "inputs" in context,
            "strict": figure_plan["strict"],
            "omissions": list(figure_plan["omissions"]),
            "figures": {k: v for k, v in figure_plan.items() if k not in ("strict", "omissions")},
            "checkpoints": checkpoints,
            "thresholds": entropy_thresholds[threshold_columns].to_dict(orient="records"),
            "inputs": inputs,
            "artifacts": {name: outputs.get(name) for name in artifacts}
            | {name: outputs[name] for name in PUBLISHED_ANALYSES if outputs.get(name)},
            # the run's HTML pages (token report, explorer): what W&B/Hub publishing shows
            "pages": {name: info for name, info in outputs.items() if name.endswith("_html")},
            "parameters": parameters,
        }
    )


# ------------------------------------------------------------------ token report (HTML)


def build_token_report(
    reporting: ReportingParams | dict[str, Any],
    checkpoints: dict[str, Any],
    entropy_thresholds: pd.DataFrame,
    prompts: pd.DataFrame,
    *step_tables: Any,
    run_steps: Sequence[tuple[str, str, int]],
) -> str:
    """The ``token_report_html`` page: chosen responses of every step, coloured by entropy.

    Args:
        reporting: ``params:reporting``, parsed (:class:`~hed.config.params.ReportingParams`,
            its ``token_report`` options; docs/token_report.md) or the raw dict.
        checkpoints: generation's ``checkpoints``; each step's ``model_dir`` holds the
            tokenizer that names the top-k alternatives (missing folder: recorded texts).
        entropy_thresholds: one row per (run, step): ``threshold`` (nats), ``top_entropy_frac``.
        prompts: the ``prompts`` table (prompt text above each row of the page).
        *step_tables: per (run, step) of ``run_steps``, its ``sequences`` then its
            ``token_records`` (lazy pyarrow datasets; only the chosen rows are read).
        run_steps: ``(run, role, step)`` of the tables, bound when the pipeline is built.

    Returns:
        One self-contained HTML document (:func:`hed.report.token_report.render_html`).

    Raises:
        ConfigError: a malformed ``reporting.token_report`` section, or ``steps`` matching no
            step.
    """
    options = ReportingParams.of(reporting).token_report
    steps = token_report.step_inputs(run_steps, checkpoints, entropy_thresholds, step_tables)
    report = token_report.build_report(steps, options, prompts=prompts)
    for note in report["notes"]:
        logger.info("token report leaves out: %s", note)
    return token_report.render_html(report)
