"""Project pipelines."""

import difflib
import os
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
        check_not_empty(pipelines, requested or ["__default__"])
        check_load_versions(chosen, _run_command_load_versions())
        check_node_filters(chosen, **filters)
    return pipelines


#: Pipelines that have nodes only in one environment: {pipeline: environment}.
ONLY_IN_ENVIRONMENT = {"mini_rl": "mini_dapo"}


def check_not_empty(pipelines: dict[str, Pipeline], requested: list[str]) -> None:
    """Refuse a ``kedro run --pipelines`` whose pipelines have no node in this environment.

    Kedro would end in ``ValueError`` (or HED's filter check in "together these select no
    node" with no option named); ``mini_rl`` has nodes only in ``--env mini_dapo``.

    Args:
        pipelines: the registered pipelines. requested: the ``--pipelines`` names.

    Raises:
        ConfigError: one line: the empty pipelines, the environment and, for ``mini_rl``,
            the command with ``--env mini_dapo``.
    """
    if any(pipelines[name].nodes for name in requested):
        return
    ctx = click.get_current_context(silent=True)
    env = (ctx.params.get("env") if ctx is not None else None) or os.environ.get("KEDRO_ENV")
    names = ",".join(requested)
    where = f"environment {env}" if env else "the default environment (base + local)"
    homes = {ONLY_IN_ENVIRONMENT[n] for n in requested if n in ONLY_IN_ENVIRONMENT}
    if len(homes) == 1:
        home = homes.pop()
        raise ConfigError(
            f"--pipelines {names}: no node in {where}; {names} runs only in --env {home}: "
            f"kedro run --env {home} --pipelines {names}"
        )
    raise ConfigError(
        f"--pipelines {names}: no node in {where}; check the pipeline's parameters in "
        f"conf/, or list its nodes with `{_list_command('node')}`"
    )


#: ``kedro run`` options that select nodes: {option: click parameter name}.
NODE_FILTERS = {
    "--nodes": "node_names",
    "--from-nodes": "from_nodes",
    "--to-nodes": "to_nodes",
    "--tags": "tags",
    "--from-inputs": "from_inputs",
    "--to-outputs": "to_outputs",
    "--namespaces": "namespaces",
}
#: What each filter names: node, tag, dataset or namespace.
_NAMES = {
    "tags": "tag",
    "from_inputs": "dataset",
    "to_outputs": "dataset",
    "namespaces": "namespace",
}


def _run_command_filters() -> dict[str, list[str]]:
    """The node-selecting options of the ``kedro run`` command being run (click's parsed
    options), ``{}`` outside a ``kedro run`` command line (a test, a runner's subprocess)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.info_name != "run":
        return {}
    return {key: list(ctx.params.get(key) or []) for key in NODE_FILTERS.values()}


def _run_command_load_versions() -> dict[str, str]:
    """``--load-versions`` of the ``kedro run`` being run, ``{dataset: version}``."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.params.get("load_versions") or {}) if ctx is not None else {}


def check_load_versions(pipeline: Pipeline, load_versions: dict[str, str]) -> None:
    """Refuse a ``--load-versions`` dataset the pipeline does not use (Kedro ends in a
    ``DatasetNotFoundError`` traceback), with up to 3 close names (difflib).

    Raises:
        ConfigError: one line: the pin, the close names, and where the datasets are listed.
    """
    valid = _valid_names(pipeline)["dataset"]
    for name, version in load_versions.items():
        if name in valid:
            continue
        near = [n for n in valid if n.endswith(f".{name}")][:3]
        near = near or difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise ConfigError(
            f"--load-versions {name}:{version}: the pipeline has no such dataset; {hint}"
            + _listing("dataset", valid)
        )


def _valid_names(pipeline: Pipeline) -> dict[str, list[str]]:
    """The names each kind of filter may take in ``pipeline``, sorted."""
    namespaces = {
        ".".join(parts[:i])
        for node in pipeline.nodes
        if node.namespace
        for parts in [node.namespace.split(".")]
        for i in range(1, len(parts) + 1)
    }
    return {
        "node": sorted(node.name for node in pipeline.nodes),
        "tag": sorted({tag for node in pipeline.nodes for tag in node.tags}),
        # a transcoded dataset (``name@format``) may be named without its format, as in Kedro
        "dataset": sorted(pipeline.datasets() | {n.split("@")[0] for n in pipeline.datasets()}),
        "namespace": sorted(namespaces),
    }


