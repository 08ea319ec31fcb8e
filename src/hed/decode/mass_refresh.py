"""The word-start mass of the current lexicon for existing responses, without re-sampling.

A shard's ``anthropomorphic_mass`` / ``reasoning_mass`` are ``Σ_{i ∈ S_c} softmax(z_t / T)_i``
over the word-start ids ``S_c`` of a lexicon category (:mod:`hed.core.propensity`), summed at
generation with the lexicon of that time. After a lexicon change the same sums come from a
teacher-forced pass of the generating checkpoint over the shard's own responses
(:func:`hed.decode.teacher_forced.score_responses` with ``mass_ids``): the logits ``z_t`` after
``prompt + response[:t]`` are the ones the sampler saw, so only the mass columns change; every
other column (tokens, entropies, log-probabilities, top-k) is kept as generated. In float32 the
re-scored mass equals a decode-time mass of the same lexicon to ~1e-6 (the reductions run in
another order); in bfloat16 to about 1e-2 (docs/rescoring.md, "Exactness").

Cost: one forward pass per response, no sampling loop: a fraction of generation's time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from hed.core.propensity import MASS_CATEGORIES, tokenizer_word_start_ids
from hed.decode.teacher_forced import score_responses
from hed.decode.types import ResponseToScore
from hed.records.sequence import MASS_COLUMNS
from hed.records.shard_metadata import GENERATION_METADATA_KEY, lexicon_sha256


def response_items(
    records: pa.Table, prompt_ids: Mapping[int, Sequence[int]]
) -> list[ResponseToScore]:
    """One :class:`ResponseToScore` per response of ``records``, in the records' order.

    Args:
        records: a shard's token records in key order (prompt_index, sample_index, position).
        prompt_ids: ``prompt_index -> the model input ids`` as generation rendered them
            (:func:`hed.decode.types.encode_prompts` of :func:`hed.decode.prompts.prompt_inputs`).
    """
    prompt = records.column("prompt_index").to_numpy().astype(np.int64)
    sample = records.column("sample_index").to_numpy().astype(np.int64)
    tokens = records.column("token_id").to_numpy().astype(np.int64)
    if not len(tokens):
        return []
    cuts = np.flatnonzero((np.diff(prompt) != 0) | (np.diff(sample) != 0)) + 1
    starts, ends = np.r_[0, cuts], np.r_[cuts, len(tokens)]
    return [
        ResponseToScore(int(prompt[a]), int(sample[a]), prompt_ids[int(prompt[a])], tokens[a:b])
        for a, b in zip(starts, ends, strict=True)
    ]


def refreshed_mass(
    records: pa.Table,
    prompt_ids: Mapping[int, Sequence[int]],
    backend: Any,
    lexicon: Any,
    *,
    temperature: float,
    batch_size: int = 4,
    chunk_positions: int = 64,
) -> pa.Table:
    """``records`` with their mass columns summed over ``lexicon``'s word-start ids.

    Args:
        records: a shard's token records (TOKEN_RECORD_SCHEMA, key order, one row per position).
        prompt_ids: see :func:`response_items`.
        backend: the generating checkpoint opened (:func:`hed.decode.factory.open_backend`,
            ``hf``): its ``model`` and ``tokenizer``.
        lexicon: the current :class:`hed.core.lexicon.Lexicon`.
        temperature: the shard's sampling ``T`` (the records' distribution is softmax(z / T)).
        batch_size: responses per forward pass.
        chunk_positions: positions per LM-head chunk.

    Returns:
        The same rows and columns; ``anthropomorphic_mass`` / ``reasoning_mass`` (float32 in
        [0, 1]) recomputed; the ``hed.generation`` metadata's ``word_mass`` names the lexicon
        (``lexicon_sha256``) and how the columns were made (``"teacher_forced"``).

    Raises:
        InputDataError: a token id outside the checkpoint's vocabulary (another tokenizer).
        NonFiniteLogitsError, CheckpointError: as :func:`score_responses`.
    """
    items = response_items(records, prompt_ids)
    mass_ids = tokenizer_word_start_ids(backend.tokenizer, lexicon)
    scored = score_responses(
        backend.model,
        items,
        temperature=temperature,
        top_prob_k=1,
        batch_size=batch_size,
        chunk_positions=chunk_positions,
        pad_token_id=int(backend.tokenizer.pad_token_id or 0),
        mass_ids=mass_ids,
    )
    parts: dict[str, list[np.ndarray]] = {c: [] for c in MASS_CATEGORIES}
    for response in scored:
        for category in MASS_CATEGORIES:
            parts[category].append(response.mass[category])
    table = records
    for category, column in zip(MASS_CATEGORIES, MASS_COLUMNS, strict=True):
        values = np.concatenate(parts[category]) if parts[category] else np.zeros(0, np.float32)
        field = pa.field(column, pa.float32())
        array = pa.array(values.astype(np.float32), type=pa.float32())
        if column in table.column_names:
            table = table.set_column(table.schema.get_field_index(column), field, array)
        else:
            table = table.append_column(field, array)
    return table.replace_schema_metadata(_with_word_mass(records.schema.metadata, lexicon))


def refresh_shard(
    records: pa.Table,
    prompts: Any,
    model_dir: str,
    rendering: Any,
    lexicon: Any,
    *,
    torch_threads: int | None = None,
    batch_size: int = 4,
) -> pa.Table:
    """A shard's token records with the mass columns of ``lexicon`` (:func:`refreshed_mass`),
    the checkpoint opened in the dtype and at the temperature the shard was generated with
    (its ``hed.generation`` metadata).

    Args:
        records: the shard's token records (with their ``hed.generation`` metadata).
        prompts: the ``prompts`` dataset (a DataFrame: prompt_index, prompt_id, prompt).
        model_dir: the generating checkpoint (``checkpoints`` entry of the shard's run and step).
        rendering: the prompt rendering (:class:`hed.decode.prompts.PromptRendering`).
        lexicon: the current lexicon.
        torch_threads: torch's CPU threads (None: torch's default).
        batch_size: responses per forward pass.

    Returns:
        See :func:`refreshed_mass`.
    """
    from hed.decode.factory import open_backend
    from hed.decode.prompts import prompt_inputs
    from hed.decode.types import encode_prompts

    generation = json.loads((records.schema.metadata or {}).get(GENERATION_METADATA_KEY, b"{}"))
    sampling = generation.get("sampling") or {}
    wanted = set(records.column("prompt_index").to_pylist())
    rows = prompts[prompts["prompt_index"].isin(wanted)]
    with open_backend(
        "hf", model_dir, dtype=generation.get("dtype"), torch_threads=torch_threads
    ) as backend:
        inputs = prompt_inputs(rows, backend, rendering, int(sampling.get("max_new_tokens", 1)))
        return refreshed_mass(
            records,
            encode_prompts(backend.tokenizer, inputs),
            backend,
            lexicon,
            temperature=float(sampling.get("temperature", 1.0)),
            batch_size=batch_size,
        )


def _with_word_mass(metadata: dict[bytes, bytes] | None, lexicon: Any) -> dict[bytes, bytes]:
    metadata = dict(metadata or {})
    generation = json.loads(metadata.get(GENERATION_METADATA_KEY, b"{}"))
    generation["word_mass"] = {"lexicon_sha256": lexicon_sha256(lexicon), "by": "teacher_forced"}
    metadata[GENERATION_METADATA_KEY] = json.dumps(generation, sort_keys=True).encode()
    return metadata


__all__ = ["refresh_shard", "refreshed_mass", "response_items"]
