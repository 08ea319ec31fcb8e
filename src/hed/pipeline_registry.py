"""Project pipelines."""

import difflib
from importlib import resources

from kedro.framework.project import find_pipelines
from kedro.framework.project import pipelines as project_pipelines
from kedro.pipeline import Pipeline

from hed.errors import ConfigError


def register_pipelines() -> dict[str, Pipeline]:
    """Register the project's pipelines.

    The generation and aggregation pipelines have one node per (run, step[, shard]) of the
    active configuration environment (see :mod:`hed.config.layout`); ``__default__`` is the whole
    chain generation → aggregation → dynamics → metrics → reporting, preceded by ``mini_rl``
    (training) in environments that have one (``conf/mini_dapo``; empty elsewhere), and
    followed by ``rescoring`` where ``rescoring.in_default`` is true (``conf/mini_dapo``), then
    ``analyses`` (pass@k, the entropy–performance fit, runs compared).

    Returns:
        A mapping from pipeline names to ``Pipeline`` objects.
    """
    check_requested_pipelines(getattr(project_pipelines, "_requested_pipelines", None))
    pipelines = find_pipelines(raise_errors=True)
    chain = ["mini_rl", "generation", "aggregation", "dynamics", "metrics", "reporting"]
    if _rescoring_in_default():
        chain.append("rescoring")
    chain.append("analyses")
    pipelines["__default__"] = sum(
        (pipelines[name] for name in chain if name in pipelines), Pipeline([])
    )
    return pipelines


def _rescoring_in_default() -> bool:
    """Whether the active environment's ``rescoring.in_default`` is true."""
    from hed.config.layout import active_params

    section = active_params().get("rescoring") or {}
    return isinstance(section, dict) and bool(section.get("in_default"))


def check_requested_pipelines(requested: list[str] | None) -> None:
    """Refuse a ``--pipelines`` name that is not one of HED's pipelines, listing the valid ones.

    Kedro would try to import ``hed.pipelines.<name>`` and end in an ``ImportError`` traceback.

    Raises:
        ConfigError: one line: the unknown name, the nearest valid one and every valid one.
    """
    valid = sorted(
        entry.name
        for entry in resources.files("hed.pipelines").iterdir()
        if entry.is_dir() and not entry.name.startswith(("_", "."))
    )
    for name in requested or []:
        if name == "__default__" or name in valid:
            continue
        near = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
        hint = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(
            f"--pipelines {name}: no such pipeline; {hint}HED's pipelines: "
            f"{', '.join(valid)} (none: the whole chain)"
        )
