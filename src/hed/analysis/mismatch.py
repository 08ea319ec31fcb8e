"""Sampler–trainer mismatch of a step: decode-time log-probabilities against a teacher-forced
re-score of the same tokens in the trainer's dtype.

RL frameworks sample with one engine (vLLM, bf16) and compute the policy-gradient log-probs
with another (FSDP/Megatron); the gap is what truncated importance sampling corrects (verl's
``rollout_corr``; Liu, Li et al. 2025, *When Speed Kills Stability: Demystifying RL Collapse
from the Training-Inference Mismatch*). For each sampled token, with p the sampler's
distribution (the decode-time record) and q the re-scorer's, both softmax(z/T) at the sampling
temperature:

* Δlog p = log p − log q of the sampled token (nats);
* importance ratio r = exp(log q − log p) = q/p (verl's ``rollout_is_weights``: π_train /
  π_rollout);
* KL(p ‖ q) estimated from the samples (which are drawn from p) with Schulman's k3 estimator
  (*Approximating KL Divergence*, 2020): per token r − 1 − log r ≥ 0, unbiased for KL(p ‖ q),
  computed as expm1(−Δ) + Δ so that tiny Δ keep their precision; the table holds its mean;
* the share of tokens with r outside the truncation bounds [lo, hi] (verl's defaults:
  ``rollout_is_threshold`` = 2.0 and its reciprocal 0.5, the default of
  ``rollout_is_threshold_lower`` / ``rollout_rs_threshold_lower``), i.e. the tokens verl's
  truncated or rejection sampling would change.

Each statistic is computed over every non-special token of the step (``all``) and over the
subsets ``high_entropy`` (the step's top-ρ set), ``other`` (the rest), ``anthropomorphic`` and
``reasoning`` (word category, docs/aggregation.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

#: Subsets of a step's non-special tokens, in row order.
SUBSETS = ("all", "high_entropy", "other", "anthropomorphic", "reasoning")
#: verl's default truncation bounds of the importance ratio (lower = 1 / upper).
VERL_RATIO_BOUNDS = (0.5, 2.0)
#: dtypes a step's own responses may be re-scored in (``analyses.mismatch.dtype``): bfloat16 is
#: the trainer's (the default), float32 the exact reference.
MISMATCH_DTYPES = ("float32", "bfloat16", "float16")
MISMATCH_DTYPE = "bfloat16"
#: Columns of ``sampler_trainer_mismatch``.
MISMATCH_COLUMNS = [
    "run",
    "step",
    "subset",
    "n_tokens",
    "mean_delta_logprob",
    "mean_abs_delta_logprob",
    "p50_abs_delta_logprob",
    "p90_abs_delta_logprob",
    "p99_abs_delta_logprob",
    "kl_k3",
    "ratio_outside_share",
    "ratio_low",
    "ratio_high",
    "decode_dtype",
    "rescore_dtype",
]


def k3_terms(delta: np.ndarray) -> np.ndarray:
    """Per-token k3 terms r − 1 − log r with r = exp(−delta) (Schulman 2020), float64.

    Args:
        delta: (N,) Δlog p = log p − log q, nats.

    Returns:
        (N,) float64 ≥ 0: expm1(−Δ) + Δ (= r − 1 − log r, exact for small Δ).
    """
    d = np.asarray(delta, dtype=np.float64)
    return np.expm1(-d) + d


def mismatch_stats(
    delta: np.ndarray, bounds: Sequence[float] = VERL_RATIO_BOUNDS
) -> dict[str, float | int]:
    """Statistics of one subset's Δlog p (module docstring).

    Args:
        delta: (N,) Δlog p = log p − log q (nats); any float dtype, computed in float64.
        bounds: (lo, hi) of the importance ratio r = exp(−Δ), 0 < lo < hi.

    Returns:
        n_tokens, mean_delta_logprob, mean_abs_delta_logprob, p50/p90/p99_abs_delta_logprob
        (numpy's linear interpolation), kl_k3 (mean of r − 1 − log r), ratio_outside_share
        (share with r < lo or r > hi), ratio_low, ratio_high; the statistics are NaN when N = 0.
    """
    d = np.asarray(delta, dtype=np.float64)
    lo, hi = (float(b) for b in bounds)
    row: dict[str, float | int] = {"n_tokens": int(d.size), "ratio_low": lo, "ratio_high": hi}
    if d.size == 0:
        nan = float("nan")
        names = ("mean_delta_logprob", "mean_abs_delta_logprob", "kl_k3", "ratio_outside_share")
        return (
            row | dict.fromkeys(names, nan) | {f"p{q}_abs_delta_logprob": nan for q in (50, 90, 99)}
        )
    magnitude = np.abs(d)
    p50, p90, p99 = np.percentile(magnitude, [50, 90, 99])
    log_r = -d
    outside = (log_r < np.log(lo)) | (log_r > np.log(hi))
    return row | {
        "mean_delta_logprob": float(d.mean()),
        "mean_abs_delta_logprob": float(magnitude.mean()),
        "p50_abs_delta_logprob": float(p50),
        "p90_abs_delta_logprob": float(p90),
        "p99_abs_delta_logprob": float(p99),
        "kl_k3": float(k3_terms(d).mean()),
        "ratio_outside_share": float(outside.mean()),
    }


def subset_masks(is_high_entropy: np.ndarray, category: np.ndarray) -> dict[str, np.ndarray]:
    """Boolean (N,) masks of :data:`SUBSETS` over a step's non-special tokens."""
    high = np.asarray(is_high_entropy, dtype=bool)
    category = np.asarray(category, dtype=object)
    return {
        "all": np.ones(high.shape, dtype=bool),
        "high_entropy": high,
        "other": ~high,
        "anthropomorphic": category == "anthropomorphic",
        "reasoning": category == "reasoning",
    }


def step_mismatch(
    sampler_logprob: np.ndarray,
    rescorer_logprob: np.ndarray,
    is_high_entropy: np.ndarray,
    category: np.ndarray,
    *,
    run: str,
    step: int,
    bounds: Sequence[float] = VERL_RATIO_BOUNDS,
    decode_dtype: str | None = None,
    rescore_dtype: str | None = None,
) -> pd.DataFrame:
    """The ``sampler_trainer_mismatch`` rows of one step, one per subset.

    Args:
        sampler_logprob: (N,) decode-time log p of the sampled tokens (non-special), nats.
        rescorer_logprob: (N,) teacher-forced log q of the same tokens, same order.
        is_high_entropy: (N,) bool, the step's top-ρ set.
        category: (N,) word category of each token.
        run, step: written into every row.
        bounds: importance-ratio bounds (lo, hi).
        decode_dtype, rescore_dtype: written into every row.

    Returns:
        :data:`MISMATCH_COLUMNS`, rows in :data:`SUBSETS` order.
    """
    delta = np.asarray(sampler_logprob, np.float64) - np.asarray(rescorer_logprob, np.float64)
    rows = [
        {
            "run": run,
            "step": int(step),
            "subset": name,
            **mismatch_stats(delta[mask], bounds),
            "decode_dtype": decode_dtype,
            "rescore_dtype": rescore_dtype,
        }
        for name, mask in subset_masks(is_high_entropy, category).items()
    ]
    return pd.DataFrame(rows, columns=MISMATCH_COLUMNS)
