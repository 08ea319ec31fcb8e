"""The logits processors of the ``hf`` backend: the decode recorder and the Gumbel sampler.

:func:`build_logits_processors` returns the list that :mod:`hed.decode.hf` hands to
transformers ``generate`` (that module's docstring explains the order and why the recorder
sees the raw logits):

    DecodeRecorder           sees z: entropy, log Z, top-k of softmax(z / T) -> O(k) numbers
                             (+ the lexicon's word-start mass, hed.core.propensity)
    TemperatureLogitsWarper  z / T                        (only when T != 1)
    TopKLogitsWarper         others -> -inf               (only when top_k is set)
    TopPLogitsWarper         outside the nucleus -> -inf  (only when top_p < 1)
    GumbelSampler            + Gumbel noise from one torch.Generator per sequence;
                             argmax -> the sampled token, whose log-prob the recorder keeps
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hed.core.entropy import token_logprobs
from hed.core.fused_stats import DistributionStats
from hed.core.propensity import category_mass
from hed.decode.types import SamplingParams


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
        mass_ids: {category: int64 word-start ids} (:func:`hed.core.propensity.
            tokenizer_word_start_ids`); when given, each step also appends
            ``<category>_mass`` ``(B,)`` float32 = Σ softmax(z / T) over those ids
            (:func:`hed.core.propensity.category_mass`, O(B · n_ids)).
    """

    def __init__(
        self,
        temperature: float = 1.0,
        top_prob_k: int = 5,
        on_tokens: Callable[[torch.Tensor], None] | None = None,
        stats_kernel: str = "auto",
        mass_ids: Mapping[str, np.ndarray] | None = None,
    ):
        self.stats = DistributionStats(stats_kernel)
        self.mass_ids = {
            c: torch.as_tensor(np.asarray(i, np.int64)) for c, i in (mass_ids or {}).items()
        }
        self.mass: dict[str, list[torch.Tensor]] = {c: [] for c in self.mass_ids}
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
        for category in self.mass_ids:  # .to() is a no-op once the ids are on the device
            ids = self.mass_ids[category] = self.mass_ids[category].to(scores.device)
            self.mass[category].append(category_mass(scores, stats.log_z, ids, self.temperature))
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
            *(t for values in self.mass.values() for t in values),
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
            **{f"{category}_mass": values for category, values in self.mass.items()},
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


def build_logits_processors(
    params: SamplingParams,
    generators: Sequence[torch.Generator],
    on_tokens: Callable[[torch.Tensor], None] | None = None,
    mass_ids: Mapping[str, np.ndarray] | None = None,
) -> tuple[LogitsProcessorList, DecodeRecorder]:
    """The processor list described in the module docstring, and its recorder.

    ``on_tokens`` and ``mass_ids`` go to the recorder (:class:`DecodeRecorder`).
    """
    recorder = DecodeRecorder(
        params.temperature, params.top_prob_k, on_tokens, params.stats_kernel, mass_ids
    )
    processors: list[LogitsProcessor] = [recorder]
    if params.temperature != 1.0:
        processors.append(TemperatureLogitsWarper(params.temperature))
    if params.top_k is not None:
        processors.append(TopKLogitsWarper(top_k=params.top_k))
    if params.top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p=params.top_p))
    processors.append(GumbelSampler(generators, recorder))
    return LogitsProcessorList(processors), recorder


__all__ = ["DecodeRecorder", "GumbelSampler", "build_logits_processors"]
