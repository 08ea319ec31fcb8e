"""Any number of runs side by side: per (run, step) measures and deltas to a reference run.

Measures per (run, step), each defined where its table is:

* anthropomorphic_per_1k_tokens = 1000 · n_high_entropy_anthropomorphic / n_tokens
  (``summary_by_step``: high-entropy tokens of the anthropomorphic category per thousand
  non-special tokens, a rate that does not grow with response length as Figure 2's count does);
* mean_entropy (nats, ``summary_by_step``);
* pass1 (``pass1_for_figures``: the run's configured figure source);
* pass_at_max_k and max_k (``pass_at_k``: the unbiased pass@k at the largest k of the step);
* any further per-(run, step) measure table handed in (its numeric columns, prefixed).

For every measure m, ``delta_<m>`` = m(run, step) − m(reference run, step): the reference
run's value at the *same* step (empty where the reference run has no such step; 0 on the
reference run's own rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from hed.errors import ConfigError

KEY = ["run", "step"]
#: The measures every comparison holds, in column order.
BASE_MEASURES = (
    "anthropomorphic_per_1k_tokens",
    "mean_entropy",
    "pass1",
    "pass_at_max_k",
    "max_k",
)


def step_measures(
    summary_by_step: pd.DataFrame,
    pass1_for_figures: pd.DataFrame,
    pass_at_k: pd.DataFrame,
    extra: Mapping[str, pd.DataFrame] | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """One row per (run, step) of ``summary_by_step`` with every measure (module docstring).

    Args:
        summary_by_step: run, step, n_tokens, mean_entropy, n_high_entropy_anthropomorphic.
        pass1_for_figures: run, step, pass1.
        pass_at_k: run, step, k, pass_at_k.
        extra: {prefix: table with run, step and numeric measure columns}; a table with a
            ``subset`` column contributes its ``subset == "all"`` rows.

    Returns:
        (the table: run, step, then the measures; the measure column names in order).
    """
    base = summary_by_step[[*KEY, "n_tokens", "mean_entropy", "n_high_entropy_anthropomorphic"]]
    table = base.assign(
        anthropomorphic_per_1k_tokens=1000.0
        * base["n_high_entropy_anthropomorphic"].astype(float)
        / base["n_tokens"].where(base["n_tokens"] > 0).astype(float)
    )[[*KEY, "anthropomorphic_per_1k_tokens", "mean_entropy"]]
    table = table.merge(pass1_for_figures[[*KEY, "pass1"]], on=KEY, how="left")
    if len(pass_at_k):
        last = pass_at_k.sort_values("k").groupby(KEY, as_index=False).last()
        last = last.rename(columns={"pass_at_k": "pass_at_max_k", "k": "max_k"})
        table = table.merge(last[[*KEY, "pass_at_max_k", "max_k"]], on=KEY, how="left")
    else:
        table = table.assign(pass_at_max_k=np.nan, max_k=np.nan)
    measures = list(BASE_MEASURES)
    for prefix, frame in (extra or {}).items():
        rows = frame[frame["subset"] == "all"] if "subset" in frame.columns else frame
        numeric = [
            c for c in rows.columns if c not in KEY and pd.api.types.is_numeric_dtype(rows[c])
        ]
        renamed = rows[[*KEY, *numeric]].rename(columns={c: f"{prefix}_{c}" for c in numeric})
        table = table.merge(renamed, on=KEY, how="left")
        measures += [f"{prefix}_{c}" for c in numeric]
    return table, measures


def compare_runs(
    measures_table: pd.DataFrame, measures: Sequence[str], reference_run: str
) -> pd.DataFrame:
    """Add ``reference_run`` and ``delta_<m>`` (m − the reference run's m at the same step).

    Args:
        measures_table: run, step and the ``measures`` columns (:func:`step_measures`).
        measures: the measure columns.
        reference_run: a run of the table.

    Returns:
        The table sorted by (run order of appearance, step) with reference_run and one
        delta column per measure after the measures.

    Raises:
        ConfigError: ``reference_run`` is not a run of the table.
    """
    runs = list(dict.fromkeys(measures_table["run"]))
    if reference_run not in runs:
        raise ConfigError(
            f"analyses.reference_run {reference_run!r} is not a run with steps "
            f"(runs: {', '.join(map(str, runs))}); set it to one of them or null"
        )
    reference = measures_table.loc[measures_table["run"] == reference_run, ["step", *measures]]
    joined = measures_table.merge(reference, on="step", how="left", suffixes=("", "__ref"))
    deltas = {
        f"delta_{m}": joined[m].astype(float) - joined[f"{m}__ref"].astype(float) for m in measures
    }
    out = joined[[*KEY, *measures]].assign(reference_run=reference_run, **deltas)
    order = {run: i for i, run in enumerate(runs)}
    out = out.sort_values(["run", "step"], key=lambda s: s.map(order) if s.name == "run" else s)
    return out.reset_index(drop=True)
