"""Benchmark: file size, load time and scrolling of the study explorer at study scale.

A synthetic study of ``--runs`` runs × ``--steps`` steps × ``--responses`` responses ×
``--tokens`` tokens (default 2 × 20 × 64 × 4,000 = 10.24 M token records; k = 5
alternatives; words with leading spaces, punctuation, numbers, newlines; half the entropies
near zero; 4 samples per prompt, a third of them correct) is built in memory as merged records,
turned into the page by :func:`hed.report.explorer.build_explorer` with the default
``reporting.explorer`` bounds (or ``--responses-per-step`` / ``--max-tokens``), written to disk
and opened in Debian's headless ``chromium`` (Playwright, offline, fresh context). Printed:

* the HTML file size (bytes per embedded token), and as a baseline the token report of the same
  study at its own defaults (8 responses × 2,000 tokens per step, every token drawn at load);
* build time (Python);
* load time: ``goto`` until the page is ready *and* the first response's tokens are drawn and
  painted, best of ``--repeat``; the same for the token report, and the ratio;
* scrolling: 30 scrolls of 900 px down the first step's list, the time from each scroll to the
  next painted frame (median and max, ms) and the token spans alive at the end (only those on
  or near the screen are drawn).

Usage::

    python bench/explorer.py                          # 2 runs x 20 steps x 64 x 4,000
    python bench/explorer.py --steps 4 --no-baseline  # quicker
"""

from __future__ import annotations

import argparse
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa

from hed.records.schema import MERGED_TOKEN_RECORD_SCHEMA, SEQUENCE_SCHEMA
from hed.report import token_report as tr
from hed.report.explorer import ExplorerOptions, build_explorer, render_explorer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WORDS = (
    "so let wait perhaps we need the answer is then but check that this number of a to and "
    "sum value it hmm maybe compute find therefore first next if x y equation gives"
).split()
ANTHRO = {"wait", "perhaps", "hmm", "maybe"}
REASON = {"so", "let", "then", "but", "check", "compute", "find", "therefore", "first", "next"}


