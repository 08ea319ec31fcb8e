"""mini_rl pipeline: task sets → one ``train_policy`` node per run, in order → ``mini_rl_manifest``.

Only environments with a ``mini_rl`` parameter (``conf/mini_dapo``) have nodes here; elsewhere
the pipeline is empty.
"""

from __future__ import annotations

from typing import Any

from kedro.pipeline import Node, Pipeline

from hed.config.mini_rl import MiniRLParams
from hed.config.session import TRAINING_MANIFEST, active_params, training_inputs  # noqa: F401 - re-exported
from hed.pipelines.binding import bound

from .nodes import collect_training_manifests, generate_task_sets, train_policy


def create_pipeline(params: dict[str, Any] | None = None, **kwargs) -> Pipeline:
    """Build the mini_rl pipeline for the active environment (or ``params``).

    Nodes: ``generate_task_sets`` (``params:mini_rl.task`` → ``mini_rl_train_set``,
    ``raw_prompts``: the held-out set is the prompt file HED analyses), then
    ``<run>.train_policy`` per run of ``mini_rl.runs``, each after the previous one
    (→ ``<run>.training_manifest``), then ``collect_training_manifests`` → ``mini_rl_manifest``.

    Raises:
        ConfigError: ``params:mini_rl`` refused by :class:`hed.config.mini_rl.MiniRLParams`
            (``mini_rl.runs`` empty, a key misspelt, a bad value), in one line.
    """
    params = active_params() if params is None else params
    mini_rl = params.get("mini_rl")
    if not mini_rl:
        return Pipeline([])
    run_names = list(MiniRLParams.of(mini_rl).runs)
    train_nodes = []
    for index, run in enumerate(run_names):
        inputs = {
            "train_set": "mini_rl_train_set",
            "validation_set": "raw_prompts",
            "runs": "params:runs",
            "mini_rl": "params:mini_rl",
            "prompt_params": "params:prompts",
        }
        if index:
            inputs["previous_run"] = f"{run_names[index - 1]}.training_manifest"
        train_nodes.append(
            Node(
                func=bound(train_policy, run=run),
                inputs=inputs,
                outputs=f"{run}.training_manifest",
                name="train_policy",
                namespace=run,
                tags=["mini_rl", "training", f"run_{run}"],
            )
        )
    return Pipeline(
        [
            Node(
                func=generate_task_sets,
                inputs="params:mini_rl.task",
                outputs={"train": "mini_rl_train_set", "validation": "raw_prompts"},
                name="generate_task_sets",
                tags=["mini_rl"],
            ),
            *train_nodes,
            Node(
                func=collect_training_manifests,
                inputs=[f"{run}.training_manifest" for run in run_names],
                outputs=TRAINING_MANIFEST,
                name="collect_training_manifests",
                tags=["mini_rl"],
            ),
        ]
    )
