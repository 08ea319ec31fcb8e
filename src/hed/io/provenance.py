"""Provenance of HED's outputs: what produced them (the ``run_context`` of a run).

Nodes cannot see the catalog, so the facts only the session knows (environment, run id, the
resolved file path and load version of each input, the save path of each output) reach the
``resolved_config`` node through one dataset, ``run_context``, filled by
:class:`hed.hooks.ProvenanceHooks`:

1. ``before_pipeline_run`` — when the pipeline has ``run_context`` as a free input, put
   :func:`build_run_context` into the catalog under that name (a ``MemoryDataset`` of this
   run's catalog): env, run_id, project_path, git commit, package versions, the Kedro run
   options and, for every output of the pipeline, its type, file path, save version and the
   exact file the run writes.
2. ``before_node_run`` — for a node that takes ``run_context``, add ``inputs``: for each
   dataset input of that node its type, file path, load version and the exact file loaded
   (the version resolved when the node runs, i.e. the one just written by an upstream node
   of the same run, or the latest on disk, or the one pinned with ``--load-versions``).

The hooks keep no state of their own: everything they record lives in the run's catalog, so
one hook instance serves any number of sessions (tests, notebooks) without leaking between
them. Register them in ``settings.py``: ``HOOKS = (ProjectHooks(), ProvenanceHooks())``.

The catalog API has no public accessor for a dataset's configured file path; HED reads the
``_filepath`` attribute that Kedro's versioned datasets and kedro-datasets' file datasets
share, and builds versioned paths with ``_get_versioned_path`` (the method Kedro uses itself).

Publishing the artifacts a run names is :mod:`hed.io.publishing`.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any

import numpy as np
import pandas as pd
from kedro.io.core import AbstractDataset, AbstractVersionedDataset, DatasetError

from hed.errors import one_line
from hed.records.object_store import url_of

logger = logging.getLogger(__name__)

#: Name of the dataset the hooks fill and the provenance-aware nodes take as an input.
RUN_CONTEXT = "run_context"
#: Packages whose versions ``resolved_config`` records.
PACKAGES = (
    "hed",
    "kedro",
    "kedro-datasets",
    "torch",
    "transformers",
    "pyarrow",
    "pandas",
    "numpy",
    "matplotlib",
    "wandb",
    "math-verify",
)


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (None when not installed), without importing them."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(project_path: str | os.PathLike) -> dict[str, Any]:
    """``{"commit", "dirty"}`` of the git work tree at ``project_path``; Nones outside one.

    ``dirty`` is true when tracked files differ from the commit (untracked files ignored).
    Runs ``git rev-parse HEAD`` and ``git status --porcelain --untracked-files=no``.
    """
    if shutil.which("git") is None:
        return {"commit": None, "dirty": None}

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=project_path,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def describe_dataset(catalog: Any, name: str, mode: str = "load") -> dict[str, Any]:
    """Type, configured file path, version and exact file of one catalog dataset.

    Args:
        catalog: a Kedro ``DataCatalog`` (or anything with its ``get``).
        name: dataset name (dataset factories are resolved).
        mode: ``load`` — the version the dataset loads now (pinned, or the latest on disk);
            ``save`` — the version this run saves.

    Returns:
        ``{"type", "filepath", "version", "path"}``; ``version`` is None for an unversioned
        dataset (``path`` is then ``filepath``) and ``path`` None when no version exists yet;
        ``error`` says why when the dataset could not be described.
    """
    try:
        dataset = catalog.get(name)  # dataset factories resolve; unknown names stay unknown
    except Exception as exc:
        return {"type": None, "filepath": None, "version": None, "path": None, "error": str(exc)}
    if dataset is None:
        return {"type": None, "filepath": None, "version": None, "path": None}
    info: dict[str, Any] = {
        "type": f"{type(dataset).__module__}.{type(dataset).__qualname__}",
        "filepath": _filepath(dataset),
        "version": None,
        "path": None,
    }
    if isinstance(dataset, AbstractVersionedDataset):
        try:
            version = (
                dataset.resolve_load_version() if mode == "load" else dataset.resolve_save_version()
            )
        except DatasetError as exc:
            info["error"] = one_line(exc, limit=None)
            return info
        info["version"] = version
        if version:
            path = dataset._get_versioned_path(version)
            info["path"] = url_of(getattr(dataset, "_protocol", "file") or "file", path)
        else:
            info["path"] = info["filepath"]
    else:
        info["path"] = info["filepath"]
    return info


def _filepath(dataset: AbstractDataset) -> str | None:
    path = getattr(dataset, "_filepath", None)
    if path is None:
        try:
            described = dataset._describe()
        except Exception:
            return None
        path = described.get("filepath") or described.get("path")
    if path is None:
        return None
    # kedro-datasets keep an object store's path without its protocol: give the whole URL
    return url_of(getattr(dataset, "_protocol", "file") or "file", path)


def is_dataset_input(name: str) -> bool:
    """Whether a node input or pipeline output is a catalog dataset (not parameters or
    ``run_context``), i.e. something with a file to record."""
    return name != "parameters" and not name.startswith("params:") and name != RUN_CONTEXT


def build_run_context(run_params: Mapping[str, Any], catalog: Any, pipeline: Any) -> dict[str, Any]:
    """The ``run_context`` of one ``kedro run`` (before any node runs).

    Args:
        run_params: the ``run_params`` Kedro passes to ``before_pipeline_run``.
        catalog: the run's catalog.
        pipeline: the pipeline about to run.

    Returns:
        env, run_id, project_path, git_commit, git_dirty, packages, kedro_run (pipeline names,
        tags, node names, runtime params, load versions, runner) and ``outputs``: ``{name:
        describe_dataset(..., "save")}`` for every output of ``pipeline``.
    """
    project_path = run_params.get("project_path") or os.getcwd()
    git = git_state(project_path)
    return {
        "env": run_params.get("env"),
        "run_id": run_params.get("run_id"),
        "project_path": str(project_path),
        "git_commit": git["commit"],
        "git_dirty": git["dirty"],
        "packages": package_versions(),
        "kedro_run": {
            key: run_params.get(key)
            for key in (
                "kedro_version",
                "pipeline_names",
                "tags",
                "node_names",
                "from_nodes",
                "to_nodes",
                "from_inputs",
                "to_outputs",
                "namespaces",
                "load_versions",
                "runtime_params",
            )
        }
        | {"runner": _runner_name(run_params.get("runner"))},
        "outputs": {
            name: describe_dataset(catalog, name, "save")
            for name in sorted(pipeline.all_outputs())
            if is_dataset_input(name)
        },
    }


def _runner_name(runner: Any) -> Any:
    """``hed.runners.GPURunner`` rather than Kedro's ``<hed.runners.GPURunner object at 0x..>``."""
    if isinstance(runner, str) and " object at 0x" in runner:
        return runner.strip("<>").split(" object at ")[0]
    return runner


def table_coverage(frame: pd.DataFrame) -> dict[str, Any]:
    """Rows and, per run, the steps a (run, step, ...) table holds (``resolved_config`` inputs).

    Returns:
        ``{"rows": n}``, plus ``{"steps": {run: [step, ...]}}`` when the table has run and step.
    """
    if not {"run", "step"} <= set(frame.columns):
        return {"rows": len(frame)}
    steps = frame[["run", "step"]].drop_duplicates().sort_values(["run", "step"])
    return {
        "rows": len(frame),
        "steps": {
            str(run): [int(s) for s in group["step"]]
            for run, group in steps.groupby("run", sort=True)
        },
    }


def jsonable(value: Any) -> Any:
    """``value`` with numpy/pandas scalars, tuples and NaN turned into plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
