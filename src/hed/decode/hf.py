"""The ``hf`` backend: exact decode-time token records with transformers ``generate``
(docs/datasets.md). :class:`HFBackend` implements :class:`hed.decode.backend.DecodingBackend`
over :func:`generate_sequences`; the processors are in :mod:`hed.decode.hf_processors`.

At every decode step ``generate`` hands the float32 raw logits ``z`` (B, V) to its logits
processors, in list order, then takes ``argmax`` of what the last one returns (HED runs it
with ``do_sample=False``). HED's list is::

    DecodeRecorder           sees z: entropy, log Z, top-k of softmax(z / T) -> O(k) numbers
    TemperatureLogitsWarper  z / T                        (only when T != 1)
    TopKLogitsWarper         others -> -inf               (only when top_k is set)
    TopPLogitsWarper         outside the nucleus -> -inf  (only when top_p < 1)
    GumbelSampler            + Gumbel noise from one torch.Generator per sequence;
                             argmax -> the sampled token, whose log-prob the recorder keeps

``argmax(x + G)`` with i.i.d. standard Gumbel ``G`` is an exact sample from
``softmax(x)`` (the Gumbel-max trick; vLLM's per-request generators sample the same way).
Each sequence owns a generator seeded from ``(seed, prompt_id, sample_index)`` and draws
exactly one ``V``-vector per step, so its tokens do not depend on which other sequences share
its batch.

Why the recorder sees raw logits: transformers puts the processors it builds from the
generation config *before* custom ones, and fills every unset field of the config passed to
``generate`` from the checkpoint's ``generation_config.json`` (a checkpoint may carry a
repetition penalty, ``suppress_tokens``, ``min_new_tokens`` or sampling settings). During the
call HED swaps in an empty ``GenerationConfig`` as the model's default and passes an explicit
greedy config, so the built-in list is empty and ``DecodeRecorder`` is first; with
``do_sample=False`` no built-in warper (``top_k=50``...) is appended after ``GumbelSampler``.
After each call the tokens ``generate`` returned are checked against the ones
``GumbelSampler`` chose, so a processor slipped in after it cannot go unnoticed.

Finished sequences: ``generate`` keeps running every row until all are done (finished rows
are fed the pad token); the recorder records them too, and the records are cut at each
response's first EOS (included) afterwards, or at ``max_new_tokens``.

Batch invariance: the noise a sequence gets does not depend on its batch (its own
generator), so neither do its tokens, as long as its logits do not. Those do, slightly: the
model's matmuls and torch's reductions change order with the batch shape. Measured on CPU:
float32 logits move by ~1e-7, recorded entropies by ≤1e-5 nats, tokens identical. In bfloat16
the logits themselves move by a bf16 rounding step (SmolLM2-135M: entropies up to 0.1 nats
apart, and a sampled token can flip at a near-tie, after which the two responses diverge);
exact bf16 invariance would need batch-invariant kernels.

Memory: per sequence and step the recorder keeps ``3 + 2k`` numbers on the device (entropy,
log-prob, token, k ids, k probs) plus, within a step, a reference to that step's logits
(released once the token is chosen); nothing grows as length × vocabulary (``output_logits``
keeps ``B · T · V`` floats).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import GenerationConfig

from hed.core.entropy import NonFiniteLogitsError
from hed.core.token_text import token_texts_batch
from hed.decode.backend import DecodingBackend, Progress, dtype_label
from hed.decode.hf_processors import DecodeRecorder, GumbelSampler, build_logits_processors
from hed.decode.loading import (
    checkpoint_eos_token_ids,
    load_model_and_tokenizer,
    resolve_dtype,
)
from hed.decode.types import (
    FINISH_EOS,
    FINISH_LENGTH,
    MASS_COLUMNS,
    TOP_K_OFF,
    GeneratedSequence,
    PromptInput,
    SamplingParams,
    encode_prompts,
    sequence_pairs,
    sequence_seed,
)


@contextmanager
def neutral_generation_config(model) -> Iterator[None]:
    """Temporarily give ``model`` an empty default ``GenerationConfig``.

    ``generate`` fills every field the caller left unset from ``model.generation_config``;
    fields whose neutral value is None (``suppress_tokens``, ``bad_words_ids``,
    ``min_new_tokens``...) cannot be overridden explicitly, so the default is swapped instead.
    """
    saved = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        yield
    finally:
        model.generation_config = saved


def record_batch(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    seeds: Sequence[int],
    params: SamplingParams,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    on_tokens: Callable[[torch.Tensor], None] | None = None,
    mass_ids: Mapping[str, np.ndarray] | None = None,
    **config_overrides,
):
    """Run one ``generate`` call with HED's processors; return its output and the recorder.

    Args:
        model: a causal LM.
        input_ids: (B, P) left-padded prompt ids on the model's device.
        attention_mask: (B, P) 1 for prompt tokens, 0 for padding.
        seeds: B generator seeds (:func:`sequence_seed`).
        params: sampling settings.
        eos_token_ids: ids that end a response (empty: run exactly ``max_new_tokens`` steps).
        pad_token_id: id written after a sequence finished.
        on_tokens: called after each decode step with its sampled tokens ``(B,)``.
        mass_ids: {category: word-start ids} whose mass the recorder keeps
            (:class:`hed.decode.hf_processors.DecodeRecorder`); None: no mass columns.
        **config_overrides: extra ``GenerationConfig`` fields, e.g. ``output_logits=True,
            return_dict_in_generate=True`` in tests.

    Returns:
        ``(output of generate, DecodeRecorder)``.
    """
    device = input_ids.device
    generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
    processors, recorder = build_logits_processors(params, generators, on_tokens, mass_ids)
    config = GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=params.max_new_tokens,
        eos_token_id=list(eos_token_ids) or None,
        pad_token_id=pad_token_id,
        **config_overrides,
    )
    with neutral_generation_config(model), torch.inference_mode():
        output = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            generation_config=config,
            logits_processor=processors,
        )
    return output, recorder


# --------------------------------------------------------------------------- generation


def generate_sequences(
    model,
    tokenizer,
    prompts: Sequence[PromptInput],
    samples_per_prompt: int,
    params: SamplingParams,
    *,
    eos_token_ids: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
    skip: Collection[tuple[int, int]] = (),
    mass_ids: Mapping[str, np.ndarray] | None = None,
) -> Iterator[GeneratedSequence]:
    """Sample ``samples_per_prompt`` responses per prompt and record every response token.

    (prompt, sample) pairs are taken in (prompt_index, sample_index) order, ``batch_size`` per
    ``generate`` call, and yielded batch by batch in that order.

    Pairs in ``skip`` (already generated, e.g. kept from a partial shard) are not yielded. The
    batches stay those of the full pair list: a batch whose pairs are all skipped is not
    generated, any other is generated whole. So a sequence is always computed in the same
    batch (same neighbours, same padding), and its records are equal value for value to an
    uninterrupted run's, in bfloat16 too (see "Batch invariance" above).

    Args:
        model: a causal LM in eval mode (e.g. from :func:`load_model_and_tokenizer`).
        tokenizer: its tokenizer; prompts are encoded without added special tokens (the
            chat template already wrote them) and left-padded here. None when every prompt
            carries its ``token_ids``: the sequences then have no token texts (benchmarks of
            random-weight models).
        prompts: the prompts, already chat-templated.
        samples_per_prompt: responses per prompt.
        params: sampling settings.
        eos_token_ids: every id that ends a response (the checkpoint's generation config).
        progress: called after every decode step with (sequences done, tokens generated),
            both cumulative over this call; the token count includes the unfinished
            sequences of the running batch (a row stops counting after its first EOS).
        skip: ``(prompt_index, sample_index)`` pairs not to generate.
        mass_ids: {category: word-start ids} (:mod:`hed.core.propensity`): the sequences get
            ``anthropomorphic_mass`` / ``reasoning_mass``; None leaves them None.

    Yields:
        One :class:`GeneratedSequence` per (prompt, sample).

    Raises:
        NonFiniteLogitsError: the model produced NaN logits at some decode step.
    """
    pairs = sequence_pairs(prompts, samples_per_prompt)
    pad_token_id = _pad_token_id(tokenizer, eos_token_ids)
    device = next(model.parameters()).device
    encoded = encode_prompts(tokenizer, prompts)
    skip = set(skip)
    eos = torch.tensor(list(eos_token_ids), dtype=torch.long, device=device)
    n_sequences = n_tokens = 0
    for start in range(0, len(pairs), params.batch_size):
        batch = pairs[start : start + params.batch_size]
        if all((prompt.prompt_index, sample) in skip for prompt, sample in batch):
            continue
        counter = _TokenCounter(eos, progress, n_sequences, n_tokens) if progress else None
        input_ids, attention_mask = _left_pad(
            [encoded[prompt.prompt_index] for prompt, _ in batch], pad_token_id, device
        )
        seeds = [sequence_seed(params.seed, prompt.prompt_id, sample) for prompt, sample in batch]
        sequences, recorder = record_batch(
            model,
            input_ids,
            attention_mask,
            seeds=seeds,
            params=params,
            eos_token_ids=eos_token_ids,
            pad_token_id=pad_token_id,
            on_tokens=counter,
            mass_ids=mass_ids,
        )
        results = _batch_results(
            tokenizer,
            batch,
            sequences[:, input_ids.shape[1] :],
            recorder,
            params=params,
            eos_token_ids=eos_token_ids,
        )
        results = [r for r in results if (r.prompt_index, r.sample_index) not in skip]
        n_sequences += len(results)
        n_tokens += sum(result.n_tokens for result in results)
        yield from results
        if progress is not None:
            progress(n_sequences, n_tokens)


class _TokenCounter:
    """Per-step callback of one batch: counts the tokens of rows that have not ended yet.

    A row's tokens count up to and including its first EOS, as the records are cut; the sum
    is read once per step (one host sync; ``generate`` syncs every step for its own stopping
    check anyway) and handed to ``progress`` with the shard's totals before this batch.
    """

    def __init__(
        self,
        eos: torch.Tensor,
        progress: Callable[[int, int], None],
        sequences_before: int,
        tokens_before: int,
    ) -> None:
        self.eos, self.progress = eos, progress
        self.sequences_before, self.tokens = sequences_before, tokens_before
        self.alive: torch.Tensor | None = None

    def __call__(self, tokens: torch.Tensor) -> None:
        if self.alive is None:
            self.alive = torch.ones(tokens.shape[0], dtype=torch.bool, device=tokens.device)
        self.tokens += int(self.alive.sum())
        if len(self.eos):
            self.alive &= ~torch.isin(tokens, self.eos)
        self.progress(self.sequences_before, self.tokens)


def _batch_results(
    tokenizer,
    batch: list[tuple[PromptInput, int]],
    responses: torch.Tensor,
    recorder: DecodeRecorder,
    *,
    params: SamplingParams,
    eos_token_ids: Sequence[int],
) -> list[GeneratedSequence]:
    """Cut the step-major records of one batch into per-sequence records."""
    responses = responses.cpu().numpy()  # (B, L)
    steps = responses.shape[1]
    if recorder.n_steps < steps:
        raise RuntimeError(f"recorded {recorder.n_steps} decode steps for {steps} tokens")
    records = {name: values[:steps] for name, values in recorder.stacked().items()}
    rows = []  # (prompt, sample, ids, n, finish_reason, row)
    for row, (prompt, sample) in enumerate(batch):
        ids = responses[row]
        eos_positions = np.flatnonzero(np.isin(ids, list(eos_token_ids)))
        if len(eos_positions):
            n, finish_reason = int(eos_positions[0]) + 1, FINISH_EOS
        elif steps == params.max_new_tokens:
            n, finish_reason = steps, FINISH_LENGTH
        else:
            raise RuntimeError(f"response of {steps} tokens has no EOS and is below the limit")
        bad = np.flatnonzero(~np.isfinite(records["entropy"][:n, row]))
        if len(bad):
            raise NonFiniteLogitsError(
                f"NaN logits at decode step {int(bad[0])} (prompt_index {prompt.prompt_index}, "
                f"sample_index {sample}): the checkpoint produces NaN; try dtype float32"
            )
        if not np.array_equal(records["token_ids"][:n, row], ids[:n]):
            raise RuntimeError(
                "generate returned other tokens than GumbelSampler chose: a logits processor "
                "ran after it"
            )
        rows.append((prompt, sample, ids[:n], n, finish_reason, row))
    texts = (
        token_texts_batch(tokenizer, [ids for _, _, ids, _, _, _ in rows])
        if tokenizer is not None
        else [[] for _ in rows]  # benchmarks of tokenizer-less random models
    )
    return [
        GeneratedSequence(
            prompt_index=prompt.prompt_index,
            prompt_id=prompt.prompt_id,
            sample_index=sample,
            token_ids=ids.astype(np.int32),
            entropy=records["entropy"][:n, row].astype(np.float32),
            logprob=records["logprob"][:n, row].astype(np.float32),
            topk_token_ids=records["topk_token_ids"][:n, row].astype(np.int32),
            topk_probs=records["topk_probs"][:n, row].astype(np.float32),
            **{
                name: records[name][:n, row].astype(np.float32)
                for name in MASS_COLUMNS
                if name in records
            },
            token_texts=token_text,
            response_text="".join(token_text),
            finish_reason=finish_reason,
        )
        for (prompt, sample, ids, n, finish_reason, row), token_text in zip(
            rows, texts, strict=True
        )
    ]


def _pad_token_id(tokenizer, eos_token_ids: Sequence[int]) -> int:
    """The tokenizer's pad id, else the first EOS id, else 0 (padding is masked anyway)."""
    if tokenizer is not None and tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return int(eos_token_ids[0]) if eos_token_ids else 0


def _left_pad(
    prompts: list[list[int]], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad id lists into (B, P) ``input_ids`` and ``attention_mask``."""
    width = max(len(ids) for ids in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        if ids:
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
    return input_ids.to(device), attention_mask.to(device)


# --------------------------------------------------------------------------- backend


class HFBackend(DecodingBackend):
    """The ``hf`` backend: a checkpoint loaded with transformers, sampled by
    :func:`generate_sequences` (:class:`hed.decode.backend.DecodingBackend`).

    Args:
        model_dir: the checkpoint folder.
        dtype: the resolved ``torch.dtype``.
        device: ``cpu`` or ``cuda``.

    Attributes:
        model: the causal LM in eval mode (the rescoring scores with it); None once closed.

    Raises:
        CheckpointError: the checkpoint cannot be loaded.
    """

    name = "hf"

    def __init__(self, model_dir: str | Path, *, dtype: Any, device: str) -> None:
        dtype = dtype_label(dtype)
        model, tokenizer = load_model_and_tokenizer(model_dir, dtype=dtype, device=device)
        eos_token_ids = checkpoint_eos_token_ids(model, tokenizer)
        self._hold(model, tokenizer, eos_token_ids, model_dir, dtype=dtype, device=device)

    @classmethod
    def of_model(
        cls, model, tokenizer=None, *, eos_token_ids: Sequence[int] = (), model_dir: Any = None
    ) -> HFBackend:
        """The backend over a model already in memory (benchmarks of random-weight models).

        Args:
            model: a causal LM in eval mode, on its device, in its dtype.
            tokenizer: its tokenizer; None when every prompt carries its ``token_ids``
                (:class:`~hed.decode.types.PromptInput`; the sequences then have no token texts).
            eos_token_ids: the ids that end a response (empty: every response runs
                ``max_new_tokens`` steps).
            model_dir: where it came from, if anywhere (kept as :attr:`model_dir`).
        """
        backend = cls.__new__(cls)
        device = next(model.parameters()).device.type
        dtype = dtype_label(model.dtype)
        backend._hold(model, tokenizer, list(eos_token_ids), model_dir, dtype=dtype, device=device)
        return backend

    def _hold(
        self, model, tokenizer, eos_token_ids: list[int], model_dir: Any, *, dtype: str, device: str
    ) -> None:
        self.model, self.tokenizer, self.eos_token_ids = model, tokenizer, eos_token_ids
        self.model_dir, self.dtype, self.device = model_dir, dtype, device
        self.max_position_embeddings = getattr(model.config, "max_position_embeddings", None)
        self.metadata = {"name": "hf", "version": transformers.__version__}

    def generate(
        self,
        prompts: Sequence[PromptInput],
        samples_per_prompt: int,
        sampling: SamplingParams,
        *,
        progress: Progress | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> Iterator[GeneratedSequence]:
        """:func:`generate_sequences` with this backend's model, tokenizer and EOS ids."""
        if self.model is None:
            raise RuntimeError("HFBackend.generate after close()")
        return generate_sequences(
            self.model,
            self.tokenizer,
            prompts,
            samples_per_prompt,
            sampling,
            eos_token_ids=self.eos_token_ids,
            progress=progress,
            skip=skip,
            mass_ids=self.mass_ids,
        )

    def close(self) -> None:
        """Drop the model (its memory is released when nothing else holds it)."""
        self.model = None


__all__ = [
    "FINISH_EOS",
    "FINISH_LENGTH",
    "TOP_K_OFF",
    "DecodeRecorder",
    "GeneratedSequence",
    "GumbelSampler",
    "HFBackend",
    "PromptInput",
    "SamplingParams",
    "build_logits_processors",
    "checkpoint_eos_token_ids",
    "generate_sequences",
    "load_model_and_tokenizer",
    "neutral_generation_config",
    "record_batch",
    "resolve_dtype",
    "sequence_seed",
]
