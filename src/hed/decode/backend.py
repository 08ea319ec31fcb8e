"""The decoding contract: what every generation backend does, and :func:`open_backend`.

A backend holds one checkpoint ready to sample from. Generation (the ``generate_shard``
node), the rescoring (which needs the loaded model) and the benchmarks open one with
:func:`open_backend` and use only what :class:`DecodingBackend` promises:

* ``tokenizer``, ``eos_token_ids``, ``special_ids`` and ``max_position_embeddings`` of the
  checkpoint (prompt rendering, context checks, the ``is_special`` column);
* ``generate(prompts, samples_per_prompt, sampling, progress=..., skip=...)``: one
  :class:`~hed.records.sequence.GeneratedSequence` per (prompt, sample) not in ``skip``,
  each with the exact decode-time records of softmax(z / T) (entropy in nats, log-prob of
  the sampled token, top-k); the tokens of a sequence depend only on (seed, prompt_id,
  sample_index), never on its batch or on ``skip``;
* ``metadata``: ``{"name", "version", ...}`` for the shard's generation metadata;
* ``close()``: release the model / engine (a backend is also a context manager).

Two backends implement it: ``hf`` (:class:`hed.decode.hf.HFBackend`, transformers
``generate`` with HED's logits processors) and ``vllm`` (:class:`hed.decode.vllm.VLLMBackend`,
a vLLM engine with HED's recording processor). A new backend subclasses
:class:`DecodingBackend` in its own ``decode/<name>.py`` and adds a branch to
:func:`open_backend` and a name to :data:`BACKENDS`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hed.decode.types import GeneratedSequence, PromptInput, SamplingParams
from hed.errors import ConfigError

#: ``generation.backend`` values: transformers ``generate`` or a vLLM engine.
BACKENDS = ("hf", "vllm")

#: ``progress(sequences_done, tokens_done)``, both cumulative over one ``generate`` call.
Progress = Callable[[int, int], None]


class DecodingBackend(abc.ABC):
    """One checkpoint, ready to sample from with exact decode-time records.

    Attributes:
        name: the backend's name (one of :data:`BACKENDS`).
        tokenizer: the checkpoint's HuggingFace tokenizer
            (:func:`hed.decode.loading.load_tokenizer`).
        eos_token_ids: every id that ends a response (the checkpoint's generation config).
        max_position_embeddings: the model's context length, None when its config has none.
        metadata: ``{"name", "version", ...}`` recorded in the shard metadata.
        model_dir: the checkpoint folder.
        dtype: the dtype the model runs in, by name (``float32``, ``bfloat16``, ``float16``).
        device: ``cpu`` or ``cuda``.
        mass_ids: {category: int64 word-start ids} whose probability mass every token record
            carries (:meth:`record_word_mass`); None: the mass columns stay null.
    """

    mass_ids: dict[str, np.ndarray] | None = None
    name: str
    model_dir: str | Path
    dtype: str
    device: str
    tokenizer: Any
    eos_token_ids: list[int]
    max_position_embeddings: int | None
    metadata: dict[str, Any]

    @abc.abstractmethod
    def generate(
        self,
        prompts: Sequence[PromptInput],
        samples_per_prompt: int,
        sampling: SamplingParams,
        *,
        progress: Progress | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> Iterator[GeneratedSequence]:
        """Sample ``samples_per_prompt`` responses per prompt and record every token.

        Args:
            prompts: the prompts, already chat-templated.
            samples_per_prompt: responses per prompt.
            sampling: the sampling settings.
            progress: called as work is done with (sequences done, tokens generated).
            skip: ``(prompt_index, sample_index)`` pairs not to generate (kept from an
                interrupted run); the others sample the same tokens as without ``skip``.

        Yields:
            One :class:`GeneratedSequence` per (prompt, sample) not in ``skip``.

        Raises:
            NonFiniteLogitsError: the model produced NaN logits.
            ConfigError: (vllm) a prompt does not fit ``max_model_len``, the KV cache does not fit.
        """

    def close(self) -> None:  # noqa: B027 - a backend with nothing to release keeps this
        """Release the model or engine (idempotent)."""

    def record_word_mass(self, lexicon: Any) -> None:
        """Record, per token, the mass of ``lexicon``'s anthropomorphic and reasoning word-start
        ids (:func:`hed.core.propensity.tokenizer_word_start_ids`, built once here)."""
        from hed.core.propensity import tokenizer_word_start_ids

        self.mass_ids = tokenizer_word_start_ids(self.tokenizer, lexicon)

    @property
    def special_ids(self) -> np.ndarray:
        """Sorted int32 ids that are special: the tokenizer's special ids and every EOS id."""
        ids = set(self.tokenizer.all_special_ids) | set(self.eos_token_ids)
        return np.array(sorted(ids), dtype=np.int32)

    def __enter__(self) -> DecodingBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def dtype_label(dtype: Any) -> str:
    """``torch.bfloat16`` (or ``"bfloat16"``) → ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def check_backend_name(name: Any) -> str:
    """``name`` if it is one of :data:`BACKENDS`.

    Raises:
        ConfigError: ``generation.backend must be one of hf, vllm, got <name>``.
    """
    if name not in BACKENDS:
        raise ConfigError(f"generation.backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    return name


def generate_shard_sequences(
    backend: DecodingBackend,
    prompts: Sequence[PromptInput],
    generation: Any,
    *,
    parts: Any = None,
    binding: dict[str, Any],
    label: str,
) -> list[GeneratedSequence]:
    """Every sequence of one shard from ``backend``, crash-safe, with progress.

    Finished sequences go to the shard's partial area ``parts`` as they complete (one part
    per ``generation.sampling.batch_size`` sequences); a rerun with the same ``binding`` (the
    shard's generation metadata) keeps them and generates only the missing (prompt, sample) pairs
    (:func:`hed.records.shard_parts.keep_and_generate`). Progress: a bar or periodic log
    lines and a summary line (:class:`hed.decode.progress.ShardProgress`).

    Args:
        backend: an open backend.
        prompts: the shard's prompts, already chat-templated.
        generation: the parsed ``params:generation`` (:class:`hed.config.params.GenerationParams`:
            ``samples_per_prompt``, ``sampling``, ``log_every_s``).
        parts: the shard's :class:`hed.records.shard_parts.ShardParts`; None keeps nothing.
        binding: what the kept parts must belong to (the shard's generation metadata).
        label: the shard, e.g. ``run.step_10.shard_0`` (progress and log lines).

    Returns:
        The kept sequences first, then the generated ones (in the backend's order).
    """
    from hed.decode.progress import ShardProgress
    from hed.records.shard_parts import keep_and_generate

    samples_per_prompt, sampling = generation.samples_per_prompt, generation.sampling
    progress: ShardProgress | None = None

    def generate(kept: set[tuple[int, int]]) -> Iterator[GeneratedSequence]:
        nonlocal progress
        todo = len(prompts) * samples_per_prompt - len(kept)
        progress = ShardProgress(label, todo, generation.log_every_s)
        return backend.generate(prompts, samples_per_prompt, sampling, progress=progress, skip=kept)

    if parts is None:
        sequences, n_kept = list(generate(set())), 0
    else:
        sequences, n_kept = keep_and_generate(
            parts, binding, generate, every=sampling.batch_size, label=label
        )
    if progress is not None:
        progress.finish([s.finish_reason for s in sequences[n_kept:]], kept=n_kept)
    return sequences


__all__ = [
    "BACKENDS",
    "DecodingBackend",
    "Progress",
    "check_backend_name",
    "generate_shard_sequences",
]
