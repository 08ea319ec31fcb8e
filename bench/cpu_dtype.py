"""tokens/s of HED's recorded generation on CPU in float32 vs bfloat16, and what by_device picks.

The setting of one mini_dapo generation node (conf/mini_dapo/parameters_generation.yml): the
demo model (SmolLM2-135M-Instruct, the base of the mini_dapo policies), 16 prompts × 4
samples in one batch of 64, 32 new tokens, one thread. EOS is disabled so every sequence
generates exactly ``--new-tokens`` tokens. float32 and bfloat16 runs alternate per repeat in
this process; the median ratio bf16/fp32 is printed next to what ``generation.dtype:
by_device`` chooses on this CPU (:mod:`hed.core.compute_dtype`) and why.

Usage::

    python bench/cpu_dtype.py                # 3 repeats
    python bench/cpu_dtype.py --repeats 1 --new-tokens 16
    python bench/cpu_dtype.py --training     # also one forward+backward, fp32 vs bf16 autocast
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from hed.core import compute_dtype
from hed.decode.embedded import ensure_embedded_checkpoint
from hed.decode.hf import HFBackend
from hed.decode.types import PromptInput, SamplingParams

QUESTIONS = [f"What is {a} + {b}? Answer with the final number only." for a, b in
             zip(range(3, 19), range(40, 56), strict=True)]  # fmt: skip


def run(backend: HFBackend, samples: int, new_tokens: int, batch: int) -> float:
    """tokens/s of the hf backend's ``generate`` (the decoding contract) on the 16 prompts."""
    tokenizer = backend.tokenizer
    prompts = [
        PromptInput(
            prompt_index=i,
            prompt_id=f"q{i}",
            text=tokenizer.apply_chat_template(
                [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
            ),
        )
        for i, q in enumerate(QUESTIONS)
    ]
    params = SamplingParams(max_new_tokens=new_tokens, batch_size=batch)
    start = time.perf_counter()
    tokens = sum(s.n_tokens for s in backend.generate(prompts, samples, params))
    return tokens / (time.perf_counter() - start)


def train_step_s(model, tokens: torch.Tensor, bf16: bool) -> float:
    """Seconds of one forward + backward (the mini_dapo training's unit), autocast or not."""
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def training(model_dir, repeats: int) -> None:
    """float32 training vs bfloat16 autocast (TRL's ``bf16: true`` on CPU), 8 × 96 tokens."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    tokens = torch.randint(
        0, model.config.vocab_size, (8, 96), generator=torch.Generator().manual_seed(0)
    )
    train_step_s(model, tokens, False)  # warm-up
    ratios = []
    for repeat in range(repeats):
        order = (False, True) if repeat % 2 == 0 else (True, False)
        seconds = {bf16: train_step_s(model, tokens, bf16) for bf16 in order}
        ratios.append(seconds[False] / seconds[True])
        print(
            f"training step {repeat}: float32 {seconds[False]:.2f} s, bf16 autocast "
            f"{seconds[True]:.2f} s, speed-up {ratios[-1]:.2f}"
        )
    print(f"median training speed-up of bf16 autocast: {statistics.median(ratios):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--training", action="store_true", help="also time a training step")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cached = Path(__file__).resolve().parents[1] / ".pytest_cache/hed_models/smollm2"
    model_dir = cached / "global_step_0/actor_hf"
    if not (model_dir / "config.json").is_file():  # the test cache's copy, else convert
        model_dir = ensure_embedded_checkpoint(
            "data/01_raw/checkpoints/smollm2_demo/global_step_0/actor_hf"
        )
    models = {d: HFBackend(model_dir, dtype=d, device="cpu") for d in ("float32", "bfloat16")}
    for backend in models.values():
        backend.eos_token_ids = []  # EOS off: every sequence runs --new-tokens steps
    flags = compute_dtype.cpu_flags()
    print(
        f"CPU: torch capability {compute_dtype.torch_cpu_capability()}, "
        f"avx512_bf16 {'avx512_bf16' in flags}, amx_bf16 {'amx_bf16' in flags} -> "
        f"by_device = {compute_dtype.cpu_dtype_name()}"
    )
    ratios = []
    for repeat in range(args.repeats):
        order = ("float32", "bfloat16") if repeat % 2 == 0 else ("bfloat16", "float32")
        rate = {d: run(models[d], args.samples, args.new_tokens, args.batch_size) for d in order}
        ratios.append(rate["bfloat16"] / rate["float32"])
        print(
            f"repeat {repeat}: float32 {rate['float32']:.1f} tokens/s, "
            f"bfloat16 {rate['bfloat16']:.1f} tokens/s, bf16/fp32 {ratios[-1]:.2f}"
        )
    print(f"median bf16/fp32 tokens/s: {statistics.median(ratios):.2f}")
    if args.training:
        training(model_dir, args.repeats)


if __name__ == "__main__":
    main()
