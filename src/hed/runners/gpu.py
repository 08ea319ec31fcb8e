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

import heapq
import itertools
import logging
import multiprocessing
import os
import pickle
import re
import shlex
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_ready
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any

import click
from kedro.framework import project as kedro_project
from kedro.framework.hooks.manager import (
    _create_hook_manager,
    _register_hooks,
    _register_hooks_entry_points,
)
from kedro.runner import AbstractRunner, ParallelRunner
from kedro.runner.parallel_runner import ParallelRunnerManager
from kedro.runner.task import Task

from hed.config.params import is_integer
from hed.errors import (
    TRACEBACK_VARIABLE,
    ConfigError,
    HEDError,
    NodeFailuresError,
    hed_error_in,
    one_line,
    short_message,
)

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from kedro.io import SharedMemoryCatalogProtocol
    from kedro.pipeline import Pipeline
    from kedro.pipeline.node import Node
    from pluggy import PluginManager

GPU_TAG = "gpu"
#: Set in each node process to its slot's 0-based index in the runner's slot list.
SLOT_INDEX_ENV = "HED_SLOT_INDEX"
TERMINATE_GRACE_S = 10.0  # SIGTERM → SIGKILL for a node's process group when a run is stopped

logger = logging.getLogger(__name__)
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class Slot:
    """A place where one ``gpu`` node runs at a time: a GPU, or a CPU worker without one.

    Attributes:
        label: shown in logs, e.g. ``GPU 3`` or ``CPU worker 0``.
        cuda_visible_devices: the child's ``CUDA_VISIBLE_DEVICES`` (``""``: no GPU).
    """

    label: str
    cuda_visible_devices: str


class FailedNodesError(NodeFailuresError):
    """Some nodes failed; the others ran. The message names each and how to resume.

    Attributes:
        failures: failed node name → one-line reason.
        skipped: node not run → the failed or skipped upstream nodes it needed.
        resume_command: the ``kedro run ... --from-nodes <failed>`` command to run next.
    """

    def __init__(
        self, failures: dict[str, str], skipped: dict[str, list[str]], resume_command: str
    ) -> None:
        self.failures = failures
        self.skipped = skipped
        self.resume_command = resume_command
        lines = [f"{len(failures)} node(s) failed:"]
        lines += [f"  - {name}: {failures[name]}" for name in sorted(failures, key=dispatch_key)]
        if skipped:
            names = ", ".join(sorted(skipped, key=dispatch_key))
            lines.append(f"{len(skipped)} node(s) downstream of them did not run: {names}")
        lines += ["Rerun the failed nodes and everything after them with:", f"  {resume_command}"]
        super().__init__("\n".join(lines))

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.failures, self.skipped, self.resume_command)


class RunInterruptedError(HEDError, KeyboardInterrupt):
    """The run was interrupted (Ctrl-C); the message names the command that resumes it.

    A ``KeyboardInterrupt`` still (the exit status stays an interruption's), and a HED error,
    so the command line shows its one line, not a traceback.
    """


