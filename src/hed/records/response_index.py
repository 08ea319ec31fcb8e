"""Map token records to the response (row of ``sequences``) they belong to, batch by batch.

A response is identified by (prompt_index, sample_index). The index packs both into one
int64 key (prompt_index · 2¹⁶ + sample_index; sample_index is an int16, so keys are unique and
sort like the pairs) and looks a batch of records up with one ``np.searchsorted``: memory is
one key per response, whatever the number of records.
"""

from __future__ import annotations

import numpy as np

from hed.errors import InputDataError

_SHIFT = np.int64(1 << 16)


def response_keys(prompt_index: np.ndarray, sample_index: np.ndarray) -> np.ndarray:
    """(n,) int64 keys of (prompt_index, sample_index) pairs; order-preserving."""
    return np.asarray(prompt_index, dtype=np.int64) * _SHIFT + np.asarray(
        sample_index, dtype=np.int64
    )


class ResponseIndex:
    """Row of each response in a response table, for token records given by their keys.

    Args:
        prompt_index: (n,) prompt_index of each response (any integer dtype).
        sample_index: (n,) sample_index of each response, 0 ≤ sample_index < 2¹⁶.
        source: what the responses come from, for error messages (a file or dataset name).

    Raises:
        InputDataError: a response appears twice.
    """

    def __init__(self, prompt_index: np.ndarray, sample_index: np.ndarray, source: str) -> None:
        keys = response_keys(prompt_index, sample_index)
        self._order = np.argsort(keys, kind="stable")
        self._sorted = keys[self._order]
        self.source = source
        if self._sorted.size > 1 and (np.diff(self._sorted) == 0).any():
            twice = int(self._sorted[1:][np.diff(self._sorted) == 0][0])
            raise InputDataError(
                f"{source}: response (prompt_index={twice // int(_SHIFT)}, "
                f"sample_index={twice % int(_SHIFT)}) appears twice; rerun its aggregation"
            )

    def __len__(self) -> int:
        return int(self._sorted.size)

    def rows(self, prompt_index: np.ndarray, sample_index: np.ndarray, records: str) -> np.ndarray:
        """(m,) int64 row (in the constructor's order) of the response of each record.

        Args:
            prompt_index, sample_index: (m,) keys of a batch of token records.
            records: what the records come from, for the error message.

        Raises:
            InputDataError: a record belongs to no response of the table.
        """
        keys = response_keys(prompt_index, sample_index)
        at = np.searchsorted(self._sorted, keys)
        found = at < self._sorted.size
        found[found] = self._sorted[at[found]] == keys[found]
        if not found.all():
            key = int(keys[~found][0])
            raise InputDataError(
                f"{records} holds token records of response (prompt_index="
                f"{key // int(_SHIFT)}, sample_index={key % int(_SHIFT)}), which is not in "
                f"{self.source}: the two files are of different aggregations; rerun the "
                "aggregation of this step"
            )
        return self._order[at]
