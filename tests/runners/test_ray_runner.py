"""``hed.runners.RayRunner`` on real local Ray clusters (GPUs declared, none used)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kedro.framework.project import configure_project, pipelines
from kedro.framework.session import KedroSession
from kedro.io import DataCatalog
from kedro.pipeline import Node, Pipeline
from kedro_datasets.json import JSONDataset

from hed.errors import ConfigError
from hed.runners.executor import FailedNodesError
from hed.runners.ray import RayRunner
from tests import runner_nodes
from tests.project_copy import (
    MERGED_FOLDER,
    NUM_SHARDS,
    RUN,
    shard_paths,
    small_step_project,
    versions,
)
from tests.ray_cluster import local_cluster
from tests.runners.test_runners import sleeping

pytestmark = pytest.mark.ray  # one Ray cluster at a time (tests/conftest.py)


def json_catalog(folder: Path, names: list[str]) -> DataCatalog:
    return DataCatalog(
        datasets={name: JSONDataset(filepath=str(folder / f"{name}.json")) for name in names}
    )


def read(folder: Path, name: str) -> dict:
    return json.loads((folder / f"{name}.json").read_text())


def gpu_nodes(names: list[str], seconds: float = 0.0) -> list[Node]:
    func = sleeping(runner_nodes.describe_process, seconds)
    return [Node(func=func, inputs=None, outputs=n, name=n, tags=["gpu"]) for n in names]


@pytest.fixture(scope="module")
def local_ray():
    with local_cluster(num_gpus=2) as resources:
        yield resources


def test_hed_runners_exposes_ray_runner():
    from hed import runners
    from hed.runners import ray as ray_runner

    assert runners.RayRunner is ray_runner.RayRunner


def test_a_memory_dataset_of_a_gpu_node_is_refused_before_the_run(tmp_path):
    nodes = [
        Node(func=runner_nodes.make_prompts, inputs=None, outputs="prompts", name="make_prompts"),
        Node(
            func=runner_nodes.describe_process_after,
            inputs="prompts",
            outputs="seen",
            name="gpu_node",
            tags=["gpu"],
        ),
    ]
    with pytest.raises(ConfigError) as raised:
        RayRunner().run(Pipeline(nodes), json_catalog(tmp_path, ["seen"]))
    assert str(raised.value) == (
        "RayRunner: gpu node dataset(s) prompts are kept only in memory and cannot cross "
        "machines; give them a catalog entry with a filepath under the data root"
    )
    assert not (tmp_path / "seen.json").exists()  # refused before anything ran


def test_a_misspelt_runner_param_is_refused():
    with pytest.raises(ConfigError, match="RayRunner: unknown --runner-params gpus"):
        RayRunner(gpus=2)


@pytest.mark.slow
def test_gpu_nodes_are_ray_tasks_with_one_gpu_each_in_fresh_processes(local_ray, tmp_path, caplog):
    assert local_ray["GPU"] == 2
    names = ["shard_a", "shard_b", "shard_c", "shard_d"]
    nodes = [
        *gpu_nodes(names, seconds=0.3),
        Node(func=runner_nodes.describe_process, inputs=None, outputs="here", name="here"),
    ]
    runner = RayRunner()
    with caplog.at_level("INFO", logger="hed.runners.ray"):
        runner.run(Pipeline(nodes), json_catalog(tmp_path, [*names, "here"]))

    records = [read(tmp_path, n) for n in names]
    assert {r["cuda_visible_devices"] for r in records} == {"0", "1"}
    pids = {r["pid"] for r in records}
    assert len(pids) == 4  # max_calls=1: every task in a process of its own
    assert os.getpid() not in pids
    assert read(tmp_path, "here")["pid"] == os.getpid()  # the other node ran in the driver
    placements = runner.placements
    assert sorted(placements) == names
    for name, record in zip(names, records, strict=True):
        assert placements[name]["pid"] == record["pid"]
        assert placements[name]["gpu_ids"] == [record["cuda_visible_devices"]]
        where = placements[name]
        # the driver's log says where each node ran: host, node IP, pid and GPU
        assert (
            f"Node {name} done on {where['host']} ({where['ip']}, pid {record['pid']}, "
            f"GPU {record['cuda_visible_devices']}) in "
        ) in caplog.text


@pytest.mark.slow
def test_gpu_nodes_are_submitted_in_run_step_shard_order(local_ray, tmp_path):
    namespaces = ["r.step_10.shard_0", "r.step_2.shard_1", "r.step_2.shard_0", "r.step_1.shard_0"]
    nodes = [
        Node(
            func=sleeping(runner_nodes.describe_process, 0.5),
            inputs=None,
            outputs=f"{ns}.seen",
            name="generate_shard",
            namespace=ns,
            tags=["gpu"],
        )
        for ns in namespaces
    ]
    RayRunner().run(Pipeline(nodes), json_catalog(tmp_path, [f"{ns}.seen" for ns in namespaces]))
    starts = {ns: read(tmp_path, f"{ns}.seen")["start"] for ns in namespaces}
    first_two = sorted(starts, key=starts.get)[:2]
    # two GPUs: step 1 and step 2 shard 0 start first; step 10 and step 2 shard 1 wait for a
    # GPU (the two of them are handed out together when the first two end, so which of them
    # Ray starts first is not ordered)
    assert set(first_two) == {"r.step_1.shard_0", "r.step_2.shard_0"}
    waited = min(starts[ns] for ns in ("r.step_10.shard_0", "r.step_2.shard_1"))
    assert waited >= max(starts[ns] for ns in first_two) + 0.4


@pytest.mark.slow
def test_a_killed_task_is_reported_with_the_resume_command_while_the_others_finish(
    local_ray, tmp_path, monkeypatch
):
    monkeypatch.delenv("KEDRO_ENV", raising=False)
    nodes = [
        *gpu_nodes(["good_a", "good_b"], seconds=0.5),
        Node(
            func=runner_nodes.kill_self, inputs=None, outputs="killed", name="killed", tags=["gpu"]
        ),
        Node(func=runner_nodes.pass_through, inputs="killed", outputs="after", name="after"),
        Node(func=runner_nodes.pass_through, inputs="good_a", outputs="after_a", name="after_a"),
    ]
    names = ["good_a", "good_b", "killed", "after", "after_a"]
    with pytest.raises(FailedNodesError) as raised:
        RayRunner().run(Pipeline(nodes), json_catalog(tmp_path, names))
    error = raised.value
    assert list(error.failures) == ["killed"]
    assert error.failures["killed"].startswith("its Ray worker died before the node finished")
    assert error.skipped == {"after": ["killed"]}
    assert error.resume_command == (
        "kedro run --runner hed.runners.RayRunner --runner-params address=auto --from-nodes killed"
    )
    assert read(tmp_path, "good_a")["cuda_visible_devices"] in {"0", "1"}
    assert read(tmp_path, "good_b")["cuda_visible_devices"] in {"0", "1"}
    assert read(tmp_path, "after_a") == read(tmp_path, "good_a")
    assert not (tmp_path / "killed.json").exists()
    assert not (tmp_path / "after.json").exists()


# ------------------------------------------------------------------ the demo chain


def _shard_files(project: Path) -> dict[str, bytes]:
    """Every shard file's (only) version of the small step, by file name."""
    files = {}
    for k in range(NUM_SHARDS):
        for path in shard_paths(project, k):
            (latest,) = versions(path)
            files[path.name] = latest.read_bytes()
    return files


