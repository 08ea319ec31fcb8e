"""The ``wandb_offline`` source: a local run folder written with ``mode="offline"``.

``wandb/offline-run-*/run-*.wandb`` is read with the wandb package's own transaction-log
reader, ``wandb leet inspect --json`` (wandb 0.31: the Python reader classes of older versions,
``wandb.sdk.internal.datastore``, are gone). Nothing is uploaded, no network. The rows go
through :func:`hed.pass1.history.history_from_rows`.
"""

from __future__ import annotations

import json
import os
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
    shown_items,
)


def find_offline_run_file(path: str | os.PathLike) -> Path:
    """Locate the transaction log of an offline run.

    Args:
        path: a ``run-<id>.wandb`` file, a run folder (``wandb/offline-run-<time>-<id>``)
            holding one, or a ``wandb`` folder holding exactly one run folder.

    Raises:
        InputDataError: the path does not exist, or holds no or several ``.wandb`` logs.
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
        return path
    found = sorted(path.glob("run-*.wandb")) or sorted(path.glob("*run-*/run-*.wandb"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputDataError(
            f"{path} holds no run-*.wandb file: point `path` at a wandb/offline-run-* folder"
        )
    folders = shown_items([p.parent.name for p in found], 5)
    raise InputDataError(f"{path} holds several W&B runs ({folders}): point `path` at one of them")


def iter_offline_history_rows(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Yield the history rows of an offline run, in logged order.

    Runs ``python -m wandb leet inspect --json <run-*.wandb>`` (the wandb package's reader,
    in wandb 0.31 backed by its bundled ``wandb-core`` binary) with ``WANDB_MODE=offline`` so
    nothing is uploaded and no telemetry is sent, and keeps the ``history`` records.

    Raises:
        InputDataError: the folder is missing, the reader fails (its first error line), the
            log ends in an incomplete record (a file truncated by a copy, a full disk, or a run
            killed or still running: its rows would be a shorter history), or it holds no
            history row at all (empty or not a W&B log).
    """
    wandb_file = find_offline_run_file(path)
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

    Returns:
        The history (``step, pass1, wandb_step, metric_key, step_key``).

    Raises:
        InputDataError: folder missing, unreadable log, metric key absent (lists the keys the
            run has), or non-numeric values.
    """
    # closing(): an error half-way stops the reader process at once
    with closing(iter_offline_history_rows(path)) as rows:
        return history_from_rows(
            rows, metric_key=metric_key, step_key=step_key, where=f"W&B offline run {path}"
        )
