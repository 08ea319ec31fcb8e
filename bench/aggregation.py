"""Benchmark: HED's aggregation pipeline against a naive pandas implementation of the same outputs.

For each size, realistic records of one step are synthesised into 8 shard files the way
generation writes them (Zipf-distributed words with realistic token texts: leading spaces,
capitals, words split over two tokens, punctuation and numbers, a few non-ASCII words; half
the entropies near zero; k = 5 top-k lists; one special EOS per response). Then, each in a
fresh subprocess so that its peak RSS is its own:

* ``hed``: the aggregation pipeline (``create_pipeline``) run with Kedro's SequentialRunner
  on the project's catalog (paths moved to the work folder): coverage checks, threshold,
  candidate words, merge with words/categories/marks, every per-step and all-steps table.
* ``naive``: plain pandas: read every shard fully, concat, check keys, sort, select the
  top ⌈ρN⌉ by sorting, np.quantile, words per response (regex), categories, groupby, write
  the merged file, the positions and the tables.

It prints wall time, CPU time (user + system; the machine may be shared) and peak RSS of each
and their ratios, and checks that both agree: threshold, high-entropy count, the high-entropy
set, every token's word and category, and the word table.

Usage::

    python bench/aggregation.py                       # 5M, 10M, 20M tokens
    python bench/aggregation.py --sizes 0.5e6         # a quick run
    python bench/aggregation.py --sizes 20e6 --skip-naive
    python bench/aggregation.py --repeat 2            # best of two runs of each
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from hed.io.datasets import write_parquet_atomically
from hed.records.schema import SEQUENCE_SCHEMA, TOKEN_RECORD_SCHEMA

REPO = Path(__file__).resolve().parents[1]

RUN, STEP, SAMPLES, TOP_K = "bench", 10, 8, 5
VERSION = "2026-01-01T00.00.00.000Z"  # the shard files' Kedro version folder
END_TEXT = "<|im_end|>"

ANTHROPOMORPHIC = (
    "wait hmm hmmm hm perhaps maybe oh ah aha oops okay ok actually i me my myself guess seems"
).split()
REASONING = (
    "so let thus therefore hence since because then now but however if given suppose assume "
    "define first next finally also alternatively consider note recall check verify compute "
    "find need means implies"
).split()
COMMON = (
    "the a of to and is we that this in it for be with are as on not number value each two can "
    "which x y equation sum answer solution problem by from at all our one its has have more than "
    "equal total case integer square root term terms side sides triangle point points line area "
    "length angle prime factor"
).split()
PUNCTUATION = [
    ",",
    ".",
    ".\n\n",
    ":",
    " =",
    " +",
    " 2",
    "3",
    "$",
    " (",
    ")",
    "\\",
    "{",
    "}",
    " 10",
    "0",
    "?\n\n",
    "—",
    " 1",
]
NON_ASCII = [" café", " naïve", "é", " Größe", " 等等", "嗯"]


# ------------------------------------------------------------------------------- synthesis


def _vocabulary(rng: np.random.Generator, n_words: int = 4000) -> list[str]:
    words = list(dict.fromkeys(COMMON[:10] + ANTHROPOMORPHIC + REASONING + COMMON[10:]))
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    while len(words) < n_words:
        word = "".join(rng.choice(letters, int(rng.integers(3, 12))))
        if word not in words:
            words.append(word)
    return words


def _units(words: list[str]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Token vocabulary and "units" (a word as 1–2 tokens, or a punctuation token), weighted."""
    texts: dict[str, int] = {END_TEXT: 0}
    first, second, weight = [], [], []

    def add(tokens: tuple[str, ...], p: float) -> None:
        ids = [texts.setdefault(t, len(texts)) for t in tokens]
        first.append(ids[0])
        second.append(ids[1] if len(ids) > 1 else -1)
        weight.append(p)

    zipf = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    zipf = zipf / zipf.sum() * 0.8
    for word, p in zip(words, zipf, strict=True):
        cap = word.capitalize()
        if len(word) >= 8:  # split over two tokens
            cut = len(word) // 2
            add((f" {word[:cut]}", word[cut:]), p * 0.7)
            add((f" {cap[:cut]}", word[cut:]), p * 0.1)
            add((f"\n\n{cap}",), p * 0.2)
        else:
            add((f" {word}",), p * 0.75)
            add((f" {cap}",), p * 0.1)
            add((f"\n\n{cap}",), p * 0.1)
            add((f" {cap},",), p * 0.05)  # punctuation inside the token: " Wait,"
    for text in PUNCTUATION:
        add((text,), 0.2 / len(PUNCTUATION))
    for text in NON_ASCII:
        add((text,), 0.001)
    vocab = sorted(texts, key=texts.get)
    weight = np.asarray(weight) / np.sum(weight)
    return vocab, np.asarray(first, np.int32), np.asarray(second, np.int32), weight


