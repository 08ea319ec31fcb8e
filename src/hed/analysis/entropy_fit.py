"""The entropy–performance fit of a run: R = −a·exp(H) + b over its steps.

Cui et al. (*The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models*,
arXiv 2505.22617, eq. 2) find that over an RL run the validation performance R and the
policy entropy H follow R = −a·e^H + b; at H = 0 (entropy exhausted) the fit predicts the
ceiling R = −a + b. Here R is the step's pass@1 (from the run's configured pass@1 source) and H
the step's mean decode-time entropy of HED's own samples (nats, non-special tokens).

The fit is ordinary least squares, linear in (a, b) with x = exp(H): minimise
Σ (R_i − (b − a·x_i))². R² = 1 − SS_res / SS_tot (SS_tot = Σ (R_i − mean R)²; R² is NaN when
every R is equal). It needs at least two steps with distinct H.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Columns of the ``entropy_performance_fit`` table.
FIT_COLUMNS = ["run", "a", "b", "r2", "ceiling", "n_steps", "pass1_source", "skipped"]


def fit_entropy_performance(entropy: np.ndarray, pass1: np.ndarray) -> dict[str, float]:
    """Least-squares a, b of R = −a·exp(H) + b, its R² and the ceiling −a + b.

    Args:
        entropy: (S,) mean entropy per step, nats.
        pass1: (S,) pass@1 per step, in [0, 1].

    Returns:
        ``{"a", "b", "r2", "ceiling"}`` as floats (float64 arithmetic).

    Raises:
        ValueError: fewer than two steps, or all exp(H) equal (a is not identifiable).
    """
    h = np.asarray(entropy, dtype=np.float64)
    r = np.asarray(pass1, dtype=np.float64)
    x = np.exp(h)
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("the entropy–performance fit needs two steps with different entropy")
    design = np.stack([-x, np.ones_like(x)], axis=1)  # (S, 2): R = a·(−x) + b·1
    (a, b), *_ = np.linalg.lstsq(design, r, rcond=None)
    residual = r - (b - a * x)
    ss_tot = float(((r - r.mean()) ** 2).sum())
    r2 = 1.0 - float((residual**2).sum()) / ss_tot if ss_tot > 0 else float("nan")
    return {"a": float(a), "b": float(b), "r2": r2, "ceiling": float(b - a)}


def fit_runs(steps: pd.DataFrame) -> pd.DataFrame:
    """One fit per run over its steps that have both a pass@1 and a mean entropy.

    Args:
        steps: columns run, step, mean_entropy (nats), pass1, pass1_source.

    Returns:
        :data:`FIT_COLUMNS`, one row per run in first-appearance order; a run with fewer than
        two usable steps (or all of one entropy) has empty a, b, r2, ceiling and the reason in
        ``skipped``.
    """
    rows = []
    for run, group in steps.groupby("run", sort=False):
        usable = group.dropna(subset=["mean_entropy", "pass1"])
        sources = sorted(set(usable["pass1_source"].dropna().astype(str)))
        row = {"run": run, "n_steps": len(usable), "pass1_source": ",".join(sources) or None}
        try:
            row |= fit_entropy_performance(usable["mean_entropy"], usable["pass1"])
            row["skipped"] = None
        except ValueError as exc:
            row["skipped"] = str(exc)
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=FIT_COLUMNS)
