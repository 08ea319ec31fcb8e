"""A run's per-token advantage shaping: ``mini_rl.runs.<run>.advantage_shaping``, checked.

Two entropy-control methods that TRL's ``GRPOTrainer`` lacks reshape the per-token advantage:
Cheng et al.'s entropy advantage and Tan et al.'s GTPO / GRPO-S. A run asks for one with::

    mini_rl:
      runs:
        mini_entropy_advantage:
          epsilon_high: 0.28
          advantage_shaping: {scheme: entropy_advantage, alpha: 0.4, kappa: 2.0}

``scheme`` is one of :data:`TRAINER_SCHEMES`; the other keys are the scheme constants of
:class:`hed.core.advantage_shaping.SchemeParams` (the papers' defaults when left out). The
formulas are those of :mod:`hed.core.advantage_shaping`, applied by
:class:`hed.mini_rl.shaped_trainer.ShapedGRPOTrainer`. The 80/20 mask and the entropy bonus are
TRL's own options (``top_entropy_quantile``, ``entropy_coef``), not schemes here.

This module imports neither torch nor TRL: the pre-run check parses the section with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hed.core.advantage_shaping import SchemeParams, scheme_params
from hed.errors import ConfigError

#: The per-run key (popped before the rest goes to GRPOConfig).
SHAPING_KEY = "advantage_shaping"

#: Schemes the shaped trainer applies. ``grpo``/``dr_grpo`` are TRL's own ``loss_type`` /
#: ``scale_rewards``; ``top_rho_mask`` is TRL's ``top_entropy_quantile``.
TRAINER_SCHEMES = ("entropy_advantage", "gtpo", "grpo_s")


@dataclass(frozen=True)
class ShapingSpec:
    """One run's advantage shaping.

    Attributes:
        scheme: a name of :data:`TRAINER_SCHEMES`.
        params: the scheme constants (α, κ, α1, α2, ε).
    """

    scheme: str
    params: SchemeParams

    def as_dict(self) -> dict[str, Any]:
        """``{"scheme": ..., <every constant>}`` (the run's fingerprint hashes this)."""
        return {"scheme": self.scheme, **self.params.model_dump()}


def shaping_spec(value: Any, where: str) -> ShapingSpec | None:
    """Parse a run's ``advantage_shaping`` (``None``: TRL's own advantage, unshaped).

    Args:
        value: ``{scheme: <name>, <SchemeParams field>: <value>, ...}`` or ``None``.
        where: the dotted key for messages, e.g. ``mini_rl.runs.<run>.advantage_shaping``.

    Raises:
        ConfigError: not a mapping; ``scheme`` missing or not in :data:`TRAINER_SCHEMES`; an
            unknown constant or one out of range (α ≤ 0, κ ≤ 1, ...), one line naming the key.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{where} must be a mapping such as {{scheme: entropy_advantage}}, got {value!r}"
        )
    raw = dict(value)
    scheme = raw.pop("scheme", None)
    if scheme not in TRAINER_SCHEMES:
        raise ConfigError(
            f"{where}.scheme = {scheme!r}: use one of {list(TRAINER_SCHEMES)} (the 80/20 mask "
            "is GRPOConfig's top_entropy_quantile, the entropy bonus its entropy_coef)"
        )
    return ShapingSpec(scheme=str(scheme), params=scheme_params(raw, where))
