"""The typed ``dynamics`` and ``analyses`` parameter sections, each one pydantic model.

:class:`DynamicsParams` (``params:dynamics``: advantage estimators, the covariance settings,
the figures' style) and :class:`AnalysesParams` (``params:analyses``: the reference run, the
sampler–trainer mismatch, the trainer's entropy, Δlog p, the figures' dpi) are parsed by
``DynamicsParams.of`` / ``AnalysesParams.of`` (aliases :func:`dynamics_params`,
:func:`analyses_params`) in the pre-run check (:func:`hed.hooks.parameters.parsed_sections`)
and handed to the nodes, which read attributes. Each field declares its type, range and
default once; the defaults' values come from the analysis module that uses them
(:data:`hed.core.advantage.ESTIMATORS`, :mod:`hed.analysis.covariance`,
:data:`hed.analysis.mismatch.VERL_RATIO_BOUNDS`, ...).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, Strict, field_validator

from hed.analysis.advantage_shaping import AdvantageShapingParams
from hed.analysis.covariance import BATCH_RECORDS, CLIP_COV_BAND, KL_COV_RATIO, CovarianceSettings
from hed.analysis.delta_logprob import MIN_COUNT, TOP_N
from hed.analysis.mismatch import MISMATCH_DTYPE, MISMATCH_DTYPES, VERL_RATIO_BOUNDS
from hed.analysis.trainer_entropy import METRIC_KEY, TOLERANCE_NATS
from hed.config.model import Fraction, Number, PositiveInt, PositiveNumber, Section
from hed.core.advantage import DEFAULT_EPSILON, ESTIMATORS, check_estimators
from hed.report.style import (
    DPI,
    DYNAMICS_STYLE,
    MAX_DPI,
    MIN_DPI,
    DynamicsStyle,
    FigureStyle,
    figure_style,
)

#: ``dynamics.figures``: the style of the dynamics figures (one column of panels per run,
#: two rows; defaults :data:`hed.report.style.DYNAMICS_STYLE`).
DynamicsFigures = DynamicsStyle


def _ascending(pair: tuple[float, float]) -> tuple[float, float]:
    if not pair[0] < pair[1]:
        raise ValueError("[lo, hi] with lo < hi")
    return pair


#: (lo, hi) with lo < hi
Band = Annotated[tuple[Number, Number], AfterValidator(_ascending)]
#: (lo, hi) with 0 < lo < hi
PositiveBand = Annotated[tuple[PositiveNumber, PositiveNumber], AfterValidator(_ascending)]

# ------------------------------------------------------------------ dynamics


class DynamicsParams(Section):
    """``params:dynamics`` (see ``conf/base/parameters_dynamics.yml``)."""

    section: ClassVar[str] = "dynamics"

    estimators: tuple[str, ...] = ESTIMATORS
    """Advantage estimators to compute (``grpo``: (r − mean)/(std + ε), DeepSeekMath;
    ``dr_grpo``: r − mean, Dr. GRPO); a single name is a list of one."""
    epsilon: PositiveNumber = DEFAULT_EPSILON
    """ε of GRPO's advantage denominator (std + ε)."""
    kl_cov_ratio: Fraction = KL_COV_RATIO
    """k of KL-Cov: the top ``max(1, int(k·N))`` tokens by centred cov(log p, A) (verl)."""
    clip_cov_band: Band = CLIP_COV_BAND
    """(lo, hi) of the Clip-Cov band lo < cov < hi (verl: [1.0, 5.0])."""
    batch_records: PositiveInt = BATCH_RECORDS
    """Token records per batch read (memory ≈ 100 bytes × this × 2)."""
    figures: FigureStyle = DYNAMICS_STYLE
    """The dynamics figures' style: ``panel_size`` [width, height] in inches, ``dpi``."""

    @field_validator("estimators", mode="before")
    @classmethod
    def _estimators(cls, value: Any) -> tuple[str, ...]:
        return check_estimators(value)

    @field_validator("figures", mode="before")
    @classmethod
    def _figures(cls, value: Any) -> FigureStyle:
        return figure_style(value, "dynamics.figures", DYNAMICS_STYLE)

    @property
    def covariance(self) -> CovarianceSettings:
        """KL-Cov ratio, Clip-Cov band and records per batch, as the covariance code takes them."""
        return CovarianceSettings(self.kl_cov_ratio, self.clip_cov_band, self.batch_records)


# ------------------------------------------------------------------ analyses


class MismatchSettings(Section):
    """``analyses.mismatch``: how a step's own responses are re-scored and compared."""

    section: ClassVar[str] = "analyses.mismatch"

    dtype: Literal[MISMATCH_DTYPES] = MISMATCH_DTYPE  # type: ignore[valid-type]
    """The re-scoring dtype (bfloat16: the trainer's; float32: the exact reference)."""
    ratio_bounds: PositiveBand = VERL_RATIO_BOUNDS
    """(lo, hi) of the importance ratio r = q/p counted as in bounds, 0 < lo < hi (verl)."""


class TrainerEntropySettings(Section):
    """``analyses.trainer_entropy``: the trainer's logged entropy next to HED's."""

    section: ClassVar[str] = "analyses.trainer_entropy"

    metric_key: Annotated[str, Field(min_length=1)] = METRIC_KEY
    """The W&B key of the trainer's mean entropy (verl: ``actor/entropy``)."""
    tolerance_nats: Annotated[float, Strict(), Field(ge=0)] = TOLERANCE_NATS
    """A larger |HED's − the trainer's| mean entropy (nats) logs a warning."""


class DeltaLogprobSettings(Section):
    """``analyses.delta_logprob``: the words listed in ``delta_logprob_top_tokens``."""

    section: ClassVar[str] = "analyses.delta_logprob"

    top_n: PositiveInt = TOP_N
    """Words listed per direction (rose, fell)."""
    min_count: PositiveInt = MIN_COUNT
    """Tokens a word needs to be listed."""


class AnalysesParams(Section):
    """``params:analyses`` (see ``conf/base/parameters_analyses.yml``)."""

    section: ClassVar[str] = "analyses"

    reference_run: str | None = None
    """The run ``runs_comparison`` takes deltas to (null: the first run)."""
    mismatch: MismatchSettings = MismatchSettings()
    """The sampler–trainer mismatch."""
    trainer_entropy: TrainerEntropySettings = TrainerEntropySettings()
    """The trainer's entropy next to HED's."""
    delta_logprob: DeltaLogprobSettings = DeltaLogprobSettings()
    """Δlog p's word lists."""
    dpi: Annotated[int, Strict(), Field(ge=MIN_DPI, le=MAX_DPI)] = DPI
    """Dots per inch of the analysis figures."""
    advantage_shaping: AdvantageShapingParams | None = None
    """Where each advantage scheme (GRPO, Dr. GRPO, the 80/20 mask, the entropy advantage,
    GTPO, GRPO-S) puts the credit (docs/advantage_shaping.md); null: not tabulated."""


#: ``dynamics_params(raw)``: :meth:`DynamicsParams.of` (the pre-run check's name for it).
dynamics_params = DynamicsParams.of
#: ``analyses_params(raw)``: :meth:`AnalysesParams.of`.
analyses_params = AnalysesParams.of
