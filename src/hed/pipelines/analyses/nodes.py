"""Nodes of the analyses pipeline: pass@k per (run, step), the entropy–performance fit per run,
every run compared per step (docs/dynamics.md, "Analyses across steps and runs").

The tables are computed by :mod:`hed.analysis.pass_at_k`, :mod:`hed.analysis.entropy_fit` and
:mod:`hed.analysis.runs_comparison`; the figures by :mod:`hed.report.analysis_figures`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pandas as pd
import pyarrow.dataset as ds
from matplotlib.figure import Figure

from hed.analysis.advantage_shaping import (
    SHAPING_COLUMNS,
    advantage_shaping_params,
    step_advantage_shaping,
)
from hed.analysis.entropy_fit import fit_runs
from hed.analysis.hedging_propensity import hedging_propensity_by_step
from hed.analysis.pass_at_k import PASS_AT_K_COLUMNS, step_pass_at_k
from hed.analysis.runs_comparison import compare_runs, step_measures
from hed.analysis.trainer_entropy import TRAINER_ENTROPY_COLUMNS, compare_trainer_entropy
from hed.config.analysis_params import AnalysesParams
from hed.config.layout import StudyLayout, run_roles
from hed.config.params import (
    AggregationParams,
    GenerationParams,
    ReportingParams,
    lexicon_param,
)
from hed.errors import InputDataError
from hed.pass1.config import MetricsParams
from hed.pass1.wandb_source import read_wandb_source
from hed.records.shard_metadata import lexicon_sha256
from hed.report import analysis_figures, shaping_figures

logger = logging.getLogger(__name__)

#: The ``sampler_trainer_mismatch`` columns (its ``all`` rows) that ``runs_comparison`` holds.
MISMATCH_MEASURES = (
    "mean_abs_delta_logprob",
    "p99_abs_delta_logprob",
    "kl_k3",
    "ratio_outside_share",
)


def tabulate_pass_at_k(
    *sequences: ds.Dataset, run_steps: Sequence[tuple[str, int]]
) -> pd.DataFrame:
    """``pass_at_k``: per (run, step, k) the unbiased pass@k of the step's graded samples.

    Args:
        *sequences: ``<run>.step_<step>.sequences`` (merged), in ``run_steps`` order.
        run_steps: (run, step) of each, bound when the pipeline is built.

    Returns:
        run, step, k, pass_at_k, n_samples, n_prompts
        (:func:`hed.analysis.pass_at_k.step_pass_at_k`); a step without graded samples has no row.
    """
    frames = [
        step_pass_at_k(data.to_table(columns=["prompt_index", "correct"]).to_pandas(), run, step)
        for data, (run, step) in zip(sequences, run_steps, strict=True)
    ]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in PASS_AT_K_COLUMNS})
    return pd.concat(frames, ignore_index=True)


def _entropy_and_pass1(summary_by_step: pd.DataFrame, pass1: pd.DataFrame) -> pd.DataFrame:
    columns = ["run", "step", "pass1", "pass1_source"]
    return summary_by_step[["run", "step", "mean_entropy"]].merge(
        pass1[columns], on=["run", "step"], how="left"
    )


def fit_entropy_performance(
    summary_by_step: pd.DataFrame, pass1_for_figures: pd.DataFrame
) -> pd.DataFrame:
    """``entropy_performance_fit``: R = −a·exp(H) + b per run (Cui et al., arXiv 2505.22617).

    Args:
        summary_by_step: run, step, mean_entropy (nats).
        pass1_for_figures: run, step, pass1, pass1_source.

    Returns:
        run, a, b, r2, ceiling (= −a + b), n_steps, pass1_source, skipped
        (:func:`hed.analysis.entropy_fit.fit_runs`).
    """
    return fit_runs(_entropy_and_pass1(summary_by_step, pass1_for_figures))


def tabulate_hedging_propensity(
    aggregation: AggregationParams | dict[str, Any],
    reporting: ReportingParams | dict[str, Any],
    *token_records: ds.Dataset,
    run_steps: Sequence[tuple[str, int]],
) -> pd.DataFrame:
    """``hedging_propensity_by_step``: per (run, step) the mean anthropomorphic / reasoning
    word-start mass (all and high-entropy positions) and the sampled anthropomorphic share.

    Args:
        aggregation: ``params:aggregation`` (the current lexicon, compared with the one the
            records' mass columns were computed with).
        reporting: ``params:reporting`` (``strict``).
        *token_records: ``<run>.step_<step>.token_records`` (merged), in ``run_steps`` order.
        run_steps: (run, step) of each, bound when the pipeline is built.

    Returns:
        :data:`hed.analysis.hedging_propensity.PROPENSITY_COLUMNS`; steps generated before the
        mass columns existed have empty mass columns and log one line saying to regenerate them;
        steps whose mass columns are another lexicon's are marked (``mass_lexicon_current``).

    Raises:
        InputDataError: ``reporting.strict`` and a step's mass columns are another lexicon's.
    """
    return hedging_propensity_by_step(
        list(token_records),
        list(run_steps),
        lexicon_sha256(lexicon_param(aggregation)),
        ReportingParams.of(reporting).strict,
    )


def plot_hedging_propensity_png(
    hedging_propensity: pd.DataFrame, analyses: AnalysesParams | dict[str, Any]
) -> Figure:
    """The exact propensity beside the sampled share of Figure 2, one panel per run."""
    return analysis_figures.plot_hedging_propensity(
        hedging_propensity, dpi=AnalysesParams.of(analyses).dpi
    )


def plot_pass_at_k_png(
    pass_at_k: pd.DataFrame, analyses: AnalysesParams | dict[str, Any]
) -> Figure:
    """pass@k curves, one panel per run, one line per step."""
    return analysis_figures.plot_pass_at_k(pass_at_k, dpi=AnalysesParams.of(analyses).dpi)


def plot_entropy_performance_fit_png(
    summary_by_step: pd.DataFrame,
    pass1_for_figures: pd.DataFrame,
    entropy_performance_fit: pd.DataFrame,
    analyses: AnalysesParams | dict[str, Any],
) -> Figure:
    """The steps' (H, pass@1) points and each run's fitted curve."""
    return analysis_figures.plot_entropy_performance_fit(
        _entropy_and_pass1(summary_by_step, pass1_for_figures),
        entropy_performance_fit,
        dpi=AnalysesParams.of(analyses).dpi,
    )


def build_runs_comparison(
    summary_by_step: pd.DataFrame,
    pass1_for_figures: pd.DataFrame,
    pass_at_k: pd.DataFrame,
    analyses: AnalysesParams | dict[str, Any],
    runs: StudyLayout | dict[str, Any],
    **extra: pd.DataFrame,
) -> pd.DataFrame:
    """``runs_comparison``: every run's per-step measures and deltas to the reference run.

    Args:
        summary_by_step, pass1_for_figures, pass_at_k: the per-step tables.
        analyses: ``params:analyses`` (reference_run; null = the first run of ``runs``).
        runs: ``params:runs``, parsed (:class:`~hed.config.layout.StudyLayout`) or raw.
        **extra: further per-(run, step) measure tables by prefix (e.g. ``mismatch``: the
            ``all`` rows of ``sampler_trainer_mismatch``), bound when the pipeline is built.

    Returns:
        run, step, the measures, reference_run, delta_<measure> per measure
        (:func:`hed.analysis.runs_comparison.compare_runs`).

    Raises:
        ConfigError: the reference run is not a run with steps.
    """
    reference = AnalysesParams.of(analyses).reference_run or next(iter(run_roles(runs)), None)
    if "mismatch" in extra:  # its measures, not its bounds or counts
        keep = ["run", "step", "subset", *MISMATCH_MEASURES]
        extra = {**extra, "mismatch": extra["mismatch"].reindex(columns=keep)}
    table, measures = step_measures(summary_by_step, pass1_for_figures, pass_at_k, extra)
    return compare_runs(table, measures, str(reference))


def plot_runs_comparison_png(
    runs_comparison: pd.DataFrame, analyses: AnalysesParams | dict[str, Any]
) -> Figure:
    """One panel per measure, one line per run."""
    measures = [
        c
        for c in runs_comparison.columns
        if c not in ("run", "step", "reference_run", "max_k") and not c.startswith("delta_")
    ]
    return analysis_figures.plot_runs_comparison(
        runs_comparison, measures, dpi=AnalysesParams.of(analyses).dpi
    )


def fetch_trainer_entropy(
    metrics_params: MetricsParams | dict[str, Any],
    analyses: AnalysesParams | dict[str, Any],
    pass1: pd.DataFrame,
    *,
    run: str,
) -> pd.DataFrame:
    """The trainer's logged entropy of ``run`` from its W&B source (key
    ``analyses.trainer_entropy.metric_key``, verl: ``actor/entropy``).

    Args:
        metrics_params: ``params:metrics`` (the run's ``wandb`` / ``wandb_offline`` source and
            its step key).
        analyses: ``params:analyses``.
        pass1: ``pass1``; unused, it orders this node after the metrics pipeline's W&B reads
            (and, in mini_dapo, after the training that writes the runs).
        run: bound when the pipeline is built.

    Returns:
        run, step, trainer_entropy (nats); no row when the run has no W&B source or the run
        does not log the key (a warning says so).
    """
    key = AnalysesParams.of(analyses).trainer_entropy.metric_key
    empty = pd.DataFrame({"run": [], "step": [], "trainer_entropy": []})
    spec = MetricsParams.of(metrics_params).run(run).wandb_source
    if spec is None:
        logger.info("run %s: no W&B source, so no trainer entropy (%s)", run, key)
        return empty
    try:
        history = read_wandb_source(spec, run, metric_key=key)
    except InputDataError as exc:
        logger.warning("run %s: no trainer entropy: %s", run, exc)
        return empty
    return pd.DataFrame(
        {"run": run, "step": history["step"].astype(int), "trainer_entropy": history["pass1"]}
    )


def tabulate_trainer_entropy(
    summary_by_step: pd.DataFrame,
    generation: GenerationParams | dict[str, Any],
    analyses: AnalysesParams | dict[str, Any],
    *runs: pd.DataFrame,
) -> pd.DataFrame:
    """``trainer_entropy``: the trainer's logged entropy next to HED's, per (run, step).

    Args:
        summary_by_step: run, step, mean_entropy.
        generation: ``params:generation`` (temperature).
        analyses: ``params:analyses`` (trainer_entropy.metric_key, tolerance_nats).
        *runs: :func:`fetch_trainer_entropy` of each run.

    Returns:
        :data:`hed.analysis.trainer_entropy.TRAINER_ENTROPY_COLUMNS`; a warning per step whose
        difference exceeds the tolerance.
    """
    settings = AnalysesParams.of(analyses).trainer_entropy
    frames = [r for r in runs if len(r)]
    trainer = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame({"run": [], "step": [], "trainer_entropy": []})
    )
    if summary_by_step.empty:
        return pd.DataFrame(columns=TRAINER_ENTROPY_COLUMNS)
    return compare_trainer_entropy(
        trainer,
        summary_by_step,
        metric_key=settings.metric_key,
        temperature=float(GenerationParams.of(generation).sampling.temperature),
        tolerance=settings.tolerance_nats,
    )


def tabulate_advantage_shaping(
    entropy_thresholds: pd.DataFrame,
    aggregation: Any,
    analyses: AnalysesParams | dict[str, Any],
    *step_tables: ds.Dataset,
    run_steps: Sequence[tuple[str, int]],
) -> pd.DataFrame:
    """``advantage_shaping_by_step``: per (run, step, scheme, subset, response) where each
    advantage scheme puts the credit (:mod:`hed.analysis.advantage_shaping`).

    Args:
        entropy_thresholds: the all-steps table (run, step, threshold: each step's τ_ρ).
        aggregation: ``params:aggregation`` (the lexicon's categories).
        analyses: ``params:analyses`` (its ``advantage_shaping``: schemes, alpha, kappa, ...).
        *step_tables: per (run, step) of ``run_steps``, its ``sequences`` then its merged
            ``token_records``.
        run_steps: (run, step) of each pair, bound when the pipeline is built.

    Returns:
        :data:`hed.analysis.advantage_shaping.SHAPING_COLUMNS`; a step without a graded
        token has no row.

    Raises:
        ConfigError: a bad ``analyses.advantage_shaping`` or lexicon.
        InputDataError: a step has no ``entropy_thresholds`` row, or its records are not merged
            records of its responses.
    """
    params = advantage_shaping_params(AnalysesParams.of(analyses))
    categories = lexicon_param(aggregation).categories
    threshold = entropy_thresholds.set_index(["run", "step"])["threshold"]
    frames = []
    pairs = zip(step_tables[0::2], step_tables[1::2], strict=True)
    for (run, step), (sequences, records) in zip(run_steps, pairs, strict=True):
        if (run, step) not in threshold.index:
            raise InputDataError(
                f"entropy_thresholds has no row for {run}.step_{step}: rerun the aggregation"
            )
        responses = sequences.to_table(columns=["prompt_index", "sample_index", "correct"])
        frame = step_advantage_shaping(
            records,
            responses.to_pandas(),
            float(threshold.loc[(run, step)]),
            categories,
            params,
        )
        frames.append(frame.assign(run=run, step=step))
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in SHAPING_COLUMNS})
    return pd.concat(frames, ignore_index=True)[SHAPING_COLUMNS]


def plot_advantage_shaping_png(
    advantage_shaping_by_step: pd.DataFrame, analyses: AnalysesParams | dict[str, Any]
) -> Figure:
    """Credit share of high-entropy anthropomorphic vs reasoning tokens per scheme, per run."""
    return shaping_figures.plot_advantage_shaping(
        advantage_shaping_by_step, dpi=AnalysesParams.of(analyses).dpi
    )
