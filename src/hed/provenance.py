"""Provenance of HED's outputs: what produced them, and their publication under ``results/``.

Nodes cannot see the catalog, so the facts only the session knows (environment, run id, the
resolved file path and load version of each input, the save path of each output) reach the
``resolved_config`` node through one dataset, ``run_context``, filled by
:class:`ProvenanceHooks`:

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

:class:`PublishedArtifactsDataset` is the ``publish`` pipeline's output: it copies the files
named by the latest ``resolved_config`` into ``results/final_artifacts/<env>/`` with a
``MANIFEST.json`` (docs/reporting.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from kedro.framework.hooks import hook_impl
from kedro.io.core import AbstractDataset, AbstractVersionedDataset, DatasetError

from hed.atomic_io import write_error
from hed.errors import ConfigError, InputDataError, OutputWriteError

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
#: Name of an environment without ``--env`` (base + local): where its artefacts are published.
DEFAULT_ENV_LABEL = "base"
MANIFEST = "MANIFEST.json"
_ENV_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def environment_label(env: str | None) -> str:
    """The name an environment is published under: ``env``, or ``base`` for the default one."""
    return env or DEFAULT_ENV_LABEL


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
            info["error"] = str(exc).splitlines()[0]
            return info
        info["version"] = version
        info["path"] = str(dataset._get_versioned_path(version)) if version else info["filepath"]
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
    return None if path is None else str(path)


def _is_dataset(name: str) -> bool:
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
            if _is_dataset(name)
        },
    }


def _runner_name(runner: Any) -> Any:
    """``hed.runners.GPURunner`` rather than Kedro's ``<hed.runners.GPURunner object at 0x..>``."""
    if isinstance(runner, str) and " object at 0x" in runner:
        return runner.strip("<>").split(" object at ")[0]
    return runner


#: Outputs whose file the end of a run names in the log (the figures and what they are drawn from).
_ANNOUNCED = {
    "figure2_png",
    "figure3_png",
    "figure2_paper_reproduction",
    "figure2_single_run_diagnostic",
    "figure3_table",
    "resolved_config",
    "final_artifacts",
}


