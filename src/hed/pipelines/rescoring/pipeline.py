"""Rescoring pipeline: a fixed response set per run, scored by every checkpoint of the run.

Nodes (all tagged ``rescoring``):

=============================================  ================================================
node                                           outputs
=============================================  ================================================
``<run>.select_reference_responses``           ``<run>.reference_responses``
``<run>.step_<s>.shard_<k>.rescore_shard``     ``<run>.step_<s>.shard_<k>.rescored_records``
(tagged ``gpu``)
``check_self_consistency``                     ``rescoring_consistency``
``collect_rescored_entropies``                 ``rescored_entropies`` (memory)
``tabulate_entropy_overlap``                   ``entropy_overlap``
``tabulate_entropy_change``                    ``entropy_change_by_percentile``
``tabulate_entropy_percentiles``               ``entropy_percentiles_by_step``
``plot_entropy_overlap`` / ``_change`` /       ``entropy_overlap_png``,
``_percentiles``                               ``entropy_change_by_percentile_png``,
                                               ``entropy_percentiles_by_step_png``
=============================================  ================================================

The reference responses of a run (``params:rescoring.reference``) are read from the merged
records of (``reference.run`` or the run itself, ``reference.step`` or the run's last step),
or from ``rescoring_user_responses`` with ``source: file``; which datasets the node reads is
decided here, when the pipeline is built. Shards split the responses by
``prompt_index % generation.num_shards``, as generation does.
"""

from __future__ import annotations

import warnings
from typing import Any

from kedro.pipeline import Node, Pipeline

from hed.analysis.rescoring import reference_plan
from hed.config.layout import StudyLayout
from hed.config.session import active_layout, active_params
from hed.pipelines.binding import bound

from .analysis_nodes import (
    combine_tables,
    plot_delta_logprob_png,
    plot_sampler_trainer_mismatch_png,
    rescore_trainer_shard,
    tabulate_delta_logprob,
    tabulate_sampler_trainer_mismatch,
)
from .nodes import (
    check_self_consistency,
    collect_rescored_entropies,
    plot_entropy_change_png,
    plot_entropy_overlap_png,
    plot_entropy_percentiles_png,
    rescore_shard,
    select_reference_responses,
    select_user_responses,
    tabulate_entropy_change,
    tabulate_entropy_overlap,
    tabulate_entropy_percentiles,
)

TAG = "rescoring"


def rescored_name(run: str, step: int, shard: int) -> str:
    """``<run>.step_<step>.shard_<k>.rescored_records``."""
    return f"{run}.step_{step}.shard_{shard}.rescored_records"


