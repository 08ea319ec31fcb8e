"""A YAML syntax error in a ``conf/<env>/*.yml`` file ends a real ``kedro run`` in one line
naming the file, line and column (was Kedro's 89-line traceback)."""

from __future__ import annotations

import pytest

from ..project_copy import copy_project, run_kedro_cli

FILE = "conf/base/parameters_generation.yml"


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        (  # a mis-indented key: PyYAML's ParserError
            "  answer_column: answer",
            "   answer_column: answer",
            f"ConfigError: {FILE} line 5, column 4: not valid YAML (did not find expected key); "
            "fix the YAML there",
        ),
        (  # a tab before a key: PyYAML's ScannerError
            "  answer_column: answer",
            "\tanswer_column: answer",
            f"ConfigError: {FILE} line 5, column 1: not valid YAML (found character that cannot "
            "start any token); fix the YAML there",
        ),
    ],
    ids=["ParserError", "ScannerError"],
)
def test_a_yaml_syntax_error_ends_in_one_line_naming_file_line_and_column(
    tmp_path, smollm2_dir, old, new, line
):
    project = copy_project(tmp_path / "project", smollm2_dir)
    path = project / FILE
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    result = run_kedro_cli(
        project, "run", "--pipelines", "generation", check=False, env={"HED_TRACEBACK": ""}
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"{line} [HED_TRACEBACK=1 shows the traceback]"
    )
    assert not (project / "data/02_intermediate").exists()  # refused before any node
