"""``RayRunner``: Kedro's scheduler, with every ``gpu`` node a Ray task on a GPU of its own.

Usage::

    kedro run --runner hed.runners.RayRunner --runner-params address=auto

It is :class:`hed.runners.GPURunner`'s executor with one change: a slot does not start a local
process, it submits a Ray task (``num_gpus=1``, ``max_calls=1``, ``max_retries=0``) and waits for
it. Ray picks the machine and the GPU and sets ``CUDA_VISIBLE_DEVICES``; ``max_calls=1`` ends the
worker process with its task, so the GPU memory of a checkpoint is released in full before the
next one. Everything else is ``GPURunner``'s: Kedro's own scheduler (``AbstractRunner._run``),
queued ``gpu`` nodes handed out in (run, step, shard) order, other nodes in the driver, a failed
node recorded (its siblings go on, its dependents are skipped) and one
:class:`~hed.runners.executor.FailedNodesError` at the end with the ``--from-nodes`` resume command.

A task carries its node and a catalog of only that node's datasets. Parameters (``params:*``)
travel with it (through Ray's object store, they are small); any other ``MemoryDataset`` input
or output of a ``gpu`` node would have to cross machines and is refused before the run
(:class:`~hed.errors.ConfigError` naming it): nodes on different machines exchange data only
through persisted datasets, under a data root every worker reaches (a shared filesystem at the
same path, or an ``s3://`` / ``gs://`` URL). In the task the worker sets up the project
(``configure_project``, the driver's logging configuration, a hook manager from
``settings.HOOKS``), so project hooks fire there, and works in the driver's project folder when
that folder exists on its machine (relative catalog paths then mean the same files).
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import sys
import time
from collections.abc import Iterable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from kedro.framework import project as kedro_project
from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import AbstractRunner
from kedro.runner.task import Task

from hed.errors import ConfigError
from hed.runners.executor import GPU_TAG, FailedNodesError, NodeExecutor
from hed.runners.gpu import GPURunner
from hed.runners.process import (
    failure_reason,
    node_catalog,
    pickle_task,
    project_hook_manager,
    sigterm_as_exit,
    traceback_to_log,
)
from hed.runners.resume import resume_nodes
from hed.runners.slots import Slot

if TYPE_CHECKING:
    from kedro.io import CatalogProtocol
    from kedro.pipeline import Pipeline
    from kedro.pipeline.node import Node
    from pluggy import PluginManager

logger = logging.getLogger(__name__)


def memory_datasets_crossing(pipeline: Pipeline, catalog: CatalogProtocol) -> list[str]:
    """Inputs and outputs of ``gpu`` nodes that live only in memory (parameters excepted).

    A dataset absent from the catalog counts: Kedro would make it a ``MemoryDataset``.

    Args:
        pipeline: the pipeline about to run.
        catalog: its catalog.

    Returns:
        The dataset names, sorted.
    """
    names = set()
    for node in pipeline.nodes:
        if GPU_TAG not in node.tags:
            continue
        for name in (*node.inputs, *node.outputs):
            if name.startswith("params:") or name == "parameters":
                continue
            dataset = catalog.get(name, fallback_to_runtime_pattern=True)
            if dataset is None or isinstance(dataset, MemoryDataset):
                names.add(name)
    return sorted(names)


def describe_worker() -> dict[str, Any]:
    """Where this Ray task runs: host, node IP, Ray node id, pid and the GPU ids Ray gave it."""
    import ray

    context = ray.get_runtime_context()
    return {
        "host": socket.gethostname(),
        "ip": ray.util.get_node_ip_address(),
        "node_id": context.get_node_id(),
        "pid": os.getpid(),
        "gpu_ids": [str(i) for i in context.get_accelerator_ids().get("GPU", [])],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def run_task(
    payload: bytes,
    package_name: str | None,
    logging_config: dict[str, Any] | None,
    project_path: str,
    source_dirs: list[str],
) -> tuple[str, str, str, dict[str, Any]]:
    """Body of a node's Ray task: set up the project, run the pickled Kedro ``Task``.

    Args:
        payload: the pickled ``Task`` (its node and a catalog of the node's datasets).
        package_name: the project package (``configure_project``).
        logging_config: the driver's logging configuration.
        project_path: the driver's working folder; the task works there when it exists here.
        source_dirs: the driver's import folders inside it (``src``), put on ``sys.path``.

    Returns:
        ``(status, reason, traceback, where)``: status ``ok`` or ``error``, the one-line reason
        and the traceback for the log (empty when ok), and :func:`describe_worker`.
    """
    where = describe_worker()
    if os.path.isdir(project_path):
        os.chdir(project_path)
    for folder in reversed(source_dirs):  # the project's src/, as ``kedro run`` puts it first
        if os.path.isdir(folder) and folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        if package_name:
            kedro_project.configure_project(package_name)
        if logging_config:
            kedro_project.configure_logging(logging_config)
        task: Task = pickle.loads(payload)  # our own driver's payload
        task.hook_manager = project_hook_manager()
        task.execute()
    except BaseException as exc:  # reported to the driver, whatever it is
        return "error", failure_reason(exc), traceback_to_log(exc), where
    return "ok", "", "", where


def _where(where: dict[str, Any]) -> str:
    gpus = ",".join(where.get("gpu_ids") or []) or "none"
    return f"{where.get('host')} ({where.get('ip')}, pid {where.get('pid')}, GPU {gpus})"


class RayNodeExecutor(NodeExecutor):
    """``GPURunner``'s executor whose slots submit Ray tasks instead of starting processes."""

    def __init__(self, slots: list[Slot], threads: int, dependencies: Any, log: Any) -> None:
        import ray

        self._remote = ray.remote(num_gpus=1, max_calls=1, max_retries=0)(run_task)
        self._refs: dict[str, Any] = {}
        self.placements: dict[str, dict[str, Any]] = {}
        self._project_path = os.getcwd()
        inside = self._project_path.rstrip(os.sep) + os.sep
        self._source_dirs = [p for p in sys.path if p and os.path.abspath(p).startswith(inside)]
        super().__init__(slots, threads, dependencies, log)

    def stop(self) -> None:
        """Drop queued nodes and cancel (force-kill) every running Ray task."""
        import ray

        super().stop()
        with self.condition:
            refs = list(self._refs.values())
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # already done or the cluster is gone
                pass

    def run_on_slot(self, slot: Slot, task: Task) -> str | None:
        import ray

        node = task.node
        child = Task(
            node=node,
            catalog=node_catalog(node, task.catalog, DataCatalog),
            is_async=task.is_async,
            run_id=task.run_id,
        )
        try:
            payload = pickle_task(child)
        except Exception as exc:
            self.logger.exception("Node %s cannot be sent to a Ray task", node.name)
            return f"cannot pickle its task: {failure_reason(exc)}"
        with self.condition:
            if self.stopped:
                return "not started: the run was stopped"
            ref = self._remote.options(name=node.name).remote(
                payload, *self.bootstrap, self._project_path, self._source_dirs
            )
            self._refs[node.name] = ref
        started = time.perf_counter()
        self.logger.info("Running node %s as a Ray task (%s)", node.name, slot.label)
        try:
            status, reason, details, where = ray.get(ref)
        except Exception as exc:  # the worker died (killed, out of memory) or was cancelled
            status, reason, details, where = "error", _ray_failure(exc), "", {}
        finally:
            with self.condition:
                self._refs.pop(node.name, None)
        if where:
            self.placements[node.name] = where
        if status == "ok":
            elapsed = time.perf_counter() - started
            self.logger.info("Node %s done on %s in %.1f s", node.name, _where(where), elapsed)
            return None
        self.logger.error(
            "Node %s failed%s: %s%s",
            node.name,
            f" on {_where(where)}" if where else "",
            reason,
            f"\n{details}" if details else "",
        )
        return reason


def _ray_failure(exc: BaseException) -> str:
    """One line for a Ray task that did not return: its worker died, or it was cancelled."""
    name = type(exc).__name__
    if "WorkerCrashed" in name or "ActorDied" in name or "NodeDied" in name:
        return f"its Ray worker died before the node finished ({name}: killed or out of memory)"
    if "Cancelled" in name:
        return "its Ray task was cancelled"
    cause = getattr(exc, "cause", None)  # a RayTaskError wraps what the worker raised
    return failure_reason(cause if isinstance(cause, BaseException) else exc)


class RayRunner(AbstractRunner):
    """Run ``gpu``-tagged nodes as Ray tasks with one GPU each; other nodes in the driver.

    Runner parameters (``--runner-params``, comma-separated)::

        address=auto            the Ray cluster this machine belongs to (`ray start` ran here)
        address=ray://head:10001  a remote cluster through Ray Client
        (no address)            a cluster already connected (ray.init in the process), else a
                                local one with num_gpus / num_cpus
        num_gpus=2,num_cpus=4   resources of a local cluster (default: what Ray detects)
        threads=2               threads of the driver for the other nodes (default 1)

    At most as many ``gpu`` nodes are submitted at once as the cluster has GPUs, in (run, step,
    shard) order; Ray places each one.

    Args:
        address: ``auto``, ``ray://host:port`` or ``host:port``; None: see above.
        num_gpus: GPUs a local cluster declares (only when one is started here).
        num_cpus: CPUs a local cluster declares (only when one is started here).
        object_store_memory: bytes of a local cluster's object store (default: Ray's).
        threads: threads of the driver running the other nodes.
        is_async: load and save each node's datasets on threads (Kedro's ``--async``).

    Raises:
        ConfigError: an unknown parameter, ``threads`` < 1, or a cluster without GPUs.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        num_gpus: int | None = None,
        num_cpus: int | None = None,
        object_store_memory: int | None = None,
        threads: int = 1,
        is_async: bool = False,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise ConfigError(
                f"RayRunner: unknown --runner-params {', '.join(sorted(unknown))}; use address, "
                "num_gpus, num_cpus, object_store_memory and threads (e.g. address=auto)"
            )
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ConfigError(f"RayRunner: threads={threads!r} must be a whole number ≥ 1")
        super().__init__(is_async=is_async)
        self._address = address
        self._local = {
            "num_gpus": num_gpus,
            "num_cpus": num_cpus,
            "object_store_memory": object_store_memory,
        }
        self._threads = threads
        self._executor: RayNodeExecutor | None = None
        self._dependencies: dict[Node, set[Node]] = {}
        self._slots: list[Slot] = []

    @property
    def placements(self) -> dict[str, dict[str, Any]]:
        """Per ``gpu`` node of the last run: where it ran (:func:`describe_worker`)."""
        return dict(self._executor.placements) if self._executor else {}

    def _connect(self) -> list[Slot]:
        """Join (or start) the Ray cluster; one slot per GPU it has."""
        import ray

        if not ray.is_initialized():
            if self._address:
                ray.init(address=self._address, log_to_driver=True)
            else:
                local = {k: v for k, v in self._local.items() if v is not None}
                ray.init(**local)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus < 1:
            raise ConfigError(
                "RayRunner: the Ray cluster has no GPU resource; start its workers with "
                "`ray start --num-gpus N`, declare num_gpus=N for a local one, or use "
                "hed.runners.GPURunner with gpus=cpu"
            )
        logger.info("RayRunner: Ray cluster with %d GPU(s) on %d node(s)", gpus, len(ray.nodes()))
        return [Slot(f"Ray task slot {k}", "") for k in range(gpus)]

    @classmethod
    def _validate_nodes(cls, nodes: Iterable[Node]) -> None:
        """Only the ``gpu`` nodes travel to Ray workers, so only they must pickle."""
        from kedro.runner import ParallelRunner

        ParallelRunner._validate_nodes([node for node in nodes if GPU_TAG in node.tags])

    def _get_executor(self, max_workers: int) -> Executor:
        self._executor = RayNodeExecutor(
            self._slots, self._threads, self._dependencies, self._logger
        )
        return self._executor

    def _run(
        self,
        pipeline: Pipeline,
        catalog: CatalogProtocol,
        hook_manager: PluginManager | None = None,
        run_id: str | None = None,
    ) -> None:
        """Refuse memory datasets of ``gpu`` nodes, connect, run; raise the failures at the end.

        Raises:
            ConfigError: a ``gpu`` node reads or writes a dataset kept only in memory, or the
                cluster has no GPU.
            FailedNodesError: one or more nodes failed (the others ran).
        """
        crossing = memory_datasets_crossing(pipeline, catalog)
        if crossing:
            raise ConfigError(
                f"RayRunner: gpu node dataset(s) {', '.join(crossing)} are kept only in memory "
                "and cannot cross machines; give them a catalog entry with a filepath under the "
                "data root"
            )
        self._slots = self._connect()
        self._dependencies = pipeline.node_dependencies
        with sigterm_as_exit():
            AbstractRunner._run(self, pipeline, catalog, hook_manager, run_id)
        executor = self._executor
        if executor is not None and executor.failures:
            starts = resume_nodes(pipeline, executor.failures, catalog)
            raise FailedNodesError(executor.failures, executor.skipped, self.resume_command(starts))

    def resume_command(self, start_nodes: Iterable[str]) -> str:
        """``GPURunner.resume_command`` for this runner (named ``hed.runners.RayRunner``)."""
        command = GPURunner.resume_command(self, start_nodes)  # type: ignore[arg-type]
        return command.replace(f"{__name__}.RayRunner", "hed.runners.RayRunner")

    def _runner_params(self) -> str:
        params = [f"address={self._address}"] if self._address else []
        params += [
            f"{k}={v}" for k, v in self._local.items() if v is not None and not self._address
        ]
        if self._threads != 1:
            params.append(f"threads={self._threads}")
        return ",".join(params) or "address=auto"