def create_pipeline(
    layout: StudyLayout | None = None, params: dict[str, Any] | None = None, **kwargs
) -> Pipeline:
    """Build the rescoring pipeline for ``layout`` and ``params`` (default: the active ones).

    Args:
        layout: runs, steps and shard count.
        params: parameters holding ``rescoring`` (the reference of each run).

    Raises:
        ConfigError: a bad ``rescoring`` section (unknown key, reference run or step).
    """
    layout = layout or active_layout()
    params = active_params() if params is None else params
    rescoring = params.get("rescoring")
    runs_steps = {run.name: run.steps for run in layout.runs}
    plans = [reference_plan(run.name, runs_steps, rescoring) for run in layout.runs]
    nodes = []
    for plan in plans:
        if plan.source == "file":
            func, inputs = select_user_responses, ["rescoring_user_responses"]
        else:
            ref = f"{plan.reference_run}.step_{plan.reference_step}"
            func = bound(
                select_reference_responses,
                reference_run=plan.reference_run,
                reference_step=plan.reference_step,
            )
            inputs = [
                "prompts",
                f"{ref}.sequences",
                f"{ref}.token_records",
                f"{ref}.shard_0.token_records",
            ]
        nodes.append(
            Node(
                func=func,
                inputs=inputs,
                outputs=f"{plan.run}.reference_responses",
                name="select_reference_responses",
                namespace=plan.run,
                tags=[TAG, f"run_{plan.run}"],
            )
        )
    index = [
        (run.name, step, shard)
        for run, step in layout.run_steps()
        for shard in range(layout.num_shards)
    ]
    for run, step, shard in index:
        ns = f"{run}.step_{step}.shard_{shard}"
        nodes.append(
            Node(
                func=bound(
                    rescore_shard, run=run, step=step, shard=shard, num_shards=layout.num_shards
                ),
                inputs={
                    "reference_responses": f"{run}.reference_responses",
                    "checkpoints": "checkpoints",
                    "prompt_params": "params:prompts",
                    "rescoring": "params:rescoring",
                    "generation": "params:generation",
                },
                outputs=rescored_name(run, step, shard),
                name="rescore_shard",
                namespace=ns,
                tags=["gpu", TAG, f"run_{run}", f"step_{step}"],
            )
        )
    checks = [
        (plan.run, plan.reference_step, layout.num_shards) for plan in plans if plan.self_generated
    ]
    check_inputs = []
    for run, step, n_shards in checks:
        check_inputs += [f"{run}.reference_responses", f"{run}.step_{step}.token_records"]
        check_inputs += [rescored_name(run, step, k) for k in range(n_shards)]
    with warnings.catch_warnings():
        # dotted dataset names are the user contract (docs/datasets.md)
        warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
        nodes += [
            Node(
                func=bound(check_self_consistency, checks=checks),
                inputs=["params:rescoring", *check_inputs],
                outputs="rescoring_consistency",
                name="check_self_consistency",
                tags=[TAG],
            ),
            Node(
                func=bound(collect_rescored_entropies, index=index),
                inputs=[rescored_name(*entry) for entry in index],
                outputs="rescored_entropies",
                name="collect_rescored_entropies",
                tags=[TAG],
            ),
            Node(
                func=tabulate_entropy_overlap,
                inputs=["rescored_entropies", "params:aggregation"],
                outputs="entropy_overlap",
                name="tabulate_entropy_overlap",
                tags=[TAG],
            ),
            Node(
                func=tabulate_entropy_change,
                inputs=["rescored_entropies", "params:rescoring"],
                outputs="entropy_change_by_percentile",
                name="tabulate_entropy_change",
                tags=[TAG],
            ),
            Node(
                func=bound(
                    tabulate_entropy_percentiles,
                    index=[(run.name, step) for run, step in layout.run_steps()],
                ),
                inputs=[
                    f"{run.name}.step_{step}.token_records" for run, step in layout.run_steps()
                ],
                outputs="entropy_percentiles_by_step",
                name="tabulate_entropy_percentiles",
                tags=[TAG],
            ),
            Node(
                func=plot_entropy_overlap_png,
                inputs="entropy_overlap",
                outputs="entropy_overlap_png",
                name="plot_entropy_overlap",
                tags=[TAG],
            ),
            Node(
                func=plot_entropy_change_png,
                inputs="entropy_change_by_percentile",
                outputs="entropy_change_by_percentile_png",
                name="plot_entropy_change",
                tags=[TAG],
            ),
            Node(
                func=plot_entropy_percentiles_png,
                inputs="entropy_percentiles_by_step",
                outputs="entropy_percentiles_by_step_png",
                name="plot_entropy_percentiles",
                tags=[TAG],
            ),
        ]
    return Pipeline(nodes) + mismatch_pipeline(layout) + delta_logprob_pipeline(layout, plans)


