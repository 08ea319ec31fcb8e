"""The executor Kedro's scheduler submits ready nodes to: ``gpu`` nodes to slots, others to threads.

The public executor API of HED's runners:

* :class:`NodeExecutor` — a ``concurrent.futures.Executor`` for ``AbstractRunner._run``. A
  ``gpu`` node waits in a queue (:func:`hed.runners.slots.dispatch_key` order) for a free
  :class:`~hed.runners.slots.Slot` and runs through :meth:`NodeExecutor.run_on_slot` (a fresh
  spawned process by default, :func:`hed.runners.process.child_main`; a subclass may run it
  elsewhere: :class:`hed.runners.ray.RayNodeExecutor` submits a Ray task). Other nodes run on
  threads of this process. A failed node is recorded, not raised; its dependents are skipped.
* :class:`FailedNodesError` / :class:`RunInterruptedError` — what a runner raises at the end.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import multiprocessing
import signal
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from multiprocessing.connection import wait as wait_for_ready
from typing import TYPE_CHECKING, Any

from kedro.framework import project as kedro_project
from kedro.runner.task import Task

from hed.core.cpus import allowed_cpus, thread_shares
from hed.errors import HEDError, NodeFailuresError
from hed.runners.process import (
    child_main,
    describe_exit,
    failure_reason,
    node_catalog,
    pickle_task,
    signal_group,
    traceback_to_log,
)
from hed.runners.slots import Slot, dispatch_key

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from kedro.pipeline.node import Node

GPU_TAG = "gpu"
TERMINATE_GRACE_S = 10.0  # SIGTERM → SIGKILL for a node's process group when a run is stopped


class FailedNodesError(NodeFailuresError):
    """Some nodes failed; the others ran. The message names each and how to resume.

    Attributes:
        failures: failed node name → one-line reason.
        skipped: node not run → the failed or skipped upstream nodes it needed.
        resume_command: the ``kedro run ... --from-nodes <start>`` command to run next
            (:func:`hed.runners.resume.resume_nodes`).
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
        lines += [
            "Rerun them (from the nearest nodes whose inputs are on disk) and everything after "
            "them with:",
            f"  {resume_command}",
        ]
        super().__init__("\n".join(lines))

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.failures, self.skipped, self.resume_command)


class RunInterruptedError(HEDError, KeyboardInterrupt):
    """The run was interrupted (Ctrl-C); the message names the command that resumes it.

    A ``KeyboardInterrupt`` still (code that stops on Ctrl-C stops on it), and a HED error:
    ``kedro run`` (:mod:`hed.cli`) shows its one line and exits with status 130, where click
    would print ``Aborted!``.
    """


