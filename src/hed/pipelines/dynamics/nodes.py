"""Nodes of the dynamics pipeline: per (run, step) advantage/covariance and correctness tables,
their all-steps tables and figures (docs/dynamics.md).

A step is computed from its own graded samples: the merged ``sequences`` (``correct``) and
``token_records`` (``logprob``, ``entropy``, ``is_high_entropy``, ``category``) that the
aggregation pipeline wrote. A step without any graded response (its prompts have no
reference answer) is *skipped*: its rows carry the reason in ``skipped`` and a warning is
logged; nothing is computed from it.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
from matplotlib.figure import Figure

from hed.analysis.correctness import correctness_values, entropy_by_correctness
from hed.analysis.covariance import TOP_TOKEN_COLUMNS, step_covariance
from hed.config.analysis_params import DynamicsParams
from hed.config.layout import StudyLayout, panel_runs
from hed.config.params import AggregationParams, lexicon_param
from hed.core.advantage import response_advantages
from hed.errors import InputDataError
from hed.records.response_index import ResponseIndex
from hed.report import dynamics_figures

logger = logging.getLogger(__name__)

#: ``skipped`` reason of a step whose responses are all ungraded.
NO_GRADING = "no graded response (no prompt of the step has a reference answer)"


def _step_of(entropy_thresholds: pd.DataFrame) -> tuple[str, int, int]:
    row = entropy_thresholds.iloc[0]
    return str(row["run"]), int(row["step"]), int(row["n_tokens"])


def _responses(sequences: ds.Dataset) -> pd.DataFrame:
    columns = ["prompt_index", "sample_index", "correct"]
    missing = [c for c in columns if c not in sequences.schema.names]
    if missing:
        raise InputDataError(
            f"{_source(sequences)} lacks column(s) {', '.join(missing)}: rerun the aggregation"
        )
    return sequences.to_table(columns=columns).to_pandas()


def _source(dataset: ds.Dataset) -> str:
    return str((getattr(dataset, "files", None) or ["sequences"])[0])


def tabulate_advantage_covariance(
    entropy_thresholds: pd.DataFrame,
    sequences: ds.Dataset,
    token_records: ds.Dataset,
    aggregation: AggregationParams | dict[str, Any],
    dynamics: DynamicsParams | dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Advantages of the step's graded responses and Cov(log π, A) over their tokens.

    Args:
        entropy_thresholds: ``<run>.step_<step>.entropy_thresholds`` (run, step).
        sequences: ``<run>.step_<step>.sequences`` (prompt_index, sample_index, correct).
        token_records: ``<run>.step_<step>.token_records`` (merged).
        aggregation: ``params:aggregation`` (the lexicon's categories).
        dynamics: ``params:dynamics`` (:class:`~hed.config.analysis_params.DynamicsParams`, or
            its dict: estimators, epsilon, the covariance settings).

    Returns:
        (``advantage_covariance_by_step`` rows, one per estimator; the KL-Cov top tokens,
        run, step, estimator + :data:`hed.analysis.covariance.TOP_TOKEN_COLUMNS`). Columns of the
        first: run, step, estimator, skipped, n_responses (graded), n_responses_ungraded,
        n_prompts, n_single_sample_responses, zero_advantage_share, then
        :func:`hed.analysis.covariance.step_covariance`'s row (n_tokens, mean_advantage, ...,
        mean_cov_high_entropy_<category>) and kl_cov_ratio.

    Raises:
        ConfigError: a bad ``dynamics`` or lexicon.
        InputDataError: records and responses do not match (named file).
    """
    dynamics = DynamicsParams.of(dynamics)
    estimators, settings = dynamics.estimators, dynamics.covariance
    categories = lexicon_param(aggregation).categories
    run, step, _ = _step_of(entropy_thresholds)
    sequences_frame = _responses(sequences)
    graded = response_advantages(sequences_frame, estimators, dynamics.epsilon)
    head = {"run": run, "step": step}
    counts = {
        "n_responses": len(graded),
        "n_responses_ungraded": len(sequences_frame) - len(graded),
        "n_prompts": int(graded["prompt_index"].nunique()),
        "n_single_sample_responses": int((graded["group_size"] == 1).sum()),
        "zero_advantage_share": float(graded["zero_advantage"].mean()) if len(graded) else None,
    }
    if graded.empty:
        logger.warning("dynamics skips %s.step_%d: %s", run, step, NO_GRADING)
        rows = [{**head, "estimator": e, "skipped": NO_GRADING, **counts} for e in estimators]
        return _order_columns(pd.DataFrame(rows), categories), _top_frame([], head)
    index = ResponseIndex(
        sequences_frame["prompt_index"].to_numpy(),
        sequences_frame["sample_index"].to_numpy(),
        _source(sequences),
    )
    keyed = sequences_frame[["prompt_index", "sample_index"]].astype("int64")
    values = keyed.merge(graded, on=["prompt_index", "sample_index"], how="left")
    matrix = values[[f"advantage_{e}" for e in estimators]].to_numpy(dtype=np.float64)
    results = step_covariance(token_records, index, matrix, categories, settings)
    rows, tops = [], []
    for estimator, result in zip(estimators, results, strict=True):
        rows.append(
            {
                **head,
                "estimator": estimator,
                "skipped": None,
                **counts,
                **result.row,
                "kl_cov_ratio": settings.kl_cov_ratio,
            }
        )
        tops.append(result.top_tokens.assign(estimator=estimator))
    return _order_columns(pd.DataFrame(rows), categories), _top_frame(tops, head)


