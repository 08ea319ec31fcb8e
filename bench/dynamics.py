"""Benchmark: the dynamics tables of one step, streamed (HED) vs everything in memory (pandas).

For each size, a merged step is synthesised (prompts of 8 samples, 0/1 rewards with a third
of the groups all-equal, responses of 200–800 tokens, Zipf-like words and their categories, a
top-20% high-entropy mark, one special end token per response) with the columns the dynamics
nodes read. Then, each in a fresh subprocess so that its peak RSS is its own:

* ``hed``: :func:`hed.pipelines.dynamics.nodes.tabulate_advantage_covariance` (both
  estimators, two streaming passes) and ``tabulate_entropy_by_correctness`` (one pass) on
  the lazy ``pyarrow.dataset`` the catalog gives;
* ``naive``: read the needed columns fully into pandas, join the advantages, compute cov
  and every table column with whole-array numpy and ``groupby``.

It prints wall time, CPU time and peak RSS of each, the ratios naive / hed and the RSS growth
from the smallest to the largest size, and checks that mean cov, the band share and the
zero-advantage share agree (rel. 1e-9).

Usage::

    python bench/dynamics.py                 # 1M and 4M tokens
    python bench/dynamics.py --sizes 0.2e6   # a quick run
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
LEXICON = {"anthropomorphic": ["wait", "perhaps"], "reasoning": ["so", "let"]}
WORDS = ["the", "so", "wait", "x", "let", "perhaps", "is", "we", "", "then"]
CATEGORY = {"wait": "anthropomorphic", "perhaps": "anthropomorphic", "so": "reasoning",
            "let": "reasoning"}  # fmt: skip


def synthesise(folder: Path, n_tokens: int, seed: int = 0) -> tuple[Path, Path, int]:
    """Write ``step.parquet`` (records) and ``step.sequences.parquet``; return them and N."""
    rng = np.random.default_rng(seed)
    lengths = []
    while sum(lengths) < n_tokens:
        lengths.append(int(rng.integers(200, 801)))
    n_resp = len(lengths)
    prompt = np.arange(n_resp) // 8
    sample = np.arange(n_resp) % 8
    kind = rng.integers(0, 3, size=prompt.max() + 1)  # 0 all wrong, 1 all right, 2 mixed
    correct = np.where(kind[prompt] == 2, rng.random(n_resp) < 0.5, kind[prompt] == 1)
    rows = np.repeat(np.arange(n_resp), lengths)
    position = np.concatenate([np.arange(n) for n in lengths])
    special = position == np.repeat(np.asarray(lengths) - 1, lengths)
    entropy = np.where(rng.random(rows.size) < 0.5, rng.exponential(0.01, rows.size),
                       rng.uniform(0, 5, rows.size)).astype(np.float32)  # fmt: skip
    logprob = (-rng.exponential(1.0, rows.size)).astype(np.float32)
    word_index = np.minimum(rng.zipf(1.6, rows.size) - 1, len(WORDS) - 1)
    words = np.asarray(WORDS, dtype=object)[word_index]
    words[special] = ""
    normal = np.flatnonzero(~special)
    k = int(np.ceil(0.2 * normal.size))
    high = np.zeros(rows.size, bool)
    high[normal[np.argsort(-entropy[normal], kind="stable")[:k]]] = True
    categories = np.array([CATEGORY.get(w, "other") for w in WORDS], dtype=object)[word_index]
    folder.mkdir(parents=True, exist_ok=True)
    records = pa.table(
        {
            "prompt_index": pa.array(prompt[rows], pa.int32()),
            "sample_index": pa.array(sample[rows], pa.int16()),
            "position": pa.array(position, pa.int32()),
            "token_text": pa.array(np.where(special, "<|im_end|>", " " + words), pa.string()),
            "entropy": entropy,
            "logprob": logprob,
            "is_special": special,
            "word": pa.array(words, pa.string()),
            "category": pa.array(categories, pa.string()),
            "is_high_entropy": high,
        }
    )
    pq.write_table(records, folder / "step.parquet", compression="lz4", row_group_size=524_288)
    sequences = pd.DataFrame(
        {
            "prompt_index": prompt.astype(np.int32),
            "sample_index": sample.astype(np.int16),
            "correct": correct,
        }
    )
    pq.write_table(pa.Table.from_pandas(sequences), folder / "step.sequences.parquet")
    return folder / "step.parquet", folder / "step.sequences.parquet", int(normal.size)


def run_hed(records: str, sequences: str, n: int) -> dict:
    import pyarrow.dataset as ds

    from hed.pipelines.dynamics.nodes import (
        tabulate_advantage_covariance,
        tabulate_entropy_by_correctness,
    )

    thresholds = pd.DataFrame([{"run": "bench", "step": 0, "n_tokens": n}])
    table, _ = tabulate_advantage_covariance(
        thresholds, ds.dataset(sequences), ds.dataset(records), {"lexicon": LEXICON}, {}
    )
    tabulate_entropy_by_correctness(thresholds, ds.dataset(sequences), ds.dataset(records), {})
    row = table.iloc[0]
    return {k: float(row[k]) for k in ("mean_cov", "clip_cov_band_share", "zero_advantage_share")}


def run_naive(records: str, sequences: str, n: int) -> dict:
    from hed.core.advantage import response_advantages

    seqs = pd.read_parquet(sequences)
    adv = response_advantages(seqs, ("grpo", "dr_grpo"))
    frame = pd.read_parquet(records).merge(adv, on=["prompt_index", "sample_index"])
    frame = frame[~frame["is_special"]]
    out = {}
    for e in ("grpo", "dr_grpo"):
        a, lp = frame[f"advantage_{e}"].to_numpy(), frame["logprob"].to_numpy(np.float64)
        cov = (a - a.mean()) * (lp - lp.mean())
        frame = frame.assign(cov=cov)
        frame.groupby("category")["cov"].mean()
        frame[frame["is_high_entropy"]].groupby("category")["cov"].mean()
        if e == "grpo":
            out = {
                "mean_cov": float(cov.mean()),
                "clip_cov_band_share": float(((cov > 1) & (cov < 5)).mean()),
                "zero_advantage_share": float(adv["zero_advantage"].mean()),
            }
        frame.nlargest(max(1, int(0.002 * len(frame))), "cov")
    frame.groupby(frame["reward"] == 1).agg(
        n_tokens=("entropy", "size"), mean_entropy=("entropy", "mean"),
        high=("is_high_entropy", "mean"),
    )  # fmt: skip
    return out


def peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``; ``ru_maxrss`` would carry the parent's pre-exec
    peak into a child started by fork + exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(mode: str, records: str, sequences: str, n: int) -> None:
    import hed.core.advantage  # imports are not timed (the dynamics nodes import matplotlib)
    import hed.pipelines.dynamics.nodes  # noqa: F401

    start, cpu = time.perf_counter(), time.process_time()
    result = (run_hed if mode == "hed" else run_naive)(records, sequences, n)
    result.update(
        wall_s=time.perf_counter() - start,
        cpu_s=time.process_time() - cpu,
        peak_rss_mb=peak_rss_mb(),
    )
    print(json.dumps(result))


def measure(mode: str, records: Path, sequences: Path, n: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(records), str(sequences), str(n)],
        check=True,
        capture_output=True,
        text=True,
        env={"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e6, 4e6])
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--synthesise", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.synthesise:  # in its own process, so the parent stays small
        print(synthesise(Path(args.synthesise[0]), int(float(args.synthesise[1])))[2])
        return
    if args.child:
        mode, records, sequences, n = args.child
        child(mode, records, sequences, int(n))
        return
    hed_rss = []
    with tempfile.TemporaryDirectory(prefix="hed_bench_dynamics_") as tmp:
        for size in args.sizes:
            folder = Path(tmp) / f"n{int(size)}"
            made = subprocess.run(
                [sys.executable, __file__, "--synthesise", str(folder), str(size)],
                check=True,
                capture_output=True,
                text=True,
            )
            n = int(made.stdout.strip().splitlines()[-1])
            records, sequences = folder / "step.parquet", folder / "step.sequences.parquet"
            hed = measure("hed", records, sequences, n)
            naive = measure("naive", records, sequences, n)
            for key in ("mean_cov", "clip_cov_band_share", "zero_advantage_share"):
                assert abs(hed[key] - naive[key]) <= 1e-9 * max(1.0, abs(naive[key])), key
            hed_rss.append(hed["peak_rss_mb"])
            print(
                f"N={n:>10,d}  hed: {hed['wall_s']:6.2f} s wall, {hed['cpu_s']:6.2f} s cpu, "
                f"{hed['peak_rss_mb']:7.0f} MB peak | naive: {naive['wall_s']:6.2f} s, "
                f"{naive['cpu_s']:6.2f} s cpu, {naive['peak_rss_mb']:7.0f} MB | naive/hed: "
                f"wall {naive['wall_s'] / hed['wall_s']:.2f}x, "
                f"rss {naive['peak_rss_mb'] / hed['peak_rss_mb']:.2f}x | tables agree"
            )
            Path(records).unlink()
    if len(hed_rss) > 1:
        print(
            f"hed peak RSS, largest / smallest size: {hed_rss[-1] / hed_rss[0]:.2f}x "
            f"for {args.sizes[-1] / args.sizes[0]:.1f}x the tokens"
        )


if __name__ == "__main__":
    main()
