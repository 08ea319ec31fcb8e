"""HED's configuration loader: parameters merge key by key.

Kedro's ``OmegaConfigLoader`` merges an environment over ``base`` *destructively* by default:
a top-level key the environment names (``aggregation``) replaces base's whole section. And it
merges runtime ``--params`` into base and into the environment separately before that, so
``--params aggregation.top_entropy_frac=0.3`` in an environment without
``parameters_aggregation.yml`` gave the environment an ``aggregation`` section holding only
that key, which then replaced base's (its lexicon gone). Kedro's ``merge_strategy: soft``
would fix that, but would also merge the *names* a study chooses: base's demo run would join
every study's ``runs``.

:class:`HEDConfigLoader` merges ``parameters`` as :func:`merge_parameters` says (every section
key by key; the mappings of user-chosen names in :data:`REPLACED_WHOLE` replaced whole), then
applies ``--params`` on top key by key, and only then resolves interpolations (so
``${runtime_params:...}`` and references to an overridden key see the new value). Every
other configuration type (catalog, globals, credentials) loads as in Kedro.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kedro.config import MissingConfigException, OmegaConfigLoader
from omegaconf import DictConfig, OmegaConf
from yaml import MarkedYAMLError

from hed.errors import ConfigError

#: Dotted paths (``*`` = any one name) of parameter mappings whose keys are names the user
#: chooses (runs, lexicon categories): an environment that sets one replaces base's mapping
#: whole, so base's demo run does not join a study's runs.
REPLACED_WHOLE = ("runs", "metrics.runs", "mini_rl.runs", "aggregation.lexicon")


def merge_parameters(base: Any, env: Any, path: str = "") -> Any:
    """Merge an environment's parameters over base's, key by key.

    Args:
        base: base's merged parameters (``dict`` or ``DictConfig``; values may be anything).
        env: the environment's merged parameters.
        path: the dotted path of ``base``/``env`` (``""`` at the top).

    Returns:
        A plain ``dict`` (interpolation strings kept, unresolved): every key of either side;
        where both hold a mapping, merged recursively, except at :data:`REPLACED_WHOLE` paths,
        where the environment's value is taken whole; otherwise the environment's value
        (lists and scalars are replaced, as in YAML anchors and Kedro's soft merge).
    """
    if not _is_mapping(base) or not _is_mapping(env) or _replaced_whole(path):
        return _plain(env)
    merged = {key: _plain(value) for key, value in _items(base)}
    for key, value in _items(env):
        child = f"{path}.{key}" if path else str(key)
        merged[key] = (
            merge_parameters(merged[key], value, child) if key in merged else _plain(value)
        )
    return merged


def _replaced_whole(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in REPLACED_WHOLE)


def _is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping | DictConfig)


def _items(value: Any) -> list[tuple[Any, Any]]:
    if isinstance(value, DictConfig):
        return list(OmegaConf.to_container(value, resolve=False).items())
    return list(value.items())


def _plain(value: Any) -> Any:
    if isinstance(value, DictConfig) or OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=False)
    return value


class HEDConfigLoader(OmegaConfigLoader):
    """``OmegaConfigLoader`` whose ``parameters`` merge key by key (:func:`merge_parameters`).

    Runtime ``--params`` are applied last, key by key, over the merged environments; then
    interpolations are resolved once. Other keys (``catalog``, ``globals``, ``credentials``)
    are Kedro's.
    """

    def _read_dir_configs(
        self,
        conf_path: str,
        patterns: Iterable[str],
        key: str,
        processed_files: set,
        read_environment_variables: bool | None = False,
    ) -> dict[Path, DictConfig]:
        """Kedro's, with a YAML syntax error as one line (:func:`yaml_error`)."""
        try:
            return super()._read_dir_configs(
                conf_path, patterns, key, processed_files, read_environment_variables
            )
        except MarkedYAMLError as exc:
            raise yaml_error(exc) from exc

    def _check_duplicates(self, key: str, config_per_file: dict[Path, Any]) -> None:
        """Kedro's, with a key set in two files of one environment as one line
        (:func:`duplicate_error`)."""
        try:
            super()._check_duplicates(key, config_per_file)
        except ValueError as exc:
            raise duplicate_error(str(exc)) from exc

    def _resolve_from_raw_config(  # noqa: PLR0917 - Kedro's signature
        self,
        key: str,
        base_configs: dict[Any, DictConfig],
        env_configs: dict[Any, DictConfig],
        base_path: str,
        env_path: str,
        processed_files: set[Any],
    ) -> dict[str, Any]:
        if key != "parameters":
            return super()._resolve_from_raw_config(
                key, base_configs, env_configs, base_path, env_path, processed_files
            )
        base = _unsafe_merge(base_configs.values())
        run_env = self.env or self.default_run_env
        merged = (
            base
            if run_env == self.base_env
            else merge_parameters(base, _unsafe_merge(env_configs.values()))
        )
        if not processed_files and run_env != self.base_env:
            raise MissingConfigException(
                f"No files of YAML or JSON format found in {base_path} or {env_path} matching"
                f" the glob pattern(s): {[*self.config_patterns[key]]}"
            )
        config = OmegaConf.unsafe_merge(OmegaConf.create(merged), self.runtime_params or {})
        return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]


