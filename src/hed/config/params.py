"""HED's typed parameter sections ``generation``, ``aggregation`` and ``reporting``.

Each is a :class:`hed.config.model.Section`: every key declared once with its type, range,
default and docstring (the JSON Schema, the editor's completion and docs/parameters.md are
generated from them, ``python -m hed schema``). The pre-run check
(:func:`hed.hooks.parameters.parsed_sections`) parses each section the pipeline reads and hands
the typed object to the nodes; a node called with a plain dict (a test, a notebook) parses it
with the same ``.of``. Nothing here imports a pipeline package.
"""

from __future__ import annotations

from fractions import Fraction as Exact
from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, WithJsonSchema, field_validator

from hed.config.model import (
    Bool,
    Fraction,
    Int,
    NonNegativeInt,
    PositiveInt,
    PositiveNumber,
    Section,
)
from hed.core.compute_dtype import DTYPE_CHOICES
from hed.core.thresholds import validate_top_entropy_frac
from hed.core.validators import STATS_KERNELS, Steps
from hed.decode.backend import BACKENDS
from hed.decode.types import TENSOR_PARALLEL_REFUSAL, SamplingParams, VLLMSettings
from hed.errors import ConfigError
from hed.records.arrow_stream import DEFAULT_CHUNK
from hed.records.shard_metadata import DECODING_DEFAULTS, SAMPLING_DEFAULTS
from hed.report.explorer.options import ExplorerOptions
from hed.report.style import FIGURE2_MEASURE_NAMES, Figure2Style, Figure3Style
from hed.report.token_report.options import TokenReportOptions


class VLLMParams(Section):
    """``generation.vllm``: the vLLM engine's settings (read with ``backend: vllm`` only)."""

    section: ClassVar[str] = "generation.vllm"

    gpu_memory_utilization: Fraction = 0.9
    """GPU: fraction of its memory vLLM takes for weights, activations and KV cache."""
    kv_cache_memory_bytes: PositiveInt | None = None
    """KV cache in bytes; null: from gpu_memory_utilization on GPUs, 1 GiB on CPU."""
    max_model_len: PositiveInt | None = None
    """Prompt + response tokens per sequence; null: the shard's longest prompt + max_new_tokens.
    A prompt that does not fit with max_new_tokens is refused before the engine starts."""
    max_num_seqs: PositiveInt = 256
    """Requests decoded together at most."""
    enforce_eager: Bool | None = None
    """true: no CUDA graphs (faster start, slower decode); null: true on CPU, false on GPUs."""
    enable_prefix_caching: Bool = True
    """A prompt's samples share its KV cache."""
    tensor_parallel_size: PositiveInt = 1
    """1 only: HED records in the engine's in-process sampler."""

    @field_validator("tensor_parallel_size")
    @classmethod
    def _one_gpu(cls, size: int) -> int:
        if size > 1:
            raise ConfigError(TENSOR_PARALLEL_REFUSAL.format(size=size))
        return size


class GenerationParams(Section):
    """``generation`` (parameters_generation.yml): shards, sampling, dtype and backend."""

    section: ClassVar[str] = "generation"

    num_shards: PositiveInt = 1
    """Shard k holds the prompts with ``prompt_index % num_shards == k``; one shard per GPU."""
    samples_per_prompt: PositiveInt
    """Responses sampled per prompt."""
    temperature: PositiveNumber = SAMPLING_DEFAULTS["temperature"]
    """T; recorded entropies and probabilities are of softmax(z / T) over the whole vocabulary."""
    top_p: Fraction = SAMPLING_DEFAULTS["top_p"]
    """Nucleus filter of the sampler, in (0, 1] (1.0 = off); never applied to the records."""
    top_k: Int | None = SAMPLING_DEFAULTS["top_k"]
    """Top-k filter of the sampler only (null = off, and so are 0 as transformers / TRL write it
    and -1 as vLLM / verl write it; transformers' default of 50 is never applied)."""
    max_new_tokens: PositiveInt
    """Response length limit (``finish_reason = length``)."""
    batch_size: PositiveInt = 8
    """Sequences per ``generate`` call (left padding; the vllm backend batches by itself)."""
    seed: Int = SAMPLING_DEFAULTS["seed"]
    """Each response has its own random stream seeded from (seed, prompt_id, sample_index)."""
    top_prob_k: PositiveInt = SAMPLING_DEFAULTS["top_prob_k"]
    """Most probable alternatives recorded per token."""
    stats_kernel: Literal[STATS_KERNELS] = STATS_KERNELS[0]  # type: ignore[valid-type]
    """How the recorder computes entropy, log Z and top-k of softmax(z / T) at each decode step:
    auto = one pass over the logits with a Triton kernel on CUDA, the reference torch code on
    CPU; reference = the chunked torch code (the definition); triton = the kernel (CUDA only);
    compiled = the reference formulas through torch.compile. All agree with the reference
    within 1e-5 nats."""
    dtype: Literal[DTYPE_CHOICES] = DECODING_DEFAULTS["dtype"]  # type: ignore[valid-type]
    """by_device = bfloat16 on CUDA and on CPUs with native bfloat16 (AVX512-BF16 or AMX),
    float32 on other CPUs; auto = the checkpoint's own dtype (its config.json); or float32,
    bfloat16, float16."""
    torch_threads: NonNegativeInt | None = None
    """CPU threads per process (null or 0: torch's default)."""
    log_every_s: PositiveNumber | None = 30
    """Period of the progress log lines when stderr is not a terminal (sequences, tokens, ETA)."""
    backend: Literal[BACKENDS] = DECODING_DEFAULTS["backend"]  # type: ignore[valid-type]
    """The sampler: hf (transformers ``generate``) or vllm (a vLLM engine; docs/configuration.md,
    Generation backends)."""
    vllm: VLLMParams = VLLMParams()
    """The vLLM engine's settings, used only with ``backend: vllm``."""

    @field_validator("top_k")
    @classmethod
    def _top_k_off(cls, top_k: int | None) -> int | None:
        if top_k is not None and top_k < -1:
            raise ValueError("a positive integer, or null / 0 / -1 (off)")
        return None if top_k in (0, -1) else top_k

    @cached_property
    def sampling(self) -> SamplingParams:
        """The sampling settings as the decoding layer takes them."""
        return SamplingParams(**self.model_dump(include=set(SamplingParams.__dataclass_fields__)))

    @property
    def raw(self) -> dict[str, Any]:
        """The keys as configured (for comparisons with recorded shard metadata)."""
        return self.model_dump(exclude_unset=True)

    def backend_args(self, model_dir: str) -> dict[str, Any]:
        """The arguments of :func:`hed.decode.factory.open_backend` for ``model_dir``: the
        backend's name, ``dtype``, ``torch_threads`` and the vLLM engine settings."""
        vllm = VLLMSettings(**self.vllm.model_dump()) if self.backend == "vllm" else None
        return {"name": self.backend, "model_dir": model_dir, "dtype": self.dtype,
                "torch_threads": self.torch_threads, "vllm": vllm}  # fmt: skip


