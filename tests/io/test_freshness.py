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

from ..project_copy import RUN, TINY, copy_project, run_kedro, set_parameters

CSV = "data/01_raw/metrics/pass1_by_hand.csv"


@pytest.fixture(scope="module")
def reported(tmp_path_factory, smollm2_dir) -> Path:
    """A tiny step generated, aggregated, with pass@1 from a CSV, reported (ρ = 0.2)."""
    project = copy_project(tmp_path_factory.mktemp("freshness"), smollm2_dir)
    set_parameters(project, TINY)
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


@pytest.mark.slow
def test_reporting_after_a_rho_change_on_the_command_line_refuses(reported):
    message = _refusal(reported, "reporting", {"aggregation": {"top_entropy_frac": 0.1}})
    assert message.startswith("StaleInputError: ")
    assert "was 0.2 then, is 0.1 now" in message
    assert "aggregation.top_entropy_frac" in message
    # a Python session: the command carries its runtime parameters (it would run base's 0.2),
    # and recomputes everything computed from the thresholds (dynamics, analyses: tables no
    # later run reads, so none would refuse them), not only what reporting reads
    assert (
        "kedro run --params aggregation.top_entropy_frac=0.1 "
        "--pipelines aggregation,dynamics,reporting,analyses`" in message
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
    later.check(["table"], {"aggregation": {"top_entropy_frac": 0.2}}, lambda *_: "kedro run")
    with pytest.raises(StaleInputError, match=r"table is stale: .*was 0.2 then, is 0.3 now"):
        later.check(["table"], {"aggregation": {"top_entropy_frac": 0.3}}, lambda *_: "kedro run")
    assert update_command(["aggregation"]) == "kedro run --pipelines aggregation"
    assert update_command(["metrics"], ["reporting"]) == "kedro run --pipelines metrics,reporting"


def test_the_stale_shard_fix_keeps_the_study_and_its_overrides(monkeypatch):
    """The stale-shard message's command is the user's own (``--env``, ``--params`` kept):
    a bare ``kedro run --pipelines generation`` would regenerate the base demo instead. It
    drops ``--only-missing-outputs``, with which it would reuse the stale shards (refused)."""
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
            "--pipelines generation,aggregation"
        )
    monkeypatch.setattr("sys.argv", [*argv, "--only-missing-outputs"])
    with click.Context(click.Command("run")):
        assert "--only-missing-outputs" not in regenerate_command()
    assert regenerate_command() == "kedro run --pipelines generation"


def test_a_bad_value_is_refused_as_such_not_as_stale(reported):
    """A value out of range is a ConfigError before any staleness (whose fix would repeat it)."""
    message = _refusal(reported, "reporting", {"aggregation": {"top_entropy_frac": 1.5}})
    assert message.startswith("ConfigError: "), message
    assert "top_entropy_frac" in message and "stale" not in message


def test_a_moved_checkpoint_folder_is_not_a_change(reported, tmp_path):
    """``runs.<run>.checkpoint_root`` names where the checkpoints lie; their fingerprints,
    compared per shard at aggregation, say what they hold."""
    import shutil

    runs = yaml.safe_load((reported / "conf/base/parameters.yml").read_text())["runs"]
    old = Path(runs[RUN]["checkpoint_root"])
    moved = tmp_path / "moved"
    shutil.copytree(old if old.is_absolute() else reported / old, moved, symlinks=True)
    run_kedro(reported, "reporting", params={"runs": {RUN: {"checkpoint_root": str(moved)}}})


def _versioned_table(tmp_path: Path, version: str, rho: float) -> Freshness:
    fresh = Freshness(str(tmp_path))

    class _Node:
        inputs = ("params:aggregation",)
        outputs = ("table",)

    fresh.node_ran(_Node, {"aggregation": {"top_entropy_frac": rho}})
    fresh.saved("table", version)
    return fresh


