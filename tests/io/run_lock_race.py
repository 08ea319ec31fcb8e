"""Driver of the run-lock race test (``tests/io/test_run_lock.py``): ``python run_lock_race.py
<project> <trials>`` runs, ``trials`` times, two ``kedro run --nodes build_prompt_set`` on the
same data root that take the lock in the same instant, and prints one JSON line per trial.

Each pair is forked from this process after Kedro, HED and the pipelines are imported (what
costs most of a ``kedro run``'s start), so 30 pairs take seconds, not minutes. The only thing
added to the two runs is a barrier around :func:`hed.io.run_lock.acquire`: both calls start
together (the race a plain start of two processes hits only by chance), and neither run goes
on before the other has tried (so the winner cannot end before the loser tries).
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import multiprocessing.synchronize
import os
import pkgutil
import sys
from pathlib import Path

import kedro.framework.cli.cli as kedro_cli

import hed.pipelines
import hed.settings
from hed.io import run_lock

#: The ``kedro`` arguments of each run: one quick node that reads only the demo prompts.
COMMAND = ["run", "--nodes", "build_prompt_set"]


def _child(
    barrier: multiprocessing.synchronize.Barrier,
    tried: multiprocessing.synchronize.Barrier,
    log: Path,
) -> None:
    """One ``kedro run`` in this forked process; exits with its status (never returns)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    real = run_lock.acquire

    def acquire_together(data_root, env):
        # both runs reach the lock, then take it at once; neither goes on before the other has
        # tried (else a slow start could find the lock already released and run too)
        barrier.wait(timeout=60)
        try:
            return real(data_root, env)
        finally:
            tried.wait(timeout=60)

    run_lock.acquire = acquire_together
    sys.argv = ["kedro", *COMMAND]
    code = 1
    try:
        kedro_cli.KedroCLI(project_path=Path.cwd())(COMMAND)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(project: Path, trials: int) -> None:
    os.chdir(project)
    for module in pkgutil.iter_modules(hed.pipelines.__path__):  # imported once, before forking
        importlib.import_module(f"hed.pipelines.{module.name}")
    for trial in range(trials):
        barrier, tried = multiprocessing.Barrier(2), multiprocessing.Barrier(2)
        pids, logs = [], []
        for side in range(2):
            log = project / f"race_{trial}_{side}.log"
            pid = os.fork()
            if pid == 0:
                _child(barrier, tried, log)
            pids.append(pid)
            logs.append(log)
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        outputs = [log.read_text(errors="replace") for log in logs]
        for log in logs:
            log.unlink()
        print("RACE", json.dumps({"pids": pids, "codes": codes, "outputs": outputs}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
