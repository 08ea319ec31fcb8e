"""Benchmark: wall time of whole pipelines on the embedded demo, e.g. rescoring against generation.

A fresh copy of the project (``tests/project_copy.py``: conf, demo prompts, src, the converted
SmolLM2-135M-Instruct linked from the test cache) runs ``kedro run --pipelines <name>`` for each
name in order, each in its own process as a user would run it (model loading included). Printed
per pipeline: wall seconds, the load average before and after, the seconds of its slowest nodes
(from the log's timestamps), and every pipeline's time as a ratio of the first one's.

Run it under the machine's heavy-work lock, on a machine that is otherwise idle if possible::

    flock /tmp/hed-heavy.lock python bench/pipeline_time.py
    python bench/pipeline_time.py --pipelines generation rescoring --params prompts.num_prompts=8

The converted model must be in ``.pytest_cache/hed_models/smollm2`` (any test that uses the
``smollm2_dir`` fixture makes it).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / ".pytest_cache/hed_models/smollm2/global_step_0/actor_hf"


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages (``/proc/loadavg``)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def node_seconds(log: str) -> dict[str, float]:
    """Seconds per node of a sequential run: from the previous ``Completed node`` line (or the
    log's first line) to the node's own (Kedro's log, HH:MM:SS, so to the second)."""
    stamps = [line for line in log.splitlines() if re.match(r"\d\d:\d\d:\d\d ", line)]
    if not stamps:
        return {}
    last = datetime.strptime(stamps[0][:8], "%H:%M:%S")
    seconds: dict[str, float] = {}
    for line in stamps:
        done = re.search(r"Completed node: (\S+)", line)
        if done:
            now = datetime.strptime(line[:8], "%H:%M:%S")
            seconds[done.group(1)] = ((now - last) % timedelta(days=1)).total_seconds()
            last = now
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pipelines", nargs="+", default=["generation", "aggregation", "rescoring"]
    )
    parser.add_argument("--model", type=Path, default=MODEL, help="the converted SmolLM2 folder")
    parser.add_argument(
        "--params", default="", help="passed to every run, e.g. prompts.num_prompts=8"
    )
    parser.add_argument("--keep", type=Path, help="make the project copy here and keep it")
    args = parser.parse_args()
    if not args.model.is_dir():
        sys.exit(f"{args.model} missing: run a test that uses the smollm2_dir fixture first")
    sys.path.insert(0, str(REPO))
    from tests.project_copy import copy_project, kedro_command, kedro_environment

    with tempfile.TemporaryDirectory() as tmp:
        project = copy_project(args.keep or Path(tmp) / "project", args.model)
        env = {**kedro_environment(), "PYTHONPATH": str(project / "src")}
        times: dict[str, float] = {}
        for name in args.pipelines:
            before = load_average()
            start = time.perf_counter()
            done = subprocess.run(
                kedro_command(
                    "run", "--pipelines", name, *(["--params", args.params] if args.params else [])
                ),
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            times[name] = time.perf_counter() - start
            (project / f"{name}.log").write_text(done.stdout + done.stderr)
            slowest = sorted(node_seconds(done.stdout + done.stderr).items(), key=lambda kv: -kv[1])
            print(
                f"{name}: {times[name]:.1f} s (rc {done.returncode}); load {before} -> "
                f"{load_average()}",
                flush=True,
            )
            for node, sec in slowest[:6]:
                print(f"    {sec:6.0f} s  {node}", flush=True)
            for line in (done.stdout + done.stderr).splitlines():  # decode and re-score rates
                if re.search(r"generated \d+ sequence|re-scored \d+ responses", line):
                    print(f"    {line.split(': ', 1)[-1]}", flush=True)
            if done.returncode:
                print((done.stdout + done.stderr)[-3000:])
                sys.exit(done.returncode)
        first = args.pipelines[0]
        for name, sec in times.items():
            print(f"{name} / {first}: {sec / times[first]:.2f}")
        if os.environ.get("HED_BENCH_KEEP_LOGS"):
            print(f"logs in {project}")


if __name__ == "__main__":
    main()
