"""``reporting.explorer``: the study explorer's parameters (docs/explorer.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hed.core.advantage import ESTIMATORS
from hed.core.validators import boolean, non_negative_int, positive_int, section, step_list
from hed.errors import ConfigError

#: The keys of ``reporting.explorer`` (also registered in :data:`hed.config.sections.SECTIONS`).
KEYS = ("enabled", "responses_per_step", "max_tokens_per_response", "steps", "seed", "estimator")


@dataclass(frozen=True)
class ExplorerOptions:
    """``reporting.explorer`` (parameters_reporting.yml; parsed by
    :func:`explorer_options`).

    Attributes:
        responses_per_step: (prompt_index, sample_index) keys embedded per (run, step), ≥ 1.
        max_tokens_per_response: tokens embedded per response, ≥ 1 (the rest is cut, and said).
        steps: steps to embed, or None for every step of every run.
        seed: seed of the shuffle that chooses the responses.
        estimator: advantage estimator, ``grpo`` or ``dr_grpo`` (:mod:`hed.core.advantage`).
        enabled: build the page (``false`` leaves the node out of the reporting pipeline).
    """

    responses_per_step: int = 16
    max_tokens_per_response: int = 2000
    steps: tuple[int, ...] | None = None
    seed: int = 0
    estimator: str = "grpo"
    enabled: bool = True


def explorer_options(value: Any) -> ExplorerOptions:
    """Parse ``reporting.explorer``.

    Args:
        value: the mapping from parameters_reporting.yml (``None``: every default).

    Returns:
        The :class:`ExplorerOptions`.

    Raises:
        ConfigError: not a mapping, an unknown key, or a value of the wrong type or range
            (one line naming ``reporting.explorer.<key>`` and the value).
    """
    raw = section(value, "reporting.explorer")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ConfigError(f"reporting.explorer: unknown key(s) {unknown}; use {sorted(KEYS)}")
    default = ExplorerOptions()
    name = "reporting.explorer."
    estimator = raw.get("estimator", default.estimator)
    if estimator not in ESTIMATORS:
        raise ConfigError(
            f"reporting.explorer.estimator must be one of {', '.join(ESTIMATORS)}, "
            f"got {estimator!r}"
        )
    steps = step_list(raw.get("steps"), name + "steps")
    return ExplorerOptions(
        responses_per_step=positive_int(
            raw.get("responses_per_step", default.responses_per_step), name + "responses_per_step"
        ),
        max_tokens_per_response=positive_int(
            raw.get("max_tokens_per_response", default.max_tokens_per_response),
            name + "max_tokens_per_response",
        ),
        steps=None if steps is None else tuple(steps),
        seed=non_negative_int(raw.get("seed", default.seed), name + "seed"),
        estimator=str(estimator),
        enabled=boolean(raw.get("enabled", default.enabled), name + "enabled"),
    )
