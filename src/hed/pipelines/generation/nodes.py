"""Nodes of the generation pipeline: prompt set, checkpoints, one shard of one checkpoint."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from hed.config.layout import StudyLayout
from hed.config.params import AggregationParams, GenerationParams
from hed.config.prompt_params import PromptsParams
from hed.core.command_line import nodes_command
from hed.core.grading import grade_response, normalise_reference, reference_parses
from hed.decode.checkpoints import (
    check_same_vocabulary,
    checkpoint_fingerprint,
    model_dir_for_step,
    warn_identical_checkpoints,
)
from hed.decode.embedded import ensure_embedded_checkpoint
from hed.decode.prompts import (
    PROMPT_COLUMNS,
    chat_user_text,
    column_values,
    line_of,
    pick_prompt_column,
    prompt_id,
    prompt_inputs,
    sample_rows,
    unique_prompt_rows,
)
from hed.errors import ConfigError, InputDataError
from hed.records.schema import SEQUENCE_SCHEMA, TOKEN_RECORD_SCHEMA, record_key_columns
from hed.records.sequence import MASS_COLUMNS
from hed.records.shard_metadata import GENERATION_METADATA_KEY, generation_metadata

logger = logging.getLogger(__name__)


def build_prompt_set(
    raw_prompts: pd.DataFrame, params: PromptsParams | dict[str, Any]
) -> pd.DataFrame:
    """Sample the prompt set from a prompt file.

    Args:
        raw_prompts: rows of the prompt file (``raw_prompts``), with a ``source_file`` column.
        params: ``params:prompts`` (:class:`~hed.config.prompt_params.PromptsParams`, or its
            dict: ``prompt_columns``, ``answer_column``, ``num_prompts``, ``seed``,
            ``instruction_suffix``, ``duplicates``). A prompt column of chat messages (verl's
            ``prompt``) gives its last user message (:func:`hed.decode.prompts.chat_user_text`);
            ``answer_column`` may name a struct field, ``reward_model.ground_truth``.

    Returns:
        ``prompts``: prompt_index (0-based, int32), prompt_id (sha256 prefix of the prompt),
        prompt (the user message: problem text + ``instruction_suffix``), answer (string or
        null), source_file, source_row (row in the file).

    Raises:
        InputDataError: no prompt column, or a prompt that is empty.
        ConfigError: ``num_prompts`` larger than the file; a bad value of the section
            (:func:`hed.config.prompt_params.prompts_params`).
    """
    params = PromptsParams.of(params)
    source = str(raw_prompts["source_file"].iloc[0])
    column = pick_prompt_column(raw_prompts, list(params.prompt_columns), source)
    # verl's parquet: `prompt` is a list of chat messages; the user message is the prompt
    raw_prompts = raw_prompts.assign(**{column: raw_prompts[column].map(chat_user_text)})
    suffix = params.instruction_suffix
    all_texts = raw_prompts[column].astype("string")
    ids = [None if pd.isna(t) or not str(t).strip() else prompt_id(str(t) + suffix)
           for t in all_texts]  # fmt: skip
    kept = unique_prompt_rows(ids, params.duplicates, source, raw_prompts)
    rows = kept[sample_rows(len(kept), params.num_prompts, params.seed, source)]
    chosen = raw_prompts.iloc[rows]
    texts = chosen[column].astype("string")
    empty = texts.isna() | (texts.str.strip() == "")
    if empty.any():
        first = int(rows[np.argmax(empty.to_numpy())])
        raise InputDataError(
            f"prompt file {source}: column {column!r} is empty on {line_of(raw_prompts, first)}"
        )
    prompts = [str(text) + suffix for text in texts]
    answer_column = params.answer_column
    references = column_values(chosen, answer_column) if answer_column else None
    if references is not None:  # a column, or verl's `reward_model.ground_truth`
        answers = [normalise_reference(a) for a in references.tolist()]
        _warn_unparsed_references(answers, rows, source)
    else:
        answers = [None] * len(prompts)
    return pd.DataFrame(
        {
            "prompt_index": np.arange(len(prompts), dtype=np.int32),
            "prompt_id": [prompt_id(p) for p in prompts],
            "prompt": prompts,
            "answer": pd.array(answers, dtype="string"),
            "source_file": source,
            "source_row": rows.astype(np.int64),
        }
    )[PROMPT_COLUMNS]


def _warn_unparsed_references(answers: list[str | None], rows: np.ndarray, source: str) -> None:
    """Warn once per prompt whose reference answer math-verify cannot parse (left ungraded)."""
    bad = [
        (i, int(row))
        for i, (a, row) in enumerate(zip(answers, rows, strict=True))
        if not reference_parses(a)
    ]
    for index, row in bad:
        logger.warning(
            "prompt file %s, source_row %d (prompt_index %d): math-verify cannot parse the "
            "reference answer %r; its responses stay ungraded (correct = null)",
            source,
            row,
            index,
            answers[index],
        )


def resolve_checkpoints(
    runs: StudyLayout | dict[str, Any],
    generation: GenerationParams | dict[str, Any],
    training_manifest: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Find and validate the model folder of every selected (run, step), before any generation.

    Runs marked ``embedded: true`` get the embedded SmolLM2 materialised first
    (:func:`hed.decode.embedded.ensure_embedded_checkpoint`).

    Args:
        runs: ``params:runs``, parsed (:class:`~hed.config.layout.StudyLayout`) or raw.
        generation: ``params:generation``, parsed or raw (``num_shards`` of a raw ``runs``).
        training_manifest: ``mini_rl_manifest`` in the ``mini_dapo`` environment; unused, it
            only orders this node after the training that writes the checkpoints.

    Returns:
        ``checkpoints``: ``{run: {"role", "checkpoint_root", "steps": {"<step>": fingerprint}}}``
        where a fingerprint holds ``model_dir``, ``config_sha256`` and ``weights_index_sha256``.
        Byte-identical checkpoints of two runs or steps get one warning
        (:func:`~hed.decode.checkpoints.warn_identical_checkpoints`).

    Raises:
        CheckpointError: a step folder is missing, config-only, or LoRA-only, or the run's
            steps differ in vocabulary size or tokenizer (:func:`check_same_vocabulary`). For a
            run whose responses are a verl dump, step ``s`` resolves to the checkpoint that
            generated dump step ``s`` (``global_step_<s-1>`` for training rollouts).
    """
    layout = StudyLayout.of(runs, generation)
    resolved: dict[str, Any] = {}
    for run in layout.runs:
        if run.embedded:
            ensure_embedded_checkpoint(f"{run.checkpoint_root}/global_step_0/actor_hf")
        model_dirs = {step: _model_dir(run, step) for step in run.steps}
        check_same_vocabulary(run.name, model_dirs)
        resolved[run.name] = {
            "role": run.role,
            "checkpoint_root": run.checkpoint_root,
            "steps": {str(step): checkpoint_fingerprint(d) for step, d in model_dirs.items()},
        }
        logger.info("Run %s: %d checkpoint(s), steps %s", run.name, len(run.steps), list(run.steps))
    warn_identical_checkpoints({run: entry["steps"] for run, entry in resolved.items()})
    return resolved


