"""Checkpoint export in the verl-like layout HED reads: ``<root>/global_step_<N>/actor_hf``.

TRL would write ``<output_dir>/checkpoint-<N>`` with optimizer, scheduler and RNG state; the
mini experiment keeps TRL's own saving off (``save_strategy="no"``) and writes, at each
scheduled step, only what an analysis needs: the weights in bfloat16 (a 135M model: 270 MB),
``config.json``, the tokenizer and a ``generation_config.json`` whose ``eos_token_id`` lists
every EOS id. A folder appears under its final name only once complete (temporary sibling,
then rename), so a killed training run never leaves an ``actor_hf`` that looks finished.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hed.decode.checkpoints import write_model_folder

MODEL_SUBDIR = "actor_hf"


def step_dir(checkpoint_root: str | Path, step: int) -> Path:
    """``<checkpoint_root>/global_step_<step>``."""
    return Path(checkpoint_root) / f"global_step_{step}"


def eos_ids_of(model: Any, tokenizer: Any) -> list[int]:
    """Every EOS id of the model's generation config and config, and the tokenizer's, sorted."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            ids.update(int(e) for e in (eos if isinstance(eos, list | tuple) else [eos]))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)


def checkpoint_copy(model: Any, tokenizer: Any, eos_token_ids: Sequence[int]) -> Any:
    """The policy as its checkpoint holds it: a bfloat16 copy in eval mode with every EOS id.

    A copy: casting the training model in place would lose its float32 master weights.
    """
    import torch

    frozen = copy.deepcopy(model).to(torch.bfloat16).eval()
    frozen.generation_config.eos_token_id = list(eos_token_ids)
    if frozen.generation_config.pad_token_id is None and tokenizer.pad_token_id is not None:
        frozen.generation_config.pad_token_id = int(tokenizer.pad_token_id)
    return frozen


def compute_copy(model: Any) -> Any:
    """A copy of ``model`` with the checkpoint's values (bfloat16) in the CPU's compute dtype.

    The weights are rounded to bfloat16 as :func:`checkpoint_copy` saves them, then kept in
    bfloat16 where the CPU computes it natively and cast to float32 elsewhere
    (:func:`hed.core.compute_dtype.cpu_dtype_name`): the same values either way, without torch's
    slow scalar bfloat16 kernel on CPUs without AVX512-BF16 / AMX.
    """
    import torch

    return as_compute_dtype(copy.deepcopy(model).to(torch.bfloat16))


def as_compute_dtype(frozen: Any) -> Any:
    """``frozen`` (a bfloat16 model, changed in place) in the CPU's compute dtype."""
    import torch

    from hed.core.compute_dtype import cpu_dtype_name

    return frozen.to(getattr(torch, cpu_dtype_name()))


def save_actor_hf(frozen: Any, tokenizer: Any, checkpoint_root: str | Path, step: int) -> Path:
    """Write a :func:`checkpoint_copy` and the tokenizer as the checkpoint of ``step``.

    Args:
        frozen: the model to save as it is (see :func:`checkpoint_copy`).
        tokenizer: its tokenizer.
        checkpoint_root: the run's checkpoint root.
        step: the RL step (the optimizer steps taken so far; 0 = the initial policy).

    Returns:
        The ``actor_hf`` folder (an existing one is replaced).
    """
    return write_model_folder(frozen, tokenizer, step_dir(checkpoint_root, step) / MODEL_SUBDIR)


def export_actor_hf(
    model: Any, tokenizer: Any, checkpoint_root: str | Path, step: int, eos_token_ids: Sequence[int]
) -> Path:
    """Write ``model`` (a bfloat16 copy; ``model`` is not modified) as the checkpoint of ``step``.

    Returns:
        The ``actor_hf`` folder (an existing one is replaced).
    """
    return save_actor_hf(
        checkpoint_copy(model, tokenizer, eos_token_ids), tokenizer, checkpoint_root, step
    )
