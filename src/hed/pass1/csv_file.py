"""The ``csv`` source: a user file with a step column and a pass@1 column (names configurable)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from hed.errors import InputDataError, one_line
from hed.pass1.history import MAX_KEYS_SHOWN, as_float, as_step, shown_items


def read_pass1_csv(
    path: str | os.PathLike, *, step_column: str = "step", pass1_column: str = "pass1"
) -> pd.DataFrame:
    """Read ``step, pass1`` from a user CSV (rows with an empty pass@1 are left out).

    Returns:
        ``step`` (int64), ``pass1`` (float64) in file order.

    Raises:
        InputDataError: the file is missing or unreadable, a column is missing (the message
            lists those it has), or a value is not a number / a step not an integer.
    """
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"pass@1 CSV {path} does not exist: fix `path` of the csv source")
    try:
        frame = pd.read_csv(path)
    except Exception as exc:  # pandas raises many types
        raise InputDataError(
            f"pass@1 CSV {path} cannot be read: {one_line(exc, limit=None)}"
        ) from None
    for role, column in (("step_column", step_column), ("pass1_column", pass1_column)):
        if column not in frame.columns:
            raise InputDataError(
                f"pass@1 CSV {path} has no column {column!r} (set `{role}`); "
                f"its columns: {shown_items(frame.columns, MAX_KEYS_SHOWN)}"
            )
    frame = frame[frame[pass1_column].notna()]
    where = f"pass@1 CSV {path}, column"
    steps = [as_step(value, f"{where} {step_column}") for value in frame[step_column]]
    values = [as_float(value, f"{where} {pass1_column}") for value in frame[pass1_column]]
    return pd.DataFrame(
        {"step": pd.Series(steps, dtype="int64"), "pass1": pd.Series(values, dtype="float64")}
    )
