"""Device check: HED's GPU path on one GPU, as one command (about 6-8 minutes on an H200).

Written for a bare CUDA image (Python 3.12, torch, transformers, Triton, pandas, pyarrow,
matplotlib, safetensors, xxhash, tqdm; no network). HED's ``hed.errors`` imports Kedro, and
phase (d) runs ``kedro run``, so the check carries the 31 wheels that image lacks, pinned in
``bench/device_wheels.txt`` (3,847,780 bytes = 3.7 MiB in all): kedro, kedro-datasets,
math-verify, latex2sympy2-extended, antlr4-python3-runtime, omegaconf, dynaconf,
cookiecutter, arrow, binaryornot, python-slugify, text-unidecode, gitpython, gitdb, smmap,
parse, pluggy, more-itertools, build, pyproject-hooks, tomli-w, appdirs, attrs, lazy-loader,
requests, urllib3, certifi, charset-normalizer, tzdata, accelerate (HED loads checkpoints
with a ``device_map``), psutil. ``--wheels DIR`` installs them at
start with ``pip install --no-index --no-deps --target <tmp>`` (seconds)::

    # once, on a machine with network access, from the repository root:
    pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux2014_x86_64 --dest .device_wheels -r bench/device_wheels.txt
    # on the GPU machine (HED's device tool: run(command=..., carry=[".device_wheels"])):
    python bench/device_check.py --wheels .device_wheels

Nothing is downloaded at run time: every model is ``Qwen3ForCausalLM(Qwen3Config(...))`` with
transformers' seeded random initialisation, built on the device; prompts are random ids.

It prints one JSON line per figure as soon as it is measured (flushed) and, when ``$OUT`` is
set, rewrites ``$OUT/device_check.json`` after each one, so a run killed at its limit keeps
what it measured. Phases (``--only a,c`` selects):

a. **records vs float64**: HED's recorded generation through the decoding contract (the hf
   backend's ``generate``, :meth:`hed.decode.hf.HFBackend.of_model` over the model in memory,
   prompts given as ids, EOS off) records ``--check-batch`` sequences in float32 and again in
   bfloat16 with the same
   weights; the same weights in float64 re-score those tokens teacher-forced on the same
   device. Printed: max |Δ| of entropy and log-prob (nats) and whether the top-k ids agree,
   per dtype; the float32 records pass at ≤ 1e-4 nats.
b. **recorder cost**: ``generate`` plain (``do_sample=True``, no scores) against the hf
   backend's ``generate`` (HED's recorder and Gumbel sampler inside transformers ``generate``,
   the records cut per sequence as the generation node gets them), bfloat16, batch 64 and
   256 × 1,024 new tokens
   (``--batches``, ``--new-tokens``): tokens/s of each and the ratio recorder / plain.
c. **statistics alone** at 256 × 151,936 float32 logits: the reference torch code and the
   fused route (``generation.stats_kernel: auto``, the Triton kernel on CUDA; ``compiled`` on
   CPU where a C++ compiler exists) in ms per call, next to one decode step of (b) at the
   largest batch, and the fused route's max |Δ| to the reference.
d. **kedro run**: ``kedro run --pipelines generation --runner hed.runners.GPURunner
   --runner-params gpus=[0]`` (``gpus=cpu`` with ``--device cpu``) in a throwaway copy of the
   project whose one checkpoint is a small random Qwen3 with a byte-level tokenizer; checks
   that the log says the node ran on GPU 0 and that the records equal a float64
   teacher-forced re-score within 1e-4 nats (float32 generation).

``--device cpu`` runs every phase on tiny shapes (the test suite does this:
``tests/test_device_check.py``).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
STARTED = time.perf_counter()
#: float32 records must match the float64 re-score this closely (nats).
FLOAT32_TOLERANCE = 1e-4

QWEN3_8B = {
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151_936,
}
CPU_TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 4096,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (tiny shapes)")
    parser.add_argument("--wheels", type=Path, help="folder of wheels to install first")
    parser.add_argument("--only", default="a,b,c,d", help="phases to run, e.g. a,c")
    parser.add_argument("--batches", default=None, help="phase b batch sizes (default 64,256)")
    parser.add_argument("--new-tokens", type=int, default=None, help="phase b (default 1024)")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--check-batch", type=int, default=4)
    parser.add_argument("--check-tokens", type=int, default=64)
    parser.add_argument("--logit-std", type=float, default=4.0, help="scales lm_head")
    parser.add_argument("--out", type=Path, default=None, help="JSON folder (default: $OUT)")
    args = parser.parse_args(argv)
    cpu = args.device == "cpu"
    args.shape = CPU_TINY if cpu else QWEN3_8B
    args.batches = [int(b) for b in (args.batches or ("2,4" if cpu else "64,256")).split(",")]
    args.new_tokens = args.new_tokens or (16 if cpu else 1024)
    args.stats_rows = 8 if cpu else 256
    if cpu:
        args.check_tokens = min(args.check_tokens, 16)
    args.out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    args.phases = set(args.only.split(","))
    return args


class Report:
    """Figures printed as JSON lines when measured, and kept in ``<out>/device_check.json``."""

    def __init__(self, out: Path | None) -> None:
        self.figures: dict[str, object] = {}
        self.path = out / "device_check.json" if out else None

    def __call__(self, name: str, value: object) -> None:
        self.figures[name] = value
        elapsed = round(time.perf_counter() - STARTED, 1)
        print(json.dumps({"t_s": elapsed, name: value}), flush=True)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.figures, indent=1))


def install_wheels(folder: Path) -> str:
    """``pip install --no-index --no-deps --target`` ``folder``'s wheels; returns the target."""
    target = tempfile.mkdtemp(prefix="hed_wheels_")
    wheels = sorted(str(p) for p in folder.glob("*.whl"))
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
    subprocess.run([*command, "--target", target, *wheels], check=True)
    return target


