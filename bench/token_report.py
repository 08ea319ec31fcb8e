"""Benchmark: size and render time of the token report for 200 responses × 1,000 tokens.

Synthetic merged records of one run (``--steps`` steps, ``--responses`` responses per step,
``--tokens`` tokens each, k = 5 alternatives; realistic token texts: words with leading
spaces, punctuation, numbers, newlines; half the entropies near zero) are built in memory,
turned into the page by :func:`hed.report.token_report.build_report` + ``render_html`` (a
vocabulary from the records' own texts: no tokenizer), written to disk and opened in Debian's
headless ``chromium`` (Playwright, offline, fresh profile). Printed:

* the HTML file size, and its ratio to the same records as a zstd Parquet file (the
  merged-records format) and to the plain response text;
* build time (Python), load-to-ready time in Chromium (``goto`` until the page sets
  ``data-ready``, every token span drawn), the page's own script time, and the ratio of the
  load-to-ready time to that of a page holding the same text as one ``<pre>`` (the baseline:
  what a browser needs for the text alone).

Usage::

    python bench/token_report.py                      # 200 responses × 1,000 tokens, 1 step
    python bench/token_report.py --steps 3 --repeat 3
"""

from __future__ import annotations

import argparse
import html
import io
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hed.records.schema import MERGED_TOKEN_RECORD_SCHEMA, SEQUENCE_SCHEMA
from hed.report import token_report as tr

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
CATEGORY = {
    **dict.fromkeys(["wait", "perhaps", "hmm", "maybe"], "anthropomorphic"),
    **dict.fromkeys(
        [
            "so",
            "let",
            "then",
            "but",
            "check",
            "compute",
            "find",
            "therefore",
            "first",
            "next",
            "if",
        ],
        "reasoning",
    ),
}