def synthesise(root: Path, n_tokens: int, num_shards: int = 8, seed: int = 0) -> dict:
    """Write shard records and sequences under ``root`` like generation does; describe them."""
    rng = np.random.default_rng(seed)
    vocab, first, second, weight = _units(_vocabulary(rng))
    vocab_array = pa.array(vocab, pa.string())
    token_weight = np.bincount(first, weights=weight, minlength=len(vocab))
    token_weight += np.bincount(
        second[second >= 0], weights=weight[second >= 0], minlength=len(vocab)
    )
    token_weight /= token_weight.sum()
    n_prompts = max(num_shards, round(n_tokens / 4000 / SAMPLES))
    lengths = rng.integers(500, 7500, n_prompts * SAMPLES).astype(np.float64)
    lengths = np.maximum(2, np.round(lengths / lengths.sum() * n_tokens)).astype(np.int64)
    lengths[-1] += n_tokens - lengths.sum()
    prompt_of = np.repeat(np.arange(n_prompts), SAMPLES)
    sample_of = np.tile(np.arange(SAMPLES), n_prompts)
    shard_dir = root / "data" / "02_intermediate" / "token_records" / RUN / f"step_{STEP}"
    for shard in range(num_shards):
        mine = np.flatnonzero(prompt_of % num_shards == shard)
        lens = lengths[mine]
        n = int(lens.sum())
        units = rng.choice(weight.size, size=n, p=weight)
        two = second[units] >= 0
        at = np.arange(n) + np.concatenate([[0], np.cumsum(two)[:-1]])
        ids = np.empty(n + int(two.sum()), np.int32)
        ids[at] = first[units]
        ids[at[two] + 1] = second[units[two]]
        ids = ids[:n]
        ids[np.cumsum(lens) - 1] = 0  # EOS
        special = ids == 0
        entropy = np.where(
            rng.random(n) < 0.5, rng.exponential(0.002, n), rng.gamma(1.2, 0.8, n)
        ).astype(np.float32)
        top = np.sort(
            rng.dirichlet(np.full(TOP_K + 1, 0.5), n).astype(np.float32)[:, :TOP_K], axis=1
        )[:, ::-1].copy()
        low = entropy < 0.01
        top[low, 0] = 1 - entropy[low]
        top[low, 1:] = entropy[low, None] / (2 * TOP_K)
        candidates = rng.choice(len(vocab), size=(n, TOP_K), p=token_weight).astype(np.int32)
        candidates[:, 0] = ids
        offsets = pa.array(np.arange(0, (n + 1) * TOP_K, TOP_K, dtype=np.int32))
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        meta = {
            b"hed.generation": json.dumps(
                {
                    "run": RUN,
                    "step": STEP,
                    "shard": shard,
                    "num_shards": num_shards,
                    "samples_per_prompt": SAMPLES,
                }
            ).encode()
        }
        records = pa.table(
            {
                "run": pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(n, np.int32)), pa.array([RUN])
                ),
                "step": np.full(n, STEP, np.int32),
                "shard": np.full(n, shard, np.int16),
                "prompt_index": np.repeat(prompt_of[mine], lens).astype(np.int32),
                "sample_index": np.repeat(sample_of[mine], lens).astype(np.int16),
                "position": (np.arange(n) - np.repeat(starts, lens)).astype(np.int32),
                "token_id": ids,
                "token_text": vocab_array.take(pa.array(ids)),
                "entropy": entropy,
                "logprob": np.log(top[:, 0]),
                "prob": top[:, 0],
                "topk_token_ids": pa.ListArray.from_arrays(
                    offsets, pa.array(candidates.reshape(-1))
                ),
                "topk_probs": pa.ListArray.from_arrays(offsets, pa.array(top.reshape(-1))),
                "is_special": special,
                # the word-start mass columns, as a recorder writes them (8 bytes per record)
                "anthropomorphic_mass": (0.1 * top[:, 0]).astype(np.float32),
                "reasoning_mass": (0.2 * top[:, 0]).astype(np.float32),
            },
            schema=TOKEN_RECORD_SCHEMA,
        )
        write_parquet_atomically(
            shard_dir / f"shard_{shard}.parquet" / VERSION / f"shard_{shard}.parquet",
            records.replace_schema_metadata(meta),
        )
        sequences = pa.table(
            {
                "run": [RUN] * mine.size,
                "step": np.full(mine.size, STEP, np.int32),
                "shard": np.full(mine.size, shard, np.int16),
                "prompt_index": prompt_of[mine].astype(np.int32),
                "prompt_id": [f"p{i:05d}" for i in prompt_of[mine]],
                "sample_index": sample_of[mine].astype(np.int16),
                "response_text": ["…"] * mine.size,
                "n_tokens": lens.astype(np.int32),
                "finish_reason": ["eos"] * mine.size,
                "extracted_answer": ["1"] * mine.size,
                "correct": rng.random(mine.size) < 0.3,
            },
            schema=SEQUENCE_SCHEMA,
        )
        name = f"shard_{shard}.sequences.parquet"
        write_parquet_atomically(
            shard_dir / name / VERSION / name, sequences.replace_schema_metadata(meta)
        )
        del records, sequences
    prompts = pd.DataFrame(
        {
            "prompt_index": np.arange(n_prompts, dtype=np.int32),
            "prompt_id": [f"p{i:05d}" for i in range(n_prompts)],
        }
    )
    prompts.to_parquet(root / "prompts.parquet")
    return {
        "n_tokens": n_tokens,
        "n_prompts": n_prompts,
        "num_shards": num_shards,
        "shard_dir": str(shard_dir),
    }


