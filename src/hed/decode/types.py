"""Plain types of decoding: what a backend is asked for and how it samples.

:class:`PromptInput` (one chat-templated prompt), :class:`SamplingParams` (every sampling
setting, checked), :class:`VLLMSettings` (the vLLM engine's settings) and the per-sequence
seed :func:`sequence_seed`. :class:`GeneratedSequence` (what a backend yields) lives in
:mod:`hed.records.sequence` (shard files read it back without a backend) and is re-exported
here. Nothing here imports torch, transformers or vLLM: configuration checks
(:mod:`hed.config.params`) and the shard files use these types without loading a backend.
"""

from __future__ import annotations

import hashlib
import numbers
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hed.core.validators import check_stats_kernel
from hed.errors import ConfigError
from hed.records.sequence import FINISH_EOS, FINISH_LENGTH, MASS_COLUMNS, GeneratedSequence
from hed.records.shard_metadata import SAMPLING_DEFAULTS

#: ``top_k`` values that mean "no top-k filter": transformers/TRL write 0, vLLM/verl -1.
TOP_K_OFF = (None, 0, -1)


@dataclass(frozen=True)
class PromptInput:
    """One prompt to answer.

    Attributes:
        prompt_index: 0-based index in the sampled prompt set.
        prompt_id: stable identifier of the prompt (part of the sampling seed).
        text: the full model input, already chat-templated (special tokens written as text).
        token_ids: the model input as token ids, when it is given that way (benchmarks of
            random-weight models without a tokenizer); None (always, in a study): the backend
            encodes ``text`` with the checkpoint's tokenizer.
    """

    prompt_index: int
    prompt_id: str
    text: str
    token_ids: tuple[int, ...] | None = None


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

    The defaults of the settings a shard records and compares (temperature, top_p, top_k,
    top_prob_k, seed) are :data:`hed.records.shard_metadata.SAMPLING_DEFAULTS`, read here:
    the staleness check (records may not import decode) and this class share one table.
        top_prob_k: how many most probable tokens each record keeps.
        seed: base seed; each sequence's generator is seeded from (seed, prompt_id, sample_index).
        batch_size: sequences per ``generate`` call.
        stats_kernel: how the recorders compute the statistics of softmax(z / T) (one of
            :data:`hed.core.validators.STATS_KERNELS`, :mod:`hed.core.fused_stats`; ``auto``:
            one pass in Triton on CUDA, the reference torch code otherwise).
    """

    temperature: float = SAMPLING_DEFAULTS["temperature"]
    top_p: float = SAMPLING_DEFAULTS["top_p"]
    top_k: int | None = SAMPLING_DEFAULTS["top_k"]
    max_new_tokens: int
    top_prob_k: int = SAMPLING_DEFAULTS["top_prob_k"]
    seed: int = SAMPLING_DEFAULTS["seed"]
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
            (
                "max_new_tokens",
                whole(self.max_new_tokens) and self.max_new_tokens > 0,
                "a positive integer",
            ),
            ("top_prob_k", whole(self.top_prob_k) and self.top_prob_k > 0, "a positive integer"),
            ("seed", whole(self.seed), "an integer"),
            ("batch_size", whole(self.batch_size) and self.batch_size > 0, "a positive integer"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ConfigError(f"generation.{name} must be {rule}, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class ResponseToScore:
    """One (prompt, response) pair as token ids.

    Attributes:
        prompt_index, sample_index: the response's key (as in the token records).
        prompt_ids: the full model input before the response (chat-templated prompt), ≥ 1 id.
        response_ids: ``(n,)`` int token ids of the response (EOS included when it has one).
    """

    prompt_index: int
    sample_index: int
    prompt_ids: Sequence[int]
    response_ids: np.ndarray


#: Largest |re-scored − decode-time| entropy (nats) the float32 self-consistency check of the
#: rescoring accepts (``rescoring.consistency_tolerance``'s default).
CONSISTENCY_TOLERANCE_NATS = 1e-4


def sequence_seed(seed: int, prompt_id: str, sample_index: int) -> int:
    """Seed of one sequence's generator: a 63-bit BLAKE2b hash of (seed, prompt_id, sample)."""
    key = f"{seed}\x1f{prompt_id}\x1f{sample_index}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def sequence_pairs(
    prompts: Iterable[PromptInput], samples_per_prompt: int, skip: Collection[tuple[int, int]] = ()
) -> list[tuple[PromptInput, int]]:
    """Every (prompt, sample_index) pair to generate, in (prompt_index, sample_index) order.

    Pairs whose ``(prompt_index, sample_index)`` is in ``skip`` are left out.
    """
    return [
        (prompt, sample)
        for prompt in prompts
        for sample in range(samples_per_prompt)
        if (prompt.prompt_index, sample) not in skip
    ]


