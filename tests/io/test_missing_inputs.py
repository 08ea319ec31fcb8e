"""A run whose inputs were never written is refused before its first node, in one line that
names the datasets, their files and the command that writes them (:mod:`hed.io.missing_inputs`).

The fast tests build a small chain of real Kedro pipelines over versioned CSV datasets; the
end-to-end ones run ``kedro run --pipelines reporting`` / ``dynamics`` on a fresh project copy.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import pandas as pd
import pytest
from kedro.io import DataCatalog, MemoryDataset
from kedro.io.core import Version
from kedro.pipeline import Pipeline, node
from kedro_datasets.pandas import CSVDataset

from hed.core.command_line import update_command
from hed.io.missing_inputs import MissingInputError, check_inputs_exist, is_missing, producers_of


def _identity(*frames):
    return frames[0]


def _chain() -> dict[str, Pipeline]:
    """generation: raw → prompts; aggregation: prompts → table; reporting: table, extra → fig."""
    return {
        "generation": Pipeline([node(_identity, "raw", "prompts", name="gen")]),
        "aggregation": Pipeline([node(_identity, "prompts", "table", name="agg")]),
        "metrics": Pipeline([node(_identity, "raw", "extra", name="met")]),
        "reporting": Pipeline(
            [node(_identity, ["table", "extra", "params:reporting", "mem"], "fig", name="rep")]
        ),
    }


def _catalog(tmp_path: Path) -> DataCatalog:
    def csv(name: str, versioned: bool = True) -> CSVDataset:
        version = Version(None, None) if versioned else None
        return CSVDataset(filepath=str(tmp_path / f"{name}.csv"), version=version)

    return DataCatalog(
        datasets={
            "raw": csv("raw", versioned=False),
            **{name: csv(name) for name in ("prompts", "table", "extra", "fig")},
            "mem": MemoryDataset(),
        }
    )


def _refusal(pipeline: Pipeline, catalog: DataCatalog, asked: list[str]) -> str:
    with pytest.raises(MissingInputError) as caught:
        check_inputs_exist(pipeline, catalog, {"pipeline_names": asked}, _chain)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_reporting_without_its_tables_names_them_and_the_whole_chain(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    catalog = _catalog(tmp_path)
    pd.DataFrame({"a": [1]}).to_csv(tmp_path / "raw.csv", index=False)
    assert _refusal(_chain()["reporting"], catalog, ["reporting"]) == (
        "2 input(s) of this run were never written: extra (extra.csv), table (table.csv); "
        "write them first with "
        "`kedro run --pipelines generation,aggregation,metrics,reporting`"
    )
    assert not (tmp_path / "fig.csv").exists()


def test_only_the_missing_producers_are_named_and_existing_versions_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    catalog = _catalog(tmp_path)
    pd.DataFrame({"a": [1]}).to_csv(tmp_path / "raw.csv", index=False)
    catalog.save("prompts", pd.DataFrame({"a": [1]}))  # a version of prompts exists
    catalog.save("extra", pd.DataFrame({"a": [1]}))
    assert _refusal(_chain()["reporting"], catalog, ["reporting"]) == (
        "1 input(s) of this run were never written: table (table.csv); write them first with "
        "`kedro run --pipelines aggregation,reporting`"
    )
    catalog.save("table", pd.DataFrame({"a": [1]}))
    check_inputs_exist(_chain()["reporting"], catalog, {"pipeline_names": ["reporting"]}, _chain)


def test_a_pin_to_a_version_never_written_names_the_versions_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pd.DataFrame({"a": [1]}).to_csv(tmp_path / "raw.csv", index=False)
    saved = []
    for version in ("2026-12-01T10.00.00.000Z", "2026-12-01T11.00.00.000Z"):
        table = CSVDataset(filepath=str(tmp_path / "table.csv"), version=Version(None, version))
        table.save(pd.DataFrame({"a": [1]}))
        saved.append(version)
    catalog = _catalog(tmp_path)
    catalog.save("extra", pd.DataFrame({"a": [1]}))
    pin = "2026-12-01T09.00.00.000Z"
    catalog["table"] = CSVDataset(filepath=str(tmp_path / "table.csv"), version=Version(pin, None))
    assert _refusal(_chain()["reporting"], catalog, ["reporting"]) == (
        f"--load-versions table:{pin}: table has no such version (table.csv); its versions, "
        f"newest first: {saved[1]}, {saved[0]}; pin one of them, or drop the pin to load the "
        "newest"
    )
    catalog["table"] = CSVDataset(
        filepath=str(tmp_path / "table.csv"), version=Version(saved[0], None)
    )
    check_inputs_exist(_chain()["reporting"], catalog, {"pipeline_names": ["reporting"]}, _chain)


def test_many_missing_inputs_show_three_and_a_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = [f"t{i}" for i in range(5)]
    catalog = DataCatalog(
        datasets={n: CSVDataset(filepath=str(tmp_path / f"{n}.csv")) for n in names}
    )
    chain = {
        "aggregation": Pipeline([node(lambda: [1] * 5, None, names, name="agg")]),
        "reporting": Pipeline([node(_identity, names, "out", name="rep")]),
    }
    with pytest.raises(MissingInputError) as caught:
        check_inputs_exist(chain["reporting"], catalog, {}, lambda: chain)
    assert str(caught.value) == (
        "5 input(s) of this run were never written: t0 (t0.csv), t1 (t1.csv), t2 (t2.csv) "
        "and 2 more; write them first with `kedro run --pipelines aggregation,reporting`"
    )


def test_parameters_memory_and_inputs_no_pipeline_writes_are_not_refused(tmp_path):
    catalog = _catalog(tmp_path)  # raw.csv does not exist: no pipeline writes it
    assert not is_missing(catalog, "params:reporting")
    assert not is_missing(catalog, "parameters")
    assert not is_missing(catalog, "mem")
    assert not is_missing(catalog, "run_context")
    assert not is_missing(catalog, "not_in_the_catalog")
    assert is_missing(catalog, "raw")
    # generation reads only `raw`: the prompt file's own load says what is wrong
    check_inputs_exist(_chain()["generation"], catalog, {"pipeline_names": ["generation"]}, _chain)
    assert producers_of(["raw"], _chain(), catalog) == []


def test_the_command_keeps_env_and_params_and_drops_node_filters(monkeypatch):
    argv = ["kedro", "run", "--env", "mini_dapo", "--pipelines", "reporting",
            "--params", "reporting.top_n_words=5", "--from-nodes", "plan_figures",
            "--nodes=a,b", "--tags", "gpu", "--namespaces=r.step_0",
            "--only-missing-outputs"]  # fmt: skip
    monkeypatch.setattr("sys.argv", argv)
    with click.Context(click.Command("run")):
        assert update_command(["aggregation"], ["reporting"]) == (
            "kedro run --env mini_dapo --params reporting.top_n_words=5 --only-missing-outputs "
            "--pipelines aggregation,reporting"
        )


def test_the_nodes_command_keeps_the_study_and_drops_the_selection(monkeypatch):
    from hed.core.command_line import nodes_command

    argv = ["kedro", "run", "--env", "s1", "--pipelines", "generation", "--only-missing-outputs",
            "--params", "generation.temperature=0.7", "--tags", "step_20"]  # fmt: skip
    monkeypatch.setattr("sys.argv", argv)
    with click.Context(click.Command("run")):
        assert nodes_command(["resolve_checkpoints"]) == (
            "kedro run --env s1 --params generation.temperature=0.7 --nodes resolve_checkpoints"
        )


def test_a_python_sessions_command_carries_its_env_and_runtime_params():
    """Outside ``kedro run``: the session's env and runtime params, as `--params` reads them."""
    from omegaconf import OmegaConf

    params = {
        "aggregation": {"top_entropy_frac": 0.1, "chunk": 4},
        "reporting": {"figure2": {"title": "4:5"}, "enabled": True},
        "runs": {"dapo": {"run_name": "a b", "steps": [0, 20], "note": None}},
    }
    command = update_command(["aggregation"], ["reporting"], "my_study", params)
    assert command == (
        "kedro run --env my_study --params 'aggregation.top_entropy_frac=0.1,"
        "aggregation.chunk=4,reporting.figure2.title='\"'\"'4:5'\"'\"',"
        "reporting.enabled=true,runs.dapo.run_name=a b,"
        "runs.dapo.steps=<list of this session: set it in conf/<env>/>,runs.dapo.note=null' "
        "--pipelines aggregation,reporting"
    )
    # what `kedro run --params` reads back (Kedro splits on commas, then OmegaConf's dot-list)
    option = shlex.split(command)[5]
    items = [item for item in option.split(",") if "<list of" not in item]
    read = OmegaConf.to_container(OmegaConf.from_dotlist(items))
    del params["runs"]["dapo"]["steps"]
    assert read == params
    assert update_command(["generation"], [], "local", {}) == "kedro run --pipelines generation"


