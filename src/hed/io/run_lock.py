"""One ``kedro run`` per data root at a time, and one environment per data root.

Every dataset of an environment lies under its data root (``data_root`` in
``conf/<env>/globals.yml``; ``data`` for the base demo). Two runs writing the same root at once
would read each other's newest versions (a shard written by the other run looks "stale"), and
two environments sharing a root would overwrite each other's latest figures. So:

* :func:`acquire` writes ``<data_root>/.hed_run.lock`` (pid, host, environment, start time,
  command) with ``O_CREAT | O_EXCL`` before the first node runs; a second run finds it and
  stops with one line naming the first. A lock whose process no longer exists on this host is
  stale: it is replaced, with a warning. :func:`release` removes it when the run ends (also on
  failure, and at interpreter exit).
* :func:`claim_root` records the environment in ``<data_root>/.hed_environment`` on first use;
  a run of another environment with the same root is refused (a copied study folder that kept
  the original's ``data_root``).
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import re
import shlex
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hed.errors import ConfigError, HEDError, OutputWriteError

logger = logging.getLogger(__name__)

LOCK_NAME = ".hed_run.lock"
OWNER_NAME = ".hed_environment"


class RunLockedError(HEDError, RuntimeError):
    """Another run holds the data root's lock."""


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _describe(holder: dict[str, Any]) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder.get("started", 0)))
    return (
        f"pid {holder.get('pid')} on {holder.get('host')}, environment "
        f"{holder.get('env')}, started {started}: {holder.get('command', '?')}"
    )


def local_folder(data_root: str | Path) -> Path:
    """Where the lock and owner files of ``data_root`` live: the root itself when it is a
    local (or shared, NFS) folder; for an object-store root (``s3://``, ``gs://``), which has
    no exclusive create, a folder ``.hed_locks/<root>`` in the project (so the lock guards
    the runs of one checkout, not of several machines: docs/ray.md)."""
    text = str(data_root)
    if "://" not in text:
        return Path(text)
    return Path(".hed_locks") / re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def acquire(data_root: str | Path, env: str) -> Path:
    """Take the lock of ``data_root`` for this process.

    Args:
        data_root: the environment's data root.
        env: the environment's label (``base``, ``qae_repro``), recorded in the lock.

    Returns:
        The lock file's path.

    Raises:
        RunLockedError: a live run (this host) or a run on another host holds the lock; the
            message names it, and the file to delete if that run is gone.
        OutputWriteError: the data root cannot be written (:func:`unwritable_root`).
    """
    root = local_folder(data_root)
    path = root / LOCK_NAME
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "env": env,
        "started": time.time(),
        "command": shlex.join(["kedro", *sys.argv[1:]]) if sys.argv else "kedro run",
    }
    for _ in range(3):
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read(path)
            if holder is None or (
                holder.get("host") == me["host"]
                and (holder.get("pid") == me["pid"] or not _alive(int(holder.get("pid", 0))))
            ):
                if holder is not None and holder.get("pid") != me["pid"]:
                    logger.warning("Removing the stale run lock %s (%s)", path, _describe(holder))
                path.unlink(missing_ok=True)
                continue
            raise RunLockedError(
                f"{root} is in use by another run ({_describe(holder)}): wait for it to end or "
                f"give this environment its own data_root (conf/<env>/globals.yml); if that "
                f"run is gone, delete {path}"
            ) from None
        except OSError as exc:
            raise unwritable_root(root, env, path, exc) from None
        with os.fdopen(fd, "w") as file:
            json.dump(me, file)
        atexit.register(release, root)
        return path
    raise RunLockedError(f"{path}: cannot take the run lock (it keeps reappearing); delete it")


def release(data_root: str | Path) -> None:
    """Remove ``data_root``'s lock if this process holds it (else leave it)."""
    path = local_folder(data_root) / LOCK_NAME
    holder = _read(path)
    if holder is not None and holder.get("pid") == os.getpid():
        path.unlink(missing_ok=True)


