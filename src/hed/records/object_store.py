"""Object stores (``s3://``, ``gs://``) as HED writes to them: URLs, filesystems, atomic uploads.

A data root may be an object-store URL (``s3://bucket/hed``, ``gs://...``): kedro-datasets open
it through fsspec (s3fs, gcsfs). An object PUT is atomic: the object appears complete when the
upload ends, or not at all (an interrupted multipart upload is never listed), so an object store
needs no temporary name. HED's own writers that build a file piece by piece
(:func:`upload_atomically`) write a local temporary file (:mod:`hed.records.atomic_io`) and
upload it once it is complete. The datasets of a run get an object-store filesystem whose
write-mode files abort when their ``with`` block raises (:func:`make_dataset_writes_atomic`, from
``hed.hooks.AtomicWritesHooks``), so such a write leaves no object. Like the local atomic
writes, this is scoped to HED's datasets: fsspec's ``s3``/``gs`` protocols stay s3fs's and
gcsfs's own classes for every other library in the process (pandas, transformers, vLLM).
"""

from __future__ import annotations

import os
import shutil
from pathlib import PurePath
from typing import Any

import fsspec

from hed.records.atomic_io import (
    AtomicTextWrapper,
    atomic_filesystem,
    owned_temporary_folder,
    write_error,
)

# ------------------------------------------------------------------ object stores (fsspec URLs)
#
# A data root may be an object-store URL (``s3://bucket/hed``, ``gs://...``): kedro-datasets
# open it through fsspec (s3fs, gcsfs). An object PUT is atomic: the object appears complete when
# the upload ends, or not at all (an interrupted multipart upload is never listed), so an
# object store needs no temporary name. HED's own writers that build a file piece by piece
# (:func:`upload_atomically`) write a local temporary file and upload it once it is complete.

LOCAL_PROTOCOLS = ("file", "local")


def split_url(path: str | os.PathLike) -> tuple[str, str]:
    """``(protocol, path)`` of a local path or URL: ``s3://b/k`` → ``("s3", "b/k")``.

    A local path (absolute or relative) gives ``("file", path)``, as kedro-datasets see it.
    """
    from kedro.io.core import get_protocol_and_path

    return get_protocol_and_path(str(path))