def _shard_files(root: Path, num_shards: int, kind: str) -> list[Path]:
    shard_dir = root / "data" / "02_intermediate" / "token_records" / RUN / f"step_{STEP}"
    suffix = ".sequences.parquet" if kind == "sequences" else ".parquet"
    return [
        shard_dir / f"shard_{k}{suffix}" / VERSION / f"shard_{k}{suffix}" for k in range(num_shards)
    ]


def _parameters() -> dict:
    """``generation`` and ``aggregation`` parameters of ``conf/base``."""
    params = {}
    for name in ("parameters_generation.yml", "parameters_aggregation.yml"):
        params |= yaml.safe_load((REPO / "conf" / "base" / name).read_text())
    return params


# ------------------------------------------------------------------------------- HED


def run_hed(root: Path, num_shards: int) -> dict:
    """Run the aggregation pipeline on the project's catalog, every path under ``root``."""
    # imported here, so that importing Kedro counts in HED's time and not in the naive run's
    from kedro.config import OmegaConfigLoader
    from kedro.io import DataCatalog, MemoryDataset
    from kedro.runner import SequentialRunner

    from hed.config.layout import RunSpec, StudyLayout
    from hed.pipelines.aggregation import create_pipeline

    params = _parameters()
    config = OmegaConfigLoader(str(REPO / "conf"), base_env="base", default_run_env="local")[
        "catalog"
    ]
    for entry in config.values():
        if isinstance(entry, dict) and "filepath" in entry:
            entry["filepath"] = str(root / entry["filepath"])
    catalog = DataCatalog.from_config(config)
    catalog["prompts"] = MemoryDataset(pd.read_parquet(root / "prompts.parquet"))
    catalog["params:generation"] = MemoryDataset(
        {**params["generation"], "num_shards": num_shards, "samples_per_prompt": SAMPLES}
    )
    catalog["params:aggregation"] = MemoryDataset(params["aggregation"])
    # the synthesised shards carry no hed.generation metadata: nothing to compare for staleness
    catalog["params:prompts"] = MemoryDataset(params["prompts"])
    catalog["checkpoints"] = MemoryDataset({})
    layout = StudyLayout(
        runs=(RunSpec(name=RUN, role="single", checkpoint_root="-", steps=(STEP,)),),
        num_shards=num_shards,
    )
    SequentialRunner().run(create_pipeline(layout), catalog)
    return {
        "token_records": str(catalog.get(f"{RUN}.step_{STEP}.token_records").load_path),
        "high_entropy_positions": str(catalog.get("high_entropy_positions").load_path),
        "entropy_thresholds": str(catalog.get("entropy_thresholds")._get_load_path()),
        "words": str(catalog.get("token_probability_mass_high_entropy")._get_load_path()),
    }


# ------------------------------------------------------------------------------- naive


RUN_RE = re.compile(r"[^\W\d_]+")


