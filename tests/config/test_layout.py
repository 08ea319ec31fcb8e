"""hed.config.layout: the runs × steps × shards the pipelines are built for, from the parameters."""

from __future__ import annotations

import pytest

from hed.config.layout import layout_from_params
from hed.config.session import training_inputs
from hed.errors import ConfigError


def test_layout_sorts_steps_and_keeps_run_order(tmp_path):
    for step in (200, 20, 80):
        (tmp_path / f"global_step_{step}").mkdir()
    layout = layout_from_params(
        {
            "runs": {
                "without": {"role": "without_clip", "checkpoint_root": "/c/w", "steps": [80, 20]},
                "with": {"role": "with_clip", "checkpoint_root": str(tmp_path), "steps": "all"},
            },
            "generation": {"num_shards": 4},
        }
    )
    assert layout.num_shards == 4
    assert [(run.name, step) for run, step in layout.run_steps()] == [
        ("without", 20),
        ("without", 80),
        ("with", 20),
        ("with", 80),
        ("with", 200),
    ]
    assert layout.run("with").role == "with_clip"
    with pytest.raises(ConfigError, match="unknown run 'other': known runs are without, with"):
        layout.run("other")


def test_embedded_run_without_checkpoints_yet_is_step_0():
    layout = layout_from_params(
        {"runs": {"demo": {"checkpoint_root": "/nowhere", "steps": "all", "embedded": True}}}
    )
    assert layout.runs[0].steps == (0,) and layout.num_shards == 1  # default: one shard


@pytest.mark.parametrize(
    ("runs", "generation", "message"),
    [
        ({}, {}, "parameter `runs` is missing or empty"),
        ({"a b": {"checkpoint_root": "/c", "steps": [0]}}, {}, "run name 'a b'"),
        ({"r": {"checkpoint_root": "/c", "steps": [0], "role": "clip"}}, {}, "runs.r.role"),
        ({"r": {"checkpoint_root": "/c", "steps": [1, 1]}}, {}, "lists a step twice: [1, 1]"),
        ({"r": {"checkpoint_root": "/c", "steps": [True]}}, {}, "True is not a non-negative"),
        ({"r": {"checkpoint_root": "/c", "steps": [0]}}, {"num_shards": 0}, "num_shards must"),
    ],
)
def test_bad_layouts_are_one_line_config_errors(runs, generation, message):
    with pytest.raises(ConfigError) as exc:
        layout_from_params({"runs": runs, "generation": generation})
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_training_inputs_only_with_a_mini_rl_section():
    assert training_inputs({"mini_rl": {"runs": {}}}) == {"training_manifest": "mini_rl_manifest"}
    assert training_inputs({"runs": {}}) == {}


# ------------------------------------------------------------------ the session's hand-off


def _shard_nodes() -> list[str]:
    from kedro.framework.project import pipelines

    return [n.name for n in pipelines["generation"].nodes if n.name.endswith(".generate_shard")]


def test_each_session_in_one_process_builds_its_own_nodes(tmp_path, smollm2_dir):
    """A notebook re-run with other --params: Kedro caches its pipelines process-wide, the
    hook has them rebuilt from the new session (the second session once ran the first's 2
    shards); the run's end forgets the session (conf/ is read again)."""
    import contextlib

    from kedro.framework.project import configure_project, pipelines, settings
    from kedro.framework.session import KedroSession

    from hed.config import session as hed_session
    from tests.project_copy import RUN, copy_project

    project = copy_project(tmp_path / "project", smollm2_dir)
    configure_project("hed")
    seen = []
    with contextlib.chdir(project):
        for shards in (2, 3, 1):
            params = {"generation": {"num_shards": shards}}
            with KedroSession.create(project_path=project, runtime_params=params) as kedro_session:
                pipelines.set_requested(["generation"])  # what session.run does first
                kedro_session.load_context()
                seen.append(_shard_nodes())
                assert hed_session.active_params()["generation"]["num_shards"] == shards
                assert hed_session.data_root() == str(project / "data")
                hooks = [h for h in settings.HOOKS if type(h).__name__ == "LayoutHooks"]
                hooks[0].before_pipeline_run()  # the run starts: its pipeline is built
                assert hed_session.active_session() is None
    assert seen == [
        [f"{RUN}.step_0.shard_{shard}.generate_shard" for shard in range(shards)]
        for shards in (2, 3, 1)
    ]
    # a run refused before its first node leaves nothing behind either
    bad = {"generation": {"num_shards": 5}, "prompts": {"seed": "abc"}}
    with (
        contextlib.chdir(project),
        KedroSession.create(project_path=project, runtime_params=bad) as kedro_session,
        pytest.raises(ConfigError, match=r"prompts\.seed"),
    ):
        kedro_session.run(pipeline_names=["generation"])
    assert hed_session.active_session() is None
    assert hed_session.active_layout().num_shards == 2  # conf/'s again


def test_session_config_builds_pipelines_from_given_params_and_restores():
    from hed.config import session
    from hed.pipelines.generation.pipeline import create_pipeline

    params = dict(session.active_params())
    params["generation"] = {**params["generation"], "num_shards": 4}
    before = session.active_session()
    with session.session_config(params, "/elsewhere"):
        assert session.data_root() == "/elsewhere"
        names = [n.name for n in create_pipeline().nodes if n.name.endswith("generate_shard")]
    assert len(names) == 4
    assert session.active_session() is before


