"""Every key each parameter section may hold, its default, and the unknown-key check.

:data:`SECTIONS` lists, for every parameter section HED reads (``runs.<run>``, ``prompts``,
``generation``, ``aggregation``, ``metrics``, ``reporting``, ``publish``, ``dynamics``,
``rescoring``, ``mini_rl``), the keys it may hold and their defaults. A key not listed is an
error naming the key, the file (or ``--params``) that set it and the nearest valid key
(:func:`check_unknown_keys`): a misspelt ``temprature: 0.7`` would otherwise be ignored and
sampling run at 1.0.

Defaults that a typed section already declares are taken from it, so each lives in one place:
the sampling settings from :class:`hed.decode.types.SamplingParams`, the vLLM engine's from
:class:`hed.decode.types.VLLMSettings`, the rescoring's from
:data:`hed.analysis.rescoring.RESCORING_DEFAULTS`, the dynamics' and the analyses' from
:mod:`hed.config.analysis_params`, the figures' style from :mod:`hed.report.style`, the
token report's and the explorer's options from their dataclasses,
``aggregation.chunk_records`` from :data:`hed.records.arrow_stream.DEFAULT_CHUNK`, the prompts'
from :mod:`hed.config.prompt_params`,
publishing's from :class:`hed.config.publish.PublishParams`, the W&B keys of ``metrics`` from
:class:`hed.pass1.config.WandbDefaults`, the mini-RL training's from
:class:`hed.config.mini_rl.MiniRLParams` and its parts, a run's from :data:`RUN_DEFAULTS`.
``conf/base/parameters_*.yml`` write the same values out for users (a test keeps them equal).
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hed.analysis.advantage_shaping import AdvantageShapingParams
from hed.analysis.covariance import CovarianceSettings
from hed.analysis.rescoring import RESCORING_DEFAULTS
from hed.config.analysis_params import (
    AnalysesParams,
    DeltaLogprobSettings,
    DynamicsParams,
    MismatchSettings,
    TrainerEntropySettings,
)
from hed.config.mini_rl import (
    BaseModelParams,
    MiniRLParams,
    TaskParams,
    TrainingWandbParams,
    ValidationParams,
)
from hed.config.prompt_params import PromptsParams
from hed.config.publish import HubPublishParams, PublishParams, WandbPublishParams
from hed.decode.prompts import DUPLICATE_POLICIES, PromptRendering
from hed.decode.types import SamplingParams, VLLMSettings
from hed.errors import ConfigError
from hed.pass1.config import MetricsParams, WandbDefaults
from hed.records.arrow_stream import DEFAULT_CHUNK
from hed.records.shard_metadata import DECODING_DEFAULTS
from hed.report.explorer.options import ExplorerOptions
from hed.report.style import DYNAMICS_STYLE, FIGURE2_STYLE, FIGURE3_STYLE
from hed.report.token_report.options import TokenReportOptions


def _defaults_of(cls: type, *, skip: Sequence[str] = ()) -> dict[str, Any]:
    """``{field: default}`` of a dataclass as YAML writes it, in field order: ``...`` for a field
    without a default, a tuple as a list, a nested section (a dataclass) as ``{}`` (its keys
    are listed under its own dotted name). Fields in ``skip`` (derived, not keys) are left out.

    E.g. ``_defaults_of(DeltaLogprobSettings)`` → ``{"top_n": 20, "min_count": 2}``.
    """
    out: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in skip:
            continue
        value = field.default
        if value is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        if value is dataclasses.MISSING:
            value = ...
        elif dataclasses.is_dataclass(value):
            value = {}
        out[field.name] = list(value) if isinstance(value, tuple) else value
    return out


def _flat(cls: type, nested: str, inner: type) -> dict[str, Any]:
    """The defaults of ``cls`` with its field ``nested`` (an ``inner`` dataclass) written as the
    section's own keys, where it stood (``dynamics.kl_cov_ratio`` is
    ``DynamicsParams.covariance.kl_cov_ratio``)."""
    out: dict[str, Any] = {}
    for key, value in _defaults_of(cls).items():
        out.update(_defaults_of(inner) if key == nested else {key: value})
    return out


#: The defaults of a run's keys (``runs.<run>``; ``checkpoint_root`` has none): their one
#: place (:func:`hed.config.layout.layout_from_params` reads them).
RUN_DEFAULTS: dict[str, Any] = {"role": "single", "steps": "all", "embedded": False}

#: Every key each section may hold, with its default (``...``: no default, the key is needed
#: where it is read). Keys of a ``*`` entry are free (run names, words, GRPOConfig fields);
#: ``<name>`` stands for one level of free names whose values follow the nested schema.
SECTIONS: dict[str, dict[str, Any]] = {
    "runs.<run>": {"checkpoint_root": ..., **RUN_DEFAULTS},  # role, steps, embedded
    # prompt_columns, answer_column, num_prompts, seed, the rendering keys
    # (apply_chat_template, enable_thinking, system_prompt), instruction_suffix, duplicates
    "prompts": _flat(PromptsParams, "rendering", PromptRendering),
    "generation": {
        "num_shards": 1,
        "samples_per_prompt": ...,
        **_defaults_of(SamplingParams),  # temperature, top_p, top_k, max_new_tokens, ...
        "dtype": DECODING_DEFAULTS["dtype"],
        "torch_threads": None,
        "log_every_s": 30,
        "backend": DECODING_DEFAULTS["backend"],
        "vllm": {},
    },
    "generation.vllm": _defaults_of(VLLMSettings),
    "aggregation": {"top_entropy_frac": 0.2, "chunk_records": DEFAULT_CHUNK, "lexicon": None},
    "aggregation.lexicon": {"*": None},
    "metrics": _defaults_of(MetricsParams),  # wandb_defaults, runs
    "metrics.wandb_defaults": _defaults_of(WandbDefaults),
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
    "reporting.token_report": _defaults_of(TokenReportOptions),  # responses_per_step, ...
    "reporting.explorer": _defaults_of(ExplorerOptions),  # ..., estimator, enabled
    "reporting.fig3": {"steps": None},
    "reporting.figure2": FIGURE2_STYLE.as_params(),  # panel_size, dpi
    "reporting.figure3": FIGURE3_STYLE.as_params(),
    "publish": _defaults_of(PublishParams),
    "publish.wandb": _defaults_of(WandbPublishParams),
    "publish.hub": _defaults_of(HubPublishParams),
    # estimators, epsilon, the covariance settings (kl_cov_ratio, clip_cov_band, batch_records)
    "dynamics": _flat(DynamicsParams, "covariance", CovarianceSettings),
    "dynamics.figures": DYNAMICS_STYLE.as_params(),
    "rescoring": {**RESCORING_DEFAULTS, "reference": {}},
    "rescoring.reference": RESCORING_DEFAULTS["reference"],
    # reference_run, mismatch, ..., dpi; advantage_shaping (its model: analysis/advantage_shaping)
    "analyses": {**_defaults_of(AnalysesParams), "advantage_shaping": {}},
    "analyses.advantage_shaping": {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in AdvantageShapingParams().model_dump().items()
    },
    "analyses.mismatch": _defaults_of(MismatchSettings),
    "analyses.trainer_entropy": _defaults_of(TrainerEntropySettings),
    "analyses.delta_logprob": _defaults_of(DeltaLogprobSettings),
    "mini_rl": _defaults_of(MiniRLParams, skip=("raw",)),
    "mini_rl.base_model": _defaults_of(BaseModelParams),
    "mini_rl.wandb": _defaults_of(TrainingWandbParams),
    "mini_rl.task": _defaults_of(TaskParams),
    "mini_rl.validation": _defaults_of(ValidationParams),
}

#: The top-level parameter names HED reads (the keys of ``conf/<env>/parameters*.yml``).
TOP_LEVEL = ("runs", "prompts", "generation", "aggregation", "metrics", "reporting", "publish",
             "mini_rl", "dynamics", "rescoring", "analyses")  # fmt: skip


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
    hint = f"did you mean {near}?" if near else f"valid keys here: {_valid_here(key)}."
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


def default(section_name: str, key: str) -> Any:
    """The default of ``<section_name>.<key>`` (:data:`SECTIONS`), e.g. ``default("aggregation",
    "top_entropy_frac")`` → 0.2.

    Raises:
        KeyError: the section or key is not listed, or the key has no default (``...``).
    """
    value = SECTIONS[section_name][key]
    if value is ...:
        raise KeyError(f"{section_name}.{key} has no default")
    return value


__all__ = [
    "DUPLICATE_POLICIES",
    "RUN_DEFAULTS",
    "SECTIONS",
    "TOP_LEVEL",
    "check_unknown_keys",
    "default",
    "key_origin",
    "unknown_keys",
]
