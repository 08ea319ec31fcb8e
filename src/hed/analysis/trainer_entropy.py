"""The trainer's logged mean entropy next to HED's decode-time mean entropy, per (run, step).

verl logs ``actor/entropy``: the mean entropy (nats) of the actor's softmax over the response
tokens of the step's training batch, computed by the trainer (FSDP/Megatron, its dtype) from
the logits divided by the rollout temperature (``verl.utils.torch_functional.entropy_from_logits``,
averaged with the batch's response mask). HED's ``mean_entropy`` (``summary_by_step``) is the
mean decode-time entropy of softmax(z/T) over the non-special tokens of HED's own samples of
the checkpoint (``generation.temperature``). Both are nats over the full vocabulary, but over
different token sets (the training batch's prompts and responses vs HED's prompts and samples)
and, with a temperature other than 1 on either side, different distributions; they are expected
to agree within sampling noise when the prompts come from one distribution. A gap beyond the
tolerance is worth a look: verl ≤ 0.4 with dynamic batch size logged ~0.6 where ~1.0 was right
(a loss-aggregation bug in the logged value, not in the model).
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

logger = logging.getLogger(__name__)

#: The W&B key verl logs the trainer's mean entropy under (``analyses.trainer_entropy``'s
#: default ``metric_key``) and the default tolerance (nats) of its difference to HED's.
METRIC_KEY = "actor/entropy"
TOLERANCE_NATS = 0.05

#: Columns of the ``trainer_entropy`` table.
TRAINER_ENTROPY_COLUMNS = [
    "run",
    "step",
    "trainer_entropy",
    "metric_key",
    "hed_mean_entropy",
    "hed_temperature",
    "difference",
    "tolerance_nats",
    "within_tolerance",
]


def compare_trainer_entropy(
    trainer: pd.DataFrame,
    summary_by_step: pd.DataFrame,
    *,
    metric_key: str,
    temperature: float,
    tolerance: float,
) -> pd.DataFrame:
    """One row per (run, step) of ``summary_by_step`` with the trainer's value at that step.

    Args:
        trainer: run, step, trainer_entropy (nats); the last value logged at a step counts.
        summary_by_step: run, step, mean_entropy (HED's, nats).
        metric_key: the W&B key read (written into every row).
        temperature: HED's sampling temperature T.
        tolerance: nats; |difference| above it logs a warning naming the run and step.

    Returns:
        :data:`TRAINER_ENTROPY_COLUMNS`; difference = trainer_entropy − hed_mean_entropy
        (empty where the trainer logged nothing at that step).
    """
    last = trainer.drop_duplicates(["run", "step"], keep="last")[["run", "step", "trainer_entropy"]]
    hed = summary_by_step[["run", "step", "mean_entropy"]].rename(
        columns={"mean_entropy": "hed_mean_entropy"}
    )
    table = hed.merge(last, on=["run", "step"], how="left")
    difference = table["trainer_entropy"].astype(float) - table["hed_mean_entropy"].astype(float)
    table = table.assign(
        metric_key=metric_key,
        hed_temperature=float(temperature),
        difference=difference,
        tolerance_nats=float(tolerance),
        within_tolerance=np.where(difference.isna(), None, difference.abs() <= tolerance),
    )
    for row in table[table["within_tolerance"] == False].itertuples():  # noqa: E712
        logger.warning(
            "run %s step %d: the trainer's %s is %.4f nats, HED's decode-time mean entropy "
            "%.4f (difference %.4f > tolerance %.4f): check the trainer's entropy logging",
            row.run, row.step, metric_key, row.trainer_entropy, row.hed_mean_entropy,
            row.difference, tolerance,
        )  # fmt: skip
    return table.reindex(columns=TRAINER_ENTROPY_COLUMNS)
