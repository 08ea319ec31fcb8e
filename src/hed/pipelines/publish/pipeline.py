"""Publish pipeline: the latest reporting run → ``results/``, and optionally W&B and the Hub."""

from __future__ import annotations

import warnings
from typing import Any

from kedro.pipeline import Node, Pipeline

from hed.config.layout import layout_from_params
from hed.config.session import active_params
from hed.io.provenance import RUN_CONTEXT

from .nodes import commit_study_to_hub, log_study_to_wandb, plan_publication, plan_study_bundle


def _enabled(publish: dict[str, Any], destination: str) -> bool:
    section = publish.get(destination)
    return isinstance(section, dict) and section.get("enabled") is True


def create_pipeline(params: dict[str, Any] | None = None, **kwargs) -> Pipeline:
    """Build the publish pipeline (run it on its own: ``kedro run --pipelines publish``).

    ``publish_artifacts``: ``resolved_config`` + ``run_context`` + ``params:publish`` →
    ``final_artifacts`` (:class:`hed.io.datasets.PublishedArtifactsDataset`). Where
    ``publish.wandb.enabled`` or ``publish.hub.enabled`` is true (decided when the pipeline is
    built, like the reporting pipeline's nodes): ``plan_study_bundle`` → ``study_bundle``
    (memory; takes every step's merged records when ``publish.include_records``), then
    ``log_study_to_wandb`` → ``wandb_publication`` and/or ``commit_study_to_hub`` →
    ``hub_publication`` (tags ``wandb`` / ``hub``).

    Args:
        params: the environment's parameters (default: the active environment's).
    """
    params = active_params() if params is None else params
    publish = params.get("publish") or {}
    nodes = [
        Node(
            func=plan_publication,
            inputs={
                "resolved_config": "resolved_config",
                "run_context": RUN_CONTEXT,
                "publish": "params:publish",
            },
            outputs="final_artifacts",
            name="publish_artifacts",
            tags=["publish"],
        )
    ]
    destinations = [d for d in ("wandb", "hub") if _enabled(publish, d)]
    if not destinations:
        return Pipeline(nodes)
    records = []
    if publish.get("include_records") is not False:  # the default: true
        layout = layout_from_params(params)
        records = [
            f"{run.name}.step_{step}.{table}"
            for run, step in layout.run_steps()
            for table in ("token_records", "sequences")
        ]
    with warnings.catch_warnings():
        # `<run>.step_<step>.<table>`: dotted names are the user contract (docs/datasets.md)
        warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
        nodes.append(
            Node(
                func=plan_study_bundle,
                inputs=["resolved_config", RUN_CONTEXT, "params:publish", *records],
                outputs="study_bundle",
                name="plan_study_bundle",
                tags=["publish", *destinations],
            )
        )
    if "wandb" in destinations:
        nodes.append(
            Node(
                func=log_study_to_wandb,
                inputs=["study_bundle", "params:publish"],
                outputs="wandb_publication",
                name="log_study_to_wandb",
                tags=["publish", "wandb"],
            )
        )
    if "hub" in destinations:
        nodes.append(
            Node(
                func=commit_study_to_hub,
                inputs=["study_bundle", "params:publish"],
                outputs="hub_publication",
                name="commit_study_to_hub",
                tags=["publish", "hub"],
            )
        )
    return Pipeline(nodes)
