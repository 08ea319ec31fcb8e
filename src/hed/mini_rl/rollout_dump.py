"""The miniature's rollouts in verl's dump format (docs/rollouts.md).

:func:`write_verl_dump` writes ``<folder>/<step>.jsonl`` as verl's
``RayPPOTrainer._dump_generations`` does (``trainer.rollout_data_dir``): one JSON object per
response with ``input`` and ``output`` = ``batch_decode(ids, skip_special_tokens=True)`` of the
prompt and response ids, ``gts``, ``score``, ``step`` and every reward-extra field, plus
``response_ids`` (the sampled ids, which verl does not write; HED compares them with the ids it
rebuilds from the text).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hed.records.atomic_io import atomic_path
from hed.records.verl_dump import RESPONSE_IDS_FIELD


def write_verl_dump(
    folder: str | Path,
    step: int,
    *,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    tokenizer: Any,
    scores: Sequence[float],
    gts: Sequence[Any] | None = None,
    extras: Mapping[str, Sequence[Any]] | None = None,
    with_response_ids: bool = True,
) -> Path:
    """Write dump step ``step`` as verl writes it (atomically: all lines or no file).

    Args:
        folder: the dump folder (``trainer.rollout_data_dir``).
        step: verl's global step (1 = the first update's rollouts).
        prompt_ids, response_ids: per response, the prompt ids (chat-templated, no padding)
            and the sampled response ids (EOS included when it ended with one).
        tokenizer: the policy's tokenizer.
        scores: per response, its reward (verl: the sum of its token-level scores).
        gts: per response, the reference answer (None: the field is written as null).
        extras: reward-extra fields, each one value per response (e.g. ``{"acc": [...]}``).
        with_response_ids: also write ``response_ids`` (not in verl's own dumps).

    Returns:
        The written file.
    """
    n = len(prompt_ids)
    fields: dict[str, Sequence[Any]] = {
        "input": tokenizer.batch_decode(prompt_ids, skip_special_tokens=True),
        "output": tokenizer.batch_decode(response_ids, skip_special_tokens=True),
        "gts": list(gts) if gts is not None else [None] * n,
        "score": [float(s) for s in scores],
        "step": [int(step)] * n,
    }
    for name, values in (extras or {}).items():
        if len(values) == n:  # verl keeps only the extras of the batch's length
            fields[name] = list(values)
    if with_response_ids:
        fields[RESPONSE_IDS_FIELD] = [[int(t) for t in ids] for ids in response_ids]
    lines = [json.dumps({k: v[i] for k, v in fields.items()}, ensure_ascii=False) for i in range(n)]
    target = Path(folder) / f"{int(step)}.jsonl"
    with atomic_path(target) as temp:
        temp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target
