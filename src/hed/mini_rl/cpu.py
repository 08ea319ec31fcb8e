"""How many CPU cores are free for torch: the cores other processes are not using right now.

On a shared machine torch's default (one thread per core) is the worst choice when other
processes are busy: its threads wait for each other at every operation, and a measured 135M
training step or ``generate`` call ran 5–10 times slower with 2 threads on 2 busy cores than
with 1. :class:`CoreMeter` measures the other processes' load from ``/proc/stat`` (all cores'
busy time) minus this process's own CPU time (``os.times``), so it can be re-read between
training steps at no cost.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from hed.core.cpus import allowed_cpus

_PROC_STAT = Path("/proc/stat")


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity and cgroup quota
    (:func:`hed.core.cpus.allowed_cpus`)."""
    return allowed_cpus()


def _busy_and_total_seconds() -> tuple[float, float] | None:
    """Machine-wide busy and total CPU seconds since boot (all cores), or None off Linux."""
    try:
        fields = _PROC_STAT.read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    ticks = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


def _own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


class CoreMeter:
    """Free cores between successive readings: usable cores minus other processes' load.

    Args:
        cores: cores this process may use (default :func:`usable_cores`).
    """

    def __init__(self, cores: int | None = None) -> None:
        self.cores = cores or usable_cores()
        self._last = self._reading()

    def _reading(self) -> tuple[float, float, float] | None:
        machine = _busy_and_total_seconds()
        if machine is None:
            return None
        return machine[0], machine[1], _own_cpu_seconds()

    def free_cores(self) -> int:
        """Cores not used by other processes since the previous reading (at least 1).

        ``round(cores − others)``, where ``others`` = (machine busy time − this process's CPU
        time) / elapsed wall time, in cores. Without ``/proc/stat`` it is ``cores``.
        """
        now = self._reading()
        last, self._last = self._last, now
        if now is None or last is None:
            return self.cores
        elapsed_cores = now[1] - last[1]  # total CPU seconds of all cores in the interval
        if elapsed_cores <= 0:
            return self.cores
        ncpu = os.cpu_count() or self.cores
        others = max(0.0, (now[0] - last[0]) - (now[2] - last[2])) / (elapsed_cores / ncpu)
        return max(1, min(self.cores, round(self.cores - others)))


def free_cores_now(sample_s: float = 0.5) -> int:
    """Free cores measured over ``sample_s`` seconds (for a start-up decision)."""
    meter = CoreMeter()
    time.sleep(sample_s)
    return meter.free_cores()


def torch_threads_for(requested: int | None, meter: CoreMeter | None = None) -> int:
    """Threads for torch: ``requested`` when set, else the free cores (``meter`` or a sample)."""
    if requested:
        return int(requested)
    return meter.free_cores() if meter is not None else free_cores_now()
