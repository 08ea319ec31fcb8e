"""How fast can a checkpoint's weights be fingerprinted? sha256 vs blake2b vs xxh3_128.

Writes one safetensors-shaped file of ``--gb`` GB (an 8-byte header length, a JSON header,
then random bytes) under ``--dir`` and times each digest over it, twice: the first pass after
the write (the file is in the page cache when it fits in memory: a CPU-bound figure) and the
figure :func:`hed.decode.checkpoints.checkpoint_fingerprint` takes. Prints GB/s and each digest's
speed as a ratio against sha256 measured in the same process, and the machine.

    python bench/checkpoint_fingerprint.py --gb 3 --dir /tmp
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import struct
import tempfile
import time
from pathlib import Path

CHUNK = 16 << 20


def write_file(path: Path, size: int) -> None:
    header = json.dumps({"w": {"dtype": "BF16", "shape": [size // 2], "data_offsets": [0, size]}})
    with path.open("wb") as out:
        out.write(struct.pack("<Q", len(header)) + header.encode())
        block = os.urandom(CHUNK)
        left = size
        while left > 0:
            out.write(block[: min(left, CHUNK)])
            left -= CHUNK
            block = block[1:] + block[:1]  # cheap variation between blocks


def time_digest(path: Path, factory) -> tuple[float, str]:
    started = time.perf_counter()
    with path.open("rb") as file:
        if factory in HASHLIB:
            digest = hashlib.file_digest(file, factory)
        else:
            digest = _stream(file, factory)
    return time.perf_counter() - started, digest.hexdigest()[:16]


def _stream(file, factory):
    digest = factory()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    while n := file.readinto(buffer):
        digest.update(view[:n])
    return digest


HASHLIB = {hashlib.sha256, hashlib.blake2b}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=3.0)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    import xxhash

    from hed.decode.checkpoints import checkpoint_fingerprint

    folder = Path(tempfile.mkdtemp(prefix="hed_fp_", dir=args.dir))
    path = folder / "model.safetensors"
    size = int(args.gb * 1e9)
    try:
        write_file(path, size)
        (folder / "config.json").write_text("{}")
        print(f"machine: {_cpu_model()}, {os.cpu_count()} cores,")
        print(f"  {platform.platform()}; file {size / 1e9:.2f} GB in {args.dir}")
        digests = [("sha256", hashlib.sha256), ("blake2b", hashlib.blake2b),
                   ("xxh3_128", xxhash.xxh3_128)]  # fmt: skip
        baseline = None
        for name, factory in digests:
            time_digest(path, factory)  # warm the page cache once for every digest alike
            seconds, _ = time_digest(path, factory)
            baseline = baseline or seconds
            print(
                f"{name:>9}: {size / 1e9 / seconds:6.2f} GB/s  ({seconds:6.2f} s, "
                f"{baseline / seconds:4.2f}x sha256; 16 GB: {16 / (size / 1e9 / seconds):5.1f} s)"
            )
        started = time.perf_counter()
        checkpoint_fingerprint(folder)
        seconds = time.perf_counter() - started
        print(
            f"checkpoint_fingerprint: {size / 1e9 / seconds:6.2f} GB/s ({seconds:.2f} s; "
            f"16 GB: {16 / (size / 1e9 / seconds):.1f} s)"
        )
    finally:
        path.unlink(missing_ok=True)
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
