"""Where each advantage scheme puts the credit, per (run, step), from the step's own samples.

For every configured scheme of :mod:`hed.core.advantage_shaping` HED computes the per-token
advantage A_t a trainer would use on the step's graded samples (group = the samples of a
prompt, r = 1 if correct else 0, H = the decode-time entropy, τ_ρ = the step's top-ρ
threshold of ``entropy_thresholds``) and sums it over token subsets:

* subsets: ``all``; ``high_entropy`` (``is_high_entropy``) and ``other`` (the rest); each
  lexicon category c but ``other`` (``anthropomorphic``, ``reasoning``); ``high_entropy_<c>``;
* responses: ``all``, ``correct``, ``incorrect``.

Per (scheme, subset, response), over the step's non-special tokens of graded responses:

* n_tokens;
* credit_share = Σ_S |A_t| / Σ_step |A_t| (NaN when every A_t of the step is 0);
* mean_advantage = Σ_S A_t / n_S;
* cov_logp_advantage = Σ_S (A_t − Ā)(log π_t − mean log π) / n_S, Ā and mean log π the step's
  token means under the scheme, as :mod:`hed.analysis.covariance` computes Cov(log π, A)
  (Cui et al., arXiv 2505.22617): the quantity whose sign predicts the entropy change.

Memory does not grow with the step: the merged records (sorted by prompt, sample, position)
are read once in batches and cut at prompt boundaries, so each batch holds whole groups (the
advantages of GTPO and GRPO-S need a group's every token); the state is a few sums per cell of
(high-entropy, category, correct) per scheme and one row per response.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pydantic import Field, field_validator

from hed.analysis.covariance import BATCH_RECORDS
from hed.config.model import Bool, PositiveInt
from hed.core.advantage_shaping import (
    SCHEMES,
    SchemeParams,
    flat_token_advantages,
)
from hed.core.lexicon import OTHER
from hed.errors import InputDataError
from hed.records.arrow_stream import row_group_batches
from hed.records.response_index import ResponseIndex, response_keys

#: The columns of ``advantage_shaping_by_step`` (docs/datasets.md), in order.
SHAPING_COLUMNS = [
    "run",
    "step",
    "scheme",
    "subset",
    "response",
    "n_tokens",
    "credit_share",
    "mean_advantage",
    "cov_logp_advantage",
]
#: Response groups of the table, in order.
RESPONSES = ("all", "correct", "incorrect")
_READ = [
    "prompt_index",
    "sample_index",
    "position",
    "is_special",
    "entropy",
    "logprob",
    "is_high_entropy",
    "category",
]
_SUMS = 5  # n, Σ|A|, ΣA, Σ log π, Σ A·log π


class AdvantageShapingParams(SchemeParams):
    """``analyses.advantage_shaping``: the schemes compared and their constants."""

    section: ClassVar[str] = "analyses.advantage_shaping"

    enabled: Bool = True
    """False: the analyses pipeline leaves the table and its figure out."""

    schemes: Annotated[
        tuple[Literal[SCHEMES], ...],  # type: ignore[valid-type]
        Field(min_length=1, json_schema_extra={"uniqueItems": True}),
    ] = SCHEMES
    """Schemes tabulated, names from ``grpo, dr_grpo, top_rho_mask, entropy_advantage, gtpo,
    grpo_s``; distinct, at least one."""
    batch_records: PositiveInt = BATCH_RECORDS
    """Token records per batch read (a batch grows to the end of its last prompt)."""

    @field_validator("schemes")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or len(set(value)) != len(value):
            raise ValueError("a list of at least one scheme, each once")
        return value

    @property
    def scheme_params(self) -> SchemeParams:
        """The constants of the schemes alone."""
        return SchemeParams(**{k: getattr(self, k) for k in SchemeParams.model_fields})


def advantage_shaping_params(analyses: Any) -> AdvantageShapingParams:
    """``analyses.advantage_shaping`` of ``params:analyses`` (a parsed section with an
    ``advantage_shaping`` attribute, a mapping, or ``None``: every default).

    Raises:
        ConfigError: an unknown key or a bad value, in one line naming
            ``analyses.advantage_shaping.<key>``.
    """
    value = getattr(analyses, "advantage_shaping", None)
    if value is None and isinstance(analyses, dict):
        value = analyses.get("advantage_shaping")
    return AdvantageShapingParams.of(value)


def subsets(categories: Sequence[str]) -> list[str]:
    """The subset names of the table for a lexicon's ``categories`` (``other`` skipped)."""
    named = [c for c in categories if c != OTHER]
    return ["all", "high_entropy", "other", *named, *(f"high_entropy_{c}" for c in named)]


