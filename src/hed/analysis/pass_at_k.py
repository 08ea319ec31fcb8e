"""pass@k of a step from its own graded samples (unbiased estimator of Chen et al. 2021).

For a prompt with ``n`` graded samples of which ``c`` are correct, the probability that at
least one of ``k`` samples drawn without replacement from the ``n`` is correct is

    pass@k = 1 − C(n − c, k) / C(n, k)

(Chen et al., *Evaluating Large Language Models Trained on Code*, arXiv 2107.03374, eq. 1 and
their numerically stable form ``1 − Π_{i=n−c+1}^{n} (1 − k / i)``, used here: no binomial
coefficient is formed, so n in the thousands neither overflows nor loses precision). A step's
pass@k is the mean over its prompts. pass@1 is then the share of correct samples averaged per
prompt; pass@n is the share of prompts with at least one correct sample. Cheng et al.
(arXiv 2506.14758) compare RL checkpoints by such pass@k curves.

Only graded samples count (``correct`` not null): a prompt without a reference answer has
none. k runs from 1 to the smallest number of graded samples of any graded prompt of the step
(pass@k is undefined for a prompt with fewer than k samples).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hed.errors import InputDataError

#: Columns of a ``pass_at_k`` table.
PASS_AT_K_COLUMNS = ["run", "step", "k", "pass_at_k", "n_samples", "n_prompts"]


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k of each prompt: 1 − C(n − c, k) / C(n, k), in the stable product form.

    Args:
        n: (P,) int, graded samples per prompt (each ≥ k).
        c: (P,) int, correct samples per prompt (0 ≤ c ≤ n).
        k: samples drawn, 1 ≤ k ≤ min(n).

    Returns:
        (P,) float64 in [0, 1]: 1.0 where n − c < k (every draw of k holds a correct sample),
        else 1 − Π_{i=n−c+1}^{n} (1 − k / i) (Chen et al. 2021).

    Raises:
        ValueError: k < 1, k > some n, or c outside [0, n].
    """
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if k < 1 or (n.size and int(n.min()) < k):
        raise ValueError(f"pass@k needs 1 ≤ k ≤ n for every prompt, got k={k}, min n={n.min()}")
    if ((c < 0) | (c > n)).any():
        raise ValueError("pass@k needs 0 ≤ c ≤ n for every prompt")
    out = np.ones(n.shape, dtype=np.float64)
    for p in np.flatnonzero(n - c >= k):
        i = np.arange(n[p] - c[p] + 1, n[p] + 1, dtype=np.float64)
        out[p] = 1.0 - float(np.prod(1.0 - k / i))
    return out


def step_pass_at_k(sequences: pd.DataFrame, run: str, step: int) -> pd.DataFrame:
    """The ``pass_at_k`` rows of one step: k = 1 … min graded samples per prompt.

    Args:
        sequences: the step's responses, columns prompt_index and correct (nullable bool;
            null = ungraded, not counted).
        run, step: written into every row.

    Returns:
        :data:`PASS_AT_K_COLUMNS`: pass_at_k (float64, mean over graded prompts), n_samples
        (the smallest number of graded samples of a prompt, i.e. the largest k), n_prompts
        (graded prompts). No row when the step has no graded sample.

    Raises:
        InputDataError: a column is missing.
    """
    missing = [c for c in ("prompt_index", "correct") if c not in sequences.columns]
    if missing:
        raise InputDataError(
            f"{run}.step_{step}.sequences lacks column(s) {', '.join(missing)}: rerun generation"
        )
    graded = sequences.loc[sequences["correct"].notna(), ["prompt_index", "correct"]]
    if graded.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in PASS_AT_K_COLUMNS})
    per_prompt = graded.assign(correct=graded["correct"].astype(bool)).groupby("prompt_index")
    n = per_prompt["correct"].size().to_numpy(np.int64)
    c = per_prompt["correct"].sum().to_numpy(np.int64)
    n_min = int(n.min())
    rows = [
        {
            "run": run,
            "step": int(step),
            "k": k,
            "pass_at_k": float(pass_at_k(n, c, k).mean()),
            "n_samples": n_min,
            "n_prompts": len(n),
        }
        for k in range(1, n_min + 1)
    ]
    return pd.DataFrame(rows, columns=PASS_AT_K_COLUMNS)
