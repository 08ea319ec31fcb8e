"""Outcome advantages of a step's responses from their graded ``correct`` values.

The reward of a response is r = 1 if it is correct, else 0; the group of a response is every
sample of its prompt (same ``prompt_index``) at that step. Two estimators, as verl computes
them in ``verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage`` (volcengine/verl,
commit b178a3c):

* ``grpo`` (``norm_adv_by_std_in_grpo=True``, Shao et al., arXiv 2402.03300):
  A = (r − mean_g r) / (std_g r + ε), with ``torch.std``'s unbiased (n − 1) standard
  deviation and ε = 1e-6;
* ``dr_grpo`` (``norm_adv_by_std_in_grpo=False``, Liu et al., arXiv 2503.20783):
  A = r − mean_g r.

A group of one sample takes verl's convention: mean 0 and std 1, so A = r / (1 + ε) (GRPO)
or A = r (Dr. GRPO). A group whose rewards are all equal (all correct or all wrong, two or
more samples) has A = 0 exactly under both estimators. Every token of a response carries its
response's A.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hed.errors import ConfigError, InputDataError

#: The estimators HED computes, in table order.
ESTIMATORS = ("grpo", "dr_grpo")
#: verl's default ε of ``compute_grpo_outcome_advantage``.
DEFAULT_EPSILON = 1e-6


def check_estimators(estimators: object) -> tuple[str, ...]:
    """Validate a list of estimator names (``dynamics.estimators``).

    Raises:
        ConfigError: not a non-empty list of distinct names from :data:`ESTIMATORS`.
    """
    if isinstance(estimators, str):
        estimators = [estimators]
    if (
        not isinstance(estimators, list | tuple)
        or not estimators
        or any(e not in ESTIMATORS for e in estimators)
        or len(set(estimators)) != len(estimators)
    ):
        raise ConfigError(
            f"dynamics.estimators must be a list of distinct names from {list(ESTIMATORS)}, "
            f"got {estimators!r}"
        )
    return tuple(str(e) for e in estimators)


def group_advantages(
    group: np.ndarray,
    reward: np.ndarray,
    estimator: str = "grpo",
    epsilon: float = DEFAULT_EPSILON,
) -> np.ndarray:
    """Outcome advantage of each response within its group (verl's formula, in float64).

    Args:
        group: (n,) integer group id of each response (the ``prompt_index``).
        reward: (n,) reward of each response (0/1 for graded math answers; any finite float).
        estimator: ``grpo`` (A = (r − mean)/(std + ε), unbiased std) or ``dr_grpo``
            (A = r − mean). A one-sample group has mean 0 and std 1 (verl).
        epsilon: ε of the GRPO denominator (verl's default 1e-6).

    Returns:
        (n,) float64 advantages, in the input order.

    Raises:
        ConfigError: an unknown estimator.
        InputDataError: ``group`` and ``reward`` differ in length, or a reward is not finite.
    """
    if estimator not in ESTIMATORS:
        raise ConfigError(f"advantage estimator {estimator!r}: use one of {list(ESTIMATORS)}")
    group = np.asarray(group)
    reward = np.asarray(reward, dtype=np.float64)
    if group.shape != reward.shape or group.ndim != 1:
        raise InputDataError(
            f"advantages: {group.shape[0] if group.ndim else 0} group ids for "
            f"{reward.shape[0] if reward.ndim else 0} rewards; give one group id per response"
        )
    if not np.isfinite(reward).all():
        raise InputDataError("advantages: a reward is NaN or infinite; grade every response")
    if reward.size == 0:
        return reward.copy()
    _, inverse, size = np.unique(group, return_inverse=True, return_counts=True)
    total = np.bincount(inverse, weights=reward)
    mean = total / size
    deviation = reward - mean[inverse]
    square = np.bincount(inverse, weights=deviation * deviation)
    # torch.std is unbiased (Bessel's n − 1); verl sets mean 0, std 1 for one-sample groups
    std = np.sqrt(square / np.maximum(size - 1, 1))
    single = size == 1
    mean = np.where(single, 0.0, mean)
    std = np.where(single, 1.0, std)
    centred = reward - mean[inverse]
    if estimator == "dr_grpo":
        return centred
    return centred / (std[inverse] + epsilon)


def response_advantages(
    sequences: pd.DataFrame,
    estimators: tuple[str, ...] = ESTIMATORS,
    epsilon: float = DEFAULT_EPSILON,
) -> pd.DataFrame:
    """Rewards and advantages of a step's graded responses.

    Responses whose ``correct`` is null (their prompt has no reference answer) are left out:
    they have no reward, and their prompt's other samples are ungraded too.

    Args:
        sequences: one row per response with prompt_index, sample_index, correct (nullable
            bool), as in ``<run>.step_<step>.sequences``.
        estimators: names from :data:`ESTIMATORS`.
        epsilon: ε of the GRPO denominator.

    Returns:
        One row per graded response, in (prompt_index, sample_index) order: prompt_index
        (int64), sample_index (int64), reward (float64, 0/1), group_size (int64),
        all_equal (bool: the group has two or more samples, all with the same reward),
        zero_advantage (bool: A = 0, the same under both estimators), then one float64
        column ``advantage_<estimator>`` per estimator.

    Raises:
        InputDataError: a column is missing or a (prompt_index, sample_index) repeats.
    """
    missing = [c for c in ("prompt_index", "sample_index", "correct") if c not in sequences]
    if missing:
        raise InputDataError(
            f"sequences lack column(s) {', '.join(missing)}: rerun the aggregation of the step"
        )
    graded = sequences.loc[sequences["correct"].notna(), ["prompt_index", "sample_index"]]
    reward = sequences.loc[graded.index, "correct"].astype(bool).to_numpy(dtype=np.float64)
    table = graded.astype("int64").assign(reward=reward).reset_index(drop=True)
    if table.duplicated(["prompt_index", "sample_index"]).any():
        first = table[table.duplicated(["prompt_index", "sample_index"])].iloc[0]
        raise InputDataError(
            f"sequences hold response (prompt_index={first.prompt_index}, "
            f"sample_index={first.sample_index}) twice: rerun the aggregation of the step"
        )
    table = table.sort_values(["prompt_index", "sample_index"], kind="stable")
    table = table.reset_index(drop=True)
    group = table["prompt_index"].to_numpy()
    grouped = table.groupby("prompt_index")["reward"]
    size = grouped.transform("size").to_numpy(dtype=np.int64)
    spread = (grouped.transform("max") - grouped.transform("min")).to_numpy()
    columns = {
        "group_size": size,
        "all_equal": (size >= 2) & (spread == 0),
    }
    for estimator in estimators:
        columns[f"advantage_{estimator}"] = group_advantages(
            group, table["reward"].to_numpy(), estimator, epsilon
        )
    table = table.assign(**columns)
    table.insert(
        table.columns.get_loc("all_equal") + 1,
        "zero_advantage",
        group_advantages(group, table["reward"].to_numpy(), "dr_grpo") == 0,
    )
    return table
