"""Node functions for ``test_runners.py``.

They live in a module of their own, at top level, because ``GPURunner`` sends ``gpu`` nodes to
spawned processes, which import a node's function by module and name.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from functools import partial, update_wrapper
from pathlib import Path
from typing import Any

from kedro.io.data_catalog import SharedMemoryDataCatalog
from kedro.pipeline import Node, Pipeline
from kedro_datasets.json import JSONDataset

from hed.runners.gpu import GPURunner


def describe_process(seconds: float = 0.0) -> dict[str, Any]:
    """Sleep ``seconds``; describe this process and the interval.

    Returns:
        ``{"pid", "cuda_visible_devices", "slot_index", "start_method", "start", "end"}``
        (times in seconds since the epoch).
    """
    start = time.time()
    time.sleep(seconds)
    return {
        "pid": os.getpid(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slot_index": os.environ.get("HED_SLOT_INDEX"),
        "start_method": multiprocessing.get_start_method(allow_none=True),
        "start": start,
        "end": time.time(),
    }


def describe_threads() -> dict[str, Any]:
    """The OpenMP variables this process got, and the threads torch takes from them."""
    import torch

    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "KMP_BLOCKTIME")
    return {
        **{name: os.environ.get(name) for name in (*names, "GOMP_SPINCOUNT")},
        "torch_threads": torch.get_num_threads(),
    }


def describe_process_after(upstream: Any, seconds: float = 0.0) -> dict[str, Any]:
    """:func:`describe_process`, with ``upstream`` echoed under ``"upstream"``."""
    return {**describe_process(seconds), "upstream": upstream}


def make_prompts() -> list[str]:
    """A small in-memory input for ``gpu`` nodes."""
    return ["1+1", "2+2"]


def explode() -> dict[str, Any]:
    """Always fail.

    Raises:
        RuntimeError: always.
    """
    raise RuntimeError("boom: shard exploded\nsecond line of the message")


def kill_self() -> dict[str, Any]:
    """Die by SIGKILL, as the out-of-memory killer would do it."""
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


def pass_through(data: Any) -> Any:
    """Return ``data`` unchanged."""
    return data


def sleep_with_pid_file(pid_file: str) -> dict[str, Any]:
    """Write this process's pid to ``pid_file``, then sleep far longer than any test waits."""
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(120)
    return {"pid": os.getpid()}


def run_sleeper(work_dir: str) -> None:
    """A parent process for the signal tests: one ``gpu`` node that sleeps."""
    func = update_wrapper(
        partial(sleep_with_pid_file, pid_file=str(Path(work_dir) / "child.pid")),
        sleep_with_pid_file,
    )
    pipeline = Pipeline([Node(func=func, inputs=None, outputs="slept", name="sleep", tags=["gpu"])])
    catalog = SharedMemoryDataCatalog(
        datasets={"slept": JSONDataset(filepath=str(Path(work_dir) / "slept.json"))}
    )
    GPURunner(gpus="0").run(pipeline, catalog)


def shard_from(prompts: Any, checkpoints: dict[str, Any]) -> Any:
    """A small table from a prompts DataFrame and a checkpoints dict (``test_task_pickling``).

    Returns:
        ``pa.Table`` with columns ``prompt_id`` (int64) and ``checkpoint`` (string): one row per
        prompt, each naming ``checkpoints["path"]``.
    """
    import pyarrow as pa

    ids = [int(i) for i in prompts["prompt_id"]]
    return pa.table({"prompt_id": ids, "checkpoint": [checkpoints["path"]] * len(ids)})
