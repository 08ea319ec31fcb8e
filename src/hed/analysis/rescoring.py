"""The rescoring pipeline's library: its parameters, the reference-set plan, the shard split
and the re-scored tables (docs/rescoring.md). The scoring itself is
:mod:`hed.decode.teacher_forced`."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from hed.config.model import Bool, NonNegativeInt, PositiveInt, PositiveNumber, Section
from hed.decode.types import CONSISTENCY_TOLERANCE_NATS, ResponseToScore
from hed.errors import ConfigError, HEDError
from hed.records.schema import RECORD_KEY, RESCORED_RECORD_SCHEMA, record_key_columns

logger = logging.getLogger(__name__)

#: Parquet key-value metadata of ``<run>.reference_responses``: where the responses come from.
REFERENCE_METADATA_KEY = b"hed.reference"
#: Parquet key-value metadata of a re-scored shard: how it was scored.
RESCORING_METADATA_KEY = b"hed.decode.teacher_forced"

REFERENCE_SOURCES = ("generated", "file")
RESCORING_DTYPES = ("float32", "bfloat16", "float16")

CONSISTENCY_COLUMNS = [
    "run",
    "step",
    "n_positions",
    "decode_dtype",
    "rescore_dtype",
    "tokens_equal",
    "max_abs_entropy_diff",
    "mean_abs_entropy_diff",
    "max_abs_logprob_diff",
    "topk_ids_equal_share",
    "tolerance_nats",
    "status",
]


class RescoringConsistencyError(HEDError):
    """A float32 re-score of a checkpoint's own responses is off its decode-time records."""


# ------------------------------------------------------------------ parameters and plan


class ReferenceSource(Section):
    """``rescoring.reference``: which responses every checkpoint of a run re-scores."""

    section: ClassVar[str] = "rescoring.reference"

    source: Literal[REFERENCE_SOURCES] = "generated"  # type: ignore[valid-type]
    """generated: HED's merged records; file: the ``rescoring_user_responses`` dataset."""
    run: str | None = None
    """The run whose responses are re-scored (null: each run its own)."""
    step: NonNegativeInt | Literal["last"] | None = None
    """That run's step (null or last: its last step)."""


class RescoringParams(Section):
    """``rescoring`` (parameters_rescoring.yml): re-score responses teacher-forced."""

    section: ClassVar[str] = "rescoring"

    in_default: Bool = False
    """``kedro run`` (``__default__``) includes the rescoring pipeline."""
    reference: ReferenceSource = ReferenceSource()
    """Which responses are re-scored."""
    dtype: Literal[RESCORING_DTYPES] = "float32"  # type: ignore[valid-type]
    """float32 reproduces the decode-time records to 1e-4 nats; or bfloat16, float16."""
    batch_size: PositiveInt = 4
    """Responses per forward pass."""
    chunk_positions: PositiveInt = 64
    """Positions per LM-head chunk."""
    temperature: PositiveNumber | None = None
    """T of softmax(z / T) (null: generation.temperature)."""
    top_prob_k: PositiveInt | None = None
    """Top-k kept per position (null: generation.top_prob_k)."""
    torch_threads: NonNegativeInt | None = None
    """Torch's CPU threads (null: torch's default)."""
    percentile_bin_width: PositiveInt = 5
    """Width of the base-percentile bins, in percent."""
    consistency_tolerance: PositiveNumber = CONSISTENCY_TOLERANCE_NATS
    """Nats; the float32 self-consistency bound."""


#: ``rescoring`` parameters and their defaults, from :class:`RescoringParams`.
RESCORING_DEFAULTS: dict[str, Any] = RescoringParams().model_dump()

#: ``params:rescoring`` parsed (``None``: every default); one-line ConfigError otherwise.
rescoring_section = RescoringParams.of


@dataclass(frozen=True)
class ReferencePlan:
    """Where one run's reference responses come from.

    Attributes:
        run: the run whose checkpoints re-score them.
        source: ``generated`` (HED's records of ``reference_run`` at ``reference_step``) or
            ``file`` (the ``rescoring_user_responses`` dataset).
        reference_run, reference_step: the generating checkpoint (None for a file).
    """

    run: str
    source: str
    reference_run: str | None
    reference_step: int | None

    @property
    def self_generated(self) -> bool:
        """Whether one of the run's own checkpoints generated the responses (checkable)."""
        return self.source == "generated" and self.reference_run == self.run


def reference_plan(run: str, runs_steps: dict[str, Sequence[int]], rescoring: Any):
    """The :class:`ReferencePlan` of ``run`` (decided when the pipeline is built).

    Args:
        run: the run.
        runs_steps: ``{run: steps}`` of the layout.
        rescoring: ``params:rescoring``.

    Raises:
        ConfigError: ``reference.run`` is not a run, or ``reference.step`` not one of its steps.
    """
    reference = rescoring_section(rescoring).reference
    if reference.source == "file":
        return ReferencePlan(run, "file", None, None)
    ref_run = reference.run or run
    if ref_run not in runs_steps:
        raise ConfigError(
            f"rescoring.reference.run = {ref_run!r} is not a run; known runs: "
            f"{', '.join(runs_steps)}"
        )
    steps = list(runs_steps[ref_run])
    step = reference.step
    if step is None or step == "last":
        step = max(steps)
    if step not in steps:
        raise ConfigError(
            f"rescoring.reference.step = {step!r} is not a step of run {ref_run} ({steps})"
        )
    return ReferencePlan(run, "generated", ref_run, int(step))


