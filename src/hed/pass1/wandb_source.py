"""A run's W&B source, online (``wandb``) or offline (``wandb_offline``), read as a history.

The one place that chooses between :mod:`hed.pass1.wandb_online` and
:mod:`hed.pass1.wandb_offline` from a configured :class:`~hed.pass1.config.SourceSpec`: the
metrics pipeline reads pass@1 through it, the analyses pipeline the trainer's entropy.
"""

from __future__ import annotations

import pandas as pd

from hed.pass1.config import SourceSpec
from hed.pass1.wandb_offline import read_wandb_offline_history
from hed.pass1.wandb_online import read_wandb_history, wandb_run_ref


def read_wandb_source(spec: SourceSpec, run: str, metric_key: str | None = None) -> pd.DataFrame:
    """Every logged value of ``metric_key`` of ``run``'s W&B source, in logged order.

    Args:
        spec: the run's ``wandb`` or ``wandb_offline`` source, options filled in
            (:class:`~hed.pass1.config.MetricsParams`: ``run``/entity/project/...,
            ``base_url``, ``timeout`` online; ``path`` offline; ``metric_key``, ``step_key``).
        run: the run's name under ``metrics.runs`` (messages name
            ``metrics.runs.<run>.sources.wandb``).
        metric_key: the key to read; None: the source's own ``metric_key`` (pass@1).

    Returns:
        step (int64), pass1 (float64: the key's value, whatever it is), wandb_step,
        metric_key, step_key (:data:`hed.pass1.history.HISTORY_COLUMNS`).

    Raises:
        ConfigError: the online run is not named, or no W&B API key.
        InputDataError: run or folder not found, the key never logged.
    """
    options = spec.options
    key = metric_key or options["metric_key"]
    if spec.name == "wandb":
        return read_wandb_history(
            wandb_run_ref(options, f"metrics.runs.{run}.sources.wandb"),
            metric_key=key,
            step_key=options["step_key"],
            base_url=options["base_url"],
            timeout=options["timeout"],
        )
    return read_wandb_offline_history(options["path"], metric_key=key, step_key=options["step_key"])
