"""Token-level covariance of log-probability and advantage over one step (Clip-Cov / KL-Cov).

Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"
(arXiv 2505.22617), show that the change of policy entropy under policy-gradient training
follows the covariance between a token's log-probability and its advantage; their Clip-Cov
and KL-Cov act on the per-token centred product, as verl implements it in
``verl/trainer/ppo/core_algos.py`` (volcengine/verl, commit b178a3c)::

    # compute_policy_loss_clip_cov
    cov_all = (advantages - verl_F.masked_mean(advantages, response_mask)) * (
        log_prob - verl_F.masked_mean(log_prob.detach(), response_mask)
    )
    top_k_idx = (cov_all < clip_cov_ub) & (cov_all > clip_cov_lb) & (response_mask > 0)
    # clip_cov_lb = 1.0, clip_cov_ub = 5.0 by default

    # compute_policy_loss_kl_cov
    cov_lst_all = (all_valid_adv - all_valid_adv.mean()) * (all_valid_logp - all_valid_logp.mean())
    k_percent_nums = max(1, int(len(cov_lst_all) * kl_cov_ratio))
    large_cov_idxs = torch.topk(cov_lst_all, k_percent_nums, largest=True).indices

HED computes the same quantities over the N non-special tokens of a step's *graded*
responses (the "batch" is the step's sample set; log π is the recorded ``logprob`` of the
sampled token, nats, float32 widened to float64):

* cov_i = (A_i − Ā)(log π_i − mean log π), Ā and mean log π being token means over the N
  tokens (verl's ``masked_mean``: a long response weighs more);
* mean cov = Σ cov_i / N (the population covariance of A and log π over tokens);
* Clip-Cov band share = |{i : lo < cov_i < hi}| / N (strict, lo = 1, hi = 5 by default);
  verl then clips a random ``max(1, int(r·N))`` of these (r = ``clip_cov_ratio``), which HED
  does not draw;
* KL-Cov: the ``max(1, int(k·N))`` tokens of largest cov (k = ``kl_cov_ratio``; HED's
  default 0.002, the ratio of Cui et al.'s 7B runs; verl's default is 0.0002). verl's
  ``torch.topk`` leaves ties unordered; HED breaks them by (prompt_index, sample_index,
  position) ascending, so the list is reproducible.

Memory: two streaming passes over the merged records (means, then the products), each
reading only its columns in batches; the state is one row per response plus the running top
tokens, never one value per token.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from hed.errors import InputDataError
from hed.records.arrow_stream import row_group_batches
from hed.records.response_index import ResponseIndex

#: Defaults: Clip-Cov band (verl's clip_cov_lb, clip_cov_ub) and the KL-Cov ratio k.
CLIP_COV_BAND = (1.0, 5.0)
KL_COV_RATIO = 0.002
#: Records per batch read (``dynamics.batch_records`` default; also the correctness pass's).
BATCH_RECORDS = 65_536

#: Columns of the KL-Cov top-token table (per step and estimator, rank 1 = largest cov).
TOP_TOKEN_COLUMNS = [
    "rank",
    "prompt_index",
    "sample_index",
    "position",
    "token_text",
    "word",
    "category",
    "is_high_entropy",
    "entropy",
    "logprob",
    "advantage",
    "cov",
]
_PASS1_COLUMNS = ["prompt_index", "sample_index", "is_special", "logprob"]
_PASS2_COLUMNS = [
    "prompt_index",
    "sample_index",
    "position",
    "is_special",
    "logprob",
    "entropy",
    "is_high_entropy",
    "category",
    "word",
    "token_text",
]


@dataclass(frozen=True)
class CovarianceSettings:
    """What :func:`step_covariance` computes (``params:dynamics``).

    Attributes:
        kl_cov_ratio: k of KL-Cov: the top ``max(1, int(k·N))`` tokens by cov (0 < k ≤ 1).
        clip_cov_band: (lo, hi) of the Clip-Cov band lo < cov < hi.
        batch_records: token records per batch read (memory ≈ 100 bytes × this × 2).
    """

    kl_cov_ratio: float = KL_COV_RATIO
    clip_cov_band: tuple[float, float] = CLIP_COV_BAND
    batch_records: int = BATCH_RECORDS


def kl_cov_count(n_tokens: int, ratio: float) -> int:
    """Number of KL-Cov tokens: ``max(1, int(n_tokens · ratio))`` (verl), 0 without tokens."""
    return max(1, int(n_tokens * ratio)) if n_tokens > 0 else 0


@dataclass
class _Top:
    """The running ``k`` largest cov values, ties broken by (prompt_index, sample_index,
    position) ascending, with every field of :data:`TOP_TOKEN_COLUMNS`."""

    k: int
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def offer(
        self,
        cov: np.ndarray,
        keys: dict[str, np.ndarray],
        fetch: Callable[[np.ndarray], dict[str, np.ndarray]],
    ) -> None:
        """Merge a batch's tokens into the top list.

        Args:
            cov: (m,) cov of the batch's tokens.
            keys: prompt_index, sample_index, position (m,) of the same tokens.
            fetch: the other fields of the tokens at the given (j,) indices into ``cov``;
                called once, for the tokens that enter the list only.
        """
        if self.k == 0 or cov.size == 0:
            return
        candidate = np.arange(cov.size)
        if cov.size > self.k:  # keep every value ≥ the batch's k-th largest (ties included)
            kth = np.partition(cov, cov.size - self.k)[cov.size - self.k]
            candidate = np.flatnonzero(cov >= kth)
        old = self.columns.get("cov", np.empty(0))
        n_old = old.size
        merged = {"cov": np.concatenate([old, cov[candidate]])}
        for name, values in keys.items():
            merged[name] = np.concatenate(
                [self.columns.get(name, np.empty(0, np.int64)), values[candidate]]
            )
        order = np.lexsort(
            (merged["position"], merged["sample_index"], merged["prompt_index"], -merged["cov"])
        )[: self.k]
        entering = order >= n_old
        fetched = fetch(candidate[order[entering] - n_old])
        columns = {name: values[order] for name, values in merged.items()}
        for name, fresh in fetched.items():
            previous = self.columns.get(name)
            column = np.empty(order.size, dtype=fresh.dtype)
            if previous is not None:
                column[~entering] = previous[order[~entering]]
            column[entering] = fresh
            columns[name] = column
        self.columns = columns


@dataclass
class _Sums:
    """Running float64 sums of cov and token counts over the subsets the table reports."""

    categories: tuple[str, ...]
    total: float = 0.0
    band: int = 0
    high: float = 0.0
    n_high: int = 0
    by_category: np.ndarray = field(init=False)
    n_category: np.ndarray = field(init=False)
    high_by_category: np.ndarray = field(init=False)
    n_high_category: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.categories)
        self.by_category, self.high_by_category = np.zeros(n), np.zeros(n)
        self.n_category = np.zeros(n, dtype=np.int64)
        self.n_high_category = np.zeros(n, dtype=np.int64)

    def add(self, cov: np.ndarray, high: np.ndarray, code: np.ndarray, band: tuple) -> None:
        n = len(self.categories)
        self.total += float(cov.sum())
        self.band += int(((cov > band[0]) & (cov < band[1])).sum())
        self.high += float(cov[high].sum())
        self.n_high += int(high.sum())
        self.by_category += np.bincount(code, weights=cov, minlength=n)
        self.n_category += np.bincount(code, minlength=n)
        self.high_by_category += np.bincount(code[high], weights=cov[high], minlength=n)
        self.n_high_category += np.bincount(code[high], minlength=n)


@dataclass(frozen=True)
class StepCovariance:
    """The result of :func:`step_covariance` for one estimator.

    Attributes:
        row: the ``advantage_covariance_by_step`` values (without run, step, estimator,
            skipped); keys documented in :func:`step_covariance`.
        top_tokens: the KL-Cov tokens, columns :data:`TOP_TOKEN_COLUMNS`.
    """

    row: dict[str, Any]
    top_tokens: pd.DataFrame


def _mean(total: float, n: int) -> float:
    return total / n if n else math.nan


def _batches(records: ds.Dataset, columns: list[str], size: int) -> Iterator[pa.RecordBatch]:
    missing = [c for c in columns if c not in records.schema.names]
    if missing:
        raise InputDataError(
            f"{_source(records)} lacks column(s) {', '.join(missing)}: it is not a merged "
            "token record file; rerun the aggregation of this step"
        )
    yield from row_group_batches(records, columns, size)


def _source(records: ds.Dataset) -> str:
    files = getattr(records, "files", None) or ["token records"]
    return str(files[0])


def _numpy(batch: pa.RecordBatch, name: str, dtype: Any) -> np.ndarray:
    column = batch.column(name)
    if column.null_count:
        raise InputDataError(f"token records: column {name} has nulls; rerun the aggregation")
    return column.to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def step_covariance(
    token_records: ds.Dataset,
    index: ResponseIndex,
    advantages: np.ndarray,
    categories: Sequence[str],
    settings: CovarianceSettings = CovarianceSettings(),
) -> list[StepCovariance]:
    """Cov(log π, A) statistics of one step, for one or more advantage estimators at once.

    Args:
        token_records: the step's merged records (``<run>.step_<step>.token_records``), a
            lazy dataset with prompt_index, sample_index, position, is_special, logprob,
            entropy, is_high_entropy, category, word, token_text.
        index: the step's responses (rows of ``advantages``).
        advantages: (n_responses, n_estimators) float64, A of each response per estimator;
            NaN for ungraded responses (their tokens are left out).
        categories: the lexicon's categories and ``other``; a record's category must be one.
        settings: the KL-Cov ratio, the Clip-Cov band and the batch size.

    Returns:
        One :class:`StepCovariance` per column of ``advantages``. ``row`` keys: n_tokens (N,
        non-special tokens of graded responses), mean_advantage (Ā, token mean),
        mean_logprob (nats, token mean), mean_cov, clip_cov_band_share, kl_cov_k (the number
        of KL-Cov tokens), kl_cov_min (the smallest cov among them), mean_cov_high_entropy,
        mean_cov_other (tokens not in the high-entropy set), and per category c
        ``mean_cov_category_<c>`` (all tokens of c) and ``mean_cov_high_entropy_<c>``
        (high-entropy tokens of c). Means over no token are NaN.

    Raises:
        InputDataError: a column is missing or has nulls, a record belongs to no response,
            or a category is not one of ``categories``.
    """
    categories = tuple(categories)
    advantages = np.asarray(advantages, dtype=np.float64).reshape(len(index), -1)
    n_est = advantages.shape[1]
    graded_response = ~np.isnan(advantages[:, 0])
    source, size = _source(token_records), settings.batch_records

    # pass 1: token means of A (per estimator) and of log π
    n, sum_lp, sum_a = 0, 0.0, np.zeros(n_est)
    for batch in _batches(token_records, _PASS1_COLUMNS, size):
        keep = ~_numpy(batch, "is_special", bool)
        rows = index.rows(
            _numpy(batch, "prompt_index", np.int64)[keep],
            _numpy(batch, "sample_index", np.int64)[keep],
            source,
        )
        graded = graded_response[rows]
        n += int(graded.sum())
        sum_lp += float(_numpy(batch, "logprob", np.float64)[keep][graded].sum())
        sum_a += advantages[rows[graded]].sum(axis=0)
    mean_a, mean_lp = sum_a / n if n else np.full(n_est, math.nan), _mean(sum_lp, n)

    # pass 2: the centred products
    k = kl_cov_count(n, settings.kl_cov_ratio)
    sums = [_Sums(categories) for _ in range(n_est)]
    tops = [_Top(k) for _ in range(n_est)]
    lookup = pa.array(categories, pa.string())
    for batch in _batches(token_records, _PASS2_COLUMNS, size):
        keep = ~_numpy(batch, "is_special", bool)
        prompt = _numpy(batch, "prompt_index", np.int64)[keep]
        sample = _numpy(batch, "sample_index", np.int64)[keep]
        rows = index.rows(prompt, sample, source)
        graded = graded_response[rows]
        take = np.flatnonzero(keep)[graded]
        rows = rows[graded]
        lp = _numpy(batch, "logprob", np.float64)[take]
        high = _numpy(batch, "is_high_entropy", bool)[take]
        code = _category_codes(batch.column("category").take(pa.array(take)), lookup, source)
        keys = {
            "prompt_index": prompt[graded],
            "sample_index": sample[graded],
            "position": _numpy(batch, "position", np.int64)[take],
        }
        for e in range(n_est):
            a = advantages[rows, e]
            cov = (a - mean_a[e]) * (lp - mean_lp)
            sums[e].add(cov, high, code, settings.clip_cov_band)
            tops[e].offer(cov, keys, partial(_token_fields, batch, take, a))
    return [
        StepCovariance(
            row=_row(n, mean_a[e], mean_lp, sums[e], top=tops[e], categories=categories),
            top_tokens=_top_frame(tops[e]),
        )
        for e in range(n_est)
    ]


def _token_fields(
    batch: pa.RecordBatch, take: np.ndarray, advantage: np.ndarray, chosen: np.ndarray
) -> dict[str, np.ndarray]:
    """The non-key fields of the tokens ``chosen`` (indices into ``take``) of ``batch``."""
    rows = pa.array(take[chosen], pa.int64())
    fields = {
        name: batch.column(name).take(rows).to_numpy(zero_copy_only=False)
        for name in ("token_text", "word", "category", "is_high_entropy", "entropy", "logprob")
    }
    return {**fields, "advantage": advantage[chosen]}


def _category_codes(values: pa.Array, lookup: pa.Array, source: str) -> np.ndarray:
    codes = pc.index_in(values, value_set=lookup)
    if codes.null_count:
        unknown = pc.filter(values, pc.is_null(codes))[0].as_py()
        raise InputDataError(
            f"{source}: category {unknown!r} is not one of the lexicon's "
            f"({', '.join(lookup.to_pylist())}): the records were aggregated with another "
            "lexicon; rerun the aggregation of this step"
        )
    return codes.to_numpy().astype(np.int64)


def _row(
    n: int, mean_a: float, mean_lp: float, sums: _Sums, *, top: _Top, categories: tuple[str, ...]
) -> dict[str, Any]:
    n_other = n - sums.n_high
    row = {
        "n_tokens": n,
        "mean_advantage": float(mean_a),
        "mean_logprob": float(mean_lp),
        "mean_cov": _mean(sums.total, n),
        "clip_cov_band_share": _mean(float(sums.band), n),
        "kl_cov_k": top.k,
        "kl_cov_min": float(top.columns["cov"].min()) if top.columns else math.nan,
        "mean_cov_high_entropy": _mean(sums.high, sums.n_high),
        "mean_cov_other": _mean(sums.total - sums.high, n_other),
    }
    for c, name in enumerate(categories):
        row[f"mean_cov_category_{name}"] = _mean(sums.by_category[c], int(sums.n_category[c]))
    for c, name in enumerate(categories):
        row[f"mean_cov_high_entropy_{name}"] = _mean(
            sums.high_by_category[c], int(sums.n_high_category[c])
        )
    return row


def _top_frame(top: _Top) -> pd.DataFrame:
    if not top.columns:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in TOP_TOKEN_COLUMNS})
    columns = top.columns
    frame = pd.DataFrame(
        {
            "rank": np.arange(1, columns["cov"].size + 1, dtype=np.int64),
            **{c: columns[c] for c in TOP_TOKEN_COLUMNS if c in columns},
        }
    )
    return frame.astype(
        {
            "prompt_index": "int64",
            "sample_index": "int64",
            "position": "int64",
            "is_high_entropy": "bool",
            "entropy": "float64",
            "logprob": "float64",
        }
    )[TOP_TOKEN_COLUMNS]
