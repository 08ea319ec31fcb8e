"""Generation pipeline: prompt set → checkpoints → one ``gpu`` node per (run, step, shard)."""

from __future__ import annotations

from typing import Any

from kedro.pipeline import Node, Pipeline

from hed.config.layout import StudyLayout
from hed.config.session import active_layout, training_inputs
from hed.pipelines.binding import bound

from .nodes import build_prompt_set, generate_shard, resolve_checkpoints
from .rollout_nodes import score_dump_shard


def shard_namespace(run: str, step: int, shard: int) -> str:
    """Namespace of one shard's node and datasets: ``<run>.step_<step>.shard_<k>``."""
    return f"{run}.step_{step}.shard_{shard}"


def _shard_inputs(run: Any, step: int, shard: int) -> dict[str, str]:
    """The inputs of a shard node: a sampling run's, or a dump run's (no partial area: scoring
    a shard is one pass; ``params:runs`` for the run's ``responses``)."""
    common = {
        "prompts": "prompts",
        "checkpoints": "checkpoints",
        "prompt_params": "params:prompts",
        "params": "params:generation",
    }
    if run.responses.from_dump:
        return {**common, "runs": "params:runs", "aggregation": "params:aggregation"}
    return {
        **common,
        "parts": f"{shard_namespace(run.name, step, shard)}.partial",
        "aggregation": "params:aggregation",
    }


def create_pipeline(
    layout: StudyLayout | None = None, params: dict[str, Any] | None = None, **kwargs
) -> Pipeline:
    """Build the generation pipeline for ``layout`` (default: the active environment's).

    Nodes: ``build_prompt_set`` (raw_prompts → prompts), ``resolve_checkpoints`` (→ checkpoints)
    and, for every (run, step, shard), ``<run>.step_<step>.shard_<k>.generate_shard`` tagged
    ``gpu`` writing ``<run>.step_<step>.shard_<k>.token_records`` and ``.sequences``, with
    the shard's partial area ``<run>.step_<step>.shard_<k>.partial`` as an input (finished
    sequences kept across a crash, :mod:`hed.records.shard_parts`). A run whose responses are a
    verl dump (``runs.<run>.responses.source: verl_dump``) gets ``score_dump_shard`` instead
    (:mod:`.rollout_nodes`), same outputs, same ``gpu`` tag, so GPURunner and RayRunner place
    it on a GPU as they place generation.
    In an environment with ``mini_rl`` parameters, ``resolve_checkpoints`` also takes
    ``mini_rl_manifest`` so it runs after the training that writes the checkpoints.

    Args:
        layout: runs, steps and shard count (default: the active environment's).
        params: parameters checked for a ``mini_rl`` section (default: the active environment's).
    """
    layout = layout or active_layout()
    extra_inputs = training_inputs(params)
    shard_nodes = [
        Node(
            func=bound(
                score_dump_shard if run.responses.from_dump else generate_shard,
                run=run.name,
                step=step,
                shard=shard,
            ),
            inputs=_shard_inputs(run, step, shard),
            outputs={
                "token_records": f"{shard_namespace(run.name, step, shard)}.token_records",
                "sequences": f"{shard_namespace(run.name, step, shard)}.sequences",
            },
            name="score_dump_shard" if run.responses.from_dump else "generate_shard",
            namespace=shard_namespace(run.name, step, shard),
            tags=["gpu", f"run_{run.name}", f"step_{step}"],
        )
        for run, step in layout.run_steps()
        for shard in range(layout.num_shards)
    ]
    return Pipeline(
        [
            Node(
                func=build_prompt_set,
                inputs=["raw_prompts", "params:prompts"],
                outputs="prompts",
                name="build_prompt_set",
            ),
            Node(
                func=resolve_checkpoints,
                inputs={"runs": "params:runs", "generation": "params:generation", **extra_inputs},
                outputs="checkpoints",
                name="resolve_checkpoints",
            ),
            *shard_nodes,
        ]
    )
