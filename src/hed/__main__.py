"""HED file for ensuring the package is executable as `hed` and `python -m hed`.

`python -m hed doctor [--env ENV] [--ray-address ADDR]` is the environment check
(:mod:`hed.io.doctor`, docs/install.md); `python -m hed schema` writes the parameters files'
JSON Schemas and docs/parameters.md (:mod:`hed.config.schema`); `python -m hed --help` lists
both, then the run options; anything else is Kedro's project CLI.
"""

import sys
from pathlib import Path

#: What ``python -m hed --help`` prints before the ``run`` options (Kedro's help lists only those).
COMMANDS = """\
Usage: python -m hed [doctor | schema | RUN OPTIONS]

  doctor   the environment check, one line per fact with its fix (--env ENV, --ray-address ADDR)
  schema   write the parameters files' JSON Schemas (conf/schema/) and docs/parameters.md
  (none)   kedro run, with the options below
Also as Kedro commands: kedro run, kedro hed doctor, kedro hed schema, and kedro hed
refresh-mass (the mass columns brought to a changed lexicon without re-sampling).
"""


def main(*args, **kwargs) -> None:
    if sys.argv[1:2] in (["--help"], ["-h"]) and not args and not kwargs:
        print(COMMANDS)
        sys.argv[1] = "--help"  # Kedro's run command knows only --help
    if sys.argv[1:2] == ["doctor"] and not args and not kwargs:
        from hed.io.doctor import main as doctor

        sys.exit(doctor(sys.argv[2:]))
    if sys.argv[1:2] == ["schema"] and not args and not kwargs:
        from hed.config.schema import main as schema

        sys.exit(schema(sys.argv[2:]))
    first = sys.argv[1] if len(sys.argv) > 1 and not args and not kwargs else "-"
    if not first.startswith("-"):  # Kedro's run takes options only: a misspelt command
        import difflib

        near = difflib.get_close_matches(first, ["doctor", "schema"], n=1, cutoff=0.5)
        hint = f"did you mean {near[0]}? " if near else ""
        print(f"python -m hed: no command {first!r}; {hint}commands: doctor, schema, or none "
              "(kedro run; python -m hed --help lists its options)", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    # imported here: importing kedro.framework.project configures Kedro's logging
    from kedro.framework.cli.utils import find_run_command
    from kedro.framework.project import configure_project

    package_name = Path(__file__).parent.name
    configure_project(package_name)
    run = find_run_command(package_name)
    run(*args, **kwargs)


if __name__ == "__main__":
    sys.exit(main())
