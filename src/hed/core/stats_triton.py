"""One-pass Triton kernel for the statistics of ``softmax(z / T)`` (CUDA).

The same quantities as :func:`hed.core.entropy.token_distribution_stats` (the reference),
read from the logits once: one program per row walks the vocabulary in blocks of ``BLOCK``
entries and keeps, in registers,

* ``m``, the running max of ``x = z / T``; ``S = Σ exp(x - m)``; ``W = Σ exp(x - m)·(x - m)``,
  rescaled by ``α = exp(m_old - m_new)`` when the max grows (the online-softmax recurrence of
  Milakov & Gimelshein 2018, extended to ``W``: ``W ← α·(W + (m_old - m_new)·S)``); each
  block's sums are float32 trees, ``S`` and ``W`` accumulate them in float64;
* the running top-k as packed int64 keys ``(order-preserving bits of x) · 2^32 + (2^32-1-id)``,
  so one integer ``max`` gives the largest value and, among equal values, the lowest id.

At the end ``log Z = m + log S`` and ``H = log S - W / S`` (nats), exactly the reference's
formulas; a NaN or ``+inf`` logit gives NaN entropy and ``log Z`` (as the reference does), an
all ``-inf`` row gives NaN entropy and ``log Z = -inf``.

Importing this module imports Triton; :mod:`hed.core.fused_stats` imports it only when the
Triton kernel is selected. Under ``TRITON_INTERPRET=1`` (set before this import) the kernel
runs on CPU tensors with Triton's interpreter, which is how the test suite checks it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: Vocabulary entries a program reads per iteration (the last block is masked).
MAX_BLOCK = 4096
#: The packed top-k keys carry the token id in their low 32 bits.
_MAX_IDS = 2**31
_EMPTY: tl.constexpr = tl.constexpr(-(2**63))
_NEVER: tl.constexpr = tl.constexpr(2**63 - 1)


@triton.jit
def _packed_keys(x, ids):
    """int64 keys ordered as ``x`` (float32), ties broken towards the lower id."""
    bits = x.to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # negative floats: flip the magnitude bits
    return ordered.to(tl.int64) * 4294967296 + (4294967295 - ids.to(tl.int64))


@triton.jit
def _row_stats_kernel(  # noqa: PLR0917 - a kernel's arguments are positional
    z_ptr,
    row_stride,
    n_cols,
    temperature,
    entropy_ptr,
    log_z_ptr,
    top_probs_ptr,
    top_ids_ptr,
    K: tl.constexpr,
    K_PAD: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    row_ptr = z_ptr + row.to(tl.int64) * row_stride
    offsets = tl.arange(0, BLOCK)
    slots = tl.arange(0, K_PAD)
    neg_inf = float("-inf")
    m = tl.full((), neg_inf, tl.float32)
    s = tl.full((), 0.0, tl.float64)  # the running sums across blocks in float64: 37 blocks
    w = tl.full((), 0.0, tl.float64)  # at V = 151,936, each block's own sum a float32 tree
    n_nan = tl.full((), 0, tl.int32)
    # slots >= K are never the minimum, so they are never filled
    empty = tl.full((), _EMPTY, tl.int64)  # below every packed key
    top = tl.where(slots < K, empty, tl.full((K_PAD,), _NEVER, tl.int64))
    for start in range(0, n_cols, BLOCK):
        ids = start + offsets
        valid = ids < n_cols
        z = tl.load(row_ptr + ids, mask=valid, other=neg_inf).to(tl.float32)
        x = tl.math.div_rn(z, temperature)
        x = tl.where(valid, x, neg_inf)
        n_nan += tl.sum((x != x).to(tl.int32), axis=0)  # noqa: PLR0124 - NaN test
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_safe = tl.where(m_new == neg_inf, 0.0, m_new)
        shift = tl.where(m == neg_inf, 0.0, m - m_safe)
        alpha = tl.exp(shift)
        d = x - m_safe
        e = tl.exp(d)
        ed = tl.where(e > 0, e * d, 0.0)
        alpha64 = alpha.to(tl.float64)
        w = alpha64 * (w + shift.to(tl.float64) * s) + tl.sum(ed, axis=0).to(tl.float64)
        s = alpha64 * s + tl.sum(e, axis=0).to(tl.float64)
        m = m_new
        keys = tl.where(valid, _packed_keys(x, ids), empty)
        if tl.max(keys, axis=0) > tl.min(top, axis=0):  # this block changes the top-k
            for _ in tl.static_range(K):
                best = tl.max(keys, axis=0)
                low = tl.min(top, axis=0)
                slot = tl.argmin(top, axis=0)
                top = tl.where((slots == slot) & (best > low), best, top)
                keys = tl.where(keys == best, empty, keys)
    log_s64 = tl.log(s)
    log_z = m + log_s64.to(tl.float32)
    entropy = (log_s64 - w / s).to(tl.float32)
    undefined = (n_nan > 0) | (m == float("inf"))
    nan = float("nan")
    tl.store(entropy_ptr + row, tl.where(undefined, nan, entropy))
    tl.store(log_z_ptr + row, tl.where(undefined, nan, log_z))
    top = tl.where(slots < K, top, empty)
    for j in tl.static_range(K):  # most probable first
        best = tl.max(top, axis=0)
        top = tl.where(top == best, empty, top)
        ordered = (best >> 32).to(tl.int32)
        bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
        value = bits.to(tl.float32, bitcast=True)
        token = (4294967295 - (best & 4294967295)).to(tl.int64)
        tl.store(top_probs_ptr + row * K + j, tl.exp(value - log_z))
        tl.store(top_ids_ptr + row * K + j, token)


def triton_row_stats(
    logits: torch.Tensor, temperature: float, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Entropy, ``log Z``, top-k probabilities and ids of ``softmax(z / T)`` in one pass.

    Args:
        logits: ``(B, V)`` raw logits, float32, bfloat16 or float16, on a CUDA device (or on
            the CPU under ``TRITON_INTERPRET=1``); ``V < 2**31``.
        temperature: ``T > 0``.
        k: ``1 <= k <= V``.

    Returns:
        ``entropy (B,)``, ``log_z (B,)``, ``topk_probs (B, k)`` float32 and ``topk_ids (B, k)``
        int64, most probable first (equal probabilities: lower id first).
    """
    rows, vocab = logits.shape
    if vocab >= _MAX_IDS:
        raise ValueError(f"vocabulary of {vocab} ids does not fit the kernel's 31-bit ids")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    device = logits.device
    entropy = torch.empty(rows, dtype=torch.float32, device=device)
    log_z = torch.empty(rows, dtype=torch.float32, device=device)
    top_probs = torch.empty(rows, k, dtype=torch.float32, device=device)
    top_ids = torch.empty(rows, k, dtype=torch.int64, device=device)
    if rows:
        block = min(MAX_BLOCK, triton.next_power_of_2(vocab))
        _row_stats_kernel[(rows,)](
            logits,
            logits.stride(0),
            vocab,
            float(temperature),
            entropy,
            log_z,
            top_probs,
            top_ids,
            K=k,
            K_PAD=triton.next_power_of_2(k),
            BLOCK=block,
            num_warps=8 if block >= 2048 else 4,
        )
    return entropy, log_z, top_probs, top_ids
