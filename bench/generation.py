"""Benchmark HED's recorded generation against plain ``model.generate``.

Speed: the demo model (SmolLM2-135M-Instruct, converted once by
``hed.decode.embedded.ensure_embedded_checkpoint``) answers the same prompts with the same sampling
settings, set explicitly (temperature T, top-k off, top-p 1), twice per repeat:

* plain: ``model.generate(do_sample=True, temperature=T, top_k=0, top_p=1.0)``, no scores;
* HED: the hf backend's ``generate`` (the decoding contract, :class:`hed.decode.hf.HFBackend`:
  recorder, Gumbel sampler, records, token text);
* HED + word mass: the same with the ``anthropomorphic_mass`` / ``reasoning_mass`` columns
  (the default lexicon's word-start ids, :mod:`hed.core.propensity`).

EOS is disabled in all so every sequence generates exactly ``--new-tokens`` tokens. The runs
alternate (plain first on even repeats, last on odd ones) and the ratios
``HED tokens/s ÷ plain tokens/s`` (with and without the mass columns) are taken per repeat; the
medians are reported, in wall-clock time and per process CPU second (the steadier figure on a
shared CPU with ``--threads 1``), with the ratio of the two (target: at most 1 % lower with the
columns).

Memory (printed first): the recorder and sampler are driven directly with synthetic logits of a
``--memory-vocab`` vocabulary (Qwen's 151,936 by default) for ``--memory-steps`` decode steps
of ``--memory-batch`` sequences, no model needed. On CUDA the figure is
``torch.cuda.max_memory_allocated`` above the logits themselves; on CPU it is the peak
resident-set growth (psutil, polled from a thread), with the bytes the recorder retains
counted exactly. CPU defaults to 512 steps (the retained bytes grow linearly and are
extrapolated to 4,096); CUDA runs the full 4,096. Both are printed next to what
``output_logits=True`` would keep (B · T · V float32).

``--backend vllm`` (speed only) measures, in one process on the same prompts, seeds and
settings (EOS off, so every sequence has exactly ``--new-tokens`` tokens):

* plain vLLM: an engine without HED's logits processor, no logprobs;
* vLLM + HED's recorder: an engine with :class:`hed.decode.vllm_processor.DecodeRecordingProcessor`,
  through :meth:`hed.decode.vllm.RecordingEngine.generate` (the contract's call shape, one
  engine for every run: records, logprobs, token text). The same
  engine also runs requests without HED's key (the processor is registered but records
  nothing), alternated with the recorded runs, for a same-engine ratio;
* HF ``generate`` with HED's recording (the hf backend's ``generate``, batches of
  ``--hf-batch-size``).

It prints tokens/s of each (median over ``--repeats``) and the ratios recorder / plain
(target >= 0.97) and vLLM / HF.

Examples::

    .venv/bin/python bench/generation.py                         # CPU, small defaults
    .venv/bin/python bench/generation.py --device cuda --batch-size 16 --new-tokens 512
    .venv/bin/python bench/generation.py --backend vllm --batch-size 24 --new-tokens 96
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import statistics
import threading
import time
from pathlib import Path

import psutil
import torch
from transformers import GenerationConfig

from hed.decode.embedded import ensure_embedded_checkpoint
from hed.decode.hf import HFBackend, build_logits_processors, neutral_generation_config
from hed.decode.loading import resolve_dtype
from hed.decode.types import PromptInput, SamplingParams, sequence_seed

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL_DIR = REPO_ROOT / ".pytest_cache/hed_models/smollm2/global_step_0/actor_hf"
TARGET_STEPS = 4096

QUESTIONS = [
    "What is the sum of the first 50 positive integers?",
    "Solve for x: 3x + 7 = 22.",
    "How many prime numbers are there below 30?",
    "A rectangle has perimeter 24 and area 35. What are its side lengths?",
    "What is the remainder when 2^10 is divided by 7?",
    "Simplify (x^2 - 9) / (x - 3).",
    "If a train travels 180 km in 2.5 hours, what is its average speed?",
    "Find the greatest common divisor of 84 and 126.",
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", nargs="?", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-prob-k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--memory-batch", type=int, default=8)
    parser.add_argument(
        "--memory-steps", type=int, default=None, help="default: 4096 on CUDA, 512 on CPU"
    )
    parser.add_argument("--memory-vocab", type=int, default=151_936)
    parser.add_argument(
        "--stats-kernel",
        default="auto",
        help="generation.stats_kernel of HED's recorder: auto, reference, triton or compiled",
    )
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument(
        "--backend", choices=("hf", "vllm"), default="hf", help="vllm: the three-way speed run"
    )
    parser.add_argument("--hf-batch-size", type=int, default=8, help="--backend vllm: HF's batch")
    parser.add_argument(
        "--kv-cache-mib", type=int, default=512, help="--backend vllm on CPU: KV cache size"
    )
    return parser.parse_args()


def synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def make_prompts(tokenizer, n: int) -> list[PromptInput]:
    return [
        PromptInput(
            prompt_index=i,
            prompt_id=f"bench{i}",
            text=tokenizer.apply_chat_template(
                [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                tokenize=False,
                add_generation_prompt=True,
            ),
        )
        for i in range(n)
    ]


class Stopwatch:
    """Wall-clock and process CPU seconds of a block (CUDA work is synchronised first)."""

    def __init__(self, device: str):
        self.device = device
        self.wall = self.cpu = 0.0

    def __enter__(self) -> Stopwatch:
        synchronize(self.device)
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self.wall = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu


def run_plain(backend: HFBackend, prompts, args) -> tuple[Stopwatch, int]:
    """Plain sampling generate, no scores; returns (timings, generated tokens)."""
    model, tokenizer = backend.model, backend.tokenizer
    config = GenerationConfig(
        do_sample=True,
        temperature=args.temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=args.new_tokens,
        eos_token_id=None,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(args.seed)
    with Stopwatch(args.device) as watch:
        encoded = tokenizer(
            [p.text for p in prompts],
            add_special_tokens=False,
            padding=True,
            padding_side="left",
            return_tensors="pt",
        ).to(args.device)
        with neutral_generation_config(model), torch.inference_mode():
            output = model.generate(**encoded, generation_config=config)
    new_tokens = (output.shape[1] - encoded["input_ids"].shape[1]) * output.shape[0]
    return watch, new_tokens


def open_hf(args) -> HFBackend:
    """The hf backend (the decoding contract) on ``args.device``, EOS off: every sequence runs
    ``--new-tokens`` steps, so both sides time the same work."""
    model_dir = ensure_embedded_checkpoint(args.model_dir)
    dtype = resolve_dtype(args.dtype, args.device, model_dir)
    backend = HFBackend(model_dir, dtype=dtype, device=args.device)
    backend.eos_token_ids = []
    return backend


def default_word_mass_ids(tokenizer) -> dict:
    """The word-start ids of conf/base's lexicon for ``tokenizer`` (:mod:`hed.core.propensity`)."""
    import yaml

    from hed.core.lexicon import parse_lexicon
    from hed.core.propensity import tokenizer_word_start_ids

    conf = yaml.safe_load((REPO_ROOT / "conf/base/parameters_aggregation.yml").read_text())
    return tokenizer_word_start_ids(tokenizer, parse_lexicon(conf["aggregation"]["lexicon"]))


