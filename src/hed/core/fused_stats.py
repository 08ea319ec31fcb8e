"""The statistics of ``softmax(z / T)`` computed in one pass over the logits, when possible.

:func:`hed.core.entropy.token_distribution_stats` (the reference) reads a ``(B, V)`` logits
tensor about 17 times (float32 copy, top-k, max, subtract, exp, sum, multiply, ...). The
decode-time recorders call it once per decode step, so on a GPU it is a few percent of an 8B
model's step. This module gives the same numbers from fewer passes, chosen by the
``stats_kernel`` setting (``generation.stats_kernel``):

``reference``
    :func:`~hed.core.entropy.token_distribution_stats` itself (chunked torch code).
``triton``
    :func:`hed.core.stats_triton.triton_row_stats`: one Triton program per row reads the
    logits once (online max, ``Σ e``, ``Σ e·x`` and a running top-k). CUDA tensors only.
``compiled``
    the reference's formulas compiled by ``torch.compile`` (inductor), which fuses the
    max / exp / sum passes; on CPU it needs a C++ compiler and compiles once per process
    (about 17 s on one core), on CUDA inductor writes Triton code.
``auto`` (default)
    ``triton`` for CUDA logits when Triton imports, otherwise ``reference``.

Every route returns the reference's formulas (docstring of ``token_distribution_stats``):
entropies and ``log Z`` agree with it within 1e-5 nats (float32 summation order differs),
top-k probabilities within 1e-5 (``|Δp| ≤ p·|Δlog Z|``); the top-k ids are the same except
between exactly equal probabilities, where the order of equal values may differ.

A route that fails at its first call (no compiler, a Triton build error) logs one warning
naming the error and falls back to the reference for the rest of the process.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable

import torch

from hed.core.entropy import TokenDistributionStats, token_distribution_stats
from hed.core.validators import STATS_KERNELS, check_stats_kernel
from hed.errors import ConfigError

logger = logging.getLogger(__name__)

StatsFunction = Callable[[torch.Tensor, float, int], TokenDistributionStats]


def reference_stats(logits: torch.Tensor, temperature: float, k: int) -> TokenDistributionStats:
    """The reference route: ``token_distribution_stats(..., check_finite=False)``."""
    return token_distribution_stats(logits, temperature, k, check_finite=False)


def _one_pass_formulas(
    logits: torch.Tensor, temperature: float, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The reference's formulas without chunks, written for inductor to fuse.

    The two sums accumulate in float64: inductor's CPU reductions add each vector lane's
    ~V/16 terms in sequence, which in float32 put ``log Z`` 1e-5 nats off at V = 151,936
    (the reference's pairwise sums: 1e-6).
    """
    scaled = logits.float() / temperature  # (B, V)
    row_max = scaled.amax(dim=-1, keepdim=True)  # (B, 1)
    shifted = scaled - row_max
    weights = shifted.exp()
    total = weights.sum(dim=-1, dtype=torch.float64)  # (B,)
    weighted = torch.where(weights > 0, weights * shifted, 0.0).sum(dim=-1, dtype=torch.float64)
    log_total = total.log()
    entropy = (log_total - weighted / total).float()
    log_z = row_max.squeeze(-1) + log_total.float()
    top_values, top_ids = scaled.topk(k, dim=-1)
    return entropy, log_z, (top_values - log_z.unsqueeze(-1)).exp(), top_ids


_compiled: Callable | None = None


def compiled_stats(logits: torch.Tensor, temperature: float, k: int) -> TokenDistributionStats:
    """The ``compiled`` route (torch.compile, dynamic shapes; compiled at the first call)."""
    global _compiled  # noqa: PLW0603 - one compiled function per process
    if _compiled is None:
        _compiled = torch.compile(_one_pass_formulas, dynamic=True)
    return TokenDistributionStats(*_compiled(logits, float(temperature), int(k)))


def triton_stats(logits: torch.Tensor, temperature: float, k: int) -> TokenDistributionStats:
    """The ``triton`` route (:func:`hed.core.stats_triton.triton_row_stats`)."""
    from hed.core.stats_triton import triton_row_stats  # imports Triton

    return TokenDistributionStats(*triton_row_stats(logits, temperature, k))


def triton_available() -> bool:
    """Whether Triton imports (its kernels then need a CUDA device)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def cpp_compiler_available() -> bool:
    """Whether a C++ compiler inductor can use on CPU is on ``PATH`` (``$CXX``, g++, clang++)."""
    import os

    return any(shutil.which(name) for name in (os.environ.get("CXX", ""), "g++", "clang++") if name)


def resolve_stats_kernel(name: str, device: torch.device | str) -> str:
    """The route ``name`` takes for logits on ``device``: one of reference, triton, compiled.

    Raises:
        ConfigError: ``name`` unknown; ``triton`` for a non-CUDA device or without Triton;
            ``compiled`` on CPU without a C++ compiler.
    """
    check_stats_kernel(name)
    device_type = torch.device(device).type
    if name == "auto":
        return "triton" if device_type == "cuda" and triton_available() else "reference"
    if name == "triton" and (device_type != "cuda" or not triton_available()):
        raise ConfigError(
            f"generation.stats_kernel: triton needs CUDA logits and Triton installed, got device "
            f"{device_type!r}; use stats_kernel: auto (or compiled)"
        )
    if name == "compiled" and device_type == "cpu" and not cpp_compiler_available():
        raise ConfigError(
            "generation.stats_kernel: compiled needs a C++ compiler on CPU (g++ or clang++, "
            "none on PATH); install one or use stats_kernel: auto"
        )
    return name


_ROUTES: dict[str, StatsFunction] = {
    "reference": reference_stats,
    "triton": triton_stats,
    "compiled": compiled_stats,
}


class DistributionStats:
    """Callable ``(logits (B, V), T, k) -> TokenDistributionStats`` for one setting.

    The route is resolved at the first call from the logits' device
    (:func:`resolve_stats_kernel`); if that route raises at its first call, one warning is
    logged and the reference is used from then on (its numbers are the definition).
    Results never carry a host sync: no finiteness check (callers check once at the end).

    Args:
        name: one of :data:`STATS_KERNELS`.
    """

    def __init__(self, name: str = "auto") -> None:
        self.name = check_stats_kernel(name)
        self.route: str | None = None
        self._proven = False

    def __call__(self, logits: torch.Tensor, temperature: float, k: int) -> TokenDistributionStats:
        if self.route is None:
            self.route = resolve_stats_kernel(self.name, logits.device)
        k = min(int(k), logits.shape[-1])
        if self._proven or self.route == "reference":
            return _ROUTES[self.route](logits, temperature, k)
        try:
            stats = _ROUTES[self.route](logits, temperature, k)
        except Exception as exc:  # any build failure: fall back to the reference
            from hed.errors import one_line

            logger.warning(
                "stats_kernel %s failed at its first call (%s); using the reference statistics",
                self.route,
                one_line(exc),
            )
            self.route = "reference"
            return reference_stats(logits, temperature, k)
        self._proven = True
        return stats


__all__ = [
    "STATS_KERNELS",
    "DistributionStats",
    "check_stats_kernel",
    "compiled_stats",
    "reference_stats",
    "resolve_stats_kernel",
    "triton_stats",
]