def mismatch_pipeline(layout: StudyLayout) -> Pipeline:
    """Per (run, step): the step's own responses, re-scored in ``analyses.mismatch.dtype`` by
    its checkpoint (``gpu``), against the decode-time records; the stacked table and figure.

    Outputs: ``<run>.step_<s>.own_responses``,
    ``<run>.step_<s>.shard_<k>.trainer_rescored_records``,
    ``<run>.step_<s>.sampler_trainer_mismatch``, ``sampler_trainer_mismatch``,
    ``sampler_trainer_mismatch_png``.
    """
    nodes, tables = [], []
    for run, step in ((run.name, step) for run, step in layout.run_steps()):
        ns = f"{run}.step_{step}"
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
            nodes.append(
                Node(
                    func=bound(select_reference_responses, reference_run=run, reference_step=step),
                    inputs=[
                        "prompts",
                        f"{ns}.sequences",
                        f"{ns}.token_records",
                        f"{ns}.shard_0.token_records",
                    ],
                    outputs=f"{ns}.own_responses",
                    name="select_own_responses",
                    namespace=ns,
                    tags=[TAG, f"run_{run}", f"step_{step}"],
                )
            )
            shards = [f"{ns}.shard_{k}.trainer_rescored_records" for k in range(layout.num_shards)]
            for shard, output in enumerate(shards):
                nodes.append(
                    Node(
                        func=bound(
                            rescore_trainer_shard,
                            run=run,
                            step=step,
                            shard=shard,
                            num_shards=layout.num_shards,
                        ),
                        inputs={
                            "own_responses": f"{ns}.own_responses",
                            "checkpoints": "checkpoints",
                            "prompt_params": "params:prompts",
                            "rescoring": "params:rescoring",
                            "generation": "params:generation",
                            "analyses": "params:analyses",
                        },
                        outputs=output,
                        name="rescore_trainer_shard",
                        namespace=f"{ns}.shard_{shard}",
                        tags=["gpu", TAG, f"run_{run}", f"step_{step}"],
                    )
                )
            nodes.append(
                Node(
                    func=bound(tabulate_sampler_trainer_mismatch, run=run, step=step),
                    inputs=["params:analyses", f"{ns}.token_records", *shards],
                    outputs=f"{ns}.sampler_trainer_mismatch",
                    name="tabulate_sampler_trainer_mismatch",
                    namespace=ns,
                    tags=[TAG, f"run_{run}", f"step_{step}"],
                )
            )
            tables.append(f"{ns}.sampler_trainer_mismatch")
    nodes += [
        Node(
            func=combine_tables,
            inputs=tables,
            outputs="sampler_trainer_mismatch",
            name="combine_sampler_trainer_mismatch",
            tags=[TAG],
        ),
        Node(
            func=plot_sampler_trainer_mismatch_png,
            inputs=["sampler_trainer_mismatch", "params:analyses"],
            outputs="sampler_trainer_mismatch_png",
            name="plot_sampler_trainer_mismatch",
            tags=[TAG],
        ),
    ]
    return Pipeline(nodes)


def delta_logprob_pipeline(layout: StudyLayout, plans: list) -> Pipeline:
    """Per run: Δlog p of its reference responses from the base checkpoint, then the stacked
    ``delta_logprob_by_step`` and ``delta_logprob_top_tokens`` and their figure."""
    nodes, by_step, tops = [], [], []
    for plan in plans:
        steps = list(layout.run(plan.run).steps)
        inputs = [rescored_name(plan.run, s, k) for s in steps for k in range(layout.num_shards)]
        with_records = plan.source != "file"
        if with_records:
            inputs.insert(0, f"{plan.reference_run}.step_{plan.reference_step}.token_records")
        outputs = [f"{plan.run}.delta_logprob_by_step", f"{plan.run}.delta_logprob_top_tokens"]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
            nodes.append(
                Node(
                    func=bound(
                        tabulate_delta_logprob,
                        run=plan.run,
                        steps=steps,
                        num_shards=layout.num_shards,
                        with_records=with_records,
                    ),
                    inputs=["params:analyses", *inputs],
                    outputs=outputs,
                    name="tabulate_delta_logprob",
                    namespace=plan.run,
                    tags=[TAG, f"run_{plan.run}"],
                )
            )
        by_step.append(outputs[0])
        tops.append(outputs[1])
    nodes += [
        Node(
            func=combine_tables,
            inputs=by_step,
            outputs="delta_logprob_by_step",
            name="combine_delta_logprob_by_step",
            tags=[TAG],
        ),
        Node(
            func=combine_tables,
            inputs=tops,
            outputs="delta_logprob_top_tokens",
            name="combine_delta_logprob_top_tokens",
            tags=[TAG],
        ),
        Node(
            func=plot_delta_logprob_png,
            inputs=["delta_logprob_by_step", "params:analyses"],
            outputs="delta_logprob_png",
            name="plot_delta_logprob",
            tags=[TAG],
        ),
    ]
    return Pipeline(nodes)