class ProvenanceHooks:
    """Fill ``run_context`` for the nodes that take it (see the module docstring).

    Stateless: what it records goes into the run's catalog, never onto the instance.
    """

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        """Register ``run_context`` in the catalog when the pipeline reads it."""
        if RUN_CONTEXT in pipeline.inputs():
            catalog[RUN_CONTEXT] = build_run_context(run_params, catalog, pipeline)

    @hook_impl
    def before_node_run(
        self, node: Any, catalog: Any, inputs: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Add the node's resolved inputs (path, load version) to its ``run_context``."""
        if RUN_CONTEXT not in node.inputs:
            return None
        recorded = {
            name: describe_dataset(catalog, name, "load")
            for name in node.inputs
            if _is_dataset(name)
        }
        return {RUN_CONTEXT: {**(inputs.get(RUN_CONTEXT) or {}), "inputs": recorded}}

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        """End the run with a summary: the current file of every figure and table it wrote.

        Versioned outputs sit in timestamped folders (``<file>/<version>/<file>``); the summary
        names the version each one loads now, so nothing has to be looked up.
        """
        written = [
            info["path"]
            for name in sorted(pipeline.all_outputs())
            if _is_dataset(name)
            and (info := describe_dataset(catalog, name, "load")).get("path")
            and (name in _ANNOUNCED or str(info["type"]).endswith(_TABLE_TYPES))
        ]
        if written:
            logger.info(
                "Run summary: %d figure(s) and table(s) written; current files:\n  %s",
                len(written),
                "\n  ".join(written),
            )


#: Dataset types whose outputs the run summary lists (tables and figures).
_TABLE_TYPES = ("CSVDataset", "MatplotlibDataset")


# ------------------------------------------------------------------ publishing


def check_env_name(name: str) -> str:
    """Return ``name`` if it is usable as a folder name under ``results/final_artifacts``.

    Raises:
        ConfigError: empty, or characters other than letters, digits, ``_ . -``.
    """
    if not isinstance(name, str) or not _ENV_NAME_RE.match(name):
        raise ConfigError(
            f"publish.env_name {name!r} is not a usable folder name: "
            "use letters, digits, '_', '.' or '-'"
        )
    return name


def rerun_reporting(env: str) -> str:
    """The command that rewrites the reporting outputs of the environment labelled ``env``."""
    suffix = "" if env == DEFAULT_ENV_LABEL else f" --env {env}"
    return f"kedro run --pipelines reporting{suffix}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _copy_atomically(source: Path, dest: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class PublishedArtifactsDataset(AbstractDataset[dict[str, Any], dict[str, Any]]):
    """Final figures, tables and config of each environment, under ``<filepath>/<env>/``.

    ``filepath`` is a folder (``filepath``, so that Kedro makes a relative one absolute against
    the project root, as for every file dataset).

    ``save(plan)`` takes the ``publish`` node's plan::

        {"env": "qae_repro", "project_path": "/abs/project", "source": {"env", "run_id"},
         "files": {"<file name>": {"dataset": "<catalog name>", "path": "<file to copy>",
                                   "version": "<load version>"}}}

    and copies each file byte for byte (atomically) to ``<filepath>/<env>/<file name>``, then
    writes ``<filepath>/<env>/MANIFEST.json`` (source run; per file its dataset, source path
    relative to the project, version, sha256 and size). Files that a previous publication
    listed and this one does not are removed; files HED did not publish are left alone.
    Relative ``path`` values are relative to ``project_path``.

    ``load()`` returns ``{env: manifest}`` for every published environment.

    Raises:
        InputDataError: a file of the plan does not exist (nothing is copied then).
        OutputWriteError: the destination cannot be written (a file where a folder should be,
            permissions, disk full) or ``env`` is not a usable folder name.
    """

    def __init__(self, *, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._root = Path(filepath)
        self.metadata = metadata

    def save(self, data: dict[str, Any]) -> None:
        try:
            env = check_env_name(data["env"])
        except ConfigError as exc:  # a DatasetError passes Kedro's save wrapper as one line
            raise OutputWriteError(f"cannot publish under {self._root}: {exc}") from None
        project = Path(data.get("project_path") or ".")
        sources = {name: _resolve(project, entry["path"]) for name, entry in data["files"].items()}
        absent = [f"{name} ({src})" for name, src in sources.items() if not src.is_file()]
        if absent:
            raise InputDataError(
                f"cannot publish {env}: {', '.join(absent)} do not exist; rerun "
                f"`{rerun_reporting(env)}`"
            )
        dest_dir = self._root / env
        try:
            self._publish(data, env, project, sources, dest_dir)
        except OSError as exc:
            raise write_error(dest_dir / MANIFEST, exc) from None

    def _publish(
        self,
        data: dict[str, Any],
        env: str,
        project: Path,
        sources: dict[str, Path],
        dest_dir: Path,
    ) -> None:
        """Copy the files of the plan into ``dest_dir`` and write its manifest."""
        dest_dir.mkdir(parents=True, exist_ok=True)
        previous = self._manifest(dest_dir).get("files", {})
        files = {}
        for name, entry in sorted(data["files"].items()):
            _copy_atomically(sources[name], dest_dir / name)
            files[name] = {
                "dataset": entry.get("dataset"),
                "source": _relative(entry["path"], project),
                "version": entry.get("version"),
                "sha256": _sha256(dest_dir / name),
                "bytes": (dest_dir / name).stat().st_size,
            }
        for stale in set(previous) - set(files):
            (dest_dir / stale).unlink(missing_ok=True)
        manifest = {"env": env, "published_from": data.get("source"), "files": files}
        fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", suffix=".tmp", dir=dest_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(manifest, handle, indent=2)
                handle.write("\n")
            os.replace(tmp, dest_dir / MANIFEST)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load(self) -> dict[str, Any]:
        if not self._root.is_dir():
            return {}
        return {
            child.name: self._manifest(child)
            for child in sorted(self._root.iterdir())
            if (child / MANIFEST).is_file()
        }

    @staticmethod
    def _manifest(folder: Path) -> dict[str, Any]:
        try:
            return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def _exists(self) -> bool:
        return self._root.is_dir()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._root)}


def _relative(path: str, project: Path) -> str:
    """``path`` relative to the project when it lies inside it (the manifest is tracked by git)."""
    try:
        return Path(path).relative_to(project).as_posix()
    except ValueError:
        return str(path)


def _resolve(project: Path, path: str) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() else project / candidate
