"""HF generation on a shared CPU: tokens/s alone vs. next to one busy process, before and after.

Shared login nodes, SLURM allocations and a trainer next door leave HED fewer cores than the
machine has. OpenMP threads that spin while they wait (libgomp's default) then lose against
another CPU-bound process at every synchronisation. This bench measures the embedded model
(SmolLM2-135M-Instruct, :func:`hed.decode.embedded.ensure_embedded_checkpoint`) generating
with plain ``model.generate`` (greedy, EOS off: exactly ``--new-tokens`` tokens per sequence):

* alone, and with one competing CPU-bound process (``python -c "while True: pass"``);
* ``before``: threads as before the fix (torch's default count, OpenMP's default spinning);
* ``after``: HED's settings (:func:`hed.core.cpus.openmp_environment`: idle OpenMP threads
  sleep; :func:`hed.decode.loading.torch_device`: torch threads capped to the CPUs the process
  may use, :func:`hed.core.cpus.allowed_cpus`).

Each (variant, competitor) runs in a fresh process (OpenMP reads its environment once, when
torch loads it), all four from this one command, and the ratio ``with competitor / alone`` is
printed per variant (fair share on 2 cores with one competitor: 0.5; target ≥ 0.4). A timed
test would be flaky on a shared machine: this is a benchmark, run by hand::

    .venv/bin/python bench/shared_cpu.py                 # both variants
    .venv/bin/python bench/shared_cpu.py --variants after --new-tokens 64 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL_DIR = REPO_ROOT / ".pytest_cache/hed_models/smollm2/global_step_0/actor_hf"
PROMPT = "Question: What is the sum of the first 50 positive integers? Answer step by step."
#: Variables that decide OpenMP's threads; ``before`` runs without them.
OPENMP_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "KMP_BLOCKTIME",
    "GOMP_SPINCOUNT",
)


def worker(args: argparse.Namespace) -> None:
    """One measurement in this process: print ``{"tokens_per_s": [...], "threads": n}``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hed.decode.embedded import ensure_embedded_checkpoint
    from hed.decode.loading import torch_device

    if args.variant == "after":
        torch_device()  # HED's choice: threads capped to the allowed CPUs
    model_dir = ensure_embedded_checkpoint(args.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    inputs = tokenizer([PROMPT] * args.batch_size, return_tensors="pt")
    settings = {
        "max_new_tokens": args.new_tokens,
        "min_new_tokens": args.new_tokens,
        "do_sample": False,
        "pad_token_id": tokenizer.eos_token_id,
    }
    rates = []
    with torch.inference_mode():
        model.generate(**inputs, max_new_tokens=4, do_sample=False)  # warm-up
        for _ in range(args.repeats):
            start = time.perf_counter()
            model.generate(**inputs, **settings)
            rates.append(args.new_tokens * args.batch_size / (time.perf_counter() - start))
    print(json.dumps({"tokens_per_s": rates, "threads": torch.get_num_threads()}))


def measure(args: argparse.Namespace, variant: str, competitor: bool) -> dict:
    """Run :func:`worker` in a fresh process, with a busy-loop process beside it or not."""
    from hed.core.cpus import openmp_environment

    env = {k: v for k, v in os.environ.items() if k not in OPENMP_VARIABLES}
    if variant == "after":
        env.update(openmp_environment())
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")])
    command = [sys.executable, __file__, "--worker", "--variant", variant]
    command += ["--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats)]
    command += ["--batch-size", str(args.batch_size), str(args.model_dir)]
    busy = None
    if competitor:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.5)
    try:
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", nargs="?", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--variants", nargs="+", default=["before", "after"])
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="after", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    from hed.core.cpus import allowed_cpus

    print(f"CPUs allowed: {allowed_cpus()} (machine: {os.cpu_count()}); one busy competitor")
    for variant in args.variants:
        alone = measure(args, variant, competitor=False)
        shared = measure(args, variant, competitor=True)
        a = statistics.median(alone["tokens_per_s"])
        s = statistics.median(shared["tokens_per_s"])
        print(
            f"{variant:>6}: alone {a:6.1f} tok/s ({alone['threads']} threads), with a busy "
            f"process {s:6.1f} tok/s ({shared['threads']} threads): ratio {s / a:.2f} "
            "(fair share 0.50, target >= 0.40)"
        )


if __name__ == "__main__":
    main()
