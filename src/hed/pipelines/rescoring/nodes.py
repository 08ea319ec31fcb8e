"""Nodes of the rescoring pipeline: reference responses, one re-scored shard per checkpoint,
the self-consistency check and the 80/20 tables and figures (docs/rescoring.md)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

import hed
from hed.analysis.overlap import (
    CHANGE_COLUMNS,
    OVERLAP_COLUMNS,
    PERCENTILE_COLUMNS,
    entropy_change_by_percentile,
    entropy_overlap,
    entropy_percentiles,
)
from hed.analysis.rescoring import (
    CONSISTENCY_COLUMNS,
    REFERENCE_METADATA_KEY,
    RESCORING_METADATA_KEY,
    RescoringConsistencyError,
    items_to_score,
    read_rescored,
    reference_metadata,
    rescored_table,
    rescoring_section,
    shard_dtype,
    shard_rows,
)
from hed.config.params import AggregationParams, GenerationParams
from hed.config.prompt_params import PromptsParams
from hed.core.command_line import nodes_command
from hed.decode.teacher_forced import compare_scores
from hed.errors import ConfigError, InputDataError
from hed.records.schema import RECORD_KEY, REFERENCE_RESPONSE_SCHEMA
from hed.records.shard_metadata import GENERATION_METADATA_KEY

logger = logging.getLogger(__name__)


def select_reference_responses(
    prompts: pd.DataFrame,
    sequences: ds.Dataset,
    token_records: ds.Dataset,
    shard_records: ds.Dataset,
    *,
    reference_run: str,
    reference_step: int,
) -> pa.Table:
    """The responses HED generated at (``reference_run``, ``reference_step``), as token ids.

    Args:
        prompts: ``prompts`` (the user message of each prompt_index).
        sequences: ``<ref_run>.step_<ref_step>.sequences`` (merged responses).
        token_records: ``<ref_run>.step_<ref_step>.token_records`` (merged, key order).
        shard_records: ``<ref_run>.step_<ref_step>.shard_0.token_records``; only its
            ``hed.generation`` metadata is read (decode dtype, temperature, top_prob_k).

    Returns:
        A :data:`~hed.records.schema.REFERENCE_RESPONSE_SCHEMA` table in (prompt_index,
        sample_index)
        order with the Parquet metadata ``hed.reference`` (source, run, step, decode_dtype,
        temperature, top_prob_k).

    Raises:
        InputDataError: a response's token records are missing or their count differs from
            its ``n_tokens``, or a prompt_index is not in ``prompts``.
    """
    where = f"{reference_run}.step_{reference_step}"
    seqs = (
        sequences.to_table(columns=["prompt_index", "sample_index", "n_tokens"])
        .to_pandas()
        .sort_values(["prompt_index", "sample_index"], kind="stable")
    )
    columns = [*RECORD_KEY, "token_id", "is_special"]
    records = token_records.to_table(columns=columns)
    key = np.stack([records.column(c).to_numpy().astype(np.int64) for c in RECORD_KEY[:2]], axis=1)
    expected = np.repeat(
        seqs[["prompt_index", "sample_index"]].to_numpy(np.int64),
        seqs["n_tokens"].to_numpy(np.int64),
        axis=0,
    )
    if key.shape != expected.shape or not np.array_equal(key, expected):
        raise InputDataError(
            f"{where}.token_records do not hold the responses of {where}.sequences in key "
            "order (counts or keys differ): rerun `kedro run --pipelines aggregation`"
        )
    text = dict(zip(prompts["prompt_index"].astype(int), prompts["prompt"], strict=True))
    missing = sorted(set(seqs["prompt_index"].astype(int)) - set(text))
    if missing:
        raise InputDataError(
            f"{where}: prompt_index {missing[0]} is not in `prompts`; the prompt set changed "
            "since the step was generated (rerun generation or keep the prompt set)"
        )
    lengths = seqs["n_tokens"].to_numpy(np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    table = pa.table(
        {
            "prompt_index": pa.array(seqs["prompt_index"].to_numpy(np.int32)),
            "sample_index": pa.array(seqs["sample_index"].to_numpy(np.int16)),
            "prompt": pa.array([text[int(i)] for i in seqs["prompt_index"]], type=pa.string()),
            "response_text": pa.nulls(len(seqs), type=pa.string()),
            "response_token_ids": pa.ListArray.from_arrays(
                offsets, records.column("token_id").combine_chunks()
            ),
            "is_special": pa.ListArray.from_arrays(
                offsets, records.column("is_special").combine_chunks()
            ),
        },
        schema=REFERENCE_RESPONSE_SCHEMA,
    )
    generation = json.loads(
        (shard_records.schema.metadata or {}).get(GENERATION_METADATA_KEY, b"{}")
    )
    sampling = generation.get("sampling", {})
    metadata = {
        "source": "generated",
        "run": reference_run,
        "step": int(reference_step),
        "decode_dtype": generation.get("dtype"),
        "temperature": sampling.get("temperature"),
        "top_prob_k": sampling.get("top_prob_k"),
    }
    logger.info(
        "Reference responses: %d responses, %d tokens of %s (decoded in %s)",
        len(seqs),
        int(lengths.sum()),
        where,
        metadata["decode_dtype"],
    )
    return table.replace_schema_metadata({REFERENCE_METADATA_KEY: json.dumps(metadata).encode()})


def select_user_responses(user_responses: pd.DataFrame) -> pa.Table:
    """A user's (prompt, response) pairs as the reference responses.

    Args:
        user_responses: ``rescoring_user_responses``: columns ``prompt`` (the user message, the
            same text a prompt file holds) and ``response`` (the response text, tokenized by the
            re-scoring checkpoint's tokenizer without added special tokens); optional
            ``prompt_index`` and ``sample_index`` (default: prompts numbered in order of first
            appearance, samples in order within a prompt).

    Returns:
        A :data:`~hed.records.schema.REFERENCE_RESPONSE_SCHEMA` table (token ids null) with the
        metadata
        ``hed.reference`` = ``{"source": "file"}``.

    Raises:
        InputDataError: a column is missing, a value is empty, or a key repeats.
    """
    name = "rescoring_user_responses"
    for column in ("prompt", "response"):
        if column not in user_responses.columns:
            raise InputDataError(
                f"{name}: no column {column!r} (columns: {', '.join(map(str, user_responses))}); "
                "give one row per response with columns prompt and response"
            )
        empty = user_responses[column].isna() | (user_responses[column].astype(str) == "")
        if empty.any():
            raise InputDataError(
                f"{name}: column {column!r} is empty in row {int(np.argmax(empty))}"
            )
    frame = user_responses.reset_index(drop=True)
    if "prompt_index" not in frame:
        frame["prompt_index"] = pd.factorize(frame["prompt"])[0]
    if "sample_index" not in frame:
        frame["sample_index"] = frame.groupby("prompt_index").cumcount()
    duplicated = frame.duplicated(["prompt_index", "sample_index"])
    if duplicated.any():
        row = frame[duplicated].iloc[0]
        raise InputDataError(
            f"{name}: (prompt_index {row.prompt_index}, sample_index {row.sample_index}) "
            "appears twice; each response needs its own key"
        )
    frame = frame.sort_values(["prompt_index", "sample_index"], kind="stable")
    table = pa.table(
        {
            "prompt_index": pa.array(frame["prompt_index"].to_numpy(np.int32)),
            "sample_index": pa.array(frame["sample_index"].to_numpy(np.int16)),
            "prompt": pa.array(frame["prompt"].astype(str).tolist(), type=pa.string()),
            "response_text": pa.array(frame["response"].astype(str).tolist(), type=pa.string()),
            "response_token_ids": pa.nulls(len(frame), type=pa.list_(pa.int32())),
            "is_special": pa.nulls(len(frame), type=pa.list_(pa.bool_())),
        },
        schema=REFERENCE_RESPONSE_SCHEMA,
    )
    metadata = {"source": "file", "run": None, "step": None, "decode_dtype": None}
    return table.replace_schema_metadata({REFERENCE_METADATA_KEY: json.dumps(metadata).encode()})


def rescore_shard(
    reference_responses: ds.Dataset,
    checkpoints: dict[str, Any],
    prompt_params: PromptsParams | dict[str, Any],
    rescoring: dict[str, Any],
    generation: dict[str, Any],
    *,
    run: str,
    step: int,
    shard: int,
    num_shards: int,
) -> pa.Table:
    """Score the run's reference responses of one shard teacher-forced by checkpoint ``step``.

    The shard holds the responses with ``prompt_index % num_shards == shard``. Each prompt is
    rendered as generation renders it (``params:prompts``: chat template, system prompt) with
    this checkpoint's tokenizer and the response's token ids appended; per position the
    entropy, logprob, rank and top-k of ``softmax(z / T)`` over the whole vocabulary are
    computed by :func:`hed.decode.teacher_forced.score_responses`.

    Args:
        reference_responses: ``<run>.reference_responses``.
        checkpoints: ``checkpoints``.
        prompt_params: ``params:prompts`` (its rendering settings; parsed or its dict).
        rescoring: ``params:rescoring`` (dtype, batch_size, chunk_positions, temperature,
            top_prob_k, torch_threads).
        generation: ``params:generation`` (temperature and top_prob_k when ``rescoring``
            leaves them null).
        run, step, shard, num_shards: bound when the pipeline is built.

    Returns:
        A :data:`~hed.records.schema.RESCORED_RECORD_SCHEMA` table in key order with the Parquet
        metadata ``hed.decode.teacher_forced`` (dtype, device, temperature, top_prob_k, checkpoint,
        reference).

    Raises:
        ConfigError: the step has no resolved checkpoint, or a bad parameter.
        CheckpointError: the checkpoint cannot be loaded or has an unsupported head.
        InputDataError: a token id outside the checkpoint's vocabulary.
    """
    from hed.decode.factory import open_backend
    from hed.decode.prompts import render_prompt
    from hed.decode.teacher_forced import score_responses

    params, rendering = rescoring_section(rescoring), PromptsParams.of(prompt_params).rendering
    entry = checkpoints.get(run, {}).get("steps", {}).get(str(step))
    if entry is None:
        raise ConfigError(
            f"no checkpoint resolved for run {run!r} step {step} (a step added since, or "
            f"found by `steps: all`): resolve them again with "
            f"`{nodes_command(['resolve_checkpoints'])}`, then run your command again"
        )
    sampling = GenerationParams.of(generation).sampling
    temperature = params.temperature or sampling.temperature
    top_prob_k = int(params.top_prob_k or sampling.top_prob_k)
    with open_backend(
        "hf", entry["model_dir"], dtype=params.dtype, torch_threads=params.torch_threads
    ) as backend:
        table = reference_responses.to_table()
        mine = shard_rows(table, shard, num_shards)
        items, special = items_to_score(
            mine, backend.tokenizer, rendering, backend.special_ids, render_prompt
        )
        scored = list(
            score_responses(
                backend.model,
                items,
                temperature=float(temperature),
                top_prob_k=top_prob_k,
                batch_size=params.batch_size,
                chunk_positions=params.chunk_positions,
                pad_token_id=int(backend.tokenizer.pad_token_id or 0),
            )
        )
    device = backend.device
    metadata = {
        "run": run,
        "step": int(step),
        "shard": int(shard),
        "num_shards": int(num_shards),
        "dtype": params.dtype,
        "device": device,
        "temperature": float(temperature),
        "top_prob_k": top_prob_k,
        "checkpoint": entry,
        "reference": reference_metadata(reference_responses),
        "hed_version": hed.__version__,
    }
    logger.info(
        "%s.step_%s.shard_%s: re-scored %d responses, %d positions (%s)",
        run,
        step,
        shard,
        len(scored),
        sum(len(s.token_ids) for s in scored),
        params.dtype,
    )
    records = rescored_table(scored, special, run=run, step=step, shard=shard, k=top_prob_k)
    return records.replace_schema_metadata({RESCORING_METADATA_KEY: json.dumps(metadata).encode()})


def collect_rescored_entropies(
    *shards: ds.Dataset, index: Sequence[tuple[str, int, int]]
) -> dict[str, dict[int, np.ndarray]]:
    """The non-special re-scored entropies of every (run, step), in record-key order.

    Args:
        *shards: the ``<run>.step_<step>.shard_<k>.rescored_records`` datasets, in the order
            of ``index``.
        index: ``(run, step, shard)`` of each dataset (bound when the pipeline is built).

    Returns:
        ``{run: {step: (N,) float32}}``.

    Raises:
        InputDataError: two steps of a run hold different positions or tokens (they were not
            scored on the same reference responses).
    """
    grouped: dict[tuple[str, int], list[ds.Dataset]] = {}
    for (run, step, _), dataset in zip(index, shards, strict=True):
        grouped.setdefault((run, int(step)), []).append(dataset)
    result: dict[str, dict[int, np.ndarray]] = {}
    first: dict[str, tuple[int, dict[str, np.ndarray]]] = {}
    for (run, step), datasets in grouped.items():
        arrays = read_rescored(datasets, ["token_id", "entropy", "is_special"])
        if run in first:
            ref_step, ref = first[run]
            same = len(ref["token_id"]) == len(arrays["token_id"]) and all(
                np.array_equal(ref[c], arrays[c]) for c in (*RECORD_KEY, "token_id")
            )
            if not same:
                raise InputDataError(
                    f"{run}.step_{step} and {run}.step_{ref_step} rescored_records hold different "
                    "positions or tokens: rerun `kedro run --pipelines rescoring` so every step "
                    "scores the same reference responses"
                )
        else:
            first[run] = (step, arrays)
        result.setdefault(run, {})[step] = arrays["entropy"][~arrays["is_special"]]
    return result


# ------------------------------------------------------------------ consistency


def check_self_consistency(
    rescoring: dict[str, Any], *datasets: ds.Dataset, checks: Sequence[tuple[str, int, int]]
) -> pd.DataFrame:
    """Compare each self-generated reference step's re-score with its decode-time records.

    For a run whose reference responses were generated by its own checkpoint ``s``, the
    re-score by ``s`` must reproduce the records written at decode time: within
    ``consistency_tolerance`` nats (default 1e-4) when both were computed in float32; with
    another dtype on either side the gap is reported, not judged.

    Args:
        rescoring: ``params:rescoring`` (``consistency_tolerance``).
        *datasets: per entry of ``checks``: ``<run>.reference_responses``,
            ``<run>.step_<s>.token_records`` (merged decode records), then the ``n_shards``
            ``<run>.step_<s>.shard_<k>.rescored_records``.
        checks: ``(run, step, n_shards)`` per checked run (bound when the pipeline is built).

    Returns:
        ``rescoring_consistency``: one row per checked run with :data:`CONSISTENCY_COLUMNS`
        (status ``pass``, ``reported`` (not both float32) or ``fail``); empty when no run's
        reference set is its own.

    Raises:
        RescoringConsistencyError: a float32/float32 comparison exceeds the tolerance.
    """
    tolerance = float(rescoring_section(rescoring).consistency_tolerance)
    rows, cursor = [], 0
    for run, step, n_shards in checks:
        reference, decode, shards = (
            datasets[cursor],
            datasets[cursor + 1],
            datasets[cursor + 2 : cursor + 2 + n_shards],
        )
        cursor += 2 + n_shards
        columns = ["token_id", "entropy", "logprob", "topk_token_ids"]
        decoded = read_rescored([decode], columns)
        rescored = read_rescored(shards, columns)
        result = compare_scores(decoded, rescored)
        decode_dtype = reference_metadata(reference).get("decode_dtype") or "unknown"
        rescore_dtype = shard_dtype(shards)
        both_fp32 = decode_dtype == rescore_dtype == "float32"
        passed = result.tokens_equal and result.max_abs_entropy_diff <= tolerance
        status = ("pass" if passed else "fail") if both_fp32 else "reported"
        rows.append(
            {
                "run": run,
                "step": int(step),
                "n_positions": result.n_positions,
                "decode_dtype": decode_dtype,
                "rescore_dtype": rescore_dtype,
                "tokens_equal": result.tokens_equal,
                "max_abs_entropy_diff": result.max_abs_entropy_diff,
                "mean_abs_entropy_diff": result.mean_abs_entropy_diff,
                "max_abs_logprob_diff": result.max_abs_logprob_diff,
                "topk_ids_equal_share": result.topk_ids_equal_share,
                "tolerance_nats": tolerance,
                "status": status,
            }
        )
        logger.info(
            "Self-consistency %s.step_%s (decode %s, re-score %s): max |ΔH| %.3g nats, "
            "mean %.3g, %s",
            run,
            step,
            decode_dtype,
            rescore_dtype,
            result.max_abs_entropy_diff,
            result.mean_abs_entropy_diff,
            status,
        )
        if status == "fail":
            raise RescoringConsistencyError(
                f"{run}.step_{step}: re-scoring its own responses in float32 gives entropies up "
                f"to {result.max_abs_entropy_diff:.3g} nats off the decode-time records "
                f"(tolerance {tolerance:g}, tokens equal: {result.tokens_equal}); the re-scored "
                "input differs from what was generated (prompt rendering, tokenizer or "
                "checkpoint changed): check params:prompts and the checkpoint"
            )
    return pd.DataFrame(rows, columns=CONSISTENCY_COLUMNS)


def tabulate_entropy_overlap(
    rescored_entropies: dict[str, dict[int, np.ndarray]],
    aggregation: AggregationParams | dict[str, Any],
) -> pd.DataFrame:
    """``entropy_overlap``: per (run, step) the top-ρ overlap with the first and last step.

    ρ is ``aggregation.top_entropy_frac`` (the high-entropy fraction of the whole study).
    """
    rho = AggregationParams.of(aggregation).top_entropy_frac
    parts = [entropy_overlap(run, steps, rho) for run, steps in rescored_entropies.items()]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=OVERLAP_COLUMNS)


def tabulate_entropy_change(
    rescored_entropies: dict[str, dict[int, np.ndarray]], rescoring: dict[str, Any]
) -> pd.DataFrame:
    """``entropy_change_by_percentile``: per (run, step, base-percentile bin) the mean change."""
    width = rescoring_section(rescoring).percentile_bin_width
    parts = [
        entropy_change_by_percentile(run, steps, width) for run, steps in rescored_entropies.items()
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CHANGE_COLUMNS)


def tabulate_entropy_percentiles(
    *token_records: ds.Dataset, index: Sequence[tuple[str, int]]
) -> pd.DataFrame:
    """``entropy_percentiles_by_step`` from the merged generation records of every (run, step).

    Args:
        *token_records: ``<run>.step_<step>.token_records`` (merged), in ``index`` order.
        index: ``(run, step)`` of each (bound when the pipeline is built).
    """
    rows = []
    for (run, step), dataset in zip(index, token_records, strict=True):
        table = dataset.to_table(columns=["entropy", "is_special"])
        regular = ~table.column("is_special").to_numpy(zero_copy_only=False)
        entropy = table.column("entropy").to_numpy(zero_copy_only=False)[regular]
        rows.append(entropy_percentiles(run, int(step), entropy))
    return pd.DataFrame(rows, columns=PERCENTILE_COLUMNS)


# ------------------------------------------------------------------ figures


def plot_entropy_overlap_png(entropy_overlap: pd.DataFrame):
    """The ``entropy_overlap`` figure
    (:func:`hed.report.rescoring_figures.plot_entropy_overlap`)."""
    from hed.report.rescoring_figures import plot_entropy_overlap

    return plot_entropy_overlap(entropy_overlap)


def plot_entropy_change_png(entropy_change_by_percentile: pd.DataFrame):
    """The ``entropy_change_by_percentile`` figure."""
    from hed.report.rescoring_figures import plot_entropy_change

    return plot_entropy_change(entropy_change_by_percentile)


def plot_entropy_percentiles_png(entropy_percentiles_by_step: pd.DataFrame):
    """The ``entropy_percentiles_by_step`` figure, with the 80/20 reference values marked."""
    from hed.report.rescoring_figures import plot_entropy_percentiles

    return plot_entropy_percentiles(entropy_percentiles_by_step)
