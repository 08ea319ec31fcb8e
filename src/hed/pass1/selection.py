"""pass@1 rows and the figures' choice: one value per (run, step) from the run's ``figure_source``.

*pass1 rows* (:func:`to_pass1_rows`) are ``run, step, pass1, source, metric_key``, one row per
step, ascending; :func:`select_pass1` picks the figures' source per run and adds the checkpoint
steps that have no value.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from hed.pass1.config import parse_run_config
from hed.pass1.history import MAX_STEPS_SHOWN, shown_items

logger = logging.getLogger(__name__)

PASS1_COLUMNS = ["run", "step", "pass1", "source", "metric_key"]
FIGURE_COLUMNS = ["run", "step", "pass1", "pass1_source", "has_checkpoint"]


def to_pass1_rows(table: pd.DataFrame, *, run: str, source: str, metric_key: str) -> pd.DataFrame:
    """One row per step of a source: ``run, step, pass1, source, metric_key``, ascending step.

    A step present more than once keeps its last value (a resumed W&B run re-logs the steps
    after its last checkpoint) and the repeated steps are logged.

    Args:
        table: ``step, pass1`` in logged/file order (extra columns ignored).
        run, source, metric_key: written into every row.
    """
    repeated = sorted(table.loc[table["step"].duplicated(), "step"].unique().tolist())
    if repeated:
        logger.warning(
            "run %s, source %s: step(s) %s appear more than once; the value logged last is kept",
            run,
            source,
            shown_items(repeated, MAX_STEPS_SHOWN),
        )
    rows = table.drop_duplicates("step", keep="last").sort_values("step", kind="stable")
    return pd.DataFrame(
        {
            "run": run,
            "step": rows["step"].astype("int64").to_numpy(),
            "pass1": rows["pass1"].astype("float64").to_numpy(),
            "source": source,
            "metric_key": metric_key,
        },
        columns=PASS1_COLUMNS,
    )


def missing_steps(pass1_rows: pd.DataFrame, checkpoint_steps: Iterable[int]) -> list[int]:
    """Checkpoint steps without a pass@1 value in ``pass1_rows`` (steps match exactly)."""
    have = set(pass1_rows["step"].astype("int64").tolist())
    return sorted(step for step in checkpoint_steps if step not in have)


def warn_missing_steps(
    pass1_rows: pd.DataFrame, *, run: str, source: str, checkpoint_steps: Iterable[int]
) -> list[int]:
    """Log a warning listing the checkpoint steps ``source`` has no pass@1 for; return them."""
    missing = missing_steps(pass1_rows, checkpoint_steps)
    if missing:
        logger.warning(
            "run %s: no pass@1 from source %s at checkpoint step(s) %s",
            run,
            source,
            shown_items(missing, MAX_STEPS_SHOWN),
        )
    return missing


def select_pass1(
    pass1: pd.DataFrame,
    metrics_params: Mapping[str, Any] | None,
    checkpoint_steps: Mapping[str, Iterable[int]] | None = None,
) -> pd.DataFrame:
    """One pass@1 value per (run, step) for the figures: the run's ``figure_source``.

    Args:
        pass1: the ``pass1`` table (``run, step, pass1, source, ...``).
        metrics_params: ``params:metrics``; a run's ``figure_source`` defaults to the first
            source it lists (to the first source in ``pass1`` for runs it does not list).
        checkpoint_steps: ``{run: steps}``; checkpoint steps without a value get a row with
            an empty ``pass1``, and ``has_checkpoint`` says which steps have a checkpoint.

    Returns:
        ``run, step, pass1, pass1_source, has_checkpoint``: every step the chosen source has
        (steps without a checkpoint included) plus every checkpoint step, ascending per run.
    """
    checkpoint_steps = {run: set(steps) for run, steps in (checkpoint_steps or {}).items()}
    runs = list(dict.fromkeys([*pass1["run"].tolist(), *checkpoint_steps]))
    parts = []
    for run in runs:
        chosen = parse_run_config(metrics_params, run).figure_source
        of_run = pass1[pass1["run"] == run]
        if chosen is None and not of_run.empty:
            chosen = str(of_run["source"].iloc[0])
        rows = of_run.loc[of_run["source"] == chosen, ["step", "pass1"]]
        ckpt = checkpoint_steps.get(run, set())
        extra = sorted(ckpt - set(rows["step"].tolist()))
        frame = pd.concat(
            [rows, pd.DataFrame({"step": extra, "pass1": float("nan")})], ignore_index=True
        ).astype({"step": "int64", "pass1": "float64"})
        frame = frame.sort_values("step", kind="stable")
        parts.append(
            pd.DataFrame(
                {
                    "run": run,
                    "step": frame["step"].to_numpy(),
                    "pass1": frame["pass1"].to_numpy(),
                    "pass1_source": chosen,
                    "has_checkpoint": frame["step"].isin(ckpt).to_numpy(),
                },
                columns=FIGURE_COLUMNS,
            )
        )
    if not parts:
        return pd.DataFrame(columns=FIGURE_COLUMNS)
    return pd.concat(parts, ignore_index=True)