def _order_columns(table: pd.DataFrame, categories: tuple[str, ...]) -> pd.DataFrame:
    columns = [
        "run",
        "step",
        "estimator",
        "skipped",
        "n_responses",
        "n_responses_ungraded",
        "n_prompts",
        "n_single_sample_responses",
        "n_tokens",
        "zero_advantage_share",
        "mean_advantage",
        "mean_logprob",
        "mean_cov",
        "clip_cov_band_share",
        "kl_cov_ratio",
        "kl_cov_k",
        "kl_cov_min",
        "mean_cov_high_entropy",
        "mean_cov_other",
        *(f"mean_cov_category_{c}" for c in categories),
        *(f"mean_cov_high_entropy_{c}" for c in categories),
    ]
    return table.reindex(columns=columns)


def _top_frame(tops: list[pd.DataFrame], head: dict[str, Any]) -> pd.DataFrame:
    columns = ["run", "step", "estimator", *TOP_TOKEN_COLUMNS]
    tops = [t for t in tops if len(t)]
    if not tops:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    return pd.concat(tops, ignore_index=True).assign(**head)[columns]


def tabulate_entropy_by_correctness(
    entropy_thresholds: pd.DataFrame,
    sequences: ds.Dataset,
    token_records: ds.Dataset,
    dynamics: DynamicsParams | dict[str, Any],
) -> pd.DataFrame:
    """Entropy statistics of the step's correct and of its incorrect responses.

    Args:
        entropy_thresholds: ``<run>.step_<step>.entropy_thresholds`` (run, step, n_tokens).
        sequences: ``<run>.step_<step>.sequences``.
        token_records: ``<run>.step_<step>.token_records`` (merged).
        dynamics: ``params:dynamics`` (``covariance.batch_records``).

    Returns:
        ``entropy_by_correctness`` rows: run, step, correct (True, then False), skipped,
        n_responses, n_tokens, mean_entropy (nats), high_entropy_share, n_high_entropy,
        n_high_entropy_anthropomorphic, anthropomorphic_per_1k_tokens
        (:func:`hed.analysis.correctness.entropy_by_correctness`). A step without graded responses
        has one row, correct empty, with the reason in ``skipped``.

    Raises:
        InputDataError: the records count another N than ``entropy_thresholds`` (a file of
            another aggregation), or records and responses do not match.
    """
    settings = DynamicsParams.of(dynamics).covariance
    run, step, n_step = _step_of(entropy_thresholds)
    frame = _responses(sequences)
    correct = correctness_values(frame)
    head = {"run": run, "step": step}
    if np.isnan(correct).all():
        logger.warning("dynamics skips %s.step_%d: %s", run, step, NO_GRADING)
        row = {**head, "correct": None, "skipped": NO_GRADING, "n_responses": len(frame)}
        return _correctness_columns(pd.DataFrame([row]))
    index = ResponseIndex(
        frame["prompt_index"].to_numpy(), frame["sample_index"].to_numpy(), _source(sequences)
    )
    rows, n_all = entropy_by_correctness(token_records, index, correct, settings.batch_records)
    if n_all != n_step:
        raise InputDataError(
            f"{_source(token_records)} holds {n_all} non-special tokens but entropy_thresholds "
            f"of {run}.step_{step} says {n_step}: rerun the aggregation of this step"
        )
    return _correctness_columns(pd.DataFrame([{**head, "skipped": None, **r} for r in rows]))


