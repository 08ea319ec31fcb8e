"""Freshness: every derived dataset knows what it was computed from (``computed_from``).

When a node's output is saved, :class:`Freshness` records, in a small JSON sidecar under the
data root (``<data_root>/.hed_computed_from/<dataset>.json``), the values it was computed
from: every parameter key of the node's ``params:`` inputs (the keys in
:data:`NOT_AFFECTING` excepted: they change speed, not values) and, transitively, what the
node's dataset inputs were computed from; a pass@1 file named by a ``metrics`` ``path`` key
enters by its content (sha256). Before the first node of a run, :meth:`Freshness.check`
compares, for every dataset the run *reads* (a free input of its pipeline), that record with
the current configuration and files, and refuses a stale input in one line naming the dataset,
what changed and the command that recomputes it (:class:`StaleInputError`). Datasets without a
record (written before HED recorded them, or by a ``gpu`` node: shards carry their own
metadata, compared at aggregation) are not checked.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import fsspec

from hed.errors import ConfigError
from hed.records.atomic_io import atomic_path
from hed.records.object_store import filesystem_of

#: Parameter keys (and key prefixes) that change how fast or in what pieces a result is
#: computed, never its values: a change of these does not make data stale.
NOT_AFFECTING = (
    "generation.batch_size",
    "generation.torch_threads",
    "generation.log_every_s",
    "generation.vllm",
    "aggregation.chunk_records",
    "dynamics.batch_records",
    "rescoring.in_default",
    "rescoring.batch_size",
    "rescoring.chunk_positions",
    "rescoring.torch_threads",
    "mini_rl.torch_threads",
)
#: Keys (``fnmatch`` patterns) that name where an input lies, not what it holds: a checkpoint
#: folder is identified by its fingerprints (``config_sha256``, ``weights_index_sha256`` in the
#: ``checkpoints`` dataset, compared with each shard at aggregation), so a moved folder does
#: not make data stale.
LOCATION_KEYS = ("runs.*.checkpoint_root",)
#: Datasets whose staleness aggregation's shard checks own (docs/running.md, staleness): the
#: shards record their generation parameters, compared with the current ones per shard, with a
#: message naming the shard; ``prompts`` and ``checkpoints`` are reused by design.
CHECKED_ELSEWHERE = ("prompts", "checkpoints")
#: Sidecar folder under the data root.
FOLDER = ".hed_computed_from"
#: Keys whose value is a file HED reads outside the catalog (pass@1 CSV, W&B offline run).
_FILE_KEY_SUFFIXES = (".path", ".dir", ".file")


class StaleInputError(ConfigError):
    """A dataset the run reads was computed from other parameters or files than the current."""


def _affects(key: str) -> bool:
    if any(fnmatch.fnmatchcase(key, pattern) for pattern in LOCATION_KEYS):
        return False
    return not any(key == k or key.startswith(k + ".") for k in NOT_AFFECTING)


def flatten(section: str, value: Any) -> dict[str, Any]:
    """``{"aggregation.top_entropy_frac": 0.2, ...}``: a parameter section as dotted leaves.

    Lists stay whole (JSON values); :data:`NOT_AFFECTING` keys are left out; a ``metrics``
    ``path``/``dir``/``file`` leaf naming a local file or folder adds ``<key>#sha256``.
    """
    out: dict[str, Any] = {}
    if isinstance(value, Mapping) and value:
        for key, child in value.items():
            out.update(flatten(f"{section}.{key}", child))
    elif _affects(section):
        out[section] = value
        if section.startswith("metrics.") and section.endswith(_FILE_KEY_SUFFIXES):
            digest = content_sha256(value)
            if digest is not None:
                out[f"{section}#sha256"] = digest
    return out


def flatten_all(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Every section of ``parameters`` as dotted leaves (:func:`flatten`)."""
    current: dict[str, Any] = {}
    for section, value in parameters.items():
        current.update(flatten(str(section), value))
    return current


