"""HED's parameter sections: every key each section may hold, its default, and its check.

One place holds the rules that the pre-run check (:mod:`hed.config.preflight`) and the nodes apply:

* :data:`SECTIONS` lists, for every parameter section HED reads (``runs.<run>``, ``prompts``,
  ``generation``, ``aggregation``, ``metrics``, ``reporting``, ``publish``, ``mini_rl``), the
  keys it may hold and their defaults. A key not listed is an error naming the key, the file
  (or ``--params``) that set it and the nearest valid key (:func:`check_unknown_keys`): a
  misspelt ``temprature: 0.7`` would otherwise be ignored and sampling run at 1.0.
* The small validators (:func:`positive_int`, :func:`non_negative_int`, :func:`integer`,
  :func:`boolean`, :func:`section`, :func:`step_list`) are the one implementation of "a
  positive integer, not a bool" and its siblings; every message names the dotted key.
* The typed sections (:class:`GenerationParams`, :class:`AggregationParams`,
  :class:`ReportingParams`) are what the checks return: frozen dataclasses with the
  defaults filled in.

Nothing here imports a pipeline package: nodes import from here, never the reverse.

Why not Kedro 1.7's own validation of dataclass-annotated ``params:`` node inputs
(``kedro.validation``): it replaces the node's input by the model instance, so every node and
the shard metadata (which records ``params:generation`` as a dict, compared key by key on
reuse) would change shape; it reports several failures in one multi-line message; and it
neither refuses unknown keys nor knows which file set a key. The checks below run at the same
moment (before the first node) and keep one line per error.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from hed.errors import ConfigError

# ------------------------------------------------------------------ validators


def is_integer(value: Any) -> bool:
    """True for an ``int`` that is not a ``bool`` (YAML's ``true`` is an ``int`` in Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def integer(value: Any, name: str) -> int:
    """``value`` if it is an integer (not a bool).

    Raises:
        ConfigError: ``<name> must be an integer, got <value>``.
    """
    if not is_integer(value):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    return value


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


def non_negative_int(value: Any, name: str) -> int:
    """``value`` if it is an integer ≥ 0 (not a bool).

    Raises:
        ConfigError: ``<name> must be a non-negative integer, got <value>``.
    """
    if not is_integer(value) or value < 0:
        raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def boolean(value: Any, name: str) -> bool:
    """``value`` if it is ``true`` or ``false`` (a quoted ``"false"`` would count as true).

    Raises:
        ConfigError: ``<name> must be true or false (unquoted), got <value>``.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false (unquoted), got {value!r}")
    return value


def section(value: Any, name: str, where: str | None = None) -> dict[str, Any]:
    """A parameter section as a dict: ``None`` (an empty YAML section) means every default.

    Args:
        value: the section's value.
        name: its dotted key (``reporting``, ``reporting.fig3``).
        where: the file to name in the message (default ``parameters_<name>.yml`` for a
            top-level section).

    Raises:
        ConfigError: not a mapping.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        if "." in name:
            raise ConfigError(
                f"{name} must be a mapping (e.g. `{name.rsplit('.', 1)[1]}: {{...}}`), "
                f"got {value!r}"
            )
        raise ConfigError(
            f"parameter `{name}` must be a mapping ({where or f'parameters_{name}.yml'}), "
            f"got {value!r}"
        )
    return dict(value)


def step_list(value: Any, name: str) -> list[int] | None:
    """A list of non-negative integer steps (a single integer is a list of one), sorted and
    deduplicated; ``None`` or an empty list: ``None``.

    Raises:
        ConfigError: ``<name> must be a list of non-negative integer steps, got <value>``.
    """
    if value is None or (isinstance(value, list | tuple) and not value):
        return None
    if is_integer(value):
        value = [value]
    if not isinstance(value, list | tuple) or any(not is_integer(s) or s < 0 for s in value):
        raise ConfigError(f"{name} must be a list of non-negative integer steps, got {value!r}")
    return sorted(set(value))


# ------------------------------------------------------------------ the sections

#: Every key each section may hold, with its default (``...``: no default, the key is needed
#: where it is read). Keys of a ``*`` entry are free (run names, words, GRPOConfig fields);
#: ``<name>`` stands for one level of free names whose values follow the nested schema.
SECTIONS: dict[str, dict[str, Any]] = {
    "runs.<run>": {"role": "single", "checkpoint_root": ..., "steps": "all", "embedded": False},
    "prompts": {
        "prompt_columns": ["prompt", "question", "problem"],
        "answer_column": "answer",
        "num_prompts": None,
        "seed": 0,
        "apply_chat_template": True,
        "enable_thinking": None,
        "system_prompt": None,
        "instruction_suffix": "",
        "duplicates": "drop",
    },
    "generation": {
        "num_shards": 1,
        "samples_per_prompt": ...,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": None,
        "max_new_tokens": ...,
        "batch_size": 8,
        "seed": 0,
        "top_prob_k": 5,
        "dtype": "by_device",
        "torch_threads": None,
        "log_every_s": 30,
        "backend": "hf",
        "vllm": {},
    },
    "generation.vllm": {
        "gpu_memory_utilization": 0.9,
        "kv_cache_memory_bytes": None,
        "max_model_len": None,
        "max_num_seqs": 256,
        "enforce_eager": None,
        "enable_prefix_caching": True,
    },
    "aggregation": {"top_entropy_frac": 0.2, "chunk_records": 524288, "lexicon": None},
    "aggregation.lexicon": {"*": None},
    "metrics": {"wandb_defaults": {}, "runs": {}},
    "metrics.wandb_defaults": {"metric_key": ..., "step_key": ...},
    "metrics.runs.<run>": {"sources": {}, "figure_source": None},
    "reporting": {
        "strict": False,
        "top_n_words": 20,
        "fig2_measure": "count",
        "fig3": {},
        "figure2": {},
        "figure3": {},
        "token_report": {},
        "explorer": {},
    },
    "reporting.token_report": {
        "enabled": True,
        "responses_per_step": 8,
        "max_tokens_per_response": 2000,
        "steps": None,
        "seed": 0,
    },
    "reporting.explorer": {
        "enabled": True,
        "responses_per_step": 16,
        "max_tokens_per_response": 2000,
        "steps": None,
        "seed": 0,
        "estimator": "grpo",
    },
    "reporting.fig3": {"steps": None},
    "reporting.figure2": {"panel_size": [3.5, 2.8], "dpi": 200},
    "reporting.figure3": {"panel_size": [2.6, 3.6], "dpi": 200},
    "publish": {"env_name": None},
    "dynamics": {
        "estimators": ["grpo", "dr_grpo"],
        "epsilon": 1.0e-6,
        "clip_cov_band": [1.0, 5.0],
        "kl_cov_ratio": 0.002,
        "batch_records": 65536,
        "figures": {},
    },
    "dynamics.figures": {"panel_size": [3.2, 2.2], "dpi": 200},
    "rescoring": {
        "in_default": False,
        "reference": {},
        "dtype": "float32",
        "batch_size": 4,
        "chunk_positions": 64,
        "temperature": None,
        "top_prob_k": None,
        "torch_threads": None,
        "percentile_bin_width": 5,
        "consistency_tolerance": 1.0e-4,
    },
    "rescoring.reference": {"source": "generated", "run": None, "step": None},
    "mini_rl": {
        "base_model": {},
        "wandb": {},
        "task": {},
        "reward": "integer_match",
        "validation": {},
        "torch_threads": None,
        "training": {},
        "runs": {},
    },
    "mini_rl.base_model": {"embedded": False, "model_dir": ...},
    "mini_rl.wandb": {"dir": ..., "project": ...},
    "mini_rl.task": {"kinds": ..., "num_train": ..., "num_validation": ..., "seed": 0},
    "mini_rl.validation": {"metric_key": ..., "max_new_tokens": ..., "batch_size": ...},
}

#: The top-level parameter names HED reads (the keys of ``conf/<env>/parameters*.yml``).
TOP_LEVEL = ("runs", "prompts", "generation", "aggregation", "metrics", "reporting", "publish",
             "mini_rl", "dynamics", "rescoring")  # fmt: skip

#: ``prompts.duplicates``: what :func:`hed.decode.prompts.drop_duplicate_prompts` does.
DUPLICATE_POLICIES = ("drop", "keep")


def _schema_for(path: str) -> dict[str, Any] | None:
    """The schema of the section at dotted ``path`` (``runs.dapo``, ``metrics.runs.x``)."""
    for pattern, schema in SECTIONS.items():
        if fnmatch.fnmatchcase(path, pattern.replace("<run>", "*")) and path.count(
            "."
        ) == pattern.count("."):
            return schema
    return None


def unknown_keys(params: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """Every key of ``params`` that no section lists, with the nearest valid key.

    Args:
        params: the whole parameters mapping of an environment (runtime ``--params`` merged).

    Returns:
        ``[(dotted_key, nearest_valid_dotted_key_or_None), ...]`` in the order met.
    """
    found: list[tuple[str, str | None]] = []

    def walk(path: str, value: Any) -> None:
        schema = _schema_for(path)
        if schema is None or "*" in schema or not isinstance(value, Mapping):
            return
        for raw_key, child in value.items():
            key = str(raw_key)
            if key not in schema:
                near = difflib.get_close_matches(key, list(schema), n=1, cutoff=0.6)
                found.append((f"{path}.{key}", f"{path}.{near[0]}" if near else None))
                continue
            walk(f"{path}.{key}", child)

    for raw_key, value in params.items():
        key = str(raw_key)
        if key not in TOP_LEVEL:
            near = difflib.get_close_matches(key, TOP_LEVEL, n=1, cutoff=0.6)
            found.append((key, near[0] if near else None))
        elif key == "runs" and isinstance(value, Mapping):
            for run, cfg in value.items():
                walk(f"runs.{run}", cfg)
        elif key == "metrics" and isinstance(value, Mapping):
            walk("metrics", {k: v for k, v in value.items() if k != "runs"})
            for run, cfg in (value.get("runs") or {}).items():
                walk(f"metrics.runs.{run}", cfg)
        else:
            walk(key, value)
    return found


def check_unknown_keys(
    params: Mapping[str, Any], origin: Callable[[str], str] | None = None
) -> None:
    """Refuse a parameter key that HED does not read (a misspelling would be ignored).

    Args:
        params: the environment's parameters (runtime ``--params`` merged).
        origin: ``dotted_key -> "conf/base/parameters_generation.yml"`` or ``"--params"``
            (:func:`key_origin`); default: no file named.

    Raises:
        ConfigError: ``unknown parameter <key> (<file>): did you mean <key>? ...``, for the
            first unknown key.
    """
    found = unknown_keys(params)
    if not found:
        return
    key, near = found[0]
    where = f" (set in {origin(key)})" if origin else ""
    hint = f"did you mean {near}?" if near else f"valid keys here: {_valid_here(key)}"
    more = f"; {len(found) - 1} more unknown key(s)" if len(found) > 1 else ""
    raise ConfigError(
        f"unknown parameter {key}{where}: {hint} HED does not read it, so it would be ignored{more}"
    )


def _valid_here(key: str) -> str:
    parent = key.rsplit(".", 1)[0] if "." in key else ""
    schema = _schema_for(parent) if parent else dict.fromkeys(TOP_LEVEL)
    return ", ".join(sorted(schema or {})) or "none"


def key_origin(
    dotted_key: str,
    conf_source: str | Path,
    env: str | None,
    runtime_params: Mapping[str, Any] | None = None,
    *,
    base_env: str = "base",
    default_run_env: str = "local",
) -> str:
    """Which file (or ``--params``) set ``dotted_key``: the one Kedro's merge takes it from.

    Runtime ``--params`` win over the environment's files, which win over ``base``'s.

    Args:
        dotted_key: e.g. ``generation.temprature``.
        conf_source: the project's ``conf`` folder.
        env: the run environment (``None``: ``default_run_env``).
        runtime_params: Kedro's runtime parameters (``--params``), nested.
        base_env, default_run_env: as in ``settings.CONFIG_LOADER_ARGS``.

    Returns:
        ``"--params"``, a path such as ``conf/base/parameters_generation.yml`` (relative to
        the project when it can be), or ``"the parameters"`` when no file holds it.
    """
    import yaml

    parts = dotted_key.split(".")
    if _lookup(runtime_params or {}, parts):
        return "--params"
    conf = Path(conf_source)
    for folder in (env or default_run_env, base_env):
        files = sorted((conf / folder).glob("parameters*.yml")) + sorted(
            (conf / folder).glob("parameters*/**/*.yml")
        )
        for path in files:
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError):
                continue
            if _lookup(data, parts):
                try:
                    return str(path.relative_to(conf.parent))
                except ValueError:
                    return str(path)
    return "the parameters"


def _lookup(data: Any, parts: Sequence[str]) -> bool:
    for part in parts:
        if not isinstance(data, Mapping) or part not in data:
            return False
        data = data[part]
    return True


# ------------------------------------------------------------------ typed sections


@dataclass(frozen=True)
class GenerationParams:
    """``params:generation``, checked (see ``conf/base/parameters_generation.yml``).

    Attributes:
        num_shards: shards per checkpoint (``prompt_index % num_shards``), ≥ 1.
        samples_per_prompt: responses per prompt, ≥ 1.
        max_new_tokens: generated tokens per response at most, ≥ 1.
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        raw: the section as given (what shard metadata records).
    """

    num_shards: int
    samples_per_prompt: int
    max_new_tokens: int
    dtype: str
    raw: Mapping[str, Any]


def generation_params(value: Any) -> GenerationParams:
    """Check ``params:generation``: shape, shard/sample counts, sampling parameters, dtype.

    The sampling parameters are checked by :class:`hed.decode.hf.SamplingParams` itself (types
    and ranges, each message names the field).

    Raises:
        ConfigError: the first invalid value, naming ``generation.<key>``.
    """
    from hed.core.compute_dtype import dtype_name

    raw = section(value, "generation")
    num_shards = positive_int(raw.get("num_shards", 1), "generation.num_shards")
    sampling = sampling_params(raw)
    dtype_name(raw.get("dtype"), "cpu")  # the name only: no checkpoint is read before the run
    generation_backend(raw)
    return GenerationParams(
        num_shards=num_shards,
        samples_per_prompt=raw["samples_per_prompt"],
        max_new_tokens=sampling.max_new_tokens,
        dtype=str(raw.get("dtype") or "by_device"),
        raw=raw,
    )


#: ``generation.backend`` values: transformers ``generate`` or a vLLM engine.
BACKENDS = ("hf", "vllm")


def generation_backend(params: Mapping[str, Any]) -> str:
    """``generation.backend`` (absent: ``hf``), validated.

    Raises:
        ConfigError: not one of :data:`BACKENDS`.
    """
    backend = params.get("backend", "hf")
    if backend not in BACKENDS:
        raise ConfigError(
            f"generation.backend must be one of {', '.join(BACKENDS)}, got {backend!r}"
        )
    return backend


def sampling_params(params: Mapping[str, Any]):
    """Build :class:`hed.decode.hf.SamplingParams` from ``params:generation``, validated.

    Raises:
        ConfigError: a missing or out-of-range value (temperature ≤ 0, top_p outside (0, 1],
            top_k < 1, max_new_tokens, batch_size, top_prob_k or samples_per_prompt < 1).
    """
    from hed.decode.hf import SamplingParams

    positive_int(params.get("samples_per_prompt"), "generation.samples_per_prompt")
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


@dataclass(frozen=True)
class AggregationParams:
    """``params:aggregation``, checked.

    Attributes:
        top_entropy_frac: ρ as the exact fraction of its decimal (:mod:`hed.core.thresholds`).
        chunk_records: records per merge chunk, ≥ 1.
        lexicon: the section's lexicon as given (``None``: HED's default), parsed by
            :func:`hed.core.lexicon.parse_lexicon`.
    """

    top_entropy_frac: Fraction
    chunk_records: int
    lexicon: Any


def aggregation_params(value: Any) -> AggregationParams:
    """Check ``params:aggregation`` (ρ in (0, 1], ``chunk_records``, the lexicon).

    Raises:
        ConfigError: the first invalid value.
    """
    from hed.core.lexicon import parse_lexicon
    from hed.core.thresholds import validate_top_entropy_frac

    raw = section(value, "aggregation")
    rho = validate_top_entropy_frac(raw.get("top_entropy_frac", 0.2))
    chunk = positive_int(raw.get("chunk_records", 524288), "aggregation.chunk_records")
    parse_lexicon(raw.get("lexicon"))
    return AggregationParams(top_entropy_frac=rho, chunk_records=chunk, lexicon=raw.get("lexicon"))


@dataclass(frozen=True)
class ReportingParams:
    """``params:reporting``, checked.

    Attributes:
        strict: any missing part of the figures is an error.
        top_n_words: words per Figure 3 panel, ≥ 1.
        fig3_steps: ``reporting.fig3.steps`` sorted, or ``None`` (first/middle/last).
        raw: the section as a dict.
    """

    strict: bool
    top_n_words: int
    fig3_steps: list[int] | None
    raw: Mapping[str, Any]


def reporting_section(reporting: Any) -> dict[str, Any]:
    """Check the shape of ``params:reporting`` before any value is read.

    Returns:
        The section as a dict (empty when ``None``).

    Raises:
        ConfigError: the section, ``fig3``, ``figure2`` or ``figure3`` is not a mapping, or
            ``strict`` is not ``true``/``false``.
    """
    raw = section(reporting, "reporting")
    for key in ("fig3", "figure2", "figure3"):
        if raw.get(key) is not None:
            section(raw[key], f"reporting.{key}")
    boolean(raw.get("strict", False), "reporting.strict")
    return raw


def fig3_steps_param(reporting: Mapping[str, Any]) -> list[int] | None:
    """``reporting.fig3.steps`` as a sorted list of steps, or ``None`` when unset or empty.

    Raises:
        ConfigError: not a list of non-negative integers.
    """
    return step_list((reporting.get("fig3") or {}).get("steps"), "reporting.fig3.steps")


def top_n_words_param(reporting: Mapping[str, Any]) -> int:
    """``reporting.top_n_words`` (default 20): words per Figure 3 panel.

    Raises:
        ConfigError: not a positive integer.
    """
    return positive_int(reporting.get("top_n_words", 20), "reporting.top_n_words")


def reporting_params(value: Any) -> ReportingParams:
    """Check ``params:reporting`` (shape, ``strict``, ``top_n_words``, ``fig3.steps``).

    Raises:
        ConfigError: the first invalid value.
    """
    raw = reporting_section(value)
    return ReportingParams(
        strict=raw.get("strict", False),
        top_n_words=top_n_words_param(raw),
        fig3_steps=fig3_steps_param(raw),
        raw=raw,
    )


def fig2_measure_param(reporting: Mapping[str, Any]) -> str:
    """``reporting.fig2_measure`` (default ``count``): what Figure 2's bars measure.

    ``count`` (the paper's: anthropomorphic high-entropy tokens), ``per_1k_high_entropy``
    (per 1000 high-entropy tokens) or ``per_1k_tokens`` (per 1000 tokens of the step);
    see :func:`hed.report.figures.figure2_values`.

    Raises:
        ConfigError: another value.
    """
    from hed.report.figures import FIGURE2_MEASURES  # matplotlib: only when a reporting run asks

    measure = reporting.get("fig2_measure", "count")
    if not isinstance(measure, str) or measure not in FIGURE2_MEASURES:
        raise ConfigError(
            f"reporting.fig2_measure must be one of {', '.join(FIGURE2_MEASURES)}, got {measure!r}"
        )
    return str(measure)


def shard_config(generation: Any) -> tuple[int, int]:
    """``(generation.num_shards, generation.samples_per_prompt)``, both positive integers.

    Raises:
        ConfigError: either is missing, not an integer (a bool is not one) or below 1.
    """
    generation = section(generation, "generation")
    return (
        positive_int(generation.get("num_shards"), "generation.num_shards"),
        positive_int(generation.get("samples_per_prompt"), "generation.samples_per_prompt"),
    )


def chunk_records_param(aggregation: Any, default: int) -> int:
    """``aggregation.chunk_records`` (records per merged chunk; ``default`` when unset).

    Raises:
        ConfigError: not a positive integer.
    """
    value = section(aggregation, "aggregation").get("chunk_records", default)
    return positive_int(value, "aggregation.chunk_records")


def names(values: Iterable[str]) -> str:
    """``a, b, c`` for messages."""
    return ", ".join(sorted(values))
