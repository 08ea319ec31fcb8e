"""An emptied or cut-short input table (``summary_by_step.csv``) ends a real ``kedro run
--pipelines reporting`` in one line naming the file and the command that rewrites it (was a
90-line ``EmptyDataError`` traceback, or "no rows" and an empty Figure 2 table)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hed.io.table_files import table_problem

from ..project_copy import TINY, copy_project, latest, run_kedro, run_kedro_cli, set_parameters

SUMMARY = "data/04_feature/summary_by_step.csv"
FIGURE2 = "data/08_reporting/tables/figure2_single_run_diagnostic.csv"


@pytest.fixture(scope="module")
def reported(tmp_path_factory, smollm2_dir) -> Path:
    """The demo chain run once on a tiny configuration (in its conf files)."""
    project = copy_project(tmp_path_factory.mktemp("tables") / "project", smollm2_dir)
    set_parameters(project, TINY)
    run_kedro(project)
    return project


@pytest.fixture
def project(reported, tmp_path) -> Path:
    """A copy of :func:`reported` that a test may damage."""
    return Path(shutil.copytree(reported, tmp_path / "project", symlinks=True))


@pytest.mark.parametrize(
    ("cut", "problem"),
    [
        (lambda text: "", "it is empty (0 bytes)"),
        (lambda text: text[:7], "it ends in the middle of a line (cut short)"),  # a partial header
        (lambda text: text[:-5], "it ends in the middle of a line (cut short)"),  # a partial row
    ],
    ids=["emptied", "partial-header", "partial-row"],
)
def test_a_damaged_input_table_names_its_file_and_the_command_that_rewrites_it(
    project, cut, problem
):
    path = latest(project / SUMMARY)
    path.write_text(cut(path.read_text()))
    shown = path.relative_to(project).as_posix()
    # not strict: the run used to go on and write an empty Figure 2 table as the current one
    assert reporting_refusal(project) == (
        f"InputDataError: summary_by_step: {shown}: {problem}; rewrite it with `kedro run "
        "--params reporting.strict=false "
        "--pipelines aggregation,dynamics,metrics,reporting,analyses`"
    )


@pytest.mark.slow
def test_a_table_without_rows_is_refused_rather_than_an_empty_figure2(project):
    path = latest(project / SUMMARY)
    path.write_text(path.read_text().splitlines(keepends=True)[0])  # the header alone
    assert reporting_refusal(project) == (
        "InputDataError: summary_by_step has no row of run(s) smollm2_demo, so the Figure 2 "
        "table would be empty; write it again with the aggregation pipeline "
        "(kedro run --pipelines aggregation,reporting)"
    )


def reporting_refusal(project: Path) -> str:
    """The last line of a non-strict `kedro run --pipelines reporting` that must fail and
    write no Figure 2 table."""
    figures_before = sorted((project / FIGURE2).iterdir())
    result = run_kedro_cli(
        project,
        "run",
        "--pipelines",
        "reporting",
        "--params",
        "reporting.strict=false",
        check=False,
        env={"HED_TRACEBACK": ""},
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stdout + result.stderr
    assert sorted((project / FIGURE2).iterdir()) == figures_before
    suffix = " [HED_TRACEBACK=1 shows the traceback]"
    last = result.stderr.strip().splitlines()[-1]
    assert last.endswith(suffix), last
    return last.removesuffix(suffix)


def test_a_complete_table_passes(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("run,step\nr,0\n")
    assert table_problem(str(path)) is None
    path.write_text("run,step\nr,0")
    assert table_problem(str(path)) == "it ends in the middle of a line (cut short)"
    path.write_bytes(b"")
    assert table_problem(str(path)) == "it is empty (0 bytes)"