def step_advantage_shaping(
    token_records: ds.Dataset,
    sequences: pd.DataFrame,
    threshold: float,
    categories: Sequence[str],
    params: AdvantageShapingParams,
) -> pd.DataFrame:
    """``advantage_shaping_by_step`` rows of one step (without run and step).

    Args:
        token_records: the step's merged records, sorted by (prompt_index, sample_index,
            position): prompt_index, sample_index, position, is_special, entropy, logprob,
            is_high_entropy, category.
        sequences: the step's responses: prompt_index, sample_index, correct (nullable bool;
            ungraded responses and their tokens are left out).
        threshold: τ_ρ of the step (``entropy_thresholds.threshold``, nats).
        categories: the lexicon's categories then ``other``.
        params: the schemes and their constants.

    Returns:
        scheme, subset, response, n_tokens, credit_share, mean_advantage, cov_logp_advantage;
        one row per scheme × :func:`subsets` × :data:`RESPONSES`; no row without a graded
        token.

    Raises:
        InputDataError: a column is missing or has nulls, the records are not sorted by
            prompt, a record belongs to no response, or a category is not the lexicon's.
    """
    categories = tuple(categories)
    schemes, constants = params.schemes, params.scheme_params
    prompt, reward = _responses(sequences)
    index = ResponseIndex(
        sequences["prompt_index"].to_numpy(), sequences["sample_index"].to_numpy(), "sequences"
    )
    n_cells = 2 * len(categories) * 2
    sums = np.zeros((len(schemes), n_cells, _SUMS))
    lookup = pa.array(categories, pa.string())
    for chunk in _whole_groups(token_records, params.batch_records):
        rows = index.rows(chunk["prompt_index"], chunk["sample_index"], _source(token_records))
        graded = ~np.isnan(reward[rows])
        if not graded.any():
            continue
        rows = rows[graded]
        local, row = np.unique(rows, return_inverse=True)
        groups = prompt[local]
        # every graded response of these prompts (one without tokens too)
        members = np.flatnonzero(np.isin(prompt, groups) & ~np.isnan(reward))
        row = np.searchsorted(members, local)[row]
        t = _ranks(row)
        h = chunk["entropy"][graded]
        lp = chunk["logprob"][graded]
        code = _codes(chunk["category"].filter(pa.array(graded)), lookup, token_records)
        correct = reward[rows] == 1.0
        cell = (chunk["is_high_entropy"][graded].astype(np.int64) * len(categories) + code) * 2
        cell = cell + correct
        for s, scheme in enumerate(schemes):
            a = flat_token_advantages(
                h, row, t, reward[members], prompt[members],
                scheme=scheme, params=constants, tau=threshold,
            )  # fmt: skip
            for k, weights in enumerate((None, np.abs(a), a, lp, a * lp)):
                sums[s, :, k] += np.bincount(cell, weights=weights, minlength=n_cells)
    if sums[0, :, 0].sum() == 0:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in SHAPING_COLUMNS[2:]})
    return _rows(sums, schemes, categories)


