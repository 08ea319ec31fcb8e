"""Benchmark: records per second of the rollouts path (a verl dump scored teacher-forced) against
sampling the same tokens (docs/rollouts.md).

The demo model (SmolLM2-135M-Instruct, float32, ``--threads`` CPU threads) samples responses
to the demo prompts with HED's generation backend (``--backend hf``: transformers ``generate``;
``vllm``: a vLLM engine, on CPU where there is no GPU), timed. The responses are written as a
verl dump (:func:`hed.mini_rl.rollout_dump.write_verl_dump`, with the sampled ids), then the
rollouts path is timed on it: read the dump, rebuild the ids (:mod:`hed.decode.rollouts`) and
score them teacher-forced (:func:`hed.decode.teacher_forced.score_responses`, the node's
scorer). Printed: records (= response tokens) per second of both and their ratio, and the share
of responses whose canonical tokenisation differs from the sampled ids (the ``ids_differ``
share of docs/rollouts.md).

Usage::

    python bench/rollouts.py                          # 8 prompts × 2 samples × 64 tokens, hf
    python bench/rollouts.py --prompts 24 --max-new-tokens 256 --backend vllm
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    args = parser.parse_args()

    import pandas as pd

    from hed.decode.embedded import ensure_embedded_checkpoint
    from hed.decode.factory import open_backend
    from hed.decode.prompts import prompt_id, render_prompt
    from hed.decode.rollouts import prompt_lookup, rebuild_responses
    from hed.decode.teacher_forced import score_responses
    from hed.decode.types import PromptInput, ResponseToScore, SamplingParams
    from hed.mini_rl.rollout_dump import write_verl_dump
    from hed.records.verl_dump import read_dump_step

    model_dir = ensure_embedded_checkpoint(
        REPO / ".pytest_cache/hed_models/smollm2/global_step_0/actor_hf"
    )
    lines = (REPO / "data/01_raw/prompts/demo_math.jsonl").read_text().splitlines()
    questions = [json.loads(x)["problem"] for x in lines if x.strip()][: args.prompts]
    prompts = pd.DataFrame(
        {"prompt_index": range(len(questions)), "prompt": questions,
         "prompt_id": [prompt_id(q) for q in questions]}
    )  # fmt: skip
    params = SamplingParams(max_new_tokens=args.max_new_tokens, seed=0, batch_size=8)
    with open_backend(args.backend, model_dir, dtype="float32", torch_threads=args.threads) as b:
        inputs = [
            PromptInput(i, pid, render_prompt(b.tokenizer, q, {}))
            for i, pid, q in zip(prompts.prompt_index, prompts.prompt_id, questions, strict=True)
        ]
        start = time.perf_counter()
        sampled = list(b.generate(inputs, args.samples, params))
        sample_s = time.perf_counter() - start
        tokenizer, eos = b.tokenizer, b.eos_token_ids
    n_tokens = sum(len(s.token_ids) for s in sampled)
    encoded = {
        p.prompt_index: tokenizer(p.text, add_special_tokens=False)["input_ids"] for p in inputs
    }
    with tempfile.TemporaryDirectory() as folder:
        write_verl_dump(
            folder,
            1,
            prompt_ids=[encoded[s.prompt_index] for s in sampled],
            response_ids=[s.token_ids.tolist() for s in sampled],
            tokenizer=tokenizer,
            scores=[0.0] * len(sampled),
        )
        with open_backend("hf", model_dir, dtype="float32", torch_threads=args.threads) as hf:
            start = time.perf_counter()
            rebuilt = rebuild_responses(
                read_dump_step(folder, 1),
                prompt_lookup(prompts, hf.tokenizer, {}),
                hf.tokenizer,
                eos_token_ids=eos,
                max_response_length=args.max_new_tokens,
            )
            items = [
                ResponseToScore(r.prompt_index, r.sample_index, r.prompt_ids, r.response_ids)
                for r in rebuilt
            ]
            scored = list(score_responses(hf.model, items, batch_size=8))
            score_s = time.perf_counter() - start
    scored_tokens = sum(len(s.token_ids) for s in scored)
    differs = [r.canonical_differs for r in rebuilt]
    flags = pd.Series([r.flag for r in rebuilt]).value_counts().to_dict()
    print(
        f"SmolLM2-135M, float32, {args.threads} thread(s): {len(sampled)} responses, "
        f"{n_tokens} tokens (max_new_tokens {args.max_new_tokens})"
    )
    sample_rate = n_tokens / sample_s
    print(f"  sampling ({args.backend:4s})       {sample_s:8.2f} s  {sample_rate:9.1f} records/s")
    print(f"  rollouts path (hf)    {score_s:8.2f} s  {scored_tokens / score_s:9.1f} records/s")
    print(f"  ratio rollouts / sampling: {(scored_tokens / score_s) / (n_tokens / sample_s):.1f}x")
    print(
        f"  canonical tokenisation differs from the sampled ids: {sum(differs)} of "
        f"{len(differs)} responses ({sum(differs) / len(differs):.1%}); flags {flags}"
    )


if __name__ == "__main__":
    main()
