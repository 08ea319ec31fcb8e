"""W&B history rows → a pass@1 history, with the rules both W&B sources share.

Only rows that carry the metric key count (no forward fill, NaN values dropped); the step is the
value of the step key in *the same row* (default ``training/global_step``), or W&B's own
``_step`` when no metric row has the step key (said in the log), or for a row without it when
``_step`` equals the step key wherever both are logged (verl's step-0 validation). A *history* is
``step, pass1, wandb_step, metric_key, step_key`` in logged order (:data:`HISTORY_COLUMNS`);
both sources then keep the value logged last of a step logged twice, with one warning
(:func:`keep_last_logged`: a resumed run).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from hed.errors import InputDataError

logger = logging.getLogger(__name__)

DEFAULT_METRIC_KEY = "val-core/aime2025/acc/mean@1"
DEFAULT_STEP_KEY = "training/global_step"
WANDB_STEP = "_step"


HISTORY_COLUMNS = ["step", "pass1", "wandb_step", "metric_key", "step_key"]
_HISTORY_DTYPES = {"step": "int64", "pass1": "float64", "wandb_step": "Int64"}

MAX_KEYS_SHOWN = 20
MAX_STEPS_SHOWN = 20


def shown_items(items: Iterable[Any], limit: int) -> str:
    items = list(items)
    text = ", ".join(str(item) for item in items[:limit])
    return text + (f" ... ({len(items)} in all)" if len(items) > limit else "")


def as_float(value: Any, what: str) -> float:
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)  # JSON writes NaN/inf as "NaN"/"Infinity"; float() reads both
    except (TypeError, ValueError):
        raise InputDataError(f"{what}: {value!r} is not a number") from None


def as_step(value: Any, what: str) -> int:
    number = as_float(value, what)
    if not math.isfinite(number) or number != int(number):
        raise InputDataError(f"{what}: step {value!r} is not an integer")
    return int(number)


def _same_number(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


def _keys_hint(keys: Iterable[str], metric_key: str) -> str:
    """Up to 20 of the run's keys, closest to ``metric_key`` first.

    Keys sharing the metric key's first path component (``val-core``) come first, then those
    sharing its first two (``val-core/<data_source>``); within each, by string similarity.
    """
    from difflib import SequenceMatcher

    public = sorted({key for key in keys if not key.startswith("_")})
    parts = metric_key.split("/")

    def rank(key: str) -> tuple[bool, bool, float]:
        other = key.split("/")
        return (
            other[:1] != parts[:1],
            other[:2] != parts[:2],
            -SequenceMatcher(None, key, metric_key).ratio(),
        )

    public.sort(key=rank)
    return shown_items(public, MAX_KEYS_SHOWN) or "none"


def history_from_rows(
    rows: Iterable[Mapping[str, Any]],
    *,
    metric_key: str,
    step_key: str,
    where: str,
    known_keys: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Turn W&B history rows into a pass@1 history (the rules of both W&B sources).

    Only rows that carry ``metric_key`` count; no value is carried to other rows. The step
    is ``row[step_key]`` of the same row; when no metric row has ``step_key``, W&B's
    ``_step`` is used instead and the log says so. A metric row without ``step_key`` while
    others have it takes its ``_step`` when, on every row of ``rows`` that carries both keys,
    ``_step`` equals ``step_key`` (verl logs ``wandb.log(..., step=global_steps)`` and its
    step-0 validation without ``training/global_step``); otherwise it is dropped with a
    warning (its step would mix two step counters).

    Args:
        rows: history rows (dicts) in logged order; keys as logged, ``/`` included.
        metric_key: the pass@1 key, e.g. ``val-core/aime2025/acc/mean@1``.
        step_key: the step key, e.g. ``training/global_step``.
        where: the run, as named in messages.
        known_keys: keys the run has, listed when ``metric_key`` is absent (default: the
            keys seen in ``rows``).

    Returns:
        ``step, pass1, wandb_step, metric_key, step_key`` in logged order (duplicates kept).

    Raises:
        InputDataError: no row carries ``metric_key`` (lists up to 20 keys the run has), or a
            value that is not a number or a step that is not an integer.
    """
    seen_keys: set[str] = set()
    metric_rows = []
    n_nan = 0
    n_both = n_agree = 0  # rows carrying both step_key and _step; those where they are equal
    for row in rows:
        if known_keys is None:
            seen_keys.update(row)
        if row.get(step_key) is not None and row.get(WANDB_STEP) is not None:
            n_both += 1
            n_agree += _same_number(row[step_key], row[WANDB_STEP])
        value = row.get(metric_key)
        if value is None:
            continue
        pass1 = as_float(value, f"{where}: {metric_key} at _step {row.get(WANDB_STEP)}")
        if math.isnan(pass1):
            n_nan += 1
            continue
        metric_rows.append((row, pass1))
    if not metric_rows and not n_nan:
        keys = seen_keys if known_keys is None else known_keys
        raise InputDataError(
            f"{where}: metric key {metric_key!r} is not in the run's history; "
            f"the run has: {_keys_hint(keys, metric_key)}"
        )
    if n_nan:
        logger.warning("%s: %d row(s) of %s hold NaN; left out", where, n_nan, metric_key)
    if not metric_rows:
        return pd.DataFrame(columns=HISTORY_COLUMNS).astype(_HISTORY_DTYPES)
    used_step_key = step_key
    if step_key != WANDB_STEP and all(row.get(step_key) is None for row, _ in metric_rows):
        logger.warning(
            "%s: step key %r is absent from the rows carrying %s; using W&B's %s instead",
            where,
            step_key,
            metric_key,
            WANDB_STEP,
        )
        used_step_key = WANDB_STEP
    # verl logs with wandb.log(..., step=global_steps), so `_step` is the global step, and its
    # step-0 validation (val_before_train) carries no step key: take `_step` for such rows when
    # every row that has both agrees
    step_is_wandb_step = used_step_key != WANDB_STEP and n_both > 0 and n_agree == n_both
    records, dropped, recovered = [], [], []
    for row, pass1 in metric_rows:
        wandb_step = row.get(WANDB_STEP)
        key = used_step_key
        if row.get(key) is None:
            if not (step_is_wandb_step and wandb_step is not None):
                dropped.append(wandb_step)
                continue
            key = WANDB_STEP
            recovered.append(wandb_step)
        step = as_step(row[key], f"{where}: {key} at _step {wandb_step}")
        wandb_step = None if wandb_step is None else as_step(wandb_step, f"{where}: _step")
        records.append((step, pass1, wandb_step, metric_key, used_step_key))
    if recovered:
        logger.info(
            "%s: %d row(s) carry %s without %s (W&B _step %s, e.g. verl's step-0 validation); "
            "their step is _step, which equals %s on all %d row(s) that have both",
            where,
            len(recovered),
            metric_key,
            used_step_key,
            shown_items(recovered, MAX_STEPS_SHOWN),
            used_step_key,
            n_both,
        )
    if dropped:
        logger.warning(
            "%s: %d row(s) carry %s but not %s (W&B _step %s); left out: _step differs from "
            "%s on %d of the %d row(s) that have both, so it is not the same step counter",
            where,
            len(dropped),
            metric_key,
            used_step_key,
            shown_items(dropped, MAX_STEPS_SHOWN),
            used_step_key,
            n_both - n_agree,
            n_both,
        )
    table = pd.DataFrame.from_records(records, columns=HISTORY_COLUMNS).astype(_HISTORY_DTYPES)
    check_pass1_range(table, where=f"{where}, key {metric_key}", hint=_WANDB_RANGE_HINT)
    return table


