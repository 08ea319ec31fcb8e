"""The read-only dataset of a user's (prompt, response) pairs to re-score (docs/rescoring.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from kedro.io import AbstractDataset, DatasetError

from hed.errors import InputDataError


class ResponsePairsDataset(AbstractDataset[None, pd.DataFrame]):
    """A Parquet (``.parquet``) or JSON Lines (``.jsonl``) file of (prompt, response) pairs.

    Catalog entry ``rescoring_user_responses``, read when ``rescoring.reference.source`` is
    ``file``. Columns: ``prompt``, ``response`` [, ``prompt_index``, ``sample_index``]; the
    rescoring node checks them.

    Raises:
        InputDataError: the file is missing, a folder, empty, unreadable or of another format.
    """

    def __init__(self, *, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._filepath = filepath
        self.metadata = metadata

    def load(self) -> pd.DataFrame:
        path = Path(self._filepath)
        what = f"rescoring_user_responses file {path}"
        if not path.is_file():
            raise InputDataError(
                f"{what} does not exist: write your (prompt, response) pairs there or fix "
                "`filepath` of `rescoring_user_responses` in the catalog"
            )
        suffix = path.suffix.lower()
        if suffix not in {".parquet", ".jsonl"}:
            raise InputDataError(f"{what}: unsupported format {suffix!r}; use .parquet or .jsonl")
        try:
            if suffix == ".parquet":
                frame = pd.read_parquet(path)
            else:
                frame = pd.read_json(path, lines=True, dtype=False)
        except Exception as exc:  # any reader failure becomes one line naming the file
            reason = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise InputDataError(f"{what} cannot be read: {reason}") from None
        if frame.empty:
            raise InputDataError(f"{what} has no rows: it needs one response per row")
        return frame

    def save(self, data: None) -> None:
        raise DatasetError(
            f"{self._filepath}: the response pairs are an input, HED never writes them"
        )

    def _exists(self) -> bool:
        return Path(self._filepath).is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath}
