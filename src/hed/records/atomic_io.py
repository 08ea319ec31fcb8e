"""Atomic writes for every local file HED's datasets save.

kedro-datasets write through fsspec: ``with self._fs.open(path, "wb") as f: ...``. Each dataset
of a run's catalog gets an :class:`AtomicLocalFileSystem` instance as its ``_fs``
(:func:`hed.records.object_store.make_dataset_writes_atomic`, which also handles object stores,
from ``hed.hooks.AtomicWritesHooks`` before the first node;
a ``gpu`` node's process receives the dataset with it), and HED's own datasets open local paths
through one (:func:`atomic_filesystem`). fsspec's ``file`` protocol itself is left alone, so
pandas, transformers, vLLM or any other library writing through fsspec in the same process get
plain ``LocalFileSystem`` writes. For write modes :class:`AtomicLocalFileSystem` opens a
temporary file in the target folder and renames it onto the target only when the ``with``
block ends without an exception; on an exception or a killed process the target is
never created, so neither ``exists()``, ``--only-missing-outputs`` nor a later load sees a
half-written CSV, JSON, Parquet or PNG.

A temporary file is named ``.<name>.<host>-<pid>.<random>.tmp`` after the process writing it.
A process killed while writing (SIGKILL, out of memory, power cut) cannot remove its own, so
the next save of the same dataset does (:func:`remove_stale_temporaries`): every temporary of
that file, in its folder or in a sibling version folder of a versioned dataset, whose writer
ran on this host and is gone; a version folder left empty by that goes too. Temporaries of
live processes and of other hosts are left alone. Kedro ignores version folders without the
file, so a leftover never counts as a version.

Reads and every other filesystem operation are plain ``LocalFileSystem`` behaviour.

Files HED writes itself, outside a dataset's ``fsspec`` call (Parquet streams, published
artifacts, manifests, task sets), go through :func:`atomic_path`, the same mechanism as a
context manager: one place knows how a temporary file is named, committed and discarded.
"""

from __future__ import annotations

import errno
import glob
import io
import os
import re
import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem

from hed.errors import OutputWriteError, one_line


def _blocking_file(path: str | os.PathLike) -> str | None:
    """The nearest existing ancestor of ``path`` that is a file, not a folder (or None)."""
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.exists(parent):
        up = os.path.dirname(parent)
        if up == parent:
            return None
        parent = up
    return parent if parent and not os.path.isdir(parent) else None


def write_error(path: str | os.PathLike, exc: OSError) -> OutputWriteError:
    """The one-line :class:`~hed.errors.OutputWriteError` for an ``OSError`` writing ``path``.

    The message names ``path``, the reason and the remedy: a file standing where a folder of
    the path should be is named as such (``mkdir`` reports it as "File exists" or "Not a
    directory"); the remedy follows the errno (:func:`write_remedy`): free space only for a
    full disk or quota, never for a read-only file system or a permission error.
    """
    blocker = _blocking_file(path)
    if blocker is not None:
        return OutputWriteError(
            f"cannot write {path}: {blocker} is a file, not a folder; move it away or change "
            "the output path"
        )
    reason = exc.strerror or one_line(exc, limit=None)
    return OutputWriteError(f"cannot write {path}: {reason}; {write_remedy(exc)}")


