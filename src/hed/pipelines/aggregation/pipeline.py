"""Aggregation pipeline: one node group per (run, step), then the all-steps tables.

Per (run, step), under the namespace ``<run>.step_<step>`` (inputs: ``prompts``,
``checkpoints``, ``params:prompts``, ``params:generation``, ``params:aggregation`` and the
step's shard datasets; ``checkpoints`` and ``params:prompts`` are what the shards' recorded
generation parameters are compared with):

========================================  ==========================================================
node                                      outputs (``<run>.step_<step>.`` prefix)
========================================  ==========================================================
``check_sequences``                       ``checked_sequences`` (memory)
``check_token_records``                   ``shard_report`` (memory)
``compute_entropy_threshold``             ``entropy_selection`` (memory)
``tabulate_entropy_threshold``            ``entropy_thresholds``
``read_lexicon``                          ``lexicon`` (memory)
``map_candidate_words``                   ``candidate_words`` (memory)
``merge_token_records``                   ``token_records``, ``high_entropy_rows`` (memory),
                                          ``sequences``
``select_high_entropy_positions``         ``high_entropy_positions``
``tabulate_token_probability_mass``       ``token_probability_mass_high_entropy``
``tabulate_category_probability_mass``    ``category_probability_mass_high_entropy``
``summarise_step``                        ``summary_by_step``
========================================  ==========================================================

Then ``combine_entropy_thresholds``, ``combine_high_entropy_positions``,
``combine_summaries``, ``combine_token_probability_mass`` and
``combine_category_probability_mass`` write the all-steps tables of the same names
(without prefix).
"""

from __future__ import annotations

import warnings
from typing import Any

from kedro.pipeline import Node, Pipeline

from hed.config.layout import StudyLayout
from hed.config.session import active_layout
from hed.pipelines.binding import bound

from .nodes import (
    check_sequences,
    check_token_records,
    combine_high_entropy_positions,
    combine_tables,
    compute_entropy_threshold,
    map_candidate_words,
    merge_token_records,
    read_lexicon,
    select_high_entropy_positions,
    summarise_step,
    tabulate_category_probability_mass,
    tabulate_entropy_threshold,
    tabulate_token_probability_mass,
)

#: Per-step tables that also exist stacked over every run and step: {table: combining node}.
STEP_TABLES = {
    "entropy_thresholds": "combine_entropy_thresholds",
    "summary_by_step": "combine_summaries",
    "token_probability_mass_high_entropy": "combine_token_probability_mass",
    "category_probability_mass_high_entropy": "combine_category_probability_mass",
}


def step_namespace(run: str, step: int) -> str:
    """Namespace of one step's nodes and datasets: ``<run>.step_<step>``."""
    return f"{run}.step_{step}"


def step_pipeline(run: str, step: int, num_shards: int) -> Pipeline:
    """The nodes of one (run, step), in the namespace ``<run>.step_<step>``."""
    ns = step_namespace(run, step)
    records = [f"{ns}.shard_{k}.token_records" for k in range(num_shards)]
    sequences = [f"{ns}.shard_{k}.sequences" for k in range(num_shards)]
    generation, aggregation = "params:generation", "params:aggregation"
    current = ["prompts", generation, "params:prompts", "checkpoints"]  # staleness checks
    checked, report, selection = (
        f"{ns}.checked_sequences",
        f"{ns}.shard_report",
        f"{ns}.entropy_selection",
    )
    lexicon = f"{ns}.lexicon"
    positions, word_mass = (
        f"{ns}.high_entropy_positions",
        f"{ns}.token_probability_mass_high_entropy",
    )
    specs = [
        (bound(check_sequences, run=run, step=step), [*current, *sequences], checked),
        (bound(check_token_records, run=run, step=step), [checked, *current, *records], report),
        (
            bound(compute_entropy_threshold, run=run, step=step),
            [report, aggregation, *records],
            selection,
        ),
        (tabulate_entropy_threshold, selection, f"{ns}.entropy_thresholds"),
        (read_lexicon, [report, aggregation], lexicon),
        (map_candidate_words, [report, *records], f"{ns}.candidate_words"),
        (
            merge_token_records,
            [checked, selection, lexicon, aggregation, *records],
            [f"{ns}.token_records", f"{ns}.high_entropy_rows", f"{ns}.sequences"],
        ),
        (select_high_entropy_positions, f"{ns}.high_entropy_rows", positions),
        (
            tabulate_token_probability_mass,
            [selection, positions, f"{ns}.candidate_words", lexicon],
            word_mass,
        ),
        (
            tabulate_category_probability_mass,
            [word_mass, selection, lexicon],
            f"{ns}.category_probability_mass_high_entropy",
        ),
        (
            summarise_step,
            [f"{ns}.entropy_thresholds", f"{ns}.sequences", f"{ns}.token_records", lexicon],
            f"{ns}.summary_by_step",
        ),
    ]
    return Pipeline(
        [
            Node(func=func, inputs=inputs, outputs=outputs, name=func.__name__, namespace=ns)
            for func, inputs, outputs in specs
        ],
        tags=["aggregation", f"run_{run}", f"step_{step}"],
    )


def create_pipeline(layout: StudyLayout | None = None, **kwargs: Any) -> Pipeline:
    """Build the aggregation pipeline for ``layout`` (default: the active environment's).

    Args:
        layout: runs × steps and the shard count; ``None`` =
            :func:`hed.config.session.active_layout`.

    Returns:
        One node group per (run, step) (see the module docstring) and the five combining
        nodes writing ``entropy_thresholds``, ``high_entropy_positions``, ``summary_by_step``,
        ``token_probability_mass_high_entropy`` and ``category_probability_mass_high_entropy``.
    """
    layout = layout or active_layout()
    namespaces = [step_namespace(run.name, step) for run, step in layout.run_steps()]
    steps = [step_pipeline(run.name, step, layout.num_shards) for run, step in layout.run_steps()]
    with warnings.catch_warnings():
        # the all-steps nodes read `<run>.step_<step>.<table>`: dotted names are the user
        # contract (docs/datasets.md), not an accident Kedro should warn about
        warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
        combine = [
            Node(
                func=combine_tables,
                inputs=[f"{ns}.{table}" for ns in namespaces],
                outputs=table,
                name=name,
                tags=["aggregation"],
            )
            for table, name in STEP_TABLES.items()
        ]
        combine.append(
            Node(
                func=combine_high_entropy_positions,
                inputs=[f"{ns}.high_entropy_positions" for ns in namespaces],
                outputs="high_entropy_positions",
                name="combine_high_entropy_positions",
                tags=["aggregation"],
            )
        )
    return sum(steps, Pipeline([])) + Pipeline(combine)
