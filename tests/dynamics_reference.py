"""An independent float64 numpy/Python computation of the dynamics tables, for the tests.

Written from the definitions (docs/dynamics.md; verl ``compute_grpo_outcome_advantage``,
``compute_policy_loss_clip_cov`` / ``compute_policy_loss_kl_cov``) with plain loops and whole
arrays in memory, sharing no code with :mod:`hed.core.advantage`, :mod:`hed.analysis.covariance` or
:mod:`hed.analysis.correctness`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def reference_advantages(sequences: pd.DataFrame, estimator: str, eps: float = 1e-6) -> dict:
    """{(prompt_index, sample_index): A} for the graded responses (verl's loop, float64)."""
    groups: dict[int, list[tuple[int, float]]] = {}
    for row in sequences.itertuples():
        if pd.isna(row.correct):
            continue
        groups.setdefault(int(row.prompt_index), []).append(
            (int(row.sample_index), 1.0 if row.correct else 0.0)
        )
    out = {}
    for prompt, members in groups.items():
        scores = np.array([r for _, r in members], dtype=np.float64)
        if len(scores) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = scores.mean(), scores.std(ddof=1)
        for sample, r in members:
            out[(prompt, sample)] = (r - mean) / (std + eps) if estimator == "grpo" else r - mean
    return out


def reference_covariance(
    records: pd.DataFrame,
    sequences: pd.DataFrame,
    estimator: str,
    categories: tuple[str, ...],
    *,
    kl_ratio: float = 0.002,
    band: tuple[float, float] = (1.0, 5.0),
) -> tuple[dict, pd.DataFrame]:
    """(row, top tokens) of one step and estimator, from whole in-memory arrays."""
    adv = reference_advantages(sequences, estimator)
    tokens = records[~records["is_special"]].copy()
    keys = list(zip(tokens["prompt_index"], tokens["sample_index"], strict=True))
    tokens["advantage"] = [adv.get((int(p), int(s)), np.nan) for p, s in keys]
    tokens = tokens[tokens["advantage"].notna()].reset_index(drop=True)
    a = tokens["advantage"].to_numpy(np.float64)
    lp = tokens["logprob"].to_numpy(np.float64)
    cov = (a - a.mean()) * (lp - lp.mean())
    tokens["cov"] = cov
    n = len(cov)
    high = tokens["is_high_entropy"].to_numpy(bool)

    def mean(mask):
        return float(cov[mask].mean()) if mask.any() else math.nan

    graded = list(adv)
    prompts = {p for p, _ in graded}
    sizes = {p: sum(1 for q, _ in graded if q == p) for p in prompts}
    zero = [v == 0.0 for v in reference_advantages(sequences, "dr_grpo").values()]
    row = {
        "n_responses": len(graded),
        "n_prompts": len(prompts),
        "n_single_sample_responses": sum(1 for p, _ in graded if sizes[p] == 1),
        "zero_advantage_share": float(np.mean(zero)),
        "n_tokens": n,
        "mean_advantage": float(a.mean()),
        "mean_logprob": float(lp.mean()),
        "mean_cov": float(cov.mean()),
        "clip_cov_band_share": float(((cov > band[0]) & (cov < band[1])).mean()),
        "kl_cov_k": max(1, int(n * kl_ratio)),
        "mean_cov_high_entropy": mean(high),
        "mean_cov_other": mean(~high),
    }
    category = tokens["category"].to_numpy(object)
    for c in categories:
        row[f"mean_cov_category_{c}"] = mean(category == c)
    for c in categories:
        row[f"mean_cov_high_entropy_{c}"] = mean((category == c) & high)
    ordered = sorted(
        range(n),
        key=lambda i: (
            -cov[i],
            tokens.at[i, "prompt_index"],
            tokens.at[i, "sample_index"],
            tokens.at[i, "position"],
        ),
    )[: row["kl_cov_k"]]
    top = tokens.loc[ordered].reset_index(drop=True)
    row["kl_cov_min"] = float(top["cov"].min())
    return row, top


def reference_correctness(records: pd.DataFrame, sequences: pd.DataFrame) -> dict[bool, dict]:
    """{correct: row} over the graded responses' non-special tokens."""
    out = {}
    graded = sequences[sequences["correct"].notna()]
    for value in (True, False):
        chosen = graded[graded["correct"].astype(bool) == value]
        keys = set(zip(chosen["prompt_index"], chosen["sample_index"], strict=True))
        mask = [
            (p, s) in keys and not special
            for p, s, special in zip(
                records["prompt_index"], records["sample_index"], records["is_special"], strict=True
            )
        ]
        tokens = records[mask]
        n = len(tokens)
        high = tokens["is_high_entropy"].to_numpy(bool)
        anthro = int(((tokens["category"] == "anthropomorphic").to_numpy() & high).sum())
        out[value] = {
            "n_responses": len(chosen),
            "n_tokens": n,
            "mean_entropy": float(tokens["entropy"].astype(np.float64).mean()) if n else math.nan,
            "high_entropy_share": float(high.mean()) if n else math.nan,
            "n_high_entropy": int(high.sum()),
            "n_high_entropy_anthropomorphic": anthro,
            "anthropomorphic_per_1k_tokens": 1000.0 * anthro / n if n else math.nan,
        }
    return out


# ------------------------------------------------------------------ hand-made merged steps

WORDS = {"wait": "anthropomorphic", "perhaps": "anthropomorphic", "so": "reasoning", "x": "other"}
LEXICON = {"anthropomorphic": ["wait", "perhaps"], "reasoning": ["so"]}
CATEGORIES = ("anthropomorphic", "reasoning", "other")


def random_step(
    correct: list[tuple[int, int, bool | None]], seed: int = 0, rho: float = 0.2, run="r", step=0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(merged records, sequences) of a step whose responses are ``correct``'s
    (prompt_index, sample_index, correct); each response has 1–6 tokens with random
    log-probabilities and entropies, a random word, then a special end token. The step's
    top-ρ set is marked by entropy (ties: prompt_index, sample_index, position)."""
    rng = np.random.default_rng(seed)
    rows, seqs = [], []
    words = list(WORDS)
    for prompt, sample, value in sorted(correct, key=lambda t: (t[0], t[1])):
        n = int(rng.integers(1, 7))
        for position in range(n + 1):
            special = position == n
            word = "" if special else words[int(rng.integers(len(words)))]
            logprob = float(np.float32(-rng.exponential(1.5))) if not special else -0.01
            rows.append(
                {
                    "run": run,
                    "step": step,
                    "shard": 0,
                    "prompt_index": prompt,
                    "sample_index": sample,
                    "position": position,
                    "token_id": position,
                    "token_text": "<|im_end|>" if special else f" {word}",
                    "entropy": float(np.float32(rng.uniform(0, 4))) if not special else 7.0,
                    "logprob": logprob,
                    "prob": math.exp(logprob),
                    "topk_token_ids": [position],
                    "topk_probs": [math.exp(logprob)],
                    "is_special": special,
                    "word": word,
                    "category": WORDS.get(word, "other"),
                    "is_high_entropy": False,
                }
            )
        seqs.append(
            {
                "run": run,
                "step": step,
                "shard": 0,
                "prompt_index": prompt,
                "prompt_id": f"id{prompt}",
                "sample_index": sample,
                "response_text": "",
                "n_tokens": n + 1,
                "finish_reason": "eos",
                "extracted_answer": None,
                "correct": value,
            }
        )
    records = pd.DataFrame(rows)
    normal = records[~records["is_special"]]
    k = math.ceil(rho * len(normal))
    chosen = normal.sort_values(
        ["entropy", "prompt_index", "sample_index", "position"],
        ascending=[False, True, True, True],
    ).index[:k]
    records.loc[chosen, "is_high_entropy"] = True
    return records, pd.DataFrame(seqs)


def write_step(folder, records: pd.DataFrame, sequences: pd.DataFrame):
    """Write a step as the aggregation pipeline does; return the lazy datasets."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from hed.records.schema import MERGED_TOKEN_RECORD_SCHEMA, SEQUENCE_SCHEMA

    folder.mkdir(parents=True, exist_ok=True)
    records = records.assign(anthropomorphic_mass=None, reasoning_mass=None)  # not recorded
    pq.write_table(
        pa.Table.from_pandas(records, schema=MERGED_TOKEN_RECORD_SCHEMA, preserve_index=False),
        folder / "step.parquet",
        row_group_size=7,  # several row groups: batches cross them
    )
    pq.write_table(
        pa.Table.from_pandas(sequences, schema=SEQUENCE_SCHEMA, preserve_index=False),
        folder / "step.sequences.parquet",
    )
    return ds.dataset(str(folder / "step.parquet")), ds.dataset(
        str(folder / "step.sequences.parquet")
    )


def thresholds_row(records: pd.DataFrame, run="r", step=0) -> pd.DataFrame:
    """The ``entropy_thresholds`` columns the dynamics nodes read, for ``records``."""
    normal = records[~records["is_special"]]
    return pd.DataFrame(
        [
            {
                "run": run,
                "step": step,
                "n_tokens": len(normal),
                "n_high_entropy": int(normal["is_high_entropy"].sum()),
            }
        ]
    )


#: (prompt_index, sample_index, correct): mixed groups, all-equal groups (correct, wrong),
#: single-sample prompts (correct, wrong), an ungraded prompt, unordered samples.
RESPONSES = [
    (0, 0, True), (0, 1, False), (0, 2, False), (0, 3, True),
    (1, 0, True), (1, 1, True), (1, 2, True),
    (2, 0, False), (2, 1, False),
    (3, 0, True),
    (4, 0, False),
    (5, 0, None), (5, 1, None),
    (6, 1, False), (6, 0, True), (6, 2, False),
]  # fmt: skip
