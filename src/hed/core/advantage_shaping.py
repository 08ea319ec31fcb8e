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

The functions take numpy arrays (no torch): :func:`flat_token_advantages` (tokens given flat:
an analysis streaming records), :func:`token_advantages` (a padded (B, T) batch and its mask:
a trainer, which converts its tensors with ``.detach().double().cpu().numpy()`` and back with
``torch.from_numpy``) and :func:`group_token_advantages` (one group as ragged arrays).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from hed.config.model import Number, Section
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


class SchemeParams(Section):
    """The constants of the schemes (every field has its paper's default)."""

    base: Literal["grpo", "dr_grpo"] = "grpo"
    """Outcome advantage A_i that ``top_rho_mask`` and ``entropy_advantage`` shape."""
    alpha: Annotated[Number, Field(gt=0)] = ENTROPY_ALPHA
    """α of ``entropy_advantage``: the entropy term is min(α·H, |A|/κ); > 0."""
    kappa: Annotated[Number, Field(gt=1)] = ENTROPY_KAPPA
    """κ of ``entropy_advantage``: the entropy term is at most |A|/κ; > 1."""
    gtpo_alpha1: Annotated[Number, Field(ge=0)] = 1.0
    """α1 of ``gtpo`` / ``grpo_s``: weight of the outcome reward (±1); ≥ 0."""
    gtpo_alpha2: Annotated[Number, Field(ge=0)] = 1.0
    """α2 of ``gtpo`` / ``grpo_s``: weight of the entropy-weighted reward; ≥ 0."""
    epsilon: Annotated[Number, Field(gt=0)] = DEFAULT_EPSILON
    """ε of every denominator std + ε (verl's 1e-6); > 0."""


def scheme_params(value: Mapping[str, Any] | SchemeParams | None, where: str) -> SchemeParams:
    """Parse the scheme constants of a parameter section (:meth:`SchemeParams.of`).

    Args:
        value: a mapping of :class:`SchemeParams` fields (``None``: every default).
        where: the section's dotted name for messages (``mini_rl.runs.<run>.advantage_shaping``).

    Raises:
        ConfigError: an unknown key or a value out of range (α ≤ 0, κ ≤ 1, ...), in one line
            naming ``<where>.<key>`` (:mod:`hed.config.messages`).
    """
    return SchemeParams.of(value, section=where)


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