def dispatch_key(node_name: str) -> tuple[str | int, ...]:
    """Natural sort key: ``r.step_2.shard_0.x`` sorts before ``r.step_10.shard_0.x``.

    Digit runs compare as numbers, everything else as text, so names of the form
    ``<run>.step_<step>.shard_<k>.<name>`` sort by (run, step, shard) and any other names
    sort by name.
    """
    parts = _DIGITS.split(node_name)  # text, digits, text, ...: same types at the same places
    return tuple(int(part) if i % 2 else part for i, part in enumerate(parts))


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as ``CUDA_VISIBLE_DEVICES`` entries.

    The entries of ``CUDA_VISIBLE_DEVICES`` when it is set, else ``0 .. n-1``; cut to the
    number of devices torch can see (none without CUDA).
    """
    try:
        import torch

        count = torch.cuda.device_count()
    except ImportError:
        count = 0
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [i.strip() for i in env.split(",")] if env is not None else [str(i) for i in range(count)]
    return ids[:count]


GpuSpec = str | int | Sequence[str | int] | None

#: How ``gpus`` may be written, for error messages.
GPU_SPELLINGS = "gpus=4:5:6:7, gpus=4-7, gpus=[3] (one GPU), gpus=2 (the first two), gpus=cpu"
_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")
_LIST = re.compile(r"^\[(.*)\]$")


def gpu_ids_from_text(text: str) -> list[str]:
    """Parse GPU ids as users type them: ``4:5:6:7``, ``4,5,6,7``, ``4-7``, ``[4,5,6,7]``.

    Items are separated by ``:`` or ``,``; an item ``a-b`` (a ≤ b, whole numbers) stands for
    ``a, a+1, ..., b``; one pair of brackets around the list is allowed. Any other item (a
    device UUID such as ``GPU-5f1c...``) is kept verbatim for ``CUDA_VISIBLE_DEVICES``.

    Returns:
        The ids in order, e.g. ``["4", "5", "6", "7"]``.

    Raises:
        ConfigError: an empty list or item, a reversed range (``7-4``) or a repeated id.
    """
    body = text.strip()
    if match := _LIST.match(body):
        body = match.group(1)
    ids: list[str] = []
    for item in (part.strip().strip("'\"") for part in re.split(r"[:,]", body)):
        span = _RANGE.match(item)
        if span and int(span.group(1)) <= int(span.group(2)):
            ids += [str(i) for i in range(int(span.group(1)), int(span.group(2)) + 1)]
        elif item and not span and not re.fullmatch(r"[\d\s-]*-[\d\s-]*", item):
            ids.append(item)
        else:
            ids = []
            break
    if not ids or len(set(ids)) != len(ids):
        raise ConfigError(
            f"GPURunner: gpus={text!r} is not a list of GPU ids; write one of {GPU_SPELLINGS}"
        )
    return ids


def raw_runner_param(name: str, argv: Sequence[str] | None = None) -> str | None:
    """The text of ``name=...`` in ``kedro run``'s ``--runner-params``, as typed.

    Kedro reads ``--runner-params`` with OmegaConf's dotlist parser, whose YAML 1.1 rules turn
    ``4:5:6:7`` into the base-60 integer 882367 (and ``4:5`` into 245) before the runner sees
    it; the command line still holds what the user typed. Only ``kedro run`` is read (a
    ``click`` context whose command is ``run``).

    Args:
        name: the parameter, e.g. ``"gpus"``.
        argv: the command line (default ``sys.argv``).

    Returns:
        The value as typed, or None when not under ``kedro run`` or not given there.
    """
    if argv is None:
        ctx = click.get_current_context(silent=True)
        if ctx is None or ctx.command.name != "run":
            return None
        argv = sys.argv
    value = None
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--runner-params" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--runner-params="):
            value = arg.partition("=")[2]
    if value is None:
        return None
    found = None
    for item in value.split(","):  # as Kedro splits it
        key, equals, text = item.partition("=")
        if equals and key.strip() == name:
            found = text.strip()
    return found


def resolve_slots(gpus: GpuSpec = None, cpu_workers: int = 1) -> list[Slot]:
    """Turn the runner's ``gpus`` / ``cpu_workers`` parameters into slots.

    Args:
        gpus: ids as text (``"4:5:6:7"``, ``"4-7"``, ``"[4,5,6,7]"``, see
            :func:`gpu_ids_from_text`) or a list (``[3]``): device ids, written verbatim into
            ``CUDA_VISIBLE_DEVICES`` (a UUID works too); an int ``n``: the first ``n`` visible
            devices; ``"cpu"``: no GPU; ``None``: every visible device, or no GPU when none is.
        cpu_workers: without a GPU, how many ``gpu`` nodes run at once (each on CPU).

    Returns:
        One slot per device, or ``cpu_workers`` CPU slots.

    Raises:
        ConfigError: a malformed, empty or impossible ``gpus``, or ``cpu_workers`` < 1.
    """
    if isinstance(gpus, bool):
        raise ConfigError(
            f"GPURunner: gpus={gpus!r} is not a GPU count or a list of GPU ids; "
            f"write one of {GPU_SPELLINGS}"
        )
    if gpus is None:
        ids = visible_gpus()
    elif isinstance(gpus, int):
        visible = visible_gpus()
        if not 0 < gpus <= len(visible):
            raise ConfigError(
                f"GPURunner: gpus={gpus} asks for {gpus} GPU(s) but {len(visible)} are visible; "
                f"write one of {GPU_SPELLINGS}"
            )
        ids = visible[:gpus]
    elif isinstance(gpus, str) and gpus.strip().lower() == "cpu":
        ids = []
    elif isinstance(gpus, str):
        ids = gpu_ids_from_text(gpus)
    else:
        ids = [str(item).strip() for item in gpus]
        if not ids or "" in ids or len(set(ids)) != len(ids):
            raise ConfigError(
                f"GPURunner: gpus={gpus!r} is not a list of GPU ids; write one of {GPU_SPELLINGS}"
            )
    if ids and visible_gpus():
        # CUDA_VISIBLE_DEVICES=abc hides every GPU: the node would silently run on CPU
        for item in ids:
            if not re.fullmatch(r"\d+|(GPU|MIG)-[0-9A-Za-z/-]+", item):
                raise ConfigError(
                    f"GPURunner: gpus={gpus} names {item!r}, which is neither a GPU index nor a "
                    f"UUID (GPU-..., MIG-...): CUDA would hide every GPU from the node; write "
                    f"one of {GPU_SPELLINGS}"
                )
    if ids:
        if not isinstance(gpus, int) and gpus is not None and not visible_gpus():
            logger.warning(
                "GPURunner: gpus=%s names GPUs but torch sees no CUDA device here: the gpu "
                "nodes run on CPU, one per named id (use gpus=cpu,cpu_workers=N to say so)",
                gpus if isinstance(gpus, str) else ":".join(map(str, gpus)),
            )
        return [Slot(f"GPU {i}", i) for i in ids]
    if not is_integer(cpu_workers) or cpu_workers < 1:
        raise ConfigError(f"GPURunner: cpu_workers={cpu_workers!r} must be a whole number ≥ 1")
    return [Slot(f"CPU worker {k}", "") for k in range(cpu_workers)]


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
        self._manager.start(_exit_with_parent)
        self._slots = resolve_slots(gpus, cpu_workers)
        if not is_integer(threads) or threads < 1:
            raise ConfigError(f"GPURunner: threads={threads!r} must be a whole number ≥ 1")
        self._threads = threads
        self._max_workers = len(self._slots)
        self._dependencies: dict[Node, set[Node]] = {}
        self._executor: _NodeExecutor | None = None

    @property
    def slots(self) -> list[Slot]:
        """Where ``gpu`` nodes run."""
        return list(self._slots)

    @classmethod
    def _validate_nodes(cls, nodes: Iterable[Node]) -> None:
        """Only the ``gpu`` nodes travel to another process, so only they must pickle."""
        super()._validate_nodes([node for node in nodes if GPU_TAG in node.tags])

    def _get_executor(self, max_workers: int) -> Executor:
        self._executor = _NodeExecutor(self._slots, self._threads, self._dependencies, self._logger)
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
        try:
            with _sigterm_as_exit():
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
            raise RunInterruptedError(
                f"interrupted (Ctrl-C): {len(pipeline.nodes) - len(unfinished)} of "
                f"{len(pipeline.nodes)} node(s) completed and kept their outputs; resume with: "
                f"{self.resume_command(first)}"
            ) from None
        executor = self._executor
        if executor is not None and executor.failures:
            raise FailedNodesError(
                executor.failures, executor.skipped, self.resume_command(executor.failures)
            )

    def __del__(self) -> None:
        if getattr(self, "_manager", None) is not None:
            super().__del__()

    def resume_command(self, failed_nodes: Iterable[str]) -> str:
        """The command that reruns the failed nodes and everything downstream of them.

        ``--from-nodes <failed>``, not ``--only-missing-outputs``: that flag skips every node
        whose outputs exist, and with Kedro's versioned datasets an older run's tables and
        figures exist, so the nodes downstream of a regenerated shard would not run again.
        Every node that is not downstream of a failure has completed (siblings go on).

        Under ``kedro run`` it is that very command with ``--from-nodes`` (an earlier
        ``--from-nodes`` and ``--only-missing-outputs`` are dropped); otherwise a ``kedro run``
        with this runner, its parameters and ``--env $KEDRO_ENV`` when set.

        Args:
            failed_nodes: names of the nodes that failed.
        """
        from_nodes = ["--from-nodes", ",".join(sorted(failed_nodes, key=dispatch_key))]
        ctx = click.get_current_context(silent=True)
        if ctx is not None and ctx.command.name == "run":
            args, dropped = [], False
            for arg in sys.argv[1:]:
                if dropped:
                    dropped = False
                elif arg == "--from-nodes":
                    dropped = True
                elif arg != "--only-missing-outputs" and not arg.startswith("--from-nodes="):
                    args.append(arg)
            return shlex.join(["kedro", *args, *from_nodes])
        env = os.environ.get("KEDRO_ENV")
        # the name users type (hed.runners.<Runner>), not the defining module's
        module = type(self).__module__
        if module.startswith("hed.runners."):
            module = "hed.runners"
        runner = f"{module}.{type(self).__qualname__}"
        args = ["--runner", runner, "--runner-params", self._runner_params()]
        return shlex.join(["kedro", "run", *(["--env", env] if env else []), *args, *from_nodes])

    def _runner_params(self) -> str:
        ids = [slot.cuda_visible_devices for slot in self._slots]
        if not ids[0]:
            params = f"gpus=cpu,cpu_workers={len(ids)}"
        else:
            params = f"gpus=[{ids[0]}]" if len(ids) == 1 else f"gpus={':'.join(ids)}"
        return params + (f",threads={self._threads}" if self._threads != 1 else "")


class _NodeExecutor(Executor):
    """Where Kedro's scheduler sends ready nodes: ``gpu`` nodes to slots, others to threads.

    Futures always resolve to the node, failed or not, so Kedro's scheduler keeps going; the
    failures are collected in :attr:`failures` and nodes downstream of one are skipped.
    A ``gpu`` node waits in a queue ordered by :func:`dispatch_key`. Kedro submits the nodes
    that became ready together one by one, so a free slot does not take the best queued node
    while a better one is ready (all its inputs settled here) but not yet submitted.
    """

    def __init__(
        self,
        slots: Sequence[Slot],
        threads: int,
        dependencies: dict[Node, set[Node]],
        logger: logging.Logger,
    ) -> None:
        self.failures: dict[str, str] = {}
        self.skipped: dict[str, list[str]] = {}
        self._dependencies = dependencies
        self._keys = {n: dispatch_key(n.name) for n in dependencies if GPU_TAG in n.tags}
        self._logger = logger
        self._cond = threading.Condition()
        self._queue: list[tuple[tuple[str | int, ...], int, Task, Future]] = []  # a heap
        self._order = itertools.count()
        self._submitted: set[Node] = set()
        self._settled: set[Node] = set()
        self._broken: set[Node] = set()  # failed or skipped
        self._live: dict[int, BaseProcess] = {}
        self._closing = False
        self._stopped = False
        self._context = multiprocessing.get_context("spawn")
        self._bootstrap = (kedro_project.PACKAGE_NAME, dict(kedro_project.LOGGING))
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="hed-node")
        self._slot_index = {s: k for k, s in enumerate(slots)}
        self._workers = [
            threading.Thread(target=self._serve, args=(s,), name=f"hed-{s.label}", daemon=True)
            for s in slots
        ]
        for worker in self._workers:
            worker.start()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        """Queue a Kedro ``Task``: on a slot if its node is tagged ``gpu``, else on a thread."""
        task: Task = fn
        node = task.node
        future: Future = Future()
        with self._cond:
            if self._closing:
                raise RuntimeError("cannot submit a node after the executor was shut down")
            self._submitted.add(node)
            broken = sorted(d.name for d in self._dependencies.get(node, ()) if d in self._broken)
            if not broken and GPU_TAG in node.tags:
                heapq.heappush(self._queue, (self._keys[node], next(self._order), task, future))
                self._cond.notify_all()
                return future
        if broken:
            self._logger.warning("Skipping node %s: %s did not run", node.name, ", ".join(broken))
            self._settle(node, future, skipped=broken)
        else:
            self._pool.submit(self._run_here, task, future)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._cond:
            self._closing = True
            queued, self._queue = (self._queue, []) if cancel_futures else ([], self._queue)
            self._cond.notify_all()
        for *_, future in queued:
            future.cancel()
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        if wait:
            for worker in self._workers:
                worker.join()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is not None:  # Ctrl-C, SIGTERM or a scheduler error: stop the children
            self.stop()
        self.shutdown(wait=True)
        return False

    def completed(self) -> set[str]:
        """Names of the nodes that ran to the end without failing."""
        with self._cond:
            return {n.name for n in self._settled if n not in self._broken}

    def stop(self) -> None:
        """Drop queued nodes and stop every running child's process group (SIGTERM, SIGKILL)."""
        with self._cond:
            self._stopped = self._closing = True
            queued, self._queue = self._queue, []
            live = list(self._live.values())
            self._cond.notify_all()
        for *_, future in queued:
            future.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if live:
            self._logger.warning("Stopping %d running node process(es)", len(live))
        for process in live:
            _signal_group(process.pid, signal.SIGTERM)
        running = {process.sentinel: process for process in live}
        deadline = time.monotonic() + TERMINATE_GRACE_S
        while running and (left := deadline - time.monotonic()) > 0:
            for sentinel in wait_for_ready(list(running), timeout=left):
                running.pop(sentinel)
        for process in running.values():
            _signal_group(process.pid, signal.SIGKILL)

    def _settle(
        self,
        node: Node,
        future: Future,
        failure: str | None = None,
        skipped: list[str] | None = None,
    ) -> None:
        with self._cond:
            self._settled.add(node)
            if failure is not None:
                self.failures[node.name] = failure
                self._broken.add(node)
            if skipped is not None:
                self.skipped[node.name] = skipped
                self._broken.add(node)
            self._cond.notify_all()
        future.set_result(node)

    def _run_here(self, task: Task, future: Future) -> None:
        try:
            task.execute()
        except Exception as exc:
            reason = _one_line(exc)
            if _traceback_to_log(exc):
                self._logger.exception("Node %s failed", task.node.name)
            else:
                self._logger.error("Node %s failed: %s", task.node.name, reason)
            self._settle(task.node, future, failure=reason)
        else:
            self._settle(task.node, future)

    def _serve(self, slot: Slot) -> None:
        while True:
            with self._cond:
                while (item := self._next()) is None:
                    if self._closing and not self._queue:
                        return
                    self._cond.wait()
            *_, task, future = item
            try:
                failure = self._run_child(slot, task)
            except Exception as exc:  # never leave a future unresolved: Kedro would wait forever
                self._logger.exception("Node %s could not be run on %s", task.node.name, slot.label)
                failure = _one_line(exc)
            self._settle(task.node, future, failure=failure)

    def _next(self) -> tuple[tuple[str | int, ...], int, Task, Future] | None:
        """Pop the best queued node, unless a better ``gpu`` node is ready but not submitted."""
        if not self._queue:
            return None
        best = self._queue[0][0]
        if not self._closing:
            for node, key in self._keys.items():
                ready = self._dependencies[node] <= self._settled
                if key < best and ready and node not in self._submitted:
                    return None
        return heapq.heappop(self._queue)

    def _run_child(self, slot: Slot, task: Task) -> str | None:
        """Run ``task`` in a fresh spawned process on ``slot``; return the failure, if any."""
        node = task.node
        # No hook manager (it cannot be pickled): the child builds its own from settings.HOOKS.
        child = Task(node=node, catalog=task.catalog, is_async=task.is_async, run_id=task.run_id)
        try:
            payload = bytes(ForkingPickler.dumps(child))
        except Exception as exc:
            self._logger.exception("Node %s cannot be sent to a child process", node.name)
            return f"cannot pickle its task: {_one_line(exc)}"
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_child_main,
            args=(
                slot.cuda_visible_devices,
                self._slot_index[slot],
                payload,
                *self._bootstrap,
                sender,
            ),
            name=f"hed:{node.name}",
        )
        with self._cond:
            if self._stopped:
                return "not started: the run was stopped"
            process.start()
            self._live[process.pid] = process
        sender.close()
        pid, started = process.pid, time.perf_counter()
        self._logger.info("Running node %s on %s (pid %d)", node.name, slot.label, pid)
        try:
            status, reason, details = receiver.recv()
        except EOFError:  # died without a word: killed, segfault, out of memory
            status, reason, details = "error", "", ""
        process.join()
        with self._cond:
            self._live.pop(pid, None)
        receiver.close()
        if status == "ok" and process.exitcode == 0:
            elapsed = time.perf_counter() - started
            where = slot.label
            if reason == "cpu" and slot.cuda_visible_devices:  # a GPU slot without CUDA
                where = f"CPU ({slot.label} named, no CUDA device)"
            self._logger.info(
                "Node %s done on %s (pid %d) in %.1f s", node.name, where, pid, elapsed
            )
            return None
        reason = reason or _describe_exit(process.exitcode)
        if self._stopped:  # stopped by Ctrl-C / SIGTERM, not a failure of the node
            self._logger.warning("Node %s interrupted on %s (pid %d)", node.name, slot.label, pid)
            return f"interrupted ({reason})"
        self._logger.error(
            "Node %s failed on %s (pid %d): %s%s",
            node.name,
            slot.label,
            pid,
            reason,
            f"\n{details}" if details else "",
        )
        return reason


