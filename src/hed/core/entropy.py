"""Next-token distribution statistics from raw logits (docs/datasets.md).

The distribution at a decode position is ``p = softmax(z / T)`` over the *whole* vocabulary,
where ``z`` are the model's raw logits and ``T`` the sampling temperature; top-k / top-p
filtering is a property of the sampler, not of the distribution HED reports. Every function
here upcasts to float32 first (bf16 logits have 8 mantissa bits: an entropy summed over 150k
terms in bf16 is off by whole tenths of a nat) and works from ``logZ = logsumexp(z / T)``, so
``-inf`` logits (masked tokens) contribute exactly nothing and never produce NaN.

Units: entropies in nats, log-probabilities in natural log. Shapes: ``B`` rows (sequences at
one decode step), ``V`` vocabulary entries, ``k`` top-k entries.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from hed.errors import InputDataError

#: Rows per chunk: bounds the float32 temporaries to ``3 · chunk_size · V`` values
#: (64 rows of a 151,936 vocabulary: 117 MB), whatever the batch size.
DEFAULT_CHUNK_SIZE = 64


class NonFiniteLogitsError(InputDataError):
    """The model produced NaN (or +inf) logits: its distribution is undefined."""


class TokenDistributionStats(NamedTuple):
    """Statistics of ``softmax(z / T)`` for ``B`` rows, all float32 except ``topk_ids`` (int64).

    Attributes:
        entropy: ``(B,)`` Shannon entropy in nats.
        log_z: ``(B,)`` log partition function ``logsumexp(z / T)``; ``log p_i = z_i / T - log_z``.
        topk_probs: ``(B, k)`` the ``k`` largest probabilities, most probable first.
        topk_ids: ``(B, k)`` their token ids.
    """

    entropy: torch.Tensor
    log_z: torch.Tensor
    topk_probs: torch.Tensor
    topk_ids: torch.Tensor


def scale_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Return ``z / T`` in float32.

    The division is the same float32 operation as transformers' ``TemperatureLogitsWarper``
    (``scores / temperature``), so the two agree bit for bit.

    Args:
        logits: ``(..., V)`` raw logits, any float dtype.
        temperature: sampling temperature ``T > 0``.

    Returns:
        ``(..., V)`` float32; the input itself when it is float32 and ``T == 1``.
    """
    scaled = logits.float()
    return scaled if temperature == 1.0 else scaled / temperature


def token_distribution_stats(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 5,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    check_finite: bool = True,
) -> TokenDistributionStats:
    """Entropy, log-partition and top-k of ``p = softmax(z / T)``, per row.

    With ``x = z / T``, ``m = max x``, ``e = exp(x - m)`` and ``S = Σ e``::

        log_z = m + log S
        H     = -Σ p log p = log S - Σ e·(x - m) / S         (nats)
        p_i   = exp(x_i - log_z)

    ``e·(x - m)`` is ``0·(-inf)`` for a ``-inf`` logit; it is set to 0 (``0·log 0 = 0``).
    Rows are processed ``chunk_size`` at a time so the float32 temporaries stay at
    ``O(chunk_size · V)``; nothing of size ``V`` survives the call.

    Args:
        logits: ``(B, V)`` raw logits, any float dtype, may contain ``-inf``.
        temperature: sampling temperature ``T > 0``.
        top_k: number of most probable tokens to return (clipped to ``V``).
        chunk_size: rows per chunk.
        check_finite: raise :class:`NonFiniteLogitsError` when a row's statistics are NaN
            (NaN or +inf logits, or a row that is all ``-inf``). This reads a value back from
            the device; the decode-time recorder passes False and checks once at the end.

    Returns:
        :class:`TokenDistributionStats` of float32 tensors on the input's device.

    Raises:
        NonFiniteLogitsError: ``check_finite`` and a row has no valid distribution.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be (B, V), got shape {tuple(logits.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    k = min(top_k, logits.shape[-1])
    parts = [_chunk_stats(chunk, temperature, k) for chunk in logits.split(chunk_size)]
    if len(parts) == 1:  # the usual decode step: no copy
        stats = TokenDistributionStats(*parts[0])
    else:
        stats = TokenDistributionStats(*(torch.cat(column) for column in zip(*parts, strict=True)))
    if check_finite:
        check_finite_stats(stats.entropy, stats.log_z, where="in the given logits")
    return stats


def _chunk_stats(
    logits: torch.Tensor, temperature: float, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`token_distribution_stats` of one chunk of rows (formulas there)."""
    scaled = scale_logits(logits, temperature)  # (c, V) float32
    top_values, top_ids = scaled.topk(k, dim=-1)  # (c, k), sorted, most probable first
    row_max = scaled.amax(dim=-1, keepdim=True)  # (c, 1); NaN propagates
    shifted = scaled - row_max  # (c, V) ≤ 0, -inf for masked tokens
    weights = shifted.exp()  # (c, V) e = exp(x - m) ∈ [0, 1]
    total = weights.sum(dim=-1)  # (c,) S ≥ 1 for a valid row
    weighted = weights.mul_(shifted).nan_to_num_(nan=0.0)  # e·(x - m); 0·(-inf) → 0
    log_total = total.log()
    entropy = log_total - weighted.sum(dim=-1) / total
    log_z = row_max.squeeze(-1) + log_total
    topk_probs = (top_values - log_z.unsqueeze(-1)).exp()
    return entropy, log_z, topk_probs, top_ids