def flat_token_advantages(
    entropy: np.ndarray,
    response: np.ndarray,
    position: np.ndarray,
    rewards: np.ndarray,
    groups: np.ndarray,
    *,
    scheme: str,
    params: SchemeParams | None = None,
    tau: float | None = None,
    rho: float = TOP_RHO,
) -> np.ndarray:
    """Per-token advantages of a batch of responses under one scheme (module docstring).

    The tokens are given flat, in any order; memory is a few arrays of the batch's size.

    Args:
        entropy: (N,) entropy H_{i,t} of each token, nats.
        response: (N,) row i of each token's response in ``rewards`` / ``groups``.
        position: (N,) t of each token: its index among its response's counted tokens
            (0, 1, ... L_i − 1; ``gtpo`` compares responses at equal t).
        rewards: (n,) reward r_i of each response; 0/1 for ``gtpo`` and ``grpo_s``.
        groups: (n,) group id of each response (its prompt).
        scheme: a name from :data:`SCHEMES`.
        params: the constants (default: every paper default).
        tau: τ_ρ of ``top_rho_mask``; ``None``: the batch's own (:func:`top_rho_threshold`
            of ``entropy`` with ``rho``), as the paper computes it per training batch.
        rho: ρ used when ``tau`` is ``None``.

    Returns:
        (N,) float64 advantages.

    Raises:
        ConfigError: an unknown scheme or ρ outside (0, 1].
        InputDataError: lengths disagree, an entropy is negative or not finite, a reward is
            not finite, or ``gtpo``/``grpo_s`` get a reward other than 0 or 1.
    """
    params = params or SchemeParams()
    if scheme not in SCHEMES:
        raise ConfigError(f"advantage scheme {scheme!r}: use one of {list(SCHEMES)}")
    h, row, t, r, g = _checked(entropy, response, position, rewards, groups)
    if h.size == 0:
        return h.copy()
    if scheme in ("grpo", "dr_grpo"):
        return group_advantages(g, r, scheme, params.epsilon)[row]
    if scheme in ("top_rho_mask", "entropy_advantage"):
        a = group_advantages(g, r, params.base, params.epsilon)[row]
        if scheme == "top_rho_mask":
            tau = top_rho_threshold(h, rho) if tau is None else float(tau)
            return np.where(h >= tau, a, 0.0)
        return a + np.minimum(params.alpha * h, np.abs(a) / params.kappa)
    if not np.isin(r, (0.0, 1.0)).all():
        raise InputDataError(f"{scheme}: rewards must be 0 (incorrect) or 1 (correct)")
    _, group = np.unique(g, return_inverse=True)  # (n,) dense group index
    size = np.bincount(group)
    n_correct = np.bincount(group, weights=r)
    mixed = (n_correct > 0) & (n_correct < size)  # all-equal groups (one sample too) get 0
    if scheme == "gtpo":
        out = _gtpo(h, t, group[row], r[row] == 1.0, params)
    else:
        out = _grpo_s(h, row, group, r == 1.0, params)
    return np.where(mixed[group[row]], out, 0.0)


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
    """:func:`flat_token_advantages` of a padded batch (a trainer's layout).

    Args:
        entropy: (B, T) entropies H_{i,t}, nats, padded (padding values are ignored).
        mask: (B, T) bool, True on the response tokens that count; t of a token is the
            number of True entries before it in its row.
        rewards: (B,) rewards r_i; 0/1 for ``gtpo`` and ``grpo_s``.
        scheme, params, tau, rho: as :func:`flat_token_advantages`.
        groups: (B,) group id of each response (the prompt); ``None``: one group.

    Returns:
        (B, T) float64 advantages, 0 where ``mask`` is False.

    Raises:
        ConfigError, InputDataError: as :func:`flat_token_advantages`; also shapes that
            disagree.
    """
    h = np.asarray(entropy, dtype=np.float64)
    valid = np.asarray(mask, dtype=bool)
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    g = np.zeros(r.size, np.int64) if groups is None else np.asarray(groups).reshape(-1)
    if h.ndim != 2 or valid.shape != h.shape or r.size != h.shape[0] or g.size != r.size:
        raise InputDataError(
            f"token advantages: entropy {h.shape}, mask {valid.shape}, rewards {r.shape} and "
            f"groups {g.shape} must be (B, T), (B, T), (B,), (B,)"
        )
    rows, _ = np.nonzero(valid)
    position = (np.cumsum(valid, axis=1) - 1)[valid]
    out = np.zeros(h.shape, dtype=np.float64)
    out[valid] = flat_token_advantages(
        h[valid], rows, position, r, g, scheme=scheme, params=params, tau=tau, rho=rho
    )
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
    """:func:`flat_token_advantages` of one group given as ragged arrays (an analysis' layout).

    Args:
        entropies: per response, its (L_i,) token entropies in order (nats).
        rewards: (n,) rewards, one per response.
        scheme, params, tau, rho: as :func:`flat_token_advantages`.

    Returns:
        Per response, its (L_i,) float64 advantages.
    """
    lengths = np.array([len(e) for e in entropies], dtype=np.int64)
    rows = np.repeat(np.arange(lengths.size), lengths)
    position = np.arange(rows.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    flat = np.concatenate([np.asarray(e, np.float64) for e in entropies] or [np.empty(0)])
    rewards = np.asarray(rewards, dtype=np.float64)
    groups = np.zeros(rewards.size, np.int64)
    out = flat_token_advantages(
        flat, rows, position, rewards, groups, scheme=scheme, params=params, tau=tau, rho=rho
    )
    return np.split(out, np.cumsum(lengths)[:-1])


def _checked(
    entropy: np.ndarray,
    response: np.ndarray,
    position: np.ndarray,
    rewards: np.ndarray,
    groups: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    h = np.asarray(entropy, dtype=np.float64).reshape(-1)
    row = np.asarray(response, dtype=np.int64).reshape(-1)
    t = np.asarray(position, dtype=np.int64).reshape(-1)
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    g = np.asarray(groups).reshape(-1)
    if row.size != h.size or t.size != h.size or g.size != r.size:
        raise InputDataError(
            f"token advantages: {h.size} entropies, {row.size} response rows, {t.size} "
            f"positions; {r.size} rewards, {g.size} groups: give one of each per token / response"
        )
    if row.size and (row.min() < 0 or row.max() >= r.size):
        raise InputDataError(f"token advantages: a response row is outside 0…{r.size - 1}")
    if not np.isfinite(r).all():
        raise InputDataError("token advantages: a reward is NaN or infinite")
    if not np.isfinite(h).all() or (h < 0).any():
        raise InputDataError("token advantages: an entropy is negative, NaN or infinite")
    return h, row, t, r, g


def _normalised(values: np.ndarray, group: np.ndarray, epsilon: float) -> np.ndarray:
    """(x − mean_g)/(std_g + ε) within each group (unbiased std; 0 for one value)."""
    size = np.bincount(group)
    mean = np.bincount(group, weights=values) / np.maximum(size, 1)
    centred = values - mean[group]
    square = np.bincount(group, weights=centred * centred, minlength=size.size)
    std = np.where(size > 1, np.sqrt(square / np.maximum(size - 1, 1)), 0.0)
    return centred / (std[group] + epsilon)


def _weights(h: np.ndarray, cell: np.ndarray, inverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per entry, its share of its ``cell``: H/ΣH (``inverse``: (1/H)/Σ(1/H)), and the cell's
    number of entries. ΣH = 0 splits evenly; with ``inverse``, entries with H = 0 share the
    cell evenly (the limit of 1/(H + δ), δ → 0) and the others get 0."""
    count = np.bincount(cell)[cell].astype(np.float64)
    if not inverse:
        total = np.bincount(cell, weights=h)[cell]
        return np.where(total > 0, h / np.where(total > 0, total, 1.0), 1.0 / count), count
    zero = h == 0
    n_zero = np.bincount(cell, weights=zero)[cell]
    inv = np.where(zero, 0.0, 1.0 / np.where(zero, 1.0, h))
    total = np.bincount(cell, weights=inv)[cell]
    share = inv / np.where(total > 0, total, 1.0)
    return np.where(n_zero > 0, zero / np.maximum(n_zero, 1), share), count


def _shaped(h: np.ndarray, cell: np.ndarray, correct: np.ndarray, p: SchemeParams) -> np.ndarray:
    """α1 + α2·w·count for correct entries, −α1 − α2·w⁻·count for incorrect ones; ``cell``
    groups the entries compared (the same group, outcome and, for GTPO, position)."""
    w, count = _weights(h, cell, inverse=False)
    w_inv, _ = _weights(h, cell, inverse=True)
    return np.where(
        correct,
        p.gtpo_alpha1 + p.gtpo_alpha2 * w * count,
        -p.gtpo_alpha1 - p.gtpo_alpha2 * w_inv * count,
    )


def _gtpo(
    h: np.ndarray, t: np.ndarray, group: np.ndarray, correct: np.ndarray, p: SchemeParams
) -> np.ndarray:
    """GTPO advantage of each token: token rewards compared at equal (group, outcome, t),
    normalised over the group's tokens."""
    key = (group.astype(np.int64) * (int(t.max()) + 1) + t) * 2 + correct
    _, cell = np.unique(key, return_inverse=True)
    return _normalised(_shaped(h, cell, correct, p), group, p.epsilon)


def _grpo_s(
    h: np.ndarray, row: np.ndarray, group: np.ndarray, correct: np.ndarray, p: SchemeParams
) -> np.ndarray:
    """GRPO-S advantage of each token: its response's sequence reward (mean entropy Ĥ_i),
    normalised over the group's responses."""
    n = group.size
    length = np.bincount(row, minlength=n)
    mean_h = np.bincount(row, weights=h, minlength=n) / np.maximum(length, 1)
    cell = group.astype(np.int64) * 2 + correct
    _, cell = np.unique(cell, return_inverse=True)
    return _normalised(_shaped(mean_h, cell, correct, p), group, p.epsilon)[row]
