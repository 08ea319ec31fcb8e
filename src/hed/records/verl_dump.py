"""Reading verl's rollout and validation dumps (docs/rollouts.md).

verl writes, with ``trainer.rollout_data_dir`` (training rollouts) or
``trainer.validation_data_dir`` (validation generations), one JSON Lines file per global step,
``<step>.jsonl``, one object per response::

    {"input": "...", "output": "...", "gts": "...", "score": 1.0, "step": 3, "acc": true, ...}

* ``input`` / ``output``: ``tokenizer.batch_decode(ids, skip_special_tokens=True)`` of the
  prompt and the response (chat-template special tokens, padding and the EOS are gone);
* ``score``: the response's reward, the sum of its token-level scores;
* ``step``: the global step (also the file's name);
* ``gts``: the reference answer (newer verl versions; may be absent or null);
* every reward-extra field of the same length (``acc``, ``pred``, ...) as a further key;
* ``response_ids`` (optional, not written by verl itself): the sampled response token ids
  (HED's miniature writes them; a verl user may add them as a reward-extra field).

The reader checks every line before returning anything, so a bad file yields one
:class:`~hed.errors.InputDataError` naming the file, the 1-based line and the field, and no
half-read step.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from hed.errors import InputDataError

#: Fields every dump line must hold.
REQUIRED_FIELDS = ("input", "output", "score")

#: The optional field holding the sampled response token ids.
RESPONSE_IDS_FIELD = "response_ids"

#: Columns of :func:`read_dump_step`'s frame before the reward-extra fields.
DUMP_COLUMNS = ["line", "step", "input", "output", "score", "gts", RESPONSE_IDS_FIELD]

_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")


def dump_steps(path: str | Path) -> list[int]:
    """The steps of a dump folder: the ``<step>`` of its ``<step>.jsonl`` files, ascending.

    Raises:
        InputDataError: the folder does not exist or holds no ``<step>.jsonl`` file.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise InputDataError(
            f"verl dump folder {folder} does not exist: set runs.<run>.responses.path to "
            "verl's trainer.rollout_data_dir (or validation_data_dir)"
        )
    steps = sorted(int(m.group(1)) for p in folder.iterdir() if (m := _STEP_FILE.match(p.name)))
    if not steps:
        raise InputDataError(
            f"verl dump folder {folder} holds no <step>.jsonl file (verl writes them with "
            "trainer.rollout_data_dir / validation_data_dir)"
        )
    return steps


def dump_file(path: str | Path, step: int) -> Path:
    """``<path>/<step>.jsonl``.

    Raises:
        InputDataError: the file is missing (names the steps the folder has).
    """
    file = Path(path) / f"{step}.jsonl"
    if not file.is_file():
        have = dump_steps(path)
        raise InputDataError(
            f"verl dump {file} does not exist (the folder has steps {have}): "
            "fix runs.<run>.steps or runs.<run>.responses.path"
        )
    return file


def read_dump_step(path: str | Path, step: int) -> pd.DataFrame:
    """The responses of one dump step, every line checked.

    Args:
        path: the dump folder.
        step: the global step (reads ``<path>/<step>.jsonl``).

    Returns:
        One row per line in file order: ``line`` (1-based, int64), ``step`` (int64), ``input``,
        ``output`` (str), ``score`` (float64), ``gts`` (object, None when absent),
        ``response_ids`` (list of int or None), then each reward-extra field (object, None
        on lines without it).

    Raises:
        InputDataError: missing or empty file; a line that is not a JSON object; a required
            field (``input``, ``output``, ``score``) absent; ``input``/``output`` not text;
            ``score`` not a finite number; ``step`` not ``step``; ``response_ids`` not a list of
            non-negative integers.
    """
    file = dump_file(path, step)
    rows: list[dict[str, Any]] = []
    with open(file, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            if raw.strip():
                rows.append(_parse_line(raw, file, number, step))
    if not rows:
        raise InputDataError(
            f"verl dump {file} is empty: no response lines (an interrupted dump? delete it or "
            "drop the step from runs.<run>.steps)"
        )
    extras = sorted({k for row in rows for k in row} - set(DUMP_COLUMNS))
    frame = pd.DataFrame(
        {
            name: pd.Series([row.get(name) for row in rows], dtype=object)
            for name in DUMP_COLUMNS + extras
        }
    )
    frame["line"] = frame["line"].astype("int64")
    frame["step"] = frame["step"].astype("int64")
    frame["score"] = frame["score"].astype("float64")
    return frame


def _parse_line(raw: str, file: Path, number: int, step: int) -> dict[str, Any]:
    where = f"verl dump {file}, line {number}"
    try:
        row = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputDataError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(row, dict):
        raise InputDataError(f"{where}: a line must be a JSON object, got {type(row).__name__}")
    for name in REQUIRED_FIELDS:
        if name not in row:
            raise InputDataError(
                f"{where}: field {name!r} is absent (verl writes input, output, score, step)"
            )
    for name in ("input", "output"):
        if not isinstance(row[name], str):
            raise InputDataError(f"{where}: field {name!r} must be text, got {row[name]!r:.60}")
    score = row["score"]
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise InputDataError(f"{where}: field 'score' must be a finite number, got {score!r:.60}")
    given = row.get("step", step)
    if isinstance(given, bool) or not isinstance(given, int) or given != step:
        raise InputDataError(f"{where}: field 'step' is {given!r} but the file is step {step}")
    ids = row.get(RESPONSE_IDS_FIELD)
    if ids is not None and not (
        isinstance(ids, list)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)
    ):
        raise InputDataError(
            f"{where}: field {RESPONSE_IDS_FIELD!r} must be a list of token ids (non-negative "
            f"integers), got {ids!r:.60}"
        )
    return {**row, "line": number, "step": step, "score": float(score)}
