"""Analyses pipeline: pass@k, the entropy–performance fit and every run compared.

Nodes (tagged ``analyses``), after the aggregation, metrics (and, where ``rescoring.in_default``
is true, rescoring) pipelines:

=====================================  =========================================================
node                                   outputs
=====================================  =========================================================
``tabulate_pass_at_k``                 ``pass_at_k``, then ``plot_pass_at_k`` → ``pass_at_k_png``
``fit_entropy_performance``            ``entropy_performance_fit``, then
                                       ``plot_entropy_performance_fit`` →
                                       ``entropy_performance_fit_png``
``build_runs_comparison``              ``runs_comparison``, then ``plot_runs_comparison`` →
                                       ``runs_comparison_png``
``tabulate_hedging_propensity``        ``hedging_propensity_by_step`` (the records' exact
                                       word-start mass next to the sampled share), then
                                       ``plot_hedging_propensity`` → ``hedging_propensity_png``
``tabulate_advantage_shaping``         ``advantage_shaping_by_step`` (where each advantage scheme
                                       puts the credit), then ``plot_advantage_shaping`` →
                                       ``advantage_shaping_png``; present when
                                       ``analyses.advantage_shaping`` is in the parameters and
                                       its ``enabled`` is not false (conf/base sets it)
``<run>.fetch_trainer_entropy``,       ``trainer_entropy``: the trainer's logged entropy (W&B key
``tabulate_trainer_entropy``           ``analyses.trainer_entropy.metric_key``) next to HED's
=====================================  =========================================================

``runs_comparison`` also joins the ``all`` rows of ``sampler_trainer_mismatch`` when the
rescoring pipeline is part of the default run (``rescoring.in_default``), since only then does
that table exist when this pipeline runs.
"""

from __future__ import annotations

import warnings
from typing import Any

from kedro.pipeline import Node, Pipeline

from hed.config.layout import StudyLayout
from hed.config.session import active_layout, active_params
from hed.pipelines.binding import bound

from .nodes import (
    build_runs_comparison,
    fetch_trainer_entropy,
    fit_entropy_performance,
    plot_advantage_shaping_png,
    plot_entropy_performance_fit_png,
    plot_hedging_propensity_png,
    plot_pass_at_k_png,
    plot_runs_comparison_png,
    tabulate_advantage_shaping,
    tabulate_hedging_propensity,
    tabulate_pass_at_k,
    tabulate_trainer_entropy,
)

TAG = "analyses"