def test_params_runs_is_parsed_once_and_handed_to_the_nodes_as_the_layout(tmp_path):
    from kedro.io import DataCatalog, MemoryDataset
    from kedro.pipeline import Node, Pipeline

    from hed.config.layout import RUN_DEFAULTS, RunParams, StudyLayout, configured_steps, run_roles
    from hed.hooks.parameters import hand_to_nodes, parsed_sections

    (tmp_path / "global_step_5" / "actor_hf").mkdir(parents=True)
    (tmp_path / "global_step_5" / "actor_hf" / "config.json").write_text("{}")
    raw = {
        "a": {"role": "with_clip", "checkpoint_root": "/ck/a", "steps": [20, 0]},
        "b": {"checkpoint_root": str(tmp_path)},  # role single, steps all (found on disk)
    }
    pipeline = Pipeline([Node(lambda r: 1, "params:runs", "out", name="reads_runs")])
    catalog = DataCatalog(
        {"params:runs": MemoryDataset(raw), "params:generation": MemoryDataset({"num_shards": 2})}
    )
    assert hand_to_nodes(catalog, parsed_sections(pipeline, catalog)) == ["params:runs"]
    handed = catalog.load("params:runs")
    assert isinstance(handed, StudyLayout) and StudyLayout.of(handed) is handed
    assert handed == StudyLayout.of(raw, {"num_shards": 2}) and handed.num_shards == 2
    assert handed.run("b").steps == (5,) and handed.run("b").steps_found is True
    # the node helpers read the same from the parsed layout and the raw dict
    assert run_roles(handed) == run_roles(raw) == {"a": "with_clip", "b": "single"}
    for run in ("a", "b", "nope"):
        assert configured_steps(handed, run) == configured_steps(raw, run)
    assert configured_steps(handed, "a") == (0, 20) and configured_steps(handed, "b") == ()
    # the defaults of a run's keys: declared once, in the model the unknown-key check reads
    assert RUN_DEFAULTS == {"role": "single", "steps": "all", "embedded": False}
    defaults = RunParams().model_dump(exclude={"responses"})
    assert defaults == {"checkpoint_root": None, **RUN_DEFAULTS}


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        (
            {"a": {"checkpoint_root": "x", "role": "clip"}},
            "runs.a.role must be one of with_clip, without_clip, single, got 'clip'",
        ),
        (
            {"a": {"checkpoint_root": "x", "steps": [1, 1]}},
            "runs.a.steps lists a step twice: [1, 1]; list each step once",
        ),
        ({"a": {"steps": [1]}}, "runs.a.checkpoint_root is missing"),
        (  # --params runs.run_c.steps=[0] with a misspelt run name makes a new run
            {"run_a": {"checkpoint_root": "x", "steps": [0]}, "run_c": {"steps": [0]}},
            "runs.run_c.checkpoint_root is missing; a new run needs one (did you mean run run_a?)",
        ),
    ],
)
def test_a_bad_run_is_refused_in_one_line(runs, message):
    from hed.config.layout import StudyLayout

    with pytest.raises(ConfigError) as caught:
        StudyLayout.of(runs)
    assert str(caught.value) == message


def test_panel_order_is_by_role_then_configuration_order_parsed_or_raw():
    from hed.config.layout import PANEL_ORDER, StudyLayout, panel_runs

    raw = {
        "s": {"checkpoint_root": "x", "steps": [0]},
        "w2": {"checkpoint_root": "x", "steps": [0], "role": "with_clip"},
        "wo": {"checkpoint_root": "x", "steps": [0], "role": "without_clip"},
        "w1": {"checkpoint_root": "x", "steps": [0], "role": "with_clip"},
    }
    expected = [("wo", "without_clip"), ("w2", "with_clip"), ("w1", "with_clip"), ("s", "single")]
    assert panel_runs(raw) == panel_runs(StudyLayout.of(raw)) == expected
    assert PANEL_ORDER == ("without_clip", "with_clip", "single")


def test_a_missing_folder_of_another_environment_names_the_run_that_writes_it(
    tmp_path, monkeypatch
):
    """conf/mini_rollouts reads what --env mini_dapo's training writes: before that run the
    refusal says to run it, not to fix runs.<run>.responses.path."""
    from hed.config import session

    for env, root in (("base", "data"), ("trainer", "data/trainer"), ("reader", "data/reader")):
        (tmp_path / "conf" / env).mkdir(parents=True)
        (tmp_path / "conf" / env / "globals.yml").write_text(f"data_root: {root}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KEDRO_ENV", "reader")
    monkeypatch.setattr(session, "_session", None)
    assert session.env_writing("data/trainer/01_raw/checkpoints/run/rollouts") == (
        "kedro run --env trainer"
    )
    assert session.env_writing("data/reader/01_raw/x") is None  # the active data root
    assert session.env_writing("/elsewhere/rollouts") is None
    dump = {"source": "verl_dump", "path": "data/trainer/ck/rollouts", "max_response_length": 8}
    runs = {"r": {"checkpoint_root": "data/trainer/ck", "steps": "all", "responses": dump}}
    with pytest.raises(ConfigError) as caught:
        layout_from_params({"runs": runs}, session.env_writing)
    assert str(caught.value) == (
        "runs.r.steps is 'all' but data/trainer/ck/rollouts does not exist yet: it lies in "
        "another environment's data root; run `kedro run --env trainer` first (it writes it)"
    )
    (tmp_path / "conf/trainer/parameters_mini_rl.yml").write_text("mini_rl: {}\n")  # it trains
    assert session.env_writing("data/trainer/ck") == "kedro run --env trainer --pipelines mini_rl"
    with pytest.raises(ConfigError, match="verl dump folder data/trainer/ck/rollouts does not"):
        layout_from_params({"runs": runs})  # no environment to name: the dump's own advice
