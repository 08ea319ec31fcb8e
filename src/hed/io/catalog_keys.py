"""A misspelt key in a catalog entry (``filepth``), refused before the run with the file that
sets it and the nearest key the dataset's constructor takes.

Kedro builds a dataset only when a run first uses it, and then ends a key its class does not
take in a ``TypeError`` traceback that names neither the file nor the valid key.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from kedro.io.core import DatasetError, parse_dataset_definition

from hed.errors import ConfigError

#: Catalog files of an environment folder, as Kedro's ``OmegaConfigLoader`` finds them.
CATALOG_PATTERNS = ("catalog*.yml", "catalog*/**/*.yml", "**/catalog*.yml")


def constructor_keys(dataset_type: type) -> set[str] | None:
    """Keyword arguments ``dataset_type.__init__`` takes; None when it takes any (``**kwargs``)."""
    parameters = inspect.signature(dataset_type.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    return {
        name for name, p in parameters.items() if name != "self" and p.kind.name != "VAR_POSITIONAL"
    }


def catalog_origin(name: str, conf_source: str | Path, env: str | None) -> str:
    """The catalog file that defines entry ``name``: the environment's wins over ``base``'s.

    Returns:
        A path such as ``conf/s1/catalog.yml`` (relative to the project), or ``"the catalog"``.
    """
    conf = Path(conf_source)
    for folder in (env or "local", "base"):
        for pattern in CATALOG_PATTERNS:
            for path in sorted((conf / folder).glob(pattern)):
                try:
                    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
                except (OSError, yaml.YAMLError):
                    continue
                if isinstance(data, Mapping) and name in data:
                    return path.relative_to(conf.parent).as_posix()
    return "the catalog"


def check_catalog_keys(
    conf_catalog: Mapping[str, Any], conf_source: str | Path, env: str | None
) -> None:
    """Refuse a catalog entry with a key its dataset type does not take.

    Only an entry's own keys are checked (not those of a wrapped dataset, e.g. a
    ``PartitionedDataset``'s ``dataset``); an entry whose type does not load, or whose
    constructor takes ``**kwargs``, is left to Kedro.

    Args:
        conf_catalog: the catalog configuration (``config_loader["catalog"]``: entry name ->
            its keys, ``type`` among them; dataset factory patterns included).
        conf_source: the project's ``conf`` folder.
        env: the run environment (None: ``local``).

    Raises:
        ConfigError: ``unknown key <entry>.<key> (set in <file>): did you mean <entry>.<key>?
            <Type> does not take it; fix the key there``.
    """
    for name, entry in conf_catalog.items():
        if name.startswith("_") or not isinstance(entry, Mapping) or "type" not in entry:
            continue
        try:
            dataset_type, kwargs = parse_dataset_definition(dict(entry))
        except (DatasetError, TypeError, ValueError):
            continue  # a type that does not load: Kedro's own message names it
        valid = constructor_keys(dataset_type)
        if valid is None:
            continue
        unknown = sorted(key for key in kwargs if key not in valid and key != "version")
        if not unknown:
            continue
        key = unknown[0]
        near = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6)
        hint = (
            f"did you mean {name}.{near[0]}?" if near else f"it takes {', '.join(sorted(valid))};"
        )
        raise ConfigError(
            f"unknown key {name}.{key} (set in {catalog_origin(name, conf_source, env)}): "
            f"{hint} {dataset_type.__name__} does not take it; fix the key there"
        )