def prepare_imports(args: argparse.Namespace) -> str:
    """Put the wheels (if any) and ``src/`` on ``sys.path``; returns the PYTHONPATH to pass on."""
    paths = [str(REPO_ROOT / "src")]
    if args.wheels is not None:
        paths.append(install_wheels(args.wheels))
    for path in reversed(paths):
        sys.path.insert(0, path)
    return os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def synchronize(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def build_model(shape: dict, device: str, logit_std: float, seed: int = 0):
    """A random Qwen3 of ``shape`` in float32 on ``device`` (lm_head scaled to ``logit_std``)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        **shape,
        max_position_embeddings=40_960,
        rope_theta=1_000_000,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():  # final RMSNorm output has unit scale: logit std ≈ 0.02·√hidden
        model.lm_head.weight.mul_(
            logit_std / (config.initializer_range * shape["hidden_size"] ** 0.5)
        )
    model.generation_config.eos_token_id = None
    return model


def random_prompts(batch: int, length: int, vocab: int, device: str, seed: int = 1):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=generator).to(device)


def hed_generate(model, input_ids, new_tokens: int, stats_kernel: str = "auto") -> dict:
    """HED's recorded generation through the decoding contract: the hf backend's ``generate``
    over ``model`` (no tokenizer: the prompts are the rows of ``input_ids``; EOS off, so every
    sequence has ``new_tokens`` tokens), one batch. Returns the records as host arrays,
    ``(B, N)`` (``token_ids``, ``entropy``, ``logprob``) and ``(B, N, k)`` (``topk_token_ids``)."""
    import numpy as np

    from hed.decode.hf import HFBackend
    from hed.decode.types import PromptInput, SamplingParams

    batch = input_ids.shape[0]
    params = SamplingParams(
        max_new_tokens=new_tokens, top_prob_k=5, batch_size=batch, stats_kernel=stats_kernel
    )
    prompts = [
        PromptInput(prompt_index=row, prompt_id=f"r{row}", text="", token_ids=tuple(ids))
        for row, ids in enumerate(input_ids.tolist())
    ]
    generated = HFBackend.of_model(model).generate(prompts, 1, params)
    sequences = sorted(generated, key=lambda s: s.prompt_index)
    names = ("token_ids", "entropy", "logprob", "topk_token_ids")
    return {name: np.stack([getattr(s, name) for s in sequences]) for name in names}


def plain_generate(model, input_ids, new_tokens: int) -> None:
    import torch
    from transformers import GenerationConfig

    from hed.decode.hf import neutral_generation_config

    config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=new_tokens,
        eos_token_id=None,
        pad_token_id=0,
    )
    with neutral_generation_config(model), torch.inference_mode():
        model.generate(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config
        )


def float64_scores(model64, prompt_ids, token_ids, k: int = 5) -> dict:
    """Teacher-forced float64 entropy, log-prob and top-k ids of ``token_ids`` (B, N)."""
    import torch

    full = torch.cat([prompt_ids, token_ids], dim=1)
    with torch.inference_mode():
        logits = model64(input_ids=full).logits[:, prompt_ids.shape[1] - 1 : -1]  # (B, N, V)
    log_p = torch.log_softmax(logits.double(), dim=-1)
    entropy = -(log_p.exp() * log_p.nan_to_num(neginf=0.0)).sum(-1)
    logprob = log_p.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
    return {
        "entropy": entropy.cpu().numpy(),
        "logprob": logprob.cpu().numpy(),
        "topk_ids": log_p.topk(k, dim=-1).indices.cpu().numpy(),
    }


def compare(records: dict, reference: dict) -> dict:
    """Max |Δ| (nats) of entropy and log-prob, and the share of equal top-k ids."""
    import numpy as np

    entropy = records["entropy"]  # (B, N)
    logprob = records["logprob"]
    ids = records["topk_token_ids"]  # (B, N, k)
    return {
        "entropy_max_abs_diff": float(np.abs(entropy - reference["entropy"]).max()),
        "logprob_max_abs_diff": float(np.abs(logprob - reference["logprob"]).max()),
        "topk_ids_equal_share": float((ids == reference["topk_ids"]).mean()),
    }


def phase_a(args, report) -> None:
    """Records in float32 and bfloat16 vs a float64 teacher-forced re-score, same weights."""
    import torch

    device = args.device
    model = build_model(args.shape, device, args.logit_std)
    prompts = random_prompts(args.check_batch, args.prompt_len, args.shape["vocab_size"], device)
    recorded = {"float32": hed_generate(model, prompts, args.check_tokens)}
    model_bf16 = copy.deepcopy(model).to(torch.bfloat16)
    recorded["bfloat16"] = hed_generate(model_bf16, prompts, args.check_tokens)
    del model_bf16
    model64 = model.double()  # the float32 weights, exactly, in float64
    for dtype, records in recorded.items():
        tokens = torch.as_tensor(records["token_ids"], device=device).long()
        figures = compare(records, float64_scores(model64, prompts, tokens))
        for name, value in figures.items():
            report(f"a_{dtype}_{name}", value)
    worst = max(report.figures["a_float32_entropy_max_abs_diff"],
                report.figures["a_float32_logprob_max_abs_diff"])  # fmt: skip
    report("a_float32_within_1e-4", worst <= FLOAT32_TOLERANCE)
    del model64, model
    free_memory(device)


def free_memory(device) -> None:
    import gc

    import torch

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def phase_b(args, report) -> float:
    """Plain vs recorded generate in bf16 per batch size; returns one decode step at the last."""
    import torch

    device = args.device
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    model = build_model(args.shape, device, args.logit_std).to(dtype)
    step_s = float("nan")
    warm = random_prompts(2, args.prompt_len, args.shape["vocab_size"], device)
    plain_generate(model, warm, 4)
    hed_generate(model, warm, 4)
    for batch in args.batches:
        prompts = random_prompts(batch, args.prompt_len, args.shape["vocab_size"], device)
        rates = {}
        for name, run in (("plain", plain_generate), ("hed", hed_generate)):
            synchronize(device)
            start = time.perf_counter()
            run(model, prompts, args.new_tokens)
            synchronize(device)
            elapsed = time.perf_counter() - start
            rates[name] = batch * args.new_tokens / elapsed
            report(f"b_batch{batch}_{name}_tokens_per_s", round(rates[name], 1))
            if name == "plain":
                step_s = elapsed / args.new_tokens
        report(f"b_batch{batch}_ratio", round(rates["hed"] / rates["plain"], 4))
    del model
    free_memory(device)
    return step_s


def time_call(fn, device, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after two warm-up calls."""
    import statistics

    fn()
    fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def phase_c(args, report, step_s: float) -> None:
    """The statistics alone at (rows, 151,936): reference vs the fused route."""
    import torch

    from hed.core.fused_stats import DistributionStats, cpp_compiler_available, reference_stats

    device = args.device
    generator = torch.Generator(device).manual_seed(3)
    logits = torch.randn(args.stats_rows, 151_936, device=device, generator=generator) * 4.0
    kernel = "auto" if device != "cpu" else ("compiled" if cpp_compiler_available() else "auto")
    fused = DistributionStats(kernel)
    out = fused(logits, 1.0, 5)
    report("c_fused_route", fused.route)
    ref = reference_stats(logits, 1.0, 5)
    report("c_fused_entropy_max_abs_diff", (out.entropy - ref.entropy).abs().max().item())
    report("c_fused_log_z_max_abs_diff", (out.log_z - ref.log_z).abs().max().item())
    report("c_fused_topk_ids_equal", bool(torch.equal(out.topk_ids, ref.topk_ids)))
    worst = max(report.figures["c_fused_entropy_max_abs_diff"],
                report.figures["c_fused_log_z_max_abs_diff"])  # fmt: skip
    report("c_fused_within_1e-5", worst <= 1e-5)
    repeats = 20 if device != "cpu" else 5
    ref_s = time_call(lambda: reference_stats(logits, 1.0, 5), device, repeats)
    fused_s = time_call(lambda: fused(logits, 1.0, 5), device, repeats)
    report("c_rows", args.stats_rows)
    report("c_reference_ms", round(ref_s * 1e3, 4))
    report("c_fused_ms", round(fused_s * 1e3, 4))
    report("c_fused_speedup", round(ref_s / fused_s, 2))
    if not math.isnan(step_s):  # phase b ran
        report("c_decode_step_ms", round(step_s * 1e3, 3))
        report("c_reference_share_of_step", round(ref_s / step_s, 4))
        report("c_fused_share_of_step", round(fused_s / step_s, 4))


BYTE_LEVEL_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_level_tokenizer():
    """A 259-token byte-level tokenizer (256 bytes, no merges, 3 specials) with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(BYTE_LEVEL_SPECIALS)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


SMALL_QWEN3 = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
}
RUN_PARAMS = {
    "prompts": {"num_prompts": 4},
    "generation": {
        "num_shards": 1,
        "samples_per_prompt": 2,
        "max_new_tokens": 16,
        "batch_size": 8,
        "dtype": "float32",
        "torch_threads": 1,
    },
}


def make_project(dest: Path) -> tuple[Path, object]:
    """A throwaway copy of the project whose run ``smollm2_demo`` step 0 is a small Qwen3."""
    import yaml

    for env in ("base", "local"):
        if (REPO_ROOT / "conf" / env).is_dir():
            shutil.copytree(
                REPO_ROOT / "conf" / env,
                dest / "conf" / env,
                ignore=shutil.ignore_patterns("credentials*"),
            )
    (dest / "conf" / "local").mkdir(parents=True, exist_ok=True)
    prompts = dest / "data/01_raw/prompts"
    prompts.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "data/01_raw/prompts/demo_math.jsonl", prompts)
    shutil.copy(REPO_ROOT / "pyproject.toml", dest / "pyproject.toml")
    shutil.copytree(REPO_ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__"))
    path = dest / "conf/base/parameters_generation.yml"
    params = yaml.safe_load(path.read_text())
    for section, values in RUN_PARAMS.items():
        params[section].update(values)
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    tokenizer = byte_level_tokenizer()
    model = build_model({**SMALL_QWEN3, "vocab_size": len(tokenizer)}, "cpu", 4.0, seed=5)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = [tokenizer.eos_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model_dir = dest / "data/01_raw/checkpoints/smollm2_demo/global_step_0/actor_hf"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return model_dir, params["prompts"]


def phase_d(args, report, pythonpath: str) -> None:
    """``kedro run --pipelines generation`` on GPURunner; records vs a float64 re-score."""
    import numpy as np
    import pandas as pd
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hed.decode.prompts import render_prompt

    project = Path(tempfile.mkdtemp(prefix="hed_device_check_"))
    try:
        model_dir, prompt_params = make_project(project)
        gpus = "gpus=[0]" if args.device != "cpu" else "gpus=cpu,cpu_workers=1"
        command = [sys.executable, "-m", "kedro", "run", "--pipelines", "generation"]
        command += ["--runner", "hed.runners.GPURunner", "--runner-params", gpus]
        env = {**os.environ, "PYTHONPATH": pythonpath, "KEDRO_DISABLE_TELEMETRY": "true"}
        start = time.perf_counter()
        result = subprocess.run(
            command, cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False
        )
        log = result.stdout + result.stderr
        report("d_kedro_run_s", round(time.perf_counter() - start, 1))
        report("d_kedro_exit_status", result.returncode)
        report("d_kedro_succeeded", result.returncode == 0)
        if result.returncode != 0:
            report("d_kedro_log_tail", log[-3000:])
            return
        where = "GPU 0" if args.device != "cpu" else "CPU worker 0"
        report("d_log_says", where if f"done on {where} (pid" in log else "not found")
        records = pd.read_parquet(
            project / "data/02_intermediate/token_records/smollm2_demo/step_0/shard_0.parquet"
        )
        prompts = pd.read_parquet(project / "data/02_intermediate/prompts.parquet")
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model64 = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64)
        model64 = model64.to(args.device).eval()
        worst = {"entropy": 0.0, "logprob": 0.0}
        n_tokens = 0
        for (prompt_index, _), rows in records.groupby(["prompt_index", "sample_index"]):
            user = prompts.loc[prompts.prompt_index == prompt_index, "prompt"].item()
            text = render_prompt(tokenizer, user, prompt_params)
            prompt_ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
            response = rows.sort_values("position")
            tokens = torch.as_tensor(response.token_id.to_numpy(np.int64))[None]
            scores = float64_scores(model64, prompt_ids.to(args.device), tokens.to(args.device))
            for name, so_far in worst.items():
                diff = np.abs(response[name].to_numpy() - scores[name][0]).max()
                worst[name] = max(so_far, float(diff))
            n_tokens += len(response)
        report("d_records", n_tokens)
        report("d_entropy_max_abs_diff", worst["entropy"])
        report("d_logprob_max_abs_diff", worst["logprob"])
        report("d_records_within_1e-4", max(worst.values()) <= FLOAT32_TOLERANCE)
    finally:
        shutil.rmtree(project, ignore_errors=True)


#: Figures that must be true for the check to pass (exit status 0), where their phase ran.
PASS_CHECKS = (
    "a_float32_within_1e-4",
    "c_fused_within_1e-5",
    "d_kedro_succeeded",
    "d_records_within_1e-4",
)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pythonpath = prepare_imports(args)
    report = Report(args.out)
    import torch

    report("device", torch.cuda.get_device_name() if args.device != "cpu" else "cpu")
    report("versions", {"torch": torch.__version__, "python": sys.version.split()[0]})
    report("import_s", round(time.perf_counter() - STARTED, 1))
    step_s = float("nan")
    if "a" in args.phases:
        phase_a(args, report)
    if "b" in args.phases:
        step_s = phase_b(args, report)
    if "c" in args.phases:
        phase_c(args, report, step_s)
    if "d" in args.phases:
        phase_d(args, report, pythonpath)
    report("total_s", round(time.perf_counter() - STARTED, 1))
    checks = [name for name in PASS_CHECKS if name in report.figures]
    failed = [name for name in checks if report.figures[name] is not True]
    report("all_pass", not failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
