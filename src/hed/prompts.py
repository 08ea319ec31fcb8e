"""The prompt set: choosing the prompt column, sampling, stable ids, chat templates."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pandas as pd

from hed.errors import ConfigError, InputDataError
from hed.params import positive_int

#: Columns of the ``prompts`` dataset.
PROMPT_COLUMNS = ["prompt_index", "prompt_id", "prompt", "answer", "source_file", "source_row"]


def prompt_id(text: str) -> str:
    """Stable content hash of a prompt: the first 16 hex digits of sha256(UTF-8 text)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def pick_prompt_column(frame: pd.DataFrame, candidates: list[str], source: str) -> str:
    """Return the first of ``candidates`` that is a column of ``frame``.

    Raises:
        InputDataError: none of them is present (names the file and the columns it has).
    """
    for name in candidates:
        if name in frame.columns:
            return name
    have = ", ".join(map(str, frame.columns[:20]))
    raise InputDataError(
        f"prompt file {source} has none of the prompt columns {candidates} (it has: {have}); "
        "set `prompts.prompt_columns`"
    )


def sample_rows(n_rows: int, num_prompts: int | None, seed: int, source: str) -> np.ndarray:
    """Choose ``num_prompts`` of ``n_rows`` rows without replacement, in file order.

    Uses ``numpy.random.default_rng(seed).choice``; ``None`` keeps every row.

    Raises:
        ConfigError: ``num_prompts`` is not a positive integer or exceeds ``n_rows``.
    """
    if num_prompts is None:
        return np.arange(n_rows)
    positive_int(num_prompts, "prompts.num_prompts", allow_none=True)
    if num_prompts > n_rows:
        raise ConfigError(
            f"prompts.num_prompts is {num_prompts} but {source} has only {n_rows} rows; "
            "lower it or use null"
        )
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_rows, size=num_prompts, replace=False))


def render_prompt(tokenizer: Any, user_text: str, params: dict[str, Any]) -> str:
    """The exact model input for one prompt.

    With ``apply_chat_template`` true and a tokenizer that has a chat template, the user message
    (preceded by ``system_prompt`` when set) goes through ``tokenizer.apply_chat_template`` with
    ``add_generation_prompt=True``; ``enable_thinking`` is passed only when not null (templates
    that do not use it ignore it). Otherwise the text is used as is.
    """
    if not params.get("apply_chat_template", True) or not getattr(tokenizer, "chat_template", None):
        return user_text
    messages = []
    if params.get("system_prompt"):
        messages.append({"role": "system", "content": params["system_prompt"]})
    messages.append({"role": "user", "content": user_text})
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
    if params.get("enable_thinking") is not None:
        kwargs["enable_thinking"] = bool(params["enable_thinking"])
    return tokenizer.apply_chat_template(messages, **kwargs)
