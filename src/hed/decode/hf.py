"""Exact decode-time token records with transformers ``generate`` (docs/datasets.md).

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

import hashlib
import numbers
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hed.core.entropy import NonFiniteLogitsError, token_logprobs
from hed.core.fused_stats import DistributionStats, check_stats_kernel
from hed.core.token_text import token_texts_batch
from hed.errors import CheckpointError, ConfigError, one_line

FINISH_EOS = "eos"
FINISH_LENGTH = "length"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: ``top_k`` values that mean "no top-k filter": transformers/TRL write 0, vLLM/verl -1.
TOP_K_OFF = (None, 0, -1)


@dataclass(frozen=True)
class PromptInput:
    """One prompt to answer.

    Attributes:
        prompt_index: 0-based index in the sampled prompt set.
        prompt_id: stable identifier of the prompt (part of the sampling seed).
        text: the full model input, already chat-templated (special tokens written as text).
    """

    prompt_index: int
    prompt_id: str
    text: str


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """Every sampling setting, explicit (nothing is inherited from the checkpoint).

    Attributes:
        temperature: T > 0; records describe softmax(z / T).
        top_p: nucleus filter of the sampler (1.0 = off); never applied to the records.
        top_k: top-k filter of the sampler (None = off; 0, as transformers and TRL write it, and
            -1, as vLLM and verl write it, also mean off and are stored as None); never
            applied to the records.
        max_new_tokens: response length limit.
        top_prob_k: how many most probable tokens each record keeps.
        seed: base seed; each sequence's generator is seeded from (seed, prompt_id, sample_index).
        batch_size: sequences per ``generate`` call.
        stats_kernel: how the recorders compute the statistics of softmax(z / T) (one of
            :data:`hed.core.fused_stats.STATS_KERNELS`; ``auto``: one pass in Triton on CUDA,
            the reference torch code otherwise).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    max_new_tokens: int
    top_prob_k: int = 5
    seed: int = 0
    batch_size: int = 8
    stats_kernel: str = "auto"

    def __post_init__(self) -> None:
        check_stats_kernel(self.stats_kernel)
        if self.top_k in TOP_K_OFF and not isinstance(self.top_k, bool):
            object.__setattr__(self, "top_k", None)

        def real(value: Any) -> bool:
            return isinstance(value, numbers.Real) and not isinstance(value, bool)

        def whole(value: Any) -> bool:
            return isinstance(value, numbers.Integral) and not isinstance(value, bool)

        checks = [
            ("temperature", real(self.temperature) and self.temperature > 0, "> 0"),
            ("top_p", real(self.top_p) and 0 < self.top_p <= 1, "in (0, 1]"),
            (
                "top_k",
                self.top_k is None or (whole(self.top_k) and self.top_k > 0),
                "a positive integer, or null / 0 / -1 (off)",
            ),
            ("max_new_tokens", whole(self.max_new_tokens) and self.max_new_tokens > 0, "> 0"),
            ("top_prob_k", whole(self.top_prob_k) and self.top_prob_k > 0, "> 0"),
            ("seed", whole(self.seed), "an integer"),
            ("batch_size", whole(self.batch_size) and self.batch_size > 0, "> 0"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ConfigError(f"generation.{name} must be {rule}, got {getattr(self, name)!r}")


@dataclass
class GeneratedSequence:
    """One response and its per-token records (positions 0..n-1, EOS included).

    Attributes:
        prompt_index, prompt_id, sample_index: which prompt and which of its samples.
        token_ids: (n,) int32 sampled tokens.
        entropy: (n,) float32 entropy of softmax(z / T) in nats.
        logprob: (n,) float32 log-probability of the sampled token, same distribution.
        topk_token_ids: (n, k) int32 most probable tokens, most probable first.
        topk_probs: (n, k) float32 their probabilities.
        token_texts: n strings, the exact text each token adds (:mod:`hed.core.token_text`).
        response_text: ``"".join(token_texts)``, i.e. the decode with special tokens kept.
        finish_reason: ``"eos"`` (ended by an EOS id) or ``"length"`` (max_new_tokens).
    """

    prompt_index: int
    prompt_id: str
    sample_index: int
    token_ids: np.ndarray
    entropy: np.ndarray
    logprob: np.ndarray
    topk_token_ids: np.ndarray
    topk_probs: np.ndarray
    token_texts: list[str]
    response_text: str
    finish_reason: str

    @property
    def n_tokens(self) -> int:
        """Number of recorded positions."""
        return len(self.token_ids)


# --------------------------------------------------------------------------- processors


class DecodeRecorder(LogitsProcessor):
    """Logits processor that records, per decode step, O(k) statistics of softmax(z / T).

    Must come first in the processor list so it sees the raw logits ``z``. Per step it
    appends (on the logits' device, without a host sync) entropy ``(B,)``, top-k ids and
    probabilities ``(B, k)``; :meth:`record_sampled` then appends the sampled tokens and
    their log-probabilities ``(B,)``. Between the two calls it holds the step's logits and
    ``log Z`` (generate holds those logits anyway); they are released once the token is known.

    Args:
        temperature: T of softmax(z / T).
        top_prob_k: how many most probable tokens to keep per step.
        on_tokens: called after each step with that step's sampled tokens ``(B,)`` (on the
            device); :func:`generate_sequences` counts generated tokens with it for progress.
        stats_kernel: route of the statistics (:class:`hed.core.fused_stats.DistributionStats`).
    """

    def __init__(
        self,
        temperature: float = 1.0,
        top_prob_k: int = 5,
        on_tokens: Callable[[torch.Tensor], None] | None = None,
        stats_kernel: str = "auto",
    ):
        self.stats = DistributionStats(stats_kernel)
        self.temperature = temperature
        self.top_prob_k = top_prob_k
        self.on_tokens = on_tokens
        self.entropy: list[torch.Tensor] = []
        self.topk_ids: list[torch.Tensor] = []
        self.topk_probs: list[torch.Tensor] = []
        self.tokens: list[torch.Tensor] = []
        self.logprob: list[torch.Tensor] = []
        self._logits: torch.Tensor | None = None
        self._log_z: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        stats = self.stats(scores, self.temperature, self.top_prob_k)
        self.entropy.append(stats.entropy)
        self.topk_ids.append(stats.topk_ids.to(torch.int32))
        self.topk_probs.append(stats.topk_probs)
        self._logits, self._log_z = scores, stats.log_z
        return scores

    def record_sampled(self, tokens: torch.Tensor) -> None:
        """Record the tokens chosen at the current step and their log-probabilities."""
        if self._logits is None or self._log_z is None:
            raise RuntimeError("DecodeRecorder.record_sampled called before the step's logits")
        self.tokens.append(tokens)
        self.logprob.append(token_logprobs(self._logits, tokens, self._log_z, self.temperature))
        self._logits = self._log_z = None
        if self.on_tokens is not None:
            self.on_tokens(tokens)

    @property
    def n_steps(self) -> int:
        """Decode steps fully recorded so far."""
        return len(self.tokens)

    def retained_tensors(self) -> list[torch.Tensor]:
        """Every tensor the recorder holds (for memory accounting)."""
        pending = [t for t in (self._logits, self._log_z) if t is not None]
        return [
            *self.entropy,
            *self.topk_ids,
            *self.topk_probs,
            *self.tokens,
            *self.logprob,
            *pending,
        ]

    def stacked(self) -> dict[str, np.ndarray]:
        """The records as host arrays, step-major: ``(steps, B)`` or ``(steps, B, k)``."""
        steps = self.n_steps
        columns = {
            "entropy": self.entropy,
            "logprob": self.logprob,
            "token_ids": self.tokens,
            "topk_token_ids": self.topk_ids,
            "topk_probs": self.topk_probs,
        }
        return {name: torch.stack(values[:steps]).cpu().numpy() for name, values in columns.items()}


class GumbelSampler(LogitsProcessor):
    """Last processor: exact sampling by Gumbel-max with one generator per sequence.

    ``scores`` are the sampler's processed logits ``x`` (z / T, top-k / top-p filtered to
    -inf). Row ``b`` gets noise ``G_b = -log(-log U_b)``, ``U_b`` ~ Uniform[0, 1)^V drawn from
    ``generators[b]``; ``argmax(x_b + G_b)`` is a sample of ``softmax(x_b)``. ``U`` is clamped
    to the smallest normal float so ``G`` stays finite (U = 0 has probability 2^-24 per entry
    and would give -inf). The noisy scores are returned, so ``generate``'s greedy ``argmax``
    picks the same token; the recorder is told the token.
    """

    def __init__(self, generators: Sequence[torch.Generator], recorder: DecodeRecorder | None):
        self.generators = list(generators)
        self.recorder = recorder

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.shape[0] != len(self.generators):
            raise RuntimeError(
                f"GumbelSampler has {len(self.generators)} generators for {scores.shape[0]} rows"
            )
        noise = torch.empty_like(scores, dtype=torch.float32)  # (B, V)
        for row, generator in zip(noise, self.generators, strict=True):
            row.uniform_(generator=generator)
        tiny = torch.finfo(torch.float32).tiny
        noisy = noise.clamp_(min=tiny).log_().neg_().log_().neg_().add_(scores)  # x + G
        if self.recorder is not None:
            self.recorder.record_sampled(noisy.argmax(dim=-1))
        return noisy


def sequence_seed(seed: int, prompt_id: str, sample_index: int) -> int:
    """Seed of one sequence's generator: a 63-bit BLAKE2b hash of (seed, prompt_id, sample)."""
    key = f"{seed}\x1f{prompt_id}\x1f{sample_index}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def build_logits_processors(
    params: SamplingParams,
    generators: Sequence[torch.Generator],
    on_tokens: Callable[[torch.Tensor], None] | None = None,
) -> tuple[LogitsProcessorList, DecodeRecorder]:
    """The processor list described in the module docstring, and its recorder.

    ``on_tokens`` is the recorder's per-step callback (:class:`DecodeRecorder`).
    """
    recorder = DecodeRecorder(params.temperature, params.top_prob_k, on_tokens, params.stats_kernel)
    processors: list[LogitsProcessor] = [recorder]
    if params.temperature != 1.0:
        processors.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k is not None:
        processors.append(TopKLogitsWarper(top_k=params.top_k))
    if params.top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p=params.top_p))
    processors.append(GumbelSampler(generators, recorder))
    return LogitsProcessorList(processors), recorder


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
        **config_overrides: extra ``GenerationConfig`` fields, e.g. ``output_logits=True,
            return_dict_in_generate=True`` in tests.

    Returns:
        ``(output of generate, DecodeRecorder)``.
    """
    device = input_ids.device
    generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
    processors, recorder = build_logits_processors(params, generators, on_tokens)
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


def generate_sequences(  # noqa: PLR0917 - the call shape the generation node uses
    model,
    tokenizer,
    prompts: Sequence[PromptInput],
    samples_per_prompt: int,
    params: SamplingParams,
    eos_token_ids: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
    skip: Collection[tuple[int, int]] = (),
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
            chat template already wrote them) and left-padded here.
        prompts: the prompts, already chat-templated.
        samples_per_prompt: responses per prompt.
        params: sampling settings.
        eos_token_ids: every id that ends a response (the checkpoint's generation config).
        progress: called after every decode step with (sequences done, tokens generated),
            both cumulative over this call; the token count includes the unfinished
            sequences of the running batch (a row stops counting after its first EOS).
        skip: ``(prompt_index, sample_index)`` pairs not to generate.

    Yields:
        One :class:`GeneratedSequence` per (prompt, sample).

    Raises:
        NonFiniteLogitsError: the model produced NaN logits at some decode step.
    """
    pairs = [(prompt, sample) for prompt in prompts for sample in range(samples_per_prompt)]
    pad_token_id = _pad_token_id(tokenizer, eos_token_ids)
    device = next(model.parameters()).device
    encoded = {
        prompt.prompt_index: tokenizer(prompt.text, add_special_tokens=False)["input_ids"]
        for prompt in prompts
    }
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
    texts = token_texts_batch(tokenizer, [ids for _, _, ids, _, _, _ in rows])
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
    if tokenizer.pad_token_id is not None:
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


