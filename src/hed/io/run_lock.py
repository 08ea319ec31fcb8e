"""One ``kedro run`` per data root at a time, and one environment per data root.

Every dataset of an environment lies under its data root (``data_root`` in
``conf/<env>/globals.yml``; ``data`` for the base demo). Two runs writing the same root at once
would read each other's newest versions (a shard written by the other run looks "stale"), and
two environments sharing a root would overwrite each other's latest figures. So:

* :func:`acquire` takes an OS file lock (``filelock``: ``flock`` on Unix) on
  ``<data_root>/.hed_run.lock.flock`` before the first node runs, then writes the holder's
  facts (pid, host, environment, start time, command) to ``<data_root>/.hed_run.lock``; a
  second run cannot take the OS lock and stops with one line naming the first. The OS lock
  dies with its process, so a killed run's lock is taken over (with a warning naming it).
  :func:`release` removes the facts and releases the lock when the run ends (also on
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

from filelock import FileLock, Timeout

from hed.config.session import declared_roots
from hed.errors import ConfigError, HEDError, OutputWriteError
from hed.records.atomic_io import atomic_path

logger = logging.getLogger(__name__)

#: The holder's facts (JSON), beside the OS lock.
LOCK_NAME = ".hed_run.lock"
#: The file the OS lock is taken on (empty; filelock may remove it on release).
FLOCK_NAME = ".hed_run.lock.flock"
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
    no file lock, a folder ``.hed_locks/<root>`` in the project (so the lock guards the runs
    of one checkout, not of several machines: docs/ray.md)."""
    text = str(data_root)
    if "://" not in text:
        return Path(text)
    return Path(".hed_locks") / re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


#: The OS locks this process holds, by lock folder (a second ``acquire`` of the same root in
#: one process, e.g. two sessions of a notebook, keeps the one it holds).
_HELD: dict[Path, FileLock] = {}

#: How long a refused run waits for the holder's facts (the holder writes them right after
#: it takes the OS lock; a second run refused in that instant waits for them).
HOLDER_WAIT_S = 10.0


def acquire(data_root: str | Path, env: str) -> Path:
    """Take the lock of ``data_root`` for this process.

    The OS lock (:class:`filelock.FileLock` on ``<root>/.hed_run.lock.flock``: ``flock`` on
    Unix) decides: at most one process holds it, and it dies with its process (a run killed
    by SIGKILL or a power cut leaves nothing to clean). Once held, the holder's facts (pid,
    host, environment, start time, command) are written to ``<root>/.hed_run.lock``, so that
    a refused run names the holder. Facts left by a killed run are taken over with a warning.

    Args:
        data_root: the environment's data root.
        env: the environment's label (``base``, ``qae_repro``), recorded in the lock.

    Returns:
        The path of the holder's facts (``<root>/.hed_run.lock``).

    Raises:
        RunLockedError: another process holds the lock; the message names it (its facts).
        OutputWriteError: the data root cannot be written (:func:`unwritable_root`).
    """
    root = local_folder(data_root)
    path = root / LOCK_NAME
    key = root.absolute()
    if key in _HELD:
        return path
    os_lock = FileLock(str(root / FLOCK_NAME), timeout=0)
    try:
        root.mkdir(parents=True, exist_ok=True)
        os_lock.acquire()
    except Timeout:
        raise RunLockedError(_refusal(root, path)) from None
    except OSError as exc:
        raise unwritable_root(root, env, path, exc) from None
    _HELD[key] = os_lock
    previous = _read(path)
    if previous is not None and previous.get("pid") != os.getpid():
        logger.warning(
            "Taking over the run lock %s of a run that is gone (%s)", path, _describe(previous)
        )
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "env": env,
        "started": time.time(),
        "command": shlex.join(["kedro", *sys.argv[1:]]) if sys.argv else "kedro run",
    }
    try:
        with atomic_path(path) as partial:  # a reader sees the whole facts or none
            partial.write_text(json.dumps(me), encoding="utf-8")
    except OutputWriteError:
        release(root)
        raise
    atexit.register(release, root)
    return path


def _refusal(root: Path, path: Path) -> str:
    """The refusal of a run that found the OS lock held: names the holder from its facts,
    waiting up to :data:`HOLDER_WAIT_S` for them when the holder has just taken the lock
    (no facts yet, or those of a run that is gone)."""
    host = socket.gethostname()
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        holder = _read(path)
        current = holder is not None and (
            holder.get("host") != host or _alive(int(holder.get("pid", 0)))
        )
        if current or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    who = _describe(holder) if current and holder else f"its details are not in {path}"
    return (
        f"{root} is in use by another run ({who}): wait for it to end (a study that runs "
        f"meanwhile needs its own environment and data_root, conf/<env>/globals.yml); the lock "
        f"ends with that run's process (delete {path} only to clear a stale name)"
    )


def release(data_root: str | Path) -> None:
    """Remove ``data_root``'s holder facts and release its OS lock, if this process holds it
    (else leave both)."""
    root = local_folder(data_root)
    os_lock = _HELD.pop(root.absolute(), None)
    if os_lock is None:
        return
    holder = _read(root / LOCK_NAME)
    if holder is not None and holder.get("pid") == os.getpid():
        (root / LOCK_NAME).unlink(missing_ok=True)
    os_lock.release()


def _read(path: Path) -> dict[str, Any] | None:
    """The holder's facts; ``None`` when they are gone or unreadable."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
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

    def resolved(root: str) -> str:
        return root if "://" in root else str((project / root).resolve())

    if (local_folder(data_root) / OWNER_NAME).exists():
        return  # written already: claim_root names its owner
    mine = resolved(str(data_root))
    for other, root in declared_roots(conf).items():
        if other in (env, "local") or (other == "base" and env == "base"):
            continue
        if resolved(root) == mine:
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
