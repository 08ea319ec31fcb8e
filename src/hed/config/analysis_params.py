"""The typed ``dynamics`` and ``analyses`` parameter sections, each parsed once.

:class:`DynamicsParams` (``params:dynamics``: advantage estimators, the covariance settings,
the figures' style) and :class:`AnalysesParams` (``params:analyses``: the reference run, the
sampler–trainer mismatch, the trainer's entropy, Δlog p, the figures' dpi) are built by
:func:`dynamics_params` and :func:`analyses_params` in the pre-run check
(:func:`hed.config.preflight.parsed_sections`) and handed to the nodes, which read attributes.
A node given a raw dict (a test, a notebook) parses it with the same function
(``DynamicsParams.of``, ``AnalysesParams.of``).

Each default is written once: here, as a dataclass default, or in the analysis module that
uses it (:data:`hed.core.advantage.ESTIMATORS`, :class:`hed.analysis.covariance.CovarianceSettings`,
:data:`hed.analysis.mismatch.VERL_RATIO_BOUNDS`, ...). :data:`hed.config.sections.SECTIONS`
lists the same defaults, taken from these classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hed.analysis.covariance import CovarianceSettings
from hed.analysis.delta_logprob import MIN_COUNT, TOP_N
from hed.analysis.mismatch import MISMATCH_DTYPE, MISMATCH_DTYPES, VERL_RATIO_BOUNDS
from hed.analysis.trainer_entropy import METRIC_KEY, TOLERANCE_NATS
from hed.core.advantage import DEFAULT_EPSILON, ESTIMATORS, check_estimators
from hed.core.validators import positive_int, section
from hed.errors import ConfigError
from hed.report.style import DPI, DYNAMICS_STYLE, FigureStyle, check_dpi, figure_style


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: ``dynamics.figures``: the style of the dynamics figures (one column of panels per run,
#: two rows; defaults :data:`hed.report.style.DYNAMICS_STYLE`).
DynamicsFigures = FigureStyle


# ------------------------------------------------------------------ dynamics


@dataclass(frozen=True)
class DynamicsParams:
    """``params:dynamics``, checked (see ``conf/base/parameters_dynamics.yml``).

    Attributes:
        estimators: advantage estimators, names from :data:`hed.core.advantage.ESTIMATORS`.
        epsilon: ε of GRPO's advantage denominator (std + ε), > 0.
        covariance: KL-Cov ratio, Clip-Cov band and records per batch
            (:class:`hed.analysis.covariance.CovarianceSettings`; the section's flat keys
            ``kl_cov_ratio``, ``clip_cov_band``, ``batch_records``).
        figures: the figures' style (``dynamics.figures``,
            :class:`hed.report.style.FigureStyle`).
    """

    estimators: tuple[str, ...] = ESTIMATORS
    epsilon: float = DEFAULT_EPSILON
    covariance: CovarianceSettings = field(default_factory=CovarianceSettings)
    figures: FigureStyle = DYNAMICS_STYLE

    @classmethod
    def of(cls, value: Any) -> DynamicsParams:
        """``value`` if already parsed, else :func:`dynamics_params` of it."""
        return value if isinstance(value, cls) else dynamics_params(value)


def dynamics_params(value: Any) -> DynamicsParams:
    """Check ``params:dynamics`` (``None``, an empty YAML section: every default).

    Raises:
        ConfigError: the section or ``figures`` is not a mapping; bad ``estimators``,
            ``epsilon`` (not > 0), ``kl_cov_ratio``, ``clip_cov_band``, ``batch_records``,
            ``figures.panel_size`` or ``figures.dpi``; each message names ``dynamics.<key>``.
    """
    raw = section(value, "dynamics")
    estimators = check_estimators(raw.get("estimators", list(ESTIMATORS)))
    epsilon = raw.get("epsilon", DEFAULT_EPSILON)
    if not _number(epsilon) or not epsilon > 0:
        raise ConfigError(f"dynamics.epsilon must be a positive number, got {epsilon!r}")
    return DynamicsParams(
        estimators=estimators,
        epsilon=float(epsilon),
        covariance=CovarianceSettings.from_params(raw),
        figures=figure_style(raw.get("figures"), "dynamics.figures", DYNAMICS_STYLE),
    )


# ------------------------------------------------------------------ analyses


@dataclass(frozen=True)
class MismatchSettings:
    """``analyses.mismatch``: how a step's own responses are re-scored and compared.

    Attributes:
        dtype: the re-scoring dtype (:data:`hed.analysis.mismatch.MISMATCH_DTYPES`).
        ratio_bounds: (lo, hi) of the importance ratio r = q/p, 0 < lo < hi (verl's).
    """

    dtype: str = MISMATCH_DTYPE
    ratio_bounds: tuple[float, float] = VERL_RATIO_BOUNDS


@dataclass(frozen=True)
class TrainerEntropySettings:
    """``analyses.trainer_entropy``: the trainer's logged entropy next to HED's.

    Attributes:
        metric_key: the W&B key of the trainer's mean entropy (verl: ``actor/entropy``).
        tolerance_nats: a larger |difference| logs a warning, ≥ 0.
    """

    metric_key: str = METRIC_KEY
    tolerance_nats: float = TOLERANCE_NATS


@dataclass(frozen=True)
class DeltaLogprobSettings:
    """``analyses.delta_logprob``: the words listed in ``delta_logprob_top_tokens``.

    Attributes:
        top_n: words listed per direction (rose, fell), ≥ 1.
        min_count: tokens a word needs to be listed, ≥ 1.
    """

    top_n: int = TOP_N
    min_count: int = MIN_COUNT


@dataclass(frozen=True)
class AnalysesParams:
    """``params:analyses``, checked (see ``conf/base/parameters_analyses.yml``).

    Attributes:
        reference_run: the run ``runs_comparison`` takes deltas to (None: the first run).
        mismatch: :class:`MismatchSettings`.
        trainer_entropy: :class:`TrainerEntropySettings`.
        delta_logprob: :class:`DeltaLogprobSettings`.
        dpi: dots per inch of the analysis figures, ≥ 10.
    """

    reference_run: str | None = None
    mismatch: MismatchSettings = field(default_factory=MismatchSettings)
    trainer_entropy: TrainerEntropySettings = field(default_factory=TrainerEntropySettings)
    delta_logprob: DeltaLogprobSettings = field(default_factory=DeltaLogprobSettings)
    dpi: int = DPI

    @classmethod
    def of(cls, value: Any) -> AnalysesParams:
        """``value`` if already parsed, else :func:`analyses_params` of it."""
        return value if isinstance(value, cls) else analyses_params(value)


def analyses_params(value: Any) -> AnalysesParams:
    """Check ``params:analyses`` (``None``, an empty YAML section: every default).

    Raises:
        ConfigError: the section or a subsection is not a mapping; an unknown
            ``mismatch.dtype``, ``mismatch.ratio_bounds`` not 0 < lo < hi, an empty
            ``trainer_entropy.metric_key``, a negative ``trainer_entropy.tolerance_nats``,
            ``delta_logprob.top_n`` / ``min_count`` not positive integers, ``dpi`` < 10;
            each message names ``analyses.<key>``.
    """
    raw = section(value, "analyses")
    reference = raw.get("reference_run")
    return AnalysesParams(
        reference_run=None if reference is None else str(reference),
        mismatch=_mismatch(section(raw.get("mismatch"), "analyses.mismatch")),
        trainer_entropy=_trainer_entropy(
            section(raw.get("trainer_entropy"), "analyses.trainer_entropy")
        ),
        delta_logprob=_delta_logprob(section(raw.get("delta_logprob"), "analyses.delta_logprob")),
        dpi=check_dpi(raw.get("dpi", DPI), "analyses.dpi"),
    )


def _mismatch(raw: Mapping[str, Any]) -> MismatchSettings:
    dtype = raw.get("dtype", MISMATCH_DTYPE)
    if dtype not in MISMATCH_DTYPES:
        raise ConfigError(
            f"analyses.mismatch.dtype: {dtype!r} is not one of {', '.join(MISMATCH_DTYPES)} "
            "(bfloat16: the trainer's; float32: the exact reference)"
        )
    bounds = raw.get("ratio_bounds", list(VERL_RATIO_BOUNDS))
    ok = isinstance(bounds, list | tuple) and len(bounds) == 2 and all(map(_number, bounds))
    if not ok or not 0 < bounds[0] < bounds[1]:
        raise ConfigError(
            f"analyses.mismatch.ratio_bounds must be [lo, hi] with 0 < lo < hi (verl: [0.5, 2.0]), "
            f"got {bounds!r}"
        )
    return MismatchSettings(str(dtype), (float(bounds[0]), float(bounds[1])))


def _trainer_entropy(raw: Mapping[str, Any]) -> TrainerEntropySettings:
    key = raw.get("metric_key", METRIC_KEY)
    tolerance = raw.get("tolerance_nats", TOLERANCE_NATS)
    if not isinstance(key, str) or not key:
        raise ConfigError(f"analyses.trainer_entropy.metric_key must be a W&B key, got {key!r}")
    if not _number(tolerance) or tolerance < 0:
        raise ConfigError(
            f"analyses.trainer_entropy.tolerance_nats must be a number ≥ 0, got {tolerance!r}"
        )
    return TrainerEntropySettings(key, float(tolerance))


def _delta_logprob(raw: Mapping[str, Any]) -> DeltaLogprobSettings:
    return DeltaLogprobSettings(
        top_n=positive_int(raw.get("top_n", TOP_N), "analyses.delta_logprob.top_n"),
        min_count=positive_int(raw.get("min_count", MIN_COUNT), "analyses.delta_logprob.min_count"),
    )


__all__ = [
    "AnalysesParams",
    "DeltaLogprobSettings",
    "DynamicsFigures",
    "DynamicsParams",
    "MismatchSettings",
    "TrainerEntropySettings",
    "analyses_params",
    "dynamics_params",
]