def run_hed_mass(backend: HFBackend, prompts, args) -> tuple[Stopwatch, int]:
    """:func:`run_hed` with the word-start mass columns recorded."""
    backend.mass_ids = args.mass_ids
    try:
        return run_hed(backend, prompts, args)
    finally:
        backend.mass_ids = None


def run_hed(backend: HFBackend, prompts, args) -> tuple[Stopwatch, int]:
    """HED's recorded generation (records and token text); returns (timings, tokens)."""
    params = SamplingParams(
        temperature=args.temperature,
        top_k=None,
        top_p=1.0,
        max_new_tokens=args.new_tokens,
        top_prob_k=args.top_prob_k,
        seed=args.seed,
        batch_size=len(prompts),
        stats_kernel=args.stats_kernel,
    )
    with Stopwatch(args.device) as watch:
        records = list(backend.generate(prompts, 1, params))
    return watch, sum(r.n_tokens for r in records)


def bench_speed(args) -> None:
    backend = open_hf(args)
    model_dir, model = backend.model_dir, backend.model
    prompts = make_prompts(backend.tokenizer, args.batch_size)
    expected = args.batch_size * args.new_tokens
    print(
        f"speed: {model_dir} on {args.device} ({model.dtype}), batch {args.batch_size} x "
        f"{args.new_tokens} new tokens, T={args.temperature}, top_k off, top_p 1.0, "
        f"{torch.get_num_threads()} CPU threads, stats_kernel {args.stats_kernel}"
    )
    args.mass_ids = default_word_mass_ids(backend.tokenizer)
    print(f"word mass: {', '.join(f'{c} {len(v)} ids' for c, v in args.mass_ids.items())}")
    run_plain(backend, prompts, args)  # warm-up
    run_hed(backend, prompts, args)
    run_hed_mass(backend, prompts, args)
    rates: dict[str, list[float]] = {
        "plain": [], "hed": [], "mass": [], "plain_cpu": [], "hed_cpu": [], "mass_cpu": []
    }  # fmt: skip
    wall_ratios, cpu_ratios, mass_wall, mass_cpu = [], [], [], []
    for repeat in range(args.repeats):
        order = [("plain", run_plain), ("hed", run_hed), ("mass", run_hed_mass)]
        watches = {}
        for name, runner in order if repeat % 2 == 0 else order[::-1]:
            watch, tokens = runner(backend, prompts, args)
            if tokens != expected:
                raise RuntimeError(f"{name} generated {tokens} tokens, not {expected}")
            watches[name] = watch
            rates[name].append(tokens / watch.wall)
            rates[f"{name}_cpu"].append(tokens / watch.cpu)
        wall_ratios.append(watches["plain"].wall / watches["hed"].wall)
        cpu_ratios.append(watches["plain"].cpu / watches["hed"].cpu)
        mass_wall.append(watches["plain"].wall / watches["mass"].wall)
        mass_cpu.append(watches["plain"].cpu / watches["mass"].cpu)
        print(
            f"  repeat {repeat}: plain {rates['plain'][-1]:7.1f} tok/s   "
            f"HED {rates['hed'][-1]:7.1f} tok/s   ratio {wall_ratios[-1]:.3f}   "
            f"(per CPU second: ratio {cpu_ratios[-1]:.3f})   with word mass: "
            f"{rates['mass'][-1]:7.1f} tok/s, ratio {mass_wall[-1]:.3f} "
            f"(per CPU second {mass_cpu[-1]:.3f})"
        )
    median = statistics.median
    print(
        f"median: plain {median(rates['plain']):.1f} tok/s, HED {median(rates['hed']):.1f} "
        f"tok/s, HED/plain {median(wall_ratios):.3f} (target >= 0.93); per process CPU "
        f"second: plain {median(rates['plain_cpu']):.1f}, HED {median(rates['hed_cpu']):.1f}, "
        f"HED/plain {median(cpu_ratios):.3f}"
    )
    print(
        f"word mass columns: HED+mass/plain {median(mass_wall):.3f} (per CPU second "
        f"{median(mass_cpu):.3f}); with ÷ without: {median(mass_wall) / median(wall_ratios):.4f} "
        f"wall, {median(mass_cpu) / median(cpu_ratios):.4f} per CPU second (target >= 0.99)"
    )


