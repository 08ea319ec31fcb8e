"""HED file for ensuring the package is executable as `hed` and `python -m hed`.

`python -m hed doctor [--env ENV] [--ray-address ADDR]` is the environment check
(:mod:`hed.io.doctor`, docs/install.md); `python -m hed schema` writes the parameters files'
JSON Schemas and docs/parameters.md (:mod:`hed.config.schema`); anything else is Kedro's
project CLI.
"""

import sys
from pathlib import Path


def main(*args, **kwargs) -> None:
    if sys.argv[1:2] == ["doctor"] and not args and not kwargs:
        from hed.io.doctor import main as doctor

        sys.exit(doctor(sys.argv[2:]))
    if sys.argv[1:2] == ["schema"] and not args and not kwargs:
        from hed.config.schema import main as schema

        sys.exit(schema(sys.argv[2:]))
    # imported here: importing kedro.framework.project configures Kedro's logging
    from kedro.framework.cli.utils import find_run_command
    from kedro.framework.project import configure_project

    package_name = Path(__file__).parent.name
    configure_project(package_name)
    run = find_run_command(package_name)
    run(*args, **kwargs)


if __name__ == "__main__":
    sys.exit(main())