def keep_last_logged(history: pd.DataFrame, *, where: str) -> pd.DataFrame:
    """Keep the value logged last of each step, as W&B's resume semantics say.

    A run resumed from a checkpoint re-logs the steps after it (online: the same run's
    ``scan_history``; offline: its attempts' folders read oldest first), so a step's later
    value supersedes the earlier one. One warning names the steps logged more than once.

    Args:
        history: a history (:data:`HISTORY_COLUMNS`) in logged order.
        where: the run, as named in the warning.

    Returns:
        The history without the earlier rows of a repeated step, otherwise in logged order.
    """
    repeated = history["step"][history["step"].duplicated()].unique().tolist()
    if not repeated:
        return history
    logger.warning(
        "%s: step(s) %s logged more than once (a resumed run re-logs the steps after its "
        "checkpoint); the value logged last is kept",
        where,
        shown_items(sorted(repeated), MAX_STEPS_SHOWN),
    )
    return history.drop_duplicates("step", keep="last").reset_index(drop=True)


#: pass@1 scales a CSV source accepts (``scale``): fraction in [0, 1], percent in [0, 100].
SCALES = ("fraction", "percent")
_WANDB_RANGE_HINT = "point metric_key at a pass@1 key (a fraction, e.g. val-core/<data>/acc/mean@1)"
CSV_RANGE_HINT = "if the file holds percentages set `scale: percent` on the csv source"


def check_pass1_range(table: pd.DataFrame, *, where: str, hint: str) -> None:
    """Refuse pass@1 values outside [0, 1] (a percentage, an accuracy count, a loss).

    Args:
        table: ``step`` (int), ``pass1`` (float; NaN allowed, it is left out later).
        where: the file/run and column, as named in the message.
        hint: what to do, appended to the message.

    Raises:
        InputDataError: the first value outside [0, 1], its step and how many there are.
    """
    values = table["pass1"]
    bad = table[(values < 0) | (values > 1)]
    if bad.empty:
        return
    first = bad.iloc[0]
    raise InputDataError(
        f"{where}: pass@1 {first['pass1']:g} at step {int(first['step'])} is outside [0, 1] "
        f"({len(bad)} of {len(table)} value(s), largest {bad['pass1'].max():g}); {hint}"
    )