@pytest.mark.slow
def test_the_demo_chain_on_ray_matches_sequential_runner(
    local_ray, tmp_path, smollm2_dir, uninterrupted_small_step
):
    sequential_project, _ = uninterrupted_small_step
    project = small_step_project(tmp_path / "ray", smollm2_dir)
    configure_project("hed")
    pipelines.configure("hed.pipeline_registry")
    runner = RayRunner()
    with contextlib.chdir(project), KedroSession.create(project_path=project) as session:
        session.run(pipeline_names=["generation", "aggregation"], runner=runner)

    generated = [f"{RUN}.step_0.shard_{k}.generate_shard" for k in range(NUM_SHARDS)]
    placements = runner.placements
    assert sorted(placements) == generated  # every gpu node was a Ray task, no other
    # CUDA_VISIBLE_DEVICES as each generation node's own process saw it: both declared GPUs
    assert {placements[n]["cuda_visible_devices"] for n in generated} == {"0", "1"}
    assert all(
        placements[n]["gpu_ids"] == [placements[n]["cuda_visible_devices"]] for n in generated
    )
    assert len({placements[n]["pid"] for n in generated}) == NUM_SHARDS
    # the shard files are byte for byte those of SequentialRunner (metadata included)
    ours, theirs = _shard_files(project), _shard_files(sequential_project)
    assert sorted(ours) == sorted(theirs)
    for name, content in ours.items():
        assert content == theirs[name], name
    merged = [
        project / MERGED_FOLDER / "step_0.parquet",
        project / MERGED_FOLDER / "step_0.sequences.parquet",
    ]
    for path in merged:
        (ray_file,) = versions(path)
        (sequential_file,) = versions(sequential_project / path.relative_to(project))
        assert (
            pq.read_table(ray_file)
            .replace_schema_metadata(None)
            .equals(pq.read_table(sequential_file).replace_schema_metadata(None))
        )
