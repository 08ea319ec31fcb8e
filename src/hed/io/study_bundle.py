"""A study's files as one bundle: what a W&B run or a Hugging Face commit publishes.

The bundle of a reporting run lists, with their exact files (the versions that run wrote or
read, as ``resolved_config`` records them):

=============  =====================================================  ====================
kind           files                                                  path in the bundle
=============  =====================================================  ====================
``figure``     the reporting run's PNGs (Figure 2, Figure 3)          ``figures/<file>``
``table``      the figure tables and the tables they were drawn from  ``tables/<file>``
``page``       the token report (and any other ``*_html`` output)     ``pages/<file>``
``config``     ``resolved_config.json``, ``checkpoints.json``         ``config/<file>``
``records``    every step's merged records and responses (optional)   ``records/<run>/...``
=============  =====================================================  ====================

plus the training runs pass@1 was read from (:func:`pass1_links`). Nothing here uploads:
:mod:`hed.io.wandb_publish` and :mod:`hed.io.hub_publish` do, after
:func:`check_bundle_files` has found every file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from hed.errors import ConfigError, InputDataError
from hed.io.publishing import environment_label, rerun_reporting
from hed.records.object_store import is_remote

KINDS = ("figure", "table", "page", "config", "records")

_RECORDS_RE = re.compile(
    r"^(?P<run>[^.]+)\.step_(?P<step>\d+)\.(?P<table>token_records|sequences)$"
)
_FOLDER = {"figure": "figures", "table": "tables", "page": "pages", "config": "config"}


@dataclass(frozen=True)
class BundleFile:
    """One file of a bundle.

    Attributes:
        path: its path inside the bundle (POSIX, e.g. ``figures/figure3_....png``).
        source: the local file it is read from (absolute).
        kind: one of :data:`KINDS`.
        dataset: the catalog dataset it is a version of.
        version: that dataset's version (``None`` when not versioned).
    """

    path: str
    source: str
    kind: str
    dataset: str
    version: str | None = None


@dataclass(frozen=True)
class StudyBundle:
    """What one publish sends: the files of one reporting run and where they came from.

    Attributes:
        study: the study's name (``publish.env_name`` or the ``--env``; ``base`` without one).
        run_id: the reporting run's id (its save version).
        git_commit: the project's commit when the reporting ran (``None`` outside git).
        config: the reporting run's ``resolved_config`` (a JSON-able dict).
        files: the files, sorted by ``path``.
        pass1_runs: the training runs pass@1 was read from (:func:`pass1_links`).
    """

    study: str
    run_id: str | None
    git_commit: str | None
    config: Mapping[str, Any]
    files: tuple[BundleFile, ...]
    pass1_runs: tuple[Mapping[str, Any], ...] = ()

    def provenance(self) -> str:
        """One line naming the study and what produced it (commit messages, run notes)."""
        commit = (self.git_commit or "no git commit")[:12]
        dirty = " (uncommitted changes)" if self.config.get("git_dirty") else ""
        runs = ", ".join(link["path"] for link in self.pass1_runs) or "none"
        return (
            f"HED study {self.study}: reporting run {self.run_id}, code {commit}{dirty}, "
            f"pass@1 from {runs}"
        )

    def of_kind(self, kind: str) -> list[BundleFile]:
        """The files of ``kind`` (one of :data:`KINDS`), in path order."""
        return [f for f in self.files if f.kind == kind]


def _kind_of(dataset: str, filepath: str) -> str | None:
    if _RECORDS_RE.match(dataset):
        return "records"
    suffix = PurePosixPath(filepath).suffix.lower()
    return {".png": "figure", ".csv": "table", ".parquet": "table", ".html": "page"}.get(
        suffix, "config" if suffix == ".json" else None
    )


def _bundle_path(kind: str, dataset: str, filepath: str) -> str:
    name = PurePosixPath(filepath).name
    match = _RECORDS_RE.match(dataset)
    if match:
        suffix = PurePosixPath(name).suffix
        return f"records/{match['run']}/step_{match['step']}.{match['table']}{suffix}"
    return f"{_FOLDER[kind]}/{name}"


def _file(name: str, info: Mapping[str, Any] | None, project: Path) -> BundleFile | None:
    if not info or not info.get("path") or not info.get("filepath"):
        return None
    kind = _kind_of(name, str(info["filepath"]))
    if kind is None:
        return None
    path = str(info["path"])
    if is_remote(path):
        raise ConfigError(
            f"cannot publish {name} from {path}: W&B and Hub publishing read local files; "
            "run the publish pipeline where the data root is a local folder"
        )
    source = Path(path) if Path(path).is_absolute() else project / path
    return BundleFile(
        path=_bundle_path(kind, name, str(info["filepath"])),
        source=str(source),
        kind=kind,
        dataset=name,
        version=info.get("version"),
    )


def plan_bundle(
    resolved_config: Mapping[str, Any],
    recorded_inputs: Mapping[str, Any] | None,
    *,
    study: str | None,
    include_records: bool,
) -> StudyBundle:
    """The bundle of the reporting run ``resolved_config`` describes.

    Args:
        resolved_config: the latest ``resolved_config`` (``artifacts``, ``pages``, ``inputs``:
            name → ``{filepath, path, version}``; ``project_path``; ``parameters``).
        recorded_inputs: the publish node's own inputs as ``hed.hooks.ProvenanceHooks``
            recorded them (name → ``{filepath, path, version}``): the merged records.
        study: the study's name (``None``: the config's environment, ``base`` without one).
        include_records: add every ``<run>.step_<step>.token_records`` / ``.sequences``
            of ``recorded_inputs``.

    Returns:
        The :class:`StudyBundle` (files sorted by bundle path, one file per path).

    Raises:
        ConfigError: the config names no output file (reporting ran without the hooks), a
            file lies on an object store, or two files would share a bundle path.
    """
    env = environment_label(resolved_config.get("env"))
    project = Path(str(resolved_config.get("project_path") or "."))
    named = {
        **(resolved_config.get("inputs") or {}),
        **(resolved_config.get("pages") or {}),
        **(resolved_config.get("artifacts") or {}),
    }
    if include_records:
        named.update({k: v for k, v in (recorded_inputs or {}).items() if _RECORDS_RE.match(k)})
    files: dict[str, BundleFile] = {}
    for name, info in sorted(named.items()):
        entry = _file(name, info, project)
        if entry is None:
            continue
        if entry.path in files and files[entry.path].source != entry.source:
            raise ConfigError(
                f"cannot publish: {files[entry.path].dataset} and {name} would both be "
                f"{entry.path}; give one of them another file name in catalog.yml"
            )
        files[entry.path] = entry
    if not any(f.kind == "figure" for f in files.values()):
        raise ConfigError(
            f"resolved_config of run {resolved_config.get('run_id')} names no figure file: "
            f"register hed.hooks.ProvenanceHooks in settings.py and run `{rerun_reporting(env)}`"
        )
    return StudyBundle(
        study=study or env,
        run_id=resolved_config.get("run_id"),
        git_commit=resolved_config.get("git_commit"),
        config=dict(resolved_config),
        files=tuple(files[path] for path in sorted(files)),
        pass1_runs=tuple(pass1_links(resolved_config.get("parameters") or {})),
    )


def pass1_links(parameters: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The training runs pass@1 was read from, per HED run, from ``metrics.runs``.

    Returns:
        ``[{"run", "source", "path", "url"}]``: for a ``wandb`` source ``path`` is
        ``entity/project/run_id`` (``entity/project/name=<name>`` for a run named by display
        name) and ``url`` its page on the server (``None`` when named by display name); for
        ``wandb_offline`` and ``csv`` the local ``path`` (``url`` ``None``). ``generated``
        (HED's own grading) names no training run and is left out.
    """
    from hed.pass1.wandb_online import wandb_run_ref

    metrics = parameters.get("metrics") or {}
    links = []
    for run, cfg in sorted((metrics.get("runs") or {}).items()):
        for source, raw in ((cfg or {}).get("sources") or {}).items():
            options = raw or {}
            if source == "wandb":
                ref = wandb_run_ref(options, f"metrics.runs.{run}.sources.wandb")
                base = str(options.get("base_url") or "https://wandb.ai").rstrip("/")
                url = f"{base}/{ref.entity}/{ref.project}/runs/{ref.run_id}" if ref.run_id else None
                links.append({"run": run, "source": source, "path": ref.path, "url": url})
            elif source in ("wandb_offline", "csv") and options.get("path"):
                links.append(
                    {"run": run, "source": source, "path": str(options["path"]), "url": None}
                )
    return links