def create_pipeline(
    layout: StudyLayout | None = None, params: dict[str, Any] | None = None, **kwargs: Any
) -> Pipeline:
    """Build the analyses pipeline for ``layout`` (default: the active environment's).

    Args:
        layout: runs × steps.
        params: the parameters (``rescoring.in_default`` decides whether the mismatch table
            joins the comparison); default: the active environment's.
    """
    layout = layout or active_layout()
    params = active_params() if params is None else params
    run_steps = [(run.name, step) for run, step in layout.run_steps()]
    comparison = {
        "summary_by_step": "summary_by_step",
        "pass1_for_figures": "pass1_for_figures",
        "pass_at_k": "pass_at_k",
        "analyses": "params:analyses",
        "runs": "params:runs",
    }
    if bool((params.get("rescoring") or {}).get("in_default")):
        comparison["mismatch"] = "sampler_trainer_mismatch"
    with warnings.catch_warnings():
        # `<run>.step_<step>.<table>`: dotted names are the user contract (docs/datasets.md)
        warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
        pass_at_k = Node(
            func=bound(tabulate_pass_at_k, run_steps=run_steps),
            inputs=[f"{run}.step_{step}.sequences" for run, step in run_steps],
            outputs="pass_at_k",
            name="tabulate_pass_at_k",
            tags=[TAG],
        )
        propensity = Node(
            func=bound(tabulate_hedging_propensity, run_steps=run_steps),
            inputs=[
                "params:aggregation",
                "params:reporting",
                *(f"{run}.step_{step}.token_records" for run, step in run_steps),
            ],
            outputs="hedging_propensity_by_step",
            name="tabulate_hedging_propensity",
            tags=[TAG],
        )
    trainer = [
        Node(
            func=bound(fetch_trainer_entropy, run=run.name),
            inputs=["params:metrics", "params:analyses", "pass1"],
            outputs=f"{run.name}.trainer_entropy_history",
            name="fetch_trainer_entropy",
            namespace=run.name,
            tags=[TAG],
        )
        for run in layout.runs
    ]
    trainer.append(
        Node(
            func=tabulate_trainer_entropy,
            inputs=[
                "summary_by_step",
                "params:generation",
                "params:analyses",
                *(f"{run.name}.trainer_entropy_history" for run in layout.runs),
            ],
            outputs="trainer_entropy",
            name="tabulate_trainer_entropy",
            tags=[TAG],
        )
    )
    return shaping_pipeline(params, run_steps) + Pipeline(
        [
            *trainer,
            pass_at_k,
            propensity,
            Node(
                func=plot_hedging_propensity_png,
                inputs=["hedging_propensity_by_step", "params:analyses"],
                outputs="hedging_propensity_png",
                name="plot_hedging_propensity",
                tags=[TAG],
            ),
            Node(
                func=plot_pass_at_k_png,
                inputs=["pass_at_k", "params:analyses"],
                outputs="pass_at_k_png",
                name="plot_pass_at_k",
                tags=[TAG],
            ),
            Node(
                func=fit_entropy_performance,
                inputs=["summary_by_step", "pass1_for_figures"],
                outputs="entropy_performance_fit",
                name="fit_entropy_performance",
                tags=[TAG],
            ),
            Node(
                func=plot_entropy_performance_fit_png,
                inputs=[
                    "summary_by_step",
                    "pass1_for_figures",
                    "entropy_performance_fit",
                    "params:analyses",
                ],
                outputs="entropy_performance_fit_png",
                name="plot_entropy_performance_fit",
                tags=[TAG],
            ),
            Node(
                func=build_runs_comparison,
                inputs=comparison,
                outputs="runs_comparison",
                name="build_runs_comparison",
                tags=[TAG],
            ),
            Node(
                func=plot_runs_comparison_png,
                inputs=["runs_comparison", "params:analyses"],
                outputs="runs_comparison_png",
                name="plot_runs_comparison",
                tags=[TAG],
            ),
        ]
    )


def shaping_pipeline(params: dict[str, Any], run_steps: list[tuple[str, int]]) -> Pipeline:
    """``tabulate_advantage_shaping`` → ``advantage_shaping_by_step``, then
    ``plot_advantage_shaping`` → ``advantage_shaping_png``.

    Present when ``analyses.advantage_shaping`` is in the parameters and its ``enabled`` is
    not false. Inputs: ``entropy_thresholds``, ``params:aggregation``,
    ``params:analyses``, then every (run, step)'s ``sequences`` and
    ``token_records``.
    """
    section = (params.get("analyses") or {}).get("advantage_shaping", False)
    off = isinstance(section, dict) and section.get("enabled") is False
    if section is False or section is None or off:
        return Pipeline([])
    tables = [
        f"{run}.step_{step}.{name}"
        for run, step in run_steps
        for name in ("sequences", "token_records")
    ]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
        return Pipeline(
            [
                Node(
                    func=bound(tabulate_advantage_shaping, run_steps=run_steps),
                    inputs=[
                        "entropy_thresholds",
                        "params:aggregation",
                        "params:analyses",
                        *tables,
                    ],
                    outputs="advantage_shaping_by_step",
                    name="tabulate_advantage_shaping",
                    tags=[TAG],
                ),
                Node(
                    func=plot_advantage_shaping_png,
                    inputs=["advantage_shaping_by_step", "params:analyses"],
                    outputs="advantage_shaping_png",
                    name="plot_advantage_shaping",
                    tags=[TAG],
                ),
            ]
        )
