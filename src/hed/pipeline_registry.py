"""Project pipelines."""

import difflib
from importlib import resources

import click
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
    requested = getattr(project_pipelines, "_requested_pipelines", None)
    check_requested_pipelines(requested)
    pipelines = find_pipelines(raise_errors=True)
    chain = ["mini_rl", "generation", "aggregation", "dynamics", "metrics", "reporting"]
    if _rescoring_in_default():
        chain.append("rescoring")
    chain.append("analyses")
    pipelines["__default__"] = sum(
        (pipelines[name] for name in chain if name in pipelines), Pipeline([])
    )
    filters = _run_command_filters()
    if filters:
        chosen = sum((pipelines[n] for n in requested or ["__default__"]), Pipeline([]))
        check_node_filters(chosen, **filters)
    return pipelines


#: ``kedro run`` options that name nodes or tags: {option: click parameter name}.
NODE_FILTERS = {
    "--nodes": "node_names",
    "--from-nodes": "from_nodes",
    "--to-nodes": "to_nodes",
    "--tags": "tags",
}


def _run_command_filters() -> dict[str, list[str]]:
    """The node and tag filters of the ``kedro run`` command being run (click's parsed
    options), ``{}`` outside a ``kedro run`` command line (a test, a runner's subprocess)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.info_name != "run":
        return {}
    return {key: list(ctx.params.get(key) or []) for key in NODE_FILTERS.values()}


def check_node_filters(
    pipeline: Pipeline,
    *,
    node_names: list[str] | None = None,
    from_nodes: list[str] | None = None,
    to_nodes: list[str] | None = None,
    tags: list[str] | None = None,
) -> None:
    """Refuse a ``--nodes``, ``--from-nodes``, ``--to-nodes`` or ``--tags`` name the pipeline
    does not have, listing the closest names (difflib) — Kedro ends in a traceback.

    Args:
        pipeline: the pipelines the run combines (``--pipelines``, default ``__default__``).
        node_names, from_nodes, to_nodes: node names as given (Kedro matches them exactly;
            a name without its ``<run>.step_<step>.`` namespace is answered with the
            namespaced names it ends).
        tags: tag names; one that no node carries would silently select nothing.

    Raises:
        ConfigError: one line: the option, the unknown name and up to 3 close matches.
    """
    names = sorted(node.name for node in pipeline.nodes)
    all_tags = sorted({tag for node in pipeline.nodes for tag in node.tags})
    given = {"node_names": node_names, "from_nodes": from_nodes, "to_nodes": to_nodes}
    for option, key in NODE_FILTERS.items():
        valid = all_tags if key == "tags" else names
        for name in (tags if key == "tags" else given[key]) or []:
            if name in valid:
                continue
            near = [n for n in valid if n.endswith(f".{name}")][:3]
            near = near or difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            what = "tag" if key == "tags" else "node"
            raise ConfigError(
                f"{option} {name}: the pipeline has no such {what}; {hint}"
                f"list them with `kedro registry describe <pipeline>` ({len(valid)} {what}s)"
            )


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