def check_bundle_files(bundle: StudyBundle) -> None:
    """Refuse a bundle whose files are not all there (before anything is uploaded).

    Raises:
        InputDataError: the missing files, and the command that rewrites them.
    """
    absent = [f"{f.dataset} ({f.source})" for f in bundle.files if not Path(f.source).is_file()]
    if absent:
        shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
        raise InputDataError(
            f"cannot publish {bundle.study}: {shown} do not exist; nothing was uploaded; "
            f"rerun `{rerun_reporting(bundle.study)}`"
        )


def sha256_of(path: str | Path) -> str:
    """Hex sha256 of a local file (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle_manifest(bundle: StudyBundle) -> dict[str, Any]:
    """``hed_publication.json``: the study, its provenance and per file kind, dataset,
    version, sha256 and size in bytes."""
    return {
        "format": "hed.publication/1",
        "study": bundle.study,
        "run_id": bundle.run_id,
        "git_commit": bundle.git_commit,
        "provenance": bundle.provenance(),
        "pass1_runs": [dict(link) for link in bundle.pass1_runs],
        "files": {
            f.path: {
                "kind": f.kind,
                "dataset": f.dataset,
                "version": f.version,
                "sha256": sha256_of(f.source),
                "bytes": Path(f.source).stat().st_size,
            }
            for f in bundle.files
        },
    }