def _correctness_columns(table: pd.DataFrame) -> pd.DataFrame:
    columns = [
        "run",
        "step",
        "correct",
        "skipped",
        "n_responses",
        "n_tokens",
        "mean_entropy",
        "high_entropy_share",
        "n_high_entropy",
        "n_high_entropy_anthropomorphic",
        "anthropomorphic_per_1k_tokens",
    ]
    return table.reindex(columns=columns)


def combine_step_tables(*tables: pd.DataFrame) -> pd.DataFrame:
    """Stack per-step tables (each carries run and step) in (run, step) pipeline order."""
    frames = [t for t in tables if len(t)]
    if not frames:
        return tables[0].iloc[:0] if tables else pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def warn_single_sample_groups(advantage_covariance_by_step: pd.DataFrame) -> list[str]:
    """Warn once, in one line, about runs whose every graded response is alone in its group.

    With one sample per prompt the group-relative advantage is 0 for every response, so
    Cov(log π, A) is 0 and the zero-advantage share 1.0 at every step by construction:
    numbers that measure nothing (``generation.samples_per_prompt: 1``).

    Args:
        advantage_covariance_by_step: the all-steps table (run, n_responses,
            n_single_sample_responses; skipped steps have no graded response).

    Returns:
        The runs warned about (config order of the table), empty when none.
    """
    table = advantage_covariance_by_step
    graded = table[pd.to_numeric(table["n_responses"], errors="coerce").fillna(0) > 0]
    single = graded["n_single_sample_responses"] == graded["n_responses"]
    by_run = single.groupby(graded["run"], sort=False).all()
    runs = [str(run) for run, every in by_run.items() if every]
    if runs:
        logger.warning(
            "dynamics: run(s) %s have one sample per prompt (generation.samples_per_prompt: 1): "
            "Cov(log π, A) = 0 and zero-advantage share 1.0 at every step measure nothing; "
            "generate ≥ 2 samples per prompt (GRPO groups: 8-16) to compare runs",
            ", ".join(runs),
        )
    return runs


def _figure_style(dynamics: DynamicsParams | dict[str, Any]) -> tuple[tuple[float, float], int]:
    figures = DynamicsParams.of(dynamics).figures
    return figures.panel_size, figures.dpi


def plot_advantage_covariance(
    advantage_covariance_by_step: pd.DataFrame,
    runs: StudyLayout | dict[str, Any],
    dynamics: DynamicsParams | dict[str, Any],
) -> Figure:
    """Mean Cov(log π, A) and the zero-advantage share over steps, one column per run.

    Warns once (:func:`warn_single_sample_groups`) when a run has one sample per prompt.
    """
    size, dpi = _figure_style(dynamics)
    warn_single_sample_groups(advantage_covariance_by_step)
    return dynamics_figures.plot_advantage_covariance(
        advantage_covariance_by_step, panel_runs(runs), panel_size=size, dpi=dpi
    )


def plot_entropy_by_correctness(
    entropy_by_correctness: pd.DataFrame,
    runs: StudyLayout | dict[str, Any],
    dynamics: DynamicsParams | dict[str, Any],
) -> Figure:
    """Mean entropy and anthropomorphic tokens per 1k, correct vs incorrect, per run."""
    size, dpi = _figure_style(dynamics)
    return dynamics_figures.plot_entropy_by_correctness(
        entropy_by_correctness, panel_runs(runs), panel_size=size, dpi=dpi
    )
