"""The small parameter validators: one implementation of "a positive integer, not a bool".

Every message names the dotted key (``generation.num_shards must be a positive integer, got
0``) and raises :class:`hed.errors.ConfigError`. They sit in ``core`` so that any layer
(``decode.prompts``, ``analysis.covariance``, ``analysis.rescoring``, ``report``, ``config``)
can check a value without importing the parameter sections of :mod:`hed.config.params`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from hed.errors import ConfigError


def is_integer(value: Any) -> bool:
    """True for an ``int`` that is not a ``bool`` (YAML's ``true`` is an ``int`` in Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value: Any, name: str, *, allow_none: bool = False) -> int | None:
    """``value`` if it is an integer ≥ 1 (not a bool); ``None`` too when ``allow_none``.

    Args:
        value: the parameter's value.
        name: its dotted key for the message, e.g. ``generation.num_shards``.
        allow_none: ``null`` means "off" / "all" for this key.

    Raises:
        ConfigError: ``<name> must be a positive integer[ or null], got <value>``.
    """
    if value is None and allow_none:
        return None
    if not is_integer(value) or value < 1:
        suffix = " or null" if allow_none else ""
        raise ConfigError(f"{name} must be a positive integer{suffix}, got {value!r}")
    return value


def _steps(value: Any) -> tuple[int, ...] | None:
    if value is None or (isinstance(value, list | tuple) and not value):
        return None
    if is_integer(value):
        value = [value]
    if not isinstance(value, list | tuple) or any(not is_integer(s) or s < 0 for s in value):
        raise ValueError("a list of non-negative integer steps, or null")
    return tuple(sorted(set(value)))


#: A parameter listing steps: null, one step or a list of them (sorted, deduplicated; empty:
#: null), for a :class:`hed.config.model.Section` field.
Steps = Annotated[
    tuple[int, ...] | None,
    BeforeValidator(_steps),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "null"},
                {"type": "integer", "minimum": 0},
                {"type": "array", "items": {"type": "integer", "minimum": 0}},
            ]
        }
    ),
]


#: ``generation.stats_kernel`` values: the routes of :mod:`hed.core.fused_stats`.
STATS_KERNELS = ("auto", "reference", "triton", "compiled")


def check_stats_kernel(name: Any) -> str:
    """Return ``name`` when it is one of :data:`STATS_KERNELS`.

    Raises:
        ConfigError: any other value, in one line naming the setting and the choices.
    """
    if name not in STATS_KERNELS:
        raise ConfigError(
            f"generation.stats_kernel must be one of {', '.join(STATS_KERNELS)}, got {name!r}"
        )
    return name