def write_remedy(exc: OSError) -> str:
    """What to do about ``exc`` (a failed write), by its errno: free space for a full disk or
    quota, a writable folder for a read-only file system or missing permissions."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free disk space and rerun"
    if exc.errno == errno.EROFS:
        return "the file system is mounted read-only: remount it writable or change the path"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "fix the folder's permissions or change the path"
    return "check the folder (permissions, disk space) and rerun"


def temporary_prefix(target: str | os.PathLike) -> str:
    """Name prefix of a temporary file for ``target``: ``.<name>.<host>-<pid>.``."""
    return f".{Path(target).name}.{_host()}-{os.getpid()}."


def remove_stale_temporaries(target: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that killed writers of ``target`` left behind.

    Looks in ``target``'s folder and, when ``target`` is a version of a versioned dataset
    (``<name>/<version>/<name>``), in every version folder of it. A temporary is removed only
    when its name says it was written on this host by a process that no longer runs; a version
    folder it leaves empty is removed too. Never raises: cleaning up must not fail a save.

    Args:
        target: the file about to be written.

    Returns:
        The temporary files removed.
    """
    target = Path(target)
    folders = [target.parent]
    versions = target.parent.parent
    if versions.name == target.name:
        try:
            folders = sorted(p for p in versions.iterdir() if p.is_dir())
        except OSError:
            return []
    owner = re.compile(rf"^\.{re.escape(target.name)}\.(?P<host>.+)-(?P<pid>\d+)\.[^.]+\.tmp$")
    removed = []
    for folder in folders:
        try:
            candidates = list(folder.glob(f".{target.name}.*.tmp"))
        except OSError:
            continue
        for candidate in candidates:
            match = owner.match(candidate.name)
            if match is None or match["host"] != _host() or _running(int(match["pid"])):
                continue
            try:
                candidate.unlink()
            except OSError:
                continue
            removed.append(candidate)
            if folder != target.parent:
                try:
                    folder.rmdir()  # only when now empty
                except OSError:
                    pass
    return removed


def new_temporary(target: str | os.PathLike) -> str:
    """Create an empty temporary file for ``target`` in its folder and return its path.

    Stale temporaries of ``target`` (:func:`remove_stale_temporaries`) go first; the name is
    ``.<name>.<host>-<pid>.<random>.tmp`` (:func:`temporary_prefix`). The file gets the mode a
    plain ``open(target, "w")`` would give it (``0o666 & ~umask``, or the folder's default
    ACL), not ``mkstemp``'s 0600: it is created with ``os.open(..., 0o666)`` and the kernel
    applies the umask, so the process-wide umask is never read or changed (``os.umask`` can
    only be read by setting it, which would race with other threads creating files).

    Raises:
        OutputWriteError: the folder cannot be written (names ``target``).
    """
    remove_stale_temporaries(target)
    folder = os.path.dirname(target) or "."
    for _ in range(100):
        temp = os.path.join(folder, f"{temporary_prefix(target)}{secrets.token_hex(6)}.tmp")
        try:
            # 0o666 as open() asks: the kernel applies the umask (and a folder's default ACL)
            os.close(os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o666))
        except FileExistsError:
            continue
        except OSError as exc:
            raise write_error(target, exc) from None
        return temp
    raise write_error(target, FileExistsError(errno.EEXIST, "no free temporary file name"))