def token_logprobs(
    logits: torch.Tensor,
    token_ids: torch.Tensor,
    log_z: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Log-probability of given tokens under ``softmax(z / T)``: ``z[t] / T - log_z``.

    Args:
        logits: ``(B, V)`` raw logits, any float dtype.
        token_ids: ``(B,)`` integer token ids, one per row.
        log_z: ``(B,)`` float32 ``logsumexp(z / T)`` of the same rows
            (:attr:`TokenDistributionStats.log_z`).
        temperature: sampling temperature ``T > 0``, as used for ``log_z``.

    Returns:
        ``(B,)`` float32 log-probabilities (nats, ≤ 0); ``-inf`` for a masked token.
    """
    picked = logits.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)  # (B,)
    return scale_logits(picked, temperature) - log_z


def entropy_from_logits(
    logits: torch.Tensor, temperature: float = 1.0, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> torch.Tensor:
    """Shannon entropy in nats of ``softmax(z / T)`` over the last dimension.

    Leading dimensions are flattened, processed in chunks of rows, and restored.

    Args:
        logits: ``(..., V)`` raw logits, any float dtype, may contain ``-inf``.
        temperature: sampling temperature ``T > 0``.
        chunk_size: rows per chunk.

    Returns:
        ``(...)`` float32 entropies.

    Raises:
        NonFiniteLogitsError: a row has NaN or +inf logits.
    """
    flat = logits.reshape(-1, logits.shape[-1])
    stats = token_distribution_stats(flat, temperature, top_k=1, chunk_size=chunk_size)
    return stats.entropy.reshape(logits.shape[:-1])


def check_finite_stats(entropy: torch.Tensor, log_z: torch.Tensor, where: str) -> None:
    """Raise :class:`NonFiniteLogitsError` when any entropy or ``log_z`` is NaN or infinite.

    A NaN logit makes ``log_z`` NaN, a +inf logit makes it +inf and an all ``-inf`` row makes
    it ``-inf``; each leaves the distribution undefined.

    Args:
        entropy: float tensor of entropies.
        log_z: float tensor of log partition functions, same shape.
        where: words that locate the rows in the message, e.g. ``"at decode step 12"``.

    Raises:
        NonFiniteLogitsError: one line naming the first bad row, the problem and the remedy.
    """
    finite = torch.isfinite(entropy) & torch.isfinite(log_z)
    if bool(finite.all()):
        return
    bad = (~finite).reshape(-1).nonzero()
    rows = f" (row {int(bad[0])}, {bad.numel()} of {finite.numel()} rows)" if finite.dim() else ""
    raise NonFiniteLogitsError(
        f"NaN logits {where}{rows}: the checkpoint produces NaN (or infinite) logits; "
        "try dtype float32"
    )
