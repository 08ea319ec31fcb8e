"""Peak host RSS of loading a checkpoint: host copy then ``.to(device)`` vs ``device_map`` at load.

Each load runs in a fresh subprocess (``ru_maxrss`` is a process's high-water mark), which
first imports torch and transformers and records its RSS (the baseline), then loads the model
one way, reads every weight once (pages of a memory-mapped file count only once touched, as
generation touches them), and reports the peak RSS above that baseline:

* ``before``: ``from_pretrained(dir, dtype=...)`` (weights in host memory) then ``.to(device)``
  (what HED did until this change);
* ``after``: ``from_pretrained(dir, dtype=..., device_map={"": device})`` (what
  :func:`hed.decode.hf.load_model_and_tokenizer` does now): transformers materialises each
  tensor of the memory-mapped safetensors file on the device as it reads it.

On CPU the weights live in host memory either way, so the two should be equal there; the
difference shows on a GPU. Usage::

    python bench/loading.py                          # the demo SmolLM2-135M, CPU
    python bench/loading.py --device cuda --qwen3-8b /scratch/qwen3_8b_random
        # writes a Qwen3-8B-shaped random-weight checkpoint (bfloat16, ~16 GB, in 2 GB
        # safetensors shards) to that folder once, then loads it both ways on the GPU
    python bench/loading.py --qwen3-8b /tmp/q --layers 1 --vocab 4096   # a small dry run

Prints one line per way and the ratio after/before.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / ".pytest_cache/hed_models"

#: Qwen/Qwen3-8B's config.json (architecture fields).
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "attention_bias": False,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "dtype": "bfloat16",
}

CHILD = r"""
import json, resource, sys, time
import torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(1)
way, model_dir, device, dtype = sys.argv[1:5]
def rss_mb():  # current RSS
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20
base = rss_mb()
start = time.perf_counter()
kwargs = {"dtype": getattr(torch, dtype), "local_files_only": True}
if way == "after":
    model = AutoModelForCausalLM.from_pretrained(model_dir, device_map={"": device}, **kwargs)
else:
    model = AutoModelForCausalLM.from_pretrained(model_dir, **kwargs).to(device)
with torch.no_grad():  # touch every weight: memory-mapped pages count once read
    checksum = sum(float(p.float().sum()) for p in model.parameters())
if device.startswith("cuda"):
    torch.cuda.synchronize()
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB -> MB (Linux)
n = sum(p.numel() for p in model.parameters())
on = {str(p.device) for p in model.parameters()}
print(json.dumps({"baseline_mb": base, "peak_mb": peak, "seconds": seconds, "params": n,
                  "devices": sorted(on), "rss_after_mb": rss_mb()}))
"""


def demo_model_dir() -> Path:
    """The converted demo SmolLM2 of the test cache (``tests/conftest.py::smollm2_dir``)."""
    found = sorted(p.parent for p in DEMO.rglob("config.json"))
    if not found:
        sys.exit(
            f"no converted demo model under {DEMO}: run `pytest tests/decode/test_recording.py`"
        )
    return found[0]


def write_random_checkpoint(folder: Path, config: dict, shard_bytes: int = 2 * 2**30) -> Path:
    """Write a random-weight checkpoint of ``config`` (bfloat16 safetensors shards + index).

    The parameter names and shapes come from the model built on the meta device (no memory);
    each tensor is drawn as it is written, so the host holds one shard at a time.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    if (folder / "model.safetensors.index.json").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    cfg = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    weight_map: dict[str, str] = {}
    names = list(shapes)
    total = sum(torch.Size(s).numel() * 2 for s in shapes.values())
    n_files = 0

    def flush(last: bool) -> None:
        nonlocal n_files, size
        if not shards[-1]:
            return
        n_files += 1
        name = f"model-{n_files:05d}.safetensors"
        save_file(shards[-1], str(folder / name), metadata={"format": "pt"})
        for key in shards[-1]:
            weight_map[key] = name
        shards[-1] = {}
        size = 0

    for name in names:
        tensor = torch.empty(shapes[name], dtype=torch.bfloat16)
        tensor.normal_(0, 0.02, generator=generator)
        shards[-1][name] = tensor
        size += tensor.numel() * 2
        if size >= shard_bytes:
            flush(False)
    flush(True)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    return folder


def measure(way: str, model_dir: Path, device: str, dtype: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, way, str(model_dir), device, dtype],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    parser.add_argument("--qwen3-8b", type=Path, help="folder for the random Qwen3-8B checkpoint")
    parser.add_argument("--layers", type=int, help="override num_hidden_layers (dry runs)")
    parser.add_argument("--vocab", type=int, help="override vocab_size (dry runs)")
    args = parser.parse_args()
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    if args.qwen3_8b:
        config = dict(QWEN3_8B)
        if args.layers:
            config["num_hidden_layers"] = args.layers
        if args.vocab:
            config["vocab_size"] = args.vocab
        started = time.perf_counter()
        model_dir = write_random_checkpoint(args.qwen3_8b, config)
        print(f"checkpoint {model_dir} ready in {time.perf_counter() - started:.0f} s")
    else:
        model_dir = demo_model_dir()
    size_mb = sum(p.stat().st_size for p in model_dir.glob("*.safetensors")) / 2**20
    print(f"model {model_dir} ({size_mb:.0f} MB of safetensors), device {args.device}, {dtype}")
    results = {}
    for way in ("before", "after"):
        r = measure(way, model_dir, args.device, dtype)
        results[way] = r
        print(
            f"{way:>6}: peak host RSS {r['peak_mb']:.0f} MB "
            f"({r['peak_mb'] - r['baseline_mb']:.0f} MB above the {r['baseline_mb']:.0f} MB of "
            f"torch+transformers), load {r['seconds']:.1f} s, {r['params'] / 1e6:.0f}M "
            f"parameters on {', '.join(r['devices'])}, RSS after {r['rss_after_mb']:.0f} MB"
        )
    before = results["before"]["peak_mb"] - results["before"]["baseline_mb"]
    after = results["after"]["peak_mb"] - results["after"]["baseline_mb"]
    print(f"peak host RSS above baseline, after / before: {after / max(before, 1e-9):.2f}")


if __name__ == "__main__":
    main()