# --------------------------------------------------------------------------- loading


def resolve_dtype(
    name: str | None, device: str | torch.device, model_dir: str | Path | None = None
) -> torch.dtype:
    """Map a configured dtype name to a torch dtype (:mod:`hed.core.compute_dtype`).

    Args:
        name: ``"by_device"`` (None too: bfloat16 on CUDA and on CPUs with native bfloat16,
            float32 elsewhere), ``"auto"`` (the checkpoint's dtype, from ``model_dir``'s
            config.json), ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        device: the device the model will run on, e.g. ``"cuda:0"``.
        model_dir: the checkpoint folder (needed for ``"auto"``; without it ``"auto"`` is only
            checked to be a known name and float32 is returned).

    Raises:
        ConfigError: an unknown name.
        CheckpointError: ``"auto"`` and the checkpoint's config.json cannot be read.
    """
    from hed.core.compute_dtype import CHECKPOINT, dtype_name

    resolved = dtype_name(name, str(torch.device(device)), model_dir)
    return torch.float32 if resolved == CHECKPOINT else _DTYPES[resolved]


def load_model_and_tokenizer(
    model_dir: str | Path, dtype: str | None = "by_device", device: str = "cpu"
):
    """Load a checkpoint folder for generation, its weights straight onto ``device``.

    The weights are loaded with ``device_map={"": device}`` and the target dtype, so
    transformers materialises each tensor on the device as it reads it (the safetensors file
    is memory-mapped): a CUDA process never holds a full host copy of the model (no
    ``from_pretrained`` on CPU followed by ``.to(device)``).

    Args:
        model_dir: a HuggingFace model folder (config.json, weights, tokenizer files).
        dtype: see :func:`resolve_dtype`.
        device: torch device string, e.g. ``"cpu"`` or ``"cuda:0"``.

    Returns:
        ``(model, tokenizer)``: the model in eval mode on ``device``; the tokenizer pads on the
        left and has a pad token (its EOS when it had none).

    Raises:
        CheckpointError: the folder is missing or transformers cannot load it.
        ConfigError: an unknown dtype.
    """
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise CheckpointError(f"checkpoint {model_dir}: no config.json (not a HuggingFace folder)")
    torch_dtype = resolve_dtype(dtype, device, model_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            model_dir, padding_side="left", local_files_only=True
        )
    except Exception as error:  # any loader failure becomes one line naming the folder
        raise CheckpointError(
            f"checkpoint {model_dir} cannot be loaded: its tokenizer fails "
            f"({one_line(error)}); copy the base model's tokenizer files (tokenizer.json, "
            "tokenizer_config.json) into it"
        ) from None
    target = torch.device(device)
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", 0)  # the process's own GPU (CUDA_VISIBLE_DEVICES)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch_dtype, device_map={"": target}, local_files_only=True
        )
    except Exception as error:  # any loader failure becomes one line naming the folder
        raise CheckpointError(
            f"checkpoint {model_dir} cannot be loaded: its config or weights fail "
            f"({one_line(error)}); re-export or re-merge this checkpoint"
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return model, tokenizer


def checkpoint_eos_token_ids(model, tokenizer) -> list[int]:
    """Every EOS id of the checkpoint's generation config, else the tokenizer's EOS."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return []
    return [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]


__all__ = [
    "FINISH_EOS",
    "FINISH_LENGTH",
    "TOP_K_OFF",
    "DecodeRecorder",
    "GeneratedSequence",
    "GumbelSampler",
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
