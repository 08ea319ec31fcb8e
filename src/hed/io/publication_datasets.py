"""Catalog datasets that publish a study outside the project: a W&B run, a Hub commit.

Saving one of them publishes (:func:`hed.io.wandb_publish.log_study`,
:func:`hed.io.hub_publish.publish_to_hub`) and then writes a small JSON receipt at
``filepath`` (where the study went: run URL or offline folder, commit URL); loading returns
the latest receipt. The publish nodes stay pure: they return what to publish, and the upload
(the side effect) happens here, in the catalog, as for every file HED writes.

Example catalog entry::

    wandb_publication:
      type: hed.io.publication_datasets.WandbRunDataset
      filepath: ${globals:data_root}/08_reporting/publications/wandb.json
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

from kedro.io.core import AbstractDataset, DatasetError

from hed.records.atomic_io import atomic_path

logger = logging.getLogger(__name__)

#: A W&B run's local folder: ``offline-run-<time>-<id>`` or ``run-<time>-<id>``.
_RUN_FOLDER_RE = re.compile(r"^(offline-)?run-\d{8}_\d{6}-[A-Za-z0-9_-]+$")


class _ReceiptDataset(AbstractDataset[dict[str, Any], dict[str, Any]]):
    def __init__(self, *, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = Path(filepath)
        self.metadata = metadata

    def _publish(self, data: dict[str, Any]) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def save(self, data: dict[str, Any]) -> None:
        """Publish ``{"bundle": StudyBundle, "settings": <destination params>}``, then write
        the receipt (``{"study", "run_id", **what the destination returned}``)."""
        result = self._publish(data)
        bundle = data["bundle"]
        receipt = {"study": bundle.study, "run_id": bundle.run_id, **result}
        self._filepath.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self._filepath) as temp:
            temp.write_text(json.dumps(receipt, indent=2) + "\n", encoding="utf-8")

    def load(self) -> dict[str, Any]:
        """The latest receipt.

        Raises:
            DatasetError: nothing was published yet from this data root.
        """
        try:
            return json.loads(self._filepath.read_text(encoding="utf-8"))
        except OSError:
            raise DatasetError(
                f"{self._filepath}: nothing published yet (`kedro run --pipelines publish`)"
            ) from None

    def _exists(self) -> bool:
        return self._filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}


class WandbRunDataset(_ReceiptDataset):
    """Saving logs the study to a W&B run (:func:`hed.io.wandb_publish.log_study`).

    While a run is open its local folder is noted in ``<receipt>.attempt.json`` beside the
    receipt; a publish killed before the receipt leaves that note, and the next save removes
    the folder it names (a W&B run folder of that killed attempt, holding no study) and lists
    it in the receipt under ``removed_attempts``.
    """

    @property
    def _attempt(self) -> Path:
        return self._filepath.with_name(f"{self._filepath.stem}.attempt.json")

    def _publish(self, data: dict[str, Any]) -> dict[str, Any]:
        from hed.io.wandb_publish import log_study

        removed = self._remove_killed_attempt()

        def note(run_dir: str) -> None:
            self._attempt.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(self._attempt) as temp:
                temp.write_text(json.dumps({"run_dir": run_dir}) + "\n", encoding="utf-8")

        result = log_study(data["bundle"], data["settings"], on_open=note)
        self._attempt.unlink(missing_ok=True)
        return {**result, "removed_attempts": removed}

    def _remove_killed_attempt(self) -> list[str]:
        """Remove the W&B run folder an earlier, killed save noted; return it (or [])."""
        try:
            run_dir = Path(json.loads(self._attempt.read_text(encoding="utf-8"))["run_dir"])
        except (OSError, ValueError, KeyError, TypeError):
            return []
        if not (_RUN_FOLDER_RE.match(run_dir.name) and run_dir.is_dir()):
            self._attempt.unlink(missing_ok=True)
            return []
        shutil.rmtree(run_dir)
        self._attempt.unlink(missing_ok=True)
        logger.info("W&B: removed %s, the run folder of a publish that was killed", run_dir)
        return [str(run_dir)]


class HubCommitDataset(_ReceiptDataset):
    """Saving commits the study to a Hub dataset repo in one commit
    (:func:`hed.io.hub_publish.publish_to_hub`)."""

    def _publish(self, data: dict[str, Any]) -> dict[str, Any]:
        from hed.io.hub_publish import publish_to_hub

        return publish_to_hub(data["bundle"], data["settings"])
