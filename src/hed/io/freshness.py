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

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import fsspec

from hed.errors import ConfigError
from hed.records.atomic_io import atomic_path

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

    def record_path(self, dataset: str) -> str:
        """Where ``dataset``'s record lives."""
        return f"{self._folder}/{dataset}.json"

    def load(self, dataset: str) -> dict[str, Any] | None:
        """``dataset``'s ``computed_from`` (this run's, else the sidecar's), or ``None``."""
        if dataset in self._in_run:
            return self._in_run[dataset]
        try:
            with fsspec.open(self.record_path(dataset), "r", encoding="utf-8") as handle:
                return json.load(handle)["computed_from"]
        except (FileNotFoundError, OSError, ValueError, KeyError, TypeError):
            return None

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

    def saved(self, dataset: str) -> None:
        """Write ``dataset``'s record (after its save: the record follows the data)."""
        computed = self._in_run.get(dataset)
        if computed is None:
            return
        text = json.dumps({"dataset": dataset, "computed_from": computed}, default=str, indent=1)
        target = self.record_path(dataset)
        if "://" not in target:  # a local data root: temporary file + rename
            with atomic_path(target) as temp:
                Path(temp).write_text(text, encoding="utf-8")
            return
        fs, _ = fsspec.core.url_to_fs(self._folder)  # object stores upload a whole object
        fs.makedirs(self._folder, exist_ok=True)
        with fsspec.open(target, "w", encoding="utf-8") as handle:
            handle.write(text)

    def check(self, reads: Iterable[str], parameters: Mapping[str, Any], producers: Any) -> None:
        """Refuse to start when a dataset the run reads is stale.

        Args:
            reads: the datasets the run loads without producing them (its free inputs).
            parameters: the run's parameters (every section, ``--params`` merged).
            command: ``dataset -> the kedro run command that recomputes it`` (e.g.
                :func:`hed.core.command_line.update_command` of the pipelines that write it).

        Raises:
            StaleInputError: one line: the dataset, the first difference (recorded value,
                current value), how many more, and the ``kedro run`` that recomputes it.
        """
        current: dict[str, Any] = {}
        for section, value in parameters.items():
            current.update(flatten(str(section), value))
        for dataset in sorted(reads):
            if dataset.startswith("params:") or dataset in ("parameters", *CHECKED_ELSEWHERE):
                continue
            recorded = self.load(dataset)
            if not recorded:
                continue
            changed = [
                key
                for key, value in recorded.items()
                if _jsonable(current.get(key, _MISSING)) != _jsonable(value)
            ]
            if changed:
                raise StaleInputError(
                    _stale_message(dataset, recorded, current, changed, producers)
                )


_MISSING = "<unset>"


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _stale_message(
    dataset: str,
    recorded: Mapping[str, Any],
    current: Mapping[str, Any],
    changed: list[str],
    command: Callable[[str], str],
) -> str:
    key = changed[0]
    now = current.get(key, _MISSING)
    if key.endswith("#sha256"):
        path = recorded.get(key.removesuffix("#sha256"))
        what = f"{path} ({key.removesuffix('#sha256')}) has changed since"
        fix_back = "or restore the file"
    else:
        what = f"{key} was {recorded[key]!r} then, is {now!r} now"
        fix_back = f"or set {key}: {recorded[key]!r}"
    more = f" (and {len(changed) - 1} more difference(s))" if len(changed) > 1 else ""
    return (
        f"{dataset} is stale: it was computed before a change: {what}{more}; "
        f"bring it up to date with `{command(dataset)}`, {fix_back}"
    )
