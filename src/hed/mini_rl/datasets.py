"""``TaskSetDataset``: a mini-RL task set as a JSON Lines file that HED's prompt reader also reads.

The held-out validation set of the ``mini_dapo`` environment is ``raw_prompts``, the prompt
file of the generation pipeline, so HED analyses the checkpoints on exactly the problems the
training validated on. :class:`hed.io.datasets.PromptFileDataset` is read-only (users' prompt
files are inputs); this subclass adds ``save`` for the files the ``mini_rl`` pipeline writes.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hed.errors import InputDataError
from hed.io.datasets import PromptFileDataset
from hed.mini_rl.tasks import TASK_COLUMNS
from hed.records.atomic_io import atomic_path


class TaskSetDataset(PromptFileDataset):
    """JSON Lines task set (``problem_index, problem, answer, kind``); loads like a prompt file.

    ``load`` returns the rows plus ``source_file`` (see :class:`PromptFileDataset`); ``save``
    writes the task columns atomically (temporary file, then rename).
    """

    def load(self) -> pd.DataFrame:
        """Read the task set like a prompt file.

        Raises:
            InputDataError: the file is not there yet (the ``mini_rl`` pipeline writes it),
                or any error of :meth:`PromptFileDataset.load`.
        """
        path = Path(self._filepath)
        if not path.exists():
            raise InputDataError(
                f"task set {path} does not exist yet: the mini_rl pipeline writes it; run "
                "`kedro run --env mini_dapo` (or `--pipelines mini_rl`) first"
            )
        return super().load()

    def save(self, data: pd.DataFrame) -> None:  # type: ignore[override]
        with atomic_path(self._filepath) as temp:
            data[TASK_COLUMNS].to_json(temp, orient="records", lines=True, force_ascii=False)