def content_sha256(path: Any) -> str | None:
    """sha256 of a local file's bytes, or of a folder's files (relative names and bytes);
    ``None`` when ``path`` is not an existing local path."""
    if not isinstance(path, str) or not path or "://" in path:
        return None
    root = Path(path)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    if not root.exists():
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(root) if file != root else "").encode())
        with file.open("rb") as handle:
            for block in iter(lambda h=handle: h.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


class Freshness:
    """The ``computed_from`` records of one data root, and the check before a run.

    Args:
        data_root: the environment's data root (a local folder or an fsspec URL).
    """

    def __init__(self, data_root: str) -> None:
        self._folder = f"{str(data_root).rstrip('/')}/{FOLDER}"
        self._in_run: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def record_path(self, dataset: str, version: str | None = None) -> str:
        """Where ``dataset``'s record lives: its newest (``<dataset>.json``), or that of one
        saved ``version`` of a versioned dataset (``<dataset>/<version>.json``)."""
        if version is None:
            return f"{self._folder}/{dataset}.json"
        return f"{self._folder}/{dataset}/{version}.json"

    def _read(self, path: str) -> dict[str, Any] | None:
        try:
            with fsspec.open(path, "r", encoding="utf-8") as handle:
                record = json.load(handle)
            return record if isinstance(record.get("computed_from"), dict) else None
        except (FileNotFoundError, OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def load(self, dataset: str) -> dict[str, Any] | None:
        """``dataset``'s ``computed_from`` (this run's, else the sidecar's), or ``None``."""
        if dataset in self._in_run:
            return self._in_run[dataset]
        record = self._read(self.record_path(dataset))
        return None if record is None else record["computed_from"]

    def load_version(self, dataset: str, version: str | None) -> tuple[dict | None, str | None]:
        """The record of the version of ``dataset`` a run would load.

        Args:
            dataset: a dataset name.
            version: the version the run would load (None: unversioned, or not known).

        Returns:
            ``(computed_from, None)``; or ``(None, newest)`` when the newest record is of
            another version (``newest``) and ``version`` has none of its own (written before
            HED recorded versions, or by a run that did not record it); ``(None, None)`` when
            the dataset has no record.
        """
        record = self._read(self.record_path(dataset))
        if record is None:
            return None, None
        recorded = record.get("version")
        if version is None or recorded is None or recorded == version:
            return record["computed_from"], None
        own = self._read(self.record_path(dataset, version))
        return (own["computed_from"], None) if own is not None else (None, str(recorded))

    def node_ran(self, node: Any, parameters: Mapping[str, Any]) -> None:
        """Note what each of ``node``'s outputs was computed from (kept until saved).

        Args:
            node: the Kedro node that ran (its ``inputs`` and ``outputs`` names).
            parameters: the run's raw parameters (Kedro's ``parameters``): a ``params:x.y``
                input is recorded from there, as configured (nodes may get a typed section).
        """
        computed: dict[str, Any] = {}
        for name in node.inputs:
            if name.startswith("params:"):
                path = name.removeprefix("params:")
                value: Any = parameters
                for part in path.split("."):
                    value = value.get(part) if isinstance(value, Mapping) else None
                computed.update(flatten(path, value))
            else:
                computed.update(self.load(name) or {})
        with self._lock:
            for output in node.outputs:
                self._in_run[output] = computed

    def saved(self, dataset: str, version: str | None = None) -> None:
        """Write ``dataset``'s record (after its save: the record follows the data).

        Args:
            dataset: the dataset saved.
            version: its save version (a versioned dataset): recorded in the newest record
                and kept as that version's own record, so that a run that loads an older
                version (``--load-versions``, or the newest deleted) compares that one's.
        """
        computed = self._in_run.get(dataset)
        if computed is None:
            return
        record = {"dataset": dataset, "computed_from": computed}
        if version is not None:
            record["version"] = version
        text = json.dumps(record, default=str, indent=1)
        targets = [self.record_path(dataset)]
        if version is not None:
            targets.insert(0, self.record_path(dataset, version))
        for target in targets:
            if "://" not in target:  # a local data root: temporary file + rename
                with atomic_path(target) as temp:
                    Path(temp).write_text(text, encoding="utf-8")
                continue
            fs, bare = filesystem_of(target)  # object stores upload a whole object
            fs.makedirs(bare.rsplit("/", 1)[0], exist_ok=True)
            with fs.open(bare, "w", encoding="utf-8") as handle:
                handle.write(text)

    def agree(self, datasets: Iterable[str], keys: Iterable[str], parameters: Mapping) -> bool:
        """Whether every one of ``datasets`` has a record whose ``keys`` equal the current
        parameters (e.g. the merged records: then their shards were sampled with them)."""
        current = flatten_all(parameters)
        for dataset in datasets:
            recorded = self.load(dataset)
            if recorded is None or any(
                _jsonable(recorded.get(k, _MISSING)) != _jsonable(current.get(k, _MISSING))
                for k in keys
            ):
                return False
        return True

    def check(
        self,
        reads: Iterable[str],
        parameters: Mapping[str, Any],
        command: Callable[[str, list[str]], str],
        load_version: Callable[[str], str | None] = lambda _: None,
        skip: tuple[str, ...] = CHECKED_ELSEWHERE,
    ) -> None:
        """Refuse to start when a dataset the run reads is stale.

        Args:
            reads: the datasets the run loads without producing them (its free inputs).
            parameters: the run's parameters (every section, ``--params`` merged).
            command: ``(dataset, changed keys) -> the kedro run command that recomputes it``
                (e.g. :func:`hed.core.command_line.update_command` of the pipelines that
                write it and those downstream).
            load_version: the version of a dataset the run would load (None: unversioned).
            skip: datasets not checked (a run: :data:`CHECKED_ELSEWHERE`; a notebook's load
                checks them too).

        Raises:
            StaleInputError: one line: the dataset, the first difference (recorded value,
                current value), how many more, and the ``kedro run`` that recomputes it; or
                the version it would load is not the one recorded and has no record of its
                own (an older version: pinned, or the newest deleted).
        """
        current = flatten_all(parameters)
        for dataset in sorted(reads):
            if dataset.startswith("params:") or dataset in ("parameters", *skip):
                continue
            version = load_version(dataset)
            recorded, newest = self.load_version(dataset, version)
            if newest is not None:
                raise StaleInputError(
                    f"{dataset}: the run would load version {version}, but what it was "
                    f"computed from is recorded for version {newest} only (an older version: "
                    f"pinned with --load-versions, or the newer deleted); recompute it with "
                    f"`{command(dataset, [])}`, or pin {dataset}:{newest}"
                )
            changed = [
                key
                for key, value in (recorded or {}).items()
                if _affects(key.removesuffix("#sha256"))
                and _jsonable(current.get(key, _MISSING)) != _jsonable(value)
            ]
            if changed:
                raise StaleInputError(
                    _stale_message(dataset, recorded or {}, current, changed, command)
                )


_MISSING = "<unset>"


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _stale_message(
    dataset: str,
    recorded: Mapping[str, Any],
    current: Mapping[str, Any],
    changed: list[str],
    command: Callable[[str, list[str]], str],
) -> str:
    key = changed[0]
    now = current.get(key, _MISSING)
    if key.endswith("#sha256"):
        path = recorded.get(key.removesuffix("#sha256"))
        what = f"{path} ({key.removesuffix('#sha256')}) has changed since"
    else:
        what = f"{key} was {recorded[key]!r} then, is {now!r} now"
    # putting back means every difference: the parameters' old values, then the files
    values = [f"{k}: {recorded[k]!r}" for k in changed if not k.endswith("#sha256")]
    files = [k for k in changed if k.endswith("#sha256")]
    fix_back = f"or set {', '.join(values)}" if values else ""
    if files:
        restore = "restore the file" if len(files) == 1 else f"restore the {len(files)} files"
        fix_back = f"{fix_back} and {restore}" if fix_back else f"or {restore}"
    more = f" (and {len(changed) - 1} more difference(s))" if len(changed) > 1 else ""
    return (
        f"{dataset} is stale: it was computed before a change: {what}{more}; "
        f"bring it up to date with `{command(dataset, changed)}`, {fix_back}"
    )