def _unspaced(ch: str) -> bool:
    return unicodedata.name(ch, "").startswith(
        (
            "CJK UNIFIED IDEOGRAPH",
            "CJK COMPATIBILITY IDEOGRAPH",
            "HIRAGANA",
            "KATAKANA",
            "HALFWIDTH KATAKANA",
            "THAI",
            "LAO",
            "KHMER",
            "MYANMAR",
        )
    )


def _naive_response_words(texts: list[str], special: np.ndarray) -> list[str]:
    """Words of one response: regex letter runs of its text, the first one overlapping a token."""
    text = "".join("\0" * len(t) if s else t for t, s in zip(texts, special, strict=True))
    bounds = np.cumsum([0] + [len(t) for t in texts])
    runs = []
    for match in RUN_RE.finditer(text):
        start = match.start()
        if not match.group().isascii():  # split where spaced and unspaced scripts meet
            flags = [_unspaced(c) for c in match.group()]
            for i in range(1, len(flags)):
                if flags[i] != flags[i - 1]:
                    runs.append((start, match.start() + i))
                    start = match.start() + i
        runs.append((start, match.end()))
    if not runs:
        return [""] * len(texts)
    starts = np.array([r[0] for r in runs])
    ends = np.array([r[1] for r in runs])
    which = np.searchsorted(
        ends, bounds[:-1], side="right"
    )  # first run ending after the token start
    words = []
    for i, r in enumerate(which):
        if r < len(runs) and starts[r] < bounds[i + 1]:
            s, e = runs[r]
            if _unspaced(text[s]):
                s, e = max(s, bounds[i]), min(e, bounds[i + 1])
            words.append(text[s:e].lower())
        else:
            words.append("")
    return words


