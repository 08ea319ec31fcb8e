"""``hed.runners.GPURunner`` with real spawned processes, on CPU (no GPU is touched).

Node functions live in ``runner_nodes.py`` so spawned children can import them; a small Kedro
project written under ``tmp_path`` checks project hooks and the resume command through
``kedro run`` itself.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from functools import partial, update_wrapper
from pathlib import Path
from typing import Any

import pytest
from kedro.io.data_catalog import SharedMemoryDataCatalog
from kedro.pipeline import Node, Pipeline
from kedro_datasets.json import JSONDataset

from hed.errors import ConfigError
from hed.runners import executor, process, slots
from hed.runners.executor import FailedNodesError
from hed.runners.gpu import GPURunner
from hed.runners.slots import Slot, dispatch_key, resolve_slots
from tests import runner_nodes

REPO_ROOT = Path(__file__).resolve().parents[2]


def sleeping(func: Any, seconds: float) -> Any:
    """``func`` with ``seconds=seconds`` bound, still named like ``func`` (Kedro needs a name)."""
    return update_wrapper(partial(func, seconds=seconds), func)


def json_catalog(folder: Path, names: list[str]) -> SharedMemoryDataCatalog:
    """JSON datasets ``<folder>/<name>.json``; other datasets default to shared memory."""
    datasets = {name: JSONDataset(filepath=str(folder / f"{name}.json")) for name in names}
    return SharedMemoryDataCatalog(datasets=datasets)


def read(folder: Path, name: str) -> dict[str, Any]:
    return json.loads((folder / f"{name}.json").read_text())


# ------------------------------------------------------------------ slots and order


def test_resolve_slots_reads_ids_lists_counts_and_cpu(monkeypatch):
    monkeypatch.setattr(slots, "visible_gpus", lambda: ["4", "5", "6"])
    assert resolve_slots("0:1:2") == [Slot("GPU 0", "0"), Slot("GPU 1", "1"), Slot("GPU 2", "2")]
    assert resolve_slots([3]) == [Slot("GPU 3", "3")]
    assert resolve_slots(2) == [Slot("GPU 4", "4"), Slot("GPU 5", "5")]
    assert resolve_slots(None) == [Slot("GPU 4", "4"), Slot("GPU 5", "5"), Slot("GPU 6", "6")]
    assert resolve_slots("cpu", 2) == [Slot("CPU worker 0", ""), Slot("CPU worker 1", "")]
    monkeypatch.setattr(slots, "visible_gpus", lambda: [])
    assert resolve_slots(None, cpu_workers=3) == [Slot(f"CPU worker {k}", "") for k in range(3)]


@pytest.mark.parametrize(
    ("gpus", "cpu_workers"), [(0, 1), (4, 1), ("", 1), ("0::1", 1), (True, 1), ("cpu", 0)]
)
def test_resolve_slots_rejects_bad_values(monkeypatch, gpus, cpu_workers):
    monkeypatch.setattr(slots, "visible_gpus", lambda: ["0", "1"])
    with pytest.raises(ConfigError, match="GPURunner"):
        resolve_slots(gpus, cpu_workers)


def test_gpu_ids_without_cuda_are_kept_but_warned_about(monkeypatch, caplog):
    monkeypatch.setattr(slots, "visible_gpus", lambda: [])
    with caplog.at_level("WARNING", logger="hed.runners.slots"):
        assert resolve_slots("0:1") == [Slot("GPU 0", "0"), Slot("GPU 1", "1")]
    assert "gpus=0:1 names GPUs but torch sees no CUDA device" in caplog.text
    caplog.clear()
    monkeypatch.setattr(slots, "visible_gpus", lambda: ["0", "1"])
    with caplog.at_level("WARNING", logger="hed.runners.slots"):
        resolve_slots([1])
    assert "no CUDA device" not in caplog.text


def test_an_id_that_is_neither_an_index_nor_a_uuid_is_refused_where_cuda_is(monkeypatch):
    # CUDA_VISIBLE_DEVICES=abc hides every GPU: the node would run on CPU, for hours
    monkeypatch.setattr(slots, "visible_gpus", lambda: ["0", "1"])
    with pytest.raises(
        ConfigError, match=r"gpus=abc names 'abc', which is neither a GPU index nor a UUID"
    ):
        resolve_slots("abc")
    assert resolve_slots("GPU-5f1c:MIG-1a2b") == [
        Slot("GPU GPU-5f1c", "GPU-5f1c"),
        Slot("GPU MIG-1a2b", "MIG-1a2b"),
    ]


def test_without_cuda_the_default_is_one_cpu_worker():
    if slots.visible_gpus():
        pytest.skip("this machine has a CUDA device")
    assert GPURunner().slots == [Slot("CPU worker 0", "")]


def test_dispatch_key_orders_run_step_shard_naturally():
    names = [
        "b.step_1.shard_0.generate_shard",
        "a.step_10.shard_0.generate_shard",
        "a.step_2.shard_1.generate_shard",
        "a.step_2.shard_0.generate_shard",
        "aggregate",
    ]
    assert sorted(names, key=dispatch_key) == [
        "a.step_2.shard_0.generate_shard",
        "a.step_2.shard_1.generate_shard",
        "a.step_10.shard_0.generate_shard",
        "aggregate",
        "b.step_1.shard_0.generate_shard",
    ]


def test_resume_command_outside_the_cli_names_env_runner_and_gpus(monkeypatch):
    monkeypatch.setenv("KEDRO_ENV", "qae_repro")
    failed = ["run.step_10.shard_1.generate_shard", "run.step_2.shard_0.generate_shard"]
    assert GPURunner(gpus="0:1").resume_command(failed) == (
        "kedro run --env qae_repro --runner hed.runners.GPURunner --runner-params gpus=0:1 "
        "--from-nodes run.step_2.shard_0.generate_shard,run.step_10.shard_1.generate_shard"
    )


# ------------------------------------------------------------------ processes and devices


@pytest.fixture(scope="module")
def two_gpu_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """Four 0.3 s ``gpu`` nodes and one other node, run with ``gpus=0:1``."""
    folder = tmp_path_factory.mktemp("two_gpus")
    gpu_names = ["shard_a", "shard_b", "shard_c", "shard_d"]
    nodes = [
        Node(
            func=sleeping(runner_nodes.describe_process, 0.3),
            inputs=None,
            outputs=name,
            name=name,
            tags=["gpu"],
        )
        for name in gpu_names
    ]
    nodes.append(Node(func=runner_nodes.describe_process, inputs=None, outputs="here", name="here"))
    GPURunner(gpus="0:1").run(Pipeline(nodes), json_catalog(folder, [*gpu_names, "here"]))
    return folder, gpu_names


def test_each_gpu_node_runs_in_a_fresh_spawned_process(two_gpu_run):
    folder, names = two_gpu_run
    records = [read(folder, name) for name in names]
    pids = {record["pid"] for record in records}
    assert len(pids) == len(names)
    assert os.getpid() not in pids
    assert {record["start_method"] for record in records} == {"spawn"}


def test_each_gpu_node_sees_only_the_gpu_it_owns(two_gpu_run):
    folder, names = two_gpu_run
    assert {read(folder, name)["cuda_visible_devices"] for name in names} == {"0", "1"}
    # and its slot's index (a vLLM engine's VLLM_PORT offset, hed.decode.vllm.slot_port)
    records = [read(folder, name) for name in names]
    pairs = {(record["cuda_visible_devices"], record["slot_index"]) for record in records}
    assert pairs == {("0", "0"), ("1", "1")}


def test_at_most_one_node_per_gpu_at_a_time(two_gpu_run):
    folder, names = two_gpu_run
    for gpu in ("0", "1"):
        intervals = sorted(
            (record["start"], record["end"])
            for record in (read(folder, name) for name in names)
            if record["cuda_visible_devices"] == gpu
        )
        assert intervals
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(intervals))


def test_other_nodes_run_in_the_parent_process(two_gpu_run):
    folder, _ = two_gpu_run
    assert read(folder, "here")["pid"] == os.getpid()


@pytest.mark.slow
def test_gpu_nodes_are_dispatched_in_run_step_shard_order(tmp_path, monkeypatch):
    # All three become ready together, when the in-memory `prompts` is made in this process;
    # Kedro then submits them one by one, in no set order. Slow that down, so that a free GPU
    # would start whichever came first if the runner did not wait for the better ones.
    submit = executor.NodeExecutor.submit

    def slow_submit(self, fn, /, *args, **kwargs):
        future = submit(self, fn, *args, **kwargs)
        time.sleep(0.2)
        return future

    monkeypatch.setattr(executor.NodeExecutor, "submit", slow_submit)
    namespaces = ["r.step_10.shard_0", "r.step_2.shard_0", "r.step_1.shard_0"]
    nodes = [
        Node(func=runner_nodes.make_prompts, inputs=None, outputs="prompts", name="make_prompts"),
        *(
            Node(
                func=runner_nodes.describe_process_after,
                inputs="prompts",
                outputs=f"{namespace}.seen",
                name="generate_shard",
                namespace=namespace,
                tags=["gpu"],
            )
            for namespace in namespaces
        ),
    ]
    outputs = [f"{namespace}.seen" for namespace in namespaces]
    GPURunner(gpus=[0]).run(Pipeline(nodes), json_catalog(tmp_path, outputs))

    records = {namespace: read(tmp_path, f"{namespace}.seen") for namespace in namespaces}
    by_start = sorted(records, key=lambda namespace: records[namespace]["start"])
    assert by_start == ["r.step_1.shard_0", "r.step_2.shard_0", "r.step_10.shard_0"]
    assert all(record["upstream"] == runner_nodes.make_prompts() for record in records.values())


# ------------------------------------------------------------------ failures


def test_a_failed_gpu_node_stops_only_itself_and_its_dependents(tmp_path):
    nodes = [
        Node(
            func=sleeping(runner_nodes.describe_process, 1.0),
            inputs=None,
            outputs="good",
            name="good",
            tags=["gpu"],
        ),
        Node(func=runner_nodes.explode, inputs=None, outputs="bad", name="bad", tags=["gpu"]),
        Node(
            func=runner_nodes.kill_self, inputs=None, outputs="killed", name="killed", tags=["gpu"]
        ),
        Node(func=runner_nodes.explode, inputs=None, outputs="bad_here", name="bad_here"),
        Node(func=runner_nodes.pass_through, inputs="good", outputs="after_good"),
        Node(func=runner_nodes.pass_through, inputs="bad", outputs="after_bad", name="after_bad"),
    ]
    names = ["good", "bad", "killed", "bad_here", "after_good", "after_bad"]

    with pytest.raises(FailedNodesError) as raised:
        GPURunner(gpus="0:1").run(Pipeline(nodes), json_catalog(tmp_path, names))

    error = raised.value
    assert error.failures == {
        "bad": "RuntimeError: boom: shard exploded",
        "killed": "its process was killed by SIGKILL",
        "bad_here": "RuntimeError: boom: shard exploded",  # a node of this process
    }
    assert error.skipped == {"after_bad": ["bad"]}
    assert read(tmp_path, "after_good") == read(tmp_path, "good")
    assert not (tmp_path / "bad.json").exists()
    assert not (tmp_path / "after_bad.json").exists()
    message = str(error)
    assert "  - bad: RuntimeError: boom: shard exploded\n" in message
    assert "second line" not in message
    assert "after_bad" in message
    assert pickle.loads(pickle.dumps(error)).failures == error.failures
    assert message.endswith(
        "kedro run --runner hed.runners.GPURunner --runner-params gpus=0:1 "
        "--from-nodes bad,bad_here,killed"
    )


# ------------------------------------------------------------------ stopping the parent


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left unreaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _processes_running(marker: str) -> list[int]:
    """Pids of live processes whose command line contains ``marker``."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in text and _alive(int(cmdline.parent.name)):
            pids.append(int(cmdline.parent.name))
    return pids