def synthetic_step(step: int, responses: int, tokens: int, seed: int = 0):
    """Merged records and sequences of one synthetic step (schemas of docs/datasets.md)."""
    rng = np.random.default_rng(seed + step)
    n = responses * tokens
    vocab = np.array([" " + w for w in WORDS] + [",", ".", " =", " 42", "\n", " 7", ":"])
    word_of = [w for w in WORDS] + [""] * 7
    ids = rng.zipf(1.6, n) % len(vocab)
    ent = np.where(rng.random(n) < 0.5, rng.uniform(1e-5, 0.01, n), rng.lognormal(-0.7, 1.1, n))
    probs = np.sort(rng.dirichlet(np.full(5, 0.6), n), axis=1)[:, ::-1]
    topk = (ids[:, None] + np.arange(5)[None, :]) % len(vocab)
    words = [word_of[i] for i in ids]
    high = ent >= np.quantile(ent, 0.8)
    table = pa.table(
        {
            "run": pa.array(["bench"] * n).dictionary_encode(),
            "step": pa.array(np.full(n, step, np.int32)),
            "shard": pa.array(np.zeros(n, np.int16)),
            "prompt_index": pa.array(np.repeat(np.arange(responses) // 4, tokens).astype(np.int32)),
            "sample_index": pa.array(np.repeat(np.arange(responses) % 4, tokens).astype(np.int16)),
            "position": pa.array(np.tile(np.arange(tokens), responses).astype(np.int32)),
            "token_id": pa.array(ids.astype(np.int32)),
            "token_text": pa.array(vocab[ids].tolist()),
            "entropy": pa.array(ent.astype(np.float32)),
            "logprob": pa.array(np.log(probs[:, 0]).astype(np.float32)),
            "prob": pa.array(probs[:, 0].astype(np.float32)),
            "topk_token_ids": pa.array(topk.astype(np.int32).tolist(), pa.list_(pa.int32())),
            "topk_probs": pa.array(probs.astype(np.float32).tolist(), pa.list_(pa.float32())),
            "is_special": pa.array(np.zeros(n, bool)),
            "anthropomorphic_mass": pa.nulls(n, pa.float32()),  # not recorded here
            "reasoning_mass": pa.nulls(n, pa.float32()),
            "word": pa.array(words),
            "category": pa.array([CATEGORY.get(w, "other") for w in words]),
            "is_high_entropy": pa.array(high),
        }
    ).cast(MERGED_TOKEN_RECORD_SCHEMA)
    seqs = pa.table(
        {
            "run": ["bench"] * responses,
            "step": np.full(responses, step, np.int32),
            "shard": np.zeros(responses, np.int16),
            "prompt_index": (np.arange(responses) // 4).astype(np.int32),
            "prompt_id": [f"{p // 4:016x}" for p in range(responses)],
            "sample_index": (np.arange(responses) % 4).astype(np.int16),
            "response_text": [""] * responses,
            "n_tokens": np.full(responses, tokens, np.int32),
            "finish_reason": ["length"] * responses,
            "extracted_answer": ["42"] * responses,
            "correct": (np.arange(responses) % 3 == 0).tolist(),
        }
    ).cast(SEQUENCE_SCHEMA)
    return table, seqs.to_pandas()


def load_to_ready(browser, path: Path, ready: str | None) -> tuple[float, float | None]:
    """Seconds from ``goto`` to ready (``data-ready`` set, or the load event), and the page's
    own ``window.hedRenderMs``."""
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 900})
    page = context.new_page()
    start = time.perf_counter()
    page.goto(path.as_uri(), timeout=120_000)
    if ready:
        page.wait_for_function(ready, timeout=120_000, polling=20)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")  # first paint
    seconds = time.perf_counter() - start
    script_ms = page.evaluate("window.hedRenderMs === undefined ? null : window.hedRenderMs")
    context.close()
    return seconds, script_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=2, help="best of N browser loads")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    steps, parquet_bytes, text_chars, plain = [], 0, 0, []
    for step in range(args.steps):
        records, seqs = synthetic_step(step, args.responses, args.tokens)
        buffer = io.BytesIO()
        pq.write_table(records, buffer, compression="zstd")
        parquet_bytes += buffer.tell()
        texts = records.column("token_text").to_pylist()
        plain.append("".join(texts))
        text_chars += len(plain[-1])
        steps.append(
            tr.StepInput(run="bench", role="single", step=step, sequences=seqs, records=records)
        )
    options = tr.TokenReportOptions(
        responses_per_step=args.responses, max_tokens_per_response=args.tokens
    )
    start = time.perf_counter()
    page = tr.render_html(tr.build_report(steps, options))
    build_s = time.perf_counter() - start
    n_tokens = args.steps * args.responses * args.tokens
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "token_report.html"
        path.write_text(page, encoding="utf-8")
        baseline = Path(tmp) / "plain.html"
        baseline.write_text(
            "<!DOCTYPE html><meta charset=utf-8><pre>" + html.escape("".join(plain)) + "</pre>",
            encoding="utf-8",
        )
        size = path.stat().st_size
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            runs = [
                load_to_ready(browser, path, "document.body.dataset.ready === '1'")
                for _ in range(args.repeat)
            ]
            base = [load_to_ready(browser, baseline, None) for _ in range(args.repeat)]
            spans = None
            context = browser.new_context(offline=True)
            check = context.new_page()
            check.goto(path.as_uri(), timeout=120_000)
            check.wait_for_function("document.body.dataset.ready === '1'", timeout=120_000)
            spans = check.locator("#grid span.t").count()
            context.close()
            browser.close()
    ready_s, script_ms = min(runs)
    base_s = min(b[0] for b in base)
    print(
        f"token report: {args.steps} step(s) x {args.responses} responses x {args.tokens} "
        f"tokens = {n_tokens:,} token spans (drawn: {spans:,})"
    )
    print(f"  HTML file        {size / 1e6:8.2f} MB  ({size / n_tokens:.0f} bytes/token)")
    print(f"  vs zstd Parquet  {parquet_bytes / 1e6:8.2f} MB  (ratio {size / parquet_bytes:.2f}x)")
    print(f"  vs plain text    {text_chars / 1e6:8.2f} MB  (ratio {size / text_chars:.2f}x)")
    print(f"  build (Python)   {build_s:8.2f} s")
    print(
        f"  chromium load-to-ready {ready_s:6.2f} s  (page script {script_ms / 1e3:.2f} s), "
        f"best of {args.repeat}"
    )
    print(f"  plain <pre> page load  {base_s:6.2f} s  (ratio {ready_s / base_s:.1f}x)")


if __name__ == "__main__":
    main()