def encode_prompts(tokenizer, prompts: Sequence[PromptInput]) -> dict[int, list[int]]:
    """``prompt_index -> token ids`` of each prompt, without added special tokens (the chat
    template already wrote them); a prompt given as ``token_ids`` keeps them (``tokenizer`` may
    then be None)."""
    return {
        prompt.prompt_index: (
            list(prompt.token_ids)
            if prompt.token_ids is not None
            else tokenizer(prompt.text, add_special_tokens=False)["input_ids"]
        )
        for prompt in prompts
    }


#: One line for ``generation.vllm.tensor_parallel_size`` > 1.
TENSOR_PARALLEL_REFUSAL = (
    "generation.vllm.tensor_parallel_size: {size} is not supported: HED records inside the "
    "sampler of an engine running in the node's own process (one worker), and with tensor "
    "parallelism vLLM samples in worker processes the recorder cannot reach; set "
    "tensor_parallel_size: 1 and run one engine per GPU (GPURunner gpus=0:1:..., one shard "
    "per GPU), or use backend: hf"
)


@dataclass(frozen=True, kw_only=True)
class VLLMSettings:
    """Engine settings of ``generation.vllm`` (``conf/base/parameters_generation.yml``).

    Attributes:
        gpu_memory_utilization: fraction of the GPU's memory vLLM may use for weights,
            activations and KV cache (on CPU vLLM reads it as a fraction of NUMA node 0's
            memory; HED always sets ``kv_cache_memory_bytes`` there, which bypasses it).
        kv_cache_memory_bytes: KV cache size in bytes; null: from ``gpu_memory_utilization``
            on GPUs, :data:`hed.decode.vllm.CPU_DEFAULT_KV_CACHE_BYTES` on CPU.
        max_model_len: longest prompt + response in tokens; null: the shard's longest prompt
            + ``max_new_tokens``.
        max_num_seqs: requests decoded together at most.
        enforce_eager: true: no CUDA graphs / torch.compile (faster start, slower decode);
            null: true on CPU, false on GPUs.
        enable_prefix_caching: reuse the KV cache of a prompt across its samples.
        tensor_parallel_size: 1 only (:data:`TENSOR_PARALLEL_REFUSAL` says why).
    """

    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int = 256
    enforce_eager: bool | None = None
    enable_prefix_caching: bool = True
    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        def whole(value: Any) -> bool:
            return isinstance(value, numbers.Integral) and not isinstance(value, bool)

        tp = self.tensor_parallel_size
        if whole(tp) and tp > 1:
            raise ConfigError(TENSOR_PARALLEL_REFUSAL.format(size=tp))

        checks = [
            (
                "gpu_memory_utilization",
                isinstance(self.gpu_memory_utilization, numbers.Real)
                and not isinstance(self.gpu_memory_utilization, bool)
                and 0 < self.gpu_memory_utilization <= 1,
                "in (0, 1]",
            ),
            (
                "kv_cache_memory_bytes",
                self.kv_cache_memory_bytes is None
                or (whole(self.kv_cache_memory_bytes) and self.kv_cache_memory_bytes > 0),
                "a positive number of bytes or null",
            ),
            (
                "max_model_len",
                self.max_model_len is None
                or (whole(self.max_model_len) and self.max_model_len > 0),
                "a positive integer or null",
            ),
            ("max_num_seqs", whole(self.max_num_seqs) and self.max_num_seqs > 0, "> 0"),
            (
                "enforce_eager",
                self.enforce_eager is None or isinstance(self.enforce_eager, bool),
                "true, false or null",
            ),
            (
                "enable_prefix_caching",
                isinstance(self.enable_prefix_caching, bool),
                "true or false",
            ),
            ("tensor_parallel_size", whole(tp) and tp == 1, "1"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ConfigError(
                    f"generation.vllm.{name} must be {rule}, got {getattr(self, name)!r}"
                )


__all__ = [
    "CONSISTENCY_TOLERANCE_NATS",
    "FINISH_EOS",
    "FINISH_LENGTH",
    "MASS_COLUMNS",
    "TOP_K_OFF",
    "GeneratedSequence",
    "PromptInput",
    "ResponseToScore",
    "SamplingParams",
    "VLLMSettings",
    "encode_prompts",
    "sequence_pairs",
    "sequence_seed",
]
