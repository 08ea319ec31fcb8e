"""hed.io.run_lock: one run per data root, decided by an OS lock (filelock); the holder's facts
beside it name the first run to a refused second; a killed run's lock is taken over."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hed.io import run_lock
from hed.io.run_lock import FLOCK_NAME, LOCK_NAME, RunLockedError, acquire, release

from ..project_copy import REPO_ROOT, copy_project, kedro_environment

HOLD = (
    "import sys, time; from hed.io import run_lock; "
    "run_lock.acquire(sys.argv[1], sys.argv[2]); print('locked', flush=True); time.sleep(120)"
)


def _holder(root: Path, env: str = "base") -> subprocess.Popen:
    """A process that takes ``root``'s lock and keeps it (until killed)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root), env],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")},
    )
    assert process.stdout.readline().strip() == "locked"
    return process


def test_the_holder_writes_its_facts_and_release_removes_them(tmp_path):
    path = acquire(tmp_path, "qae_repro")
    try:
        facts = json.loads(path.read_text())
        assert path == tmp_path / LOCK_NAME
        assert (facts["pid"], facts["host"], facts["env"]) == (
            os.getpid(),
            socket.gethostname(),
            "qae_repro",
        )
        assert abs(facts["started"] - time.time()) < 60
        assert acquire(tmp_path, "qae_repro") == path  # this process holds it already
    finally:
        release(tmp_path)
    assert not path.exists()
    release(tmp_path)  # not held any more: nothing to do


def test_a_second_process_is_refused_naming_the_holder(tmp_path):
    holder = _holder(tmp_path, "my_study")
    try:
        with pytest.raises(RunLockedError) as refused:
            acquire(tmp_path, "base")
        message = str(refused.value)
        assert f"pid {holder.pid} on {socket.gethostname()}, environment my_study" in message
        assert "\n" not in message and "data_root" in message
    finally:
        holder.kill()
        holder.wait()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == holder.pid  # left behind


def test_a_lock_held_by_a_sigkilled_process_is_taken_over(tmp_path, caplog):
    holder = _holder(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    # its facts are still there, with the same pid: only the OS lock (gone with it) decides
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == holder.pid
    with caplog.at_level(logging.WARNING, logger="hed.io.run_lock"):
        path = acquire(tmp_path, "base")
    try:
        assert json.loads(path.read_text())["pid"] == os.getpid()
        (warning,) = [r.getMessage() for r in caplog.records]
        assert warning.startswith(f"Taking over the run lock {path} of a run that is gone")
        assert f"pid {holder.pid} on" in warning
    finally:
        release(tmp_path)


def test_a_refused_run_waits_for_facts_the_holder_has_not_written_yet(tmp_path, monkeypatch):
    """The instant between the holder's OS lock and its facts: the refusal waits for them."""
    from filelock import FileLock

    held = FileLock(str(tmp_path / FLOCK_NAME))
    held.acquire()
    monkeypatch.setattr(run_lock, "HOLDER_WAIT_S", 0.2)
    try:
        with pytest.raises(RunLockedError, match=r"its details are not in .*hed_run\.lock"):
            acquire(tmp_path, "base")
    finally:
        held.release()


@pytest.mark.slow
def test_two_kedro_runs_started_in_the_same_instant_one_runs_the_other_is_refused(tmp_path):
    """30 times: two `kedro run`s on one data root take the lock at the same instant
    (tests/io/run_lock_race.py); exactly one runs, the other is refused naming it."""
    project = copy_project(tmp_path / "project", tmp_path / "no_model")
    trials = 30
    driver = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("run_lock_race.py")),
            str(project),
            str(trials),
        ],
        cwd=project,
        env={**kedro_environment(), "PYTHONPATH": str(REPO_ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert driver.returncode == 0, driver.stderr[-3000:]
    results = [
        json.loads(line[5:]) for line in driver.stdout.splitlines() if line.startswith("RACE ")
    ]
    assert len(results) == trials
    for trial in results:
        (winner,) = [
            pid for pid, code in zip(trial["pids"], trial["codes"], strict=True) if code == 0
        ]
        (refused,) = [
            out for code, out in zip(trial["codes"], trial["outputs"], strict=True) if code != 0
        ]
        assert f"is in use by another run (pid {winner} on {socket.gethostname()}" in refused
        assert "kedro run --nodes build_prompt_set" in refused
    assert not (project / "data" / LOCK_NAME).exists()  # every winner released it
