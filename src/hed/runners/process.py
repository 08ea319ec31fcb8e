"""A node's own process: its entry point, signals, the project's hook manager, failure reasons.

:func:`child_main` is what :class:`hed.runners.executor.NodeExecutor` starts (spawn context) for
each ``gpu`` node: it claims the device, leads a process group, sets up the project
(``configure_project``, the parent's logging, :func:`project_hook_manager`) and runs the
pickled Kedro ``Task``; :func:`pickle_task` is how both runners (also :mod:`hed.runners.ray`)
pickle it, so that datasets on an object store travel. :func:`failure_reason` and
:func:`traceback_to_log` are what a runner reports about a failed node (also its Ray tasks).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import traceback
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_ready
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any

from fsspec import AbstractFileSystem
from kedro.framework import project as kedro_project
from kedro.framework.hooks.manager import (
    _create_hook_manager,
    _register_hooks,
    _register_hooks_entry_points,
)
from kedro.runner.task import Task

from hed.core.cpus import openmp_environment
from hed.decode import progress
from hed.errors import TRACEBACK_VARIABLE, hed_error_in, one_line, short_message

if TYPE_CHECKING:
    from pluggy import PluginManager


#: Set in each node process to its slot's 0-based index in the runner's slot list (a vLLM
#: engine offsets ``VLLM_PORT`` by it, :func:`hed.decode.vllm.slot_port`; a shard's progress
#: bar takes that line of the terminal, :func:`hed.decode.progress.bar_position`).
SLOT_INDEX_ENV = progress.SLOT_INDEX_ENV


def child_main(  # noqa: PLR0917 - a Process target's arguments are positional
    cuda_visible_devices: str,
    slot_index: int,
    payload: bytes,
    package_name: str | None,
    logging_config: dict[str, Any] | None,
    result: Connection,
    cpu_threads: int | None = None,
) -> None:
    """Entry point of a node's process: claim the device, set up the project, run the task.

    ``cpu_threads``: this process's share of the CPUs (:func:`hed.core.cpus.thread_shares`):
    OpenMP/MKL threads are capped to it (a smaller ``OMP_NUM_THREADS`` of the user's stays)
    and idle threads sleep (:func:`hed.core.cpus.openmp_environment`).
    """
    # First, before the task's modules (torch among them) are imported by unpickling it.
    os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    os.environ[SLOT_INDEX_ENV] = str(slot_index)
    os.environ.update(child_thread_environment(cpu_threads, os.environ))
    os.setpgid(0, 0)  # lead a process group, so that the node's own helpers are stopped with it
    # a stopped run's SIGTERM ends the node as an exception: Python's exit handlers then
    # release what the node's libraries hold (tqdm's semaphore: no "leaked semaphore" warning)
    signal.signal(signal.SIGTERM, _raise_exit)
    exit_with_parent()
    try:
        if package_name:
            kedro_project.configure_project(package_name)
        if logging_config:
            kedro_project.configure_logging(logging_config)
        task: Task = pickle.loads(payload)  # our own parent's payload
        task.hook_manager = project_hook_manager()
        task.execute()
    except BaseException as exc:  # reported to the parent, whatever it is
        result.send(("error", failure_reason(exc), traceback_to_log(exc)))
        sys.exit(1)
    result.send(("ok", _device_used(), ""))


def child_thread_environment(cpu_threads: int | None, environ: Mapping[str, str]) -> dict[str, str]:
    """The OpenMP variables of a node's process: idle threads sleep (unless ``environ`` sets
    the variable), and at most ``cpu_threads`` threads (or the ``OMP_NUM_THREADS`` of
    ``environ`` when smaller)."""
    env = {k: v for k, v in openmp_environment().items() if k not in environ}
    if cpu_threads is not None:
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            given = environ.get(name, "")
            threads = (
                min(cpu_threads, int(given)) if given.isdigit() and int(given) else cpu_threads
            )
            env[name] = str(threads)
    return env


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


class TaskPickler(ForkingPickler):
    """``ForkingPickler`` that pickles a filesystem's methods by the name they have on it.

    kedro-datasets' file datasets keep ``fs.glob`` and ``fs.exists`` as attributes. On an async
    filesystem (s3fs, gcsfs) those are made by ``fsspec.asyn.sync_wrapper``: ``glob`` is a
    function set on the instance (``mirror_sync_methods``) that ``functools.wraps`` names
    ``S3FileSystem._glob``, which plain pickle cannot find (``PicklingError``), and ``exists`` a
    class attribute that pickle would send as ``getattr(fs, "_exists")``, the coroutine method
    (a child's ``exists`` would return a coroutine, always true). Both are sent as
    ``getattr(fs, "<public name>")`` here, and the filesystem by fsspec's own reduce (its class
    and storage options), so the receiving process rebuilds the method on its own filesystem.
    Nothing in fsspec or kedro-datasets is changed. A dataset marked ``_SINGLE_PROCESS``
    (Kedro's ``CachedDataset``, Spark's) is refused, as Kedro's ``ParallelRunner`` refuses it.
    """

    def reducer_override(self, obj: Any) -> Any:
        if getattr(type(obj), "_SINGLE_PROCESS", False):
            raise pickle.PicklingError(f"a {type(obj).__name__} works in one process only")
        named = filesystem_method_name(obj)
        if named is None:
            return NotImplemented
        return getattr, named


def filesystem_method_name(obj: Any) -> tuple[AbstractFileSystem, str] | None:
    """``(fs, name)`` such that ``getattr(fs, name)`` gives ``obj``, for a method of an fsspec
    filesystem (bound, or ``sync_wrapper``'s function on the instance); else None."""
    if isinstance(obj, types.MethodType) and isinstance(obj.__self__, AbstractFileSystem):
        fs, func = obj.__self__, obj.__func__
        names = (n for cls in type(fs).__mro__ for n, v in vars(cls).items() if v is func)
    elif isinstance(obj, types.FunctionType) and isinstance(
        getattr(getattr(obj, "__wrapped__", None), "__self__", None), AbstractFileSystem
    ):
        fs = obj.__wrapped__.__self__
        names = (n for n, v in vars(fs).items() if v is obj)
    else:
        return None
    name = next(names, None)
    return None if name is None else (fs, name)


def pickle_task(task: Any) -> bytes:
    """``task`` (a Kedro ``Task``: a node and a catalog of datasets; or a catalog, a dataset)
    pickled for another process with :class:`TaskPickler`.

    Raises:
        pickle.PicklingError, AttributeError, TypeError: something in it cannot be pickled.
    """
    return bytes(TaskPickler.dumps(task))


def node_catalog(node: Any, catalog: Any, catalog_type: type | None = None) -> Any:
    """A catalog with only ``node``'s inputs and outputs: what its task carries to another
    process (the datasets themselves, shared-memory ones with their manager).

    Args:
        node: a Kedro ``Node``.
        catalog: the run's catalog, its datasets materialised (Kedro's runner does that
            before the first node).
        catalog_type: the new catalog's class; default ``type(catalog)``.
    """
    names = [*node.inputs, *node.outputs]
    datasets = {n: catalog.get(n, fallback_to_runtime_pattern=True) for n in names}
    return (catalog_type or type(catalog))(datasets=datasets)


def _device_used() -> str:
    """``cuda`` if the node's process used torch with a CUDA device, else ``cpu``."""
    torch = sys.modules.get("torch")
    return "cuda" if torch is not None and torch.cuda.is_available() else "cpu"


def project_hook_manager() -> PluginManager:
    """A hook manager with the project's ``settings.HOOKS`` and plugin hooks, as Kedro builds."""
    settings = kedro_project.settings
    hook_manager = _create_hook_manager()
    _register_hooks(hook_manager, settings.HOOKS)
    # without kedro-viz's: its DatasetStatsHook has no catalog in a child (it warns "no
    # attribute 'datasets'" at every save) and the parent's hooks already track the run
    disabled = (*settings.DISABLE_HOOKS_FOR_PLUGINS, "kedro-viz")
    _register_hooks_entry_points(hook_manager, disabled)
    return hook_manager


def exit_with_parent() -> None:
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


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by ``pid``, or ``pid`` alone if it leads none yet."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with suppress(ProcessLookupError):
            os.kill(pid, sig)


@contextmanager
def sigterm_as_exit() -> Iterator[None]:
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


def failure_reason(exc: BaseException) -> str:
    """The reason a node failed: HED's own one-line message in full (with HED's error type,
    also when Kedro wrapped it), else the exception's first line, cut at 300 characters."""
    short = short_message(exc)
    if short is not None and "\n" not in short:
        return short
    reason = one_line(exc, limit=None)
    return one_line(f"{type(exc).__name__}: {reason}" if str(exc).strip() else reason)


def traceback_to_log(exc: BaseException) -> str:
    """The child's traceback for the parent's log: none for HED's one-line errors (their
    message says everything) unless ``HED_TRACEBACK`` is set; always for anything else."""
    if hed_error_in(exc) is not None and not os.environ.get(TRACEBACK_VARIABLE):
        return ""
    return traceback.format_exc()


def describe_exit(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"its process was killed by {signal.Signals(-exitcode).name}"
    return f"its process exited with code {exitcode}"
