"""The pass@1 configuration: ``params:metrics`` and each ``metrics.runs.<run>``, parsed and checked.

Each source's options are one pydantic model (:data:`SOURCE_OPTIONS`: ``wandb``,
``wandb_offline``, ``csv``, ``generated``; docs/metrics.md) declaring its options, their
defaults and which are required. :func:`parse_run_config` reads which sources a run lists,
fills each source's defaults and refuses an unknown source or option, a missing required
option or both W&B sources at once, before any node runs. :class:`MetricsParams` is the whole
section (:func:`metrics_params`; the pre-run check parses it once and hands it to the nodes as
``params:metrics``); :class:`WandbDefaults` holds the defaults of ``metrics.wandb_defaults``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from hed.config.model import PositiveNumber, Section, null_is
from hed.errors import ConfigError
from hed.pass1.history import DEFAULT_METRIC_KEY, DEFAULT_STEP_KEY, SCALES
from hed.pass1.wandb_online import TIMEOUT_S, wandb_run_ref

SOURCES = ("wandb", "wandb_offline", "csv", "generated")
WANDB_SOURCES = ("wandb", "wandb_offline")
EXPORT_DIR = "01_raw/metrics"

#: a non-empty string
Text = Annotated[str, Field(min_length=1)]


class WandbOptions(Section):
    """``metrics.runs.<run>.sources.wandb``: a run on a W&B server, read through its API.

    The run is ``run`` (``entity/project/run_id`` or its URL), or entity + project + run_id,
    or entity + project + name (the display name, verl's ``trainer.experiment_name``).
    """

    model_config = ConfigDict(coerce_numbers_to_str=True)  # a run id YAML reads as a number

    run: str | None = None
    """``<entity>/<project>/<run_id>`` or the run's URL."""
    entity: str | None = None
    """W&B entity (user or team)."""
    project: str | None = None
    """W&B project."""
    run_id: str | None = None
    """The run's id (the last part of its URL)."""
    name: str | None = None
    """The run's display name (instead of ``run_id``)."""
    metric_key: str | None = None
    """The pass@1 key (null: ``metrics.wandb_defaults.metric_key``)."""
    step_key: str | None = None
    """The training step key (null: ``metrics.wandb_defaults.step_key``)."""
    base_url: str | None = None
    """The W&B server (null: ``WANDB_BASE_URL``, else https://api.wandb.ai)."""
    timeout: PositiveNumber = TIMEOUT_S
    """Seconds to wait for the server per request."""


class WandbOfflineOptions(Section):
    """``metrics.runs.<run>.sources.wandb_offline``: an offline W&B run folder."""

    path: Text
    """The ``offline-run-*`` folder (or the ``.wandb`` file)."""
    metric_key: str | None = None
    """The pass@1 key (null: ``metrics.wandb_defaults.metric_key``)."""
    step_key: str | None = None
    """The training step key (null: ``metrics.wandb_defaults.step_key``)."""


class CsvOptions(Section):
    """``metrics.runs.<run>.sources.csv``: a CSV of pass@1 by step."""

    path: Text
    """The CSV file."""
    step_column: str = "step"
    """Its column of training steps."""
    pass1_column: str = "pass1"
    """Its column of pass@1."""
    scale: Literal[SCALES] = "fraction"  # type: ignore[valid-type]
    """``fraction`` (pass@1 in [0, 1]) or ``percent`` (in [0, 100], divided by 100)."""


class GeneratedOptions(Section):
    """``metrics.runs.<run>.sources.generated``: pass@1 of HED's own generations (no options)."""


#: each source's options
SOURCE_OPTIONS: dict[str, type[Section]] = {
    "wandb": WandbOptions,
    "wandb_offline": WandbOfflineOptions,
    "csv": CsvOptions,
    "generated": GeneratedOptions,
}


class RunSources(Section):
    """``metrics.runs.<run>``: where a run's pass@1 comes from."""

    sources: dict[Literal[SOURCES], dict[str, Any] | None] = Field(default_factory=dict)  # type: ignore[valid-type]
    """``{source: options}``, sources of :data:`SOURCES` (``{generated: {}}``)."""
    figure_source: str | None = None
    """The source the figures use (null: the first listed; ``wandb`` also means the run's
    ``wandb_offline``)."""


@dataclass(frozen=True)
class SourceSpec:
    """One configured pass@1 source of a run.

    Attributes:
        name: ``wandb``, ``wandb_offline``, ``csv`` or ``generated``.
        options: the source's options with defaults filled in (:data:`SOURCE_OPTIONS`).
    """

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunPass1Config:
    """The pass@1 sources of one run.

    Attributes:
        run: run name.
        sources: the sources in the order listed.
        figure_source: the source the figures use (default: the first listed).
    """

    run: str
    sources: tuple[SourceSpec, ...]
    figure_source: str | None

    def source(self, name: str) -> SourceSpec | None:
        """The source called ``name``, or None when the run does not list it."""
        return next((spec for spec in self.sources if spec.name == name), None)

    @property
    def wandb_source(self) -> SourceSpec | None:
        """The run's W&B source (``wandb`` or ``wandb_offline``), or None."""
        return next((spec for spec in self.sources if spec.name in WANDB_SOURCES), None)


#: a W&B key: not blank
WandbKey = Annotated[str, StringConstraints(pattern=r"\S")]


class WandbDefaults(Section):
    """``metrics.wandb_defaults``: the keys of W&B sources that do not name their own."""

    section: ClassVar[str] = "metrics.wandb_defaults"

    metric_key: Annotated[WandbKey, null_is(DEFAULT_METRIC_KEY)] = DEFAULT_METRIC_KEY
    """The pass@1 key (verl: ``val-core/<data_source>/acc/mean@<n>``)."""
    step_key: Annotated[WandbKey, null_is(DEFAULT_STEP_KEY)] = DEFAULT_STEP_KEY
    """The training step key (``_step``: W&B's own counter)."""


#: the JSON Schema of ``metrics.runs`` as written (the field holds the parsed runs)
_AS_WRITTEN = WithJsonSchema(
    {"type": "object", "additionalProperties": RunSources.model_json_schema()}
)


class MetricsParams(Section):
    """``params:metrics``: each run's pass@1 sources."""

    section: ClassVar[str] = "metrics"

    wandb_defaults: WandbDefaults = WandbDefaults()
    """The metric and step keys of W&B sources that omit them."""
    runs: Annotated[dict[str, RunPass1Config], _AS_WRITTEN] = Field(default_factory=dict)
    """``{run: RunSources}`` (``metrics.runs.<run>``); parsed, the runs of the study only."""

    @field_validator("runs", mode="before")
    @classmethod
    def _runs(cls, value: Any, info: ValidationInfo) -> dict[str, RunPass1Config]:
        context = info.context or {}
        defaults = info.data.get("wandb_defaults")
        if defaults is None:  # refused already: its error is the one reported
            return {}
        listed = value or {}
        if not isinstance(listed, Mapping):
            raise ConfigError(
                f"metrics.runs must be a mapping of run name to sources, got {listed!r}"
            )
        wanted = context.get("runs")
        export_dir = context.get("export_dir", f"<data_root>/{EXPORT_DIR}")
        return {
            name: _run_config(name, cfg, defaults, export_dir)
            for name, cfg in listed.items()
            if wanted is None or name in wanted
        }

    def run(self, name: str) -> RunPass1Config:
        """The sources of run ``name`` (none when ``metrics.runs`` does not list it)."""
        return self.runs.get(name) or RunPass1Config(run=name, sources=(), figure_source=None)


def metrics_params(
    value: Any,
    runs: Sequence[str] | None = None,
    export_dir: str = f"<data_root>/{EXPORT_DIR}",
) -> MetricsParams:
    """Check ``params:metrics``: ``wandb_defaults`` and the sources of each run.

    Args:
        value: the ``metrics`` section (``None``: no pass@1 source anywhere).
        runs: the run names to parse (default: every run ``metrics.runs`` lists); a listed run
            outside them is left unparsed, as the metrics pipeline ignores it.
        export_dir: as in :func:`parse_run_config` (for messages).

    Raises:
        ConfigError: ``metrics`` or ``metrics.wandb_defaults`` not a mapping, a default key
            not a non-empty string, or a run's sources invalid (:func:`parse_run_config`).
    """
    return MetricsParams.of(value, context={"runs": runs, "export_dir": export_dir})


def _source_options(run: str, name: str, raw: Any, wandb_defaults: WandbDefaults) -> dict:
    where = f"metrics.runs.{run}.sources.{name}"
    if name not in SOURCE_OPTIONS:
        raise ConfigError(
            f"metrics.runs.{run}.sources: unknown source {name!r}; use one of {', '.join(SOURCES)}"
        )
    model = SOURCE_OPTIONS[name]
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping of options (or {{}}), got {raw!r}")
    unknown = sorted(set(raw) - set(model.model_fields))
    if unknown:
        allowed = ", ".join(model.model_fields) or "none"
        raise ConfigError(f"{where}: unknown option(s) {', '.join(unknown)}; allowed: {allowed}")
    try:
        options = model.model_validate(raw).model_dump()
    except ValidationError as exc:
        raise _option_error(exc, model, where, name) from None
    if name == "wandb":
        wandb_run_ref(options, where)  # refuses an incomplete or ambiguous run reference now
    if name in WANDB_SOURCES:
        options["metric_key"] = options["metric_key"] or wandb_defaults.metric_key
        options["step_key"] = options["step_key"] or wandb_defaults.step_key
    return options


def _option_error(exc: ValidationError, model: type[Section], where: str, name: str) -> Exception:
    """Today's wording for a missing required option and a bad ``scale``; else the generic."""
    from hed.config.messages import config_error

    error = exc.errors()[0]
    key = error["loc"][0] if error["loc"] else ""
    required = [k for k, info in model.model_fields.items() if info.is_required()]
    if key in required and error["type"] in ("missing", "string_too_short"):
        return ConfigError(
            f"{where}.{key} is missing: the {name} source needs {', '.join(required)}"
        )
    if key == "scale":
        return ConfigError(
            f"{where}.scale is {error['input']!r}: use fraction (pass@1 in [0, 1]) or "
            "percent (in [0, 100], divided by 100)"
        )
    return config_error(exc, model, where, None)


def _run_config(
    run: str, cfg: Any, wandb_defaults: WandbDefaults, export_dir: str
) -> RunPass1Config:
    """The parsed ``metrics.runs.<run>`` (see :func:`parse_run_config`)."""
    cfg = cfg or {}
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"metrics.runs.{run} must be a mapping with `sources`, got {cfg!r}")
    unknown_keys = sorted(set(cfg) - set(RunSources.model_fields))
    if unknown_keys:
        raise ConfigError(
            f"metrics.runs.{run}: unknown key(s) {', '.join(unknown_keys)}; "
            "use `sources` and `figure_source`"
        )
    raw_sources = cfg.get("sources") or {}
    if not isinstance(raw_sources, Mapping):
        raise ConfigError(
            f"metrics.runs.{run}.sources must be a mapping such as `{{generated: {{}}}}`, "
            f"got {raw_sources!r}"
        )
    specs = [
        SourceSpec(name=name, options=_source_options(run, name, raw, wandb_defaults))
        for name, raw in raw_sources.items()
    ]
    if sum(spec.name in WANDB_SOURCES for spec in specs) > 1:
        raise ConfigError(
            f"metrics.runs.{run}.sources lists both wandb and wandb_offline: keep one "
            f"(both read the same history and export to {export_dir}/{run}.csv)"
        )
    figure_source = cfg.get("figure_source")
    names = [spec.name for spec in specs]
    if figure_source in WANDB_SOURCES and figure_source not in names:
        # the run's one W&B source, online or offline: switching `wandb` to `wandb_offline`
        # (or back) needs no second edit of figure_source
        figure_source = next((name for name in names if name in WANDB_SOURCES), figure_source)
    if figure_source is not None and figure_source not in names:
        raise ConfigError(
            f"metrics.runs.{run}.figure_source is {figure_source!r} but the run lists "
            f"{', '.join(names) or 'no sources'}"
        )
    return RunPass1Config(
        run=run, sources=tuple(specs), figure_source=figure_source or (names[0] if names else None)
    )


def parse_run_config(
    metrics_params: Mapping[str, Any] | MetricsParams | None,
    run: str,
    export_dir: str = f"<data_root>/{EXPORT_DIR}",
) -> RunPass1Config:
    """Read and check the pass@1 configuration of ``run`` from ``params:metrics``.

    Args:
        metrics_params: the ``metrics`` parameters (``wandb_defaults``, ``runs``), raw or
            parsed (:class:`MetricsParams`: its run is returned as parsed).
        run: run name.
        export_dir: where ``<run>.metrics_export`` lies (``<data_root>/01_raw/metrics`` of the
            environment; the metrics pipeline passes the real folder), for error messages.

    Returns:
        The run's sources (an empty tuple when ``metrics.runs`` does not list the run).

    Raises:
        ConfigError: an unknown source name or option, a missing required option, both W&B
            sources listed, or a ``figure_source`` the run does not list (``figure_source:
            wandb`` follows the run's one W&B source: it means ``wandb_offline`` when that is
            the one listed, and the other way round).
    """
    context = {"runs": [run], "export_dir": export_dir}
    return MetricsParams.of(metrics_params, context=context).run(run)