def is_remote(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a URL of a filesystem other than the local one (``s3://``, ``gs://``)."""
    return split_url(path)[0] not in LOCAL_PROTOCOLS


def url_of(protocol: str, path: str | os.PathLike) -> str:
    """The full URL of ``path`` on ``protocol`` (a local path stays as it is)."""
    path = str(path)
    return path if protocol in LOCAL_PROTOCOLS else f"{protocol}://{path}"


def filesystem_of(path: str | os.PathLike, **storage_options: Any) -> tuple[Any, str]:
    """The fsspec filesystem of ``path`` and the path on it (without the protocol).

    Args:
        path: a local path or a URL (``s3://bucket/key``).
        **storage_options: passed to the filesystem (kedro-datasets' ``credentials`` and
            ``fs_args``, e.g. ``client_kwargs: {endpoint_url: ...}``).
    """
    protocol, bare = split_url(path)
    return with_atomic_writes(fsspec.filesystem(protocol, **storage_options)), bare


def upload_atomically(fs: Any, remote_path: str, write: Any, suffix: str = "") -> Any:
    """Build a file locally with ``write(local_path)``, then PUT it at ``remote_path``.

    Nothing appears at ``remote_path`` unless ``write`` returned and the upload completed; the
    local scratch folder (``hed-upload-<host>-<pid>-…`` in the temporary directory) is removed
    either way, and one left by a killed process is removed by the next upload on this host.

    Args:
        fs: the fsspec filesystem of ``remote_path``.
        remote_path: the object's path on ``fs`` (without the protocol).
        write: ``write(local_path: str) -> result``, e.g. a Parquet writer.
        suffix: file name suffix of the local file.

    Returns:
        What ``write`` returned.

    Raises:
        OutputWriteError: the upload failed (names the URL and the reason).
    """
    folder = owned_temporary_folder("hed-upload-")
    try:
        local = str(folder / (PurePath(remote_path).name + suffix))
        result = write(local)
        try:
            fs.put_file(local, remote_path)
        except OSError as exc:
            raise write_error(url_of(_protocol_name(fs), remote_path), exc) from None
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _protocol_name(fs: Any) -> str:
    protocol = fs.protocol
    return protocol[0] if isinstance(protocol, tuple | list) else protocol


class _AbortableObjectFile:
    """Mixin of an object store's write-mode file: an exception in its ``with`` block aborts it.

    fsspec's buffered files (s3fs, gcsfs) upload what was written when they are closed, also
    when the block that wrote them raised: a dataset that failed half-way through
    ``json.dump`` or ``savefig`` would leave half an object. Here such a file is discarded
    (``discard()``: the buffer dropped, a multipart upload aborted) and nothing is uploaded.
    """

    def abort(self) -> None:
        """Discard what was written; nothing is uploaded."""
        if not self.closed:
            self.discard()
            self.closed = True

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


_ABORTABLE: dict[type, type] = {}


def _abortable(file: Any) -> Any:
    cls = type(file)
    if cls not in _ABORTABLE:
        _ABORTABLE[cls] = type(f"Abortable{cls.__name__}", (_AbortableObjectFile, cls), {})
    file.__class__ = _ABORTABLE[cls]
    return file


class _AtomicObjectWrites:
    """Mixin of an object store's filesystem: write-mode files abort on an exception."""

    def open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        writing = "w" in mode or "x" in mode
        if writing and "b" not in mode:
            text_kwargs = {
                k: kwargs.pop(k) for k in ("encoding", "errors", "newline") if k in kwargs
            }
            raw = self.open(path, mode.replace("t", "") + "b", *args, **kwargs)
            return AtomicTextWrapper(raw, **text_kwargs)
        file = super().open(path, mode, *args, **kwargs)
        return _abortable(file) if writing and hasattr(file, "discard") else file


_ATOMIC_OBJECT_STORES: dict[str, type] = {}

#: fsspec protocol → (module, class) of the object stores whose writes are made abortable.
OBJECT_STORES = {
    "s3": ("s3fs", "S3FileSystem"),
    "s3a": ("s3fs", "S3FileSystem"),
    "gs": ("gcsfs", "GCSFileSystem"),
    "gcs": ("gcsfs", "GCSFileSystem"),
}


def atomic_object_store(protocol: str) -> type:
    """The filesystem class of ``protocol`` (``s3``, ``gs``) with abortable writes (cached)."""
    module, name = OBJECT_STORES[protocol]
    key = f"{module}.{name}"
    if key not in _ATOMIC_OBJECT_STORES:
        import importlib

        base = getattr(importlib.import_module(module), name)
        _ATOMIC_OBJECT_STORES[key] = type(f"Atomic{name}", (_AtomicObjectWrites, base), {})
    return _ATOMIC_OBJECT_STORES[key]


def __getattr__(name: str) -> Any:
    # pickle (a dataset sent to a `gpu` node's process) finds the class by its dotted name:
    # hed.records.object_store.AtomicS3FileSystem
    for protocol, (_, base) in OBJECT_STORES.items():
        if name == f"Atomic{base}":
            return atomic_object_store(protocol)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def with_atomic_writes(fs: Any) -> Any:
    """``fs`` as HED's datasets write through it, without touching fsspec's registry.

    A plain local filesystem becomes an :class:`~hed.records.atomic_io.AtomicLocalFileSystem`
    (temporary file + rename); an object store's (s3fs, gcsfs: :data:`OBJECT_STORES`) becomes an
    instance of :func:`atomic_object_store`'s subclass with the same options, whose write-mode
    files abort when their ``with`` block raises. Any other filesystem, or one already atomic,
    is returned as it is. ``fs`` itself (perhaps fsspec's cached instance, shared with other
    libraries) is never changed.
    """
    fs = atomic_filesystem(fs)
    cls = type(fs)
    for protocol, (module, name) in OBJECT_STORES.items():
        if cls.__name__ == name and cls.__module__.partition(".")[0] == module:
            return atomic_object_store(protocol)(*fs.storage_args, **fs.storage_options)
    return fs


def make_dataset_writes_atomic(dataset: Any) -> bool:
    """Give one catalog dataset HED's atomic writes (:func:`with_atomic_writes`).

    kedro-datasets' file datasets (pandas, json, text, matplotlib, ...) and HED's own keep their
    fsspec filesystem in ``_fs`` and save through ``self._fs.open``: a local or object-store one
    is replaced by its atomic counterpart (an instance: it pickles with the dataset into a
    ``gpu`` node's process). Datasets without ``_fs`` (memory, shared memory) are left alone.

    Returns:
        True when the dataset's filesystem was replaced.
    """
    fs = getattr(dataset, "_fs", None)
    atomic = with_atomic_writes(fs)
    if fs is None or atomic is fs:
        return False
    dataset._fs = atomic
    return True