# ------------------------------------------------------------------ reference responses


def reference_metadata(table: pa.Table | ds.Dataset) -> dict[str, Any]:
    """The decoded ``hed.reference`` metadata of a reference-responses table (``{}`` if none)."""
    return json.loads((table.schema.metadata or {}).get(REFERENCE_METADATA_KEY, b"{}"))


# ------------------------------------------------------------------ one re-scored shard


def shard_rows(table: pa.Table, shard: int, num_shards: int) -> pa.Table:
    prompt_index = table.column("prompt_index").to_numpy()
    return table.filter(pa.array(prompt_index % num_shards == shard))


def items_to_score(table: pa.Table, tokenizer, rendering, special_ids, render_prompt):
    """:class:`ResponseToScore` items and is_special arrays of the reference rows, each prompt
    rendered by ``render_prompt(tokenizer, prompt, rendering)``
    (:func:`hed.decode.prompts.render_prompt`, :class:`~hed.decode.prompts.PromptRendering`).
    """
    rendered: dict[str, list[int]] = {}
    items, special = [], []
    for row in table.to_pylist():
        prompt = row["prompt"]
        if prompt not in rendered:
            text = render_prompt(tokenizer, prompt, rendering)
            rendered[prompt] = tokenizer(text, add_special_tokens=False)["input_ids"]
        if row["response_token_ids"] is not None:
            ids = np.asarray(row["response_token_ids"], dtype=np.int32)
            is_special = np.asarray(row["is_special"], dtype=bool)
        else:
            ids = np.asarray(
                tokenizer(row["response_text"], add_special_tokens=False)["input_ids"], np.int32
            )
            is_special = np.isin(ids, special_ids)
        items.append(
            ResponseToScore(row["prompt_index"], row["sample_index"], rendered[prompt], ids)
        )
        special.append(is_special)
    return items, special


def rescored_table(
    scored: Sequence[Any], special: Sequence[np.ndarray], *, run: str, step: int, shard: int, k: int
) -> pa.Table:
    """Assemble :class:`~hed.decode.teacher_forced.ScoredResponse` lists into a
    RESCORED_RECORD_SCHEMA table."""
    lengths = np.array([len(s.token_ids) for s in scored], dtype=np.int64)
    n = int(lengths.sum())

    def cat(name: str, dtype, tail=()) -> np.ndarray:
        if not scored:
            return np.zeros((0, *tail), dtype)
        return np.concatenate([getattr(s, name) for s in scored]).astype(dtype)

    k = scored[0].topk_token_ids.shape[1] if scored else k
    offsets = pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32))
    columns = {
        **record_key_columns(run, step, shard, scored),
        "token_id": pa.array(cat("token_ids", np.int32)),
        "entropy": pa.array(cat("entropy", np.float32)),
        "logprob": pa.array(cat("logprob", np.float32)),
        "rank": pa.array(cat("rank", np.int32)),
        "topk_token_ids": pa.ListArray.from_arrays(
            offsets, pa.array(cat("topk_token_ids", np.int32, (k,)).reshape(-1))
        ),
        "topk_probs": pa.ListArray.from_arrays(
            offsets, pa.array(cat("topk_probs", np.float32, (k,)).reshape(-1))
        ),
        "is_special": pa.array(
            np.concatenate(list(special)).astype(bool) if n else np.zeros(0, bool)
        ),
    }
    return pa.table(columns, schema=RESCORED_RECORD_SCHEMA)


# ------------------------------------------------------------------ reading re-scored files


def read_rescored(shards: Sequence[ds.Dataset], columns: Sequence[str]) -> dict[str, np.ndarray]:
    """The named columns of a step's re-scored shards, concatenated and sorted by record key.

    List columns (``topk_token_ids``) come back as ``(N, k)`` arrays.
    """
    wanted = list(dict.fromkeys([*RECORD_KEY, *columns]))
    table = pa.concat_tables([shard.to_table(columns=wanted) for shard in shards])
    arrays: dict[str, np.ndarray] = {}
    for name in wanted:
        column = table.column(name).combine_chunks()
        if pa.types.is_list(column.type):
            width = len(column[0]) if len(column) else 0
            arrays[name] = column.values.to_numpy(zero_copy_only=False).reshape(-1, width)
        else:
            arrays[name] = column.to_numpy(zero_copy_only=False)
    order = np.lexsort([arrays[c] for c in RECORD_KEY[::-1]])
    return {name: values[order] for name, values in arrays.items()}


def shard_dtype(shards: Sequence[ds.Dataset]) -> str:
    dtypes = {
        json.loads((s.schema.metadata or {}).get(RESCORING_METADATA_KEY, b"{}")).get("dtype")
        for s in shards
    }
    dtypes.discard(None)
    return dtypes.pop() if len(dtypes) == 1 else "unknown"


# ------------------------------------------------------------------ tables
