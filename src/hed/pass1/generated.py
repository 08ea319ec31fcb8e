"""The ``generated`` source: HED's own ``pass1_generated`` column of ``summary_by_step``
(the mean of ``correct`` over the step's merged sequences)."""

from __future__ import annotations

import pandas as pd

from hed.errors import InputDataError

GENERATED_COLUMN = "pass1_generated"
GENERATED_METRIC = "mean(correct)"


def pass1_from_summary(summary_by_step: pd.DataFrame, run: str) -> pd.DataFrame:
    """The ``generated`` source: ``pass1_generated`` of ``summary_by_step`` for ``run``.

    ``pass1_generated`` is the mean of ``correct`` over the step's merged sequences (null
    where no response could be graded); null rows are left out.

    Returns:
        ``step`` (int64), ``pass1`` (float64).

    Raises:
        InputDataError: ``summary_by_step`` lacks run, step or pass1_generated.
    """
    missing = [c for c in ("run", "step", GENERATED_COLUMN) if c not in summary_by_step.columns]
    if missing:
        raise InputDataError(
            f"summary_by_step has no column(s) {', '.join(missing)}: rerun the aggregation pipeline"
        )
    rows = summary_by_step.loc[
        (summary_by_step["run"] == run) & summary_by_step[GENERATED_COLUMN].notna(),
        ["step", GENERATED_COLUMN],
    ]
    return pd.DataFrame(
        {
            "step": rows["step"].astype("int64").to_numpy(),
            "pass1": rows[GENERATED_COLUMN].astype("float64").to_numpy(),
        }
    )
