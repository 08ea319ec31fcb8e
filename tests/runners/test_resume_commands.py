"""The resume command HED prints after a failed aggregation node runs to the end, exactly as
printed, under SequentialRunner and GPURunner (docs/running.md, "When a node fails").

A tiny step is generated once; then ``kedro run --pipelines aggregation`` runs with a fault
planted in ``compute_entropy_threshold`` (a node whose input, the shard report, is kept only
in memory: ``--from-nodes`` that node cannot start). The printed command is run as printed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ..project_copy import (
    MERGED_FOLDER,
    RUN,
    TINY,
    copy_project,
    kedro_environment,
    run_kedro,
    set_parameters,
    versions,
)

NS = f"{RUN}.step_0"
#: Runs Kedro's command line with compute_entropy_threshold failing (what an EOS-only
#: checkpoint does to a step), the rest of HED unchanged.
PLANTED = (
    "import functools, hed.pipelines.aggregation.pipeline as pipeline\n"
    "from hed.errors import InputDataError\n"
    "@functools.wraps(pipeline.compute_entropy_threshold)\n"
    "def failing(*args, **kwargs):\n"
    "    raise InputDataError('planted fault: no generated token')\n"
    "pipeline.compute_entropy_threshold = failing\n"
    "from kedro.framework.cli import main\n"
    "main()\n"
)
GPU_RUNNER = ("--runner", "hed.runners.GPURunner", "--runner-params", "gpus=cpu,cpu_workers=2")


@pytest.fixture(scope="module")
def generated(tmp_path_factory, smollm2_dir) -> Path:
    project = copy_project(tmp_path_factory.mktemp("resume_commands"), smollm2_dir)
    set_parameters(project, TINY)
    run_kedro(project, "generation")
    return project


def _run(project: Path, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        cwd=project,
        env=kedro_environment(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _printed_command(output: str) -> str:
    """The ``kedro run ...`` line HED printed (the last one in the output)."""
    commands = re.findall(r"^\s*(kedro run .*--from-nodes \S+)", output, flags=re.M)
    assert commands, output[-3000:]
    return commands[-1]


@pytest.mark.slow
@pytest.mark.parametrize("runner", [(), GPU_RUNNER], ids=["sequential", "gpu_runner"])
def test_the_printed_command_after_an_aggregation_failure_runs_to_the_end(generated, runner):
    merged = generated / MERGED_FOLDER / "step_0.parquet"
    summaries = generated / "data/04_feature/summary_by_step.csv"
    before = len(versions(merged)), len(versions(summaries))
    failed = _run(
        generated, [sys.executable, "-c", PLANTED, "run", "--pipelines", "aggregation", *runner]
    )
    output = failed.stdout + failed.stderr
    assert failed.returncode != 0
    assert "planted fault: no generated token" in output
    command = _printed_command(output)
    # starts where every input is on disk: the step's first node, not the failed one
    assert command == shlex.join(
        ["kedro", "run", "--pipelines", "aggregation", *runner, "--from-nodes",
         f"{NS}.check_sequences"]
    )  # fmt: skip
    assert (len(versions(merged)), len(versions(summaries))) == before  # nothing half-written
    args = shlex.split(command)
    resumed = _run(generated, [sys.executable, "-m", "kedro", *args[1:]])
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert len(versions(merged)) == before[0] + 1
    assert len(versions(summaries)) == before[1] + 1
