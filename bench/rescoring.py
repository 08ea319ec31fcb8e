"""Benchmark: memory and speed of teacher-forced re-scoring (hed.decode.teacher_forced).

1. Memory. A tiny random Llama (hidden 32, 2 layers) with a Qwen-sized vocabulary of 151,936
   tokens re-scores one 4,096-token response (16-token prompt) in float32. Each measurement
   runs in a fresh subprocess; the peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs``
   after the model and the input are built and a short warm-up response was scored) minus the
   RSS before the call is the memory the call adds. Baseline in the same way: full logits
   (``model(...).logits``, what ``output_logits`` or a plain forward keeps: L × V float32) and
   the same statistics, measured at 1,024 tokens (at 4,096 it would be 2.5 GB of logits alone;
   the projection to 4,096 is printed).
2. Speed. The demo model (SmolLM2-135M-Instruct, float32, one thread) samples responses with
   HED's generation (``open_backend("hf", ...).generate``, the contract the generation
   pipeline uses) and the same process then re-scores them with ``score_responses``; tokens/s
   of both and their ratio. This is the cost of one teacher-forced pass against one sampling
   pass; ``bench/pipeline_time.py`` times the whole pipelines.

Usage::

    python bench/rescoring.py                # both parts
    python bench/rescoring.py --skip-speed   # memory only
    python bench/rescoring.py --length 2048 --chunk 32
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

QWEN_VOCAB = 151_936
REPO = Path(__file__).resolve().parents[1]


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS


def child_memory(method: str, length: int, chunk: int) -> dict:
    """Memory added by scoring one response of ``length`` tokens (run in a subprocess)."""
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from hed.core.entropy import token_distribution_stats, token_logprobs
    from hed.decode.teacher_forced import ResponseToScore, score_responses

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=QWEN_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, QWEN_VOCAB, 16).tolist()
    response = rng.integers(0, QWEN_VOCAB, length).astype(np.int32)
    item = ResponseToScore(0, 0, prompt, response)
    warm = ResponseToScore(0, 0, prompt, response[:16])

    def hed():
        return next(iter(score_responses(model, [item], chunk_positions=chunk))).entropy

    def full_logits():
        ids = torch.tensor([prompt + response[:-1].tolist()])
        with torch.inference_mode():
            logits = model(ids).logits[0, len(prompt) - 1 :]  # (L, V) float32
            stats = token_distribution_stats(logits, 1.0, 5)
            token_logprobs(logits, torch.from_numpy(response), stats.log_z)
        return stats.entropy.numpy()

    list(score_responses(model, [warm], chunk_positions=chunk))  # kernels, allocator pools
    run = {"hed": hed, "full_logits": full_logits}[method]
    before = _rss_kib("VmRSS")
    _reset_peak()
    start = time.perf_counter()
    entropy = run()
    seconds = time.perf_counter() - start
    peak = _rss_kib("VmHWM")
    return {
        "method": method,
        "length": length,
        "added_mib": (peak - before) / 1024,
        "seconds": seconds,
        "mean_entropy": float(entropy.mean()),
    }


def measure(method: str, length: int, chunk: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            method,
            "--length",
            str(length),
            "--chunk",
            str(chunk),
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def speed(n_prompts: int, samples: int, max_new_tokens: int) -> None:
    import numpy as np

    from hed.decode.embedded import ensure_embedded_checkpoint
    from hed.decode.factory import open_backend
    from hed.decode.teacher_forced import compare_scores, score_responses
    from hed.decode.types import PromptInput, ResponseToScore, SamplingParams

    model_dir = ensure_embedded_checkpoint(
        REPO / ".pytest_cache/hed_models/smollm2/global_step_0/actor_hf"
    )
    backend = open_backend("hf", model_dir, dtype="float32", torch_threads=1)
    model, tokenizer = backend.model, backend.tokenizer
    questions = [
        json.loads(line)["prompt"] if "prompt" in line else json.loads(line)["problem"]
        for line in (REPO / "data/01_raw/prompts/demo_math.jsonl").read_text().splitlines()
        if line.strip()
    ][:n_prompts]
    prompts = [
        PromptInput(
            i,
            f"p{i}",
            tokenizer.apply_chat_template(
                [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
            ),
        )
        for i, q in enumerate(questions)
    ]
    params = SamplingParams(max_new_tokens=max_new_tokens, seed=0, batch_size=8)
    start = time.perf_counter()
    generated = list(backend.generate(prompts, samples, params))
    gen_s = time.perf_counter() - start
    n_tokens = sum(len(s.token_ids) for s in generated)
    items = [
        ResponseToScore(
            s.prompt_index,
            s.sample_index,
            tokenizer(prompts[s.prompt_index].text, add_special_tokens=False)["input_ids"],
            s.token_ids,
        )
        for s in generated
    ]
    start = time.perf_counter()
    scored = list(score_responses(model, items, batch_size=8))
    score_s = time.perf_counter() - start

    def stack(seqs):
        return {
            "token_id": np.concatenate([s.token_ids for s in seqs]),
            "entropy": np.concatenate([s.entropy for s in seqs]),
            "logprob": np.concatenate([s.logprob for s in seqs]),
            "topk_token_ids": np.concatenate([s.topk_token_ids for s in seqs]),
        }

    check = compare_scores(stack(generated), stack(scored))
    print(
        f"\nSpeed on SmolLM2-135M (float32, 1 thread): {len(generated)} responses, "
        f"{n_tokens} tokens"
    )
    print(f"  generation  {gen_s:7.2f} s  {n_tokens / gen_s:8.1f} tokens/s")
    print(f"  re-scoring  {score_s:7.2f} s  {n_tokens / score_s:8.1f} tokens/s")
    print(f"  re-scoring is {gen_s / score_s:.1f}x faster than generation")
    print(
        f"  self-consistency: max |dH| {check.max_abs_entropy_diff:.2e} nats, "
        f"mean {check.mean_abs_entropy_diff:.2e}, max |dlogp| {check.max_abs_logprob_diff:.2e}, "
        f"top-k ids equal {100 * check.topk_ids_equal_share:.1f}%"
    )

    bf16 = open_backend("hf", model_dir, dtype="bfloat16", torch_threads=1)
    bf16_model = bf16.model
    scored_bf16 = list(score_responses(bf16_model, items, batch_size=8))
    gap = compare_scores(stack(generated), stack(scored_bf16))
    print(
        f"  bfloat16 re-score vs float32 decode: max |dH| {gap.max_abs_entropy_diff:.3f} nats, "
        f"mean {gap.mean_abs_entropy_diff:.4f}"
    )
    # responses decoded in bfloat16 (as mini_dapo does), re-scored in bfloat16 and in float32
    generated_bf16 = list(bf16.generate(prompts, samples, params))
    prompt_ids = {i.prompt_index: i.prompt_ids for i in items}
    items_bf16 = [
        ResponseToScore(s.prompt_index, s.sample_index, prompt_ids[s.prompt_index], s.token_ids)
        for s in generated_bf16
    ]
    for label, scorer in (("bfloat16", bf16_model), ("float32", model)):
        again = list(score_responses(scorer, items_bf16, batch_size=8))
        gap = compare_scores(stack(generated_bf16), stack(again))
        print(
            f"  {label} re-score vs bfloat16 decode: max |dH| {gap.max_abs_entropy_diff:.3f} "
            f"nats, mean {gap.mean_abs_entropy_diff:.4f}, top-k ids equal "
            f"{100 * gap.topk_ids_equal_share:.1f}%"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--baseline-length", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--child", choices=["hed", "full_logits"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child_memory(args.child, args.length, args.chunk)))
        return
    print(f"Memory: one response, vocabulary {QWEN_VOCAB:,}, float32, chunk {args.chunk} positions")
    hed = measure("hed", args.length, args.chunk)
    full = measure("full_logits", args.baseline_length, args.chunk)
    full_bytes = args.length * QWEN_VOCAB * 4 / 2**20
    projected = full["added_mib"] * args.length / args.baseline_length
    print(
        f"  HED chunked, {args.length} tokens:       added {hed['added_mib']:8.1f} MiB "
        f"({hed['seconds']:.2f} s)"
    )
    print(
        f"  full logits, {args.baseline_length} tokens:       added {full['added_mib']:8.1f} MiB "
        f"({full['seconds']:.2f} s)"
    )
    print(
        f"  full logits, {args.length} tokens (projected): {projected:8.1f} MiB; the logits alone "
        f"are {full_bytes:.1f} MiB"
    )
    print(
        f"  ratio full/HED at {args.length} tokens: "
        f"{projected / max(hed['added_mib'], 1e-9):.1f}x; "
        f"target <= 512 MiB: {'met' if hed['added_mib'] <= 512 else 'NOT met'}"
    )
    if not args.skip_speed:
        speed(args.prompts, args.samples, args.max_new_tokens)


if __name__ == "__main__":
    main()