def run_naive(root: Path, num_shards: int, out: Path) -> dict:
    """The same outputs with plain pandas, everything in memory."""
    params = _parameters()
    rho = params["aggregation"]["top_entropy_frac"]
    lexicon = {}
    for category, words in params["aggregation"]["lexicon"].items():
        for word in words:
            lexicon.setdefault(word, category)
    prompts = pd.read_parquet(root / "prompts.parquet")
    records = pd.concat(
        [pd.read_parquet(f) for f in _shard_files(root, num_shards, "records")], ignore_index=True
    )
    sequences = pd.concat(
        [pd.read_parquet(f) for f in _shard_files(root, num_shards, "sequences")], ignore_index=True
    )
    # coverage
    keys = ["prompt_index", "sample_index", "position"]
    assert not records.duplicated(keys).any(), "duplicated records"
    assert (records.prompt_index % num_shards == records.shard).all(), "records in the wrong shard"
    expected = {(p, s) for p in prompts.prompt_index for s in range(SAMPLES)}
    found = set(zip(sequences.prompt_index, sequences.sample_index, strict=True))
    assert found == expected, "coverage"
    records = records.sort_values(keys, ignore_index=True)
    # threshold: sort the non-special tokens by (-entropy, key), take ⌈ρN⌉
    regular = records[~records.is_special]
    n = len(regular)
    k = math.ceil(Fraction(str(rho)) * n)
    ranked = regular.assign(neg=-regular.entropy.astype(np.float64)).sort_values(["neg", *keys])
    high_index = ranked.index[:k]
    records["is_high_entropy"] = False
    records.loc[high_index, "is_high_entropy"] = True
    entropy = regular.entropy.to_numpy()
    threshold = float(records.loc[high_index, "entropy"].min())
    q = np.quantile(entropy.astype(np.float64), [0.5, 0.8, 0.9, 0.95])
    thresholds = pd.DataFrame(
        [
            {
                "run": RUN,
                "step": STEP,
                "n_tokens": n,
                "top_entropy_frac": rho,
                "n_high_entropy": k,
                "threshold": threshold,
                "p50": q[0],
                "p80": q[1],
                "p90": q[2],
                "p95": q[3],
                "frac_below_0_01": float((entropy.astype(np.float64) < 0.01).mean()),
                "mean_entropy": float(entropy.astype(np.float64).mean()),
            }
        ]
    )
    # words per response
    texts = records.token_text.tolist()
    special = records.is_special.to_numpy()
    bounds = [*np.flatnonzero(records.position.to_numpy() == 0).tolist(), len(records)]
    words = []
    for a, b in itertools.pairwise(bounds):
        words += _naive_response_words(texts[a:b], special[a:b])
    records["word"] = words
    records["category"] = records.word.map(lexicon).fillna("other")
    # tables
    high = records[records.is_high_entropy]
    named = high[high.word != ""]
    table = named.groupby("word").agg(count=("word", "size"), sampled_prob_sum=("prob", "sum"))
    first = records.drop_duplicates("token_id")
    own = dict(
        zip(
            first.token_id,
            first.token_text.str.extract(f"({RUN_RE.pattern})", expand=False)
            .str.lower()
            .fillna(""),
            strict=True,
        )
    )
    candidates = high[["token_id", "word", "topk_token_ids", "topk_probs"]].explode(
        ["topk_token_ids", "topk_probs"]
    )
    candidate_word = candidates.topk_token_ids.map(own).where(
        candidates.topk_token_ids != candidates.token_id, candidates.word
    )
    candidates = candidates.assign(
        cword=candidate_word.fillna(""), p=candidates.topk_probs.astype(float)
    )
    mass = candidates[candidates.cword != ""].groupby("cword")["p"].sum().to_dict()
    table = table.reindex(sorted(set(table.index) | set(mass)), fill_value=0)
    table["topk_mass"] = pd.Series(mass).reindex(table.index).fillna(0.0)
    for col, share in (
        ("count", "count_share"),
        ("sampled_prob_sum", "sampled_prob_share"),
        ("topk_mass", "topk_mass_share"),
    ):
        table[share] = table[col] / table[col].sum()
    table = table.reset_index().assign(
        run=RUN, step=STEP, category=lambda t: t.word.map(lexicon).fillna("other")
    )
    categories = table.groupby("category")[["count", "sampled_prob_sum", "topk_mass"]].sum()
    summary = pd.DataFrame(
        [
            {
                "run": RUN,
                "step": STEP,
                "n_sequences": len(sequences),
                "n_tokens": n,
                "mean_response_length": sequences.n_tokens.mean(),
                "mean_entropy": thresholds.mean_entropy[0],
                "threshold": threshold,
                "n_high_entropy": k,
                **{
                    f"n_high_entropy_{c}": int((high.category == c).sum())
                    for c in ("anthropomorphic", "reasoning", "other")
                },
                "pass1_generated": sequences.correct.mean(),
            }
        ]
    )
    out.mkdir(parents=True, exist_ok=True)
    records.to_parquet(out / "token_records.parquet")
    sequences.to_parquet(out / "sequences.parquet")
    high.drop(columns=["shard", "is_special", "is_high_entropy"]).to_parquet(
        out / "high_entropy_positions.parquet"
    )
    thresholds.to_csv(out / "entropy_thresholds.csv", index=False)
    table.to_csv(out / "words.csv", index=False)
    categories.to_csv(out / "categories.csv")
    summary.to_csv(out / "summary.csv", index=False)
    return {
        "token_records": str(out / "token_records.parquet"),
        "high_entropy_positions": str(out / "high_entropy_positions.parquet"),
        "entropy_thresholds": str(out / "entropy_thresholds.csv"),
        "words": str(out / "words.csv"),
    }


# ------------------------------------------------------------------------------- harness


def _child(kind: str, root: Path, num_shards: int) -> None:
    """Run one implementation in this (fresh) process and print its figures as JSON."""
    logging.disable(logging.INFO)
    started, cpu0 = time.perf_counter(), os.times()
    if kind == "hed":
        outputs = run_hed(root, num_shards)
    else:
        outputs = run_naive(root, num_shards, root / "naive")
    cpu1 = os.times()
    print(
        "RESULT "
        + json.dumps(
            {
                "wall_s": time.perf_counter() - started,
                "cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
                "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
                "outputs": outputs,
            }
        )
    )


