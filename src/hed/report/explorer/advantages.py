"""Per-token advantages of the explorer's embedded responses under each advantage scheme.

The page's tooltip shows, for a hovered token, the advantage every scheme of
``analyses.advantage_shaping`` (:mod:`hed.analysis.advantage_shaping`) would give it. The
values are computed here, at build time, by
:func:`hed.core.advantage_shaping.group_token_advantages` (the formulas live there only; the
page does no arithmetic): GTPO and GRPO-S need every
token of a prompt's group, so each embedded response's whole group is read from the step's
merged records (its prompt's graded responses, non-special tokens, t = rank among them), as
the ``advantage_shaping_by_step`` table does; τ_ρ of ``top_rho_mask`` is the step's
threshold (``entropy_thresholds``).

Embedding (compact): per embedded graded response ``A``, one entry per scheme of the index's
``shaping.schemes``: one number when the scheme gives every token of the response the same
value (``grpo``, ``dr_grpo``, ``grpo_s``; any scheme on an all-equal group), else one number
per embedded token (``null`` on special tokens), all rounded to :data:`DIGITS` significant
digits. Ungraded responses get no ``A``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from hed.analysis.advantage_shaping import AdvantageShapingParams
from hed.core.advantage_shaping import group_token_advantages
from hed.report.token_report import payload as trp

#: Significant digits of the embedded advantages.
DIGITS = 3
#: The tooltip's name of each scheme.
LABELS = {
    "grpo": "grpo",
    "dr_grpo": "Dr. GRPO",
    "top_rho_mask": "80/20",
    "entropy_advantage": "entropy-adv",
    "gtpo": "GTPO",
    "grpo_s": "GRPO-S",
}
_READ = ["prompt_index", "sample_index", "position", "is_special", "entropy"]


def index_entry(shaping: AdvantageShapingParams | None) -> dict[str, Any] | None:
    """The index's ``shaping``: ``{"schemes": [...], "labels": [...]}``, None when off."""
    if shaping is None or not shaping.enabled:
        return None
    return {"schemes": list(shaping.schemes), "labels": [LABELS[s] for s in shaping.schemes]}


def group_advantages(
    records: ds.Dataset | pa.Table,
    sequences: pd.DataFrame,
    keys: Sequence[tuple[int, int]],
    threshold: float | None,
    shaping: AdvantageShapingParams,
) -> dict[tuple[int, int], list[np.ndarray]]:
    """Per graded response of ``keys``, its advantage under each scheme, on every token.

    Reads only the records of the keys' prompts (a pyarrow filter), non-special tokens.

    Args:
        records: the step's merged records (prompt_index, sample_index, position, is_special,
            entropy in nats).
        sequences: the step's responses (prompt_index, sample_index, correct: nullable bool;
            a prompt's group = its graded responses, reward 1 if correct else 0).
        keys: (prompt_index, sample_index) of the embedded responses.
        threshold: τ_ρ of the step (nats), for ``top_rho_mask``; None: no τ, NaN advantages
            for that scheme (the page shows "–").
        shaping: ``analyses.advantage_shaping`` (schemes and constants).

    Returns:
        ``{key: [per scheme, (L,) float64 advantages over the response's L non-special tokens
        in position order]}`` for each graded key; ungraded keys are absent.
    """
    seqs = sequences[["prompt_index", "sample_index", "correct"]].astype({"correct": "boolean"})
    seqs = seqs[seqs["correct"].notna()].astype({"prompt_index": "int64", "sample_index": "int64"})
    prompts = sorted({int(p) for p, s in keys} & set(seqs["prompt_index"].tolist()))
    if not prompts:
        return {}
    data = records if isinstance(records, ds.Dataset) else ds.dataset(records)
    table = data.to_table(columns=_READ, filter=pc.field("prompt_index").isin(prompts))
    table = table.filter(pc.invert(pc.fill_null(table["is_special"], False)))
    table = table.sort_by([("prompt_index", "ascending"), ("sample_index", "ascending"),
                           ("position", "ascending")])  # fmt: skip
    entropy = np.asarray(table["entropy"], dtype=np.float64)
    pair = np.stack([np.asarray(table[c], dtype=np.int64) for c in _READ[:2]])
    starts = np.flatnonzero(np.r_[True, (pair[:, 1:] != pair[:, :-1]).any(axis=0)])
    stops = np.r_[starts[1:], pair.shape[1]]
    bounds = {
        (int(pair[0, a]), int(pair[1, a])): (a, b)
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True)
        if a < b
    }
    wanted = {(int(p), int(s)) for p, s in keys}
    constants = shaping.scheme_params
    out: dict[tuple[int, int], list[np.ndarray]] = {}
    for prompt, group in seqs[seqs["prompt_index"].isin(prompts)].groupby("prompt_index"):
        members = [(int(prompt), int(s)) for s in group["sample_index"]]
        entropies = [entropy[slice(*bounds.get(k, (0, 0)))] for k in members]
        rewards = group["correct"].astype(float).to_numpy()
        per_scheme = [
            _scheme(entropies, rewards, scheme, constants, threshold) for scheme in shaping.schemes
        ]
        for j, key in enumerate(members):
            if key in wanted:
                out[key] = [values[j] for values in per_scheme]
    return out


def _scheme(
    entropies: list[np.ndarray], rewards: np.ndarray, scheme: str, constants: Any, tau: Any
) -> list[np.ndarray]:
    if scheme == "top_rho_mask" and (tau is None or not np.isfinite(tau)):
        return [np.full(len(e), np.nan) for e in entropies]
    return group_token_advantages(entropies, rewards, scheme, constants, tau=tau)


def embedded(values: Sequence[np.ndarray], special: Sequence[Any]) -> list[Any]:
    """The page's ``A`` of one response: per scheme one number (constant over the response)
    or one number per embedded token (``None`` on special tokens and where NaN).

    Args:
        values: per scheme, the (L,) advantages of the response's non-special tokens.
        special: the embedded tokens' ``sp`` flags (a prefix of the response, in order).
    """
    rows = np.cumsum(~np.asarray(special, dtype=bool)) - 1  # non-special rank of each token
    out: list[Any] = []
    for a in values:
        if not np.isfinite(a).any():
            out.append(None)
            continue
        if np.isfinite(a).all() and (a == a[0]).all():
            out.append(trp.significant(a[:1], DIGITS)[0])
            continue
        shown = a[np.clip(rows, 0, max(a.size - 1, 0))] if a.size else np.full(rows.size, np.nan)
        keep = ~np.asarray(special, dtype=bool) & np.isfinite(shown) & (rows < a.size)
        rounded = trp.significant(np.where(keep, shown, 0.0), DIGITS)
        out.append([v if ok else None for v, ok in zip(rounded, keep.tolist(), strict=True)])
    return out


def attach(
    shown: list[dict[str, Any]],
    records: Any,
    sequences: pd.DataFrame,
    threshold: float | None,
    shaping: AdvantageShapingParams | None,
) -> None:
    """Set ``A`` (:func:`embedded`) on each graded response of ``shown`` (page responses with
    ``p``, ``s``, ``sp``); nothing when ``shaping`` is None or disabled."""
    if shaping is None or not shaping.enabled or not shown:
        return
    keys = [(r["p"], r["s"]) for r in shown]
    values: Mapping[tuple[int, int], list[np.ndarray]] = group_advantages(
        records, sequences, keys, threshold, shaping
    )
    for response in shown:
        key = (response["p"], response["s"])
        if key in values:
            response["A"] = embedded(values[key], response["sp"])
