"""Which floating-point type HED computes in, by device and processor capability.

``generation.dtype`` (and the mini_dapo training's ``bf16``) take these names:

``by_device`` (the default)
    bfloat16 on CUDA; on CPU bfloat16 only where the processor multiplies bfloat16 natively
    (AVX512-BF16 or AMX-BF16), float32 otherwise. Without native support torch falls back to
    a scalar bfloat16 GEMM (``at::native::AVX2::bf16_dot_with_fp32_arith``): on an AVX2-only
    CPU ``generate`` ran at 6 tokens/s in bfloat16 against 22 in float32.
``auto``
    the checkpoint's own dtype, read from its ``config.json`` (``dtype``, or the older
    ``torch_dtype``), as ``transformers``' ``from_pretrained(dtype="auto")`` means it; float32
    when the config names none (transformers' default).
``float32`` / ``bfloat16`` / ``float16``
    that type, on any device.

The processor's capability is read from ``/proc/cpuinfo`` (flags ``avx512_bf16``,
``amx_bf16``) and from torch (``torch.backends.cpu.get_cpu_capability()`` must be ``AVX512``
or better, so that torch dispatches its vectorised bfloat16 kernels, and oneDNN must support
bfloat16: ``torch.ops.mkldnn._is_mkldnn_bf16_supported()``).
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Any

from hed.errors import CheckpointError, ConfigError

logger = logging.getLogger(__name__)

BY_DEVICE = "by_device"
CHECKPOINT = "auto"
DTYPE_NAMES = ("float32", "bfloat16", "float16")
#: Every accepted value of ``generation.dtype``.
DTYPE_CHOICES = (BY_DEVICE, CHECKPOINT, *DTYPE_NAMES)

_CPUINFO = Path("/proc/cpuinfo")
_NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
_VECTOR_BF16_CAPABILITIES = ("AVX512", "AMX")  # torch's names; AVX2/DEFAULT lack bf16 kernels


def cpu_flags(cpuinfo: Path = _CPUINFO) -> frozenset[str]:
    """The ``flags`` of the first processor in ``/proc/cpuinfo`` (empty off Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in {"flags", "Features"}:
            return frozenset(value.split())
    return frozenset()


def torch_cpu_capability() -> str:
    """torch's CPU kernel level, e.g. ``"AVX2"``, ``"AVX512"`` (``"DEFAULT"`` if unknown)."""
    import torch

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return "DEFAULT"


def _onednn_bf16() -> bool:
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively *and* torch uses it (see module docstring)."""
    flags = cpu_flags()
    native = any(flag in flags for flag in _NATIVE_BF16_FLAGS)
    capability = torch_cpu_capability()
    vector = any(capability.startswith(level) for level in _VECTOR_BF16_CAPABILITIES)
    return native and vector and _onednn_bf16()


def cpu_dtype_name() -> str:
    """``"bfloat16"`` where :func:`cpu_has_native_bf16`, else ``"float32"``."""
    return "bfloat16" if cpu_has_native_bf16() else "float32"


def device_dtype_name(device: str) -> str:
    """The ``by_device`` dtype of ``device`` (``"cuda"``, ``"cuda:1"``, ``"cpu"``)."""
    return "bfloat16" if str(device).startswith("cuda") else cpu_dtype_name()


def checkpoint_dtype_name(model_dir: str | Path) -> str:
    """The dtype a checkpoint's ``config.json`` names (``dtype`` or ``torch_dtype``).

    Returns:
        ``"float32"``, ``"bfloat16"`` or ``"float16"``; ``"float32"`` when none is named.

    Raises:
        CheckpointError: config.json is missing or unreadable, or names another dtype.
    """
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint's dtype ({exc})") from None
    name = config.get("dtype") or config.get("torch_dtype") or "float32"
    name = str(name).removeprefix("torch.")
    if name not in DTYPE_NAMES:
        raise CheckpointError(
            f"{path}: dtype {name!r} is not one of {', '.join(DTYPE_NAMES)}; set "
            "generation.dtype to one of them instead of auto"
        )
    return name


def dtype_name(configured: Any, device: str, model_dir: str | Path | None = None) -> str:
    """The concrete dtype name ``generation.dtype`` stands for on ``device``.

    Args:
        configured: a value of :data:`DTYPE_CHOICES` (None: ``by_device``).
        device: the device the model runs on.
        model_dir: the checkpoint (needed for ``auto``; without it ``auto`` is not resolved
            and ``"auto"`` is returned).

    Raises:
        ConfigError: an unknown name.
        CheckpointError: ``auto`` and the checkpoint's config cannot be read.
    """
    name = BY_DEVICE if configured is None else str(configured)
    if name not in DTYPE_CHOICES:
        raise ConfigError(
            f"generation.dtype: {name!r} is not one of {', '.join(DTYPE_CHOICES)} "
            f"({BY_DEVICE}: bfloat16 on CUDA and on CPUs with native bfloat16, else float32; "
            f"{CHECKPOINT}: the checkpoint's own dtype)"
        )
    if name == BY_DEVICE:
        return device_dtype_name(device)
    if name == CHECKPOINT:
        return CHECKPOINT if model_dir is None else checkpoint_dtype_name(model_dir)
    if name == "bfloat16" and not str(device).startswith("cuda") and not cpu_has_native_bf16():
        logger.warning(
            "generation.dtype is bfloat16 but this CPU has no native bfloat16 (AVX512-BF16 or "
            "AMX): torch falls back to a slow scalar kernel; %s picks float32 here",
            BY_DEVICE,
        )
    return name


__all__ = [
    "BY_DEVICE",
    "CHECKPOINT",
    "DTYPE_CHOICES",
    "DTYPE_NAMES",
    "checkpoint_dtype_name",
    "cpu_dtype_name",
    "cpu_flags",
    "cpu_has_native_bf16",
    "device_dtype_name",
    "dtype_name",
    "torch_cpu_capability",
]