def _read(path: Path) -> dict[str, Any] | None:
    """The lock's content; ``None`` when it is gone or unreadable (a half-written lock)."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def check_declared_root(data_root: str | Path, env: str, conf: Path, project: Path) -> None:
    """Refuse a data root that another environment's ``globals.yml`` declares as its own.

    :func:`claim_root` catches a root another environment has *written*; this catches the
    copy of ``conf/qae_repro`` that kept ``data_root: data/qae_repro`` before either ran.

    Args:
        data_root: this environment's data root (absolute, or a URL).
        env: its label (``base`` for the default environment).
        conf: the project's configuration folder (``conf``).
        project: the project folder (relative roots resolve against it).

    Raises:
        ConfigError: names the other environment's ``globals.yml`` and the one to edit.
    """
    import yaml

    def resolved(root: str) -> str:
        return root if "://" in root else str((project / root).resolve())

    if (local_folder(data_root) / OWNER_NAME).exists():
        return  # written already: claim_root names its owner
    mine = resolved(str(data_root))
    for folder in sorted(p for p in conf.iterdir() if p.is_dir()):
        other = folder.name
        if other in (env, "local") or (other == "base" and env == "base"):
            continue
        try:
            declared = yaml.safe_load((folder / "globals.yml").read_text(encoding="utf-8")) or {}
        except (FileNotFoundError, yaml.YAMLError):
            continue
        root = declared.get("data_root") if isinstance(declared, dict) else None
        if root and resolved(str(root)) == mine:
            raise ConfigError(
                f"data root {data_root} is the data root of environment {other} "
                f"({conf.name}/{other}/globals.yml) but this run is environment {env}: set "
                f"`data_root: data/{env}` in {conf.name}/{env}/globals.yml so the two do not "
                f"read and overwrite each other's data"
            )


def claim_root(data_root: str | Path, env: str) -> None:
    """Record ``env`` as the owner of ``data_root``, or refuse a root another one owns.

    Args:
        data_root: the environment's data root.
        env: its label (``base`` for the default environment).

    Raises:
        ConfigError: ``<data_root>`` was written by environment ``<other>``; names the
            ``globals.yml`` to edit.
        OutputWriteError: the data root cannot be written (:func:`unwritable_root`).
    """
    root = local_folder(data_root)
    owner_file = root / OWNER_NAME
    try:
        owner = owner_file.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        try:
            root.mkdir(parents=True, exist_ok=True)
            owner_file.write_text(env + "\n", encoding="utf-8")
        except OSError as exc:
            raise unwritable_root(root, env, owner_file, exc) from None
        return
    if owner and owner != env:
        raise ConfigError(
            f"data root {root} belongs to environment {owner} ({owner_file}) but this run is "
            f"environment {env}: set `data_root: data/{env}` in conf/{env}/globals.yml so the "
            f"two do not read and overwrite each other's data"
        )


def unwritable(data_root: str | Path) -> str | None:
    """Why no file can be created in ``data_root`` (or its nearest existing parent, where a
    run would create it), e.g. ``Read-only file system``; None when one can (an unnamed file,
    gone when closed) and for an object-store root (``hed doctor``'s data-root line)."""
    if "://" in str(data_root) and not str(data_root).startswith("file://"):
        return None
    path = Path(str(data_root).removeprefix("file://")).absolute()
    while not path.exists():
        path = path.parent
    try:
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def unwritable_root(root: Path, env: str, path: Path, exc: OSError) -> OutputWriteError:
    """The one-line error for a data root whose marker or lock file ``path`` cannot be written
    (a read-only mount, a folder of another user, a full disk), raised before the first node.

    Names the data root, the reason and the fixes: make the folder writable (free space when
    the disk is full) or point ``data_root`` at another folder.
    """
    reason = exc.strerror or type(exc).__name__
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return OutputWriteError(
        f"data root {root} is not writable (cannot create {path.name}: {reason}): "
        f"{'free disk space there' if full else 'make it writable'} or set data_root in "
        f"conf/{env}/globals.yml to another folder"
    )
