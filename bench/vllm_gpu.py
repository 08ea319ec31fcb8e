"""GPU benchmark of the vllm backend on a Qwen3-8B-shaped model with random weights.

One command on a user's GPU node (one GPU; an H200 takes about 6-8 minutes)::

    python bench/vllm_gpu.py                 # Qwen3-8B shape, batch 64, up to 2,048 tokens, bf16
    OUT=results/vllm_gpu python bench/vllm_gpu.py    # also keeps every figure in a JSON file
    python bench/vllm_gpu.py --tiny --device cpu     # a 2-layer smoke run of this script on CPU

Wheels: ``pip install torch`` (CUDA build) then ``pip install -e ".[vllm]"`` (vLLM 0.32 for
CUDA). Nothing is downloaded: the model is ``Qwen3ForCausalLM(config)`` built on the GPU with
transformers' seeded random initialisation (``lm_head`` scaled so that the logits have a
standard deviation of about ``--logit-std``, 4: peaked, varied distributions rather than
near-uniform ones), saved as safetensors into a temporary folder that vLLM loads (no
tokenizer: ``skip_tokenizer_init``) and that is removed at the end, whatever happens; prompts
are random token ids. The HF model is moved to host memory before any engine starts.

Every request has its own ``max_tokens``, drawn between half of ``--new-tokens`` and
``--new-tokens``, so requests finish on different steps (EOS is off). Each figure is printed
as one JSON line as soon as it is measured (flushed) and, when ``$OUT`` is set, the whole set
is rewritten to ``$OUT/vllm_gpu.json``: a run killed at its limit keeps what it measured.

Phases, in order:

1. ``plain_tokens_per_s``: vLLM without HED's processor, no logprobs.
2. ``inert_tokens_per_s`` / ``recorder_tokens_per_s``: one engine with HED's processor
   registered (:class:`hed.decode.vllm.RecordingEngine`, its ``generate`` in the decoding
   contract's call shape), alternating requests without HED's
   key (registered, recording nothing) and recorded runs (records, raw-logit logprobs; no
   token text). ``recorder_over_plain`` is the cost of recording as a user pays it (target
   >= 0.97); ``recorder_over_inert`` the recorder's own work.
3. ``check_*``: exactness inside the engine. ``logprobs=k`` requests (the engine's
   ``logprobs_mode="raw_logits"``) return vLLM's own top-k raw logits ``z`` of every step next
   to HED's records of the same steps: ``check_topk_logprob_max_abs_diff`` is the largest
   ``|log p_HED - (z / T - log Z_HED)|`` over the top-k (nats, passes at <= 1e-5,
   ``check_pass``), with the share of positions whose k ids agree. Same engine, same logits:
   a row or position mapping error would show as whole nats, bf16 noise cannot.
4. ``hf_tokens_per_s``: HF ``generate`` with HED's recording, the hf backend's ``generate``
   over the model in memory (:meth:`hed.decode.hf.HFBackend.of_model`; ``--skip-hf`` to
   leave out).

After each engine closes, ``gpu_free_gib_after_<phase>`` is the GPU memory free (CUDA's
``mem_get_info``), so memory an engine kept would show. ``--repeats`` (default 1) repeats
the timed runs of phases 1-2 after one warm-up run each.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from hed.decode.hf import HFBackend, PromptInput, SamplingParams, sequence_seed
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
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-prob-k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dummy", action="store_true", help="vLLM dummy weights, no check")
    parser.add_argument("--out", type=Path, default=None, help="JSON folder (default: $OUT)")
    parser.add_argument("--logit-std", type=float, default=4.0, help="scales lm_head")
    parser.add_argument("--check-sequences", type=int, default=8)
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


class Report:
    """Figures printed as JSON lines when measured, and kept in ``<out>/vllm_gpu.json``."""

    def __init__(self, out: Path | None) -> None:
        self.figures: dict[str, object] = {}
        self.path = out / "vllm_gpu.json" if out else None
        self.started = time.perf_counter()

    def __call__(self, name: str, value: object) -> None:
        self.figures[name] = value
        print(json.dumps({"t_s": round(time.perf_counter() - self.started, 1), name: value}),
              flush=True)  # fmt: skip
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.figures, indent=1))


def gpu_free_gib(device: str) -> float | None:
    """Free GPU memory in GiB after a collection (None on CPU)."""
    gc.collect()
    if not device.startswith("cuda"):
        return None
    torch.cuda.empty_cache()
    free, _total = torch.cuda.mem_get_info()
    return round(free / 2**30, 2)


def check_in_engine(arguments, prompts, encoded, params, *, limits, args, vllm) -> dict:
    """HED's records vs vLLM's own top-k raw logits of the same engine steps."""
    from hed.decode.vllm_processor import RecordSink

    k = args.top_prob_k
    engine = RecordingEngine({**arguments, "max_logprobs": k}, record=True)  # raw_logits
    sink = RecordSink(params.temperature, k)
    engine.processor_class.sink = sink
    core = engine.llm.llm_engine
    chosen = prompts[: args.check_sequences]
    try:
        for key, prompt in enumerate(chosen):
            request = sampling_request(
                vllm,
                params,
                seed=sequence_seed(args.seed, prompt.prompt_id, 0),
                key=key,
                eos=[],
                max_tokens=limits[(prompt.prompt_index, 0)],
            )
            request.logprobs = k
            core.add_request(str(key), {"prompt_token_ids": encoded[prompt.prompt_index]}, request)
        finished = []
        while core.has_unfinished_requests():
            finished += [out for out in core.step() if out.finished]
        sink.flush()
        worst, equal, total = 0.0, 0, 0
        for out in finished:
            (completion,) = out.outputs
            records = sink.take(int(out.request_id), len(completion.token_ids))
            hed_logprobs = np.log(records["topk_probs"].astype(np.float64))  # (n, k)
            log_z = records["log_z"].astype(np.float64)  # (n,)
            for position, entry in enumerate(completion.logprobs):
                ranked = sorted((lp.rank, token, lp.logprob) for token, lp in entry.items())
                top = [(token, raw) for rank, token, raw in ranked if rank <= k][:k]  # z
                ids = [token for token, _ in top]
                equal += int(ids == records["topk_token_ids"][position].tolist())
                total += 1
                for j, (token, raw) in enumerate(top):
                    if token == records["topk_token_ids"][position][j]:
                        vllm_logprob = np.float32(raw) / np.float32(params.temperature)
                        expected = float(vllm_logprob) - log_z[position]
                        worst = max(worst, abs(expected - hed_logprobs[position][j]))
    finally:
        engine.processor_class.sink = None
        engine.close()
    return {
        "check_positions": total,
        "check_topk_logprob_max_abs_diff": worst,
        "check_topk_ids_equal_share": round(equal / max(total, 1), 4),
        "check_pass": bool(total and worst <= 1e-5),
    }


def main() -> None:
    args = parse_args()
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    report = Report(out)
    vllm = import_vllm()
    shape = TINY if args.tiny else QWEN3_8B
    folder = Path(tempfile.mkdtemp(prefix="hed_qwen3_"))
    try:
        run_phases(args, report, vllm, shape, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # a Qwen3-8B checkpoint is 16 GB
        report("checkpoint_removed", not folder.exists())


def run_phases(args, report, vllm, shape: dict, folder: Path) -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    write_config(folder, shape)
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = Qwen3ForCausalLM(Qwen3Config.from_pretrained(folder))
    with torch.no_grad():  # logits of std --logit-std (not near-uniform), see the docstring
        model.lm_head.weight.mul_(args.logit_std / (0.02 * shape["hidden_size"] ** 0.5))
    model = model.to(getattr(torch, args.dtype)).eval()
    if not args.dummy:
        model.save_pretrained(folder)  # safetensors: vLLM loads exactly these weights
    model = model.to("cpu")  # off the GPU before any engine starts
    report("model_built_s", round(time.perf_counter() - started, 1))
    report("gpu_free_gib_before_engines", gpu_free_gib(args.device))
    rng = np.random.default_rng(args.seed)
    prompts = [
        PromptInput(prompt_index=i, prompt_id=f"gpu{i}", text="") for i in range(args.batch_size)
    ]
    encoded = {
        p.prompt_index: rng.integers(0, shape["vocab_size"], args.prompt_len).tolist()
        for p in prompts
    }
    low = max(1, args.new_tokens // 2)
    limits = {
        (p.prompt_index, 0): int(rng.integers(low, args.new_tokens + 1)) for p in prompts
    }  # fmt: skip
    expected = sum(limits.values())
    params = SamplingParams(
        temperature=args.temperature,
        max_new_tokens=args.new_tokens,
        top_prob_k=args.top_prob_k,
        seed=args.seed,
        batch_size=args.batch_size,
    )
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
    report(
        "setup",
        {
            "shape": "tiny" if args.tiny else "Qwen3-8B",
            "dtype": args.dtype,
            "device": args.device,
            "batch": args.batch_size,
            "max_tokens": [low, args.new_tokens],
            "tokens_per_run": expected,
            "temperature": args.temperature,
            "vllm": vllm.__version__,
        },
    )

    def plain_run(engine):
        requests, inputs = [], []
        for p in prompts:
            seed = sequence_seed(args.seed, p.prompt_id, 0)
            request = sampling_request(
                vllm, params, seed=seed, key=0, eos=[], max_tokens=limits[(p.prompt_index, 0)]
            )
            request.logprobs, request.extra_args = None, None
            requests.append(request)
            inputs.append({"prompt_token_ids": encoded[p.prompt_index]})
        outputs = engine.llm.generate(inputs, requests, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs)

    def recorded_run(engine):
        return list(engine.generate(prompts, 1, params, encoded=encoded, max_tokens=limits))

    median = statistics.median
    rates: dict[str, list[float]] = {"plain": [], "inert": [], "recorder": []}
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
        report("plain_tokens_per_s", round(median(rates["plain"]), 1))
        report("gpu_free_gib_after_plain", gpu_free_gib(args.device))
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
    finally:
        engine.close()
    report("inert_tokens_per_s", round(median(rates["inert"]), 1))
    report("recorder_tokens_per_s", round(median(rates["recorder"]), 1))
    report("recorder_over_inert", round(median(rates["recorder"]) / median(rates["inert"]), 4))
    if rates["plain"]:
        ratio = median(rates["recorder"]) / median(rates["plain"])
        report("recorder_over_plain", round(ratio, 4))
    report("gpu_free_gib_after_recorder", gpu_free_gib(args.device))
    if not args.dummy:
        checked = check_in_engine(
            arguments, prompts, encoded, params, limits=limits, args=args, vllm=vllm
        )
        for name, value in checked.items():
            report(name, value)
        report("gpu_free_gib_after_check", gpu_free_gib(args.device))
    if not args.skip_hf:
        model = model.to(args.device)
        report("hf_tokens_per_s", round(hf_rate(model, prompts, encoded, params, args), 1))
        del model
        report("gpu_free_gib_after_hf", gpu_free_gib(args.device))


def hf_rate(model, prompts, encoded, params, args) -> float:
    """Tokens/s of HF ``generate`` with HED's recording on the same prompts (all full length)."""
    backend = HFBackend.of_model(model)  # no tokenizer (random ids, no texts), EOS off
    as_ids = [replace(p, token_ids=tuple(encoded[p.prompt_index])) for p in prompts]
    seconds, out = timed(args.device, lambda: list(backend.generate(as_ids, 1, params)))
    return sum(s.n_tokens for s in out) / seconds


if __name__ == "__main__":
    main()
