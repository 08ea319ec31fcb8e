"""``GPURunner``: Kedro's scheduler, with every ``gpu`` node in a fresh process on a GPU of its own.

Usage::

    kedro run --runner hed.runners.GPURunner --runner-params gpus=0:1:2:3

``GPURunner`` is Kedro's ``ParallelRunner`` (so the session gives it a ``SharedMemoryDataCatalog``)
with one change of substance: the executor that Kedro's own scheduler (``AbstractRunner._run``)
submits ready nodes to. That executor

* runs each node tagged ``gpu`` in a fresh process started with the *spawn* context, with
  ``CUDA_VISIBLE_DEVICES`` set to the one device it owns for that node, at most one node per
  device at a time, so GPU memory is released in full between checkpoints;
* hands free devices to queued ``gpu`` nodes in natural name order, so for names such as
  ``<run>.step_<step>.shard_<k>.generate_shard`` early steps finish first;
* runs every other node on a thread of the parent process;
* records a failed node instead of raising it, so its siblings keep running, and skips the
  nodes downstream of it; the run then ends with one :class:`FailedNodesError` naming every
  failed node and the command that reruns them and what depends on them (``--from-nodes``).

A child process sets up the project (``configure_project``, the parent's logging configuration,
a hook manager built from ``settings.HOOKS``) before it unpickles its task, so project hooks
(``before_node_run``, ``after_node_run``, ``on_node_error``, dataset hooks) fire in the child,
and it loads and saves its datasets itself. Each child leads its own process group: the parent
stops those groups on an error, Ctrl-C or SIGTERM, and a child whose parent dies takes its own
group down. POSIX only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from kedro.runner import AbstractRunner, ParallelRunner
from kedro.runner.parallel_runner import ParallelRunnerManager

from hed.core.validators import is_integer
from hed.errors import ConfigError
from hed.runners.executor import GPU_TAG, FailedNodesError, NodeExecutor, RunInterruptedError
from hed.runners.process import exit_with_parent, failure_reason, pickle_task, sigterm_as_exit
from hed.runners.resume import resume_command, resume_nodes
from hed.runners.slots import GpuSpec, Slot, dispatch_key, raw_runner_param, resolve_slots

if TYPE_CHECKING:
    from kedro.io import SharedMemoryCatalogProtocol
    from kedro.pipeline import Pipeline
    from kedro.pipeline.node import Node
    from pluggy import PluginManager

logger = logging.getLogger(__name__)


class GPURunner(ParallelRunner):
    """Run ``gpu``-tagged nodes one per GPU, each in a fresh spawned process; others in-process.

    Runner parameters (``--runner-params``, comma-separated)::

        gpus=0:1:2:3           these devices (CUDA_VISIBLE_DEVICES ids)
        gpus=4-7               devices 4, 5, 6, 7 (also gpus=4:5:6:7)
        gpus=[3]               one device (a bare gpus=3 would mean "three devices")
        gpus=2                 the first two visible devices
        gpus=cpu,cpu_workers=2 no GPU: two gpu nodes at a time, on CPU
                               (Kedro's max_workers=2 means the same)
        (no gpus)              every visible device; on a machine without CUDA, cpu_workers
        threads=2              threads for the non-gpu nodes (default 1)

    Under ``kedro run``, ``gpus`` is taken as typed on the command line
    (:func:`raw_runner_param`): Kedro's parser turns ``4:5:6:7`` into the integer 882367.

    Args:
        gpus: see :func:`resolve_slots`.
        cpu_workers: without a GPU, how many ``gpu`` nodes run at once (default 1).
        max_workers: Kedro's name for ``cpu_workers`` (``ParallelRunner``); give one of the two.
        threads: threads of the parent process running the other nodes, alongside the
            ``gpu`` nodes (default 1: one at a time).
        is_async: load and save each node's datasets on threads (Kedro's ``--async``).

    Raises:
        ConfigError: invalid ``gpus``, ``cpu_workers`` or ``threads``, or another keyword
            (a misspelt ``--runner-params`` name such as ``gpu=cpu``).
    """

    def __init__(
        self,
        gpus: GpuSpec = None,
        cpu_workers: int = 1,
        threads: int = 1,
        is_async: bool = False,
        max_workers: int | None = None,
        **unknown: Any,
    ) -> None:
        self._manager = None  # ParallelRunner.__del__ shuts it down: set before any raise
        if unknown:
            raise ConfigError(
                f"GPURunner: unknown --runner-params {', '.join(sorted(unknown))}; "
                "use gpus, cpu_workers (or max_workers) and threads (e.g. gpus=cpu,cpu_workers=2)"
            )
        if max_workers is not None:
            if cpu_workers not in (1, max_workers):
                raise ConfigError(
                    f"GPURunner: cpu_workers={cpu_workers!r} and max_workers={max_workers!r} "
                    "name the same setting; give one of them"
                )
            cpu_workers = max_workers
        if isinstance(gpus, int) and not isinstance(gpus, bool):
            typed = raw_runner_param("gpus")
            if typed is not None and typed != str(gpus):
                gpus = typed  # what OmegaConf read as a number, e.g. 4:5:6:7 -> 882367
        # ParallelRunner.__init__, except that the manager of the shared-memory datasets (a
        # process) ends with this one even if it is killed, as the node processes do.
        AbstractRunner.__init__(self, is_async=is_async)
        self._manager = ParallelRunnerManager()
        self._manager.start(exit_with_parent)
        self._slots = resolve_slots(gpus, cpu_workers)
        if not is_integer(threads) or threads < 1:
            raise ConfigError(f"GPURunner: threads={threads!r} must be a whole number ≥ 1")
        self._threads = threads
        self._max_workers = len(self._slots)
        self._dependencies: dict[Node, set[Node]] = {}
        self._executor: NodeExecutor | None = None

    @property
    def slots(self) -> list[Slot]:
        """Where ``gpu`` nodes run."""
        return list(self._slots)

    @classmethod
    def _validate_nodes(cls, nodes: Iterable[Node]) -> None:
        """Only the ``gpu`` nodes travel to another process, so only they must pickle."""
        super()._validate_nodes([node for node in nodes if GPU_TAG in node.tags])

    @classmethod
    def _validate_catalog(cls, catalog: SharedMemoryCatalogProtocol) -> None:  # type: ignore[override]
        """Nothing for the whole catalog: only a ``gpu`` node's own datasets travel to its
        process (:func:`~hed.runners.process.node_catalog`), checked by
        :meth:`_check_gpu_datasets` before the first node."""

    @staticmethod
    def _check_gpu_datasets(pipeline: Pipeline, catalog: SharedMemoryCatalogProtocol) -> None:
        """Refuse a run whose ``gpu`` nodes' datasets cannot be sent to their processes, with
        the pickler their tasks travel with (:func:`~hed.runners.process.pickle_task`:
        datasets on an object store pass, which plain pickle refuses).

        Raises:
            ConfigError: one line naming each dataset that cannot be sent, and why.
        """
        gpu_nodes = [node for node in pipeline.nodes if GPU_TAG in node.tags]
        names = {n for node in gpu_nodes for n in (*node.inputs, *node.outputs)}
        bad = []
        for name in sorted(names):
            try:
                pickle_task(catalog.get(name, fallback_to_runtime_pattern=True))
            except Exception as exc:
                bad.append(f"{name} ({failure_reason(exc)})")
        if bad:
            raise ConfigError(
                f"GPURunner: dataset(s) {'; '.join(bad)} of a gpu node cannot be pickled for its "
                "process; use one that pickles (no lambda, open handle or single-process cache "
                "such as CachedDataset), or SequentialRunner"
            )

    def _get_executor(self, max_workers: int) -> Executor:
        self._executor = NodeExecutor(self._slots, self._threads, self._dependencies, self._logger)
        return self._executor

    def _run(
        self,
        pipeline: Pipeline,
        catalog: SharedMemoryCatalogProtocol,  # type: ignore[override]
        hook_manager: PluginManager | None = None,
        run_id: str | None = None,
    ) -> None:
        """Kedro's scheduler with this runner's executor; raise the failures at the end.

        Raises:
            FailedNodesError: one or more nodes failed (the others ran).
        """
        self._dependencies = pipeline.node_dependencies
        self._check_gpu_datasets(pipeline, catalog)
        try:
            with sigterm_as_exit():
                # AbstractRunner's, not ParallelRunner's: that one drops hook_manager, which the
                # nodes run in this process need.
                AbstractRunner._run(self, pipeline, catalog, hook_manager, run_id)
        except KeyboardInterrupt:
            executor = self._executor
            settled = set() if executor is None else executor.completed()
            unfinished = [n for n in pipeline.nodes if n.name not in settled]
            # the first unfinished nodes: --from-nodes runs them and everything after them
            first = [
                n.name
                for n in unfinished
                if not any(d.name not in settled for d in self._dependencies.get(n, ()))
            ]
            starts = resume_nodes(pipeline, first, catalog)
            raise RunInterruptedError(
                f"interrupted (Ctrl-C): {len(pipeline.nodes) - len(unfinished)} of "
                f"{len(pipeline.nodes)} node(s) completed and kept their outputs; resume with: "
                f"{self.resume_command(starts)}"
            ) from None
        executor = self._executor
        if executor is not None and executor.failures:
            starts = resume_nodes(pipeline, executor.failures, catalog)
            raise FailedNodesError(executor.failures, executor.skipped, self.resume_command(starts))

    def __del__(self) -> None:
        if getattr(self, "_manager", None) is not None:
            super().__del__()

    def resume_command(self, start_nodes: Iterable[str]) -> str:
        """The command that reruns ``start_nodes`` and everything downstream of them.

        ``--from-nodes``, not ``--only-missing-outputs``: that flag skips every node whose
        outputs exist, and with Kedro's versioned datasets an older run's tables and figures
        exist, so the nodes downstream of a regenerated shard would not run again. Every node
        that is not downstream of a failure has completed (siblings go on).

        Under ``kedro run`` it is that very command with ``--from-nodes``
        (:func:`hed.runners.resume.resume_command`); otherwise a ``kedro run`` with this
        runner, its parameters and ``--env $KEDRO_ENV`` when set.

        Args:
            start_nodes: where the resume starts (:func:`hed.runners.resume.resume_nodes`:
                the failed nodes, or the nearest nodes upstream of them whose inputs are on
                disk).
        """
        env = os.environ.get("KEDRO_ENV")
        # the name users type (hed.runners.<Runner>), not the defining module's
        module = type(self).__module__
        if module.startswith("hed.runners."):
            module = "hed.runners"
        runner = f"{module}.{type(self).__qualname__}"
        args = ["--runner", runner, "--runner-params", self._runner_params()]
        fallback = ["run", *(["--env", env] if env else []), *args]
        return resume_command(sorted(start_nodes, key=dispatch_key), fallback)

    def _runner_params(self) -> str:
        ids = [slot.cuda_visible_devices for slot in self._slots]
        if not ids[0]:
            params = f"gpus=cpu,cpu_workers={len(ids)}"
        else:
            params = f"gpus=[{ids[0]}]" if len(ids) == 1 else f"gpus={':'.join(ids)}"
        return params + (f",threads={self._threads}" if self._threads != 1 else "")