def fix_malloc_mmap_threshold(threshold: int = 1 << 20) -> None:
    """Make glibc serve (and return) every block of ``threshold`` bytes or more with mmap.

    glibc raises its mmap threshold each time a large block is freed, after which B×V-sized
    temporaries come from the heap and their freed memory stays resident: the resident set
    then grows by gigabytes without a single live tensor. Fixing the threshold (what
    ``MALLOC_MMAP_THRESHOLD_`` does) makes resident-set growth measure live memory.
    """
    name = ctypes.util.find_library("c")
    if name:
        m_mmap_threshold = -3
        ctypes.CDLL(name).mallopt(m_mmap_threshold, threshold)


class PeakRSS:
    """Peak resident-set size of this process, polled from a background thread.

    torch releases the GIL inside its kernels, so the poller sees the per-step temporaries
    (with :func:`fix_malloc_mmap_threshold` they are mapped and unmapped within the step).
    """

    def __init__(self, interval_s: float = 2e-4):
        self.interval_s = interval_s
        self.process = psutil.Process()
        self.base = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(self.interval_s)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.base


def bench_memory(args) -> None:
    device = torch.device(args.device)
    steps = args.memory_steps or (4096 if device.type == "cuda" else 512)
    batch, vocab, k = args.memory_batch, args.memory_vocab, args.top_prob_k
    params = SamplingParams(
        temperature=args.temperature, max_new_tokens=steps, top_prob_k=k, batch_size=batch
    )
    generators = [
        torch.Generator(device=device).manual_seed(sequence_seed(args.seed, "memory", i))
        for i in range(batch)
    ]
    processors, recorder = build_logits_processors(params, generators)
    # generate hands processors float32 logits; they are the model's, not the recorder's.
    logits = torch.randn(batch, vocab, device=device, dtype=torch.float32) * 3
    input_ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
    step_logits_bytes = batch * vocab * 4
    print(
        f"memory: recorder + sampler, batch {batch} x {steps} steps, vocab {vocab:,}, "
        f"top_prob_k {k}, T={args.temperature}, on {device} "
        f"(one step's logits: {step_logits_bytes / 2**20:.1f} MiB)"
    )
    started = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        with torch.inference_mode():
            for _ in range(steps):
                processors(input_ids, logits)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated(device) - base
        measured = f"peak extra CUDA memory {peak / 2**20:.1f} MiB"
    else:
        fix_malloc_mmap_threshold()
        with PeakRSS() as rss, torch.inference_mode():
            for _ in range(steps):
                processors(input_ids, logits)
        peak = rss.growth
        measured = f"peak resident-set growth {peak / 2**20:.1f} MiB"
    elapsed = time.perf_counter() - started
    retained = sum(t.untyped_storage().nbytes() for t in recorder.retained_tensors())
    print(
        f"  {elapsed:.1f} s ({1000 * elapsed / steps:.2f} ms/step); recorder retains "
        f"{retained / 2**20:.2f} MiB; {measured} (target <= 512 MiB)"
    )
    if steps != TARGET_STEPS:  # the recorder keeps the same bytes every step
        print(
            f"  at {TARGET_STEPS:,} steps: recorder retains "
            f"{retained * TARGET_STEPS / steps / 2**20:.2f} MiB plus the same per-step "
            "temporaries"
        )
    output_logits_bytes = batch * TARGET_STEPS * vocab * 4
    print(
        f"  output_logits=True would keep {output_logits_bytes / 2**30:.1f} GiB for "
        f"{batch} x {TARGET_STEPS:,} steps"
    )