def _model_dir(run: Any, step: int) -> Any:
    """The checkpoint of (run, step): for a run scoring a verl dump, the one that generated
    dump step ``step`` once its ``<step>.jsonl`` is known to exist
    (:func:`hed.decode.rollouts.run_dump_model_dir`)."""
    if run.responses.from_dump:
        from hed.decode.rollouts import run_dump_model_dir

        return run_dump_model_dir(run, step)
    return model_dir_for_step(run.checkpoint_root, step)


def generate_shard(  # noqa: PLR0917 - Kedro passes the inputs by name
    prompts: pd.DataFrame,
    checkpoints: dict[str, Any],
    prompt_params: PromptsParams | dict[str, Any],
    params: GenerationParams | dict[str, Any],
    parts: Any = None,
    aggregation: Any = None,
    *,
    run: str,
    step: int,
    shard: int,
) -> dict[str, pa.Table]:
    """Sample responses for one shard of one checkpoint and record every generated token.

    Opens the checkpoint of (``run``, ``step``) with ``generation.backend``
    (:func:`hed.decode.factory.open_backend`: ``hf``, transformers ``generate``, or ``vllm``,
    one vLLM engine started and shut down inside this call; both yield the same records),
    takes the prompts with ``prompt_index % num_shards == shard``, samples
    ``samples_per_prompt`` responses each and records per token the exact decode-time entropy
    (nats), logprob, prob and top-k of softmax(z / T) over the full vocabulary, its text and
    whether it is special; responses are graded with math-verify when the prompt has an answer.

    Crash-safe: finished sequences go to the shard's partial area ``parts`` as they complete;
    a rerun with the same generation metadata and checkpoint keeps them and generates only the
    missing (prompt, sample) pairs (:func:`hed.decode.backend.generate_shard_sequences`).

    Args:
        prompts: ``prompts``.
        checkpoints: ``checkpoints`` (from :func:`resolve_checkpoints`).
        prompt_params: ``params:prompts`` (:class:`~hed.config.prompt_params.PromptsParams`
            or its dict: the rendering settings).
        params: ``params:generation``, parsed by the pre-run check
            (:class:`hed.config.params.GenerationParams`; a plain dict is parsed here).
        parts: ``<run>.step_<step>.shard_<k>.partial`` (a
            :class:`hed.records.shard_parts.ShardParts`); None keeps nothing on disk.
        aggregation: ``params:aggregation``: its lexicon's anthropomorphic / reasoning
            word-start mass is recorded per token (:mod:`hed.core.propensity`); None: the mass
            columns are null.
        run, step, shard: which shard of which checkpoint (bound when the pipeline is built).

    Returns:
        ``{"token_records": table of TOKEN_RECORD_SCHEMA, "sequences": table of SEQUENCE_SCHEMA}``,
        both with the generation metadata in the Parquet metadata key ``hed.generation``
        (:func:`hed.records.shard_metadata.generation_metadata`; aggregation refuses shards
        whose record-shaping values are no longer current).

    Raises:
        ConfigError: the step is not in ``checkpoints``, a sampling parameter is invalid, a
            prompt does not fit the context, or (vllm) vLLM is not installed, a prompt exceeds
            ``max_model_len``, the KV cache does not fit.
        CheckpointError: the model cannot be loaded (vllm: or its architecture is not one
            vLLM implements).
    """
    from hed.decode.backend import generate_shard_sequences
    from hed.decode.factory import open_backend

    generation, rendering = GenerationParams.of(params), PromptsParams.of(prompt_params).rendering
    lexicon = None if aggregation is None else AggregationParams.of(aggregation).parsed_lexicon
    entry = checkpoint_entry(checkpoints, run, step)
    mine = prompts[prompts["prompt_index"] % generation.num_shards == shard]
    key, label = {"run": run, "step": step, "shard": shard}, f"{run}.step_{step}.shard_{shard}"
    with open_backend(**generation.backend_args(entry["model_dir"])) as backend:
        inputs = prompt_inputs(mine, backend, rendering, generation.max_new_tokens)
        if lexicon is not None:
            backend.record_word_mass(lexicon)
        metadata = shard_metadata(
            key,
            generation,
            backend,
            checkpoint=entry,
            prompts=mine,
            rendering=rendering,
            lexicon=lexicon,
        )
        sequences = generate_shard_sequences(
            backend, inputs, generation, parts=parts, binding=metadata, label=label
        )
    return shard_tables(sequences, mine, metadata, backend.special_ids, **key)