def _lexicon(value: Any) -> Any:
    from hed.core.lexicon import parse_lexicon

    if value is not None:  # None (a node given only ρ): refused when the lexicon is read
        parse_lexicon(value)  # refuses a bad lexicon in its own one-line words
    return value


class AggregationParams(Section):
    """``aggregation`` (parameters_aggregation.yml): the threshold ρ, the lexicon."""

    section: ClassVar[str] = "aggregation"

    top_entropy_frac: Annotated[
        Exact,
        BeforeValidator(validate_top_entropy_frac),
        WithJsonSchema({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
    ] = 0.2  # type: ignore[assignment]
    """ρ: the high-entropy fraction of a step's tokens, in (0, 1]; kept as the exact fraction
    of its decimal (``0.2`` is 1/5)."""
    chunk_records: PositiveInt = DEFAULT_CHUNK
    """Records per merge chunk."""
    lexicon: Annotated[dict[str, Any] | None, BeforeValidator(_lexicon)] = None
    """Category -> words (docs/aggregation.md); null: HED's default lexicon."""

    @cached_property
    def parsed_lexicon(self):
        """The :class:`hed.core.lexicon.Lexicon` of :attr:`lexicon`."""
        from hed.core.lexicon import parse_lexicon

        return parse_lexicon(self.lexicon)


class Fig3Params(Section):
    """``reporting.fig3``."""

    section: ClassVar[str] = "reporting.fig3"

    steps: Steps = None
    """Figure 3's steps (the paper: [20, 80, 200]); null: first, middle and last with records."""


class ReportingParams(Section):
    """``reporting`` (parameters_reporting.yml): the figures, the token report, the explorer."""

    section: ClassVar[str] = "reporting"

    strict: Bool = False
    """true: any missing part of the figures is an error (one message, all of it)."""
    top_n_words: PositiveInt = 20
    """Figure 3: words per (run, step) panel, ranked by normalised sampled probability."""
    fig2_measure: Literal[FIGURE2_MEASURE_NAMES] = "count"  # type: ignore[valid-type]
    """Figure 2's bars: count (the paper) | per 1000 high-entropy tokens | per 1000 tokens."""
    fig3: Fig3Params = Fig3Params()
    """Figure 3's steps."""
    figure2: Figure2Style = Figure2Style()
    """Figure 2's panel size and dpi."""
    figure3: Figure3Style = Figure3Style()
    """Figure 3's panel size and dpi."""
    token_report: TokenReportOptions = TokenReportOptions()
    """token_report_html: responses coloured by entropy (docs/token_report.md)."""
    explorer: ExplorerOptions = ExplorerOptions()
    """study_explorer_html: sort, filter, compare every step's responses (docs/explorer.md)."""

    @property
    def fig3_steps(self) -> list[int] | None:
        """``fig3.steps`` sorted, or None (first, middle and last)."""
        return None if self.fig3.steps is None else list(self.fig3.steps)


def lexicon_param(aggregation: Any):
    """The :class:`hed.core.lexicon.Lexicon` of ``aggregation.lexicon`` (parsed section or dict)."""
    return AggregationParams.of(aggregation).parsed_lexicon
