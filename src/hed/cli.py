"""HED's own ``kedro`` commands: ``kedro hed doctor``, the environment check (docs/install.md),
and Kedro's ``kedro run`` with Ctrl-C reported in one line.

Kedro adds the commands of ``cli`` to its project commands; a project's ``run`` replaces
Kedro's. ``python -m hed`` (Kedro's ``find_run_command``) takes ``run`` from this module.
"""

from __future__ import annotations

import copy
import difflib
import functools
import sys
from typing import Any

import click
from kedro.framework.cli.project import run as kedro_run

#: Exit status of a run stopped by Ctrl-C: 128 + SIGINT, as a shell reports it.
INTERRUPTED_EXIT_STATUS = 130


@click.group(name="HED")
def cli() -> None:
    """HED's project commands."""


def _interruption(exc: KeyboardInterrupt) -> BaseException:
    """The ``RunInterruptedError`` to show for ``exc``: the runner's own (``GPURunner``,
    ``RayRunner``), else one worded by ``settings.HOOKS``' ``ResumeHooks`` from the nodes that
    completed (Kedro's runners raise a plain ``KeyboardInterrupt``)."""
    from hed.hooks import ResumeHooks
    from hed.runners.executor import RunInterruptedError
    from hed.settings import HOOKS

    if isinstance(exc, RunInterruptedError):
        return exc
    hooks = [hook for hook in HOOKS if isinstance(hook, ResumeHooks)]
    return hooks[0].interruption() if hooks else exc


def _report_interruption(callback: Any) -> Any:
    """``callback`` with Ctrl-C ending in one line and exit status 130.

    Click turns a ``KeyboardInterrupt`` (``RunInterruptedError`` is one) into ``Aborted!``,
    which hides the resume command; here its ``RunInterruptedError: <message>`` line is
    printed to stderr instead.
    """

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        check_runner(kwargs.get("runner"))
        try:
            return callback(*args, **kwargs)
        except KeyboardInterrupt as exc:
            shown = _interruption(exc)
            click.echo(f"{type(shown).__name__}: {shown}", err=True)
            sys.exit(INTERRUPTED_EXIT_STATUS)

    return run


#: The runners ``--runner`` names: HED's (``hed.runners.<name>``) and Kedro's (bare names).
KEDRO_RUNNERS = ("SequentialRunner", "ParallelRunner", "ThreadRunner")


def known_runners() -> list[str]:
    """``hed.runners``' public runners, then Kedro's, as ``--runner`` takes them."""
    import hed.runners

    hed_runners = [name for name in hed.runners.__all__ if name.endswith("Runner")]
    return [*(f"hed.runners.{name}" for name in hed_runners), *KEDRO_RUNNERS]


def check_runner(runner: str | None) -> None:
    """Refuse a ``--runner`` that does not load, with the closest runner names.

    Kedro's ``load_obj(runner, "kedro.runner")`` would end a misspelt name
    (``hed.runners.GPURunnr``) in an ``AttributeError`` traceback.

    Raises:
        ConfigError: ``--runner <value>: no such runner (<reason>); did you mean <name>?
            runners: ...``.
    """
    from kedro.utils import load_obj

    from hed.errors import ConfigError, one_line

    if not runner:
        return
    try:
        load_obj(runner, "kedro.runner")
    except (AttributeError, ImportError, ValueError) as exc:
        runners = known_runners()
        near = difflib.get_close_matches(runner, runners, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(
            f"--runner {runner}: no such runner ({one_line(exc)}); {hint}runners: "
            f"{', '.join(runners)}"
        ) from None


def _split_load_versions(ctx: click.Context, param: Any, value: str) -> dict[str, str]:
    """Kedro's ``--load-versions`` parser with its error shown: Kedro raises a ``KedroCliError``
    there, which click prints as ``NoneType: None`` (the message lost)."""
    from kedro.framework.cli.utils import KedroCliError
    from kedro.framework.cli.utils import _split_load_versions as kedro_split

    try:
        return kedro_split(ctx, param, value)
    except KedroCliError as exc:
        raise click.BadParameter(str(exc)) from None


run = copy.copy(kedro_run)
run.callback = _report_interruption(kedro_run.callback)
run.params = [copy.copy(param) for param in kedro_run.params]  # Kedro's own stay as they are
for _param in run.params:
    if _param.name == "load_versions":
        _param.callback = _split_load_versions
cli.add_command(run)


@cli.group()
def hed() -> None:
    """HED's commands."""


@hed.command(context_settings={"ignore_unknown_options": True}, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def doctor(args: tuple[str, ...]) -> None:
    """The environment check: one ✓/✗ line per fact, with the fix (--help: its options)."""
    from hed.io.doctor import main

    raise SystemExit(main(args))


@hed.command()
def schema() -> None:
    """Write conf/schema/*.schema.json and docs/parameters.md from the parameter models."""
    from hed.config.schema import main

    raise SystemExit(main([]))


@hed.command(name="refresh-mass")
def refresh_mass(env: str | None, params: dict[str, Any]) -> None:
    """Bring every shard's anthropomorphic_mass / reasoning_mass to the current lexicon by
    teacher-forced re-scoring of its own responses (no re-sampling), then run aggregation and
    what reads it (docs/aggregation.md, "Changing the lexicon")."""
    from pathlib import Path

    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    from hed.errors import HEDError
    from hed.io.mass_refresh import refresh_study_mass
    from hed.io.missing_inputs import pipelines_to_update, project_pipelines

    bootstrap_project(Path.cwd())
    try:
        with KedroSession.create(env=env, runtime_params=params) as session:
            context = session.load_context()
            parameters = context.params
            refreshed = refresh_study_mass(context.catalog, parameters)
        click.echo(f"refreshed the mass columns of {len(refreshed)} shard file(s)")
        built = project_pipelines(parameters)
        merged = sorted(
            n for n in built["aggregation"].all_outputs() if n.endswith(".token_records")
        )
        if not merged:  # no step configured: nothing to aggregate
            return
        fix = pipelines_to_update(merged[0], [], built, parameters, resample=False)
        with KedroSession.create(env=env, runtime_params=params) as session:
            session.run(pipeline_names=fix)
    except HEDError as exc:
        click.echo(f"{type(exc).__name__}: {exc}", err=True)
        raise SystemExit(1) from None


for _param in kedro_run.params:
    if _param.name in ("env", "params"):
        refresh_mass.params.append(copy.copy(_param))
