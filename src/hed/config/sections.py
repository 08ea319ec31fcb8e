"""Every parameters file, the sections it holds, and the unknown-key check over all of them.

:data:`FILES` names, for each ``conf/<env>/parameters*.yml``, the sections it holds and the
model of each (:class:`hed.config.model.Section`): the one place a section's keys, defaults,
types and ranges are declared. :func:`check_unknown_keys` refuses, when the session starts, a
key no model declares (a misspelt ``temprature: 0.7`` would otherwise be ignored and sampling
run at 1.0), naming the file that set it and the nearest valid key. The JSON Schema of each file
and docs/parameters.md are generated from the same models (:mod:`hed.config.schema`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError, create_model

from hed.analysis.rescoring import RescoringParams
from hed.config.analysis_params import AnalysesParams, DynamicsParams
from hed.config.layout import RUN_DEFAULTS, RunParams
from hed.config.messages import config_error
from hed.config.mini_rl import MiniRLParams
from hed.config.model import Section
from hed.config.params import AggregationParams, GenerationParams, ReportingParams
from hed.config.prompt_params import PromptsParams
from hed.config.publish import PublishParams
from hed.pass1.config import MetricsParams

#: Each parameters file of an environment and the model of every section it holds.
FILES: dict[str, dict[str, Any]] = {
    "parameters.yml": {"runs": dict[str, RunParams]},
    "parameters_generation.yml": {"prompts": PromptsParams, "generation": GenerationParams},
    "parameters_aggregation.yml": {"aggregation": AggregationParams},
    "parameters_reporting.yml": {"reporting": ReportingParams},
    "parameters_rescoring.yml": {"rescoring": RescoringParams},
    "parameters_dynamics.yml": {"dynamics": DynamicsParams},
    "parameters_analyses.yml": {"analyses": AnalysesParams},
    "parameters_metrics.yml": {"metrics": MetricsParams},
    "parameters_publish.yml": {"publish": PublishParams},
    "parameters_mini_rl.yml": {"mini_rl": MiniRLParams},
}

#: The top-level parameter names HED reads, and the file each belongs in.
TOP_LEVEL: dict[str, str] = {name: file for file, names in FILES.items() for name in names}


def _typed(model: Any) -> Any:
    """``model``, or a free mapping where a section is not a pydantic model (yet)."""
    plain = isinstance(model, type) and not issubclass(model, BaseModel)
    return dict[str, Any] if plain else model


def file_model(sections: Mapping[str, Any], name: str = "Parameters") -> type[Section]:
    """A model of a parameters file: each of ``sections`` optional (an environment's file may
    set one key of one section; the merged whole is checked before the run)."""
    fields: Any = {key: (_typed(model) | None, None) for key, model in sections.items()}
    return create_model(name, __base__=Section, **fields)


#: Every section of every file: what :func:`check_unknown_keys` validates.
PARAMETERS = file_model({k: v for f in FILES.values() for k, v in f.items()})


def check_unknown_keys(
    params: Mapping[str, Any], origin: Callable[[str], str] | None = None
) -> None:
    """Refuse a parameter key that HED does not read (a misspelling would be ignored).

    Only unknown keys are refused here (values are checked before the first node, by the
    sections the pipeline reads: :func:`hed.hooks.parameters.parsed_sections`).

    Args:
        params: the environment's parameters (runtime ``--params`` merged).
        origin: ``dotted_key -> "conf/base/parameters_generation.yml"`` or ``"--params"``
            (:func:`key_origin`); default: no file named.

    Raises:
        ConfigError: ``unknown parameter <key> (set in <file>): did you mean <key>? HED does
            not read it, so it would be ignored[; <n> more unknown key(s)]``.
    """
    try:
        PARAMETERS.model_validate(dict(params))
    except ValidationError as exc:
        if any(error["type"] == "extra_forbidden" for error in exc.errors()):
            raise config_error(exc, PARAMETERS, "", origin) from None


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


__all__ = ["FILES", "PARAMETERS", "RUN_DEFAULTS", "TOP_LEVEL", "check_unknown_keys",
           "file_model", "key_origin"]  # fmt: skip
