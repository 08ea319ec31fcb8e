"""Nodes of the rescoring pipeline's research tables: the sampler–trainer mismatch of each step
and Δlog p of the fixed response set from the base checkpoint (docs/rescoring.md).

* :func:`rescore_trainer_shard` re-scores a step's *own* responses with the step's checkpoint in
  ``analyses.mismatch.dtype`` (:func:`~hed.pipelines.rescoring.nodes.rescore_shard`, that dtype);
* :func:`tabulate_sampler_trainer_mismatch` compares them with the decode-time records
  (:mod:`hed.analysis.mismatch`);
* :func:`tabulate_delta_logprob` compares each checkpoint's re-score of the run's reference
  responses with the base checkpoint's (:mod:`hed.analysis.delta_logprob`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
from matplotlib.figure import Figure

from hed.analysis.delta_logprob import DELTA_COLUMNS, TOP_COLUMNS, delta_by_subset, top_words
from hed.analysis.mismatch import step_mismatch
from hed.analysis.rescoring import (
    RESCORING_METADATA_KEY,
    read_rescored,
    rescoring_section,
    shard_dtype,
)
from hed.config.analysis_params import AnalysesParams
from hed.config.prompt_params import PromptsParams
from hed.errors import InputDataError
from hed.records.schema import RECORD_KEY
from hed.report import analysis_figures

from .nodes import rescore_shard

_RECORD_COLUMNS = [*RECORD_KEY, "token_id", "logprob", "is_special", "is_high_entropy"]


def rescore_trainer_shard(
    own_responses: ds.Dataset,
    checkpoints: dict[str, Any],
    prompt_params: PromptsParams | dict[str, Any],
    rescoring: dict[str, Any],
    generation: dict[str, Any],
    *,
    analyses: AnalysesParams | dict[str, Any],
    run: str,
    step: int,
    shard: int,
    num_shards: int,
):
    """Teacher-forced scores of a step's own responses by its checkpoint in the mismatch dtype.

    Args:
        own_responses: ``<run>.step_<step>.own_responses`` (the step's merged responses).
        checkpoints, prompt_params, rescoring, generation: as for ``rescore_shard``.
        analyses: ``params:analyses`` (``mismatch.dtype`` replaces ``rescoring.dtype``).
        run, step, shard, num_shards: bound when the pipeline is built.

    Returns:
        A ``RESCORED_RECORD_SCHEMA`` table (see ``rescore_shard``), scored in that dtype.
    """
    dtype = AnalysesParams.of(analyses).mismatch.dtype
    return rescore_shard(
        own_responses,
        checkpoints,
        prompt_params,
        rescoring_section(rescoring).model_copy(update={"dtype": dtype}),
        generation,
        run=run,
        step=step,
        shard=shard,
        num_shards=num_shards,
    )


def _merged(token_records: ds.Dataset, columns: Sequence[str]) -> dict[str, np.ndarray]:
    missing = [c for c in columns if c not in token_records.schema.names]
    if missing:
        raise InputDataError(
            f"merged token records lack column(s) {', '.join(missing)}: rerun the aggregation"
        )
    table = token_records.to_table(columns=list(columns))
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in columns}


def _same_tokens(records: dict, rescored: dict, where: str) -> None:
    same = len(records["token_id"]) == len(rescored["token_id"]) and all(
        np.array_equal(records[c], rescored[c]) for c in (*RECORD_KEY, "token_id")
    )
    if not same:
        raise InputDataError(
            f"{where}: the re-scored positions or tokens differ from the merged token records: "
            "rerun `kedro run --pipelines rescoring` after the aggregation of this step"
        )


def tabulate_sampler_trainer_mismatch(
    analyses: AnalysesParams | dict[str, Any],
    token_records: ds.Dataset,
    *rescored: ds.Dataset,
    run: str,
    step: int,
) -> pd.DataFrame:
    """``<run>.step_<step>.sampler_trainer_mismatch``: Δlog p, k3 KL and ratio bounds per subset.

    Args:
        analyses: ``params:analyses`` (mismatch.ratio_bounds).
        token_records: ``<run>.step_<step>.token_records`` (merged: decode-time logprob,
            is_special, is_high_entropy, category).
        *rescored: ``<run>.step_<step>.shard_<k>.trainer_rescored_records``.
        run, step: bound when the pipeline is built.

    Returns:
        :data:`hed.analysis.mismatch.MISMATCH_COLUMNS`, one row per subset.

    Raises:
        InputDataError: the re-score holds other positions or tokens than the records.
    """
    bounds = AnalysesParams.of(analyses).mismatch.ratio_bounds
    records = _merged(token_records, [*_RECORD_COLUMNS, "category"])
    scores = read_rescored(list(rescored), ["token_id", "logprob"])
    _same_tokens(records, scores, f"{run}.step_{step}")
    keep = ~records["is_special"].astype(bool)
    meta = json.loads((rescored[0].schema.metadata or {}).get(RESCORING_METADATA_KEY, b"{}"))
    return step_mismatch(
        records["logprob"][keep],
        scores["logprob"][keep],
        records["is_high_entropy"][keep],
        records["category"][keep],
        run=run,
        step=step,
        bounds=bounds,
        decode_dtype=(meta.get("reference") or {}).get("decode_dtype"),
        rescore_dtype=shard_dtype(list(rescored)),
    )


def combine_tables(*tables: pd.DataFrame) -> pd.DataFrame:
    """Stack per-step tables in pipeline order (empty tables are left out)."""
    frames = [t for t in tables if len(t)]
    return pd.concat(frames, ignore_index=True) if frames else tables[0]


def plot_sampler_trainer_mismatch_png(
    table: pd.DataFrame, analyses: AnalysesParams | dict[str, Any]
) -> Figure:
    """k3 KL and the share of ratios outside the bounds over steps, one line per subset."""
    dpi = AnalysesParams.of(analyses).dpi
    return analysis_figures.plot_subsets_over_steps(
        table,
        ("kl_k3", "ratio_outside_share"),
        ("KL(sampler ‖ re-scorer) per token, k3 (nats)", "share of r outside the bounds"),
        title="Sampler–trainer mismatch per step by token subset",
        dpi=dpi,
    )


def tabulate_delta_logprob(
    analyses: AnalysesParams | dict[str, Any],
    *datasets: ds.Dataset,
    run: str,
    steps: Sequence[int],
    num_shards: int,
    with_records: bool,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Δlog p = log p(step) − log p(base) of the run's reference responses, per step and word.

    Args:
        analyses: ``params:analyses`` (delta_logprob.top_n, min_count).
        *datasets: when ``with_records``, first the reference step's merged token records
            (word, category, is_high_entropy of each reference token); then the
            ``rescored_records`` shards, ``num_shards`` per step in ``steps`` order.
        run, steps, num_shards, with_records: bound when the pipeline is built; the base is
            ``steps[0]``.

    Returns:
        (``delta_logprob_by_step`` rows of the run, ``DELTA_COLUMNS``;
        ``delta_logprob_top_tokens`` rows, ``TOP_COLUMNS``; :mod:`hed.analysis.delta_logprob`).

    Raises:
        InputDataError: steps hold different positions or tokens.
    """
    settings = AnalysesParams.of(analyses).delta_logprob
    records = None
    shards = list(datasets)
    if with_records:
        records = _merged(shards.pop(0), [*_RECORD_COLUMNS, "category", "word"])
    per_step = [shards[i * num_shards : (i + 1) * num_shards] for i in range(len(steps))]
    scores = [read_rescored(s, ["token_id", "logprob", "is_special"]) for s in per_step]
    base = scores[0]
    for step, score in zip(steps, scores, strict=True):
        _same_tokens(base, score, f"{run}.step_{step} rescored_records")
    if records is not None:
        _same_tokens(records, base, f"{run} reference token records")
    keep = ~base["is_special"].astype(bool)
    high = records["is_high_entropy"][keep] if records is not None else None
    category = records["category"][keep] if records is not None else None
    words = records["word"][keep] if records is not None else None
    rows, tops = [], []
    for step, score in zip(steps, scores, strict=True):
        delta = score["logprob"][keep].astype(np.float64) - base["logprob"][keep]
        rows.append(delta_by_subset(delta, high, category, run=run, step=step, base=steps[0]))
    if words is not None and len(steps) > 1:
        final = scores[-1]["logprob"][keep].astype(np.float64) - base["logprob"][keep]
        tops.append(
            top_words(
                final,
                words,
                category,
                run=run,
                step=steps[-1],
                base=steps[0],
                top_n=settings.top_n,
                min_count=settings.min_count,
            )
        )
    by_step = pd.concat(rows, ignore_index=True).reindex(columns=DELTA_COLUMNS)
    top = pd.concat(tops, ignore_index=True) if tops else pd.DataFrame(columns=TOP_COLUMNS)
    return by_step, top


def plot_delta_logprob_png(
    table: pd.DataFrame, analyses: AnalysesParams | dict[str, Any]
) -> Figure:
    """Mean Δlog p from the base over steps, one line per subset, and its p10–p90 band."""
    dpi = AnalysesParams.of(analyses).dpi
    return analysis_figures.plot_subsets_over_steps(
        table,
        ("mean", "mean_abs"),
        ("mean Δlog p from the base (nats)", "mean |Δlog p| (nats)"),
        title="Δlog p = log p(step) − log p(base) on the fixed response set",
        dpi=dpi,
    )