def bench_vllm(args) -> None:
    """Plain vLLM vs vLLM + HED's recorder vs HF generate + recording (module docstring)."""
    from hed.decode.vllm import (
        RecordingEngine,
        VLLMSettings,
        engine_arguments,
        import_vllm,
        sampling_request,
    )

    vllm = import_vllm()
    backend = open_hf(args)
    model_dir, tokenizer, dtype = backend.model_dir, backend.tokenizer, backend.dtype
    prompts = make_prompts(tokenizer, args.batch_size)
    expected = args.batch_size * args.new_tokens
    params = SamplingParams(
        temperature=args.temperature,
        max_new_tokens=args.new_tokens,
        top_prob_k=args.top_prob_k,
        seed=args.seed,
        batch_size=args.hf_batch_size,
    )
    encoded = [tokenizer(p.text, add_special_tokens=False)["input_ids"] for p in prompts]
    settings = VLLMSettings(
        kv_cache_memory_bytes=None if args.device.startswith("cuda") else args.kv_cache_mib << 20
    )
    arguments = engine_arguments(
        model_dir,
        settings,
        dtype=dtype,
        device=args.device,
        max_model_len=max(map(len, encoded)) + args.new_tokens,
        seed=args.seed,
    )
    print(
        f"speed (--backend vllm): {model_dir} on {args.device} ({dtype}), {args.batch_size} "
        f"sequences x {args.new_tokens} new tokens, T={args.temperature}, top_k off, top_p "
        f"1.0, EOS off; HF batch {args.hf_batch_size}; vLLM {vllm.__version__}"
    )

    def plain_requests():
        requests = []
        for prompt in prompts:
            request = sampling_request(
                vllm, params, seed=sequence_seed(args.seed, prompt.prompt_id, 0), key=0, eos=[]
            )
            request.logprobs, request.extra_args = None, None  # plain: no logprobs, no key
            requests.append(request)
        return requests

    def run_plain_vllm(engine) -> tuple[Stopwatch, int]:
        inputs = [{"prompt_token_ids": ids} for ids in encoded]
        with Stopwatch(args.device) as watch:
            outputs = engine.llm.generate(inputs, plain_requests(), use_tqdm=False)
        return watch, sum(len(o.outputs[0].token_ids) for o in outputs)

    def run_recorded(engine, mass_ids=None) -> tuple[Stopwatch, int]:
        with Stopwatch(args.device) as watch:
            sequences = list(engine.generate(prompts, 1, params, mass_ids=mass_ids))
        return watch, sum(s.n_tokens for s in sequences)

    mass_ids = default_word_mass_ids(tokenizer)

    def run_recorded_mass(engine) -> tuple[Stopwatch, int]:
        return run_recorded(engine, mass_ids)

    def check(name: str, tokens: int) -> None:
        if tokens != expected:
            raise RuntimeError(f"{name} generated {tokens} tokens, not {expected}")

    median = statistics.median
    rates: dict[str, list[float]] = {
        "plain": [], "inert": [], "recorder": [], "mass": [], "hf": []
    }  # fmt: skip
    engine = RecordingEngine(arguments, record=False)
    try:
        run_plain_vllm(engine)  # warm-up
        for _ in range(args.repeats):
            watch, tokens = run_plain_vllm(engine)
            check("plain vLLM", tokens)
            rates["plain"].append(tokens / watch.wall)
    finally:
        engine.close()
    same_engine_ratios = []
    engine = RecordingEngine(arguments, record=True, tokenizer=tokenizer)  # EOS off
    try:
        run_recorded(engine)  # warm-up
        run_recorded_mass(engine)
        for repeat in range(args.repeats):
            order = [
                ("inert", run_plain_vllm),
                ("recorder", run_recorded),
                ("mass", run_recorded_mass),
            ]
            watches = {}
            for name, runner in order if repeat % 2 == 0 else order[::-1]:
                watch, tokens = runner(engine)
                check(name, tokens)
                watches[name] = watch
                rates[name].append(tokens / watch.wall)
            same_engine_ratios.append(watches["inert"].wall / watches["recorder"].wall)
    finally:
        engine.close()
    run_hed(backend, prompts[: args.hf_batch_size], args)  # warm-up
    for _ in range(args.repeats):
        with Stopwatch(args.device) as watch:
            sequences = list(backend.generate(prompts, 1, params))
        check("HF", sum(s.n_tokens for s in sequences))
        rates["hf"].append(expected / watch.wall)
    keys = ("plain", "inert", "recorder", "mass", "hf")
    plain, inert, recorder, mass, hf = (median(rates[k]) for k in keys)
    print(
        f"  plain vLLM (no processor)           {plain:8.1f} tok/s\n"
        f"  vLLM, processor registered, unused  {inert:8.1f} tok/s\n"
        f"  vLLM + HED recorder                 {recorder:8.1f} tok/s\n"
        f"  vLLM + HED recorder + word mass     {mass:8.1f} tok/s\n"
        f"  HF generate + HED recording         {hf:8.1f} tok/s\n"
        f"  recorder / plain {recorder / plain:.3f} (target >= 0.97); same engine, alternated: "
        f"{median(same_engine_ratios):.3f}; vLLM+recorder / HF {recorder / hf:.2f}; "
        f"plain vLLM / HF {plain / hf:.2f}; word mass: recorder+mass / plain "
        f"{mass / plain:.3f}, with ÷ without {mass / recorder:.4f} (target >= 0.99)"
    )


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.backend == "vllm":
        bench_vllm(args)
        return
    # Memory first: on CPU the resident-set figure is only clean before a model was loaded.
    if not args.skip_memory:
        bench_memory(args)
    if not args.skip_speed:
        bench_speed(args)


if __name__ == "__main__":
    main()
