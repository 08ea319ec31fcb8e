"""pass@1 per training step from its four sources (docs/metrics.md), testable without Kedro.

Sources, as named in ``parameters_metrics.yml``:

* ``wandb`` — the W&B public API: ``Api().run("<entity>/<project>/<run_id>").scan_history``,
  the full history (never the sampled ``history()``); the run named by path, URL or display
  name, the key from ``WANDB_API_KEY`` or ``wandb login``'s ``~/.netrc``.
* ``wandb_offline`` — a local run folder written with ``mode="offline"``
  (``wandb/offline-run-*/run-*.wandb``), read with the wandb package's own transaction-log
  reader: ``wandb leet inspect --json`` (wandb 0.31: the Python reader classes of older
  versions, ``wandb.sdk.internal.datastore``, are gone). Nothing is uploaded, no network.
* ``csv`` — a user file with a step column and a pass@1 column (names configurable).
* ``generated`` — HED's own ``pass1_generated`` column of ``summary_by_step`` (the mean of
  ``correct`` over the step's merged sequences).

Both W&B sources apply the same rules to the history rows: only rows that carry the metric
key count (no forward fill, NaN values dropped); the step is the value of the step key in
*the same row* (default ``training/global_step``), or W&B's own ``_step`` when no metric row
has the step key (said in the log), or for a row without it when ``_step`` equals the step
key wherever both are logged (verl's step-0 validation; online, "wherever" means the rows
carrying the metric, the only ones fetched). A step logged twice (a resumed
run re-logging steps after its last checkpoint) keeps the value logged last, with a warning.

Tables:

* a *history* (what the W&B readers return and the export file holds): ``step, pass1,
  wandb_step, metric_key, step_key`` in logged order, duplicates kept;
* *pass1 rows* (:func:`to_pass1_rows`): ``run, step, pass1, source, metric_key``, one row per
  step, ascending.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import pandas as pd

from hed.errors import ConfigError, HEDError, InputDataError, one_line

logger = logging.getLogger(__name__)

SOURCES = ("wandb", "wandb_offline", "csv", "generated")
WANDB_SOURCES = ("wandb", "wandb_offline")
DEFAULT_METRIC_KEY = "val-core/aime2025/acc/mean@1"
DEFAULT_STEP_KEY = "training/global_step"
WANDB_STEP = "_step"
GENERATED_COLUMN = "pass1_generated"
GENERATED_METRIC = "mean(correct)"
EXPORT_DIR = "01_raw/metrics"


def export_dir() -> str:
    """Where ``<run>.metrics_export`` lies: ``<data_root>/01_raw/metrics`` of the active
    environment (:func:`hed.config.layout.data_root`)."""
    from hed.config.layout import data_root

    return f"{data_root()}/{EXPORT_DIR}"


HISTORY_COLUMNS = ["step", "pass1", "wandb_step", "metric_key", "step_key"]
_HISTORY_DTYPES = {"step": "int64", "pass1": "float64", "wandb_step": "Int64"}
PASS1_COLUMNS = ["run", "step", "pass1", "source", "metric_key"]
FIGURE_COLUMNS = ["run", "step", "pass1", "pass1_source", "has_checkpoint"]

_MAX_KEYS_SHOWN = 20
_MAX_STEPS_SHOWN = 20
_CREDENTIALS_HINT = (
    "put `wandb: {api_key: <your key>}` in conf/local/credentials.yml or set WANDB_API_KEY"
)

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
            "timeout": 20,
        },
    ),
    "wandb_offline": (("path",), {"metric_key": None, "step_key": None}),
    "csv": (("path",), {"step_column": "step", "pass1_column": "pass1", "scale": "fraction"}),
    "generated": ((), {}),
}


# ------------------------------------------------------------------ configuration


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


def _source_options(run: str, name: str, raw: Any, wandb_defaults: Mapping[str, Any]) -> dict:
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
        options["metric_key"] = str(
            options["metric_key"] or wandb_defaults.get("metric_key") or DEFAULT_METRIC_KEY
        )
        options["step_key"] = str(
            options["step_key"] or wandb_defaults.get("step_key") or DEFAULT_STEP_KEY
        )
    return options


def parse_run_config(metrics_params: Mapping[str, Any] | None, run: str) -> RunPass1Config:
    """Read and check the pass@1 configuration of ``run`` from ``params:metrics``.

    Args:
        metrics_params: the ``metrics`` parameters (``wandb_defaults``, ``runs``).
        run: run name.

    Returns:
        The run's sources (an empty tuple when ``metrics.runs`` does not list the run).

    Raises:
        ConfigError: an unknown source name or option, a missing required option, both W&B
            sources listed, or a ``figure_source`` the run does not list (``figure_source:
            wandb`` follows the run's one W&B source: it means ``wandb_offline`` when that is
            the one listed, and the other way round).
    """
    metrics_params = metrics_params or {}
    wandb_defaults = metrics_params.get("wandb_defaults") or {}
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
            f"(both read the same history and export to {export_dir()}/{run}.csv)"
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


# ------------------------------------------------------------------ credentials


def export_wandb_api_key(credentials: Mapping[str, Any] | None) -> bool:
    """Export ``credentials["wandb"]["api_key"]`` as ``WANDB_API_KEY`` unless that is set.

    Called by the project hook with Kedro's credentials (``conf/local/credentials.yml``). The
    key is never logged.

    Returns:
        True when the variable was set from the credentials.
    """
    entry = (credentials or {}).get("wandb")
    key = entry.get("api_key") if isinstance(entry, Mapping) else None
    if not key or os.environ.get("WANDB_API_KEY"):
        return False
    os.environ["WANDB_API_KEY"] = str(key)
    return True


def resolve_wandb_api_key(api_key: str | None = None, base_url: str | None = None) -> str:
    """The W&B API key, looked up where W&B itself looks, in its order; never logged.

    Order: ``api_key``; the ``WANDB_API_KEY`` variable (which the project hook sets from
    ``conf/local/credentials.yml`` when it is unset); the key ``wandb login`` stored in
    ``~/.netrc`` (or the file ``NETRC`` names) for ``base_url``'s host, read with wandb's own
    reader (``wandb.sdk.lib.wbauth.wbnetrc.read_netrc_auth``).

    Args:
        api_key: an explicit key, or None.
        base_url: the W&B server (default: wandb's configured default server).

    Raises:
        ConfigError: no key in any of those places (the message says where to put one).
    """
    key = api_key or os.environ.get("WANDB_API_KEY")
    if key:
        return key
    from wandb.sdk.lib.wbauth import wbnetrc

    try:
        key = wbnetrc.read_netrc_auth(host=base_url or wandb_base_url())
    except Exception as exc:  # a malformed key in .netrc: wandb raises AuthenticationError
        raise ConfigError(
            f"the W&B key in ~/.netrc is not usable: {one_line(exc, limit=None)}"
        ) from None
    if not key:
        raise ConfigError(
            f"no W&B API key for the wandb source: run `wandb login`, or {_CREDENTIALS_HINT}"
        )
    return key


def wandb_base_url() -> str:
    """The W&B server wandb uses by default (``WANDB_BASE_URL`` or wandb's own setting)."""
    from wandb import env
    from wandb.sdk import wandb_setup

    return str(env.get_base_url(wandb_setup.singleton().settings.base_url)).rstrip("/")


def check_reachable(base_url: str, timeout_s: float = 5.0) -> None:
    """Fail fast when the W&B server cannot be reached (no network, wrong host).

    wandb's own client retries for about a minute before giving up; one TCP connection with a
    short timeout tells the same in seconds. Behind a proxy (``HTTPS_PROXY`` / ``HTTP_PROXY``
    for the server's scheme, not bypassed by ``NO_PROXY``), which wandb's HTTP client uses,
    the proxy is what must answer: the server itself may not resolve from this machine.

    Raises:
        InputDataError: the host (or proxy) does not resolve or refuses/ignores the connection.
    """
    import socket
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    scheme = parts.scheme or "https"
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        default_port = 443 if proxy_parts.scheme == "https" else 80
        target = (proxy_parts.hostname or proxy, proxy_parts.port or default_port)
        what = f"the proxy {target[0]}:{target[1]} ({scheme.upper()}_PROXY) for W&B"
    else:
        target = (host, parts.port or (80 if scheme == "http" else 443))
        what = f"W&B at {target[0]}:{target[1]}"
    try:
        socket.create_connection(target, timeout=timeout_s).close()
    except OSError as exc:
        raise InputDataError(
            f"cannot reach {what} ({one_line(exc, limit=None)}): no network? "
            "use the wandb_offline or csv source (docs/metrics.md)"
        ) from None


# ------------------------------------------------------------------ W&B history rows


def _shown(items: Iterable[Any], limit: int) -> str:
    items = list(items)
    text = ", ".join(str(item) for item in items[:limit])
    return text + (f" ... ({len(items)} in all)" if len(items) > limit else "")


def _as_float(value: Any, what: str) -> float:
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)  # JSON writes NaN/inf as "NaN"/"Infinity"; float() reads both
    except (TypeError, ValueError):
        raise InputDataError(f"{what}: {value!r} is not a number") from None


def _as_step(value: Any, what: str) -> int:
    number = _as_float(value, what)
    if not math.isfinite(number) or number != int(number):
        raise InputDataError(f"{what}: step {value!r} is not an integer")
    return int(number)


def _same_number(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


def _keys_hint(keys: Iterable[str], metric_key: str) -> str:
    """Up to 20 of the run's keys, closest to ``metric_key`` first.

    Keys sharing the metric key's first path component (``val-core``) come first, then those
    sharing its first two (``val-core/<data_source>``); within each, by string similarity.
    """
    from difflib import SequenceMatcher

    public = sorted({key for key in keys if not key.startswith("_")})
    parts = metric_key.split("/")

    def rank(key: str) -> tuple[bool, bool, float]:
        other = key.split("/")
        return (
            other[:1] != parts[:1],
            other[:2] != parts[:2],
            -SequenceMatcher(None, key, metric_key).ratio(),
        )

    public.sort(key=rank)
    return _shown(public, _MAX_KEYS_SHOWN) or "none"


def history_from_rows(
    rows: Iterable[Mapping[str, Any]],
    *,
    metric_key: str,
    step_key: str,
    where: str,
    known_keys: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Turn W&B history rows into a pass@1 history (the rules of both W&B sources).

    Only rows that carry ``metric_key`` count; no value is carried to other rows. The step
    is ``row[step_key]`` of the same row; when no metric row has ``step_key``, W&B's
    ``_step`` is used instead and the log says so. A metric row without ``step_key`` while
    others have it takes its ``_step`` when, on every row of ``rows`` that carries both keys,
    ``_step`` equals ``step_key`` (verl logs ``wandb.log(..., step=global_steps)`` and its
    step-0 validation without ``training/global_step``); otherwise it is dropped with a
    warning (its step would mix two step counters).

    Args:
        rows: history rows (dicts) in logged order; keys as logged, ``/`` included.
        metric_key: the pass@1 key, e.g. ``val-core/aime2025/acc/mean@1``.
        step_key: the step key, e.g. ``training/global_step``.
        where: the run, as named in messages.
        known_keys: keys the run has, listed when ``metric_key`` is absent (default: the
            keys seen in ``rows``).

    Returns:
        ``step, pass1, wandb_step, metric_key, step_key`` in logged order (duplicates kept).

    Raises:
        InputDataError: no row carries ``metric_key`` (lists up to 20 keys the run has), or a
            value that is not a number or a step that is not an integer.
    """
    seen_keys: set[str] = set()
    metric_rows = []
    n_nan = 0
    n_both = n_agree = 0  # rows carrying both step_key and _step; those where they are equal
    for row in rows:
        if known_keys is None:
            seen_keys.update(row)
        if row.get(step_key) is not None and row.get(WANDB_STEP) is not None:
            n_both += 1
            n_agree += _same_number(row[step_key], row[WANDB_STEP])
        value = row.get(metric_key)
        if value is None:
            continue
        pass1 = _as_float(value, f"{where}: {metric_key} at _step {row.get(WANDB_STEP)}")
        if math.isnan(pass1):
            n_nan += 1
            continue
        metric_rows.append((row, pass1))
    if not metric_rows and not n_nan:
        keys = seen_keys if known_keys is None else known_keys
        raise InputDataError(
            f"{where}: metric key {metric_key!r} is not in the run's history; "
            f"the run has: {_keys_hint(keys, metric_key)}"
        )
    if n_nan:
        logger.warning("%s: %d row(s) of %s hold NaN; left out", where, n_nan, metric_key)
    if not metric_rows:
        return pd.DataFrame(columns=HISTORY_COLUMNS).astype(_HISTORY_DTYPES)
    used_step_key = step_key
    if step_key != WANDB_STEP and all(row.get(step_key) is None for row, _ in metric_rows):
        logger.warning(
            "%s: step key %r is absent from the rows carrying %s; using W&B's %s instead",
            where,
            step_key,
            metric_key,
            WANDB_STEP,
        )
        used_step_key = WANDB_STEP
    # verl logs with wandb.log(..., step=global_steps), so `_step` is the global step, and its
    # step-0 validation (val_before_train) carries no step key: take `_step` for such rows when
    # every row that has both agrees
    step_is_wandb_step = used_step_key != WANDB_STEP and n_both > 0 and n_agree == n_both
    records, dropped, recovered = [], [], []
    for row, pass1 in metric_rows:
        wandb_step = row.get(WANDB_STEP)
        key = used_step_key
        if row.get(key) is None:
            if not (step_is_wandb_step and wandb_step is not None):
                dropped.append(wandb_step)
                continue
            key = WANDB_STEP
            recovered.append(wandb_step)
        step = _as_step(row[key], f"{where}: {key} at _step {wandb_step}")
        wandb_step = None if wandb_step is None else _as_step(wandb_step, f"{where}: _step")
        records.append((step, pass1, wandb_step, metric_key, used_step_key))
    if recovered:
        logger.info(
            "%s: %d row(s) carry %s without %s (W&B _step %s, e.g. verl's step-0 validation); "
            "their step is _step, which equals %s on all %d row(s) that have both",
            where,
            len(recovered),
            metric_key,
            used_step_key,
            _shown(recovered, _MAX_STEPS_SHOWN),
            used_step_key,
            n_both,
        )
    if dropped:
        logger.warning(
            "%s: %d row(s) carry %s but not %s (W&B _step %s); left out: _step differs from "
            "%s on %d of the %d row(s) that have both, so it is not the same step counter",
            where,
            len(dropped),
            metric_key,
            used_step_key,
            _shown(dropped, _MAX_STEPS_SHOWN),
            used_step_key,
            n_both - n_agree,
            n_both,
        )
    table = pd.DataFrame.from_records(records, columns=HISTORY_COLUMNS).astype(_HISTORY_DTYPES)
    check_pass1_range(table, where=f"{where}, key {metric_key}", hint=_WANDB_RANGE_HINT)
    return table


#: pass@1 scales a CSV source accepts (``scale``): fraction in [0, 1], percent in [0, 100].
SCALES = ("fraction", "percent")
_WANDB_RANGE_HINT = "point metric_key at a pass@1 key (a fraction, e.g. val-core/<data>/acc/mean@1)"
_CSV_RANGE_HINT = "if the file holds percentages set `scale: percent` on the csv source"


def check_pass1_range(table: pd.DataFrame, *, where: str, hint: str) -> None:
    """Refuse pass@1 values outside [0, 1] (a percentage, an accuracy count, a loss).

    Args:
        table: ``step`` (int), ``pass1`` (float; NaN allowed, it is left out later).
        where: the file/run and column, as named in the message.
        hint: what to do, appended to the message.

    Raises:
        InputDataError: the first value outside [0, 1], its step and how many there are.
    """
    values = table["pass1"]
    bad = table[(values < 0) | (values > 1)]
    if bad.empty:
        return
    first = bad.iloc[0]
    raise InputDataError(
        f"{where}: pass@1 {first['pass1']:g} at step {int(first['step'])} is outside [0, 1] "
        f"({len(bad)} of {len(table)} value(s), largest {bad['pass1'].max():g}); {hint}"
    )


# ------------------------------------------------------------------ W&B online


@dataclass(frozen=True)
class WandbRunRef:
    """A W&B run as a user names it.

    Attributes:
        entity, project: the run's entity (user or team) and project.
        run_id: the run id (the last part of ``https://wandb.ai/<entity>/<project>/runs/<id>``),
            or None when the run is named by its display name.
        name: the display name (verl: ``trainer.experiment_name``), resolved through the API.
    """

    entity: str
    project: str
    run_id: str | None = None
    name: str | None = None

    @property
    def path(self) -> str:
        """``entity/project/run_id`` (``entity/project/name=<name>`` before resolution)."""
        last = self.run_id if self.run_id is not None else f"name={self.name}"
        return f"{self.entity}/{self.project}/{last}"


#: The pages of a W&B project: ``https://wandb.ai/<entity>/<project>/<page>`` names no run.
_PROJECT_PAGES = frozenset(
    {"workspace", "overview", "table", "runs", "artifacts", "sweeps", "reports", "jobs"}
    | {"automations", "groups", "launch", "settings", "panels"}
)


def parse_run_path(text: str, where: str = "wandb.run") -> WandbRunRef:
    """Read a run path ``entity/project/run_id`` or a run URL.

    Accepted: ``entity/project/run_id``, ``entity/project/runs/run_id``, and URLs such as
    ``https://wandb.ai/entity/project/runs/run_id/overview?nw=...`` (any host: self-hosted
    servers too).

    Raises:
        ConfigError: anything else (the message shows the accepted spellings), such as a
            project page's URL (``.../<project>/workspace?nw=...``), whose page name is no
            run id.
    """
    from urllib.parse import urlsplit

    raw = str(text).strip()
    path = urlsplit(raw).path if "://" in raw else raw
    parts = [part for part in path.strip("/").split("/") if part]
    if len(parts) >= 4 and parts[2] == "runs":  # .../runs/<id>, .../runs/<id>/overview
        parts = [parts[0], parts[1], parts[3]]
    elif "://" in raw and len(parts) == 3 and parts[2] in _PROJECT_PAGES:
        raise ConfigError(
            f"{where}: {raw!r} is a W&B project page, not a run; open the run and copy its URL "
            "https://wandb.ai/<entity>/<project>/runs/<run_id>, or give entity, project and "
            "`name` (the run's display name)"
        )
    if len(parts) != 3:
        raise ConfigError(
            f"{where}: {raw!r} is not a W&B run path; write entity/project/run_id or the run's "
            "URL https://wandb.ai/<entity>/<project>/runs/<run_id>"
        )
    return WandbRunRef(entity=parts[0], project=parts[1], run_id=parts[2])


def wandb_run_ref(options: Mapping[str, Any], where: str) -> WandbRunRef:
    """The run a ``wandb`` source names: ``run`` (path or URL), or entity + project + run_id/name.

    Raises:
        ConfigError: no run named, or named twice (``run`` and entity/project/run_id/name, or
            both ``run_id`` and ``name``).
    """
    given = {key for key in ("entity", "project", "run_id", "name") if options.get(key)}
    if options.get("run"):
        if given:
            raise ConfigError(f"{where}: give `run` or {', '.join(sorted(given))}, not both")
        return parse_run_path(str(options["run"]), f"{where}.run")
    if options.get("run_id") and options.get("name"):
        raise ConfigError(f"{where}: give `run_id` or `name`, not both")
    missing = [key for key in ("entity", "project") if not options.get(key)]
    if missing or not (options.get("run_id") or options.get("name")):
        raise ConfigError(
            f"{where} names no run: set `run: <entity>/<project>/<run_id>` (or the run's URL), "
            "or entity + project + run_id (or name, the run's display name)"
        )
    return WandbRunRef(
        entity=str(options["entity"]),
        project=str(options["project"]),
        run_id=str(options["run_id"]) if options.get("run_id") else None,
        name=str(options["name"]) if options.get("name") else None,
    )


def default_api_factory(*, base_url: str | None = None, timeout: int | None = None) -> Any:
    """Build ``wandb.Api`` with the key of :func:`resolve_wandb_api_key` (never prompts).

    Checks first that the server answers (:func:`check_reachable`, seconds instead of wandb's
    minute of retries).

    Raises:
        ConfigError: no API key.
        InputDataError: W&B cannot be reached or refuses the key.
    """
    server = (base_url or wandb_base_url()).rstrip("/")
    key = resolve_wandb_api_key(base_url=server)
    check_reachable(server)
    import wandb

    overrides = {"base_url": base_url} if base_url else None
    try:
        return wandb.Api(overrides=overrides, timeout=timeout, api_key=key)
    except Exception as exc:  # network/auth errors come in many types
        raise InputDataError(
            f"cannot log in to W&B: {one_line(exc, limit=None)} "
            "(no network? use the wandb_offline or csv source)"
        ) from None


def resolve_run(api: Any, ref: WandbRunRef) -> Any:
    """The run object of ``ref``: by id, or by display name within its project.

    Raises:
        InputDataError: the run does not exist, or the display name matches no run or several
            (the message lists up to 20 candidates as ``name (id)``).
    """
    if ref.run_id is not None:
        return api.run(ref.path)
    project = f"{ref.entity}/{ref.project}"
    matches = list(api.runs(project, filters={"display_name": ref.name}))
    if len(matches) == 1:
        logger.info("W&B run name %r in %s is run %s", ref.name, project, matches[0].id)
        return matches[0]
    if not matches:
        # W&B pages through a project's runs: read only the runs the message shows, plus one
        first = list(islice(api.runs(project), _MAX_KEYS_SHOWN + 1))
        shown = ", ".join(f"{run.name} ({run.id})" for run in first[:_MAX_KEYS_SHOWN])
        more = " ..." if len(first) > _MAX_KEYS_SHOWN else ""
        raise InputDataError(
            f"W&B project {project} has no run named {ref.name!r}; its runs: "
            f"{shown or 'none'}{more} (set `run_id` or `run` instead)"
        )
    ids = [f"{run.name} ({run.id})" for run in matches]
    raise InputDataError(
        f"W&B project {project} has {len(matches)} runs named {ref.name!r}: "
        f"{_shown(ids, _MAX_KEYS_SHOWN)}; set `run_id` (or `run: {project}/<run_id>`) to pick one"
    )


def _summary_keys(run: Any) -> list[str]:
    """Keys of the run's summary (nested dicts flattened with '.'), or [] when unavailable."""
    try:
        summary = dict(run.summary_metrics or {})
    except Exception:  # only used to enrich an error message
        return []
    keys: list[str] = []
    stack = [("", summary)]
    while stack:
        prefix, mapping = stack.pop()
        for key, value in mapping.items():
            name = f"{prefix}{key}"
            if isinstance(value, Mapping) and not str(key).startswith("_"):
                stack.append((f"{name}.", value))
            else:
                keys.append(name)
    return keys


def read_wandb_history(
    run: str | WandbRunRef,
    *,
    metric_key: str = DEFAULT_METRIC_KEY,
    step_key: str = DEFAULT_STEP_KEY,
    base_url: str | None = None,
    timeout: int | None = 20,
    api_factory: Callable[..., Any] | None = None,
) -> pd.DataFrame:
    """Read a metric's full history from the W&B API.

    Two ``scan_history`` calls, never ``history()`` (which samples): ``keys=[metric, _step]``
    gives every row carrying the metric (W&B returns only rows holding all requested keys),
    ``keys=[metric, step_key, _step]`` the step key of those rows that have it; they are
    joined on ``_step`` and go through :func:`history_from_rows` (which also recovers verl's
    step-0 validation row, logged without the step key).

    Args:
        run: ``entity/project/run_id``, a run URL, or a :class:`WandbRunRef` (which may name
            the run by its display name).
        metric_key: pass@1 key. step_key: step key (``_step`` for W&B's own counter).
        base_url: a self-hosted W&B server (default: wandb's own default).
        timeout: HTTP timeout in seconds.
        api_factory: ``factory(base_url=, timeout=)`` returning an object with the public
            ``wandb.Api`` interface (tests pass a fake); default :func:`default_api_factory`.

    Returns:
        The history (``step, pass1, wandb_step, metric_key, step_key``).

    Raises:
        ConfigError: no API key, or a run path that is not one. InputDataError: run not found,
            ambiguous or unreachable; metric absent (lists the run's keys, ``val-core/*``
            first for verl's keys).
    """
    ref = run if isinstance(run, WandbRunRef) else parse_run_path(run)
    where = f"W&B run {ref.path}"
    api = (api_factory or default_api_factory)(base_url=base_url, timeout=timeout)
    try:
        found = resolve_run(api, ref)
        metric_rows = list(found.scan_history(keys=[metric_key, WANDB_STEP]))
        step_of: dict[Any, Any] = {}
        if step_key != WANDB_STEP and metric_rows:
            for row in found.scan_history(keys=[metric_key, step_key, WANDB_STEP]):
                step_of[row.get(WANDB_STEP)] = row.get(step_key)
    except HEDError:
        raise
    except Exception as exc:  # wandb raises CommError, ValueError, HTTP errors
        raise InputDataError(
            f"{where}: {one_line(exc, limit=None)} (check the run in parameters_metrics.yml)"
        ) from None
    rows = [
        {**row, step_key: step_of[row.get(WANDB_STEP)]} if row.get(WANDB_STEP) in step_of else row
        for row in metric_rows
    ]
    known = _summary_keys(found) if not metric_rows else None
    return history_from_rows(
        rows, metric_key=metric_key, step_key=step_key, where=where, known_keys=known
    )


# ------------------------------------------------------------------ W&B offline


def find_offline_run_file(path: str | os.PathLike) -> Path:
    """Locate the transaction log of an offline run.

    Args:
        path: a ``run-<id>.wandb`` file, a run folder (``wandb/offline-run-<time>-<id>``)
            holding one, or a ``wandb`` folder holding exactly one run folder.

    Raises:
        InputDataError: the path does not exist, or holds no or several ``.wandb`` logs.
    """
    path = Path(path)
    if not path.exists():
        raise InputDataError(
            f"W&B offline run folder {path} does not exist: set `path` of the wandb_offline source "
            "to a wandb/offline-run-* folder"
        )
    if path.is_file():
        if path.suffix != ".wandb":
            raise InputDataError(f"{path} is not a W&B transaction log (run-<id>.wandb)")
        return path
    found = sorted(path.glob("run-*.wandb")) or sorted(path.glob("*run-*/run-*.wandb"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputDataError(
            f"{path} holds no run-*.wandb file: point `path` at a wandb/offline-run-* folder"
        )
    folders = _shown([p.parent.name for p in found], 5)
    raise InputDataError(f"{path} holds several W&B runs ({folders}): point `path` at one of them")


def iter_offline_history_rows(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Yield the history rows of an offline run, in logged order.

    Runs ``python -m wandb leet inspect --json <run-*.wandb>`` (the wandb package's reader,
    in wandb 0.31 backed by its bundled ``wandb-core`` binary) with ``WANDB_MODE=offline`` so
    nothing is uploaded and no telemetry is sent, and keeps the ``history`` records.

    Raises:
        InputDataError: the folder is missing, the reader fails (its first error line), the
            log ends in an incomplete record (a file truncated by a copy, a full disk, or a run
            killed or still running: its rows would be a shorter history), or it holds no
            history row at all (empty or not a W&B log).
    """
    wandb_file = find_offline_run_file(path)
    n_rows = 0
    command = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(wandb_file)]
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
    }
    with tempfile.TemporaryFile(mode="w+") as stderr:
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if '"history"' not in line:
                    continue
                record = json.loads(line)
                if record.get("type") != "history":
                    continue
                history = record.get("history") or {}
                row = dict(history.get("item") or {})
                if WANDB_STEP not in row and "num" in (history.get("step") or {}):
                    row[WANDB_STEP] = history["step"]["num"]
                n_rows += 1
                yield row
        stderr.seek(0)
        lines = (
            line.strip().removeprefix("wandb leet inspect: ") for line in stderr if line.strip()
        )
        if proc.returncode != 0:
            message = next(lines, f"exit status {proc.returncode}")
            raise InputDataError(
                f"cannot read W&B offline run file {wandb_file} (not a readable W&B "
                f"transaction log: {message}); point `path` at a wandb/offline-run-* folder"
            )
        first = next(lines, None)
        if first is not None and "incomplete" in first:
            raise InputDataError(
                f"W&B offline run file {wandb_file} is truncated or incomplete ({n_rows} "
                f"history row(s) readable; wandb leet inspect: {first}): copy the whole run "
                "folder again, or wait until the run has finished"
            )
        if n_rows == 0:
            message = first or "the log is empty"
            raise InputDataError(
                f"W&B offline run {wandb_file} holds no history rows ({message}); point `path` "
                "at a run folder that logged its metrics (wandb/offline-run-*)"
            )


def read_wandb_offline_history(
    path: str | os.PathLike,
    *,
    metric_key: str = DEFAULT_METRIC_KEY,
    step_key: str = DEFAULT_STEP_KEY,
) -> pd.DataFrame:
    """Read a metric's history from a local offline run folder (no upload, no network).

    Returns:
        The history (``step, pass1, wandb_step, metric_key, step_key``).

    Raises:
        InputDataError: folder missing, unreadable log, metric key absent (lists the keys the
            run has), or non-numeric values.
    """
    # closing(): an error half-way stops the reader process at once
    with closing(iter_offline_history_rows(path)) as rows:
        return history_from_rows(
            rows, metric_key=metric_key, step_key=step_key, where=f"W&B offline run {path}"
        )


# ------------------------------------------------------------------ CSV and generated


def read_pass1_csv(
    path: str | os.PathLike,
    *,
    step_column: str = "step",
    pass1_column: str = "pass1",
    scale: str = "fraction",
) -> pd.DataFrame:
    """Read ``step, pass1`` from a user CSV (rows with an empty pass@1 are left out).

    Args:
        scale: ``fraction`` (values in [0, 1], as they are) or ``percent`` (values in
            [0, 100], divided by 100).

    Returns:
        ``step`` (int64), ``pass1`` (float64, a fraction in [0, 1]) in file order.

    Raises:
        InputDataError: the file is missing or unreadable, a column is missing (the message
            lists those it has), a value is not a number / a step not an integer, or a
            pass@1 (after scaling) is outside [0, 1] (:func:`check_pass1_range`).
    """
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"pass@1 CSV {path} does not exist: fix `path` of the csv source")
    try:
        frame = pd.read_csv(path)
    except Exception as exc:  # pandas raises many types
        raise InputDataError(
            f"pass@1 CSV {path} cannot be read: {one_line(exc, limit=None)}"
        ) from None
    for role, column in (("step_column", step_column), ("pass1_column", pass1_column)):
        if column not in frame.columns:
            raise InputDataError(
                f"pass@1 CSV {path} has no column {column!r} (set `{role}`); "
                f"its columns: {_shown(frame.columns, _MAX_KEYS_SHOWN)}"
            )
    frame = frame[frame[pass1_column].notna()]
    where = f"pass@1 CSV {path}, column"
    steps = [_as_step(value, f"{where} {step_column}") for value in frame[step_column]]
    values = [_as_float(value, f"{where} {pass1_column}") for value in frame[pass1_column]]
    divisor = 100.0 if scale == "percent" else 1.0
    table = pd.DataFrame(
        {
            "step": pd.Series(steps, dtype="int64"),
            "pass1": pd.Series(values, dtype="float64") / divisor,
        }
    )
    shown = f"{where} {pass1_column}" + (" (scale: percent, divided by 100)" if divisor > 1 else "")
    check_pass1_range(table, where=shown, hint=_CSV_RANGE_HINT)
    return table


def pass1_from_summary(summary_by_step: pd.DataFrame, run: str) -> pd.DataFrame:
    """The ``generated`` source: ``pass1_generated`` of ``summary_by_step`` for ``run``.

    ``pass1_generated`` is the mean of ``correct`` over the step's merged sequences (null
    where no response could be graded); null rows are left out.

    Returns:
        ``step`` (int64), ``pass1`` (float64).

    Raises:
        InputDataError: ``summary_by_step`` lacks run, step or pass1_generated.
    """
    missing = [c for c in ("run", "step", GENERATED_COLUMN) if c not in summary_by_step.columns]
    if missing:
        raise InputDataError(
            f"summary_by_step has no column(s) {', '.join(missing)}: rerun the aggregation pipeline"
        )
    rows = summary_by_step.loc[
        (summary_by_step["run"] == run) & summary_by_step[GENERATED_COLUMN].notna(),
        ["step", GENERATED_COLUMN],
    ]
    return pd.DataFrame(
        {
            "step": rows["step"].astype("int64").to_numpy(),
            "pass1": rows[GENERATED_COLUMN].astype("float64").to_numpy(),
        }
    )


# ------------------------------------------------------------------ pass1 rows


def to_pass1_rows(table: pd.DataFrame, *, run: str, source: str, metric_key: str) -> pd.DataFrame:
    """One row per step of a source: ``run, step, pass1, source, metric_key``, ascending step.

    A step present more than once keeps its last value (a resumed W&B run re-logs the steps
    after its last checkpoint) and the repeated steps are logged.

    Args:
        table: ``step, pass1`` in logged/file order (extra columns ignored).
        run, source, metric_key: written into every row.
    """
    repeated = sorted(table.loc[table["step"].duplicated(), "step"].unique().tolist())
    if repeated:
        logger.warning(
            "run %s, source %s: step(s) %s appear more than once; the value logged last is kept",
            run,
            source,
            _shown(repeated, _MAX_STEPS_SHOWN),
        )
    rows = table.drop_duplicates("step", keep="last").sort_values("step", kind="stable")
    return pd.DataFrame(
        {
            "run": run,
            "step": rows["step"].astype("int64").to_numpy(),
            "pass1": rows["pass1"].astype("float64").to_numpy(),
            "source": source,
            "metric_key": metric_key,
        },
        columns=PASS1_COLUMNS,
    )


def missing_steps(pass1_rows: pd.DataFrame, checkpoint_steps: Iterable[int]) -> list[int]:
    """Checkpoint steps without a pass@1 value in ``pass1_rows`` (steps match exactly)."""
    have = set(pass1_rows["step"].astype("int64").tolist())
    return sorted(step for step in checkpoint_steps if step not in have)


def warn_missing_steps(
    pass1_rows: pd.DataFrame, *, run: str, source: str, checkpoint_steps: Iterable[int]
) -> list[int]:
    """Log a warning listing the checkpoint steps ``source`` has no pass@1 for; return them."""
    missing = missing_steps(pass1_rows, checkpoint_steps)
    if missing:
        logger.warning(
            "run %s: no pass@1 from source %s at checkpoint step(s) %s",
            run,
            source,
            _shown(missing, _MAX_STEPS_SHOWN),
        )
    return missing


def select_pass1(
    pass1: pd.DataFrame,
    metrics_params: Mapping[str, Any] | None,
    checkpoint_steps: Mapping[str, Iterable[int]] | None = None,
) -> pd.DataFrame:
    """One pass@1 value per (run, step) for the figures: the run's ``figure_source``.

    Args:
        pass1: the ``pass1`` table (``run, step, pass1, source, ...``).
        metrics_params: ``params:metrics``; a run's ``figure_source`` defaults to the first
            source it lists (to the first source in ``pass1`` for runs it does not list).
        checkpoint_steps: ``{run: steps}``; checkpoint steps without a value get a row with
            an empty ``pass1``, and ``has_checkpoint`` says which steps have a checkpoint.

    Returns:
        ``run, step, pass1, pass1_source, has_checkpoint``: every step the chosen source has
        (steps without a checkpoint included) plus every checkpoint step, ascending per run.
    """
    checkpoint_steps = {run: set(steps) for run, steps in (checkpoint_steps or {}).items()}
    runs = list(dict.fromkeys([*pass1["run"].tolist(), *checkpoint_steps]))
    parts = []
    for run in runs:
        chosen = parse_run_config(metrics_params, run).figure_source
        of_run = pass1[pass1["run"] == run]
        if chosen is None and not of_run.empty:
            chosen = str(of_run["source"].iloc[0])
        rows = of_run.loc[of_run["source"] == chosen, ["step", "pass1"]]
        ckpt = checkpoint_steps.get(run, set())
        extra = sorted(ckpt - set(rows["step"].tolist()))
        frame = pd.concat(
            [rows, pd.DataFrame({"step": extra, "pass1": float("nan")})], ignore_index=True
        ).astype({"step": "int64", "pass1": "float64"})
        frame = frame.sort_values("step", kind="stable")
        parts.append(
            pd.DataFrame(
                {
                    "run": run,
                    "step": frame["step"].to_numpy(),
                    "pass1": frame["pass1"].to_numpy(),
                    "pass1_source": chosen,
                    "has_checkpoint": frame["step"].isin(ckpt).to_numpy(),
                },
                columns=FIGURE_COLUMNS,
            )
        )
    if not parts:
        return pd.DataFrame(columns=FIGURE_COLUMNS)
    return pd.concat(parts, ignore_index=True)
