"""The ``kedro run`` command line that a message tells the user to type.

A fix in a message ("rerun generation", "bring it up to date") must keep what the user typed:
``--env``, ``--params`` and ``--runner`` of the run that failed, or the command would run
another study.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterable


def update_command(pipelines: list[str], asked: Iterable[str] = ()) -> str:
    """This ``kedro run`` command line with the producing pipelines added to ``--pipelines``.

    Under ``kedro run`` the command's own options are kept (``--env``, ``--params``,
    ``--runner``); ``--pipelines`` becomes the producers followed by the pipelines asked for.
    Outside one (a session in Python): ``kedro run --pipelines <producers>,<asked>``.
    """
    import click

    ctx = click.get_current_context(silent=True)
    argv = list(sys.argv[1:]) if ctx is not None and ctx.command.name == "run" else ["run"]
    asked = [] if argv != ["run"] else [a for a in asked if a != "__default__"]
    args: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg in ("--pipelines", "--pipeline", "-p") and i + 1 < len(argv):
            asked += argv[i + 1].split(",")
            skip = True
        elif arg.startswith(("--pipelines=", "--pipeline=")):
            asked += arg.split("=", 1)[1].split(",")
        else:
            args.append(arg)
    names = list(dict.fromkeys([*pipelines, *asked]))
    return shlex.join(["kedro", *args, *(["--pipelines", ",".join(names)] if names else [])])
