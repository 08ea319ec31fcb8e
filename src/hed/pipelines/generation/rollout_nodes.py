"""The generation node of a run whose responses are the trainer's own rollouts (docs/rollouts.md).

For a run with ``responses: {source: verl_dump}`` the generation pipeline's shard node scores
instead of sampling: it reads dump step ``<step>.jsonl``, rebuilds each row's token ids
(:mod:`hed.decode.rollouts`) and scores them teacher-forced with the checkpoint that generated
them (:func:`hed.decode.teacher_forced.score_responses`), writing the same two shard datasets
with the same schemas as :func:`hed.pipelines.generation.nodes.generate_shard`, so aggregation,
dynamics, reporting and the explorer read them unchanged.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

import hed
from hed.config.layout import StudyLayout
from hed.config.params import GenerationParams, lexicon_param
from hed.config.prompt_params import PromptsParams
from hed.core.grading import grade_response, normalise_reference
from hed.core.propensity import tokenizer_word_start_ids
from hed.errors import InputDataError
from hed.records.sequence import GeneratedSequence
from hed.records.shard_metadata import chat_template_settings, lexicon_sha256

from .nodes import checkpoint_entry, shard_tables

logger = logging.getLogger(__name__)

#: ``temperature`` used when ``runs.<run>.responses.temperature`` is not set (verl's default).
DEFAULT_ROLLOUT_TEMPERATURE = 1.0

#: Extra column of a dump shard's ``sequences`` (after the SEQUENCE_SCHEMA columns): the row's
#: flag (:data:`hed.decode.rollouts.FLAGS`).
FLAG_COLUMN = "rollout_flag"


def score_dump_shard(  # noqa: PLR0917 - Kedro passes the inputs by name
    prompts: pd.DataFrame,
    checkpoints: dict[str, Any],
    prompt_params: PromptsParams | dict[str, Any],
    params: GenerationParams | dict[str, Any],
    runs: StudyLayout | dict[str, Any],
    aggregation: Any = None,
    *,
    run: str,
    step: int,
    shard: int,
) -> dict[str, pa.Table]:
    """Score one shard of dump step ``step`` teacher-forced by its generating checkpoint.

    Reads ``<responses.path>/<step>.jsonl`` (:func:`hed.records.verl_dump.read_dump_step`; the
    dump is the run's input as a checkpoint folder is, read here rather than through the
    catalog); keeps the rows whose matched ``prompt_index % num_shards == shard``; scores them
    with the ``checkpoints`` entry of (run, step), i.e. the generating checkpoint
    (``resolve_checkpoints``), at the run's rollout temperature, in ``generation.dtype`` with
    the ``hf`` backend (one prefill pass per batch: exact full-vocabulary entropy).

    Correctness (``correct``): the row's reward-extra ``acc``, else ``score >
    responses.score_threshold``, else math-verify of the response against ``gts`` (or the prompt
    set's answer) (:func:`hed.decode.rollouts.dump_correctness`).

    Args:
        prompts: ``prompts``.
        checkpoints: ``checkpoints``.
        prompt_params: ``params:prompts`` (rendering).
        params: ``params:generation`` (num_shards, dtype, batch_size, top_prob_k, torch_threads).
        runs: ``params:runs`` (the run's ``responses``).
        aggregation: ``params:aggregation``: its lexicon's anthropomorphic / reasoning
            word-start mass is recorded per token, as generation records it; None: null.
        run, step, shard: bound when the pipeline is built.

    Returns:
        ``{"token_records", "sequences"}`` as :func:`~hed.pipelines.generation.nodes.generate_shard`
        (``sequences`` has one more column, ``rollout_flag``); the ``hed.generation`` metadata
        holds ``source: verl_dump`` and a ``rollouts`` entry (path, kind, generating step,
        temperature and whether it was set, flag counts, unmatched dump lines, the share of
        sampled ids that differ from the canonical tokenisation).

    Raises:
        InputDataError: a bad dump (:mod:`hed.records.verl_dump`), or no row of it matches a
            prompt of the run's prompt set.
        ConfigError: no resolved checkpoint for (run, step).
        CheckpointError: the checkpoint cannot be loaded.
    """
    from hed.decode.factory import open_backend
    from hed.decode.rollouts import prompt_lookup, rebuild_responses
    from hed.decode.teacher_forced import ResponseToScore, score_responses
    from hed.records.verl_dump import read_dump_step

    generation = GenerationParams.of(params)
    rendering = PromptsParams.of(prompt_params).rendering
    responses = StudyLayout.of(runs, generation).run(run).responses
    entry = checkpoint_entry(checkpoints, run, step)
    dump = read_dump_step(str(responses.path), step)
    temperature = responses.temperature
    if temperature is None:
        logger.warning(
            "runs.%s.responses.temperature is not set: scoring the rollouts of step %d at T = "
            "%.1f (verl's default); set it to actor_rollout_ref.rollout.temperature",
            run,
            step,
            DEFAULT_ROLLOUT_TEMPERATURE,
        )
    k = int(generation.sampling.top_prob_k)
    with open_backend(
        "hf", entry["model_dir"], dtype=generation.dtype, torch_threads=generation.torch_threads
    ) as backend:
        tokenizer = backend.tokenizer
        lexicon = None if aggregation is None else lexicon_param(aggregation)
        mass_ids = None if lexicon is None else tokenizer_word_start_ids(tokenizer, lexicon)
        rebuilt = rebuild_responses(
            dump,
            prompt_lookup(prompts, tokenizer, rendering),
            tokenizer,
            eos_token_ids=backend.eos_token_ids,
            max_response_length=int(responses.max_response_length),
            source=f"verl dump {responses.path}/{step}.jsonl",
        )
        if rebuilt and all(r.prompt_index < 0 for r in rebuilt):
            raise InputDataError(
                f"{responses.path}/{step}.jsonl: none of its {len(rebuilt)} row(s) matches a "
                "prompt of the run's prompt set (wrong prompts file or chat template?): point "
                "raw_prompts at the dataset the run trained on (verl's data.train_files) "
                "(docs/rollouts.md)"
            )
        mine = [
            (i, r)
            for i, r in enumerate(rebuilt)
            if r.prompt_index >= 0 and r.prompt_index % generation.num_shards == shard
        ]
        items = [
            ResponseToScore(r.prompt_index, r.sample_index, r.prompt_ids, r.response_ids)
            for _, r in mine
        ]
        scored = list(
            score_responses(
                backend.model,
                items,
                temperature=float(temperature or DEFAULT_ROLLOUT_TEMPERATURE),
                top_prob_k=k,
                batch_size=generation.sampling.batch_size,
                pad_token_id=int(tokenizer.pad_token_id or 0),
                mass_ids=mass_ids,
            )
        )
        sequences = _as_sequences(scored, [r for _, r in mine], prompts, tokenizer)
        special_ids, dtype, device = backend.special_ids, backend.dtype, backend.device
        scorer = dict(backend.metadata)
    shard_prompts = prompts[prompts["prompt_index"] % generation.num_shards == shard]
    mass = {} if lexicon is None else {"word_mass": {"lexicon_sha256": lexicon_sha256(lexicon)}}
    metadata = {
        **mass,
        "source": "verl_dump",
        "run": run,
        "step": step,
        "shard": shard,
        "num_shards": generation.num_shards,
        "dtype": dtype,
        "device": device,
        "checkpoint": entry,
        "prompt_ids": sorted(set(shard_prompts["prompt_id"])),
        "chat_template": chat_template_settings(rendering.as_params()),
        "hed_version": hed.__version__,
        "scorer": scorer,
        "rollouts": _rollout_summary(responses, step, rebuilt, mine, temperature=temperature, k=k),
    }
    summary = metadata["rollouts"]
    logger.info(
        "%s.step_%s.shard_%s: scored %d dump responses teacher-forced with %s (flags %s; %d "
        "dump line(s) match no prompt; sampled ids differ from the canonical tokenisation "
        "in %s of the responses that carry them)",
        run,
        step,
        shard,
        len(mine),
        summary["generated_by"],
        summary["flags"],
        len(summary["unmatched_lines"]),
        "n/a" if summary["ids_differ_share"] is None else f"{summary['ids_differ_share']:.1%}",
    )
    tables = shard_tables(
        sequences, shard_prompts, metadata, special_ids, run=run, step=step, shard=shard
    )
    return {
        "token_records": tables["token_records"],
        "sequences": _with_dump_correctness(tables["sequences"], dump, mine, responses, prompts),
    }


def _as_sequences(scored, rows, prompts: pd.DataFrame, tokenizer) -> list[GeneratedSequence]:
    from hed.core.token_text import token_texts_batch

    ids_of = dict(zip(prompts["prompt_index"].astype(int), prompts["prompt_id"], strict=True))
    texts = token_texts_batch(tokenizer, [s.token_ids.tolist() for s in scored])
    return [
        GeneratedSequence(
            prompt_index=s.prompt_index,
            prompt_id=ids_of[s.prompt_index],
            sample_index=s.sample_index,
            token_ids=s.token_ids,
            entropy=s.entropy,
            logprob=s.logprob,
            topk_token_ids=s.topk_token_ids,
            topk_probs=s.topk_probs,
            token_texts=t,
            response_text="".join(t),
            finish_reason=r.finish_reason,
            anthropomorphic_mass=s.mass.get("anthropomorphic"),
            reasoning_mass=s.mass.get("reasoning"),
        )
        for s, r, t in zip(scored, rows, texts, strict=True)
    ]


def _rollout_summary(responses, step, rebuilt, mine, *, temperature, k) -> dict[str, Any]:
    from hed.decode.rollouts import FLAGS, generating_step

    compared = [r.canonical_differs for r in rebuilt if r.canonical_differs is not None]
    return {
        "path": str(responses.path),
        "kind": responses.kind,
        "dump_step": int(step),
        "dump_sha256": hashlib.sha256(
            (Path(str(responses.path)) / f"{step}.jsonl").read_bytes()
        ).hexdigest(),
        "generated_by": f"global_step_{generating_step(step, responses.kind)}",
        "temperature": float(temperature or DEFAULT_ROLLOUT_TEMPERATURE),
        "temperature_set": temperature is not None,
        "max_response_length": int(responses.max_response_length),
        "score_threshold": responses.score_threshold,
        "top_prob_k": k,
        "dump_rows": len(rebuilt),
        "shard_rows": len(mine),
        "flags": {f: sum(r.flag == f for _, r in mine) for f in FLAGS if f != "no_prompt"},
        "unmatched_lines": [r.line for r in rebuilt if r.flag == "no_prompt"],
        "ids_differ_share": (sum(compared) / len(compared)) if compared else None,
    }


def _with_dump_correctness(
    sequences: pa.Table, dump: pd.DataFrame, mine, responses, prompts: pd.DataFrame
) -> pa.Table:
    """``sequences`` with ``correct`` from the dump and the ``rollout_flag`` column."""
    from hed.decode.rollouts import dump_correctness

    correct = dump_correctness(dump, responses.score_threshold)
    answers = dict(zip(prompts["prompt_index"].astype(int), prompts["answer"], strict=True))
    by_key = {}
    for i, r in mine:
        value = correct[i]
        if value is None:  # grade against gts, else the prompt set's answer
            gts = dump["gts"].iloc[i]
            reference = normalise_reference(gts) if gts is not None else answers.get(r.prompt_index)
            text = dump["output"].iloc[i]
            value = grade_response(text, None if pd.isna(reference) else str(reference)).correct
        by_key[(r.prompt_index, r.sample_index)] = (value, r.flag)
    keys = zip(
        sequences.column("prompt_index").to_pylist(),
        sequences.column("sample_index").to_pylist(),
        strict=True,
    )
    values = [by_key[key] for key in keys]
    index = sequences.schema.get_field_index("correct")
    table = sequences.set_column(
        index, sequences.schema.field("correct"), pa.array([v for v, _ in values], pa.bool_())
    )
    return table.append_column(FLAG_COLUMN, pa.array([f for _, f in values], pa.string()))
