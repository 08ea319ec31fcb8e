"""Dynamics pipeline: per (run, step) Cov(log π, A) and entropy by correctness, then the
all-steps tables and their figures (docs/dynamics.md).

Per (run, step), under the namespace ``<run>.step_<step>`` (inputs: the step's merged
``token_records`` and ``sequences`` and its ``entropy_thresholds`` row, written by the
aggregation pipeline; ``params:aggregation`` and ``params:dynamics``):

====================================  ==============================================================
node                                  outputs (``<run>.step_<step>.`` prefix)
====================================  ==============================================================
``tabulate_advantage_covariance``     ``advantage_covariance_by_step``,
                                      ``advantage_covariance_top_tokens``
``tabulate_entropy_by_correctness``   ``entropy_by_correctness``
====================================  ==============================================================

Then ``combine_advantage_covariance``, ``combine_advantage_covariance_top_tokens`` and
``combine_entropy_by_correctness`` write the all-steps tables of the same names (without
prefix), and ``plot_advantage_covariance`` / ``plot_entropy_by_correctness`` the PNGs
``advantage_covariance_png`` / ``entropy_by_correctness_png``.
"""

from __future__ import annotations

import warnings
from typing import Any

from kedro.pipeline import Node, Pipeline

from hed.config.layout import StudyLayout
from hed.config.session import active_layout

from .nodes import (
    combine_step_tables,
    plot_advantage_covariance,
    plot_entropy_by_correctness,
    tabulate_advantage_covariance,
    tabulate_entropy_by_correctness,
)

#: Per-step tables that also exist stacked over every run and step: {table: combining node}.
STEP_TABLES = {
    "advantage_covariance_by_step": "combine_advantage_covariance",
    "advantage_covariance_top_tokens": "combine_advantage_covariance_top_tokens",
    "entropy_by_correctness": "combine_entropy_by_correctness",
}


def step_pipeline(run: str, step: int) -> Pipeline:
    """The nodes of one (run, step), in the namespace ``<run>.step_<step>``."""
    ns = f"{run}.step_{step}"
    step_inputs = [f"{ns}.entropy_thresholds", f"{ns}.sequences", f"{ns}.token_records"]
    return Pipeline(
        [
            Node(
                func=tabulate_advantage_covariance,
                inputs=[*step_inputs, "params:aggregation", "params:dynamics"],
                outputs=[
                    f"{ns}.advantage_covariance_by_step",
                    f"{ns}.advantage_covariance_top_tokens",
                ],
                name="tabulate_advantage_covariance",
                namespace=ns,
            ),
            Node(
                func=tabulate_entropy_by_correctness,
                inputs=[*step_inputs, "params:dynamics"],
                outputs=f"{ns}.entropy_by_correctness",
                name="tabulate_entropy_by_correctness",
                namespace=ns,
            ),
        ],
        tags=["dynamics", f"run_{run}", f"step_{step}"],
    )


def create_pipeline(layout: StudyLayout | None = None, **kwargs: Any) -> Pipeline:
    """Build the dynamics pipeline for ``layout`` (default: the active environment's).

    Args:
        layout: runs × steps; ``None`` = :func:`hed.config.session.active_layout`.

    Returns:
        Two nodes per (run, step) (module docstring), three combining nodes and two figures.
    """
    layout = layout or active_layout()
    namespaces = [f"{run.name}.step_{step}" for run, step in layout.run_steps()]
    steps = [step_pipeline(run.name, step) for run, step in layout.run_steps()]
    with warnings.catch_warnings():
        # `<run>.step_<step>.<table>`: dotted names are the user contract (docs/datasets.md)
        warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
        combine = [
            Node(
                func=combine_step_tables,
                inputs=[f"{ns}.{table}" for ns in namespaces],
                outputs=table,
                name=name,
                tags=["dynamics"],
            )
            for table, name in STEP_TABLES.items()
        ]
    plots = [
        Node(
            func=plot_advantage_covariance,
            inputs=["advantage_covariance_by_step", "params:runs", "params:dynamics"],
            outputs="advantage_covariance_png",
            name="plot_advantage_covariance",
            tags=["dynamics"],
        ),
        Node(
            func=plot_entropy_by_correctness,
            inputs=["entropy_by_correctness", "params:runs", "params:dynamics"],
            outputs="entropy_by_correctness_png",
            name="plot_entropy_by_correctness",
            tags=["dynamics"],
        ),
    ]
    return sum(steps, Pipeline([])) + Pipeline([*combine, *plots])
