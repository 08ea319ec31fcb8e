"""Loading a checkpoint folder: its tokenizer (the one loader), its model, dtype and EOS ids.

Every backend and the token report load tokenizers with :func:`load_tokenizer`; the hf
backend and the rescoring load weights with :func:`load_model_and_tokenizer`. torch and
transformers are imported inside the functions, so importing this module loads neither.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hed.errors import CheckpointError, one_line


def load_tokenizer(model_dir: str | Path):
    """The checkpoint's HuggingFace tokenizer (local files only; left padding; a pad token).

    Args:
        model_dir: a HuggingFace model folder holding the tokenizer files.

    Returns:
        The tokenizer; it pads on the left and has a pad token (its EOS when it had none).

    Raises:
        CheckpointError: the tokenizer files do not load (names the folder and what to do).
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            model_dir, padding_side="left", local_files_only=True
        )
    except Exception as error:  # any loader failure becomes one line naming the folder
        raise CheckpointError(
            f"checkpoint {model_dir} cannot be loaded: its tokenizer fails "
            f"({one_line(error)}); copy the base model's tokenizer files (tokenizer.json, "
            "tokenizer_config.json) into it"
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def require_config(model_dir: str | Path) -> Path:
    """``model_dir`` as a Path, refused unless it holds a ``config.json``.

    Raises:
        CheckpointError: no ``config.json`` (not a HuggingFace folder).
    """
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise CheckpointError(f"checkpoint {model_dir}: no config.json (not a HuggingFace folder)")
    return model_dir


def torch_device(torch_threads: int | None = None) -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``; sets torch's CPU threads first:
    ``torch_threads`` when set, else (None or 0) torch's default lowered to the CPUs this
    process may use (:func:`hed.core.cpus.cap_torch_threads`: affinity and cgroup quota)."""
    import torch

    from hed.core.cpus import cap_torch_threads

    if torch_threads:
        torch.set_num_threads(int(torch_threads))
    else:
        cap_torch_threads()
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(name: str | None, device: Any, model_dir: str | Path | None = None):
    """Map a configured dtype name to a torch dtype (:mod:`hed.core.compute_dtype`).

    Args:
        name: ``"by_device"`` (None too: bfloat16 on CUDA and on CPUs with native bfloat16,
            float32 elsewhere), ``"auto"`` (the checkpoint's dtype, from ``model_dir``'s
            config.json), ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        device: the device the model will run on, e.g. ``"cuda:0"`` (str or torch.device).
        model_dir: the checkpoint folder (needed for ``"auto"``; without it ``"auto"`` is only
            checked to be a known name and float32 is returned).

    Returns:
        a ``torch.dtype``.

    Raises:
        ConfigError: an unknown name.
        CheckpointError: ``"auto"`` and the checkpoint's config.json cannot be read.
    """
    import torch

    from hed.core.compute_dtype import CHECKPOINT, dtype_name

    resolved = dtype_name(name, str(torch.device(device)), model_dir)
    return torch.float32 if resolved == CHECKPOINT else getattr(torch, resolved)


def load_model_and_tokenizer(
    model_dir: str | Path, dtype: str | None = "by_device", device: str = "cpu"
):
    """Load a checkpoint folder for generation, its weights straight onto ``device``.

    The weights are loaded with ``device_map={"": device}`` and the target dtype, so
    transformers materialises each tensor on the device as it reads it (the safetensors file
    is memory-mapped): a CUDA process never holds a full host copy of the model (no
    ``from_pretrained`` on CPU followed by ``.to(device)``).

    Args:
        model_dir: a HuggingFace model folder (config.json, weights, tokenizer files).
        dtype: see :func:`resolve_dtype`.
        device: torch device string, e.g. ``"cpu"`` or ``"cuda:0"``.

    Returns:
        ``(model, tokenizer)``: the model in eval mode on ``device``; the tokenizer as
        :func:`load_tokenizer` returns it.

    Raises:
        CheckpointError: the folder is missing or transformers cannot load it.
        ConfigError: an unknown dtype.
    """
    import torch
    from transformers import AutoModelForCausalLM

    model_dir = require_config(model_dir)
    torch_dtype = resolve_dtype(dtype, device, model_dir)
    tokenizer = load_tokenizer(model_dir)
    target = torch.device(device)
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", 0)  # the process's own GPU (CUDA_VISIBLE_DEVICES)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch_dtype, device_map={"": target}, local_files_only=True
        )
    except Exception as error:  # any loader failure becomes one line naming the folder
        raise CheckpointError(
            f"checkpoint {model_dir} cannot be loaded: its config or weights fail "
            f"({one_line(error)}); re-export or re-merge this checkpoint"
        ) from None
    model.eval()
    return model, tokenizer


def checkpoint_eos_token_ids(model, tokenizer) -> list[int]:
    """Every EOS id of a loaded model's generation config, else its config's, else the
    tokenizer's EOS."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return _id_list(eos)


def eos_token_ids_of(model_dir: str | Path, tokenizer) -> list[int]:
    """Every EOS id of the checkpoint, read as :func:`checkpoint_eos_token_ids` from the files.

    ``generation_config.json``'s ``eos_token_id``, else ``config.json``'s, else the
    tokenizer's EOS (no model is loaded).
    """
    model_dir = Path(model_dir)
    eos = None
    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if eos is None and path.is_file():
            eos = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
    if eos is None:
        eos = tokenizer.eos_token_id
    return _id_list(eos)


def _id_list(eos: Any) -> list[int]:
    if eos is None:
        return []
    return [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]


__all__ = [
    "checkpoint_eos_token_ids",
    "eos_token_ids_of",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "require_config",
    "resolve_dtype",
    "torch_device",
]
