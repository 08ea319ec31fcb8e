"""The top-ρ entropy threshold of one (run, step) and the marking of its high-entropy tokens.

Definitions (docs/aggregation.md):

* N = number of non-special token records of the step, over all shards.
* The high-entropy set is exactly the ``n_high = ⌈ρ·N⌉`` tokens with the largest entropy. ρ·N
  is computed in exact rational arithmetic on the decimal written in the configuration
  (``Fraction(str(ρ))``), so ρ = 0.2 and N = 10 give 2, not the 3 of ``ceil(0.2 * 10.0)``
  carried out in binary floating point.
* Ties at the boundary are broken by the record key ``(prompt_index, sample_index, position)``
  ascending: with ``threshold`` the ``n_high``-th largest entropy and ``n_above`` the number of
  tokens strictly above it, the set holds every token above the threshold plus the first
  ``n_high − n_above`` tokens *at* the threshold in key order. The set never exceeds
  ``n_high`` and is reproducible.
* ``threshold`` = the smallest entropy inside the set (float32 value, nats).
* Percentiles ``p50 … p95`` use numpy's default ``'linear'`` method (type 7 of Hyndman & Fan:
  position ``h = (N − 1)·q`` in the ascending order, interpolated linearly between the order
  statistics ``⌊h⌋`` and ``⌈h⌉``), computed in float64 from the float32 values.
* ``frac_below_0_01`` = fraction of the N tokens with entropy strictly below 0.01 nats.
* ``mean_entropy`` = float64 mean of the N entropies (nats).

All of it uses one in-place ``np.partition`` of the N float32 values (4 bytes each, O(N) time),
so it works for any N that fits in memory (torch.quantile stops at 2^24 values).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np

from hed.errors import ConfigError, InputDataError

#: Percentiles reported per step (as fractions).
PERCENTILES = {"p50": 0.5, "p80": 0.8, "p90": 0.9, "p95": 0.95}

#: ``frac_below_0_01`` counts entropies strictly below this many nats.
LOW_ENTROPY_NATS = 0.01


def validate_top_entropy_frac(rho: object) -> Fraction:
    """Return ρ as an exact fraction of the decimal it is written as.

    Args:
        rho: ``aggregation.top_entropy_frac``: a number in (0, 1] (``0.2``, ``"0.2"``, ``1``).

    Raises:
        ConfigError: ρ is not a number or lies outside (0, 1].
    """
    if isinstance(rho, bool):
        raise ConfigError(
            f"aggregation.top_entropy_frac = {rho!r}: use a number in (0, 1], e.g. 0.2"
        )
    try:
        exact = Fraction(str(rho))
    except (TypeError, ValueError):
        raise ConfigError(
            f"aggregation.top_entropy_frac = {rho!r}: use a number in (0, 1], e.g. 0.2"
        ) from None
    if not 0 < exact <= 1:
        raise ConfigError(
            f"aggregation.top_entropy_frac = {rho!r} is outside (0, 1]; set the high-entropy "
            "fraction, e.g. 0.2 (the top 20% of a step's tokens)"
        )
    return exact


def high_entropy_count(n_tokens: int, rho: object) -> int:
    """Return ``⌈ρ·N⌉`` computed exactly: ``high_entropy_count(10, 0.2) == 2``.

    Raises:
        ConfigError: ρ outside (0, 1].
    """
    exact = validate_top_entropy_frac(rho) * n_tokens
    return math.ceil(exact)


@dataclass(frozen=True)
class EntropyThreshold:
    """The high-entropy selection of one step and its entropy statistics (all in nats).

    Attributes:
        run, step: which step.
        n_tokens: N, non-special tokens of the step.
        top_entropy_frac: ρ.
        n_high_entropy: ``⌈ρ·N⌉``.
        threshold: smallest entropy in the high-entropy set (the ``n_high``-th largest value).
        n_ties_included: tokens with entropy == threshold inside the set: the first ones of
            that value in (prompt_index, sample_index, position) order.
        p50, p80, p90, p95: percentiles (numpy ``'linear'``).
        frac_below_0_01: fraction of the N tokens with entropy < 0.01 nats.
        mean_entropy: mean over the N tokens.
    """

    run: str
    step: int
    n_tokens: int
    top_entropy_frac: float
    n_high_entropy: int
    threshold: float
    n_ties_included: int
    p50: float
    p80: float
    p90: float
    p95: float
    frac_below_0_01: float
    mean_entropy: float

    def as_row(self) -> dict[str, object]:
        """The ``entropy_thresholds`` row (every field except ``n_ties_included``)."""
        row = asdict(self)
        row.pop("n_ties_included")
        return row


def compute_threshold(entropy: np.ndarray, rho: object, *, run: str, step: int) -> EntropyThreshold:
    """Compute the top-ρ selection and statistics of one step's non-special entropies.

    Args:
        entropy: float32 array of shape (N,), the step's non-special entropies in any order.
            It is partitioned **in place** (pass a copy to keep the order).
        rho: top_entropy_frac ρ in (0, 1].
        run, step: recorded in the result.

    Returns:
        The :class:`EntropyThreshold`. ``n_ties_included`` assumes the tie-break by record key,
        applied when the records are marked (:class:`HighEntropyMarker`).

    Raises:
        InputDataError: N = 0, or an entropy is NaN/infinite.
        ConfigError: ρ outside (0, 1].
    """
    n = int(entropy.shape[0])
    if n == 0:
        raise InputDataError(
            f"{run}.step_{step}: no non-special token records; nothing to threshold"
        )
    if not np.isfinite(entropy).all():
        bad = entropy[~np.isfinite(entropy)][0]
        raise InputDataError(
            f"{run}.step_{step}: entropy contains {bad} (column `entropy`); rerun generation"
        )
    n_high = high_entropy_count(n, rho)
    kth_of_threshold = n - n_high  # ascending position of the n_high-th largest value
    positions = {kth_of_threshold}
    virtual = {}
    for name, q in PERCENTILES.items():
        h = (n - 1) * q  # numpy 'linear': virtual index in float64
        lo = math.floor(h)
        virtual[name] = (lo, min(lo + 1, n - 1), h - lo)
        positions.update(virtual[name][:2])
    entropy.partition(sorted(positions))  # O(N), in place
    threshold = entropy[kth_of_threshold]
    n_above = int(np.count_nonzero(entropy[kth_of_threshold + 1 :] > threshold))
    stats = {
        name: _lerp(float(entropy[lo]), float(entropy[hi]), g)
        for name, (lo, hi, g) in virtual.items()
    }
    return EntropyThreshold(
        run=run,
        step=int(step),
        n_tokens=n,
        top_entropy_frac=float(rho),
        n_high_entropy=n_high,
        threshold=float(threshold),
        n_ties_included=n_high - n_above,
        frac_below_0_01=count_below(entropy, LOW_ENTROPY_NATS) / n,
        mean_entropy=float(entropy.mean(dtype=np.float64)),
        **stats,
    )


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's linear interpolation between two order statistics (its ``_lerp``)."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def count_below(values: np.ndarray, bound: float) -> int:
    """Count float32 ``values`` strictly below the real number ``bound`` (compared exactly)."""
    as_f32 = np.float32(bound)
    if float(as_f32) < bound:  # float32(bound) itself is below the bound
        return int(np.count_nonzero(values <= as_f32))
    return int(np.count_nonzero(values < as_f32))


class HighEntropyMarker:
    """Marks the high-entropy tokens of a step fed in (prompt_index, sample_index, position) order.

    Every non-special token above the threshold is high-entropy; of the non-special tokens at
    exactly the threshold, the first ``n_ties_included`` in key order are. Feed the step's
    records in key order, chunk after chunk.
    """

    def __init__(self, selection: EntropyThreshold) -> None:
        self._threshold = np.float32(selection.threshold)
        self._ties_left = selection.n_ties_included
        self.n_marked = 0

    def mark(self, entropy: np.ndarray, is_special: np.ndarray) -> np.ndarray:
        """Bool mask of the high-entropy tokens of the next chunk (shape like ``entropy``)."""
        regular = ~is_special
        high = regular & (entropy > self._threshold)
        ties = np.flatnonzero(regular & (entropy == self._threshold))
        taken = ties[: self._ties_left]
        high[taken] = True
        self._ties_left -= taken.size
        self.n_marked += int(np.count_nonzero(high))
        return high
