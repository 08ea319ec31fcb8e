"""Reporting pipeline: Figure 2 and Figure 3 (tables and PNGs) and ``resolved_config``."""

from __future__ import annotations

import warnings
from typing import Any

from kedro.pipeline import Node, Pipeline

from hed.config.layout import layout_from_params
from hed.config.session import active_params
from hed.io.provenance import RUN_CONTEXT
from hed.pipelines.binding import bound

from .explorer_nodes import build_study_explorer
from .nodes import (
    build_figure2_table,
    build_figure3_table,
    build_resolved_config,
    build_token_report,
    figure2_dataset,
    plan_figures,
    plot_figure2_png,
    plot_figure3_png,
)

#: Reporting outputs with a fixed name (the Figure 2 table's name depends on the runs' roles).
FIXED_OUTPUTS = ("figure3_table", "figure2_png", "figure3_png", "resolved_config")


def create_pipeline(params: dict[str, Any] | None = None, **kwargs) -> Pipeline:
    """Build the reporting pipeline for the runs of ``params`` (default: the active environment).

    The Figure 2 table is written to ``figure2_paper_reproduction`` when ``runs`` holds a
    with_clip and a without_clip run, else to ``figure2_single_run_diagnostic``
    (:func:`~hed.pipelines.reporting.nodes.figure2_dataset`); the choice is made here, from
    the roles, because Kedro fixes a node's outputs when the pipeline is built.

    Nodes (tagged ``reporting``): ``plan_figures`` → ``figure_plan`` (memory);
    ``build_figure2_table``; ``build_figure3_table`` → ``figure3_table``; ``plot_figure2`` →
    ``figure2_png``; ``plot_figure3`` → ``figure3_png``; ``build_resolved_config`` →
    ``resolved_config`` (takes ``run_context``, filled by ``hed.hooks.ProvenanceHooks``).

    Args:
        params: parameters holding ``runs`` (roles only are read; no checkpoint is touched).
    """
    params = active_params() if params is None else params
    figure2 = figure2_dataset(params.get("runs") or {})
    tags = ["reporting"]
    figures_pipeline = Pipeline(
        [
            Node(
                func=plan_figures,
                inputs={
                    "summary_by_step": "summary_by_step",
                    "token_probability_mass_high_entropy": "token_probability_mass_high_entropy",
                    "pass1_for_figures": "pass1_for_figures",
                    "runs": "params:runs",
                    "reporting": "params:reporting",
                },
                outputs="figure_plan",
                name="plan_figures",
                tags=tags,
            ),
            Node(
                func=build_figure2_table,
                inputs=["summary_by_step", "pass1_for_figures", "figure_plan"],
                outputs=figure2,
                name="build_figure2_table",
                tags=tags,
            ),
            Node(
                func=build_figure3_table,
                inputs=["token_probability_mass_high_entropy", "figure_plan"],
                outputs="figure3_table",
                name="build_figure3_table",
                tags=tags,
            ),
            Node(
                func=plot_figure2_png,
                inputs=[figure2, "figure_plan", "params:reporting"],
                outputs="figure2_png",
                name="plot_figure2",
                tags=tags,
            ),
            Node(
                func=plot_figure3_png,
                inputs=["figure3_table", "figure_plan", "params:reporting"],
                outputs="figure3_png",
                name="plot_figure3",
                tags=tags,
            ),
            Node(
                func=bound(build_resolved_config, artifacts=(figure2, *FIXED_OUTPUTS)),
                inputs={
                    "figure_plan": "figure_plan",
                    "checkpoints": "checkpoints",
                    "entropy_thresholds": "entropy_thresholds",
                    "summary_by_step": "summary_by_step",
                    "token_probability_mass_high_entropy": "token_probability_mass_high_entropy",
                    "pass1_for_figures": "pass1_for_figures",
                    "parameters": "parameters",
                    "run_context": RUN_CONTEXT,
                },
                outputs="resolved_config",
                name="build_resolved_config",
                tags=tags,
            ),
        ]
    )
    return figures_pipeline + token_report_pipeline(params) + explorer_pipeline(params)


def _step_tables(params: dict[str, Any]) -> tuple[list[tuple[str, str, int]], list[str]]:
    """``(run, role, step)`` of the layout and their ``sequences``/``token_records`` names."""
    layout = layout_from_params(params)
    run_steps = [(run.name, run.role, step) for run, step in layout.run_steps()]
    tables = [
        f"{run}.step_{step}.{name}"
        for run, _, step in run_steps
        for name in ("sequences", "token_records")
    ]
    return run_steps, tables


def explorer_pipeline(params: dict[str, Any]) -> Pipeline:
    """The ``build_study_explorer`` node → ``study_explorer_html`` (docs/explorer.md).

    Present when ``reporting.explorer`` is in the parameters and its ``enabled`` is not false.
    Inputs: ``params:reporting``, ``params:aggregation``, ``params:analyses``, ``checkpoints``,
    ``entropy_thresholds``, ``prompts``, the Figure 2 table, then every (run, step)'s
    ``sequences`` and ``token_records``.

    Args:
        params: the environment's parameters (``runs``, ``generation``, ``reporting``).
    """
    section = (params.get("reporting") or {}).get("explorer", False)
    if section is False or (isinstance(section, dict) and section.get("enabled") is False):
        return Pipeline([])
    run_steps, tables = _step_tables(params)
    figure2 = figure2_dataset(params.get("runs") or {})
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
        node = Node(
            func=bound(build_study_explorer, run_steps=run_steps),
            inputs=[
                "params:reporting",
                "params:aggregation",
                "params:analyses",
                "checkpoints",
                "entropy_thresholds",
                "prompts",
                figure2,
                *tables,
            ],
            outputs="study_explorer_html",
            name="build_study_explorer",
            tags=["reporting"],
        )
    return Pipeline([node])


def token_report_pipeline(params: dict[str, Any]) -> Pipeline:
    """The ``build_token_report`` node → ``token_report_html`` (docs/token_report.md).

    Present when ``reporting.token_report`` is in the parameters (conf/base has it) and its
    ``enabled`` is not false; empty otherwise. The node reads every (run, step) of the layout:
    ``<run>.step_<step>.sequences`` and ``<run>.step_<step>.token_records`` (merged, lazy),
    plus ``checkpoints`` (tokenizer folders), ``entropy_thresholds`` and ``prompts``.

    Args:
        params: the environment's parameters (``runs``, ``generation``, ``reporting``).
    """
    section = (params.get("reporting") or {}).get("token_report", False)
    if section is False or (isinstance(section, dict) and section.get("enabled") is False):
        return Pipeline([])
    run_steps, tables = _step_tables(params)
    with warnings.catch_warnings():
        # `<run>.step_<step>.<table>`: dotted names are the user contract (docs/datasets.md)
        warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
        node = Node(
            func=bound(build_token_report, run_steps=run_steps),
            inputs=["params:reporting", "checkpoints", "entropy_thresholds", "prompts", *tables],
            outputs="token_report_html",
            name="build_token_report",
            tags=["reporting"],
        )
    return Pipeline([node])
