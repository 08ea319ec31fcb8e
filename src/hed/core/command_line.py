"""The ``kedro run`` command line that a message tells the user to type.

A fix in a message ("rerun generation", "bring it up to date") must keep what the user typed:
``--env``, ``--params`` and ``--runner`` of the run that failed, or the command would run
another study.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Collection, Iterable, Mapping
from typing import Any


def update_command(
    pipelines: list[str],
    asked: Iterable[str] = (),
    env: str | None = None,
    runtime_params: Mapping[str, Any] | None = None,
    unpin: Collection[str] = (),
) -> str:
    """This ``kedro run`` command line with the producing pipelines added to ``--pipelines``.

    Under ``kedro run`` the command's own options are kept (``--env``, ``--params``,
    ``--runner``); ``--pipelines`` becomes the producers followed by the pipelines asked for.
    Node filters (``--nodes``, ``--from-nodes``, ``--to-nodes``, ``--from-inputs``,
    ``--to-outputs``, ``--tags``, ``--namespaces``) are dropped: they would keep the producers'
    nodes from running.
    Outside one (a session in Python):
    ``kedro run [--env <env>] [--params <k>=<v>,...] --pipelines <producers>,<asked>``
    (``env``: the session's environment, none or ``local`` adds no ``--env``;
    ``runtime_params``: the session's runtime parameters, see :func:`params_option`).
    ``unpin``: datasets the command recomputes: their ``--load-versions`` pins are dropped
    (a pin would make the pipelines after them read the old version again).
    """
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.command.name == "run":
        argv, asked = list(sys.argv[1:]), []
    else:
        argv = ["run", *(["--env", env] if env not in (None, "", "local") else [])]
        argv += params_option(runtime_params)
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
        elif option in ("--load-versions", "-lv") and ("=" in arg or i + 1 < len(argv)):
            value = arg.split("=", 1)[1] if "=" in arg else argv[i + 1]
            skip = "=" not in arg
            kept = [p for p in value.split(",") if p.split(":", 1)[0].strip() not in unpin]
            args += [option, ",".join(kept)] if kept else []
        elif arg in ("--pipelines", "--pipeline", "-p") and i + 1 < len(argv):
            asked += argv[i + 1].split(",")
            skip = True
        elif arg.startswith(("--pipelines=", "--pipeline=")):
            asked += arg.split("=", 1)[1].split(",")
        else:
            args.append(arg)
    names = list(dict.fromkeys([*pipelines, *asked]))
    return shlex.join(["kedro", *args, *(["--pipelines", ",".join(names)] if names else [])])


def nodes_command(nodes: list[str]) -> str:
    """This ``kedro run`` line (its ``--env``, ``--params``, ``--runner`` kept) running only
    ``nodes``: its node filters, ``--pipelines`` and ``--only-missing-outputs`` dropped (a node
    whose output exists would be skipped)."""
    tokens = shlex.split(update_command([]))
    if "--pipelines" in tokens:
        at = tokens.index("--pipelines")
        del tokens[at : at + 2]
    tokens = [t for t in tokens if t != "--only-missing-outputs"]
    return shlex.join([*tokens, "--nodes", ",".join(nodes)])


#: ``kedro run`` options that select nodes: a command that adds producers drops them.
NODE_FILTERS = (
    "--nodes", "-n", "--from-nodes", "--to-nodes", "--from-inputs", "--to-outputs", "--tags",
    "-t", "--namespaces", "-ns", "--namespace",
)  # fmt: skip


def params_option(runtime_params: Mapping[str, Any] | None) -> list[str]:
    """``["--params", "a.b=1,c=x"]`` for a Python session's runtime parameters, or ``[]``.

    Nested keys are joined with dots and each value written as ``kedro run`` reads it back
    (OmegaConf's dot-list: ``true``, ``null``, numbers, strings). A value ``--params`` cannot
    carry (a list or a string with a comma: Kedro splits the option on commas) is written
    ``<key>=<list of this session: set it in conf/<env>/>`` (the command is visibly not
    complete).
    """
    items = [f"{key}={_dot_list_value(value)}" for key, value in _flat(runtime_params or {})]
    return ["--params", ",".join(items)] if items else []


def _flat(mapping: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        out += _flat(value, f"{name}.") if isinstance(value, Mapping) else [(name, value)]
    return out


def _dot_list_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str) and "," not in value:
        from omegaconf import OmegaConf  # how `kedro run --params` reads a value

        if OmegaConf.from_dotlist([f"v={value}"]).get("v") == value:
            return value
        return "'" + value.replace("'", "''") + "'"  # e.g. "4" or "4:5" stays a string
    return f"<{type(value).__name__} of this session: set it in conf/<env>/>"


def mass_refresh_command() -> str:
    """``kedro hed refresh-mass`` with this run's ``--env`` and ``--params``: the command that
    brings the shards' word-start mass columns to the current lexicon without re-sampling
    (:mod:`hed.io.mass_refresh`)."""
    tokens = iter(shlex.split(update_command([]))[2:])  # after "kedro run"
    kept: list[str] = []
    for token in tokens:
        if token in ("--env", "-e", "--params"):
            kept += [token, next(tokens, "")]
        elif token.startswith(("--env=", "--params=")):
            kept.append(token)
    return shlex.join(["kedro", "hed", "refresh-mass", *kept])