def shard_metadata(
    key: dict[str, Any],
    generation: GenerationParams,
    backend: Any,
    *,
    checkpoint: dict[str, Any],
    prompts: pd.DataFrame,
    rendering: Any,
    lexicon: Any,
) -> dict[str, Any]:
    """The shard's ``hed.generation`` metadata
    (:func:`hed.records.shard_metadata.generation_metadata`).

    Args:
        key: ``{"run", "step", "shard"}``.
        generation: the parsed ``params:generation``.
        backend: the open backend (its name, version and resolved dtype are recorded).
        checkpoint: the ``checkpoints`` entry (model_dir and fingerprint).
        prompts: the shard's rows of ``prompts`` (their ``prompt_id`` are recorded).
        rendering: the prompt rendering (:class:`hed.decode.prompts.PromptRendering`).
        lexicon: the lexicon whose word-start mass is recorded, or None.
    """
    return generation_metadata(
        **key,
        generation=generation,
        backend=backend,
        checkpoint=checkpoint,
        prompt_ids=prompts["prompt_id"],
        prompt_params=rendering.as_params(),
        lexicon=lexicon,
    )


def checkpoint_entry(checkpoints: dict[str, Any], run: str, step: int) -> dict[str, Any]:
    """The ``checkpoints`` entry of (``run``, ``step``): model_dir and its fingerprint.

    Raises:
        ConfigError: no checkpoint was resolved for them.
    """
    entry = checkpoints.get(run, {}).get("steps", {}).get(str(step))
    if entry is None:
        raise ConfigError(
            f"no checkpoint resolved for run {run!r} step {step} (a step added since, or "
            f"found by `steps: all`): resolve them again with "
            f"`{nodes_command(['resolve_checkpoints'])}`, then run your command again"
        )
    return entry


def shard_tables(
    sequences: list[Any],
    prompts: pd.DataFrame,
    metadata: dict[str, Any],
    special_ids: np.ndarray,
    *,
    run: str,
    step: int,
    shard: int,
) -> dict[str, pa.Table]:
    """The shard's two tables, each with ``metadata`` under ``hed.generation``.

    Args:
        sequences: the shard's sequences (any order).
        prompts: the shard's rows of ``prompts`` (answers and prompt ids).
        metadata: the shard's generation metadata.
        special_ids: ids whose records are marked ``is_special``.
        run, step, shard: the shard.

    Returns:
        ``{"token_records": ..., "sequences": ...}`` (:func:`records_table`,
        :func:`sequences_table`).
    """
    answers = dict(zip(prompts["prompt_index"].astype(int), prompts["answer"], strict=True))
    ids_of = dict(zip(prompts["prompt_index"].astype(int), prompts["prompt_id"], strict=True))
    kv = {GENERATION_METADATA_KEY: json.dumps(metadata, sort_keys=True).encode()}
    records = records_table(sequences, run=run, step=step, shard=shard, special_ids=special_ids)
    seqs = sequences_table(
        sequences, answers, ids_of, run=run, step=step, shard=shard, special_ids=special_ids
    )
    return {
        "token_records": records.replace_schema_metadata(kv),
        "sequences": seqs.replace_schema_metadata(kv),
    }


