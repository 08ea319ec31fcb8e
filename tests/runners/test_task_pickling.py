"""A ``gpu`` node's task with datasets on an object store crosses to another process.

kedro-datasets' datasets keep ``fs.glob`` and ``fs.exists``; on s3fs those are fsspec
``sync_wrapper`` functions that plain pickle refuses (``glob``) or sends as the coroutine method
(``exists``). :func:`hed.runners.process.pickle_task`, which both runners use, sends them by
name. The S3 server is moto's, on 127.0.0.1.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pytest
from kedro.framework.hooks.manager import _create_hook_manager
from kedro.io import CachedDataset, DataCatalog, MemoryDataset, Version
from kedro.io.data_catalog import SharedMemoryDataCatalog
from kedro.pipeline import Node, Pipeline
from kedro.runner.task import Task
from kedro_datasets.json import JSONDataset
from kedro_datasets.pandas import ParquetDataset

from hed.errors import ConfigError
from hed.io.datasets import ArrowParquetDataset
from hed.records.object_store import make_dataset_writes_atomic
from hed.runners.gpu import GPURunner
from hed.runners.process import pickle_task
from tests import runner_nodes
from tests.s3_server import moto_s3, s3

BUCKET = "hed-task-pickling"  # moto keeps buckets process-wide: one of this module's own
ROOT = f"s3://{BUCKET}/data"
LOAD_VERSION = "2026-12-01T10.00.00.000Z"
SAVE_VERSION = "2026-12-01T11.00.00.000Z"
PROMPTS = pd.DataFrame({"prompt_id": [3, 1, 2], "prompt": ["a", "b", "c"]})
CHECKPOINTS = {"path": "checkpoints/step_0", "steps": [0]}

#: Unpickles the task on stdin in a fresh interpreter, runs it, prints the three datasets'
#: ``exists()`` (a coroutine there would print its repr, not a bool).
CHILD = """
import pickle, sys
from kedro.framework.hooks.manager import _create_hook_manager
task = pickle.loads(sys.stdin.buffer.read())
task.hook_manager = _create_hook_manager()
task.execute()
print([task.catalog[name].exists() for name in ("prompts", "checkpoints", "shard")])
"""


@pytest.fixture(scope="module")
def s3_server():
    with moto_s3(BUCKET) as endpoint:
        yield endpoint


def gpu_task(save_version: str) -> Task:
    """The generation node's shape: prompts (pandas Parquet) and checkpoints (JSON) in, a shard
    (HED's Arrow Parquet) out, all versioned under ``ROOT`` with HED's atomic writes."""
    version = Version(None, save_version)
    datasets = {
        "prompts": ParquetDataset(filepath=f"{ROOT}/prompts.parquet", version=version),
        "checkpoints": JSONDataset(filepath=f"{ROOT}/checkpoints.json", version=version),
        "shard": ArrowParquetDataset(
            filepath=f"{ROOT}/shard_0.parquet", version=Version(None, save_version)
        ),
    }
    for dataset in datasets.values():
        make_dataset_writes_atomic(dataset)  # as hed.hooks.AtomicWritesHooks does in a run
    task_node = Node(runner_nodes.shard_from, ["prompts", "checkpoints"], "shard", tags=["gpu"])
    return Task(node=task_node, catalog=DataCatalog(datasets=datasets), is_async=False)


@pytest.fixture(scope="module")
def saved_inputs(s3_server):
    """The inputs saved (one version) through the same kind of datasets as the task's."""
    task = gpu_task(LOAD_VERSION)
    task.catalog.save("prompts", PROMPTS)
    task.catalog.save("checkpoints", CHECKPOINTS)
    return task


def test_plain_pickle_refuses_the_s3_datasets(saved_inputs):
    with pytest.raises(pickle.PicklingError, match=r"S3FileSystem\._glob"):
        pickle.dumps(gpu_task(SAVE_VERSION))


def test_the_unpickled_datasets_load_what_was_saved_and_check_existence(saved_inputs):
    copy = pickle.loads(pickle_task(gpu_task(SAVE_VERSION)))
    pd.testing.assert_frame_equal(copy.catalog.load("prompts"), PROMPTS)
    assert copy.catalog.load("checkpoints") == CHECKPOINTS
    prompts = copy.catalog["prompts"]
    # sync functions of the rebuilt filesystem, not its coroutine methods
    assert prompts._exists_function(f"{BUCKET}/data/prompts.parquet") is True
    assert prompts._exists_function(f"{BUCKET}/data/missing.parquet") is False
    assert prompts._glob_function(f"{BUCKET}/data/prompts.parquet/*/prompts.parquet") == [
        f"{BUCKET}/data/prompts.parquet/{LOAD_VERSION}/prompts.parquet"
    ]
    assert type(copy.catalog["shard"]._fs).__name__ == "AtomicS3FileSystem"


def test_a_task_pickled_for_a_gpu_node_runs_in_another_process(saved_inputs):
    save_version = "2026-12-01T12.00.00.000Z"
    payload = pickle_task(gpu_task(save_version))
    child = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=payload,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr.decode()[-3000:]
    assert child.stdout.decode().splitlines()[-1] == "[True, True, True]"
    shard_url = f"{BUCKET}/data/shard_0.parquet/{save_version}/shard_0.parquet"
    assert s3().exists(shard_url)
    table = gpu_task(save_version).catalog.load("shard").to_table()
    assert table.equals(
        pa.table({"prompt_id": [3, 1, 2], "checkpoint": ["checkpoints/step_0"] * 3})
    )


def test_gpu_runner_runs_the_s3_node_in_its_own_process(saved_inputs):
    save_version = "2026-12-01T13.00.00.000Z"
    task = gpu_task(save_version)
    catalog = SharedMemoryDataCatalog(datasets={n: task.catalog[n] for n in task.catalog.keys()})
    GPURunner(gpus="cpu").run(Pipeline([task.node]), catalog, _create_hook_manager())
    table = gpu_task(save_version).catalog.load("shard").to_table()
    assert table.column("prompt_id").to_pylist() == [3, 1, 2]


def test_gpu_runner_names_a_gpu_nodes_dataset_that_cannot_be_pickled(saved_inputs):
    task = gpu_task(SAVE_VERSION)
    datasets = {n: task.catalog[n] for n in task.catalog.keys()}
    odd = MemoryDataset(lambda: 1)
    catalog = SharedMemoryDataCatalog(datasets={**datasets, "odd": odd})
    node = Node(runner_nodes.shard_from, ["prompts", "odd"], "shard", tags=["gpu"])
    with pytest.raises(ConfigError) as caught:
        GPURunner(gpus="cpu").run(Pipeline([node]), catalog, _create_hook_manager())
    assert str(caught.value).startswith("GPURunner: dataset(s) odd (")
    assert "lambda" in str(caught.value) and "of a gpu node cannot be pickled" in str(caught.value)


def test_gpu_runner_refuses_a_gpu_nodes_single_process_dataset_as_kedro_does(saved_inputs):
    task = gpu_task(SAVE_VERSION)
    datasets = {n: task.catalog[n] for n in task.catalog.keys()}
    cached = CachedDataset(MemoryDataset([1, 2]))  # pickles, but its cache stays in one process
    catalog = SharedMemoryDataCatalog(datasets={**datasets, "cached": cached})
    node = Node(runner_nodes.shard_from, ["prompts", "cached"], "shard", tags=["gpu"])
    with pytest.raises(ConfigError, match=r"dataset\(s\) cached \(.*CachedDataset works in one"):
        GPURunner(gpus="cpu").run(Pipeline([node]), catalog, _create_hook_manager())


def test_datasets_a_gpu_node_does_not_use_need_not_pickle(saved_inputs):
    """Only the node's own datasets travel: a lambda or a CachedDataset elsewhere in the
    catalog (a notebook's, a CPU node's) does not block the run."""
    save_version = "2026-12-01T14.00.00.000Z"
    task = gpu_task(save_version)
    datasets = {n: task.catalog[n] for n in task.catalog.keys()}
    extra = {"odd": MemoryDataset(lambda: 1), "cached": CachedDataset(MemoryDataset([1, 2]))}
    catalog = SharedMemoryDataCatalog(datasets={**datasets, **extra})
    GPURunner(gpus="cpu").run(Pipeline([task.node]), catalog, _create_hook_manager())
    table = gpu_task(save_version).catalog.load("shard").to_table()
    assert table.column("prompt_id").to_pylist() == [3, 1, 2]
