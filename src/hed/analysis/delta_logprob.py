"""Δlog p on a fixed response set: the direction in which RL moved each token's probability.

For a token t of the run's reference responses (the rescoring pipeline's fixed set), scored
teacher-forced by checkpoint s and by the base checkpoint (the run's first step):

    Δlog p_s(t) = log p_s(t) − log p_base(t)      (nats; > 0: the checkpoint made t likelier)

Tokens whose log-probability moved most in RL training locate reasoning-critical tokens better
than entropy or per-token KL size does (arXiv 2603.22117, "the direction of change").
Per (run, step, subset ∈ all, high_entropy, other, anthropomorphic, reasoning): n_tokens, mean,
mean |Δ|, and the 1st/10th/50th/90th/99th percentiles (numpy's linear interpolation); the
subsets are those of the reference tokens at decode time (``is_high_entropy``: the top-ρ set of
the step that generated them; ``category`` of their word). Per word (lower-cased letter run,
docs/aggregation.md) at the final step: the mean Δ over the word's tokens, and the words that
rose and fell most.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hed.analysis.mismatch import subset_masks

QUANTILES = (1, 10, 50, 90, 99)
#: Defaults of :func:`top_words` (``analyses.delta_logprob``): words listed per direction, and
#: the tokens a word needs to be listed.
TOP_N = 20
MIN_COUNT = 2
DELTA_COLUMNS = [
    "run",
    "step",
    "base_step",
    "subset",
    "n_tokens",
    "mean",
    "mean_abs",
    *(f"p{q:02d}" for q in QUANTILES),
]
TOP_COLUMNS = [
    "run",
    "step",
    "base_step",
    "direction",
    "rank",
    "word",
    "category",
    "count",
    "mean_delta_logprob",
]


def delta_by_subset(
    delta: np.ndarray,
    is_high_entropy: np.ndarray | None,
    category: np.ndarray | None,
    *,
    run: str,
    step: int,
    base: int,
) -> pd.DataFrame:
    """The ``delta_logprob_by_step`` rows of one step.

    Args:
        delta: (N,) float64 Δlog p of the non-special reference tokens, nats.
        is_high_entropy, category: (N,) of the same tokens, or None (a user's response file:
            only the ``all`` row).
        run, step, base: written into every row.

    Returns:
        :data:`DELTA_COLUMNS`, one row per subset (statistics NaN for an empty subset).
    """
    d = np.asarray(delta, dtype=np.float64)
    if is_high_entropy is None or category is None:
        masks = {"all": np.ones(d.shape, dtype=bool)}
    else:
        masks = subset_masks(is_high_entropy, category)
    rows = []
    for name, mask in masks.items():
        values = d[mask]
        row = {
            "run": run,
            "step": int(step),
            "base_step": int(base),
            "subset": name,
            "n_tokens": int(values.size),
        }
        if values.size:
            row |= {"mean": float(values.mean()), "mean_abs": float(np.abs(values).mean())}
            row |= {
                f"p{q:02d}": float(v)
                for q, v in zip(QUANTILES, np.percentile(values, QUANTILES), strict=True)
            }
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=DELTA_COLUMNS)


def top_words(
    delta: np.ndarray,
    words: np.ndarray,
    category: np.ndarray,
    *,
    run: str,
    step: int,
    base: int,
    top_n: int = TOP_N,
    min_count: int = MIN_COUNT,
) -> pd.DataFrame:
    """Words whose tokens' mean Δlog p rose and fell most.

    Args:
        delta: (N,) Δlog p of the non-special reference tokens (at ``step``).
        words: (N,) the word of each token ("" = none: left out).
        category: (N,) its category.
        run, step, base: written into every row.
        top_n: words listed per direction.
        min_count: a word needs at least this many tokens.

    Returns:
        :data:`TOP_COLUMNS`: ``rose`` rows (largest mean first), then ``fell`` rows (smallest
        first); ties broken by word, ascending.
    """
    frame = pd.DataFrame(
        {
            "word": np.asarray(words, dtype=object),
            "category": np.asarray(category, dtype=object),
            "delta": np.asarray(delta, dtype=np.float64),
        }
    )
    frame = frame[frame["word"].astype(str) != ""]
    per_word = frame.groupby("word", sort=True).agg(
        category=("category", "first"),
        count=("delta", "size"),
        mean_delta_logprob=("delta", "mean"),
    )
    per_word = per_word[per_word["count"] >= min_count].reset_index()
    rose = per_word[per_word["mean_delta_logprob"] > 0].sort_values(
        ["mean_delta_logprob", "word"], ascending=[False, True], kind="stable"
    )
    fell = per_word[per_word["mean_delta_logprob"] < 0].sort_values(
        ["mean_delta_logprob", "word"], ascending=[True, True], kind="stable"
    )
    parts = []
    for direction, rows in (("rose", rose.head(top_n)), ("fell", fell.head(top_n))):
        parts.append(rows.assign(direction=direction, rank=np.arange(1, len(rows) + 1)))
    out = pd.concat(parts, ignore_index=True)
    return out.assign(run=run, step=int(step), base_step=int(base)).reindex(columns=TOP_COLUMNS)
