"""The pass@1 configuration: ``params:metrics`` and each ``metrics.runs.<run>``, parsed and checked.

:func:`parse_run_config` reads which sources a run lists (``wandb``, ``wandb_offline``, ``csv``,
``generated``; docs/metrics.md), fills each source's defaults and refuses an unknown source or
option, a missing required option or both W&B sources at once, before any node runs.
:func:`metrics_params` parses the whole section into :class:`MetricsParams` (the pre-run check
does it once and hands it to the nodes as ``params:metrics``); :class:`WandbDefaults` holds the
defaults of ``metrics.wandb_defaults`` (the one place of them: ``hed.config.sections`` reads it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hed.core.validators import section
from hed.errors import ConfigError
from hed.pass1.history import DEFAULT_METRIC_KEY, DEFAULT_STEP_KEY, SCALES
from hed.pass1.wandb_online import TIMEOUT_S, wandb_run_ref

SOURCES = ("wandb", "wandb_offline", "csv", "generated")
WANDB_SOURCES = ("wandb", "wandb_offline")
EXPORT_DIR = "01_raw/metrics"


# options each source accepts: name -> (required, optional with defaults)
_OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    # a run as `run: entity/project/run_id` (or its URL), as entity + project + run_id, or
    # as entity + project + name (the display name, verl's trainer.experiment_name)
    "wandb": (
        (),
        {
            "run": None,
            "entity": None,
            "project": None,
            "run_id": None,
            "name": None,
            "metric_key": None,
            "step_key": None,
            "base_url": None,
            "timeout": TIMEOUT_S,
        },
    ),
    "wandb_offline": (("path",), {"metric_key": None, "step_key": None}),
    "csv": (("path",), {"step_column": "step", "pass1_column": "pass1", "scale": "fraction"}),
    "generated": ((), {}),
}


@dataclass(frozen=True)
class SourceSpec:
    """One configured pass@1 source of a run.

    Attributes:
        name: ``wandb``, ``wandb_offline``, ``csv`` or ``generated``.
        options: the source's options with defaults filled in (see ``docs/metrics.md``).
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


@dataclass(frozen=True)
class WandbDefaults:
    """``metrics.wandb_defaults``: the keys of W&B sources that do not name their own.

    Attributes:
        metric_key: the pass@1 key (verl: ``val-core/<data_source>/acc/mean@<n>``).
        step_key: the training step key (``_step``: W&B's own counter).
    """

    metric_key: str = DEFAULT_METRIC_KEY
    step_key: str = DEFAULT_STEP_KEY


@dataclass(frozen=True)
class MetricsParams:
    """``params:metrics``, checked.

    Attributes:
        wandb_defaults: the metric and step keys of W&B sources that omit them.
        runs: ``{run: RunPass1Config}`` of the runs parsed (every run ``metrics.runs`` lists,
            or those named when parsing).
    """

    wandb_defaults: WandbDefaults = WandbDefaults()
    runs: Mapping[str, RunPass1Config] = field(default_factory=dict)

    def run(self, name: str) -> RunPass1Config:
        """The sources of run ``name`` (none when ``metrics.runs`` does not list it)."""
        return self.runs.get(name) or RunPass1Config(run=name, sources=(), figure_source=None)

    @classmethod
    def of(cls, value: Any) -> MetricsParams:
        """``value`` if already parsed, else :func:`metrics_params` of it (a raw dict)."""
        return value if isinstance(value, cls) else metrics_params(value)


def _wandb_defaults(raw: Any) -> WandbDefaults:
    raw = section(raw, "metrics.wandb_defaults")
    given = WandbDefaults()
    for key in ("metric_key", "step_key"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(
                f"metrics.wandb_defaults.{key} must be a non-empty string (a W&B key such as "
                f"{getattr(given, key)!r}) or null, got {value!r}"
            )
    return WandbDefaults(
        metric_key=raw.get("metric_key") or given.metric_key,
        step_key=raw.get("step_key") or given.step_key,
    )


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

    Returns:
        :class:`MetricsParams`.

    Raises:
        ConfigError: ``metrics`` or ``metrics.wandb_defaults`` not a mapping, a default key
            not a non-empty string, or a run's sources invalid (:func:`parse_run_config`).
    """
    raw = section(value, "metrics")
    defaults = _wandb_defaults(raw.get("wandb_defaults"))
    listed = raw.get("runs") or {}
    if not isinstance(listed, Mapping):
        raise ConfigError(f"metrics.runs must be a mapping of run name to sources, got {listed!r}")
    names = [name for name in listed if runs is None or name in runs]
    return MetricsParams(
        wandb_defaults=defaults,
        runs={name: parse_run_config(raw, name, export_dir) for name in names},
    )


def _source_options(run: str, name: str, raw: Any, wandb_defaults: WandbDefaults) -> dict:
    where = f"metrics.runs.{run}.sources.{name}"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping of options (or {{}}), got {raw!r}")
    required, optional = _OPTIONS[name]
    unknown = sorted(set(raw) - set(required) - set(optional))
    if unknown:
        allowed = ", ".join([*required, *optional]) or "none"
        raise ConfigError(f"{where}: unknown option(s) {', '.join(unknown)}; allowed: {allowed}")
    options = {**optional, **dict(raw)}
    for key in required:
        if options.get(key) in (None, ""):
            needs = ", ".join(required)
            raise ConfigError(f"{where}.{key} is missing: the {name} source needs {needs}")
    if name == "wandb":
        wandb_run_ref(options, where)  # refuses an incomplete or ambiguous run reference now
    if name == "csv" and options["scale"] not in SCALES:
        raise ConfigError(
            f"{where}.scale is {options['scale']!r}: use fraction (pass@1 in [0, 1]) or "
            "percent (in [0, 100], divided by 100)"
        )
    if name in WANDB_SOURCES:
        options["metric_key"] = str(options["metric_key"] or wandb_defaults.metric_key)
        options["step_key"] = str(options["step_key"] or wandb_defaults.step_key)
    return options


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
    if isinstance(metrics_params, MetricsParams):
        return metrics_params.run(run)
    metrics_params = metrics_params or {}
    wandb_defaults = _wandb_defaults(metrics_params.get("wandb_defaults"))
    runs = metrics_params.get("runs") or {}
    if not isinstance(runs, Mapping):
        raise ConfigError(f"metrics.runs must be a mapping of run name to sources, got {runs!r}")
    cfg = runs.get(run) or {}
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"metrics.runs.{run} must be a mapping with `sources`, got {cfg!r}")
    unknown_keys = sorted(set(cfg) - {"sources", "figure_source"})
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
    specs = []
    for name, raw in raw_sources.items():
        if name not in SOURCES:
            raise ConfigError(
                f"metrics.runs.{run}.sources: unknown source {name!r}; "
                f"use one of {', '.join(SOURCES)}"
            )
        specs.append(SourceSpec(name=name, options=_source_options(run, name, raw, wandb_defaults)))
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
