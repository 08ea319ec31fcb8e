"""The ``wandb`` source: a run's full history from the W&B public API.

``Api().run("<entity>/<project>/<run_id>").scan_history`` (never the sampled ``history()``);
the run named by path, URL or display name (:func:`wandb_run_ref`), the key from
:mod:`hed.pass1.credentials`. The rows go through :func:`hed.pass1.history.history_from_rows`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

import pandas as pd

from hed.errors import ConfigError, HEDError, InputDataError, one_line
from hed.pass1.credentials import check_reachable, resolve_wandb_api_key, wandb_base_url
from hed.pass1.history import (
    DEFAULT_METRIC_KEY,
    DEFAULT_STEP_KEY,
    MAX_KEYS_SHOWN,
    WANDB_STEP,
    history_from_rows,
    keep_last_logged,
    shown_items,
)

logger = logging.getLogger(__name__)

#: Seconds of W&B's HTTP timeout unless the source sets ``timeout``
#: (``metrics.runs.<run>.sources.wandb.timeout``).
TIMEOUT_S = 20


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
        first = list(islice(api.runs(project), MAX_KEYS_SHOWN + 1))
        shown = ", ".join(f"{run.name} ({run.id})" for run in first[:MAX_KEYS_SHOWN])
        more = " ..." if len(first) > MAX_KEYS_SHOWN else ""
        raise InputDataError(
            f"W&B project {project} has no run named {ref.name!r}; its runs: "
            f"{shown or 'none'}{more} (set `run_id` or `run` instead)"
        )
    ids = [f"{run.name} ({run.id})" for run in matches]
    raise InputDataError(
        f"W&B project {project} has {len(matches)} runs named {ref.name!r}: "
        f"{shown_items(ids, MAX_KEYS_SHOWN)}; "
        f"set `run_id` (or `run: {project}/<run_id>`) to pick one"
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
    timeout: int | None = TIMEOUT_S,
    api_factory: Callable[..., Any] | None = None,
) -> pd.DataFrame:
    """Read a metric's full history from the W&B API.

    Two ``scan_history`` calls, never ``history()`` (which samples): ``keys=[metric, _step]``
    gives every row carrying the metric (W&B returns only rows holding all requested keys),
    ``keys=[metric, step_key, _step]`` the step key of those rows that have it; they are
    joined on ``_step`` and go through :func:`history_from_rows` (which also recovers verl's
    step-0 validation row, logged without the step key). A step logged twice (a resumed run
    re-logs the steps after its checkpoint) keeps the value logged last, with one warning.

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
    history = history_from_rows(
        rows, metric_key=metric_key, step_key=step_key, where=where, known_keys=known
    )
    return keep_last_logged(history, where=where)
