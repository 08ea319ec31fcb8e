"""Publish pipeline: the latest reporting run's outputs → ``results/final_artifacts/<env>/``."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from hed.io.provenance import RUN_CONTEXT

from .nodes import plan_publication


def create_pipeline(**kwargs) -> Pipeline:
    """Build the publish pipeline (one node; run it on its own: ``kedro run --pipelines publish``).

    ``publish_artifacts``: ``resolved_config`` + ``run_context`` + ``params:publish`` →
    ``final_artifacts`` (:class:`hed.io.datasets.PublishedArtifactsDataset`).
    """
    return Pipeline(
        [
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
    )