def _responses(sequences: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    missing = [c for c in ("prompt_index", "sample_index", "correct") if c not in sequences]
    if missing:
        raise InputDataError(
            f"sequences lack column(s) {', '.join(missing)}: rerun the aggregation of the step"
        )
    correct = sequences["correct"]
    reward = np.where(correct.isna(), np.nan, correct.fillna(False).astype(bool).astype(float))
    return sequences["prompt_index"].to_numpy(np.int64), reward.astype(np.float64)


def _source(records: ds.Dataset) -> str:
    return str((getattr(records, "files", None) or ["token records"])[0])


def _whole_groups(records: ds.Dataset, size: int) -> Iterator[dict[str, Any]]:
    """Batches of non-special records, each ending at a prompt boundary (whole groups)."""
    missing = [c for c in _READ if c not in records.schema.names]
    if missing:
        raise InputDataError(
            f"{_source(records)} lacks column(s) {', '.join(missing)}: it is not a merged "
            "token record file; rerun the aggregation of this step"
        )
    carry: pa.Table | None = None
    last_key = np.int64(-1)
    last_position = np.int64(-1)
    for batch in row_group_batches(records, _READ, size):
        table = pa.Table.from_batches([batch])
        if any(table.column(c).null_count for c in _READ):
            raise InputDataError(f"{_source(records)}: a column has nulls; rerun the aggregation")
        key = response_keys(
            table.column("prompt_index").to_numpy(), table.column("sample_index").to_numpy()
        )
        position = table.column("position").to_numpy().astype(np.int64)
        _check_sorted(key, position, last_key, last_position, records)
        last_key, last_position = key[-1], position[-1]
        table = table if carry is None else pa.concat_tables([carry, table])
        prompt = table.column("prompt_index").to_numpy()
        cut = int(np.searchsorted(prompt, prompt[-1]))  # the last prompt may go on
        if cut:
            yield _arrays(table.slice(0, cut))
        carry = table.slice(cut)
    if carry is not None and carry.num_rows:
        yield _arrays(carry)


def _check_sorted(
    key: np.ndarray, position: np.ndarray, last_key: Any, last_position: Any, records: Any
) -> None:
    key = np.concatenate([[last_key], key])
    position = np.concatenate([[last_position], position])
    step = np.diff(key)
    if (step < 0).any() or ((step == 0) & (np.diff(position) <= 0)).any():
        raise InputDataError(
            f"{_source(records)}: records are not sorted by (prompt_index, sample_index, "
            "position): it is not a merged token record file; rerun the aggregation"
        )


def _arrays(table: pa.Table) -> dict[str, Any]:
    keep = pc.invert(table.column("is_special"))
    table = table.filter(keep)
    out: dict[str, Any] = {"category": table.column("category")}
    for name, dtype in (
        ("prompt_index", np.int64),
        ("sample_index", np.int64),
        ("entropy", np.float64),
        ("logprob", np.float64),
        ("is_high_entropy", bool),
    ):
        out[name] = table.column(name).to_numpy().astype(dtype, copy=False)
    return out


def _ranks(row: np.ndarray) -> np.ndarray:
    """t of each token: its index within its response's run of consecutive records."""
    n = row.size
    start = np.r_[True, row[1:] != row[:-1]] if n else np.zeros(0, bool)
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    return np.arange(n) - first


def _codes(values: pa.ChunkedArray, lookup: pa.Array, records: ds.Dataset) -> np.ndarray:
    codes = pc.index_in(values, value_set=lookup)
    if codes.null_count:
        unknown = pc.filter(values, pc.is_null(codes))[0].as_py()
        raise InputDataError(
            f"{_source(records)}: category {unknown!r} is not one of the lexicon's "
            f"({', '.join(lookup.to_pylist())}): rerun the aggregation of this step"
        )
    return codes.to_numpy().astype(np.int64)


def _rows(sums: np.ndarray, schemes: Sequence[str], categories: tuple[str, ...]) -> pd.DataFrame:
    """The table's rows from the per-cell sums (scheme, cell, sum)."""
    n_cat = len(categories)
    high = np.repeat([False, True], n_cat * 2)
    code = np.tile(np.repeat(np.arange(n_cat), 2), 2)
    correct = np.tile([False, True], 2 * n_cat)
    named = [(c, categories.index(c)) for c in categories if c != OTHER]
    masks = {"all": np.ones(high.size, bool), "high_entropy": high, "other": ~high}
    masks.update({c: code == i for c, i in named})
    masks.update({f"high_entropy_{c}": high & (code == i) for c, i in named})
    responses = {"all": np.ones(high.size, bool), "correct": correct, "incorrect": ~correct}
    rows = []
    for s, scheme in enumerate(schemes):
        total = sums[s].sum(axis=0)
        n_all = total[0]
        mean_a, mean_lp = total[2] / n_all, total[3] / n_all
        for subset in subsets(categories):
            for response, chosen in responses.items():
                n, abs_a, sum_a, sum_lp, sum_alp = sums[s][masks[subset] & chosen].sum(axis=0)
                cov = sum_alp - mean_lp * sum_a - mean_a * sum_lp + n * mean_a * mean_lp
                rows.append(
                    {
                        "scheme": scheme,
                        "subset": subset,
                        "response": response,
                        "n_tokens": int(n),
                        "credit_share": abs_a / total[1] if total[1] > 0 else math.nan,
                        "mean_advantage": sum_a / n if n else math.nan,
                        "cov_logp_advantage": cov / n if n else math.nan,
                    }
                )
    return pd.DataFrame(rows)