def test_an_older_version_is_compared_by_its_own_record(tmp_path):
    """``--load-versions`` of an older version, or the newest deleted: that version's record
    decides; a version without one is refused (its inputs are not known)."""
    v1, v2, v0 = "2026-12-01T10.00.00.000Z", "2026-12-01T11.00.00.000Z", "2026-12-01T09.00.00.000Z"
    _versioned_table(tmp_path, v1, 0.2)
    _versioned_table(tmp_path, v2, 0.1)
    later = Freshness(str(tmp_path))
    at_01 = {"aggregation": {"top_entropy_frac": 0.1}}
    later.check(["table"], at_01, lambda *_: "kedro run", lambda _: v2)  # the newest: fresh
    later.check(["table"], at_01, lambda *_: "kedro run", lambda _: None)  # unversioned
    with pytest.raises(StaleInputError, match=r"^table is stale: .*was 0.2 then, is 0.1 now"):
        later.check(["table"], at_01, lambda *_: "kedro run", lambda _: v1)
    later.check(["table"], {"aggregation": {"top_entropy_frac": 0.2}}, lambda *_: "x", lambda _: v1)
    with pytest.raises(StaleInputError) as caught:
        later.check(["table"], at_01, lambda *_: "kedro run --pipelines aggregation", lambda _: v0)
    assert str(caught.value) == (
        f"table: the run would load version {v0}, but what it was computed from is recorded "
        f"for version {v2} only (an older version: pinned with --load-versions, or the newer "
        f"deleted); recompute it with `kedro run --pipelines aggregation`, or pin table:{v2}"
    )


def test_the_fix_recomputes_everything_downstream(reported):
    """:func:`pipelines_to_update`: the writers, generation for a sampling key, and every
    pipeline that reads what those write (not publish, not mini_rl)."""
    from hed.io.missing_inputs import pipelines_to_update, project_pipelines

    params = {"rescoring": {"in_default": False}}
    built = project_pipelines(None)

    def fix(dataset: str, key: str) -> list[str]:
        return pipelines_to_update(dataset, [key], built, params)

    assert fix("pass1_for_figures", "metrics.x") == ["metrics", "reporting", "analyses"]
    assert fix("summary_by_step", "aggregation.top_entropy_frac") == [
        "aggregation", "dynamics", "metrics", "reporting", "analyses"
    ]  # fmt: skip
    assert fix("summary_by_step", "generation.temperature")[:2] == ["generation", "aggregation"]
    with_rescoring = pipelines_to_update(
        "summary_by_step",
        ["aggregation.top_entropy_frac"],
        built,
        {"rescoring": {"in_default": True}},
    )
    assert "rescoring" in with_rescoring and "publish" not in with_rescoring


def test_a_notebooks_catalog_warns_when_it_loads_a_stale_table(reported, caplog):
    """``catalog.load`` outside a run (a notebook): the data, and the refusal a run would give
    as a warning; nothing when current."""
    import contextlib

    from kedro.framework.project import configure_project, pipelines
    from kedro.framework.session import KedroSession

    configure_project("hed")
    pipelines.configure("hed.pipeline_registry")

    def load(params: dict, dataset: str = "summary_by_step") -> list[str]:
        caplog.clear()
        with (
            contextlib.chdir(reported),
            KedroSession.create(project_path=reported, runtime_params=params) as session,
            caplog.at_level("WARNING", logger="hed.hooks"),
        ):
            table = session.load_context().catalog.load(dataset)
        assert len(table) > 0
        return [r.getMessage() for r in caplog.records]

    assert load({}) == []
    (warning,) = load({"aggregation": {"top_entropy_frac": 0.1}})
    assert warning.startswith(
        "summary_by_step is stale: it was computed before a change: "
        "aggregation.top_entropy_frac was 0.2 then, is 0.1 now; bring it up to date with "
        "`kedro run --params aggregation.top_entropy_frac=0.1 --pipelines aggregation,"
    ), warning  # the session's runtime parameters, as --params
    assert warning.endswith("(loaded all the same: this is an earlier result)")
    # the prompt set too (a run reuses it by design; a notebook is told it is the old one)
    record = json.loads((reported / "data/.hed_computed_from/prompts.json").read_text())
    made_with = record["computed_from"]["prompts.num_prompts"]
    (warning,) = load({"prompts": {"num_prompts": made_with + 1}}, "prompts")
    assert warning.startswith(
        f"prompts is stale: it was computed before a change: prompts.num_prompts was {made_with} "
        f"then, is {made_with + 1} now; bring it up to date with `kedro run --params "
        f"prompts.num_prompts={made_with + 1} --pipelines generation,"
    ), warning