def commit_temporary(temp: str | os.PathLike, target: str | os.PathLike) -> None:
    """fsync ``temp`` and rename it onto ``target`` (atomic on one filesystem).

    Raises:
        OutputWriteError: the flush or the rename failed (``temp`` is removed).
    """
    try:
        with open(temp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise write_error(target, exc) from None


@contextmanager
def atomic_path(target: str | os.PathLike, *, mode: int | None = None) -> Iterator[Path]:
    """A temporary path to write ``target`` at; it becomes ``target`` only if the block succeeds.

    ``with atomic_path(dest) as temp: shutil.copyfile(source, temp)``: the folder is created,
    the block writes ``temp`` (a file in ``target``'s folder, see :func:`new_temporary`), and on
    a clean exit it is fsynced and renamed onto ``target``; on any exception it is removed and
    ``target`` is left as it was.

    Args:
        target: the file to write.
        mode: permission bits for the file (``0o644``); ``None`` (the default) gives what
            ``open()`` gives: ``0o666 & ~umask`` (:func:`new_temporary`).

    Raises:
        OutputWriteError: the folder cannot be created or written, or the rename failed.
    """
    target = Path(target)
    created = _missing_folders(str(target.parent))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = Path(new_temporary(target))
    except (OSError, OutputWriteError) as exc:
        _remove_empty(created)
        raise exc if isinstance(exc, OutputWriteError) else write_error(target, exc) from None
    try:
        yield temp
        if mode is not None:
            os.chmod(temp, mode)
        commit_temporary(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        _remove_empty(created)  # a version folder left empty by the failure goes too
        raise


@contextmanager
def atomic_folder(target: str | os.PathLike, *, mode: int = 0o755) -> Iterator[Path]:
    """A temporary folder to fill; it replaces ``target`` only if the block succeeds.

    The folder (``.<name>.<random>`` next to ``target``, so the rename stays on one
    filesystem) gets ``mode`` (``mkdtemp`` creates ``0700``), each file in it the mode a plain
    ``open()`` gives (a library may write 0600 files: safetensors' weights), and it is renamed
    onto ``target``
    (an existing ``target`` is removed first); on any exception it is removed and ``target``
    is left as it was. Used for model folders, which must never look complete half-written.

    Raises:
        OSError: creating, filling or renaming the folder failed (the folder is removed).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield temp
        file_mode = _open_mode(temp)
        for path in temp.rglob("*"):
            if path.is_file() and not path.is_symlink():
                os.chmod(path, file_mode)
        os.chmod(temp, mode)
        if target.exists():
            shutil.rmtree(target)
        temp.rename(target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def _open_mode(folder: Path) -> int:
    """The permission bits ``open()`` gives a new file in ``folder`` (``0o666 & ~umask``, or
    the folder's default ACL), read from a probe file rather than from ``os.umask``."""
    probe = folder / f".hed-mode-probe.{secrets.token_hex(6)}"
    fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o666)
    try:
        return os.fstat(fd).st_mode & 0o777
    finally:
        os.close(fd)
        probe.unlink()


def owned_temporary_folder(prefix: str, parent: str | os.PathLike | None = None) -> Path:
    """Create a scratch folder ``<prefix><host>-<pid>-<random>``; remove dead writers' first.

    A folder of the same ``prefix`` whose name says it was made on this host by a process that
    no longer runs (a killed aggregation) is deleted before the new one is made, so killed runs
    do not pile up gigabytes in the temporary directory.

    Args:
        prefix: e.g. ``hed-<run>.step_<step>-``.
        parent: where to create it (default: :func:`tempfile.gettempdir`).

    Returns:
        The new, empty folder (the caller removes it when done).
    """
    parent = Path(parent or tempfile.gettempdir())
    owner = re.compile(rf"^{re.escape(prefix)}(?P<host>.+)-(?P<pid>\d+)-[^-]+$")
    try:
        leftovers = [p for p in parent.glob(f"{glob.escape(prefix)}*") if p.is_dir()]
    except OSError:
        leftovers = []
    for folder in leftovers:
        match = owner.match(folder.name)
        if match and match["host"] == _host() and not _running(int(match["pid"])):
            shutil.rmtree(folder, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{_host()}-{os.getpid()}-", dir=parent))


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname()) or "host"


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux: read from /proc)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _missing_folders(folder: str) -> tuple[str, ...]:
    """The ancestors of ``folder`` (itself included) that do not exist yet, outermost first."""
    missing: list[str] = []
    folder = os.path.abspath(folder)
    while folder and not os.path.exists(folder):
        missing.append(folder)
        up = os.path.dirname(folder)
        if up == folder:
            break
        folder = up
    return tuple(reversed(missing))


def _remove_empty(folders: tuple[str, ...]) -> None:
    """Remove ``folders`` (outermost first, as :func:`_missing_folders` lists them) from the
    deepest up, stopping at the first one that is not empty."""
    for folder in reversed(folders):
        try:
            os.rmdir(folder)
        except OSError:
            return


class _AtomicLocalFile(LocalFileOpener):
    """A write-mode local file that appears at its path only when closed successfully."""

    def __init__(
        self, path: str, mode: str, fs: Any = None, created: tuple[str, ...] = (), **kwargs: Any
    ) -> None:
        self._aborted = False
        self._created = created  # folders the open created (deepest last), removed on failure
        kwargs.pop("autocommit", None)  # fsspec's open() passes it; this file always commits itself
        super().__init__(path, mode, autocommit=False, fs=fs, **kwargs)

    def _open(self) -> None:
        if self.f is None or self.f.closed:
            try:
                self.temp = new_temporary(self.path)
            except OutputWriteError:
                self._remove_created_folders()
                raise
            self.f = open(self.temp, mode=self.mode)

    def write(self, data: Any) -> int:
        """Write ``data``; an ``OSError`` (disk full) discards the file and raises
        :class:`~hed.errors.OutputWriteError` naming the target."""
        try:
            return self.f.write(data)
        except OSError as exc:
            self._fail()
            raise write_error(self.path, exc) from None

    def abort(self) -> None:
        """Discard what was written when the file is closed."""
        self._aborted = True

    def close(self) -> None:
        if self.f is None or getattr(self, "_done", False):
            return
        if self._aborted:
            self._fail()
            return
        self._done = True
        try:
            self.f.flush()
        except OSError as exc:
            self._fail()
            raise write_error(self.path, exc) from None
        self.f.close()
        try:
            commit_temporary(self.temp, self.path)
        except OutputWriteError:
            self._remove_created_folders()
            raise

    def _fail(self) -> None:
        """Close without committing (a failed flush of the rest is expected on a full disk),
        remove the temporary file and the folders this open created (a version folder)."""
        self._done = True
        try:
            self.f.close()
        except OSError:
            pass
        self.discard()
        self._remove_created_folders()

    def discard(self) -> None:
        if os.path.exists(self.temp):
            os.remove(self.temp)

    def _remove_created_folders(self) -> None:
        _remove_empty(self._created)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()
        self.close()

    @property
    def closed(self) -> bool:  # io.IOBase consults it
        return self.f is None or self.f.closed


class AtomicTextWrapper(io.TextIOWrapper):
    """Text-mode wrapper that aborts the underlying atomic file when its block raises."""

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and hasattr(self.buffer, "abort"):
            self.buffer.abort()
        super().__exit__(exc_type, exc, tb)


class AtomicLocalFileSystem(LocalFileSystem):
    """``LocalFileSystem`` whose write-mode ``open`` is atomic (temporary file + rename)."""

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any) -> Any:
        if "w" in mode or "x" in mode:
            path = self._strip_protocol(path)
            created = _missing_folders(self._parent(path))
            try:
                self.makedirs(self._parent(path), exist_ok=True)
            except OSError as exc:
                raise write_error(path, exc) from None
            return _AtomicLocalFile(path, mode, fs=self, created=created, **kwargs)
        return super()._open(path, mode, block_size=block_size, **kwargs)

    def open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "b" not in mode and ("w" in mode or "x" in mode):
            text_kwargs = {
                k: kwargs.pop(k) for k in ("encoding", "errors", "newline") if k in kwargs
            }
            raw = super().open(path, mode.replace("t", "") + "b", *args, **kwargs)
            return AtomicTextWrapper(raw, **text_kwargs)
        return super().open(path, mode, *args, **kwargs)


def atomic_filesystem(fs: Any) -> Any:
    """``fs`` with atomic local writes: for a plain fsspec ``LocalFileSystem``, an
    :class:`AtomicLocalFileSystem` with the same options; any other filesystem (an object
    store, one already atomic) is returned as it is."""
    if isinstance(fs, LocalFileSystem) and not isinstance(fs, AtomicLocalFileSystem):
        return AtomicLocalFileSystem(**fs.storage_options)
    return fs


def install_atomic_local_writes() -> None:
    """Register :class:`AtomicLocalFileSystem` for fsspec's ``file`` and ``local`` protocols,
    for the whole process (tests of the filesystem itself; HED's runs do not call it: they use
    :func:`hed.records.object_store.make_dataset_writes_atomic` on their datasets).

    Idempotent. Filesystem objects created before the call keep plain writes.
    """
    for protocol in ("file", "local"):
        fsspec.register_implementation(protocol, AtomicLocalFileSystem, clobber=True)
