"""``RayRunner`` on a two-node Ray cluster on this machine: GPUs only on the second node."""

from __future__ import annotations

import os

from kedro.pipeline import Node, Pipeline

from hed.runners import RayRunner
from tests import runner_nodes
from tests.ray_cluster import two_node_cluster
from tests.test_ray_runner import gpu_nodes, json_catalog, read


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