class NodeExecutor(Executor):
    """Where Kedro's scheduler sends ready nodes: ``gpu`` nodes to slots, others to threads.

    Futures always resolve to the node, failed or not, so Kedro's scheduler keeps going; the
    failures are collected in :attr:`failures` and nodes downstream of one are skipped.
    A ``gpu`` node waits in a queue ordered by :func:`dispatch_key`. Kedro submits the nodes
    that became ready together one by one, so a free slot does not take the best queued node
    while a better one is ready (all its inputs settled here) but not yet submitted.

    To run ``gpu`` nodes elsewhere, subclass and override :meth:`run_on_slot` (it may use
    :attr:`condition`, :attr:`stopped`, :attr:`bootstrap` and :attr:`logger`; see
    :class:`hed.runners.ray.RayNodeExecutor`).

    Args:
        slots: where ``gpu`` nodes run, one at a time each
            (:func:`~hed.runners.slots.resolve_slots`).
        threads: threads of this process for the other nodes.
        dependencies: ``Pipeline.node_dependencies`` (node → the nodes it needs).
        logger: where node starts, ends and failures are logged (the runner's logger).

    Attributes:
        failures: failed node name → one-line reason (:func:`~hed.runners.process.failure_reason`).
        skipped: node not run → the failed or skipped upstream nodes it needed.
        condition: the lock (a ``threading.Condition``) guarding the queue and the live tasks.
        bootstrap: ``(package name, logging configuration)`` a child sets the project up with.
        cpu_threads: slot → the CPU threads its node processes may use: the CPUs this
            process may use (:func:`hed.core.cpus.allowed_cpus`) split between the slots
            (:func:`hed.core.cpus.thread_shares`).
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
        self.logger = logger
        self.condition = threading.Condition()
        self._queue: list[tuple[tuple[str | int, ...], int, Task, Future]] = []  # a heap
        self._order = itertools.count()
        self._submitted: set[Node] = set()
        self._settled: set[Node] = set()
        self._broken: set[Node] = set()  # failed or skipped
        self._live: dict[int, BaseProcess] = {}
        self._closing = False
        self._stopped = False
        self._context = multiprocessing.get_context("spawn")
        self.bootstrap = (kedro_project.PACKAGE_NAME, dict(kedro_project.LOGGING))
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="hed-node")
        self._slot_index = {s: k for k, s in enumerate(slots)}
        # the node processes run at once: each takes its share of the CPUs, not all of them
        shares = thread_shares(allowed_cpus(), len(slots))
        self.cpu_threads = {s: share for s, share in zip(slots, shares, strict=True)}
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
        with self.condition:
            if self._closing:
                raise RuntimeError("cannot submit a node after the executor was shut down")
            self._submitted.add(node)
            broken = sorted(d.name for d in self._dependencies.get(node, ()) if d in self._broken)
            if not broken and GPU_TAG in node.tags:
                heapq.heappush(self._queue, (self._keys[node], next(self._order), task, future))
                self.condition.notify_all()
                return future
        if broken:
            self.logger.warning("Skipping node %s: %s did not run", node.name, ", ".join(broken))
            self._settle(node, future, skipped=broken)
        else:
            self._pool.submit(self._run_here, task, future)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self.condition:
            self._closing = True
            queued, self._queue = (self._queue, []) if cancel_futures else ([], self._queue)
            self.condition.notify_all()
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

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` ran (Ctrl-C, SIGTERM): no new node process may start."""
        return self._stopped

    def completed(self) -> set[str]:
        """Names of the nodes that ran to the end without failing."""
        with self.condition:
            return {n.name for n in self._settled if n not in self._broken}

    def stop(self) -> None:
        """Drop queued nodes and stop every running child's process group (SIGTERM, SIGKILL)."""
        with self.condition:
            self._stopped = self._closing = True
            queued, self._queue = self._queue, []
            live = list(self._live.values())
            self.condition.notify_all()
        for *_, future in queued:
            future.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if live:
            self.logger.warning("Stopping %d running node process(es)", len(live))
        for process in live:
            signal_group(process.pid, signal.SIGTERM)
        running = {process.sentinel: process for process in live}
        deadline = time.monotonic() + TERMINATE_GRACE_S
        while running and (left := deadline - time.monotonic()) > 0:
            for sentinel in wait_for_ready(list(running), timeout=left):
                running.pop(sentinel)
        for process in running.values():
            signal_group(process.pid, signal.SIGKILL)

    def _settle(
        self,
        node: Node,
        future: Future,
        failure: str | None = None,
        skipped: list[str] | None = None,
    ) -> None:
        with self.condition:
            self._settled.add(node)
            if failure is not None:
                self.failures[node.name] = failure
                self._broken.add(node)
            if skipped is not None:
                self.skipped[node.name] = skipped
                self._broken.add(node)
            self.condition.notify_all()
        future.set_result(node)

    def _run_here(self, task: Task, future: Future) -> None:
        try:
            task.execute()
        except Exception as exc:
            reason = failure_reason(exc)
            if traceback_to_log(exc):
                self.logger.exception("Node %s failed", task.node.name)
            else:
                self.logger.error("Node %s failed: %s", task.node.name, reason)
            self._settle(task.node, future, failure=reason)
        else:
            self._settle(task.node, future)

    def _serve(self, slot: Slot) -> None:
        while True:
            with self.condition:
                while (item := self._next()) is None:
                    if self._closing and not self._queue:
                        return
                    self.condition.wait()
            *_, task, future = item
            try:
                failure = self.run_on_slot(slot, task)
            except Exception as exc:  # never leave a future unresolved: Kedro would wait forever
                self.logger.exception("Node %s could not be run on %s", task.node.name, slot.label)
                failure = failure_reason(exc)
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

    def run_on_slot(self, slot: Slot, task: Task) -> str | None:
        """Run ``task`` in a fresh spawned process on ``slot``; return the failure, if any.

        Called on the slot's own thread; the override point for running ``gpu`` nodes
        elsewhere. Returns None when the node ran to the end, else its one-line reason.
        """
        node = task.node
        # No hook manager (it cannot be pickled): the child builds its own from settings.HOOKS;
        # only the node's own datasets (the run's other datasets need not pickle).
        catalog = node_catalog(node, task.catalog)
        child = Task(node=node, catalog=catalog, is_async=task.is_async, run_id=task.run_id)
        try:
            payload = pickle_task(child)
        except Exception as exc:
            self.logger.exception("Node %s cannot be sent to a child process", node.name)
            return f"cannot pickle its task: {failure_reason(exc)}"
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=child_main,
            args=(
                slot.cuda_visible_devices,
                self._slot_index[slot],
                payload,
                *self.bootstrap,
                sender,
            ),
            kwargs={"cpu_threads": self.cpu_threads[slot]},
            name=f"hed:{node.name}",
        )
        with self.condition:
            if self._stopped:
                return "not started: the run was stopped"
            process.start()
            self._live[process.pid] = process
        sender.close()
        pid, started = process.pid, time.perf_counter()
        self.logger.info("Running node %s on %s (pid %d)", node.name, slot.label, pid)
        try:
            status, reason, details = receiver.recv()
        except EOFError:  # died without a word: killed, segfault, out of memory
            status, reason, details = "error", "", ""
        process.join()
        with self.condition:
            self._live.pop(pid, None)
        receiver.close()
        if status == "ok" and process.exitcode == 0:
            elapsed = time.perf_counter() - started
            where = slot.label
            if reason == "cpu" and slot.cuda_visible_devices:  # a GPU slot without CUDA
                where = f"CPU ({slot.label} named, no CUDA device)"
            self.logger.info(
                "Node %s done on %s (pid %d) in %.1f s", node.name, where, pid, elapsed
            )
            return None
        reason = reason or describe_exit(process.exitcode)
        if self._stopped:  # stopped by Ctrl-C / SIGTERM, not a failure of the node
            self.logger.warning("Node %s interrupted on %s (pid %d)", node.name, slot.label, pid)
            return f"interrupted ({reason})"
        self.logger.error(
            "Node %s failed on %s (pid %d): %s%s",
            node.name,
            slot.label,
            pid,
            reason,
            f"\n{details}" if details else "",
        )
        return reason
