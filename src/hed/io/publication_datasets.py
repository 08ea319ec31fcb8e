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
from pathlib import Path
from typing import Any

from kedro.io.core import AbstractDataset, DatasetError

from hed.records.atomic_io import atomic_path


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
    """Saving logs the study to a W&B run (:func:`hed.io.wandb_publish.log_study`)."""

    def _publish(self, data: dict[str, Any]) -> dict[str, Any]:
        from hed.io.wandb_publish import log_study

        return log_study(data["bundle"], data["settings"])


class HubCommitDataset(_ReceiptDataset):
    """Saving commits the study to a Hub dataset repo in one commit
    (:func:`hed.io.hub_publish.publish_to_hub`)."""

    def _publish(self, data: dict[str, Any]) -> dict[str, Any]:
        from hed.io.hub_publish import publish_to_hub

        return publish_to_hub(data["bundle"], data["settings"])
