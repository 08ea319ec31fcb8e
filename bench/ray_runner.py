"""Benchmark ``RayRunner`` against ``GPURunner`` (``gpus=cpu``) on this machine, in one process.

1. The demo chain (generation + aggregation of the embedded SmolLM2 on a small step: 8 prompts,
   4 shards, 2 samples, 16 new tokens) in two fresh project copies, one per runner:
   ``GPURunner(gpus="cpu", cpu_workers=2)`` and ``RayRunner`` on a local Ray cluster declaring
   2 GPUs and 2 CPUs. Both run two ``gpu`` nodes at a time, each in a fresh process. The order
   alternates between repeats; the Ray cluster is started once, before the timings (its start
   is printed on its own).
2. Per-task scheduling overhead: ``--tasks`` trivial ``gpu`` nodes (return a dict, one JSON
   output each), run by each runner with two at a time; the wall time per node, against the
   same nodes under ``SequentialRunner`` in this process (no process at all).

Ratios are RayRunner ÷ GPURunner (> 1: Ray slower). Needs the converted demo model (the tests
convert it into ``.pytest_cache/hed_models``).

Example::

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python bench/ray_runner.py --repeats 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO_ROOT / "src"), str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
)
os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")

from kedro.framework.project import configure_project, pipelines  # noqa: E402
from kedro.framework.session import KedroSession  # noqa: E402
from kedro.io import DataCatalog  # noqa: E402
from kedro.io.data_catalog import SharedMemoryDataCatalog  # noqa: E402
from kedro.pipeline import Node, Pipeline  # noqa: E402
from kedro.runner import SequentialRunner  # noqa: E402
from kedro_datasets.json import JSONDataset  # noqa: E402

from hed.decode.embedded import ensure_embedded_checkpoint  # noqa: E402
from hed.runners import GPURunner, RayRunner  # noqa: E402
from tests import runner_nodes  # noqa: E402
from tests.project_copy import small_step_project  # noqa: E402

MODEL_DIR = REPO_ROOT / ".pytest_cache/hed_models/smollm2/global_step_0/actor_hf"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="demo chain runs per runner")
    parser.add_argument("--tasks", type=int, default=16, help="trivial gpu nodes (part 2)")
    parser.add_argument("--object-store-mb", type=int, default=200)
    return parser.parse_args()


def run_chain(folder: Path, runner: object) -> float:
    """Generation + aggregation of the small step in a fresh copy; wall seconds."""
    project = small_step_project(folder, ensure_embedded_checkpoint(MODEL_DIR))
    configure_project("hed")
    pipelines.configure("hed.pipeline_registry")
    started = time.perf_counter()
    with KedroSession.create(project_path=project) as session:
        session.run(pipeline_names=["generation", "aggregation"], runner=runner)
    return time.perf_counter() - started


def trivial_pipeline(n: int) -> tuple[Pipeline, list[str]]:
    func = runner_nodes.describe_process
    names = [f"r.step_{k}.shard_0.task" for k in range(n)]
    return Pipeline([Node(func, None, name, name=name, tags=["gpu"]) for name in names]), names


def run_trivial(folder: Path, runner: object, n: int, shared: bool) -> float:
    """``n`` trivial gpu nodes; wall seconds per node."""
    pipeline, names = trivial_pipeline(n)
    datasets = {name: JSONDataset(filepath=str(folder / f"{name}.json")) for name in names}
    catalog = SharedMemoryDataCatalog(datasets=datasets) if shared else DataCatalog(datasets)
    started = time.perf_counter()
    runner.run(pipeline, catalog)
    return (time.perf_counter() - started) / n


def main() -> None:
    args = parse_args()
    import ray

    started = time.perf_counter()
    ray.init(
        num_gpus=2,
        num_cpus=2,
        object_store_memory=args.object_store_mb * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
    )
    print(f"Ray local cluster start: {time.perf_counter() - started:.1f} s (not in the timings)")
    try:
        with tempfile.TemporaryDirectory(prefix="hed-bench-ray-") as tmp:
            root = Path(tmp)
            chain = {"GPURunner": [], "RayRunner": []}
            for repeat in range(args.repeats):
                order = ["GPURunner", "RayRunner"]
                for name in order if repeat % 2 == 0 else order[::-1]:
                    runner = (
                        GPURunner(gpus="cpu", cpu_workers=2) if name == "GPURunner" else RayRunner()
                    )
                    chain[name].append(run_chain(root / f"chain_{name}_{repeat}", runner))
            gpu, ray_s = (
                statistics.median(chain["GPURunner"]),
                statistics.median(chain["RayRunner"]),
            )
            print("\n1. demo chain (generation + aggregation, 4 shards, 2 at a time), wall s")
            print(f"   GPURunner(gpus=cpu, cpu_workers=2): {gpu:6.1f}  {chain['GPURunner']}")
            print(f"   RayRunner (local, 2 GPUs declared): {ray_s:6.1f}  {chain['RayRunner']}")
            print(f"   ratio Ray / GPURunner: {ray_s / gpu:.2f}")

            n = args.tasks
            sequential = run_trivial(root / "seq", SequentialRunner(), n, shared=False)
            gpu_task = run_trivial(
                root / "gpu", GPURunner(gpus="cpu", cpu_workers=2), n, shared=True
            )
            ray_task = run_trivial(root / "ray", RayRunner(), n, shared=False)
            print(
                f"\n2. per-task scheduling overhead ({n} trivial gpu nodes, 2 at a time), ms/node"
            )
            print(f"   SequentialRunner (in process):       {sequential * 1e3:8.1f}")
            print(f"   GPURunner (fresh spawned process):   {gpu_task * 1e3:8.1f}")
            print(f"   RayRunner (Ray task, max_calls=1):   {ray_task * 1e3:8.1f}")
            print(f"   ratio Ray / GPURunner: {ray_task / gpu_task:.2f}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
