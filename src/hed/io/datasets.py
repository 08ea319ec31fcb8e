"""Kedro datasets HED needs beyond kedro-datasets.

* :class:`ArrowParquetDataset` — token records. A step holds 10–50 million rows, so loading
  returns a lazy :class:`pyarrow.dataset.Dataset` (read only the columns you need, stream
  batches) and saving accepts a stream of record batches, written with pyarrow's
  ``ParquetWriter``. Files are written under a temporary name and renamed into place when
  complete, so a killed process never leaves a file that ``exists()`` or a later load takes
  for complete.
* :class:`PromptFileDataset` — a prompt file in JSON Lines or Parquet, read with pandas;
  empty or unreadable files give a one-line error naming the file.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path, PurePosixPath
from typing import Any

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from kedro.io.core import (
    AbstractDataset,
    AbstractVersionedDataset,
    DatasetError,
    Version,
    VersionNotFoundError,
)

from hed.errors import InputDataError, one_line
from hed.io.publishing import publish, published_manifests
from hed.records.object_store import (
    LOCAL_PROTOCOLS,
    filesystem_of,
    is_remote,
    split_url,
    upload_atomically,
    url_of,
    with_atomic_writes,
)
from hed.records.parquet_files import (  # noqa: F401 - re-exported (tests, notebooks)
    TableLike,
    write_parquet_atomically,
)

logger = logging.getLogger(__name__)


class ArrowParquetDataset(AbstractVersionedDataset[Any, ds.Dataset]):
    """Versioned Parquet dataset for large record tables (token records, merged records).

    ``load()`` returns a lazy ``pyarrow.dataset.Dataset``: use
    ``.to_table(columns=[...]).to_pandas()`` in a notebook, ``.to_batches(columns=[...])`` to
    stream. ``save(data)`` accepts a ``pa.Table``, ``pd.DataFrame`` or an iterable of tables or
    record batches and writes them atomically (:func:`write_parquet_atomically`).

    Example catalog entry::

        "{run}.step_{step}.token_records":
          type: hed.io.datasets.ArrowParquetDataset
          filepath: data/03_primary/token_records/{run}/step_{step}.parquet
          schema: merged_token_records
          versioned: true

    Args:
        filepath: path of the Parquet file: local, or a URL on an object store
            (``s3://bucket/...``, ``gs://...``; the file is then built locally and uploaded in
            one PUT, which the store makes atomic).
        schema: optional name of a schema in :mod:`hed.records.schema` (``token_records``,
            ``merged_token_records``, ``sequences``); rows are cast to it on save.
        save_args: passed to ``pyarrow.parquet.ParquetWriter``.
        version: Kedro version (set by the catalog when ``versioned: true``).
        credentials: passed to the fsspec filesystem (as in kedro-datasets).
        fs_args: passed to the fsspec filesystem (e.g. ``client_kwargs: {endpoint_url: ...}``).
        metadata: free-form metadata (e.g. the kedro-viz layer).
    """

    def __init__(
        self,
        *,
        filepath: str,
        schema: str | None = None,
        save_args: dict[str, Any] | None = None,
        version: Version | None = None,
        credentials: dict[str, Any] | None = None,
        fs_args: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        protocol, path = split_url(filepath)
        self._protocol = protocol
        self._storage_options = {**(credentials or {}), **(fs_args or {})}
        self._fs = with_atomic_writes(fsspec.filesystem(protocol, **self._storage_options))
        self._schema_name = schema
        self._save_args = dict(save_args or {})
        self.metadata = metadata
        if not is_remote(filepath):
            path = Path(path).absolute().as_posix()
        super().__init__(
            filepath=PurePosixPath(path),
            version=version,
            exists_function=self._fs.exists,
            glob_function=self._fs.glob,
        )

    @property
    def schema(self) -> pa.Schema | None:
        """The Arrow schema rows are cast to on save, or None."""
        if self._schema_name is None:
            return None
        from hed.records import schema as schemas

        return {
            "token_records": schemas.TOKEN_RECORD_SCHEMA,
            "merged_token_records": schemas.MERGED_TOKEN_RECORD_SCHEMA,
            "sequences": schemas.SEQUENCE_SCHEMA,
        }[self._schema_name]

    @property
    def load_path(self) -> str:
        """The resolved path (a URL on an object store) of the version that ``load()`` reads."""
        return url_of(self._protocol, self._get_load_path())

    def _arrow_filesystem(self) -> Any:
        """The dataset's filesystem for pyarrow: its own local one, or fsspec's wrapped."""
        if self._protocol in LOCAL_PROTOCOLS:
            return None
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        return PyFileSystem(FSSpecHandler(self._fs))

    def load(self) -> ds.Dataset:
        try:
            path = self.load_path
        except VersionNotFoundError:
            raise InputDataError(
                f"{url_of(self._protocol, self._filepath)} has no version (no folder "
                f"<timestamp>/{self._filepath.name} in it): run the pipeline that writes it "
                "(`kedro run --pipelines generation` or `--pipelines aggregation`)"
            ) from None
        bare = split_url(path)[1]
        if not self._fs.exists(bare):
            raise InputDataError(
                f"{path} does not exist: run the pipeline that writes it "
                "(`kedro run --pipelines generation` or `--pipelines aggregation`)"
            )
        try:
            return ds.dataset(bare, format="parquet", filesystem=self._arrow_filesystem())
        except (pa.ArrowInvalid, OSError) as exc:
            reason = one_line(exc, limit=None)
            raise InputDataError(
                f"{path}: not a readable Parquet file ({reason}); delete it and rerun"
            ) from None

    def save(self, data: Any) -> None:
        path = str(self._get_save_path())
        if self._protocol in LOCAL_PROTOCOLS:
            write_parquet_atomically(path, data, schema=self.schema, **self._save_args)
            return
        # an object store: the file is built locally, then PUT whole (atomic on the store)
        upload_atomically(
            self._fs,
            path,
            lambda local: write_parquet_atomically(
                local, data, schema=self.schema, **self._save_args
            ),
        )
        self._invalidate_cache()

    def _exists(self) -> bool:
        """Whether the version to load is there *and* a complete Parquet file.

        HED writes atomically, so an incomplete file (truncated, half-copied) can only come
        from elsewhere; it counts as missing, with a warning naming it, so that
        ``--only-missing-outputs`` runs the node that writes it again (into a new version;
        the bad file is left in place, and a plain load of it still fails naming it).
        """
        try:
            path = self._get_load_path()
        except DatasetError:
            return False
        if not self._fs.exists(str(path)):
            return False
        try:
            with self._fs.open(str(path), "rb") as handle:
                pq.read_metadata(handle)
        except (pa.ArrowInvalid, OSError) as exc:
            reason = one_line(exc, limit=None)
            logger.warning(
                "%s is not a complete Parquet file (%s): HED never leaves one, so it was "
                "copied or written by something else; it counts as missing and is written "
                "again by the node that makes it",
                url_of(self._protocol, path),
                reason,
            )
            return False
        return True

    def _describe(self) -> dict[str, Any]:
        return {
            "filepath": url_of(self._protocol, self._filepath),
            "version": self._version,
            "schema": self._schema_name,
        }

    def _release(self) -> None:
        super()._release()
        self._invalidate_cache()

    def _invalidate_cache(self) -> None:
        self._fs.invalidate_cache(str(self._filepath))


def _first_bad_json_line(path: str) -> str | None:
    """``line N, column C is not valid JSON (<problem>)`` for a JSON Lines file's first bad line."""
    try:
        with fsspec.open(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    json.loads(line.rstrip("\r\n"))
                except json.JSONDecodeError as exc:
                    problem = exc.msg.removesuffix(" at").removesuffix(" starting")
                    return f"line {number}, column {exc.colno} is not valid JSON ({problem})"
    except (OSError, UnicodeDecodeError):
        return None
    return None


class PromptFileDataset(AbstractDataset[None, pd.DataFrame]):
    """Read-only prompt file: JSON Lines (``.jsonl``/``.json``) or Parquet (``.parquet``).

    The loaded DataFrame gets a ``source_file`` column with the path as configured.

    Raises:
        InputDataError: the file is missing, empty, unreadable or of another format.
    """

    def __init__(
        self,
        *,
        filepath: str,
        credentials: dict[str, Any] | None = None,
        fs_args: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self._filepath = filepath
        self._storage_options = {**(credentials or {}), **(fs_args or {})}
        self.metadata = metadata

    def load(self) -> pd.DataFrame:
        path = self._filepath
        fs, bare = filesystem_of(path, **self._storage_options)
        if fs.isdir(bare):
            raise InputDataError(
                f"prompt file {path} is a folder: set `filepath` of `raw_prompts` in the catalog "
                "to a .jsonl or .parquet file"
            )
        if not fs.isfile(bare):
            raise InputDataError(
                f"prompt file {path} does not exist: fix `filepath` of `raw_prompts` in the catalog"
            )
        if fs.size(bare) == 0:
            raise InputDataError(f"prompt file {path} is empty: it needs one problem per row")
        suffix = PurePosixPath(bare).suffix.lower()
        options = {"storage_options": self._storage_options} if is_remote(path) else {}
        try:
            if suffix in {".jsonl", ".json"}:
                frame = pd.read_json(path, lines=suffix == ".jsonl", dtype=False, **options)
            elif suffix == ".parquet":
                frame = pd.read_parquet(path, **options)
            else:
                raise InputDataError(
                    f"prompt file {path}: unsupported format {suffix!r}; use .jsonl or .parquet"
                )
        except InputDataError:
            raise
        except Exception as exc:
            if isinstance(exc, UnicodeDecodeError):
                reason = f"not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
            else:
                reason = (suffix == ".jsonl" and _first_bad_json_line(path)) or one_line(
                    exc, limit=None
                )
            raise InputDataError(f"prompt file {path} cannot be read: {reason}") from None
        if frame.empty:
            raise InputDataError(f"prompt file {path} has no rows: it needs one problem per row")
        frame = frame.assign(source_file=str(self._filepath))
        if suffix == ".jsonl":  # 1-based line of each row, as editors number them (blank lines
            # are skipped by the reader, so row + 1 is not the line)
            with fs.open(bare, "rb") as file:
                lines = [n for n, line in enumerate(file, 1) if line.strip()]
            if len(lines) == len(frame):
                frame = frame.assign(source_line=lines)
        return frame

    def save(self, data: None) -> None:
        raise DatasetError(f"{self._filepath}: the prompt file is an input, HED never writes it")

    def _exists(self) -> bool:
        fs, bare = filesystem_of(self._filepath, **self._storage_options)
        return fs.isfile(bare)

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath}


class PublishedArtifactsDataset(AbstractDataset[dict[str, Any], dict[str, Any]]):
    """Final figures, tables and config of each environment, under ``<filepath>/<env>/``.

    ``filepath`` is a folder (``filepath``, so that Kedro makes a relative one absolute against
    the project root, as for every file dataset).

    ``save(plan)`` takes the ``publish`` node's plan::

        {"env": "qae_repro", "project_path": "/abs/project", "source": {"env", "run_id"},
         "files": {"<file name>": {"dataset": "<catalog name>", "path": "<file to copy>",
                                   "version": "<load version>"}}}

    and copies each file byte for byte (atomically, :func:`hed.io.publishing.publish`) to
    ``<filepath>/<env>/<file name>``, then
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
        publish(data, self._root)

    def load(self) -> dict[str, Any]:
        return published_manifests(self._root)

    def _exists(self) -> bool:
        return self._root.is_dir()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._root)}


class ShardPartsDataset(AbstractDataset[None, Any]):
    """The partial area of one shard (:class:`hed.records.shard_parts.ShardParts`), as a node input.

    ``load()`` returns a :class:`~hed.records.shard_parts.ShardParts` for the folder (which need not
    exist yet); the generation node keeps and writes finished sequences through it, so the
    node itself does no file I/O and the area's location is set here, in the catalog, beside
    the shard's own files. Nothing is ever saved through the dataset.

    Example catalog entry::

        "{run}.step_{step}.shard_{shard}.partial":
          type: hed.io.datasets.ShardPartsDataset
          filepath: data/02_intermediate/token_records/{run}/step_{step}/.partial/shard_{shard}
    """

    def __init__(self, *, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = filepath
        self.metadata = metadata

    def load(self) -> Any:
        from hed.records.shard_parts import ShardParts

        return ShardParts(Path(self._filepath).absolute())

    def save(self, data: Any) -> None:
        raise DatasetError(
            f"{self._filepath}: a shard's partial area is written by the generation node "
            "through the loaded ShardParts, never saved"
        )

    def _exists(self) -> bool:
        return True  # an empty area is a valid input: nothing kept yet

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath}