def _child_main(  # noqa: PLR0917 - a Process target's arguments are positional
    cuda_visible_devices: str,
    slot_index: int,
    payload: bytes,
    package_name: str | None,
    logging_config: dict[str, Any] | None,
    result: Connection,
) -> None:
    """Entry point of a node's process: claim the device, set up the project, run the task."""
    # First, before the task's modules (torch among them) are imported by unpickling it.
    os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    os.environ[SLOT_INDEX_ENV] = str(slot_index)  # a vLLM engine's ports (hed.decode.vllm)
    os.setpgid(0, 0)  # lead a process group, so that the node's own helpers are stopped with it
    _exit_with_parent()
    try:
        if package_name:
            kedro_project.configure_project(package_name)
        if logging_config:
            kedro_project.configure_logging(logging_config)
        task: Task = pickle.loads(payload)  # our own parent's payload
        task.hook_manager = _project_hook_manager()
        task.execute()
    except BaseException as exc:  # reported to the parent, whatever it is
        result.send(("error", _one_line(exc), _traceback_to_log(exc)))
        sys.exit(1)
    result.send(("ok", _device_used(), ""))


def _device_used() -> str:
    """``cuda`` if the node's process used torch with a CUDA device, else ``cpu``."""
    torch = sys.modules.get("torch")
    return "cuda" if torch is not None and torch.cuda.is_available() else "cpu"


