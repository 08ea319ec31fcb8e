"""Where a resumed run can start: the ``--from-nodes`` of every resume command HED prints.

A failed node cannot always be rerun on its own: ``kedro run --from-nodes
<run>.step_0.compute_entropy_threshold`` needs ``<run>.step_0.shard_report``, which only
lived in the memory of the failed run, and Kedro ends such a run with ``Pipeline input(s)
{...} not found in the DataCatalog``. :func:`resume_nodes` walks from the unfinished nodes
up through every input that is kept only in memory to the nearest nodes whose inputs are
all on disk (catalog entries) or parameters: ``--from-nodes`` those starts and everything
downstream of them (Kedro's ``_find_nodes_to_resume_from`` does the same for its own
warning; this one resolves dataset factory patterns instead of looking only at the datasets
the run happened to load). :func:`resume_command` is the command line to print.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import click
from kedro.io.core import DatasetError

from hed.runners.executor import RunInterruptedError
from hed.runners.slots import dispatch_key


def is_persisted(catalog: Any, name: str) -> bool:
    """True when ``name`` survives the run: a parameter, or a catalog dataset (an explicit
    entry or a factory pattern) that is not kept in memory.

    Args:
        catalog: the run's Kedro ``DataCatalog`` (or ``SharedMemoryDataCatalog``).
        name: a node input.
    """
    if name == "parameters" or name.startswith("params:"):
        return True
    try:
        dataset = catalog.get(name)
    except DatasetError:  # a pattern whose entry does not resolve: nothing on disk
        return False
    return dataset is not None and not getattr(dataset, "_EPHEMERAL", False)


def resume_nodes(pipeline: Any, unfinished: Iterable[str], catalog: Any) -> list[str]:
    """The nodes ``--from-nodes`` must name so the unfinished nodes run again.

    The nodes to run are the unfinished ones and everything downstream of them; a node to run
    whose input is produced by a node of ``pipeline`` but kept only in memory
    (:func:`is_persisted` false) needs that producer to run too (and what is downstream of
    it), until no node to run reads such an input from outside. Of the nodes to run, the
    result is the ones no other node to run feeds.

    Args:
        pipeline: the Kedro ``Pipeline`` of the run.
        unfinished: names of the failed (or not yet run) nodes.
        catalog: the run's catalog.

    Returns:
        Node names in natural order (``step_2`` before ``step_10``); empty when
        ``unfinished`` is.
    """
    by_name = {node.name: node for node in pipeline.nodes}
    producers = {out: node for node in pipeline.nodes for out in node.outputs}
    to_run: set[Any] = set()
    queue = [by_name[name] for name in unfinished if name in by_name]
    while queue:  # until every node to run finds its in-memory inputs made in this run
        to_run = set(pipeline.from_nodes(*{node.name for node in [*to_run, *queue]}).nodes)
        queue = [
            producer
            for node in to_run
            for name in node.inputs
            if (producer := producers.get(name)) is not None
            and producer not in to_run
            and not is_persisted(catalog, name)
        ]
    if not to_run:
        return []
    dependencies = pipeline.node_dependencies
    starts = [node.name for node in to_run if not dependencies.get(node, set()) & to_run]
    return sorted(starts, key=dispatch_key)


def resume_command(start_nodes: Sequence[str], fallback: Sequence[str] = ("run",)) -> str:
    """The ``kedro run`` command that resumes at ``start_nodes``.

    Under ``kedro run`` it is that very command line with ``--from-nodes <start_nodes>``
    (an earlier ``--from-nodes``, ``--nodes`` and ``--only-missing-outputs`` are dropped: the
    resume must run the start nodes and everything downstream of them, and with versioned
    datasets an earlier run's outputs exist); otherwise ``kedro <fallback> --from-nodes ...``.

    Args:
        start_nodes: from :func:`resume_nodes`.
        fallback: the arguments after ``kedro`` outside a ``kedro run`` (a runner in Python).
    """
    from_nodes = ["--from-nodes", ",".join(start_nodes)]
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.command.name != "run":
        return shlex.join(["kedro", *fallback, *from_nodes])
    args: list[str] = []
    skip_value = False
    for arg in sys.argv[1:]:
        option = arg.split("=", 1)[0]
        if skip_value:
            skip_value = False
        elif option in _DROPPED_WITH_VALUE:
            skip_value = "=" not in arg
        elif arg != "--only-missing-outputs":
            args.append(arg)
    return shlex.join(["kedro", *args, *from_nodes])


def interrupted_error(pipeline: Any, catalog: Any, completed: set[str]) -> RunInterruptedError:
    """The ``RunInterruptedError`` for a Ctrl-C under a runner that does not word one (Kedro's
    ``SequentialRunner``, ``ThreadRunner``: a plain ``KeyboardInterrupt``).

    Args:
        pipeline: the run's pipeline, or None when the Ctrl-C came before it started.
        catalog: the run's catalog (None with ``pipeline``).
        completed: names of the nodes that ran to the end.

    Returns:
        ``interrupted (Ctrl-C): <k> of <n> node(s) completed and kept their outputs; resume
        with: <command>`` (:func:`resume_command` at :func:`resume_nodes` of the unfinished
        nodes), or ``interrupted (Ctrl-C) before any node ran; rerun the command``.
    """
    if pipeline is None:
        return RunInterruptedError("interrupted (Ctrl-C) before any node ran; rerun the command")
    unfinished = [node.name for node in pipeline.nodes if node.name not in completed]
    starts = resume_nodes(pipeline, unfinished, catalog)
    return RunInterruptedError(
        f"interrupted (Ctrl-C): {len(pipeline.nodes) - len(unfinished)} of "
        f"{len(pipeline.nodes)} node(s) completed and kept their outputs; resume with: "
        f"{resume_command(starts)}"
    )


#: Options of a ``kedro run`` that a resume command must not repeat (they select other nodes).
_DROPPED_WITH_VALUE = ("--from-nodes", "--nodes", "-n")
