"""The ``wandb_offline`` source: a local run folder written with ``mode="offline"``.

``wandb/offline-run-*/run-*.wandb`` is read with the wandb package's own transaction-log
reader, ``wandb leet inspect --json`` (wandb 0.31: the Python reader classes of older versions,
``wandb.sdk.internal.datastore``, are gone). Nothing is uploaded, no network. The rows go
through :func:`hed.pass1.history.history_from_rows`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pandas as pd

from hed.errors import InputDataError
from hed.pass1.history import (
    DEFAULT_METRIC_KEY,
    DEFAULT_STEP_KEY,
    WANDB_STEP,
    history_from_rows,
    keep_last_logged,
    shown_items,
)

logger = logging.getLogger(__name__)


def _run_id(wandb_file: Path) -> str:
    """The run id of a transaction log ``run-<id>.wandb``."""
    return wandb_file.stem.removeprefix("run-")


def _started(wandb_file: Path) -> tuple[str, str]:
    """Sort key: the start time in the run folder's name (``offline-run-<YYYYMMDD_HHMMSS>-``)."""
    match = re.search(r"run-(\d{8}_\d{6})-", wandb_file.parent.name)
    return (match.group(1) if match else "", wandb_file.parent.name)


def find_offline_run_files(path: str | os.PathLike) -> list[Path]:
    """Locate the transaction logs of an offline run, a resumed one's in time order.

    A run resumed offline under its id (``wandb.init(id=..., resume="allow")``, as verl does
    after a restart) leaves one ``offline-run-<YYYYMMDD_HHMMSS>-<id>`` folder per attempt;
    they are one run, returned oldest first (the folder names' timestamps).

    Args:
        path: a ``run-<id>.wandb`` file, a run folder (``wandb/offline-run-<time>-<id>``)
            holding one, or a folder holding the run folders of one run id.

    Returns:
        The ``run-<id>.wandb`` files, oldest attempt first (one for a run never resumed).

    Raises:
        InputDataError: the path does not exist, holds no ``.wandb`` log, or logs of
            different run ids (different runs: point ``path`` at one of them).
    """
    path = Path(path)
    if not path.exists():
        raise InputDataError(
            f"W&B offline run folder {path} does not exist: set `path` of the wandb_offline source "
            "to a wandb/offline-run-* folder"
        )
    if path.is_file():
        if path.suffix != ".wandb":
            raise InputDataError(f"{path} is not a W&B transaction log (run-<id>.wandb)")
        return [path]
    found = sorted(path.glob("run-*.wandb")) or sorted(
        path.glob("*run-*/run-*.wandb"), key=_started
    )
    if not found:
        raise InputDataError(
            f"{path} holds no run-*.wandb file: point `path` at a wandb/offline-run-* folder"
        )
    ids = sorted({_run_id(p) for p in found})
    if len(ids) > 1:
        folders = shown_items([p.parent.name for p in found], 5)
        raise InputDataError(
            f"{path} holds W&B runs of {len(ids)} run ids ({folders}): point `path` at the "
            "folders of one of them"
        )
    return found


def find_offline_run_file(path: str | os.PathLike) -> Path:
    """The transaction log of an offline run: the newest attempt's, if it was resumed.

    Args:
        path: as :func:`find_offline_run_files`.

    Raises:
        InputDataError: as :func:`find_offline_run_files`.
    """
    return find_offline_run_files(path)[-1]