def _measure(kind: str, root: Path, num_shards: int) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--workdir",
            str(root),
            "--shards",
            str(num_shards),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"{kind} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def _agree(hed: dict, naive: dict) -> list[str]:
    """Compare the two implementations' outputs; return the differences found."""
    problems = []
    a = pd.read_csv(hed["entropy_thresholds"]).iloc[0]
    b = pd.read_csv(naive["entropy_thresholds"]).iloc[0]
    for col in ("n_tokens", "n_high_entropy", "threshold"):
        if a[col] != b[col]:
            problems.append(f"{col}: hed {a[col]} vs naive {b[col]}")
    for col in ("p50", "p80", "p90", "p95", "frac_below_0_01", "mean_entropy"):
        if not np.isclose(a[col], b[col], rtol=1e-9, atol=1e-12):
            problems.append(f"{col}: hed {a[col]} vs naive {b[col]}")
    for column in (
        "prompt_index",
        "sample_index",
        "position",
        "word",
        "category",
        "is_high_entropy",
    ):
        x = pq.read_table(hed["token_records"], columns=[column]).column(0)
        y = pq.read_table(naive["token_records"], columns=[column]).column(0).cast(x.type)
        if not x.equals(y):
            problems.append(f"merged records differ in column {column}")
    wa = pd.read_csv(hed["words"], keep_default_na=False).set_index("word").sort_index()
    wb = pd.read_csv(naive["words"], keep_default_na=False).set_index("word").sort_index()
    if list(wa.index) != list(wb.index):
        problems.append(f"word tables list different words ({len(wa)} vs {len(wb)})")
    else:
        if not (wa["count"] == wb["count"]).all() or not (wa["category"] == wb["category"]).all():
            problems.append("word counts or categories differ")
        for col in (
            "sampled_prob_sum",
            "sampled_prob_share",
            "topk_mass",
            "topk_mass_share",
            "count_share",
        ):
            if not np.allclose(wa[col], wb[col], rtol=1e-6, atol=1e-9):
                problems.append(f"word table column {col} differs")
    return problems


def _figures(label: str, fig: dict) -> str:
    return (
        f"  {label:6s}: {fig['wall_s']:7.1f} s wall  {fig['cpu_s']:7.1f} s cpu  "
        f"{fig['peak_rss_gb']:5.2f} GB peak RSS"
    )


def _best(kind: str, root: Path, num_shards: int, repeat: int) -> dict:
    """Best (shortest wall time) of ``repeat`` measurements: a shared machine only adds time."""
    return min((_measure(kind, root, num_shards) for _ in range(repeat)), key=lambda f: f["wall_s"])


def _bench_size(root: Path, size: int, num_shards: int, skip_naive: bool, repeat: int) -> dict:
    """Synthesise one size, measure HED (and the naive run), compare; return the figures."""
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    info = synthesise(root, size, num_shards)
    print(
        f"\n{size:,} tokens, {info['n_prompts']} prompts × {SAMPLES} samples in {num_shards} "
        f"shards (synthesised in {time.perf_counter() - t0:.0f} s)",
        flush=True,
    )
    hed = _best("hed", root, num_shards, repeat)
    print(_figures("hed", hed), flush=True)
    row = {"tokens": size, "hed_wall_s": hed["wall_s"], "hed_cpu_s": hed["cpu_s"]}
    row["hed_rss_gb"] = hed["peak_rss_gb"]
    if skip_naive:
        return row
    naive = _best("naive", root, num_shards, repeat)
    print(_figures("naive", naive), flush=True)
    problems = _agree(hed["outputs"], naive["outputs"])
    verdict = "yes (threshold, count, high-entropy set, words, categories, word table)"
    print("  agree : " + (verdict if not problems else "NO: " + "; ".join(problems)), flush=True)
    return row | {
        "naive_wall_s": naive["wall_s"],
        "naive_cpu_s": naive["cpu_s"],
        "naive_rss_gb": naive["peak_rss_gb"],
        "speedup_wall": naive["wall_s"] / hed["wall_s"],
        "speedup_cpu": naive["cpu_s"] / hed["cpu_s"],
        "agree": not problems,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5e6,10e6,20e6", help="token counts, e.g. 0.5e6,1e6")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workdir", type=Path, help="where shard files go (default: a temp dir)")
    parser.add_argument("--skip-naive", action="store_true", help="measure HED only")
    parser.add_argument("--keep", action="store_true", help="keep the synthesised files")
    parser.add_argument("--repeat", type=int, default=1, help="measure each N times, keep the best")
    parser.add_argument("--child", choices=["hed", "naive"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.workdir, args.shards)
        return
    base = args.workdir or Path(tempfile.mkdtemp(prefix="hed-bench-"))
    results = []
    try:
        for size in [int(float(s)) for s in args.sizes.split(",")]:
            root = base / f"n{size}"
            results.append(_bench_size(root, size, args.shards, args.skip_naive, args.repeat))
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    table = pd.DataFrame(results)
    if len(table) > 1:  # linearity: time ratio to the previous size
        table["hed_wall_vs_previous"] = table.hed_wall_s / table.hed_wall_s.shift()
    print("\n" + table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))


if __name__ == "__main__":
    main()
