"""The ``csv`` source: a user file with a step column and a pass@1 column (names configurable)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from hed.errors import InputDataError, one_line
from hed.pass1.history import (
    CSV_RANGE_HINT,
    MAX_KEYS_SHOWN,
    as_float,
    as_step,
    check_pass1_range,
    shown_items,
)


def read_pass1_csv(
    path: str | os.PathLike,
    *,
    step_column: str = "step",
    pass1_column: str = "pass1",
    scale: str = "fraction",
) -> pd.DataFrame:
    """Read ``step, pass1`` from a user CSV (rows with an empty pass@1 are left out).

    Args:
        scale: ``fraction`` (values in [0, 1], as they are) or ``percent`` (values in
            [0, 100], divided by 100).

    Returns:
        ``step`` (int64), ``pass1`` (float64, a fraction in [0, 1]) in file order.

    Raises:
        InputDataError: the file is missing or unreadable, a column is missing (the message
            lists those it has), a value is not a number / a step not an integer, or a
            pass@1 (after scaling) is outside [0, 1] (:func:`check_pass1_range`).
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
    divisor = 100.0 if scale == "percent" else 1.0
    table = pd.DataFrame(
        {
            "step": pd.Series(steps, dtype="int64"),
            "pass1": pd.Series(values, dtype="float64") / divisor,
        }
    )
    shown = f"{where} {pass1_column}" + (" (scale: percent, divided by 100)" if divisor > 1 else "")
    check_pass1_range(table, where=shown, hint=CSV_RANGE_HINT)
    return table