def _project_hook_manager() -> PluginManager:
    """A hook manager with the project's ``settings.HOOKS`` and plugin hooks, as Kedro builds."""
    settings = kedro_project.settings
    hook_manager = _create_hook_manager()
    _register_hooks(hook_manager, settings.HOOKS)
    # without kedro-viz's: its DatasetStatsHook has no catalog in a child (it warns "no
    # attribute 'datasets'" at every save) and the parent's hooks already track the run
    disabled = (*settings.DISABLE_HOOKS_FOR_PLUGINS, "kedro-viz")
    _register_hooks_entry_points(hook_manager, disabled)
    return hook_manager


def _exit_with_parent() -> None:
    """In a child process: end it as soon as its parent dies, even by SIGKILL.

    A child that leads a process group (a node's) takes the whole group with it.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    leads_group = os.getpgid(0) == os.getpid()

    def watch() -> None:
        wait_for_ready([parent.sentinel])  # readable once the parent's end of the pipe closes
        if leads_group:
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="hed-parent-watch", daemon=True).start()


def _signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by ``pid``, or ``pid`` alone if it leads none yet."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with suppress(ProcessLookupError):
            os.kill(pid, sig)


@contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit`` while a run lasts, so the children are stopped too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        logging.getLogger(__name__).warning("Received SIGTERM: stopping the run")
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _one_line(exc: BaseException) -> str:
    """The reason a node failed: HED's own one-line message in full (with HED's error type,
    also when Kedro wrapped it), else the exception's first line, cut at 300 characters."""
    short = short_message(exc)
    if short is not None and "\n" not in short:
        return short
    reason = one_line(exc, limit=None)
    return one_line(f"{type(exc).__name__}: {reason}" if str(exc).strip() else reason)


def _traceback_to_log(exc: BaseException) -> str:
    """The child's traceback for the parent's log: none for HED's one-line errors (their
    message says everything) unless ``HED_TRACEBACK`` is set; always for anything else."""
    if hed_error_in(exc) is not None and not os.environ.get(TRACEBACK_VARIABLE):
        return ""
    return traceback.format_exc()


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"its process was killed by {signal.Signals(-exitcode).name}"
    return f"its process exited with code {exitcode}"


def __getattr__(name: str) -> Any:
    """``hed.runners.RayRunner`` (:mod:`hed.runners.ray`), imported on first use: Ray is an
    optional extra and slow to import."""
    if name == "RayRunner":
        from hed.runners.ray import RayRunner

        return RayRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
