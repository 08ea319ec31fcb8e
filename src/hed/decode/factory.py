"""The decoding backends by name: :func:`open_backend` opens a checkpoint with ``hf``
(transformers ``generate``, :mod:`hed.decode.hf`) or ``vllm`` (:mod:`hed.decode.vllm`).

Its own module because it imports both backends, which import the contract
(:mod:`hed.decode.backend`): kept there, it would make an import circle.
"""

from __future__ import annotations

from pathlib import Path

from hed.decode.backend import DecodingBackend, check_backend_name
from hed.decode.types import VLLMSettings


def open_backend(
    name: str,
    model_dir: str | Path,
    *,
    dtype: str | None = "by_device",
    torch_threads: int | None = None,
    vllm: VLLMSettings | None = None,
) -> DecodingBackend:
    """Open the checkpoint in ``model_dir`` with backend ``name``, every check done first.

    The device is ``cuda`` when torch sees a GPU, else ``cpu`` (with ``torch_threads`` CPU
    threads when set); ``dtype`` is resolved for that device and checkpoint
    (:func:`hed.decode.loading.resolve_dtype`). ``hf`` loads the model and tokenizer now
    (:func:`hed.decode.loading.load_model_and_tokenizer`); ``vllm`` checks that vLLM imports
    and implements the checkpoint's architecture and loads the tokenizer; its engine starts
    inside each ``generate`` call (it needs the prompts for ``max_model_len``) and is shut
    down when that call ends.

    Args:
        name: ``hf`` or ``vllm`` (``generation.backend``).
        model_dir: the checkpoint folder (HuggingFace layout).
        dtype: ``by_device`` (None too), ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        torch_threads: torch's CPU threads (None or 0: torch's default).
        vllm: the vLLM engine settings (``generation.vllm``; default :class:`VLLMSettings`).

    Returns:
        the backend; close it (or use it in a ``with`` block) when done.

    Raises:
        ConfigError: an unknown name, an unknown dtype, or (vllm) vLLM not installed.
        CheckpointError: the checkpoint cannot be loaded (vllm: or its architecture is not
            one vLLM implements).
    """
    from hed.decode.loading import resolve_dtype, torch_device

    check_backend_name(name)
    device = torch_device(torch_threads)
    resolved = resolve_dtype(dtype, device, model_dir)
    if name == "vllm":
        from hed.decode.vllm import VLLMBackend

        return VLLMBackend(model_dir, vllm or VLLMSettings(), dtype=resolved, device=device)
    from hed.decode.hf import HFBackend

    return HFBackend(model_dir, dtype=resolved, device=device)
