"""GPU benchmark of the vllm backend on a Qwen3-8B-shaped model with random weights.

One command, one GPU (H200-class: about 6-8 minutes)::

    python bench/vllm_gpu.py                 # Qwen3-8B shape, batch 64 x 2,048 tokens, bf16
    python bench/vllm_gpu.py --tiny --device cpu   # a 2-layer smoke run of this script on CPU

Wheels: ``pip install torch`` (CUDA build) then ``pip install -e ".[vllm]"`` (vLLM 0.32 for
CUDA; it brings flash-attn / Triton), ``transformers`` as vLLM pins it. Nothing is
downloaded: the model is ``Qwen3ForCausalLM(config)`` built on the GPU with transformers'
seeded random initialisation (normal(0, 0.02), RMSNorm weights 1; ``lm_head`` scaled so
that the logits have a standard deviation of about ``--logit-std``, 4, for peaked, varied
next-token distributions instead of near-uniform ones) and saved once as
safetensors into a temporary folder, which vLLM loads (no tokenizer: ``skip_tokenizer_init``);
prompts are random token ids.

What it measures, on the same prompts, seeds and settings (EOS off: every response has
exactly ``--new-tokens`` tokens):

1. plain vLLM: an engine without HED's processor, no logprobs;
2. vLLM + HED's recorder (``hed.decode.vllm.RecordingEngine``: processor, raw-logit logprob,
   records; no token text, the dummy model has no tokenizer); the same engine also runs the
   requests without HED's key, alternated, for a same-engine ratio;
3. HF ``generate`` + HED's recording (``hed.decode.hf.generate_sequences``), the model from
   ``Qwen3ForCausalLM(config)`` on the GPU with the engine's weights.

Why not vLLM's ``load_format="dummy"`` by default: its weights are uniform in ±1e-3, so every
next-token distribution is near-uniform (entropy ≈ log V) and a wrong row or position would
go unnoticed; and the check needs the same weights in HF (vLLM's CPU backend even repacks its
linear weights, so they cannot be read back). ``--dummy`` runs the speed part on dummy
weights (no save, no check). The check: ``--check-sequences`` responses of the recorded run
are re-scored teacher-forced by the HF model in float32 (same weights); it prints the largest
and median |difference| of entropy and log-prob (the engine computes in ``--dtype``, so bf16
rounding of activations shows up here; a wrong row / position mapping would show up as
differences of whole nats).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from hed.decode.hf import PromptInput, SamplingParams, generate_sequences, sequence_seed
from hed.decode.vllm import (
    RecordingEngine,
    VLLMSettings,
    engine_arguments,
    import_vllm,
    sampling_request,
)

QWEN3_8B = {
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151_936,
}
TINY = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "vocab_size": 151_936,
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="2-layer model (CPU smoke run)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=2048)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-prob-k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dummy", action="store_true", help="vLLM dummy weights, no check")
    parser.add_argument("--logit-std", type=float, default=4.0, help="scales lm_head")
    parser.add_argument("--check-sequences", type=int, default=4)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--kv-cache-mib", type=int, default=512, help="CPU only")
    parser.add_argument("--skip-plain-engine", action="store_true")
    parser.add_argument("--skip-hf", action="store_true")
    args = parser.parse_args()
    if args.tiny:
        args.batch_size = min(args.batch_size, 8)
        args.new_tokens = min(args.new_tokens, 64)
        args.prompt_len = min(args.prompt_len, 32)
    return args


def write_config(folder: Path, shape: dict) -> Path:
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "max_position_embeddings": 40_960,
        "max_window_layers": 36,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1_000_000,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "bos_token_id": 151_643,
        "eos_token_id": 151_645,
        **shape,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def timed(device: str, fn):
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    result = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - started, result


def rescore(model, prompt_ids: list[int], token_ids: np.ndarray, temperature: float, device):
    full = torch.tensor([[*prompt_ids, *token_ids.tolist()]], device=device)
    with torch.no_grad():
        logits = model(full).logits[0, len(prompt_ids) - 1 : -1].double() / temperature
    log_p = torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    tokens = torch.tensor(token_ids, dtype=torch.long, device=device)
    return (
        -(p * log_p).sum(-1).cpu().numpy(),
        log_p.gather(-1, tokens[:, None])[:, 0].cpu().numpy(),
    )


def main() -> None:
    args = parse_args()
    vllm = import_vllm()
    from transformers import Qwen3Config, Qwen3ForCausalLM

    shape = TINY if args.tiny else QWEN3_8B
    folder = write_config(Path(tempfile.mkdtemp(prefix="hed_qwen3_")), shape)
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = Qwen3ForCausalLM(Qwen3Config.from_pretrained(folder))
    with torch.no_grad():  # logits of std --logit-std (not near-uniform), see the docstring
        model.lm_head.weight.mul_(args.logit_std / (0.02 * shape["hidden_size"] ** 0.5))
    model = model.to(getattr(torch, args.dtype)).eval()
    if not args.dummy:
        model.save_pretrained(folder)  # safetensors: vLLM loads exactly these weights
    print(f"model built (and saved) in {time.perf_counter() - started:.0f} s")
    rng = np.random.default_rng(args.seed)
    prompts = [
        PromptInput(prompt_index=i, prompt_id=f"gpu{i}", text="") for i in range(args.batch_size)
    ]
    encoded = {
        p.prompt_index: rng.integers(0, shape["vocab_size"], args.prompt_len).tolist()
        for p in prompts
    }
    params = SamplingParams(
        temperature=args.temperature,
        max_new_tokens=args.new_tokens,
        top_prob_k=args.top_prob_k,
        seed=args.seed,
        batch_size=args.batch_size,
    )
    expected = args.batch_size * args.new_tokens
    on_cpu = not args.device.startswith("cuda")
    settings = VLLMSettings(
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_memory_bytes=args.kv_cache_mib << 20 if on_cpu else None,
        max_num_seqs=max(args.batch_size, 1),
    )
    arguments = engine_arguments(
        folder,
        settings,
        dtype=args.dtype,
        device=args.device,
        max_model_len=args.prompt_len + args.new_tokens,
        seed=args.seed,
    )
    if args.dummy:
        arguments["load_format"] = "dummy"
    print(
        f"vllm_gpu: {'tiny' if args.tiny else 'Qwen3-8B'}-shaped random weights {shape}, "
        f"{args.dtype} on {args.device}, batch {args.batch_size} x {args.new_tokens} tokens "
        f"(prompts {args.prompt_len}), T={args.temperature}; vLLM {vllm.__version__}"
    )

    def plain_run(engine):
        requests = []
        for p in prompts:
            seed = sequence_seed(args.seed, p.prompt_id, 0)
            request = sampling_request(vllm, params, seed=seed, key=0, eos=[])
            request.logprobs, request.extra_args = None, None
            requests.append(request)
        inputs = [{"prompt_token_ids": encoded[p.prompt_index]} for p in prompts]
        outputs = engine.llm.generate(inputs, requests, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs)

    def recorded_run(engine):
        return list(engine.run(None, prompts, 1, params, [], encoded=encoded))

    rates: dict[str, list[float]] = {"plain": [], "inert": [], "recorder": [], "hf": []}
    if not args.skip_plain_engine:
        engine = RecordingEngine(arguments, record=False)
        try:
            for repeat in range(args.repeats + 1):  # the first is a warm-up
                seconds, tokens = timed(args.device, lambda e=engine: plain_run(e))
                assert tokens == expected, tokens
                if repeat:
                    rates["plain"].append(tokens / seconds)
        finally:
            engine.close()
    same_engine: list[float] = []
    engine = RecordingEngine(arguments, record=True)
    try:
        for repeat in range(args.repeats + 1):
            inert_s, tokens = timed(args.device, lambda e=engine: plain_run(e))
            assert tokens == expected, tokens
            rec_s, sequences = timed(args.device, lambda e=engine: recorded_run(e))
            assert sum(s.n_tokens for s in sequences) == expected
            if repeat:
                rates["inert"].append(expected / inert_s)
                rates["recorder"].append(expected / rec_s)
                same_engine.append(inert_s / rec_s)
    finally:
        engine.close()
    gc.collect()

    if not args.skip_hf:
        tokens_of = {p.prompt_index: encoded[p.prompt_index] for p in prompts}

        class _Ids:  # the HF path encodes text; hand it the random ids instead
            pad_token_id = 0

            def __call__(self, text, add_special_tokens=False):
                return {"input_ids": tokens_of[int(text)]}

        hf_prompts = [
            PromptInput(p.prompt_index, p.prompt_id, str(p.prompt_index)) for p in prompts
        ]
        from hed.decode import hf as recording

        saved = recording.token_texts_batch
        recording.token_texts_batch = lambda _tok, ids: [[] for _ in ids]  # no tokenizer
        try:
            seconds, out = timed(
                args.device,
                lambda: list(generate_sequences(model, _Ids(), hf_prompts, 1, params, [])),
            )
        finally:
            recording.token_texts_batch = saved
        assert sum(s.n_tokens for s in out) == expected
        rates["hf"].append(expected / seconds)

    if not args.dummy:
        model = model.to(torch.float32)
        check = sorted(sequences, key=lambda s: s.prompt_index)[: args.check_sequences]
        entropy_err, logprob_err = [], []
        for seq in check:
            entropy, logprob = rescore(
                model, encoded[seq.prompt_index], seq.token_ids, args.temperature, args.device
            )
            entropy_err.append(np.abs(seq.entropy - entropy))
            logprob_err.append(np.abs(seq.logprob - logprob))
        entropy_err, logprob_err = np.concatenate(entropy_err), np.concatenate(logprob_err)
        mean_entropy = float(np.mean(np.concatenate([s.entropy for s in check])))
        print(
            f"check vs fp32 teacher-forced re-score ({len(check)} sequences, "
            f"{len(entropy_err)} positions, mean entropy {mean_entropy:.3f} nats): entropy "
            f"|diff| max {entropy_err.max():.2e} median {np.median(entropy_err):.2e}; logprob "
            f"|diff| max {logprob_err.max():.2e} median {np.median(logprob_err):.2e}"
        )
    median = statistics.median

    def show(name: str) -> str:
        return f"{median(rates[name]):9.1f} tok/s" if rates[name] else "  not run"

    print(f"  plain vLLM (no processor)           {show('plain')}")
    print(f"  vLLM, processor registered, unused  {show('inert')}")
    print(f"  vLLM + HED recorder                 {show('recorder')}")
    print(f"  HF generate + HED recording         {show('hf')}")
    recorder = median(rates["recorder"])
    if rates["plain"]:
        print(f"  recorder / plain {recorder / median(rates['plain']):.3f} (target >= 0.97)")
    print(f"  recorder / same engine unused {median(same_engine):.3f}")
    if rates["hf"]:
        print(f"  vLLM+recorder / HF {recorder / median(rates['hf']):.2f}")


if __name__ == "__main__":
    main()