def records_table(
    sequences: list[Any], *, run: str, step: int, shard: int, special_ids: np.ndarray
) -> pa.Table:
    """Assemble the token records of a shard (TOKEN_RECORD_SCHEMA).

    Rows are in (prompt_index, sample_index, position) order.
    """
    sequences = sorted(sequences, key=lambda s: (s.prompt_index, s.sample_index))
    lengths = np.array([len(s.token_ids) for s in sequences], dtype=np.int64)
    n = int(lengths.sum())
    k = sequences[0].topk_token_ids.shape[1] if sequences else 1

    def cat(name: str, dtype: Any) -> np.ndarray:
        return (
            np.concatenate([getattr(s, name) for s in sequences]).astype(dtype)
            if sequences
            else np.zeros(0, dtype)
        )

    token_ids = cat("token_ids", np.int32)
    logprob = cat("logprob", np.float32)
    offsets = pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32))
    topk_ids = cat("topk_token_ids", np.int32).reshape(-1)
    topk_probs = cat("topk_probs", np.float32).reshape(-1)
    columns = {
        **record_key_columns(run, step, shard, sequences),
        "token_id": pa.array(token_ids),
        "token_text": pa.array([t for s in sequences for t in s.token_texts], type=pa.string()),
        "entropy": pa.array(cat("entropy", np.float32)),
        "logprob": pa.array(logprob),
        "prob": pa.array(np.exp(logprob.astype(np.float64)).astype(np.float32)),
        "topk_token_ids": pa.ListArray.from_arrays(offsets, pa.array(topk_ids)),
        "topk_probs": pa.ListArray.from_arrays(offsets, pa.array(topk_probs)),
        "is_special": pa.array(np.isin(token_ids, special_ids)),
        **{name: _mass_column(sequences, name, lengths) for name in MASS_COLUMNS},
    }
    return pa.table(columns, schema=TOKEN_RECORD_SCHEMA)


def _mass_column(sequences: list[Any], name: str, lengths: np.ndarray) -> pa.Array:
    """float32 ``name`` of every record; null for a sequence that did not record it."""
    values = [getattr(s, name, None) for s in sequences]
    if all(v is not None for v in values):
        flat = np.concatenate(values) if values else np.zeros(0)
        return pa.array(flat.astype(np.float32))
    missing = np.repeat([v is None for v in values], lengths)
    flat = (
        np.concatenate(
            [
                np.zeros(m, np.float32) if v is None else v
                for v, m in zip(values, lengths, strict=True)
            ]
        )
        if values
        else np.zeros(0, np.float32)
    )
    return pa.array(flat.astype(np.float32), mask=missing)


def sequences_table(
    sequences: list[Any],
    answers: dict[int, Any],
    prompt_ids: dict[int, str],
    *,
    run: str,
    step: int,
    shard: int,
    special_ids: np.ndarray,
) -> pa.Table:
    """One row per response (SEQUENCE_SCHEMA), graded with math-verify where an answer exists.

    ``response_text`` keeps special tokens (it is the exact decode); grading reads the text
    without them, so an EOS such as ``<|im_end|>`` never sticks to the final answer.
    """
    rows = []
    for seq in sorted(sequences, key=lambda s: (s.prompt_index, s.sample_index)):
        answer = answers.get(seq.prompt_index)
        special = np.isin(seq.token_ids, special_ids)
        plain = "".join(
            t for t, is_special in zip(seq.token_texts, special, strict=True) if not is_special
        )
        grade = grade_response(plain, None if pd.isna(answer) else str(answer))
        rows.append(
            {
                "run": run,
                "step": step,
                "shard": shard,
                "prompt_index": seq.prompt_index,
                "prompt_id": prompt_ids[seq.prompt_index],
                "sample_index": seq.sample_index,
                "response_text": seq.response_text,
                "n_tokens": len(seq.token_ids),
                "finish_reason": seq.finish_reason,
                "extracted_answer": grade.extracted_answer,
                "correct": grade.correct,
            }
        )
    return pa.Table.from_pylist(rows, schema=SEQUENCE_SCHEMA)
