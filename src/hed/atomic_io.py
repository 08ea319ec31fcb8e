"""Atomic writes for every local file a Kedro dataset saves.

kedro-datasets write through fsspec: ``with self._fs.open(path, "wb") as f: ...``. HED registers
:class:`AtomicLocalFileSystem` as fsspec's ``file``/``local`` implementation (from
``settings.py``, so in the ``kedro`` process and in every runner subprocess). For write modes it
opens a temporary file in the target folder and renames it onto the target only when the
``with`` block ends without an exception; on an exception or a killed process the target is
never created, so neither ``exists()``, ``--only-missing-outputs`` nor a later load sees a
half-written CSV, JSON, Parquet or PNG. A versioned dataset's version folder may be left empty
by a kill; Kedro ignores version folders without the file.

Reads and every other filesystem operation are plain ``LocalFileSystem`` behaviour.
"""

from __future__ import annotations

import io
import os
import tempfile
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem

from hed.errors import OutputWriteError


def _write_error(path: str, exc: OSError) -> OutputWriteError:
    reason = exc.strerror or str(exc)
    return OutputWriteError(f"cannot write {path}: {reason}; free disk space or fix the folder's permissions")


class _AtomicLocalFile(LocalFileOpener):
    """A write-mode local file that appears at its path only when closed successfully."""

    def __init__(self, path: str, mode: str, fs: Any = None, **kwargs: Any) -> None:
        self._aborted = False
        kwargs.pop("autocommit", None)  # fsspec's open() passes it; this file always commits itself
        super().__init__(path, mode, autocommit=False, fs=fs, **kwargs)

    def _open(self) -> None:
        if self.f is None or self.f.closed:
            folder, name = os.path.split(self.path)
            try:
                fd, self.temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder or ".")
            except OSError as exc:
                raise _write_error(self.path, exc) from None
            os.close(fd)
            self.f = open(self.temp, mode=self.mode)  # noqa: SIM115 - closed in close()

    def abort(self) -> None:
        """Discard what was written when the file is closed."""
        self._aborted = True

    def close(self) -> None:
        if self.f is None or getattr(self, "_done", False):
            return
        self._done = True
        if self._aborted:
            self.f.close()
            self.discard()
            return
        try:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()
            os.replace(self.temp, self.path)
        except OSError as exc:
            self.f.close()
            self.discard()
            raise _write_error(self.path, exc) from None

    def discard(self) -> None:
        if os.path.exists(self.temp):
            os.remove(self.temp)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()
        self.close()

    @property
    def closed(self) -> bool:  # io.IOBase consults it
        return self.f is None or self.f.closed


class _AtomicTextWrapper(io.TextIOWrapper):
    """Text-mode wrapper that aborts the underlying atomic file when its block raises."""

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and isinstance(self.buffer, _AtomicLocalFile):
            self.buffer.abort()
        super().__exit__(exc_type, exc, tb)


class AtomicLocalFileSystem(LocalFileSystem):
    """``LocalFileSystem`` whose write-mode ``open`` is atomic (temporary file + rename)."""

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any) -> Any:
        if "w" in mode or "x" in mode:
            path = self._strip_protocol(path)
            try:
                self.makedirs(self._parent(path), exist_ok=True)
            except OSError as exc:
                raise _write_error(path, exc) from None
            return _AtomicLocalFile(path, mode, fs=self, **kwargs)
        return super()._open(path, mode, block_size=block_size, **kwargs)

    def open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "b" not in mode and ("w" in mode or "x" in mode):
            text_kwargs = {k: kwargs.pop(k) for k in ("encoding", "errors", "newline") if k in kwargs}
            raw = super().open(path, mode.replace("t", "") + "b", *args, **kwargs)
            return _AtomicTextWrapper(raw, **text_kwargs)
        return super().open(path, mode, *args, **kwargs)


def install_atomic_local_writes() -> None:
    """Register :class:`AtomicLocalFileSystem` for fsspec's ``file`` and ``local`` protocols.

    Idempotent. Filesystem objects created before the call keep plain writes, so call it before
    the catalog is built (``settings.py`` does).
    """
    for protocol in ("file", "local"):
        fsspec.register_implementation(protocol, AtomicLocalFileSystem, clobber=True)