def _listing(what: str, names: list[str]) -> str:
    """Where the valid ``names`` of a filter kind are listed: inline when few, else the
    command that lists them (:func:`_list_command`)."""
    if len(names) <= 12:
        return f"the pipeline's {what}s: {', '.join(names) or '(none)'}"
    return f"list them with `{_list_command(what)}` ({len(names)} {what}s)"


def _list_command(what: str) -> str:
    """The command that lists the run's datasets (``what == "dataset"``) or nodes, for the
    pipeline and environment of the ``kedro run`` being run: ``kedro catalog
    describe-datasets -p <pipeline> [--env <env>]`` or ``[KEDRO_ENV=<env> ]kedro registry
    describe [<pipeline>]`` (that command has no ``--env`` option; it reads ``KEDRO_ENV``).
    ``<pipeline>`` stays a placeholder when the run combines several."""
    ctx = click.get_current_context(silent=True)
    params = ctx.params if ctx is not None else {}
    env = params.get("env") or os.environ.get("KEDRO_ENV")
    env = env if env not in (None, "", "base", "local") else None
    asked = list(params.get("pipelines") or [])
    if what == "dataset":
        pipeline = asked[0] if len(asked) == 1 else "<pipeline>" if asked else "__default__"
        return f"kedro catalog describe-datasets -p {pipeline}" + (f" --env {env}" if env else "")
    pipeline = asked[0] if len(asked) == 1 else "<pipeline>" if asked else ""
    return f"{f'KEDRO_ENV={env} ' if env else ''}kedro registry describe {pipeline}".strip()


def check_node_filters(pipeline: Pipeline, **filters: list[str] | None) -> None:
    """Refuse ``kedro run`` filters that name what the pipeline does not have, or that
    together select no node — Kedro ends either in a ``ValueError`` traceback.

    Args:
        pipeline: the pipelines the run combines (``--pipelines``, default ``__default__``).
        **filters: the click parameter names of :data:`NODE_FILTERS` (``node_names``,
            ``from_nodes``, ``to_nodes``, ``tags``, ``from_inputs``, ``to_outputs``,
            ``namespaces``), each a list of names as given. Node names are matched exactly,
            as Kedro does (a name without its ``<run>.step_<step>.`` namespace is answered
            with the namespaced names it ends); a tag no node carries would select nothing.

    Raises:
        ConfigError: one line: the option, the unknown name and up to 3 close matches
            (difflib); or the options that together leave no node to run.
    """
    valid = _valid_names(pipeline)
    for option, key in NODE_FILTERS.items():
        what = _NAMES.get(key, "node")
        for name in filters.get(key) or []:
            if name in valid[what]:
                continue
            near = [n for n in valid[what] if n.endswith(f".{name}")][:3]
            near = near or difflib.get_close_matches(name, valid[what], n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            raise ConfigError(
                f"{option} {name}: the pipeline has no such {what}; {hint}"
                + _listing(what, valid[what])
            )
    given = {key: names for key, names in filters.items() if names}
    chosen = {"node_namespaces" if k == "namespaces" else k: v for k, v in given.items()}
    try:
        pipeline.filter(**chosen)
    except ValueError:
        options = " ".join(
            f"{option} {','.join(given[key])}"
            for option, key in NODE_FILTERS.items()
            if key in given
        )
        raise ConfigError(
            f"{options}: together these select no node of the pipeline (each is an "
            f"intersection); drop one, or check the order with `{_list_command('node')}`"
        ) from None


def _rescoring_in_default() -> bool:
    """Whether the active environment's ``rescoring.in_default`` is true."""
    from hed.config.session import active_params

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
            f"{_as_typed(name)}: no such pipeline; {hint}HED's pipelines: "
            f"{', '.join(valid)} (none: the whole chain)"
        )


def _as_typed(name: str) -> str:
    """A requested pipeline ``name`` as the command being run took it: ``--pipelines <name>``
    under ``kedro run`` (and in Python), ``kedro registry describe <name>`` under that command
    (click's context names it), else ``<command>: pipeline <name>``."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.info_name == "run":
        return f"--pipelines {name}"
    path = []
    while ctx is not None and ctx.parent is not None:  # up to, not including, `kedro` itself
        path.insert(0, ctx.info_name)
        ctx = ctx.parent
    command = " ".join(["kedro", *path])
    return f"{command} {name}" if path[-1:] == ["describe"] else f"{command}: pipeline {name}"
