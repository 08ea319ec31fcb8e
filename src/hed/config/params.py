"""HED's typed parameter sections: each section parsed once into a frozen dataclass.

The pre-run check (:func:`hed.config.preflight.parsed_sections`, before the first node)
parses every section the pipeline reads with the functions here and hands the typed objects
to the nodes (:func:`hed.config.preflight.hand_to_nodes`): a node receives
:class:`GenerationParams` for ``params:generation`` and reads its attributes, never the raw
dict's keys. A node called with a plain dict (a test, a notebook) parses it with the same
function (``GenerationParams.of``), so both paths apply the same rules.

* The keys each section may hold and their defaults: :mod:`hed.config.sections`
  (re-exported here).
* The small validators (:func:`positive_int`, :func:`integer`, ...): :mod:`hed.core.validators`
  (re-exported here).

Nothing here imports a pipeline package: nodes import from here, never the reverse.

Why not Kedro 1.7's own validation of dataclass-annotated ``params:`` node inputs
(``kedro.validation``): it reports several failures in one multi-line message, and it
neither refuses unknown keys nor knows which file set a key. The checks here run at the same
moment (before the first node) and keep one line per error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from hed.config.sections import (
    DUPLICATE_POLICIES,
    SECTIONS,
    TOP_LEVEL,
    check_unknown_keys,
    default,
    key_origin,
    unknown_keys,
)
from hed.core.validators import (
    boolean,
    integer,
    is_integer,
    names,
    non_negative_int,
    positive_int,
    section,
    step_list,
)
from hed.decode.backend import BACKENDS, check_backend_name
from hed.decode.types import SamplingParams, VLLMSettings
from hed.errors import ConfigError
from hed.records.shard_metadata import DECODING_DEFAULTS
from hed.report.style import FIGURE2_STYLE, FIGURE3_STYLE, FigureStyle, figure_style

if TYPE_CHECKING:
    from hed.report.explorer.options import ExplorerOptions
    from hed.report.token_report.options import TokenReportOptions

# ------------------------------------------------------------------ typed sections


@dataclass(frozen=True)
class GenerationParams:
    """``params:generation``, checked (see ``conf/base/parameters_generation.yml``).

    Attributes:
        num_shards: shards per checkpoint (``prompt_index % num_shards``), ≥ 1.
        samples_per_prompt: responses per prompt, ≥ 1.
        max_new_tokens: generated tokens per response at most, ≥ 1.
        dtype: ``by_device``, ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        raw: the section as given.
        sampling: the sampling settings (:class:`hed.decode.types.SamplingParams`).
        backend: ``hf`` or ``vllm`` (:data:`hed.decode.backend.BACKENDS`).
        vllm: the vLLM engine settings (parsed for the ``vllm`` backend only; None for ``hf``).
        torch_threads: CPU threads for torch (None or 0: torch's default).
        log_every_s: seconds between progress log lines (None: the progress default).
    """

    num_shards: int
    samples_per_prompt: int
    max_new_tokens: int
    dtype: str
    raw: Mapping[str, Any]
    sampling: SamplingParams | None = None
    backend: str = DECODING_DEFAULTS["backend"]
    vllm: VLLMSettings | None = None
    torch_threads: int | None = None
    log_every_s: float | None = None

    @classmethod
    def of(cls, value: Any) -> GenerationParams:
        """``value`` if already parsed, else :func:`generation_params` of it."""
        return value if isinstance(value, cls) else generation_params(value)

    def backend_args(self, model_dir: str) -> dict[str, Any]:
        """The arguments of :func:`hed.decode.factory.open_backend` for ``model_dir``: the
        backend's name, ``dtype``, ``torch_threads`` and the vLLM engine settings."""
        return {
            "name": self.backend,
            "model_dir": model_dir,
            "dtype": self.dtype,
            "torch_threads": self.torch_threads,
            "vllm": self.vllm,
        }


def generation_params(value: Any) -> GenerationParams:
    """Check ``params:generation``: shape, shard/sample counts, sampling parameters, dtype,
    backend (and, for ``vllm``, the engine settings).

    The sampling parameters are checked by :class:`hed.decode.types.SamplingParams` itself
    (types and ranges, each message names the field).

    Raises:
        ConfigError: the first invalid value, naming ``generation.<key>``.
    """
    from hed.core.compute_dtype import dtype_name

    raw = section(value, "generation")
    num_shards = positive_int(raw.get("num_shards", default("generation", "num_shards")),
                              "generation.num_shards")  # fmt: skip
    sampling = sampling_params(raw)
    dtype_name(raw.get("dtype"), "cpu")  # the name only: no checkpoint is read before the run
    backend = generation_backend(raw)
    return GenerationParams(
        num_shards=num_shards,
        samples_per_prompt=raw["samples_per_prompt"],
        max_new_tokens=sampling.max_new_tokens,
        dtype=str(raw.get("dtype") or default("generation", "dtype")),
        raw=raw,
        sampling=sampling,
        backend=backend,
        vllm=VLLMSettings.from_params(raw.get("vllm")) if backend == "vllm" else None,
        torch_threads=raw.get("torch_threads"),
        log_every_s=raw.get("log_every_s"),
    )


def generation_backend(params: Mapping[str, Any]) -> str:
    """``generation.backend`` (absent: ``hf``), validated.

    Raises:
        ConfigError: not one of :data:`BACKENDS`.
    """
    return check_backend_name(params.get("backend", default("generation", "backend")))


def sampling_params(params: Mapping[str, Any]) -> SamplingParams:
    """Build :class:`hed.decode.types.SamplingParams` from ``params:generation``, validated.

    A key left out takes :class:`~hed.decode.types.SamplingParams`'s own default.

    Raises:
        ConfigError: a missing or out-of-range value (temperature ≤ 0, top_p outside (0, 1],
            top_k < 1, max_new_tokens, batch_size, top_prob_k or samples_per_prompt < 1).
    """
    positive_int(params.get("samples_per_prompt"), "generation.samples_per_prompt")
    # values go to SamplingParams unconverted: it checks types and ranges and names the field
    # (float("hot") or int(None) here would raise a message that names nothing)
    given = {name: params[name] for name in _SAMPLING_FIELDS if name in params}
    return SamplingParams(**{"max_new_tokens": params.get("max_new_tokens"), **given})


_SAMPLING_FIELDS = tuple(SamplingParams.__dataclass_fields__)


@dataclass(frozen=True)
class AggregationParams:
    """``params:aggregation``, checked.

    Attributes:
        top_entropy_frac: ρ as the exact fraction of its decimal (:mod:`hed.core.thresholds`).
        chunk_records: records per merge chunk, ≥ 1.
        lexicon: the section's lexicon as given (``None``: HED's default), parsed by
            :func:`hed.core.lexicon.parse_lexicon`.
    """

    top_entropy_frac: Fraction
    chunk_records: int
    lexicon: Any

    @classmethod
    def of(cls, value: Any) -> AggregationParams:
        """``value`` if already parsed, else :func:`aggregation_params` of it."""
        return value if isinstance(value, cls) else aggregation_params(value)


def aggregation_params(value: Any) -> AggregationParams:
    """Check ``params:aggregation`` (ρ in (0, 1], ``chunk_records``, the lexicon).

    Raises:
        ConfigError: the first invalid value.
    """
    from hed.core.lexicon import parse_lexicon
    from hed.core.thresholds import validate_top_entropy_frac

    raw = section(value, "aggregation")
    rho = validate_top_entropy_frac(
        raw.get("top_entropy_frac", default("aggregation", "top_entropy_frac"))
    )
    chunk = positive_int(
        raw.get("chunk_records", default("aggregation", "chunk_records")),
        "aggregation.chunk_records",
    )
    parse_lexicon(raw.get("lexicon"))
    return AggregationParams(top_entropy_frac=rho, chunk_records=chunk, lexicon=raw.get("lexicon"))


@dataclass(frozen=True)
class ReportingParams:
    """``params:reporting``, checked.

    Attributes:
        strict: any missing part of the figures is an error.
        top_n_words: words per Figure 3 panel, ≥ 1.
        fig3_steps: ``reporting.fig3.steps`` sorted, or ``None`` (first/middle/last).
        raw: the section as a dict.
        fig2_measure: what Figure 2's bars measure (:func:`fig2_measure_param`).
        figure2, figure3: the figures' style (:class:`hed.report.style.FigureStyle`; a key left
            out takes :data:`~hed.report.style.FIGURE2_STYLE`'s / ``FIGURE3_STYLE``'s value).
        token_report: ``reporting.token_report`` parsed
            (:class:`hed.report.token_report.options.TokenReportOptions`; absent: its defaults).
        explorer: ``reporting.explorer`` parsed
            (:class:`hed.report.explorer.options.ExplorerOptions`; absent: its defaults).
    """

    strict: bool
    top_n_words: int
    fig3_steps: list[int] | None
    raw: Mapping[str, Any]
    fig2_measure: str = SECTIONS["reporting"]["fig2_measure"]
    figure2: FigureStyle = FIGURE2_STYLE
    figure3: FigureStyle = FIGURE3_STYLE
    token_report: TokenReportOptions | None = None
    explorer: ExplorerOptions | None = None

    @classmethod
    def of(cls, value: Any) -> ReportingParams:
        """``value`` if already parsed, else :func:`reporting_params` of it."""
        return value if isinstance(value, cls) else reporting_params(value)


def reporting_section(reporting: Any) -> dict[str, Any]:
    """Check the shape of ``params:reporting`` before any value is read.

    Returns:
        The section as a dict (empty when ``None``).

    Raises:
        ConfigError: the section, ``fig3``, ``figure2`` or ``figure3`` is not a mapping, or
            ``strict`` is not ``true``/``false``.
    """
    if isinstance(reporting, ReportingParams):  # handed to the node parsed: as configured
        return dict(reporting.raw)
    raw = section(reporting, "reporting")
    for key in ("fig3", "figure2", "figure3"):
        if raw.get(key) is not None:
            section(raw[key], f"reporting.{key}")
    boolean(raw.get("strict", default("reporting", "strict")), "reporting.strict")
    return raw


def fig3_steps_param(reporting: Mapping[str, Any]) -> list[int] | None:
    """``reporting.fig3.steps`` as a sorted list of steps, or ``None`` when unset or empty.

    Raises:
        ConfigError: not a list of non-negative integers.
    """
    return step_list((reporting.get("fig3") or {}).get("steps"), "reporting.fig3.steps")


def top_n_words_param(reporting: Mapping[str, Any]) -> int:
    """``reporting.top_n_words`` (default 20): words per Figure 3 panel.

    Raises:
        ConfigError: not a positive integer.
    """
    return positive_int(
        reporting.get("top_n_words", default("reporting", "top_n_words")), "reporting.top_n_words"
    )


def reporting_params(value: Any) -> ReportingParams:
    """Check ``params:reporting`` (shape, ``strict``, ``top_n_words``, ``fig3.steps``,
    ``fig2_measure``, the figures' style, ``token_report``, ``explorer``), each parsed once.

    Raises:
        ConfigError: the first invalid value, naming ``reporting.<key>`` (e.g.
            ``reporting.figure2.dpi must be an integer from 10 to 1200, got 0``).
    """
    from hed.report.explorer.options import explorer_options
    from hed.report.token_report.options import token_report_options

    raw = reporting_section(value)
    return ReportingParams(
        strict=raw.get("strict", default("reporting", "strict")),
        top_n_words=top_n_words_param(raw),
        fig3_steps=fig3_steps_param(raw),
        raw=raw,
        fig2_measure=fig2_measure_param(raw),
        figure2=figure_style(raw.get("figure2"), "reporting.figure2", FIGURE2_STYLE),
        figure3=figure_style(raw.get("figure3"), "reporting.figure3", FIGURE3_STYLE),
        token_report=token_report_options(raw.get("token_report")),
        explorer=explorer_options(raw.get("explorer")),
    )


def fig2_measure_param(reporting: Mapping[str, Any]) -> str:
    """``reporting.fig2_measure`` (default ``count``): what Figure 2's bars measure.

    ``count`` (the paper's: anthropomorphic high-entropy tokens), ``per_1k_high_entropy``
    (per 1000 high-entropy tokens) or ``per_1k_tokens`` (per 1000 tokens of the step);
    see :func:`hed.report.figures.figure2_values`.

    Raises:
        ConfigError: another value.
    """
    from hed.report.figures import FIGURE2_MEASURES  # matplotlib: only when a reporting run asks

    measure = reporting.get("fig2_measure", default("reporting", "fig2_measure"))
    if not isinstance(measure, str) or measure not in FIGURE2_MEASURES:
        raise ConfigError(
            f"reporting.fig2_measure must be one of {', '.join(FIGURE2_MEASURES)}, got {measure!r}"
        )
    return str(measure)


def generation_mapping(generation: Any) -> Mapping[str, Any]:
    """``params:generation`` as configured: the parsed section's ``raw``, or the dict itself.

    For the comparisons of recorded shard metadata with the configuration
    (:mod:`hed.records.shard_metadata`), which compare configured values key by key.

    Raises:
        ConfigError: not a mapping.
    """
    if isinstance(generation, GenerationParams):
        return generation.raw
    return section(generation, "generation")


def shard_config(generation: Any) -> tuple[int, int]:
    """``(generation.num_shards, generation.samples_per_prompt)``, both positive integers.

    Args:
        generation: the parsed section (:class:`GenerationParams`) or the raw mapping.

    Raises:
        ConfigError: either is missing, not an integer (a bool is not one) or below 1.
    """
    if isinstance(generation, GenerationParams):
        return generation.num_shards, generation.samples_per_prompt
    generation = section(generation, "generation")
    return (
        positive_int(generation.get("num_shards"), "generation.num_shards"),
        positive_int(generation.get("samples_per_prompt"), "generation.samples_per_prompt"),
    )


def top_entropy_frac_param(aggregation: Any) -> Fraction:
    """``aggregation.top_entropy_frac`` as an exact fraction, from the parsed section or a dict.

    Raises:
        ConfigError: outside (0, 1] or not a number.
    """
    from hed.core.thresholds import validate_top_entropy_frac

    if isinstance(aggregation, AggregationParams):
        return aggregation.top_entropy_frac
    raw = section(aggregation, "aggregation")
    return validate_top_entropy_frac(
        raw.get("top_entropy_frac", default("aggregation", "top_entropy_frac"))
    )


def lexicon_param(aggregation: Any):
    """The :class:`hed.core.lexicon.Lexicon` of ``aggregation.lexicon`` (parsed section or dict).

    Raises:
        ConfigError: the lexicon is missing or invalid.
    """
    from hed.core.lexicon import parse_lexicon

    if isinstance(aggregation, AggregationParams):
        return parse_lexicon(aggregation.lexicon)
    return parse_lexicon(section(aggregation, "aggregation").get("lexicon"))


def chunk_records_param(aggregation: Any, fallback: int | None = None) -> int:
    """``aggregation.chunk_records`` (records per merged chunk; when unset ``fallback``, else
    the section default).

    Raises:
        ConfigError: not a positive integer.
    """
    if isinstance(aggregation, AggregationParams):
        return aggregation.chunk_records
    if fallback is None:
        fallback = default("aggregation", "chunk_records")
    value = section(aggregation, "aggregation").get("chunk_records", fallback)
    return positive_int(value, "aggregation.chunk_records")


__all__ = [
    "BACKENDS",
    "DUPLICATE_POLICIES",
    "SECTIONS",
    "TOP_LEVEL",
    "AggregationParams",
    "GenerationParams",
    "ReportingParams",
    "aggregation_params",
    "boolean",
    "check_unknown_keys",
    "chunk_records_param",
    "default",
    "fig2_measure_param",
    "fig3_steps_param",
    "generation_backend",
    "generation_mapping",
    "generation_params",
    "integer",
    "is_integer",
    "key_origin",
    "lexicon_param",
    "names",
    "non_negative_int",
    "positive_int",
    "reporting_params",
    "reporting_section",
    "sampling_params",
    "section",
    "shard_config",
    "step_list",
    "top_entropy_frac_param",
    "top_n_words_param",
    "unknown_keys",
]
