"""Per-token advantages of a prompt's group under entropy-aware advantage schemes.

A group is the responses sampled for one prompt; response i has reward r_i = 1 if correct
else 0, tokens t = 0 … L_i − 1 and decode-time entropies H_{i,t} (nats). Every scheme gives
one float64 advantage per token (docs/advantage_shaping.md has the same formulas, with the
paper versions):

* ``grpo``, ``dr_grpo``: the outcome advantage A_i of :func:`hed.core.advantage.group_advantages`
  (the same function the dynamics tables use) on every token of the response.
* ``top_rho_mask`` (Wang et al., "Beyond the 80/20 Rule", arXiv 2506.01939v1):
  A_{i,t} = A_i · 1[H_{i,t} ≥ τ_ρ], τ_ρ the ⌈ρ·N⌉-th largest entropy of the batch's N tokens
  (ties at τ_ρ are kept: the indicator is ≥); A_i from ``base`` (the paper trains DAPO,
  whose advantage is GRPO's).
* ``entropy_advantage`` (Cheng et al., "Reasoning with Exploration: An Entropy Perspective",
  arXiv 2506.14758v1): A_{i,t} = A_i + min(α·H_{i,t}, |A_i|/κ), the entropy term
  detached (a constant here: numpy has no gradient); α > 0, κ > 1.
* ``gtpo`` (Tan et al., "GTPO and GRPO-S", arXiv 2508.04349v1, as HED reads its
  GTPO section): token rewards
  correct i:   r̃_{i,t} = α1 + α2 · H_{i,t} / Σ_{k∈O+} H_{k,t} · d_t,
  incorrect j: r̃_{j,t} = −α1 − α2 · (1/H_{j,t}) / Σ_{k∈O−} (1/H_{k,t}) · h_t,
  with d_t (h_t) the number of correct (incorrect) responses at least t + 1 tokens long (a
  shorter response takes no part in the sums), then the advantage of every token is its
  reward normalised over all token rewards of the group:
  A_{i,t} = (r̃_{i,t} − mean(R̃)) / (std(R̃) + ε).
* ``grpo_s`` (same paper and version): the same with each response's mean entropy Ĥ_i in place of
  H_{i,t} and n (m), the numbers of correct (incorrect) responses, in place of d_t (h_t);
  the sequence rewards are normalised over the group's responses and every token of a
  response carries its response's value.

Conventions (the papers do not say; HED's choice, stated once here):

* std is the unbiased (n − 1) standard deviation (``torch.std``'s default, as verl's GRPO),
  ε = 1e-6 (verl's);
* where every correct response at position t has H = 0, the weights H/ΣH are split evenly
  (1/d_t each); where some incorrect responses have H = 0, those share the inverse-entropy
  weight evenly (the limit of 1/(H + δ) as δ → 0) and the others get 0;
* ``gtpo`` and ``grpo_s`` give 0 to every token of a group whose rewards are all equal (one
  sample included): there is no outcome to shape (DAPO's dynamic sampling, which the paper
  trains with, drops such groups). ``grpo``-based schemes follow
  :func:`~hed.core.advantage.group_advantages` there (A = 0 for two or more equal rewards,
  r/(1 + ε) for one sample).

The functions take numpy arrays (no torch): a trainer converts its tensors with
``.detach().float().cpu().numpy()`` and back with ``torch.from_numpy``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hed.core.advantage import DEFAULT_EPSILON, group_advantages
from hed.core.thresholds import high_entropy_count
from hed.errors import ConfigError, InputDataError

#: The schemes, in table order.
SCHEMES = ("grpo", "dr_grpo", "top_rho_mask", "entropy_advantage", "gtpo", "grpo_s")
#: Cheng et al.'s α and κ (arXiv 2506.14758v1, their experiments).
ENTROPY_ALPHA = 0.4
ENTROPY_KAPPA = 2.0
#: Wang et al.'s ρ (arXiv 2506.01939v1: the top 20% highest-entropy tokens).
TOP_RHO = 0.2


class SchemeParams(BaseModel):
    """The constants of the schemes (every field has its paper's default)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    base: Literal["grpo", "dr_grpo"] = "grpo"
    """Outcome advantage A_i that ``top_rho_mask`` and ``entropy_advantage`` shape."""
    alpha: float = Field(ENTROPY_ALPHA, gt=0)
    """α of ``entropy_advantage``: the entropy term is min(α·H, |A|/κ); > 0."""
    kappa: float = Field(ENTROPY_KAPPA, gt=1)
    """κ of ``entropy_advantage``: the entropy term is at most |A|/κ; > 1."""
    gtpo_alpha1: float = Field(1.0, ge=0)
    """α1 of ``gtpo`` / ``grpo_s``: weight of the outcome reward (±1); ≥ 0."""
    gtpo_alpha2: float = Field(1.0, ge=0)
    """α2 of ``gtpo`` / ``grpo_s``: weight of the entropy-weighted reward; ≥ 0."""
    epsilon: float = Field(DEFAULT_EPSILON, gt=0)
    """ε of every denominator std + ε (verl's 1e-6); > 0."""


def validation_message(error: ValidationError, where: str) -> str:
    """One line naming the first bad key of a pydantic ``error`` as ``<where>.<key>``."""
    first = error.errors()[0]
    key = ".".join(str(part) for part in (where, *first["loc"]))
    if first["type"] == "extra_forbidden":
        return f"{key} is not a known key; remove it or fix its spelling"
    return f"{key} = {first.get('input')!r}: {first['msg']}"


def scheme_params(value: Mapping[str, Any] | SchemeParams | None, where: str) -> SchemeParams:
    """Parse the scheme constants of a parameter section.

    Args:
        value: a mapping of :class:`SchemeParams` fields (``None``: every default).
        where: the section's dotted name for messages (``analyses.advantage_shaping``).

    Raises:
        ConfigError: an unknown key or a value out of range (α ≤ 0, κ ≤ 1, ...), in one line
            naming ``<where>.<key>``.
    """
    if isinstance(value, SchemeParams):
        return value
    try:
        return SchemeParams.model_validate(dict(value or {}))
    except ValidationError as exc:
        raise ConfigError(validation_message(exc, where)) from None


def check_schemes(schemes: object, where: str) -> tuple[str, ...]:
    """Validate a list of scheme names.

    Raises:
        ConfigError: not a non-empty list of distinct names from :data:`SCHEMES`.
    """
    if isinstance(schemes, str):
        schemes = [schemes]
    if (
        not isinstance(schemes, list | tuple)
        or not schemes
        or any(s not in SCHEMES for s in schemes)
        or len(set(schemes)) != len(schemes)
    ):
        raise ConfigError(
            f"{where} must be a list of distinct names from {list(SCHEMES)}, got {schemes!r}"
        )
    return tuple(str(s) for s in schemes)


def top_rho_threshold(entropy: np.ndarray, rho: float, where: str = "rho") -> float:
    """τ_ρ: the ⌈ρ·N⌉-th largest of N entropies (HED's top-ρ definition, docs/aggregation.md).

    Args:
        entropy: (N,) entropies of the batch's response tokens, nats.
        rho: ρ in (0, 1].
        where: the parameter's key, for the message.

    Returns:
        τ_ρ (float); +inf for an empty batch (no token is above it).

    Raises:
        ConfigError: ρ outside (0, 1] (message names ``where``).
    """
    if isinstance(rho, bool) or not isinstance(rho, int | float) or not 0 < rho <= 1:
        raise ConfigError(f"{where} = {rho!r}: use a number in (0, 1], e.g. {TOP_RHO}")
    values = np.asarray(entropy, dtype=np.float64).ravel()
    if values.size == 0:
        return float("inf")
    n_high = high_entropy_count(values.size, rho)
    return float(np.partition(values, values.size - n_high)[values.size - n_high])


def token_advantages(
    entropy: np.ndarray,
    mask: np.ndarray,
    rewards: np.ndarray,
    scheme: str,
    params: SchemeParams | None = None,
    *,
    groups: np.ndarray | None = None,
    tau: float | None = None,
    rho: float = TOP_RHO,
) -> np.ndarray:
    """Per-token advantages of a batch of responses under one scheme (module docstring).

    Args:
        entropy: (B, T) entropies H_{i,t}, nats, padded (padding values are ignored).
        mask: (B, T) bool, True on the response tokens that count (a response's tokens must
            be its first True positions: t is the column index).
        rewards: (B,) rewards r_i; 0/1 for ``gtpo`` and ``grpo_s``.
        scheme: a name from :data:`SCHEMES`.
        params: the constants (default: every paper default).
        groups: (B,) group id of each response (the prompt); ``None``: one group.
        tau: τ_ρ of ``top_rho_mask``; ``None``: the batch's own (:func:`top_rho_threshold`
            of the masked entropies with ``rho``), as the paper computes it per batch.
        rho: ρ used when ``tau`` is ``None``.

    Returns:
        (B, T) float64 advantages, 0 where ``mask`` is False.

    Raises:
        ConfigError: an unknown scheme or ρ outside (0, 1].
        InputDataError: shapes disagree, an entropy under the mask is negative or not finite,
            a reward is not finite, or ``gtpo``/``grpo_s`` get a reward other than 0 or 1.
    """
    params = params or SchemeParams()
    if scheme not in SCHEMES:
        raise ConfigError(f"advantage scheme {scheme!r}: use one of {list(SCHEMES)}")
    h, valid, r, g = _checked(entropy, mask, rewards, groups)
    out = np.zeros(h.shape, dtype=np.float64)
    if r.size == 0:
        return out
    if scheme in ("grpo", "dr_grpo"):
        return np.where(valid, group_advantages(g, r, scheme, params.epsilon)[:, None], 0.0)
    if scheme in ("top_rho_mask", "entropy_advantage"):
        a = group_advantages(g, r, params.base, params.epsilon)[:, None]
        if scheme == "top_rho_mask":
            tau = top_rho_threshold(h[valid], rho) if tau is None else float(tau)
            return np.where(valid & (h >= tau), a, 0.0)
        bonus = np.minimum(params.alpha * h, np.abs(a) / params.kappa)
        return np.where(valid, a + bonus, 0.0)
    if not np.isin(r, (0.0, 1.0)).all():
        raise InputDataError(f"{scheme}: rewards must be 0 (incorrect) or 1 (correct)")
    shape = _gtpo if scheme == "gtpo" else _grpo_s
    for group in np.unique(g):
        rows = np.flatnonzero(g == group)
        if r[rows].min() == r[rows].max():
            continue  # all-equal (or one sample): no outcome to shape
        out[rows] = shape(h[rows], valid[rows], r[rows] == 1.0, params)
    return out


def group_token_advantages(
    entropies: Sequence[np.ndarray],
    rewards: np.ndarray,
    scheme: str,
    params: SchemeParams | None = None,
    *,
    tau: float | None = None,
    rho: float = TOP_RHO,
) -> list[np.ndarray]:
    """:func:`token_advantages` of one group given as ragged arrays.

    Args:
        entropies: per response, its (L_i,) token entropies in order (nats).
        rewards: (n,) rewards, one per response.
        scheme, params, tau, rho: as :func:`token_advantages`.

    Returns:
        Per response, its (L_i,) float64 advantages.
    """
    lengths = np.array([len(e) for e in entropies], dtype=np.int64)
    width = int(lengths.max()) if lengths.size else 0
    mask = np.arange(width)[None, :] < lengths[:, None]
    padded = np.zeros(mask.shape, dtype=np.float64)
    padded[mask] = np.concatenate([np.asarray(e, np.float64) for e in entropies] or [[]])
    out = token_advantages(padded, mask, rewards, scheme, params, tau=tau, rho=rho)
    return [out[i, :n] for i, n in enumerate(lengths)]


def _checked(
    entropy: np.ndarray, mask: np.ndarray, rewards: np.ndarray, groups: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    h = np.asarray(entropy, dtype=np.float64)
    valid = np.asarray(mask, dtype=bool)
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    g = np.zeros(r.size, np.int64) if groups is None else np.asarray(groups).reshape(-1)
    if h.ndim != 2 or valid.shape != h.shape or r.size != h.shape[0] or g.size != r.size:
        raise InputDataError(
            f"token advantages: entropy {h.shape}, mask {valid.shape}, rewards {r.shape} and "
            f"groups {g.shape} must be (B, T), (B, T), (B,), (B,)"
        )
    if not np.isfinite(r).all():
        raise InputDataError("token advantages: a reward is NaN or infinite")
    live = h[valid]
    if not np.isfinite(live).all() or (live < 0).any():
        raise InputDataError("token advantages: an entropy is negative, NaN or infinite")
    return np.where(valid, h, 0.0), valid, r, g


def _normalised(rewards: np.ndarray, valid: np.ndarray, epsilon: float) -> np.ndarray:
    """(r − mean)/(std + ε) over the ``valid`` entries (unbiased std; 0 for one entry)."""
    values = rewards[valid]
    std = values.std(ddof=1) if values.size > 1 else 0.0
    return np.where(valid, (rewards - values.mean()) / (std + epsilon), 0.0)


def _entropy_weights(h: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per column, H / Σ H over ``rows`` (even split where Σ H = 0), 0 off ``rows``."""
    mass = np.where(rows, h, 0.0)
    total = mass.sum(axis=0)
    even = rows / np.maximum(rows.sum(axis=0), 1)
    return np.where(total > 0, mass / np.where(total > 0, total, 1.0), even)


def _inverse_weights(h: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per column, (1/H) / Σ (1/H) over ``rows``; entries with H = 0 share it evenly."""
    zero = rows & (h == 0)
    n_zero = zero.sum(axis=0)
    inverse = np.where(rows & (h > 0), 1.0 / np.where(h > 0, h, 1.0), 0.0)
    total = inverse.sum(axis=0)
    spread = inverse / np.where(total > 0, total, 1.0)
    return np.where(n_zero > 0, zero / np.maximum(n_zero, 1), spread)


def _gtpo(h: np.ndarray, valid: np.ndarray, correct: np.ndarray, p: SchemeParams) -> np.ndarray:
    """GTPO advantages (n, T) of one group with both outcomes present."""
    good = valid & correct[:, None]
    bad = valid & ~correct[:, None]
    d_t, h_t = good.sum(axis=0), bad.sum(axis=0)  # responses reaching column t
    reward = np.where(
        good,
        p.gtpo_alpha1 + p.gtpo_alpha2 * _entropy_weights(h, good) * d_t,
        -p.gtpo_alpha1 - p.gtpo_alpha2 * _inverse_weights(h, bad) * h_t,
    )
    return _normalised(reward, valid, p.epsilon)


def _grpo_s(h: np.ndarray, valid: np.ndarray, correct: np.ndarray, p: SchemeParams) -> np.ndarray:
    """GRPO-S advantages (n, T) of one group with both outcomes present."""
    length = valid.sum(axis=1)
    # (n, 1): one "column" whose rows are the responses, so the weights sum over responses
    mean_h = np.where(length > 0, h.sum(axis=1) / np.maximum(length, 1), 0.0)[:, None]
    good, n, m = correct[:, None], int(correct.sum()), int((~correct).sum())
    reward = np.where(
        correct,
        p.gtpo_alpha1 + p.gtpo_alpha2 * _entropy_weights(mean_h, good)[:, 0] * n,
        -p.gtpo_alpha1 - p.gtpo_alpha2 * _inverse_weights(mean_h, ~good)[:, 0] * m,
    )
    every = np.ones(reward.shape, dtype=bool)
    return np.where(valid, _normalised(reward, every, p.epsilon)[:, None], 0.0)
