"""Derived data knows what it was made from (``computed_from``, :mod:`hed.io.freshness`):
reporting refuses, in one line, to redraw from tables computed with another ρ or from a pass@1
file that has changed since; after the command the line names, it runs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from hed.core.command_line import update_command
from hed.errors import short_message
from hed.io.freshness import Freshness, StaleInputError, flatten

from ..project_copy import RUN, run_kedro, small_step_project

CSV = "data/01_raw/metrics/pass1_by_hand.csv"


@pytest.fixture(scope="module")
def reported(tmp_path_factory, smollm2_dir) -> Path:
    """A small step generated, aggregated, with pass@1 from a CSV, reported (ρ = 0.2)."""
    project = small_step_project(tmp_path_factory.mktemp("freshness"), smollm2_dir)
    (project / CSV).parent.mkdir(parents=True, exist_ok=True)
    (project / CSV).write_text("step,pass1\n0,0.25\n")
    path = project / "conf/base/parameters_metrics.yml"
    metrics = yaml.safe_load(path.read_text())
    metrics["metrics"]["runs"][RUN] = {"sources": {"csv": {"path": str(project / CSV)}}}
    path.write_text(yaml.safe_dump(metrics))
    path = project / "conf/base/parameters_reporting.yml"
    reporting = yaml.safe_load(path.read_text())
    reporting["reporting"]["token_report"]["enabled"] = False
    path.write_text(yaml.safe_dump(reporting))
    run_kedro(project)
    return project


def _refusal(project: Path, pipeline: str, params: dict | None = None) -> str:
    with pytest.raises(Exception) as caught:
        run_kedro(project, pipeline, params=params)
    message = short_message(caught.value)
    assert message is not None and "\n" not in message, caught.value
    return message


def test_reporting_after_a_rho_change_on_the_command_line_refuses(reported):
    message = _refusal(reported, "reporting", {"aggregation": {"top_entropy_frac": 0.1}})
    assert message.startswith("StaleInputError: ")
    assert "was 0.2 then, is 0.1 now" in message
    assert "aggregation.top_entropy_frac" in message
    # a Python session: the command carries its runtime parameters (it would run base's 0.2)
    assert (
        "kedro run --params aggregation.top_entropy_frac=0.1 --pipelines aggregation,reporting"
        in message
    )
    assert "or set aggregation.top_entropy_frac: 0.2" in message
    # the record of the table that was read says 0.2 (what it was computed with)
    record = json.loads((reported / "data/.hed_computed_from/entropy_thresholds.json").read_text())
    assert record["computed_from"]["aggregation.top_entropy_frac"] == 0.2


def test_a_speed_only_parameter_is_not_a_change(reported):
    run_kedro(reported, "reporting", params={"aggregation": {"chunk_records": 1000}})


def test_reporting_after_the_pass1_csv_changed_refuses_then_metrics_brings_it_up_to_date(
    reported,
):
    csv = reported / CSV
    csv.write_text("step,pass1\n0,0.5\n")
    message = _refusal(reported, "reporting")
    assert f"{csv} (metrics.runs.{RUN}.sources.csv.path) has changed since" in message
    assert "kedro run --pipelines metrics,reporting" in message
    run_kedro(reported, "metrics")
    run_kedro(reported, "reporting")
    figure2 = sorted((reported / "data/08_reporting").rglob("figure2_single_run_diagnostic.csv"))
    assert figure2, "Figure 2 table"


def test_flatten_leaves_out_speed_keys_and_hashes_pass1_files(tmp_path):
    csv = tmp_path / "p.csv"
    csv.write_text("step,pass1\n0,0.5\n")
    flat = flatten("generation", {"temperature": 1.0, "batch_size": 8, "vllm": {"x": 1}})
    assert flat == {"generation.temperature": 1.0}
    flat = flatten("metrics", {"runs": {"r": {"sources": {"csv": {"path": str(csv)}}}}})
    expected = hashlib.sha256(b"step,pass1\n0,0.5\n").hexdigest()
    assert flat["metrics.runs.r.sources.csv.path#sha256"] == expected


def test_check_compares_the_record_with_the_current_parameters(tmp_path):
    fresh = Freshness(str(tmp_path))

    class _Node:
        inputs = ("params:aggregation", "upstream")
        outputs = ("table",)

    fresh.node_ran(_Node, {"aggregation": {"top_entropy_frac": 0.2}})
    fresh.saved("table")
    later = Freshness(str(tmp_path))
    later.check(["table"], {"aggregation": {"top_entropy_frac": 0.2}}, lambda d: "kedro run")
    with pytest.raises(StaleInputError, match=r"table is stale: .*was 0.2 then, is 0.3 now"):
        later.check(["table"], {"aggregation": {"top_entropy_frac": 0.3}}, lambda d: "kedro run")
    assert update_command(["aggregation"]) == "kedro run --pipelines aggregation"
    assert update_command(["metrics"], ["reporting"]) == "kedro run --pipelines metrics,reporting"


def test_the_stale_shard_fix_keeps_the_study_and_its_overrides(monkeypatch):
    """The stale-shard message's command is the user's own (``--env``, ``--params`` kept):
    a bare ``kedro run --pipelines generation`` would regenerate the base demo instead."""
    import click

    from hed.records.shard_checks import regenerate_command

    argv = [
        "kedro",
        "run",
        "--env",
        "my_study",
        "--pipelines",
        "aggregation",
        "--params",
        "generation.temperature=0.7",
    ]
    monkeypatch.setattr("sys.argv", argv)
    with click.Context(click.Command("run")):
        assert regenerate_command() == (
            "kedro run --env my_study --params generation.temperature=0.7 "
            "--pipelines generation,aggregation --only-missing-outputs"
        )
    monkeypatch.setattr("sys.argv", [*argv, "--only-missing-outputs"])
    with click.Context(click.Command("run")):
        assert regenerate_command().count("--only-missing-outputs") == 1
    assert regenerate_command() == "kedro run --pipelines generation --only-missing-outputs"
