"""HED's own ``kedro`` commands: ``kedro hed doctor``, the environment check (docs/install.md).

Kedro adds the commands of ``cli`` to its project commands. ``python -m hed`` (Kedro's
``find_run_command``) takes ``run`` from this module once it exists: Kedro's own.
"""

from __future__ import annotations

import click
from kedro.framework.cli.project import run  # noqa: F401 - `python -m hed` runs it


@click.group(name="HED")
def cli() -> None:
    """HED's project commands."""


@cli.group()
def hed() -> None:
    """HED's commands."""


@hed.command(context_settings={"ignore_unknown_options": True}, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def doctor(args: tuple[str, ...]) -> None:
    """The environment check: one ✓/✗ line per fact, with the fix (--help: its options)."""
    from hed.io.doctor import main

    raise SystemExit(main(args))