def _wait_until(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_stopping_the_parent_stops_its_node_processes(tmp_path, sig):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    script = f"from tests import runner_nodes; runner_nodes.run_sleeper({str(tmp_path)!r})"
    command = [sys.executable, "-c", script]
    with (tmp_path / "parent.log").open("w") as log:
        parent = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        pid_file = tmp_path / "child.pid"
        assert _wait_until(lambda: pid_file.exists() and pid_file.read_text(), 60), (
            tmp_path / "parent.log"
        ).read_text()
        child = int(pid_file.read_text())
        assert child != parent.pid and _alive(child)

        parent.send_signal(sig)
        returncode = parent.wait(timeout=30)

        assert returncode == (128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGKILL)
        assert _wait_until(lambda: not _alive(child), 10)
        # Nor any other process of the run (the manager of shared datasets is a fork of it).
        assert _wait_until(lambda: not _processes_running(str(tmp_path)), 10)
    finally:
        parent.kill()
        parent.wait()


# ------------------------------------------------------------------ through `kedro run`

PROJECT_FILES = {
    "pyproject.toml": """
        [tool.kedro]
        package_name = "gpurunner_demo"
        project_name = "gpurunner demo"
        kedro_init_version = "1.7.0"
        source_dir = "src"
    """,
    ".telemetry": "consent: false\n",
    "conf/base/catalog.yml": """
        good: {type: json.JSONDataset, filepath: data/good.json}
        bad: {type: json.JSONDataset, filepath: data/bad.json}
        after_bad: {type: json.JSONDataset, filepath: data/after_bad.json}
    """,
    "conf/local/.keep": "",
    "src/gpurunner_demo/__init__.py": "",
    "src/gpurunner_demo/settings.py": """
        from gpurunner_demo.hooks import MarkerHooks

        HOOKS = (MarkerHooks(),)
    """,
    "src/gpurunner_demo/hooks.py": """
        import json
        import os
        from pathlib import Path

        from kedro.framework.hooks import hook_impl


        class MarkerHooks:
            @hook_impl
            def before_node_run(self, node):
                markers = Path("data/markers")
                markers.mkdir(parents=True, exist_ok=True)
                record = {"pid": os.getpid(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}
                (markers / f"{node.name}.{os.getpid()}.json").write_text(json.dumps(record))
    """,
    "src/gpurunner_demo/nodes.py": """
        import os
        from pathlib import Path


        def record():
            return {"pid": os.getpid()}


        def record_unless_flagged():
            if Path("data/fail").exists():
                raise RuntimeError("boom: data/fail exists")
            return record()


        def pass_through(data):
            return data
    """,
    "src/gpurunner_demo/pipeline_registry.py": """
        from kedro.pipeline import Node, Pipeline

        from gpurunner_demo.nodes import pass_through, record, record_unless_flagged


        def register_pipelines():
            return {
                "__default__": Pipeline([
                    Node(func=record, inputs=None, outputs="good", name="good", tags=["gpu"]),
                    Node(func=record_unless_flagged, inputs=None, outputs="bad", name="bad",
                         tags=["gpu"]),
                    Node(func=pass_through, inputs="bad", outputs="after_bad", name="after_bad"),
                ])
            }
    """,
}


def kedro_run(project: Path, args: list[str]) -> tuple[int, int, str]:
    """``python -m kedro <args>`` in ``project``; return (pid, return code, output)."""
    env = {k: v for k, v in os.environ.items() if k != "KEDRO_ENV"}
    env.update(DO_NOT_TRACK="1", KEDRO_DISABLE_TELEMETRY="true", COLUMNS="400")
    log_path = project / f"kedro_{time.monotonic_ns()}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "kedro", *args],
            cwd=project,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        returncode = process.wait(timeout=180)
    return process.pid, returncode, log_path.read_text()


def markers(project: Path, node: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in (project / "data/markers").glob(f"{node}.*.json")]


@pytest.fixture(scope="module")
def failed_cli_run(tmp_path_factory) -> tuple[Path, int, int, str]:
    """The demo project run once with `bad` failing: (project, kedro's pid, return code, output)."""
    project = tmp_path_factory.mktemp("gpurunner_demo")
    for relative, text in PROJECT_FILES.items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    (project / "data").mkdir()
    (project / "data/fail").touch()
    args = ["run", "--env", "local", "--runner", "hed.runners.GPURunner"]
    return project, *kedro_run(project, [*args, "--runner-params", "gpus=0:1"])


@pytest.mark.slow
def test_project_hooks_run_in_the_node_processes(failed_cli_run):
    project, kedro_pid, _, _ = failed_cli_run
    [good_marker] = markers(project, "good")
    assert good_marker["pid"] == json.loads((project / "data/good.json").read_text())["pid"]
    assert good_marker["pid"] != kedro_pid
    assert good_marker["cuda"] in {"0", "1"}
    [bad_marker] = markers(project, "bad")  # before_node_run fired for the failing node too
    assert bad_marker["pid"] not in {kedro_pid, good_marker["pid"]}


def test_node_processes_log_no_plugin_warnings(failed_cli_run):
    _, _, _, output = failed_cli_run
    assert "has no attribute 'datasets'" not in output  # kedro-viz's hook stays in the parent


def test_kedro_run_names_the_failure_and_a_resume_command_that_works(failed_cli_run):
    project, _, returncode, output = failed_cli_run
    assert returncode != 0
    assert "bad: RuntimeError: boom: data/fail exists" in output
    resume = (
        "kedro run --env local --runner hed.runners.GPURunner --runner-params gpus=0:1 "
        "--from-nodes bad"
    )
    assert resume in output
    assert not (project / "data/after_bad.json").exists()

    (project / "data/fail").unlink()
    resume_pid, returncode, output = kedro_run(project, shlex.split(resume)[1:])

    assert returncode == 0, output
    assert len(markers(project, "good")) == 1  # not run again
    assert len(markers(project, "bad")) == 2
    [after_bad] = markers(project, "after_bad")
    assert after_bad["pid"] == resume_pid  # a non-gpu node: in the kedro process itself
    assert (project / "data/after_bad.json").exists()


def test_a_misspelt_runner_param_is_refused_without_a_destructor_error(monkeypatch):
    import gc
    import sys

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(ConfigError, match="unknown --runner-params gpu;"):
        GPURunner(gpu="cpu")
    gc.collect()
    assert unraisable == []  # ParallelRunner.__del__ found no half-built manager to shut down


def test_a_node_failure_reason_is_hed_s_whole_message_without_traceback(monkeypatch):
    from kedro.io.core import DatasetError

    from hed.errors import OutputWriteError

    long_path = "/data/02_intermediate/token_records/" + "r" * 200 + "/step_0/shard_1.parquet"
    cause = OutputWriteError(f"cannot write {long_path}: it is a file; move it away")
    try:
        try:
            raise cause
        except OutputWriteError as exc:
            raise DatasetError(f"x.shard_1.token_records: {exc}") from exc
    except DatasetError as wrapped:
        assert process.failure_reason(wrapped) == f"OutputWriteError: {wrapped}"  # not cut at 300
        monkeypatch.delenv("HED_TRACEBACK", raising=False)
        assert process.traceback_to_log(wrapped) == ""
        monkeypatch.setenv("HED_TRACEBACK", "1")
        assert "Traceback" in process.traceback_to_log(wrapped)
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError as bug:
        assert process.failure_reason(bug) == "RuntimeError: boom"
        monkeypatch.delenv("HED_TRACEBACK", raising=False)
        assert "Traceback" in process.traceback_to_log(bug)  # not HED's: keep the traceback


# ------------------------------------------------------------------ GPU ids as users type them


@pytest.mark.parametrize(
    "text", ["4:5:6:7", "4-7", "[4,5,6,7]", "4,5,6,7", "[4:5:6:7]", "4-5:6-7", "'4-7'"]
)
def test_gpu_ids_from_text_reads_every_spelling(text):
    assert slots.gpu_ids_from_text(text) == ["4", "5", "6", "7"]


def test_gpu_ids_from_text_keeps_uuids_and_refuses_the_unreadable():
    assert slots.gpu_ids_from_text("GPU-5f1c:3") == ["GPU-5f1c", "3"]
    for bad in ["7-4", "4:4", "", "[]", "4::5", "-1", "4-"]:
        with pytest.raises(ConfigError) as error:
            slots.gpu_ids_from_text(bad)
        message = str(error.value)
        assert "\n" not in message
        assert f"gpus={bad!r}" in message and "gpus=4:5:6:7, gpus=4-7" in message


def test_raw_runner_param_reads_the_command_line_as_typed():
    argv = ["kedro", "run", "--runner", "hed.runners.GPURunner", "--runner-params", "gpus=4:5:6:7"]
    assert slots.raw_runner_param("gpus", argv) == "4:5:6:7"
    argv = ["kedro", "run", "--runner-params=threads=2,gpus=4:5"]
    assert slots.raw_runner_param("gpus", argv) == "4:5"
    assert slots.raw_runner_param("gpus", ["kedro", "run"]) is None
    assert slots.raw_runner_param("gpus") is None  # not under `kedro run`


def test_the_base_60_integer_of_kedro_s_parser_is_read_as_typed(monkeypatch):
    """OmegaConf's dotlist parser reads gpus=4:5:6:7 as 4·60³+5·60²+6·60+7 = 882367."""
    from omegaconf import OmegaConf

    parsed = OmegaConf.to_container(OmegaConf.from_dotlist(["gpus=4:5:6:7"]))["gpus"]
    assert parsed == 882367
    monkeypatch.setattr(slots, "visible_gpus", lambda: ["0", "1"])
    argv = ["kedro", "run", "--runner", "hed.runners.GPURunner", "--runner-params", "gpus=4:5:6:7"]
    monkeypatch.setattr(sys, "argv", argv)
    import click

    with click.Context(click.Command("run")):
        assert [s.cuda_visible_devices for s in GPURunner(gpus=parsed).slots] == list("4567")
    monkeypatch.setattr(sys, "argv", ["kedro", "run", "--runner-params", "gpus=2"])
    with click.Context(click.Command("run")):
        assert [s.cuda_visible_devices for s in GPURunner(gpus=2).slots] == ["0", "1"]
    with pytest.raises(ConfigError, match="asks for 882367 GPU"):  # outside the CLI: a count
        GPURunner(gpus=parsed)


def test_max_workers_is_kedro_s_name_for_cpu_workers():
    assert GPURunner(gpus="cpu", max_workers=3).slots == [
        Slot(f"CPU worker {k}", "") for k in range(3)
    ]
    with pytest.raises(ConfigError, match="name the same setting"):
        GPURunner(gpus="cpu", cpu_workers=2, max_workers=3)


@pytest.mark.slow
@pytest.mark.parametrize("spelling", ["4:5:6:7", "4-7", "[4,5,6,7]", "882367 from kedro run"])
def test_each_spelling_gives_the_children_gpus_4_to_7(tmp_path, monkeypatch, spelling):
    """Four ``gpu`` nodes on four slots: the children see CUDA_VISIBLE_DEVICES 4, 5, 6, 7."""
    import click

    names = [f"shard_{k}" for k in range(4)]
    nodes = [
        Node(
            func=sleeping(runner_nodes.describe_process, 0.5),
            inputs=None,
            outputs=name,
            name=name,
            tags=["gpu"],
        )
        for name in names
    ]
    gpus: Any = spelling
    if spelling.endswith("from kedro run"):
        gpus = 882367
        monkeypatch.setattr(sys, "argv", ["kedro", "run", "--runner-params", "gpus=4:5:6:7"])
    with click.Context(click.Command("run")):
        runner = GPURunner(gpus=gpus)
    runner.run(Pipeline(nodes), json_catalog(tmp_path, names))
    seen = sorted(read(tmp_path, name)["cuda_visible_devices"] for name in names)
    assert seen == ["4", "5", "6", "7"]


@pytest.mark.parametrize("typed", ["4:5", "4-5"])
def test_kedro_run_gives_the_children_the_gpus_as_typed(tmp_path, typed):
    """Through Kedro's own CLI parser, where ``4:5`` arrives as the base-60 integer 245."""
    project = tmp_path / "gpurunner_demo"
    for relative, text in PROJECT_FILES.items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    (project / "data").mkdir()
    args = ["run", "--env", "local", "--runner", "hed.runners.GPURunner"]
    _, returncode, output = kedro_run(project, [*args, "--runner-params", f"gpus={typed}"])
    assert returncode == 0, output
    seen = sorted(m["cuda"] for node in ("good", "bad") for m in markers(project, node))
    assert seen == ["4", "5"]


def test_kedro_run_refuses_an_unreadable_gpus_in_one_line(tmp_path):
    project = tmp_path / "gpurunner_demo"
    for relative, text in PROJECT_FILES.items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    (project / "data").mkdir()
    args = ["run", "--env", "local", "--runner", "hed.runners.GPURunner"]
    _, returncode, output = kedro_run(project, [*args, "--runner-params", "gpus=7-4"])
    assert returncode != 0
    assert "GPURunner: gpus='7-4' is not a list of GPU ids; write one of gpus=4:5:6:7" in output
