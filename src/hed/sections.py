"""Parameter sections read into checked values, shared by the nodes and :mod:`hed.preflight`.

Each function takes one ``params:<section>`` mapping (``None``, an empty YAML section, means
every default) and returns what a node needs, or raises :class:`hed.errors.ConfigError` in
one line naming the parameter and its value. Keeping them here, not in a pipeline's
``nodes.py``, lets :mod:`hed.preflight` run the nodes' own checks before the first node
without importing any pipeline package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hed.errors import ConfigError

#: Words per Figure 3 panel when ``reporting.top_n_words`` is unset.
DEFAULT_TOP_N = 20


def parameter_section(value: Any, name: str) -> dict[str, Any]:
    """``params:<name>`` as a mapping: ``None`` (an empty YAML section) means every default.

    Raises:
        ConfigError: the section is not a mapping.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(
            f"parameter `{name}` must be a mapping (parameters_{name}.yml), got {value!r}"
        )
    return value


def sampling_params_from(params: dict[str, Any]):
    """Build :class:`hed.recording.SamplingParams` from ``params:generation``, validated.

    Raises:
        ConfigError: a missing or out-of-range value (temperature ≤ 0, top_p outside (0, 1],
            top_k < 1, max_new_tokens, batch_size, top_prob_k or samples_per_prompt < 1).
    """
    from hed.recording import SamplingParams

    samples = params.get("samples_per_prompt")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ConfigError(
            f"generation.samples_per_prompt must be a positive integer, got {samples!r}"
        )
    # values go to SamplingParams unconverted: it checks types and ranges and names the field
    # (float("hot") or int(None) here would raise a message that names nothing)
    return SamplingParams(
        temperature=params.get("temperature", 1.0),
        top_p=params.get("top_p", 1.0),
        top_k=params.get("top_k"),
        max_new_tokens=params.get("max_new_tokens"),
        top_prob_k=params.get("top_prob_k", 5),
        seed=params.get("seed", 0),
        batch_size=params.get("batch_size", 8),
    )


def reporting_section(reporting: Any) -> dict[str, Any]:
    """Check the shape of ``params:reporting`` before any value is read.

    Args:
        reporting: ``params:reporting``; ``None`` (an empty YAML section) means every default.

    Returns:
        The section as a dict (empty when ``None``).

    Raises:
        ConfigError: the section, ``fig3``, ``figure2`` or ``figure3`` is not a mapping, or
            ``strict`` is not ``true``/``false`` (a quoted ``"false"`` would otherwise count
            as true).
    """
    if reporting is None:
        return {}
    if not isinstance(reporting, Mapping):
        raise ConfigError(
            f"parameter `reporting` must be a mapping (parameters_reporting.yml), got {reporting!r}"
        )
    for key in ("fig3", "figure2", "figure3"):
        value = reporting.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(
                f"reporting.{key} must be a mapping (e.g. `{key}: {{...}}`), got {value!r}"
            )
    strict = reporting.get("strict", False)
    if not isinstance(strict, bool):
        raise ConfigError(f"reporting.strict must be true or false (unquoted), got {strict!r}")
    return dict(reporting)


def fig3_steps_param(reporting: Mapping[str, Any]) -> list[int] | None:
    """``reporting.fig3.steps`` as a list of steps, or None when unset or empty.

    Raises:
        ConfigError: not a list of non-negative integers.
    """
    steps = (reporting.get("fig3") or {}).get("steps")
    if steps is None or (isinstance(steps, list | tuple) and not steps):
        return None
    if isinstance(steps, int) and not isinstance(steps, bool):
        steps = [steps]
    if not isinstance(steps, list | tuple) or any(
        isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in steps
    ):
        raise ConfigError(
            f"reporting.fig3.steps must be a list of non-negative integer steps, got {steps!r}"
        )
    return sorted(set(steps))


def top_n_words_param(reporting: Mapping[str, Any]) -> int:
    """``reporting.top_n_words`` (default 20): words per Figure 3 panel.

    Raises:
        ConfigError: not a positive integer.
    """
    top_n = reporting.get("top_n_words", DEFAULT_TOP_N)
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
        raise ConfigError(f"reporting.top_n_words must be a positive integer, got {top_n!r}")
    return top_n


def fig2_measure_param(reporting: Mapping[str, Any]) -> str:
    """``reporting.fig2_measure`` (default ``count``): what Figure 2's bars measure.

    ``count`` (the paper's: anthropomorphic high-entropy tokens), ``per_1k_high_entropy``
    (per 1000 high-entropy tokens) or ``per_1k_tokens`` (per 1000 tokens of the step);
    see :func:`hed.figures.figure2_values`.

    Raises:
        ConfigError: another value.
    """
    from hed.figures import FIGURE2_MEASURES  # matplotlib: only when a reporting run asks

    measure = reporting.get("fig2_measure", "count")
    if not isinstance(measure, str) or measure not in FIGURE2_MEASURES:
        raise ConfigError(
            f"reporting.fig2_measure must be one of {', '.join(FIGURE2_MEASURES)}, got {measure!r}"
        )
    return str(measure)


def shard_config(generation: dict[str, Any]) -> tuple[int, int]:
    """``(generation.num_shards, generation.samples_per_prompt)``, both positive integers.

    Raises:
        ConfigError: either is missing, not an integer (a bool is not one) or below 1.
    """
    values = []
    generation = parameter_section(generation, "generation")
    for name in ("num_shards", "samples_per_prompt"):
        value = generation.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"generation.{name} must be a positive integer, got {value!r}")
        values.append(value)
    return values[0], values[1]


def chunk_records_param(aggregation: dict[str, Any], default: int) -> int:
    """``aggregation.chunk_records`` (records per merged chunk; ``default`` when unset).

    Raises:
        ConfigError: not a positive integer.
    """
    value = parameter_section(aggregation, "aggregation").get("chunk_records", default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"aggregation.chunk_records must be a positive integer, got {value!r}")
    return value
