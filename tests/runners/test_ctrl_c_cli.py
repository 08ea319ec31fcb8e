"""Ctrl-C during a real ``kedro run`` ends in one ``RunInterruptedError`` line with the resume
command (not click's ``Aborted!``), exit status 130, whatever the runner."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
from pathlib import Path

import pytest

from hed.io.run_lock import LOCK_NAME

from ..project_copy import (
    SMALL_STEP,
    copy_project,
    kedro_command,
    kedro_environment,
    set_parameters,
    sigint_not_ignored,
    wait_for,
)

#: long enough shards (64 tokens) that the SIGINT reaches them mid-generation
SLOW_STEP = copy.deepcopy(SMALL_STEP)
SLOW_STEP["generation"]["max_new_tokens"] = 64
SHARD_NODES = ",".join(f"smollm2_demo.step_0.shard_{k}.generate_shard" for k in range(4))


def interrupt_generation(project: Path, *runner_args: str) -> tuple[int, str]:
    """Start ``kedro run --pipelines generation <runner_args>`` in its own process group, send
    SIGINT to the group (what a terminal's Ctrl-C does) once a shard is generating; return
    (exit status, output)."""
    log_path = project / "interrupted.log"
    with log_path.open("w") as log, sigint_not_ignored():
        process = subprocess.Popen(
            kedro_command("run", "--pipelines", "generation", *runner_args),
            cwd=project,
            env={**kedro_environment(), "HED_TRACEBACK": ""},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            started = wait_for(
                lambda: (
                    "Running node: generate_shard" in log_path.read_text()
                    or process.poll() is not None
                ),
                240,
            )
            assert started and process.poll() is None, log_path.read_text()[-3000:]
            os.killpg(process.pid, signal.SIGINT)
            returncode = process.wait(timeout=120)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return returncode, log_path.read_text()


@pytest.mark.parametrize(
    "runner_args",
    [
        ("--runner", "hed.runners.GPURunner", "--runner-params", "gpus=cpu,cpu_workers=2"),
        (),  # Kedro's SequentialRunner
    ],
    ids=["GPURunner", "SequentialRunner"],
)
@pytest.mark.slow
def test_ctrl_c_ends_in_the_documented_line_with_the_resume_command(
    tmp_path, smollm2_dir, runner_args
):
    project = copy_project(tmp_path / "project", smollm2_dir)
    set_parameters(project, SLOW_STEP)

    returncode, output = interrupt_generation(project, *runner_args)

    assert returncode == 130, output[-3000:]
    assert "Aborted!" not in output and "Traceback" not in output
    assert "leaked semaphore" not in output  # the stopped node processes released theirs
    assert output.strip().splitlines()[-1] == (
        "RunInterruptedError: interrupted (Ctrl-C): 2 of 6 node(s) completed and kept their "
        f"outputs; resume with: kedro run --pipelines generation {' '.join(runner_args)}"
        f"{' ' if runner_args else ''}--from-nodes {SHARD_NODES}"
    )
    assert not (project / "data" / LOCK_NAME).exists()  # the run lock was released
