"""Benchmark: ``advantage_shaping_by_step`` of one step, all six schemes, time and peak memory.

Sizes: ``demo`` (the default ``make run``'s step: 24 prompts × 2 samples of at most 96 tokens,
about 2.7k tokens) and N-token steps synthesised as in ``bench/dynamics.py`` (prompts of 8
samples, 200–800 tokens, a third of the groups all-equal). Each size runs
:func:`hed.pipelines.analyses.nodes.tabulate_advantage_shaping` in a fresh subprocess on the
lazy ``pyarrow.dataset`` the catalog gives, and prints wall time, CPU time and peak RSS (the
RSS should not grow with N: the records are streamed in whole prompt groups).

Usage::

    python bench/advantage_shaping.py                  # demo, 0.5M and 2M tokens
    python bench/advantage_shaping.py --sizes demo 1e6
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _dynamics_bench():
    spec = importlib.util.spec_from_file_location("bench_dynamics", HERE / "dynamics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthesise_demo(folder: Path, seed: int = 0) -> tuple[Path, Path, int]:
    """The demo's step: 24 prompts × 2 samples, 20–96 tokens (the last one special)."""
    rng = np.random.default_rng(seed)
    prompt, sample = np.repeat(np.arange(24), 2), np.tile([0, 1], 24)
    lengths = rng.integers(20, 97, size=48)
    rows = np.repeat(np.arange(48), lengths)
    position = np.concatenate([np.arange(n) for n in lengths])
    special = position == np.repeat(lengths - 1, lengths)
    entropy = rng.exponential(0.8, rows.size).astype(np.float32)
    normal = np.flatnonzero(~special)
    high = np.zeros(rows.size, bool)
    high[normal[np.argsort(-entropy[normal], kind="stable")[: int(np.ceil(0.2 * normal.size))]]] = (
        True
    )
    category = rng.choice(["anthropomorphic", "reasoning", "other"], rows.size, p=[0.05, 0.2, 0.75])
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table(
            {
                "prompt_index": pa.array(prompt[rows], pa.int32()),
                "sample_index": pa.array(sample[rows], pa.int16()),
                "position": pa.array(position, pa.int32()),
                "entropy": entropy,
                "logprob": (-rng.exponential(1.0, rows.size)).astype(np.float32),
                "is_special": special,
                "category": pa.array(category, pa.string()),
                "is_high_entropy": high,
            }
        ),
        folder / "step.parquet",
    )
    sequences = pd.DataFrame({"prompt_index": prompt, "sample_index": sample,
                              "correct": rng.random(48) < 0.4})  # fmt: skip
    pq.write_table(pa.Table.from_pandas(sequences), folder / "step.sequences.parquet")
    return folder / "step.parquet", folder / "step.sequences.parquet", int(normal.size)


def child(records: str, sequences: str, threshold: str) -> None:
    import pyarrow.dataset as ds

    from hed.pipelines.analyses.nodes import tabulate_advantage_shaping

    data = ds.dataset(records)
    thresholds = pd.DataFrame([{"run": "bench", "step": 0, "threshold": float(threshold)}])
    lexicon = {"lexicon": {"anthropomorphic": ["wait"], "reasoning": ["so"]}}
    start, cpu = time.perf_counter(), time.process_time()
    table = tabulate_advantage_shaping(
        thresholds, lexicon, {}, ds.dataset(sequences), data, run_steps=[("bench", 0)]
    )
    bench = _dynamics_bench()
    print(json.dumps({"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu,
                      "peak_rss_mb": bench.peak_rss_mb(), "rows": len(table)}))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["demo", "0.5e6", "2e6"])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    with tempfile.TemporaryDirectory(prefix="hed_bench_shaping_") as tmp:
        for size in args.sizes:
            folder = Path(tmp) / size
            if size == "demo":
                records, sequences, n = synthesise_demo(folder)
            else:
                records, sequences, n = _dynamics_bench().synthesise(folder, int(float(size)))
            entropy = pq.read_table(records, columns=["entropy"]).column("entropy").to_numpy()
            tau = str(float(np.quantile(entropy, 0.8)))  # the step's τ_ρ, here not in the child
            del entropy
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(records), str(sequences), tau],
                check=True, capture_output=True, text=True, env=env,
            )  # fmt: skip
            result = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{size:>6}: N = {n:>9,} tokens  wall {result['wall_s']:7.3f} s  "
                  f"cpu {result['cpu_s']:7.3f} s  peak RSS {result['peak_rss_mb']:6.0f} MB  "
                  f"rows {result['rows']}")  # fmt: skip


if __name__ == "__main__":
    main()