def _unsafe_merge(configs: Any) -> dict[str, Any]:
    configs = list(configs)
    if not configs:
        return {}
    return OmegaConf.to_container(OmegaConf.unsafe_merge(*configs), resolve=False)


#: Kedro's wording of a YAML syntax error in a configuration file (it names the file).
_KEDRO_YAML_ERROR = re.compile(r"Invalid YAML or JSON file (?P<path>.+?), unable to read line")


def yaml_error(exc: MarkedYAMLError) -> ConfigError:
    """The one-line ``ConfigError`` for a YAML syntax error in a ``conf/<env>/*.yml`` file.

    Kedro's ``OmegaConfigLoader`` re-raises PyYAML's ``ParserError``/``ScannerError`` with the
    file's path and the 0-based line and column of the original's ``problem_mark``; this
    names the file (relative to the working directory when under it), the 1-based line and
    column as an editor shows them, and PyYAML's own problem, e.g. ``conf/s1/parameters.yml
    line 3, column 1: not valid YAML (expected <block end>, but found '<block mapping
    start>'); fix the YAML there``.
    """
    original = exc.__cause__ if isinstance(exc.__cause__, MarkedYAMLError) else exc
    found = _KEDRO_YAML_ERROR.search(str(exc))
    path = found["path"] if found else "a configuration file"
    if found and os.path.isabs(path) and Path(path).is_relative_to(Path.cwd()):
        path = Path(path).relative_to(Path.cwd()).as_posix()
    mark = original.problem_mark
    where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = " ".join(str(original.problem or original.context or "syntax error").split())
    return ConfigError(f"{path}{where}: not valid YAML ({problem}); fix the YAML there")


#: Kedro's wording of keys set in two files of one environment folder (first line).
_KEDRO_DUPLICATE = re.compile(r"Duplicate keys found in (?P<a>.+?) and (?P<b>.+?): (?P<keys>.+)")


def duplicate_error(message: str) -> ConfigError:
    """The one-line ``ConfigError`` for Kedro's refusal of a key set in two files of one
    environment, e.g. ``generation.top_k is set in both conf/s1/parameters_generation.yml and
    conf/s1/parameters_reporting.yml; keep it in one of them (Kedro refuses a key set twice in
    one environment)``."""
    found = _KEDRO_DUPLICATE.match(message.splitlines()[0])
    if found is None:
        return ConfigError(" ".join(message.split()))

    def shown(path: str) -> str:
        file = Path(path)
        return file.relative_to(Path.cwd()).as_posix() if file.is_relative_to(Path.cwd()) else path

    keys = found["keys"].split(", ")
    what = f"{keys[0]} is" if len(keys) == 1 else f"{', '.join(keys)} are"
    first, second = sorted((shown(found["a"]), shown(found["b"])))
    return ConfigError(
        f"{what} set in both {first} and {second}; keep "
        f"{'it' if len(keys) == 1 else 'each'} in one of them (Kedro refuses a key set twice in "
        "one environment)"
    )
