"""The CPUs this process may really use, and OpenMP threads that yield them when idle.

On a shared login node, a SLURM allocation or next to a trainer, the machine's core count is
the wrong thread count: the process may run on fewer cores (its CPU affinity, ``taskset``,
SLURM's ``--cpus-per-task``) or for a fraction of the time (the cgroup v2 quota ``cpu.max``
of a container or a systemd slice), and OpenMP threads that *spin* while they wait (libgomp's
and Intel's default) burn the cores other processes need, which then pre-empt them at every
synchronisation. HF generation measured 4 tokens/s next to two busy processes on two cores,
against 46 alone.

:func:`allowed_cpus` is min(affinity, ⌊quota⌋) (Go's ``automaxprocs`` rounds the quota down
the same way: a thread beyond the quota is throttled, not run); :func:`openmp_environment`
makes waiting threads sleep (``OMP_WAIT_POLICY=PASSIVE``, ``KMP_BLOCKTIME=0``,
``GOMP_SPINCOUNT=0``, read by the OpenMP runtime when torch loads it, so set before torch is
imported); :func:`thread_shares` splits the cores between a runner's node processes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

#: Where cgroup v2 is mounted, and the file naming this process's cgroup (``0::/<path>``).
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")

#: OpenMP settings that make idle threads sleep instead of spinning (libgomp, Intel's runtime).
PASSIVE_OPENMP = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0", "GOMP_SPINCOUNT": "0"}


def affinity_cpus() -> int:
    """CPUs in this process's affinity mask (``os.sched_getaffinity``; the CPU count off Linux)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cgroup_cpu_quota(
    root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP
) -> float | None:
    """CPUs' worth of time this process's cgroup v2 may use, or None without a limit.

    ``cpu.max`` holds ``<quota> <period>`` in microseconds (``max <period>``: no limit); the
    quota in CPUs is quota / period. The smallest over the process's cgroup and its parents
    counts (a parent's limit binds its children). Source: the kernel's cgroup v2 docs
    (Documentation/admin-guide/cgroup-v2.rst, "cpu.max").

    Args:
        root: the cgroup v2 mount. proc_self_cgroup: the file naming the process's cgroup.

    Returns:
        e.g. 1.5 for ``150000 100000``; None when no ``cpu.max`` limits it (cgroup v1, no
        file, ``max``).
    """
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError:
        return None
    path = next((line[3:] for line in lines if line.startswith("0::")), None)
    if path is None:
        return None
    folder = root / path.strip("/")
    quotas = []
    while True:
        try:
            quota, period = (folder / "cpu.max").read_text().split()[:2]
            if quota != "max" and float(period) > 0:
                quotas.append(float(quota) / float(period))
        except (OSError, ValueError):
            pass
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    return min(quotas) if quotas else None


def allowed_cpus(affinity: int | None = None, quota: float | None = None) -> int:
    """Threads worth running: min(affinity CPUs, ⌊cgroup quota⌋), at least 1.

    Args:
        affinity: CPUs of the affinity mask (default :func:`affinity_cpus`).
        quota: the cgroup quota in CPUs (default :func:`cgroup_cpu_quota`; None: no limit).
    """
    cpus = affinity_cpus() if affinity is None else affinity
    if quota is None:
        quota = cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, math.floor(quota + 1e-9))
    return max(1, int(cpus))


def thread_shares(cpus: int, processes: int) -> list[int]:
    """Split ``cpus`` between ``processes`` running at once: ⌊cpus/n⌋ each, the remainder one
    more to the first ones, at least 1 each (more processes than CPUs: 1 each).

    Example: ``thread_shares(8, 3) == [3, 3, 2]``.
    """
    if processes < 1:
        return []
    base, extra = divmod(max(1, cpus), processes)
    return [max(1, base + (k < extra)) for k in range(processes)]


def openmp_environment(threads: int | None = None) -> dict[str, str]:
    """Environment for a process about to import torch: idle OpenMP threads sleep, and with
    ``threads`` at most that many (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``)."""
    env = dict(PASSIVE_OPENMP)
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def set_passive_openmp() -> None:
    """Make this process's OpenMP threads sleep when idle, unless the user chose otherwise.

    Sets :data:`PASSIVE_OPENMP` in ``os.environ`` where unset: effective only when torch (its
    OpenMP runtime) is not loaded yet, so HED calls it where its processes start.
    """
    for name, value in PASSIVE_OPENMP.items():
        os.environ.setdefault(name, value)


def cap_torch_threads(threads: int | None = None) -> int:
    """Lower torch's intra-op threads to ``threads`` (default :func:`allowed_cpus`), never raise
    them (a smaller ``OMP_NUM_THREADS`` or an earlier choice stays). Returns the count set."""
    import torch

    limit = allowed_cpus() if threads is None else max(1, int(threads))
    current = torch.get_num_threads()
    if current > limit:
        torch.set_num_threads(limit)
    return min(current, limit)