def iter_offline_history_rows(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Yield the history rows of an offline run, in logged order.

    A resumed run's attempts (:func:`find_offline_run_files`) are read one after the other,
    oldest first, so a step re-logged after the resume comes after its first value.

    An attempt that a later one resumed was usually killed: its log may end in an incomplete
    record or hold no history row; its readable rows are kept and the log says so. Only the
    newest attempt must be complete.

    Raises:
        InputDataError: as :func:`iter_log_history_rows`, for the newest of the run's logs
            (an unreadable older one too).
    """
    files = find_offline_run_files(path)
    for i, wandb_file in enumerate(files):
        yield from iter_log_history_rows(wandb_file, resumed=i < len(files) - 1)


def iter_log_history_rows(wandb_file: Path, *, resumed: bool = False) -> Iterator[dict[str, Any]]:
    """Yield the history rows of one transaction log ``run-<id>.wandb``, in logged order.

    Runs ``python -m wandb leet inspect --json <run-*.wandb>`` (the wandb package's reader,
    in wandb 0.31 backed by its bundled ``wandb-core`` binary) with ``WANDB_MODE=offline`` so
    nothing is uploaded and no telemetry is sent, and keeps the ``history`` records.

    Raises:
        InputDataError: the reader fails (its first error line), the
            log ends in an incomplete record (a file truncated by a copy, a full disk, or a run
            killed or still running: its rows would be a shorter history), or it holds no
            history row at all (empty or not a W&B log); with ``resumed`` (a later attempt
            continued the run) only an unreadable log.
    """
    n_rows = 0
    command = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(wandb_file)]
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
    }
    with tempfile.TemporaryFile(mode="w+") as stderr:
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if '"history"' not in line:
                    continue
                record = json.loads(line)
                if record.get("type") != "history":
                    continue
                history = record.get("history") or {}
                row = dict(history.get("item") or {})
                if WANDB_STEP not in row and "num" in (history.get("step") or {}):
                    row[WANDB_STEP] = history["step"]["num"]
                n_rows += 1
                yield row
        stderr.seek(0)
        lines = (
            line.strip().removeprefix("wandb leet inspect: ") for line in stderr if line.strip()
        )
        if proc.returncode != 0:
            message = next(lines, f"exit status {proc.returncode}")
            raise InputDataError(
                f"cannot read W&B offline run file {wandb_file} (not a readable W&B "
                f"transaction log: {message}); point `path` at a wandb/offline-run-* folder"
            )
        first = next(lines, None)
        if resumed:
            if first is not None or n_rows == 0:
                logger.info(
                    "W&B offline run file %s (resumed later): %d history row(s) read%s",
                    wandb_file,
                    n_rows,
                    f"; wandb leet inspect: {first}" if first else "",
                )
            return
        if first is not None and "incomplete" in first:
            raise InputDataError(
                f"W&B offline run file {wandb_file} is truncated or incomplete ({n_rows} "
                f"history row(s) readable; wandb leet inspect: {first}): copy the whole run "
                "folder again, or wait until the run has finished"
            )
        if n_rows == 0:
            message = first or "the log is empty"
            raise InputDataError(
                f"W&B offline run {wandb_file} holds no history rows ({message}); point `path` "
                "at a run folder that logged its metrics (wandb/offline-run-*)"
            )


def read_wandb_offline_history(
    path: str | os.PathLike,
    *,
    metric_key: str = DEFAULT_METRIC_KEY,
    step_key: str = DEFAULT_STEP_KEY,
) -> pd.DataFrame:
    """Read a metric's history from a local offline run folder (no upload, no network).

    A run resumed offline under its id is read whole from the folder holding its attempts:
    the union of their steps, a step re-logged after the resume taking its later value (one
    warning names those steps, :func:`hed.pass1.history.keep_last_logged`).

    Args:
        path: as :func:`find_offline_run_files`.
        metric_key, step_key: the keys to read.

    Returns:
        The history (``step, pass1, wandb_step, metric_key, step_key``), one row per step.

    Raises:
        InputDataError: folder missing, runs of several ids in it, unreadable log, metric key
            absent (lists the keys the run has), or non-numeric values.
    """
    files = find_offline_run_files(path)
    where = f"W&B offline run {path}"
    if len(files) > 1:
        where += f" ({len(files)} attempts of run id {_run_id(files[0])}, read oldest first)"
    # closing(): an error half-way stops the reader process at once
    with closing(iter_offline_history_rows(path)) as rows:
        history = history_from_rows(rows, metric_key=metric_key, step_key=step_key, where=where)
    return keep_last_logged(history, where=where)
