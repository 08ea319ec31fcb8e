"""The 80/20 analyses of a fixed response set re-scored by every checkpoint (docs/rescoring.md).

Wang et al., "Beyond the 80/20 Rule" (arXiv 2506.01939, §4): one set of responses is scored
teacher-forced by every checkpoint of a run, so the same positions get one entropy per step.

* **Overlap** (their Table 1). For step ``s`` let ``S_s`` be the ⌈ρ·N⌉ highest-entropy
  non-special positions of the whole re-scored set (N = its non-special positions), selected
  exactly as a step's high-entropy set (:mod:`hed.core.thresholds`: ρ·N in exact rational
  arithmetic, ties at the boundary by (prompt_index, sample_index, position) ascending).
  ``overlap_with_base = |S_s ∩ S_base| / |S_base|`` with base = the run's first step,
  ``overlap_with_final = |S_s ∩ S_final| / |S_final|`` with final = its last step (all the
  sets have the same size ⌈ρ·N⌉, so the ratio is symmetric).
* **Entropy change by percentile** (their Figure 4). The non-special positions are ordered by
  the base step's entropy ascending (ties by the record key) and position ``i`` of ``N``
  (0-based in that order) falls in bin ``b = ⌊100·i / (w·N)⌋`` of width ``w`` percent, i.e.
  bin ``b`` holds the base percentiles ``[b·w, (b+1)·w)``. Per (step, bin): the mean base
  entropy, the mean entropy at that step and the mean change (= mean entropy − mean base
  entropy), all nats, float64 means of the float32 values.
* **Entropy percentiles by step**: per (run, step) of the *generation* records, p50/p80/p90/
  p95, the fraction below 0.01 nats and the mean (:func:`hed.core.thresholds.compute_threshold`).

Inputs are numpy arrays in record-key order; nothing here reads files or knows Kedro.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from hed.core.thresholds import HighEntropyMarker, compute_threshold, high_entropy_count
from hed.errors import ConfigError, InputDataError

#: The 80/20 paper's statistics of Qwen3-8B at T = 1 (arXiv 2506.01939, §3): share of tokens
#: below 0.01 nats and the 80th entropy percentile (nats).
REFERENCE_FRAC_BELOW_0_01 = 0.5064
REFERENCE_P80_NATS = 0.672

OVERLAP_COLUMNS = [
    "run",
    "step",
    "n_positions",
    "k",
    "top_entropy_frac",
    "base_step",
    "final_step",
    "overlap_with_base",
    "overlap_with_final",
]
CHANGE_COLUMNS = [
    "run",
    "step",
    "base_step",
    "bin",
    "percentile_low",
    "percentile_high",
    "n_positions",
    "mean_base_entropy",
    "mean_entropy",
    "mean_change",
]
PERCENTILE_COLUMNS = [
    "run",
    "step",
    "n_tokens",
    "p50",
    "p80",
    "p90",
    "p95",
    "frac_below_0_01",
    "mean_entropy",
]


def top_entropy_mask(entropy: np.ndarray, rho: object, *, run: str = "", step: int = 0):
    """Mark the ⌈ρ·N⌉ highest entropies, ties at the boundary in the given (key) order.

    Args:
        entropy: ``(N,)`` float32 entropies (nats) of the non-special positions, in
            (prompt_index, sample_index, position) order.
        rho: top_entropy_frac ρ in (0, 1].
        run, step: named in error messages.

    Returns:
        ``(N,)`` bool mask with exactly ⌈ρ·N⌉ True values.

    Raises:
        InputDataError: N = 0 or a non-finite entropy. ConfigError: ρ outside (0, 1].
    """
    entropy = np.ascontiguousarray(entropy, dtype=np.float32)
    selection = compute_threshold(entropy.copy(), rho, run=run, step=step)
    return HighEntropyMarker(selection).mark(entropy, np.zeros(entropy.shape, dtype=bool))


def entropy_overlap(run: str, entropies: Mapping[int, np.ndarray], rho: object) -> pd.DataFrame:
    """The overlap table of one run (``entropy_overlap`` rows, one per step).

    Args:
        run: the run.
        entropies: ``{step: (N,) float32}``, the re-scored non-special entropies of each step,
            every array in the same key order (the same positions).
        rho: top_entropy_frac ρ.

    Returns:
        DataFrame with :data:`OVERLAP_COLUMNS`, steps ascending.

    Raises:
        InputDataError: no steps, or the steps have different numbers of positions.
    """
    steps = _check_steps(run, entropies)
    masks = {s: top_entropy_mask(entropies[s], rho, run=run, step=s) for s in steps}
    base, final = masks[steps[0]], masks[steps[-1]]
    n = len(base)
    k = high_entropy_count(n, rho)
    rows = [
        {
            "run": run,
            "step": s,
            "n_positions": n,
            "k": k,
            "top_entropy_frac": float(rho),
            "base_step": steps[0],
            "final_step": steps[-1],
            "overlap_with_base": np.count_nonzero(masks[s] & base) / k,
            "overlap_with_final": np.count_nonzero(masks[s] & final) / k,
        }
        for s in steps
    ]
    return pd.DataFrame(rows, columns=OVERLAP_COLUMNS)


def percentile_bins(base_entropy: np.ndarray, width_percent: int) -> np.ndarray:
    """The base-percentile bin of every position (see the module docstring).

    Args:
        base_entropy: ``(N,)`` float32 base-step entropies in key order.
        width_percent: bin width ``w`` in percent; must divide 100 (5 → 20 bins).

    Returns:
        ``(N,)`` int64 bin indices in ``[0, 100 / w)``, in the input's order.

    Raises:
        ConfigError: ``w`` is not a positive integer dividing 100.
    """
    n_bins = bin_count(width_percent)
    n = len(base_entropy)
    order = np.argsort(base_entropy, kind="stable")  # ascending, ties in key order
    bins = np.empty(n, dtype=np.int64)
    bins[order] = (np.arange(n, dtype=np.int64) * n_bins) // max(n, 1)
    return bins


def bin_count(width_percent: object) -> int:
    """Number of bins of a width in percent (5 → 20).

    Raises:
        ConfigError: not a positive integer that divides 100.
    """
    if (
        isinstance(width_percent, bool)
        or not isinstance(width_percent, int | np.integer)
        or width_percent < 1
        or 100 % int(width_percent)
    ):
        raise ConfigError(
            f"rescoring.percentile_bin_width = {width_percent!r}: use a whole number of percent "
            "that divides 100 (e.g. 5)"
        )
    return 100 // int(width_percent)


def entropy_change_by_percentile(
    run: str, entropies: Mapping[int, np.ndarray], width_percent: int = 5
) -> pd.DataFrame:
    """Mean entropy change per base-percentile bin, per step (``entropy_change_by_percentile``).

    Args:
        run: the run.
        entropies: ``{step: (N,) float32}`` as for :func:`entropy_overlap`; the first step is
            the base.
        width_percent: bin width in percent.

    Returns:
        DataFrame with :data:`CHANGE_COLUMNS`: one row per (step, bin), every step (the base
        included: its change is 0) and every bin; an empty bin (N < number of bins) has
        n_positions 0 and NaN means.
    """
    steps = _check_steps(run, entropies)
    base = entropies[steps[0]].astype(np.float64)
    n_bins = bin_count(width_percent)
    bins = percentile_bins(entropies[steps[0]], width_percent)
    counts = np.bincount(bins, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        base_mean = np.bincount(bins, weights=base, minlength=n_bins) / counts
        rows = []
        for s in steps:
            mean = np.bincount(bins, weights=entropies[s].astype(np.float64), minlength=n_bins)
            mean = mean / counts
            for b in range(n_bins):
                rows.append(
                    {
                        "run": run,
                        "step": s,
                        "base_step": steps[0],
                        "bin": b,
                        "percentile_low": b * int(width_percent),
                        "percentile_high": (b + 1) * int(width_percent),
                        "n_positions": int(counts[b]),
                        "mean_base_entropy": float(base_mean[b]),
                        "mean_entropy": float(mean[b]),
                        "mean_change": float(mean[b] - base_mean[b]),
                    }
                )
    return pd.DataFrame(rows, columns=CHANGE_COLUMNS)


def entropy_percentiles(run: str, step: int, entropy: np.ndarray) -> dict[str, object]:
    """One ``entropy_percentiles_by_step`` row from a step's non-special generation entropies.

    Args:
        run, step: the step.
        entropy: ``(N,)`` float32 entropies (nats), any order (copied, not modified).

    Returns:
        ``{run, step, n_tokens, p50, p80, p90, p95, frac_below_0_01, mean_entropy}``
        (numpy ``'linear'`` percentiles, fraction strictly below 0.01 nats, float64 mean).
    """
    stats = compute_threshold(np.array(entropy, dtype=np.float32), 0.2, run=run, step=step)
    row = stats.as_row()
    return {name: row[name] for name in PERCENTILE_COLUMNS}


def _check_steps(run: str, entropies: Mapping[int, np.ndarray]) -> Sequence[int]:
    steps = sorted(entropies)
    if not steps:
        raise InputDataError(f"run {run}: no re-scored steps")
    sizes = {s: len(entropies[s]) for s in steps}
    if len(set(sizes.values())) != 1:
        raise InputDataError(
            f"run {run}: the re-scored steps hold different numbers of positions {sizes}; "
            "they must score the same reference responses (rerun `--pipelines rescoring`)"
        )
    return steps
