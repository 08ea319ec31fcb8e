"""The ``kedro run`` command line that a message tells the user to type.

A fix in a message ("rerun generation", "bring it up to date") must keep what the user typed:
``--env``, ``--params`` and ``--runner`` of the run that failed, or the command would run
another study.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable


def update_command(pipelines: list[str], asked: Iterable[str] = (), env: str | None = None) -> str:
    """This ``kedro run`` command line with the producing pipelines added to ``--pipelines``.

    Under ``kedro run`` the command's own options are kept (``--env``, ``--params``,
    ``--runner``); ``--pipelines`` becomes the producers followed by the pipelines asked for.
    Node filters (``--nodes``, ``--from-nodes``, ``--to-nodes``, ``--from-inputs``,
    ``--to-outputs``, ``--tags``, ``--namespaces``) are dropped: they would keep the producers'
    nodes from running.
    Outside one (a session in Python): ``kedro run [--env <env>] --pipelines <producers>,<asked>``
    (``env``: the session's environment; none or ``local`` adds no ``--env``).
    """
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.command.name == "run":
        argv, asked = list(sys.argv[1:]), []
    else:
        argv = ["run", *(["--env", env] if env not in (None, "", "local") else [])]
        asked = [a for a in asked if a != "__default__"]
    args: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        option = arg.split("=", 1)[0]
        if option in NODE_FILTERS:
            skip = "=" not in arg
        elif arg in ("--pipelines", "--pipeline", "-p") and i + 1 < len(argv):
            asked += argv[i + 1].split(",")
            skip = True
        elif arg.startswith(("--pipelines=", "--pipeline=")):
            asked += arg.split("=", 1)[1].split(",")
        else:
            args.append(arg)
    names = list(dict.fromkeys([*pipelines, *asked]))
    return shlex.join(["kedro", *args, *(["--pipelines", ",".join(names)] if names else [])])


#: ``kedro run`` options that select nodes: a command that adds producers drops them.
NODE_FILTERS = (
    "--nodes", "-n", "--from-nodes", "--to-nodes", "--from-inputs", "--to-outputs", "--tags",
    "-t", "--namespaces", "-ns", "--namespace",
)  # fmt: skip
