"""``RayRunner`` on clusters it does not share with other tests: two nodes on this machine
(GPUs only on the second), and the local cluster a ``kedro run`` starts itself."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from kedro.pipeline import Node, Pipeline

from hed.runners.ray import RayRunner
from tests import runner_nodes
from tests.ray_cluster import two_node_cluster
from tests.runners.test_ray_runner import gpu_nodes, json_catalog, read
from tests.runners.test_runners import PROJECT_FILES, kedro_run, markers

pytestmark = pytest.mark.ray  # one Ray cluster at a time (tests/conftest.py)


@pytest.mark.slow
def test_every_gpu_node_runs_on_the_node_that_has_the_gpus(tmp_path):
    names = ["shard_a", "shard_b", "shard_c"]
    nodes = [
        *gpu_nodes(names),
        Node(func=runner_nodes.describe_process, inputs=None, outputs="here", name="here"),
    ]
    with two_node_cluster(gpus_on_second=2) as (head, second):
        runner = RayRunner()
        runner.run(Pipeline(nodes), json_catalog(tmp_path, [*names, "here"]))
    placements = runner.placements
    assert head != second
    assert {placements[n]["node_id"] for n in names} == {second}
    assert {read(tmp_path, n)["cuda_visible_devices"] for n in names} <= {"0", "1"}
    assert read(tmp_path, "here")["pid"] == os.getpid()


@pytest.mark.slow
def test_kedro_run_with_ray_runs_project_hooks_in_tasks_and_resumes(tmp_path):
    """The small project of test_runners.py through ``kedro run --runner hed.runners.RayRunner``
    (a local cluster it starts itself): hooks fire in the tasks, `bad` fails, the resume command
    is printed (test_runners.py runs the same command shape under GPURunner)."""
    project = tmp_path / "raydemo"
    for relative, text in PROJECT_FILES.items():
        path = project / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    (project / "data").mkdir()
    (project / "data/fail").touch()
    params = "num_gpus=2,num_cpus=2,object_store_memory=200000000"
    args = ["run", "--env", "local", "--runner", "hed.runners.RayRunner", "--runner-params", params]
    kedro_pid, returncode, output = kedro_run(project, args)

    assert returncode != 0
    assert "bad: RuntimeError: boom: data/fail exists" in output
    resume = f"kedro run --env local --runner hed.runners.RayRunner --runner-params {params} "
    resume += "--from-nodes bad"
    assert resume in output
    [good_marker] = markers(project, "good")  # before_node_run fired inside the Ray task
    assert good_marker["pid"] == json.loads((project / "data/good.json").read_text())["pid"]
    assert good_marker["pid"] != kedro_pid
    assert good_marker["cuda"] in {"0", "1"}
    assert not (project / "data/after_bad.json").exists()