def test_an_older_version_loaded_is_checked_by_its_own_record(reported):
    """End to end, last in this module (it recomputes the tables at ρ = 0.1): reporting at
    ρ = 0.1 pinned to the ρ = 0.2 tables, or after the ρ = 0.1 ones are deleted, is refused."""
    import shutil

    from kedro.framework.project import configure_project, pipelines
    from kedro.framework.session import KedroSession

    folder = reported / "data/04_feature/summary_by_step.csv"
    (old,) = sorted(p.name for p in folder.iterdir())
    at_01 = {"aggregation": {"top_entropy_frac": 0.1}}
    run_kedro(reported, "aggregation", params=at_01)
    new = max(p.name for p in folder.iterdir())
    assert new > old
    record = json.loads(
        (reported / f"data/.hed_computed_from/summary_by_step/{old}.json").read_text()
    )
    assert record["version"] == old
    assert record["computed_from"]["aggregation.top_entropy_frac"] == 0.2
    configure_project("hed")
    pipelines.configure("hed.pipeline_registry")
    import contextlib

    with (
        contextlib.chdir(reported),
        KedroSession.create(project_path=reported, runtime_params=at_01) as session,
        pytest.raises(StaleInputError, match=r"^summary_by_step is stale: .*was 0.2 then, is 0.1"),
    ):
        session.run(pipeline_names=["reporting"], load_versions={"summary_by_step": old})
    shutil.rmtree(folder / new)  # the newest deleted: Kedro would load the older one
    message = _refusal(reported, "reporting", at_01)
    assert "summary_by_step is stale" in message and "was 0.2 then, is 0.1 now" in message


def test_generation_is_added_only_when_the_shards_are_not_current(tmp_path):
    """A changed sampling key resamples only when the merged records disagree with it: an
    older table computed at temperature 1.0 after the shards were regenerated at 0.7 needs
    aggregation onward, not a new sample of every checkpoint."""
    from kedro.pipeline import Pipeline, node

    from hed.hooks.inputs import fix_pipelines

    def same(x):
        return x

    built = {
        "generation": Pipeline([node(same, "raw", "r.step_0.shard_0.token_records", name="g")]),
        "aggregation": Pipeline(
            [node(same, "r.step_0.shard_0.token_records", "r.step_0.token_records", name="a")]
        ),
        "reporting": Pipeline([node(same, "r.step_0.token_records", "figure", name="r")]),
    }

    class _Aggregate:
        inputs = ("params:generation",)
        outputs = ("r.step_0.token_records",)

    fresh = Freshness(str(tmp_path))
    now = {"generation": {"temperature": 0.7}}
    fresh.node_ran(_Aggregate, now)
    fresh.saved("r.step_0.token_records")
    key = ["generation.temperature"]
    assert fix_pipelines(fresh, "r.step_0.token_records", key, built, now) == [
        "aggregation", "reporting"
    ]  # fmt: skip
    later = {"generation": {"temperature": 0.5}}  # the merged records disagree: resample
    assert fix_pipelines(Freshness(str(tmp_path)), "r.step_0.token_records", key, built, later) == [
        "generation", "aggregation", "reporting"
    ]  # fmt: skip


def test_the_fix_command_drops_the_pins_of_what_it_recomputes(monkeypatch):
    import click

    pins = "summary_by_step:2026-12-01T10.00.00.000Z,prompts:2026-12-01T09.00.00.000Z"
    argv = ["kedro", "run", "--env", "s1", "--pipelines", "reporting", "--load-versions", pins]
    monkeypatch.setattr("sys.argv", argv)
    with click.Context(click.Command("run")):
        assert update_command(["aggregation"], ["reporting"], unpin={"summary_by_step"}) == (
            "kedro run --env s1 --load-versions prompts:2026-12-01T09.00.00.000Z "
            "--pipelines aggregation,reporting"
        )
        assert update_command(["aggregation"], [], unpin={"summary_by_step", "prompts"}) == (
            "kedro run --env s1 --pipelines aggregation,reporting"
        )


def test_putting_back_names_every_changed_parameter(tmp_path):
    fresh = Freshness(str(tmp_path))

    class _Node:
        inputs = ("params:aggregation", "params:generation")
        outputs = ("table",)

    fresh.node_ran(_Node, {"aggregation": {"top_entropy_frac": 0.2}, "generation": {"seed": 1}})
    fresh.saved("table")
    now = {"aggregation": {"top_entropy_frac": 0.1}, "generation": {"seed": 2}}
    with pytest.raises(StaleInputError) as caught:
        Freshness(str(tmp_path)).check(["table"], now, lambda *_: "kedro run")
    assert str(caught.value) == (
        "table is stale: it was computed before a change: aggregation.top_entropy_frac was 0.2 "
        "then, is 0.1 now (and 1 more difference(s)); bring it up to date with `kedro run`, or "
        "set aggregation.top_entropy_frac: 0.2, generation.seed: 1"
    )
