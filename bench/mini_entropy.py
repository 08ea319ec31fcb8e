"""Benchmark: wall time of ``kedro run --env mini_entropy`` in a fresh project copy, and its checks.

A fresh copy of the project (``tests/project_copy.py``: what a clone has, with no data of the
environment) runs ``kedro run --env mini_entropy`` once, as a user would (the embedded SmolLM2
conversion, six trainings, generation of every (run, step), the analyses and the figures).
Printed: wall seconds, the load average before and after, the CPU model, the slowest nodes,
each training's wall time and thread use, then the checks of docs/mini_entropy.md:

* no two runs have identical per-step ``entropy`` in ``mini_rl_manifest`` (exit 1 otherwise);
* the clip pair's ``clip_ratio/high_mean`` per step, and the steps where they differ;
* ``advantage_shaping_by_step`` has rows of every run, and Figure 2 has a panel per run.

Run it on an otherwise idle machine if possible (the budget is 25 minutes on 2 cores)::

    nice -n 10 python bench/mini_entropy.py                # the whole environment
    python bench/mini_entropy.py --keep /tmp/mini_entropy  # keep the copy (data, logs)

The demo's converted model must be in ``.pytest_cache/hed_models/smollm2`` (any test using the
``smollm2_dir`` fixture makes it); the environment converts its own base model as a clone does.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / ".pytest_cache/hed_models/smollm2/global_step_0/actor_hf"
ENV = "mini_entropy"


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages (``/proc/loadavg``)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_model() -> str:
    """The CPU's model name and whether it has native bfloat16 (AVX512-BF16 / AMX)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if "model name" in ln), "")
    flags = set(next((ln for ln in info.splitlines() if ln.startswith("flags")), "").split())
    bf16 = sorted(flags & {"avx512_bf16", "amx_bf16"})
    return f"{name or platform.processor()}; native bf16: {', '.join(bf16) or 'no'}"


def identical_entropy_pairs(manifest: dict) -> list[tuple[str, str]]:
    """Pairs of runs whose per-step trainer ``entropy`` series are equal (``[]``: all differ)."""
    series = {
        run: [row.get("entropy") for row in m.get("train_log", []) if "entropy" in row]
        for run, m in manifest["runs"].items()
    }
    return [(a, b) for a, b in itertools.combinations(series, 2) if series[a] == series[b]]


def clip_pair(manifest: dict, runs: tuple[str, str]) -> list[tuple[int, float, float]]:
    """``(step, high_mean of runs[0], of runs[1])`` per step of the clip pair."""
    logs = [
        {r["step"]: r.get("clip_ratio/high_mean") for r in manifest["runs"][run]["train_log"]}
        for run in runs
    ]
    return [(step, logs[0][step], logs[1].get(step)) for step in sorted(logs[0])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=MODEL, help="the converted SmolLM2 folder")
    parser.add_argument("--keep", type=Path, help="make the project copy here and keep it")
    args = parser.parse_args()
    if not args.model.is_dir():
        sys.exit(f"{args.model} missing: run a test that uses the smollm2_dir fixture first")
    sys.path.insert(0, str(REPO))
    import pandas as pd

    from tests.project_copy import copy_project, kedro_command, kedro_environment, latest

    with tempfile.TemporaryDirectory() as tmp:
        project = copy_project(args.keep or Path(tmp) / "project", args.model)
        env = {**kedro_environment(), "PYTHONPATH": str(project / "src")}
        before = load_average()
        start = time.perf_counter()
        done = subprocess.run(
            kedro_command("run", "--env", ENV),
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - start
        log = done.stdout + done.stderr
        (project / f"{ENV}.log").write_text(log)
        print(f"CPU: {cpu_model()}")
        print(
            f"kedro run --env {ENV}: {wall:.0f} s ({wall / 60:.1f} min), rc {done.returncode}; "
            f"load {before} -> {load_average()}",
            flush=True,
        )
        if done.returncode:
            print(log[-4000:])
            sys.exit(done.returncode)
        from bench.pipeline_time import node_seconds

        for node, sec in sorted(node_seconds(log).items(), key=lambda kv: -kv[1])[:10]:
            print(f"    {sec:6.0f} s  {node}")
        data = project / "data" / ENV
        manifest = json.loads((data / "01_raw/mini_rl/manifest.json").read_text())
        for run, m in manifest["runs"].items():
            entropy = [round(r["entropy"], 3) for r in m["train_log"] if "entropy" in r]
            print(f"{run}: {m['wall_time_s']} s, threads {m['torch_threads']}; entropy {entropy}")
        pair = ("mini_entropy_symmetric", "mini_entropy_clip_higher")
        rows = clip_pair(manifest, pair)
        differ = [step for step, a, b in rows if a != b]
        print(f"clip_ratio/high_mean {pair[0]} vs {pair[1]}: {rows}; differ at steps {differ}")
        table = pd.read_csv(latest(data / "04_feature/advantage_shaping_by_step.csv"))
        figure2 = pd.read_csv(latest(data / "08_reporting/tables/figure2_paper_reproduction.csv"))
        missing = set(manifest["runs"]) - set(table["run"])
        print(
            f"advantage_shaping_by_step: {len(table)} rows, runs missing: {sorted(missing)}; "
            f"Figure 2 runs: {sorted(set(figure2['run']))}"
        )
        same = identical_entropy_pairs(manifest)
        print(f"runs with identical per-step entropy: {same or 'none'}")
        if same or missing or not differ:
            sys.exit(1)


if __name__ == "__main__":
    main()
