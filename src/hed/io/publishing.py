"""Publishing a run's final artifacts under ``results/final_artifacts/<env>/``.

The ``publish`` pipeline copies the files named by the latest ``resolved_config`` (figures,
figure tables, the config itself) byte for byte into one folder per environment, with a
``MANIFEST.json`` listing per file its dataset, source path, version, sha256 and size
(docs/reporting.md). :func:`publish` does the copying; the catalog's ``final_artifacts``
(:class:`hed.io.datasets.PublishedArtifactsDataset`) calls it. Every file is written atomically
(:func:`hed.records.atomic_io.atomic_path`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import fsspec

from hed.errors import ConfigError, InputDataError, OutputWriteError
from hed.records.atomic_io import atomic_path, write_error
from hed.records.object_store import filesystem_of, is_remote

#: Name of an environment without ``--env`` (base + local): where its artefacts are published.
DEFAULT_ENV_LABEL = "base"

MANIFEST = "MANIFEST.json"

#: The Git LFS rule a published folder's ``.gitattributes`` holds (what ``git lfs track
#: "*.png"`` writes there): its PNGs are stored by Git LFS, scoped to that folder.
LFS_PNG_RULE = "*.png filter=lfs diff=lfs merge=lfs -text"
GITATTRIBUTES = ".gitattributes"

_ENV_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def environment_label(env: str | None) -> str:
    """The name an environment is published under: ``env``, or ``base`` for the default one."""
    return env or DEFAULT_ENV_LABEL


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


def publish(plan: dict[str, Any], root: Path) -> None:
    """Copy the files of ``plan`` into ``<root>/<env>/`` and write its ``MANIFEST.json``.

    Args:
        plan: the ``publish`` node's plan: ``{"env", "project_path", "source": {"env",
            "run_id"}, "files": {"<file name>": {"dataset", "path", "version"}}}``; relative
            ``path`` values are relative to ``project_path``.
        root: ``results/final_artifacts``.

    Files that a previous publication listed and this one does not are removed; files HED
    did not publish are left alone.

    Raises:
        InputDataError: a file of the plan does not exist (nothing is copied then).
        OutputWriteError: the destination cannot be written (a file where a folder should be,
            permissions, disk full) or ``env`` is not a usable folder name.
    """
    try:
        env = check_env_name(plan["env"])
    except ConfigError as exc:  # a DatasetError passes Kedro's save wrapper as one line
        raise OutputWriteError(f"cannot publish under {root}: {exc}") from None
    project = Path(plan.get("project_path") or ".")
    sources = {name: _resolve(project, entry["path"]) for name, entry in plan["files"].items()}
    absent = [f"{name} ({src})" for name, src in sources.items() if not _is_file(src)]
    if absent:
        raise InputDataError(
            f"cannot publish {env}: {', '.join(absent)} do not exist; rerun "
            f"`{rerun_reporting(env)}`"
        )
    dest_dir = root / env
    try:
        _publish(plan, env, project, sources, dest_dir)
    except OSError as exc:
        raise write_error(dest_dir / MANIFEST, exc) from None


def published_manifests(root: Path) -> dict[str, Any]:
    """``{env: manifest}`` for every environment published under ``root``."""
    if not root.is_dir():
        return {}
    return {
        child.name: read_manifest(child)
        for child in sorted(root.iterdir())
        if (child / MANIFEST).is_file()
    }


def read_manifest(folder: Path) -> dict[str, Any]:
    """The ``MANIFEST.json`` of one published folder (``{}`` when absent or unreadable)."""
    try:
        return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _publish(
    plan: dict[str, Any], env: str, project: Path, sources: dict[str, Path], dest_dir: Path
) -> None:
    dest_dir.mkdir(parents=True, exist_ok=True)
    previous = read_manifest(dest_dir).get("files", {})
    files = {}
    for name, entry in sorted(plan["files"].items()):
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
    manifest = {"env": env, "published_from": plan.get("source"), "files": files}
    with atomic_path(dest_dir / MANIFEST) as temp:
        temp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    if plan.get("git_lfs", True):
        ensure_lfs_rule(dest_dir)


def ensure_lfs_rule(folder: Path) -> bool:
    """Make ``<folder>/.gitattributes`` route the folder's PNGs through Git LFS.

    Adds :data:`LFS_PNG_RULE` when no line of the file already says ``*.png filter=lfs``;
    other lines (the user's) are kept. Git applies a folder's ``.gitattributes`` to the
    files under it only, so the rule is scoped to the published folder.

    Returns:
        True when the file was written, False when it already held the rule.
    """
    path = folder / GITATTRIBUTES
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if any(
        line.split()[:2] == ["*.png", "filter=lfs"] for line in text.splitlines() if line.strip()
    ):
        return False
    prefix = text if not text or text.endswith("\n") else text + "\n"
    with atomic_path(path) as temp:
        temp.write_text(f"{prefix}{LFS_PNG_RULE}\n", encoding="utf-8")
    return True


def _sha256(path: Path | str) -> str:
    digest = hashlib.sha256()
    with fsspec.open(str(path), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _copy_atomically(source: Path | str, dest: Path) -> None:
    """Copy ``source`` (a local path or an ``s3://`` / ``gs://`` URL) to the local ``dest``."""
    with atomic_path(dest) as temp, fsspec.open(str(source), "rb") as reader:
        with open(temp, "wb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)


def _relative(path: str, project: Path) -> str:
    """``path`` relative to the project when it lies inside it (the manifest is tracked by git)."""
    try:
        return Path(path).relative_to(project).as_posix()
    except ValueError:
        return str(path)


def _is_file(path: Path | str) -> bool:
    """Whether ``path`` (local, or an object-store URL) is a file."""
    fs, bare = filesystem_of(path)
    return fs.isfile(bare)


def _resolve(project: Path, path: str) -> Path | str:
    if is_remote(path):
        return path
    candidate = Path(path)
    return candidate if candidate.is_absolute() else project / candidate


#: The outputs of the ``publish`` pipeline that the run summary lists (:func:`published_by_run`).
PUBLICATIONS = ("final_artifacts", "wandb_publication", "hub_publication")


def published_by_run(catalog: Any, outputs: set[str], run_id: str | None) -> list[str]:
    """What a ``publish`` run wrote, one line each, for the run summary.

    The artifacts folder ``results/final_artifacts/<env>`` (its ``MANIFEST.json`` written by
    this run), the W&B run folder (or URL) and its receipt, a killed attempt's W&B folder the
    run removed, the Hub commit and its receipt. Written by this run: modified after the run
    started (Kedro's run id is its start time, ``VERSION_FORMAT``).

    Args:
        catalog: the run's catalog. outputs: the pipeline's outputs. run_id: the session id.

    Returns:
        The lines, empty when the run published nothing (or is not a publish run).
    """
    from datetime import UTC, datetime

    from kedro.io.core import VERSION_FORMAT

    from hed.io.provenance import describe_dataset

    try:
        started = datetime.strptime(str(run_id), VERSION_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return []

    def fresh(path: Path) -> bool:
        try:
            return path.stat().st_mtime >= started
        except OSError:
            return False

    lines = []
    for name in (n for n in PUBLICATIONS if n in outputs):
        filepath = describe_dataset(catalog, name).get("filepath")
        if not filepath:
            continue
        path = Path(filepath)
        if name == "final_artifacts":
            for env, manifest in published_manifests(path).items():
                if fresh(path / env / MANIFEST):
                    n_files = len(manifest.get("files") or {})
                    lines.append(f"artifacts folder {path / env} ({n_files} file(s) + {MANIFEST})")
            continue
        if not fresh(path):
            continue
        try:
            receipt = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if name == "wandb_publication":
            run_dir = receipt.get("run_dir")
            where = receipt.get("url") or f"upload it with `wandb sync {run_dir}`"
            lines.append(f"W&B {receipt.get('mode', '')} run folder {run_dir} ({where})")
            lines.extend(
                f"removed {folder} (the W&B run folder of a publish that was killed)"
                for folder in receipt.get("removed_attempts") or []
            )
        else:
            lines.append(f"Hub commit {receipt.get('commit_url')}")
        lines.append(f"receipt {path}")
    return lines
