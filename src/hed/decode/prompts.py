"""The prompt set: choosing the prompt column, sampling, stable ids, chat templates."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from hed.core.validators import positive_int
from hed.decode.types import PromptInput, encode_prompts
from hed.errors import ConfigError, InputDataError

logger = logging.getLogger(__name__)

#: ``prompts.duplicates``: what :func:`unique_prompt_rows` does with repeated prompts.
DUPLICATE_POLICIES = ("drop", "keep")


@dataclass(frozen=True)
class PromptRendering:
    """How a prompt becomes the model's input (the rendering keys of ``params:prompts``).

    Parsed and checked with the rest of the section by
    :func:`hed.config.prompt_params.prompts_params`; :func:`render_prompt` applies it.

    Attributes:
        apply_chat_template: wrap the prompt in the tokenizer's chat template, when it has one.
        enable_thinking: passed to the chat template when not None (Qwen3's switch).
        system_prompt: a system message before the user's (None or empty: none).
    """

    apply_chat_template: bool = True
    enable_thinking: bool | None = None
    system_prompt: str | None = None

    @classmethod
    def of(cls, value: PromptRendering | Mapping[str, Any] | None) -> PromptRendering:
        """``value`` if already one, else the rendering keys of a ``params:prompts`` mapping
        (a key left out: the default above), values as given."""
        if isinstance(value, cls):
            return value
        given = value or {}
        return cls(**{f.name: given[f.name] for f in dataclasses.fields(cls) if f.name in given})

    def as_params(self) -> dict[str, Any]:
        """The settings as ``params:prompts`` writes them: ``{"apply_chat_template": ...,
        "enable_thinking": ..., "system_prompt": ...}`` (what shard metadata records, through
        :func:`hed.records.shard_metadata.chat_template_settings`)."""
        return dataclasses.asdict(self)


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


def chat_user_text(value: Any) -> Any:
    """The user text of a chat-format prompt, as verl's RL parquet files hold it.

    verl's ``prompt`` column is a list of messages ``[{"role": "user", "content": "..."}]``
    (a system message may come first); HED renders its own chat template
    (``prompts.apply_chat_template``, ``prompts.system_prompt``), so the content of the last
    ``user`` message is the prompt. Any other value (a plain string) is returned unchanged.
    """
    if (
        isinstance(value, list | tuple | np.ndarray)
        and len(value)
        and all(isinstance(message, Mapping) for message in value)
    ):
        users = [message.get("content") for message in value if message.get("role") == "user"]
        return str(users[-1]) if users and users[-1] is not None else None
    return value


def column_values(frame: pd.DataFrame, name: str) -> pd.Series | None:
    """Column ``name`` of ``frame``, or a field of a struct column as ``<column>.<field>``
    (verl's reference answer: ``reward_model.ground_truth``); None when there is neither."""
    if name in frame.columns:
        return frame[name]
    column, _, key = name.partition(".")
    if not key or column not in frame.columns:
        return None
    return frame[column].map(lambda v: v.get(key) if isinstance(v, Mapping) else None)


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


def line_of(frame: pd.DataFrame, row: int) -> str:
    """Where row ``row`` (0-based) of a prompt file is, for messages: ``line <n>`` (1-based,
    JSON Lines: the ``source_line`` column of :class:`hed.io.datasets.PromptFileDataset`), else
    ``row <row + 1>`` (1-based)."""
    if "source_line" in frame.columns:
        return f"line {int(frame['source_line'].iloc[row])}"
    return f"row {row + 1}"


def unique_prompt_rows(
    ids: list[str | None], policy: str, source: str, frame: pd.DataFrame
) -> np.ndarray:
    """Rows to keep of a prompt file whose prompts (after the instruction suffix) have ``ids``.

    Two rows with the same prompt_id are the same prompt: sampled twice it would count twice
    in every statistic (byte-identical prompts, the same seeds: the same responses). A warning
    gives the count and the first duplicate's line; ``prompts.duplicates`` says what happens:
    ``drop`` (default) keeps the first row of each prompt, ``keep`` keeps every row.

    Args:
        ids: prompt_id per row (``None`` for an empty prompt, checked later).
        policy: ``prompts.duplicates``: ``drop`` or ``keep``.
        source: the prompt file, for the warning.
        frame: the prompt file's rows (for line numbers).

    Returns:
        Row indices (0-based, ascending).

    Raises:
        ConfigError: ``policy`` is neither ``drop`` nor ``keep``.
    """
    check_duplicate_policy(policy)
    seen: dict[str, int] = {}
    duplicates: list[int] = []
    for row, pid in enumerate(ids):
        if pid is None:
            continue
        if pid in seen:
            duplicates.append(row)
        else:
            seen[pid] = row
    if duplicates:
        first = duplicates[0]
        logger.warning(
            "prompt file %s: %d duplicate prompt(s) (the same prompt_id as an earlier row; "
            "first: %s, same as %s): %s (prompts.duplicates: %s)",
            source,
            len(duplicates),
            line_of(frame, first),
            line_of(frame, seen[ids[first]]),
            "dropped" if policy == "drop" else "kept, each counts once more",
            policy,
        )
    if policy == "keep" or not duplicates:
        return np.arange(len(ids))
    return np.array(sorted(set(range(len(ids))) - set(duplicates)), dtype=np.int64)


def check_duplicate_policy(policy: Any) -> str:
    """``prompts.duplicates``, checked: ``drop`` or ``keep`` (:data:`DUPLICATE_POLICIES`).

    Raises:
        ConfigError: another value.
    """
    if policy not in DUPLICATE_POLICIES:
        raise ConfigError(
            f"prompts.duplicates is {policy!r}: use drop (keep the first row of each prompt) "
            "or keep (count every row)"
        )
    return str(policy)


def check_context_length(
    token_counts: dict[int, int], max_new_tokens: int, context: int | None, model_dir: str
) -> None:
    """Refuse prompts that leave no room for ``max_new_tokens`` in the model's context.

    A prompt of ``n`` tokens generates at most ``max_new_tokens`` more; past the context
    (``max_position_embeddings`` of config.json) the model's positions are out of range and
    generation runs for nothing (or fails after minutes). Checked before generating.

    Args:
        token_counts: prompt_index → tokens of the rendered prompt.
        max_new_tokens: ``generation.max_new_tokens``.
        context: the model's context length in tokens (``None``: not known, nothing checked).
        model_dir: the checkpoint, for the message.

    Raises:
        ConfigError: the longest offending prompt: prompt_index, its length, the limit, and
            how many prompts are too long.
    """
    if not context:
        return
    limit = context - max_new_tokens
    if limit < 1:
        raise ConfigError(
            f"generation.max_new_tokens is {max_new_tokens} but the context of {model_dir} "
            f"(max_position_embeddings) is {context} tokens: lower max_new_tokens to leave "
            "room for the prompts"
        )
    too_long = {i: n for i, n in token_counts.items() if n > limit}
    if not too_long:
        return
    index = max(too_long, key=lambda i: (too_long[i], -i))
    raise ConfigError(
        f"prompt_index {index} has {too_long[index]} tokens: with generation.max_new_tokens "
        f"{max_new_tokens} it exceeds the context of {context} tokens of {model_dir} "
        f"(max_position_embeddings), so at most {limit} prompt tokens fit; "
        f"{len(too_long)} prompt(s) too long: shorten or drop them, or lower max_new_tokens"
    )


def render_prompt(
    tokenizer: Any, user_text: str, params: PromptRendering | Mapping[str, Any]
) -> str:
    """The exact model input for one prompt.

    With ``apply_chat_template`` true and a tokenizer that has a chat template, the user message
    (preceded by ``system_prompt`` when set) goes through ``tokenizer.apply_chat_template`` with
    ``add_generation_prompt=True``; ``enable_thinking`` is passed only when not null (templates
    that do not use it ignore it). Otherwise the text is used as is.

    Args:
        tokenizer: the checkpoint's tokenizer.
        user_text: the prompt (with its instruction suffix).
        params: the rendering settings (:class:`PromptRendering`, or a ``params:prompts``
            mapping holding them).
    """
    rendering = PromptRendering.of(params)
    if not rendering.apply_chat_template or not getattr(tokenizer, "chat_template", None):
        return user_text
    messages = []
    if rendering.system_prompt:
        messages.append({"role": "system", "content": rendering.system_prompt})
    messages.append({"role": "user", "content": user_text})
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
    if rendering.enable_thinking is not None:
        kwargs["enable_thinking"] = bool(rendering.enable_thinking)
    return tokenizer.apply_chat_template(messages, **kwargs)


def prompt_inputs(
    rows: pd.DataFrame,
    backend: Any,
    prompt_params: PromptRendering | Mapping[str, Any],
    max_new_tokens: int,
) -> list[PromptInput]:
    """The model inputs of a shard's prompts, checked to fit the model's context.

    Args:
        rows: rows of the ``prompts`` dataset (prompt_index, prompt_id, prompt).
        backend: the open backend (:class:`hed.decode.backend.DecodingBackend`): its
            ``tokenizer`` renders and counts, its ``max_position_embeddings`` is the context.
        prompt_params: the rendering settings (:class:`PromptRendering`, or ``params:prompts``;
            :func:`render_prompt`).
        max_new_tokens: ``generation.max_new_tokens``.

    Returns:
        One :class:`hed.decode.types.PromptInput` per row, in row order.

    Raises:
        ConfigError: a prompt leaves no room for ``max_new_tokens`` (:func:`check_context_length`).
    """
    inputs = [
        PromptInput(
            prompt_index=int(row.prompt_index),
            prompt_id=row.prompt_id,
            text=render_prompt(backend.tokenizer, row.prompt, prompt_params),
        )
        for row in rows.itertuples()
    ]
    counts = {i: len(ids) for i, ids in encode_prompts(backend.tokenizer, inputs).items()}
    check_context_length(
        counts, max_new_tokens, backend.max_position_embeddings, str(backend.model_dir)
    )
    return inputs