def synthetic_step(run: str, step: int, responses: int, tokens: int):
    """Merged records and sequences of one synthetic step, built column-wise with numpy."""
    rng = np.random.default_rng([zlib.crc32(run.encode()), step])
    n = responses * tokens
    vocab = np.array([" " + w for w in WORDS] + [",", ".", " =", " 42", "\n", " 7", ":"])
    word_of = np.array(WORDS + [""] * 7)
    category_of = np.array(
        [
            "anthropomorphic" if w in ANTHRO else "reasoning" if w in REASON else "other"
            for w in word_of
        ]
    )
    ids = (rng.zipf(1.6, n) % len(vocab)).astype(np.int32)
    ent = np.where(rng.random(n) < 0.5, rng.uniform(1e-5, 0.01, n), rng.lognormal(-0.7, 1.1, n))
    probs = np.sort(rng.dirichlet(np.full(5, 0.6), n), axis=1)[:, ::-1].astype(np.float32)
    topk = ((ids[:, None] + np.arange(5)[None, :]) % len(vocab)).astype(np.int32)
    prompt = np.repeat(np.arange(responses) // 4, tokens).astype(np.int32)
    sample = np.repeat(np.arange(responses) % 4, tokens).astype(np.int16)
    table = pa.table(
        {
            "run": pa.array([run] * n).dictionary_encode(),
            "step": pa.array(np.full(n, step, np.int32)),
            "shard": pa.array(np.zeros(n, np.int16)),
            "prompt_index": prompt,
            "sample_index": sample,
            "position": np.tile(np.arange(tokens), responses).astype(np.int32),
            "token_id": ids,
            "token_text": pa.array(vocab[ids]),
            "entropy": ent.astype(np.float32),
            "logprob": np.log(probs[:, 0]),
            "prob": probs[:, 0],
            "topk_token_ids": pa.FixedSizeListArray.from_arrays(pa.array(topk.ravel()), 5),
            "topk_probs": pa.FixedSizeListArray.from_arrays(pa.array(probs.ravel()), 5),
            "is_special": np.zeros(n, bool),
            "anthropomorphic_mass": pa.nulls(n, pa.float32()),  # not recorded here
            "reasoning_mass": pa.nulls(n, pa.float32()),
            "word": pa.array(word_of[ids]),
            "category": pa.array(category_of[ids]),
            "is_high_entropy": ent >= np.quantile(ent, 0.8),
        }
    ).cast(MERGED_TOKEN_RECORD_SCHEMA)
    seqs = pa.table(
        {
            "run": [run] * responses,
            "step": np.full(responses, step, np.int32),
            "shard": np.zeros(responses, np.int16),
            "prompt_index": (np.arange(responses) // 4).astype(np.int32),
            "prompt_id": [f"{p // 4:016x}" for p in range(responses)],
            "sample_index": (np.arange(responses) % 4).astype(np.int16),
            "response_text": [""] * responses,
            "n_tokens": np.full(responses, tokens, np.int32),
            "finish_reason": ["length"] * responses,
            "extracted_answer": ["42"] * responses,
            "correct": ((np.arange(responses) + step) % 3 == 0).tolist(),
        }
    ).cast(SEQUENCE_SCHEMA)
    return table, seqs.to_pandas()


def load(browser, path: Path, first_tokens: bool) -> float:
    """Seconds from ``goto`` to ready (and, for the explorer, the first tokens) and a paint."""
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    start = time.perf_counter()
    page.goto(path.as_uri(), timeout=300_000)
    page.wait_for_selector("body[data-ready='1']", timeout=300_000)
    if first_tokens:
        page.wait_for_selector("#list span.t", timeout=300_000)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
    seconds = time.perf_counter() - start
    context.close()
    return seconds


def scrolling(browser, path: Path) -> tuple[float, float, int]:
    """(median ms, max ms) from a 900 px scroll to the next painted frame, 30 scrolls; spans."""
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(path.as_uri(), timeout=300_000)
    page.wait_for_selector("#list span.t", timeout=300_000)
    times = page.evaluate(
        """async () => { const out = [];
        for (let i = 0; i < 30; i++) {
          const t = performance.now(); window.scrollBy(0, 900);
          await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
          out.push(performance.now() - t); }
        return out; }"""
    )
    spans = page.locator("#list span.t").count()
    context.close()
    return float(np.median(times)), float(np.max(times)), spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--responses", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument(
        "--responses-per-step", type=int, default=ExplorerOptions().responses_per_step
    )
    parser.add_argument("--max-tokens", type=int, default=ExplorerOptions().max_tokens_per_response)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-baseline", action="store_true", help="skip the token report")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    start = time.perf_counter()
    steps = []
    for r in range(args.runs):
        for step in range(args.steps):
            records, seqs = synthetic_step(f"run{r}", 10 * step, args.responses, args.tokens)
            steps.append(tr.StepInput(f"run{r}", "single", 10 * step, seqs, records))
    synth_s = time.perf_counter() - start
    options = ExplorerOptions(
        responses_per_step=args.responses_per_step, max_tokens_per_response=args.max_tokens
    )
    start = time.perf_counter()
    page = render_explorer(build_explorer(steps, options))
    build_s = time.perf_counter() - start
    baseline = None
    if not args.no_baseline:
        start = time.perf_counter()
        baseline = tr.render_html(tr.build_report(steps, tr.TokenReportOptions()))
        base_build_s = time.perf_counter() - start
    n_study = args.runs * args.steps * args.responses * args.tokens
    n_embedded = (
        args.runs
        * args.steps
        * min(args.responses, args.responses_per_step)
        * min(args.tokens, args.max_tokens)
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "study_explorer.html"
        path.write_text(page, encoding="utf-8")
        size = path.stat().st_size
        base_path = Path(tmp) / "token_report.html"
        if baseline is not None:
            base_path.write_text(baseline, encoding="utf-8")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            ready = min(load(browser, path, True) for _ in range(args.repeat))
            median_ms, max_ms, spans = scrolling(browser, path)
            base_ready = (
                min(load(browser, base_path, False) for _ in range(args.repeat))
                if baseline is not None
                else None
            )
            browser.close()
    print(
        f"study explorer: {args.runs} runs x {args.steps} steps x {args.responses} responses x "
        f"{args.tokens} tokens = {n_study:,} token records (synthesised in {synth_s:.1f} s)"
    )
    print(
        f"  embedded: {args.responses_per_step} responses x {args.max_tokens} tokens per step "
        f"= {n_embedded:,} tokens"
    )
    print(
        f"  HTML file        {size / 1e6:8.2f} MB  ({size / n_embedded:.0f} bytes/embedded token)"
    )
    print(f"  build (Python)   {build_s:8.2f} s")
    print(f"  chromium load to first tokens painted {ready:6.2f} s (best of {args.repeat})")
    print(
        f"  scrolling: 30 x 900 px, scroll to painted frame median {median_ms:.0f} ms, "
        f"max {max_ms:.0f} ms; {spans:,} token spans alive after scrolling"
    )
    if baseline is not None:
        base_size = len(baseline.encode("utf-8"))
        print(
            f"  baseline token report (8 x 2000 per step, all drawn): {base_size / 1e6:.2f} MB, "
            f"build {base_build_s:.2f} s, load-to-ready {base_ready:.2f} s; explorer / token "
            f"report: size {size / base_size:.2f}x, load {ready / base_ready:.2f}x"
        )


if __name__ == "__main__":
    main()
