"""GPURunner's node processes share the CPUs between them, with OpenMP threads that sleep when
idle (real spawned processes, on CPU)."""

from __future__ import annotations

from kedro.pipeline import Node, Pipeline

from hed.runners import executor
from hed.runners.gpu import GPURunner
from tests import runner_nodes

from .test_runners import json_catalog, read


def test_cpu_workers_split_the_cpus_and_torch_takes_its_share(tmp_path, monkeypatch):
    # 3 CPUs (a SLURM allocation; at most this machine's 2 cores, which torch caps itself at)
    monkeypatch.setattr(executor, "allowed_cpus", lambda: 3)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_BLOCKTIME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    names = ["shard_a", "shard_b"]
    nodes = [
        Node(func=runner_nodes.describe_threads, inputs=None, outputs=n, name=n, tags=["gpu"])
        for n in names
    ]
    GPURunner(gpus="cpu", cpu_workers=2).run(Pipeline(nodes), json_catalog(tmp_path, names))
    records = [read(tmp_path, name) for name in names]
    # one node per worker, each with its worker's share: 3 CPUs → 2 + 1
    assert sorted(int(r["OMP_NUM_THREADS"]) for r in records) == [1, 2]
    assert all(r["torch_threads"] == int(r["OMP_NUM_THREADS"]) for r in records)
    assert all(r["MKL_NUM_THREADS"] == r["OMP_NUM_THREADS"] for r in records)
    assert {(r["OMP_WAIT_POLICY"], r["KMP_BLOCKTIME"], r["GOMP_SPINCOUNT"]) for r in records} == {
        ("PASSIVE", "0", "0")
    }


def test_the_executor_gives_each_slot_its_share(monkeypatch):
    import logging

    from hed.runners.slots import resolve_slots

    monkeypatch.setattr(executor, "allowed_cpus", lambda: 8)
    slots = resolve_slots("cpu", 3)
    pool = executor.NodeExecutor(slots, 1, {}, logging.getLogger("test"))
    try:
        assert [pool.cpu_threads[s] for s in slots] == [3, 3, 2]
    finally:
        pool.shutdown()