# ------------------------------------------------------------------ a fresh clone, end to end


def _data_files(project: Path) -> list[Path]:
    return sorted(p.relative_to(project) for p in (project / "data").rglob("*"))


def test_reporting_on_a_fresh_clone_is_refused_in_one_line_before_any_node(tmp_path, smollm2_dir):
    """``kedro run --pipelines reporting`` before any full run: one line, rc 1, no node, no
    traceback, no resume command, nothing written."""
    from ..project_copy import copy_project, run_kedro_cli

    project = copy_project(tmp_path / "fresh", smollm2_dir)
    before = _data_files(project)
    result = run_kedro_cli(project, "run", "--pipelines", "reporting", check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    lines = [line for line in output.splitlines() if "MissingInputError" in line]
    assert lines == [
        "MissingInputError: 8 input(s) of this run were never written: checkpoints "
        "(data/02_intermediate/checkpoints.json), entropy_thresholds "
        "(data/04_feature/entropy_thresholds.csv), pass1_for_figures "
        "(data/04_feature/pass1_for_figures.csv) and 5 more; write them first with "
        "`kedro run --pipelines generation,aggregation,dynamics,metrics,reporting,analyses` "
        "[HED_TRACEBACK=1 shows the traceback]"
    ], output[-3000:]
    for absent in ("Traceback", "Did not find any versions", "resume with", "Running node"):
        assert absent not in output, output[-3000:]
    assert _data_files(project) == before


@pytest.mark.parametrize(
    ("env", "pipeline", "expected"),
    [
        (
            None,
            "dynamics",
            "3 input(s) of this run were never written: smollm2_demo.step_0.entropy_thresholds "
            "(data/04_feature/steps/smollm2_demo/step_0/entropy_thresholds.csv), "
            "smollm2_demo.step_0.sequences (data/03_primary/token_records/smollm2_demo/"
            "step_0.sequences.parquet), smollm2_demo.step_0.token_records (data/03_primary/"
            "token_records/smollm2_demo/step_0.parquet); write them first with "
            "`kedro run --pipelines generation,aggregation,dynamics,metrics,reporting,analyses`",
        ),
        (
            "mini_dapo",
            "reporting",
            "`kedro run --env mini_dapo --pipelines "
            "mini_rl,generation,aggregation,dynamics,metrics,reporting,rescoring,analyses`",
        ),
    ],
)
def test_dynamics_and_a_study_s_reporting_on_a_fresh_clone_are_refused(
    tmp_path, smollm2_dir, env, pipeline, expected
):
    """In a session (a notebook's way): the same refusal before any node, nothing written."""
    from hed.errors import short_message

    from ..project_copy import copy_project, run_kedro

    project = copy_project(tmp_path / "fresh", smollm2_dir)
    before = _data_files(project)
    with pytest.raises(MissingInputError) as caught:
        run_kedro(project, pipeline, env=env)
    message = short_message(caught.value)
    assert message is not None and "\n" not in message
    assert message.endswith(expected), message
    assert _data_files(project) == before


def test_the_command_also_recomputes_what_reads_the_rewritten_datasets(tmp_path, monkeypatch):
    """A missing ``prompts``: generation writes it, aggregation (reads it) and reporting (reads
    aggregation's table) follow, not only the pipelines the run asked for; metrics, which reads
    nothing generation or aggregation writes, does not."""
    monkeypatch.chdir(tmp_path)
    catalog = _catalog(tmp_path)
    pd.DataFrame({"a": [1]}).to_csv(tmp_path / "raw.csv", index=False)
    for name in ("table", "extra"):
        catalog.save(name, pd.DataFrame({"a": [1]}))
    assert _refusal(_chain()["aggregation"], catalog, ["aggregation"]) == (
        "1 input(s) of this run were never written: prompts (prompts.csv); write them first "
        "with `kedro run --pipelines generation,aggregation,reporting`"
    )


def test_a_bad_value_is_refused_as_such_before_a_missing_input(tmp_path, smollm2_dir):
    """A bad ``--params`` value and missing inputs together: the value is refused first (the
    missing inputs' command would repeat it: following it would only fail again)."""
    from hed.errors import ConfigError

    from ..project_copy import copy_project, run_kedro

    project = copy_project(tmp_path / "fresh", smollm2_dir)
    before = _data_files(project)
    with pytest.raises(ConfigError) as caught:
        run_kedro(project, "reporting", params={"reporting": {"top_n_words": 0}})
    assert str(caught.value) == (
        "reporting.top_n_words (set in --params) must be a positive integer, got 0"
    )
    assert _data_files(project) == before
    # the same value in the environment's file: that file is named
    (project / "conf/local/parameters_reporting.yml").write_text("reporting:\n  top_n_words: 0\n")
    with pytest.raises(ConfigError) as caught:
        run_kedro(project, "reporting")
    assert str(caught.value) == (
        "reporting.top_n_words (set in conf/local/parameters_reporting.yml) must be a positive "
        "integer, got 0"
    )
    assert _data_files(project) == before
