"""Small Ray clusters for the tests: a local one declaring GPUs, or two nodes on this machine.

Ray is memory hungry: each cluster gets a 200 MB object store and at most two CPUs, and is shut
down when its test module ends. Workers inherit ``PYTHONPATH`` (set here to this checkout's
``src`` and root) so they import HED and ``tests.runner_nodes`` as the driver does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
OBJECT_STORE_BYTES = 200 * 1024 * 1024
QUIET = {"include_dashboard": False, "log_to_driver": False}


def _worker_path() -> None:
    parts = [str(REPO_ROOT / "src"), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)


@contextmanager
def local_cluster(num_gpus: int = 2, num_cpus: int = 2) -> Iterator[dict[str, Any]]:
    """``ray.init(num_gpus=...)`` on this machine (GPUs declared, none needed); yields resources."""
    import ray

    _worker_path()
    ray.init(
        num_gpus=num_gpus,
        num_cpus=num_cpus,
        object_store_memory=OBJECT_STORE_BYTES,
        **QUIET,
    )
    try:
        yield ray.cluster_resources()
    finally:
        ray.shutdown()


@contextmanager
def two_node_cluster(gpus_on_second: int = 2) -> Iterator[tuple[str, str]]:
    """A head without GPUs and a second node with ``gpus_on_second``; yields their node ids."""
    import ray
    from ray.cluster_utils import Cluster

    _worker_path()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "num_gpus": 0, "object_store_memory": OBJECT_STORE_BYTES},
    )
    second = cluster.add_node(
        num_cpus=1, num_gpus=gpus_on_second, object_store_memory=OBJECT_STORE_BYTES
    )
    try:
        ray.init(address=cluster.address, **QUIET)
        cluster.wait_for_nodes()
        yield cluster.head_node.node_id, second.node_id
    finally:
        ray.shutdown()
        cluster.shutdown()
