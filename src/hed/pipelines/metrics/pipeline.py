"""Metrics pipeline: per run, its pass@1 sources → ``pass1`` and ``pass1_for_figures``."""

from __future__ import annotations

import logging
from typing import Any

from kedro.pipeline import Node, Pipeline

from hed.config.layout import StudyLayout
from hed.config.session import active_layout, active_params, data_root, training_inputs
from hed.pass1.config import EXPORT_DIR, RunPass1Config, metrics_params
from hed.pipelines.binding import bound

from .nodes import (
    collect_run_pass1,
    combine_pass1,
    fetch_wandb_history,
    read_csv_pass1,
    select_pass1_for_figures,
)

logger = logging.getLogger(__name__)


def _run_nodes(
    config: RunPass1Config, steps: list[int], extra_inputs: dict[str, str]
) -> list[Node]:
    """The nodes of one run, namespaced ``<run>.``."""
    run = config.run
    tags = ["metrics", f"run_{run}"]
    nodes = []
    collect_inputs = {"metrics_params": "params:metrics"}
    if config.wandb_source is not None:
        nodes.append(
            Node(
                func=bound(fetch_wandb_history, run=run),
                inputs={"metrics_params": "params:metrics", **extra_inputs},
                outputs=f"{run}.metrics_export",
                name="fetch_wandb_history",
                namespace=run,
                tags=[*tags, "wandb"],
            )
        )
        collect_inputs["wandb_history"] = f"{run}.metrics_export"
    if config.source("csv") is not None:
        nodes.append(
            Node(
                func=bound(read_csv_pass1, run=run),
                inputs={"metrics_params": "params:metrics"},
                outputs=f"{run}.csv_pass1",
                name="read_csv_pass1",
                namespace=run,
                tags=tags,
            )
        )
        collect_inputs["csv_pass1"] = f"{run}.csv_pass1"
    if config.source("generated") is not None:
        collect_inputs["summary_by_step"] = "summary_by_step"
    nodes.append(
        Node(
            func=bound(collect_run_pass1, run=run, checkpoint_steps=steps),
            inputs=collect_inputs,
            outputs=f"{run}.pass1_by_source",
            name="collect_run_pass1",
            namespace=run,
            tags=tags,
        )
    )
    return nodes


def create_pipeline(
    layout: StudyLayout | None = None, params: dict[str, Any] | None = None, **kwargs
) -> Pipeline:
    """Build the metrics pipeline for the runs of ``layout`` (default: the active environment).

    Per run ``<run>`` (namespace ``<run>``): ``fetch_wandb_history`` (W&B sources, tagged
    ``wandb``) → ``<run>.metrics_export``; ``read_csv_pass1`` (csv source) →
    ``<run>.csv_pass1``; ``collect_run_pass1`` (+ ``summary_by_step`` for the generated
    source) → ``<run>.pass1_by_source``. Then ``combine_pass1`` → ``pass1`` and
    ``select_pass1_for_figures`` → ``pass1_for_figures``. With ``mini_rl`` parameters,
    ``fetch_wandb_history`` also takes ``mini_rl_manifest``: it reads the offline W&B runs the
    training writes.

    Args:
        layout: runs and their checkpoint steps.
        params: the parameters holding ``metrics`` (default: the active environment's).

    Raises:
        ConfigError: a malformed ``metrics`` section (unknown source, missing option...).
    """
    layout = layout or active_layout()
    params = active_params() if params is None else params
    raw = params.get("metrics") or {}
    extra_inputs = training_inputs(params)
    run_names = [run.name for run in layout.runs]
    unknown = sorted(set(raw.get("runs") or {}) - set(run_names))
    if unknown:
        logger.warning("metrics.runs lists %s, not in `runs`; ignored", ", ".join(unknown))
    checkpoint_steps = {run.name: list(run.steps) for run in layout.runs}
    export_dir = f"{data_root()}/{EXPORT_DIR}"
    metrics = metrics_params(raw, runs=run_names, export_dir=export_dir)
    nodes = []
    for run in layout.runs:
        nodes += _run_nodes(metrics.run(run.name), checkpoint_steps[run.name], extra_inputs)
    return Pipeline(
        [
            *nodes,
            Node(
                func=combine_pass1,
                inputs=[f"{name}.pass1_by_source" for name in run_names],
                outputs="pass1",
                name="combine_pass1",
                tags=["metrics"],
            ),
            Node(
                func=bound(select_pass1_for_figures, checkpoint_steps=checkpoint_steps),
                inputs={"pass1": "pass1", "metrics_params": "params:metrics"},
                outputs="pass1_for_figures",
                name="select_pass1_for_figures",
                tags=["metrics"],
            ),
        ]
    )
