"""advantage_shaping_by_step on a planted step: hand-computed shares, Cov against numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from hed.analysis.advantage_shaping import (
    AdvantageShapingParams,
    advantage_shaping_params,
    step_advantage_shaping,
    subsets,
)
from hed.core.advantage_shaping import SCHEMES, group_token_advantages
from hed.errors import ConfigError, InputDataError

CATEGORIES = ("anthropomorphic", "reasoning", "other")
TAU = 1.0
# prompt 0: sample 0 correct (3 tokens + EOS), sample 1 incorrect (2 tokens);
# prompt 1: both correct (no outcome to shape); prompt 2: ungraded (left out)
RECORDS = pd.DataFrame(
    [
        # prompt, sample, position, special, entropy, logprob, high, category
        (0, 0, 0, False, 2.0, -1.0, True, "anthropomorphic"),
        (0, 0, 1, False, 0.1, -0.1, False, "reasoning"),
        (0, 0, 2, False, 1.5, -0.5, True, "reasoning"),
        (0, 0, 3, True, 0.0, 0.0, False, "other"),
        (0, 1, 0, False, 1.0, -2.0, True, "other"),
        (0, 1, 1, False, 0.2, -0.3, False, "other"),
        (1, 0, 0, False, 0.5, -0.2, False, "other"),
        (1, 1, 0, False, 3.0, -1.5, True, "anthropomorphic"),
        (2, 0, 0, False, 1.0, -1.0, True, "other"),
    ],
    columns=[
        "prompt_index",
        "sample_index",
        "position",
        "is_special",
        "entropy",
        "logprob",
        "is_high_entropy",
        "category",
    ],
)
SEQUENCES = pd.DataFrame(
    {
        "prompt_index": [0, 0, 1, 1, 2],
        "sample_index": [0, 1, 0, 1, 0],
        "correct": pd.array([True, False, True, True, None], dtype="boolean"),
    }
)


def _dataset(records: pd.DataFrame = RECORDS) -> ds.Dataset:
    return ds.dataset(pa.Table.from_pandas(records, preserve_index=False))


def _table(schemes=SCHEMES, batch_records: int = 65_536) -> pd.DataFrame:
    params = AdvantageShapingParams(schemes=tuple(schemes), batch_records=batch_records)
    return step_advantage_shaping(_dataset(), SEQUENCES, TAU, CATEGORIES, params)


def _row(table, scheme, subset, response="all"):
    chosen = table[
        (table.scheme == scheme) & (table.subset == subset) & (table.response == response)
    ]
    assert len(chosen) == 1
    return chosen.iloc[0]


def test_dr_grpo_shares_mean_and_cov_by_hand():
    table = _table(["dr_grpo"])
    # A = +0.5 (3 tokens), −0.5 (2 tokens), 0 (prompt 1, 2 tokens); Σ|A| = 2.5, N = 7
    assert _row(table, "dr_grpo", "all").n_tokens == 7
    assert _row(table, "dr_grpo", "high_entropy").credit_share == pytest.approx(1.5 / 2.5)
    assert _row(table, "dr_grpo", "other").credit_share == pytest.approx(1.0 / 2.5)
    assert _row(table, "dr_grpo", "high_entropy_anthropomorphic").credit_share == pytest.approx(
        0.5 / 2.5
    )
    assert _row(table, "dr_grpo", "high_entropy_reasoning").credit_share == pytest.approx(0.2)
    assert _row(table, "dr_grpo", "high_entropy", "correct").credit_share == pytest.approx(0.4)
    assert _row(table, "dr_grpo", "high_entropy", "incorrect").credit_share == pytest.approx(0.2)
    assert _row(table, "dr_grpo", "high_entropy", "incorrect").mean_advantage == pytest.approx(-0.5)
    assert _row(table, "dr_grpo", "all").mean_advantage == pytest.approx(0.5 / 7)
    # Ā = 0.5/7, mean log π = −5.6/7 = −0.8; Σ A·log π = 0.5·(−1.6) − 0.5·(−2.3) = 0.35
    # Cov = 0.35/7 − (0.5/7)(−0.8) = 0.75/7
    assert _row(table, "dr_grpo", "all").cov_logp_advantage == pytest.approx(0.75 / 7, rel=1e-12)


def _reference() -> pd.DataFrame:
    """Per-token A of every scheme, from the core formulas, group by group (float64)."""
    graded = SEQUENCES.dropna(subset=["correct"])
    tokens = RECORDS[~RECORDS.is_special].merge(graded, on=["prompt_index", "sample_index"])
    frames = []
    for _, group in tokens.groupby("prompt_index"):
        samples = [s for _, s in group.groupby("sample_index")]
        rewards = np.array([float(s.correct.iloc[0]) for s in samples])
        columns = {}
        for scheme in SCHEMES:
            values = group_token_advantages(
                [s.entropy.to_numpy() for s in samples], rewards, scheme, tau=TAU
            )
            columns[scheme] = np.concatenate(values)
        frames.append(pd.concat(samples).assign(**columns))
    return pd.concat(frames, ignore_index=True)


def test_every_scheme_matches_a_float64_numpy_computation():
    table = _table()
    tokens = _reference()
    for scheme in SCHEMES:
        a, lp = tokens[scheme].to_numpy(), tokens.logprob.to_numpy()
        cov = (a - a.mean()) * (lp - lp.mean())
        parts = {
            "all": np.ones(len(tokens), bool),
            "high_entropy": tokens.is_high_entropy.to_numpy(),
            "other": ~tokens.is_high_entropy.to_numpy(),
            "reasoning": (tokens.category == "reasoning").to_numpy(),
            "high_entropy_anthropomorphic": (
                tokens.is_high_entropy & (tokens.category == "anthropomorphic")
            ).to_numpy(),
        }
        for subset, chosen in parts.items():
            for response, sign in (("correct", True), ("incorrect", False)):
                part = chosen & (tokens.correct.to_numpy() == sign)
                row = _row(table, scheme, subset, response)
                assert row.n_tokens == part.sum()
                if not part.any():
                    assert np.isnan(row.cov_logp_advantage)
                    continue
                assert row.credit_share == pytest.approx(
                    np.abs(a[part]).sum() / np.abs(a).sum(), rel=1e-12
                )
                assert row.mean_advantage == pytest.approx(a[part].mean(), rel=1e-12, abs=1e-15)
                assert row.cov_logp_advantage == pytest.approx(
                    cov[part].mean(), rel=1e-9, abs=1e-15
                ), (scheme, subset, response)
        whole = _row(table, scheme, "all")
        assert whole.cov_logp_advantage == pytest.approx(np.cov(a, lp, ddof=0)[0, 1], rel=1e-9)


def test_shares_sum_to_one_over_partitions():
    table = _table()
    for scheme in SCHEMES:
        share = {
            (s, r): _row(table, scheme, s, r).credit_share
            for s in ("high_entropy", "other", "anthropomorphic", "reasoning")
            for r in ("correct", "incorrect")
        }
        assert sum(share[(s, r)] for s in ("high_entropy", "other") for r in (
            "correct", "incorrect"
        )) == pytest.approx(1.0, rel=1e-12)  # fmt: skip
        assert _row(table, scheme, "all").credit_share == pytest.approx(1.0, rel=1e-12)


def test_batches_cut_inside_a_prompt_give_the_same_table():
    whole, tiny = _table(), _table(batch_records=1)
    pd.testing.assert_frame_equal(whole, tiny, rtol=1e-12)
    assert list(whole.subset.unique()) == subsets(CATEGORIES)
    assert len(whole) == len(SCHEMES) * len(subsets(CATEGORIES)) * 3


def test_unsorted_records_and_bad_parameters():
    shuffled = RECORDS.iloc[[4, 0, 1, 2, 3, 5, 6, 7, 8]]
    with pytest.raises(InputDataError, match="not sorted by"):
        step_advantage_shaping(
            _dataset(shuffled), SEQUENCES, TAU, CATEGORIES, AdvantageShapingParams()
        )
    for bad, key in (
        ({"alpha": 0}, "alpha"),
        ({"kappa": 0.5}, "kappa"),
        ({"schemes": ["gtpo", "ppo"]}, "schemes"),
        ({"schemes": []}, "schemes"),
    ):
        with pytest.raises(ConfigError, match=rf"^analyses\.advantage_shaping\.{key}") as caught:
            advantage_shaping_params({"advantage_shaping": bad})
        assert "\n" not in str(caught.value)
    parsed = advantage_shaping_params({"advantage_shaping": {"alpha": 0.1}})
    assert (parsed.alpha, parsed.kappa, parsed.schemes) == (0.1, 2.0, SCHEMES)
    assert advantage_shaping_params(None) == AdvantageShapingParams()
