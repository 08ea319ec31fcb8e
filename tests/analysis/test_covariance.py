"""Cov(log π, A) over a step's tokens (Clip-Cov band, KL-Cov top tokens), streamed in batches."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from hed.analysis.covariance import CovarianceSettings, kl_cov_count, step_covariance
from hed.config.analysis_params import DynamicsParams
from hed.core.advantage import response_advantages
from hed.errors import ConfigError, InputDataError
from hed.records.response_index import ResponseIndex

from ..dynamics_reference import (
    CATEGORIES,
    RESPONSES,
    random_step,
    reference_covariance,
    write_step,
)


def run_covariance(records_ds, sequences, estimators=("grpo", "dr_grpo"), **settings):
    graded = response_advantages(sequences, estimators)
    keyed = sequences[["prompt_index", "sample_index"]].astype("int64")
    values = keyed.merge(graded, on=["prompt_index", "sample_index"], how="left")
    matrix = values[[f"advantage_{e}" for e in estimators]].to_numpy(np.float64)
    index = ResponseIndex(sequences["prompt_index"], sequences["sample_index"], "sequences")
    return step_covariance(records_ds, index, matrix, CATEGORIES, CovarianceSettings(**settings))


def test_known_values(tmp_path):
    """Dr. GRPO: prompt 0 rewards (1, 0) → A = ±0.5; prompt 1 one correct sample → A = 1.

    Tokens (log π): (0,0): −0.5, −1.5; (0,1): −3, −3; (1,0): −2. Ā = (0.5·2 − 0.5·2 + 1)/5
    = 0.2 and mean log π = −2, so cov = 0.45, 0.15, 0.7, 0.7, 0 and mean cov = 0.4.
    """
    records, sequences = random_step([(0, 0, True), (0, 1, False), (1, 0, True)])
    lengths = {(0, 0): [-0.5, -1.5], (0, 1): [-3.0, -3.0], (1, 0): [-2.0]}
    rows = []
    for (p, s), logprobs in lengths.items():
        template = records[(records.prompt_index == p) & (records.sample_index == s)].iloc[0]
        for position, lp in enumerate([*logprobs, -0.01]):
            rows.append(template.to_dict() | {"position": position, "logprob": lp,
                                              "is_special": position == len(logprobs)})  # fmt: skip
    records = pd.DataFrame(rows)
    records_ds, _ = write_step(tmp_path, records, sequences)
    [result] = run_covariance(records_ds, sequences, ("dr_grpo",), kl_cov_ratio=0.5)
    row = result.row
    assert row["n_tokens"] == 5
    assert row["mean_advantage"] == pytest.approx(0.2, abs=1e-15)
    assert row["mean_logprob"] == pytest.approx(-2.0, abs=1e-15)
    assert row["mean_cov"] == pytest.approx(0.4, abs=1e-15)
    assert row["clip_cov_band_share"] == 0.0
    assert row["kl_cov_k"] == 2 and row["kl_cov_min"] == pytest.approx(0.7, abs=1e-15)
    top = result.top_tokens
    assert top[["prompt_index", "sample_index", "position"]].values.tolist() == [
        [0, 1, 0],
        [0, 1, 1],
    ]
    assert top["advantage"].tolist() == [-0.5, -0.5] and top["rank"].tolist() == [1, 2]


@pytest.mark.parametrize("batch_records", [3, 1000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_independent_numpy(tmp_path, batch_records, seed):
    records, sequences = random_step(RESPONSES, seed=seed)
    records_ds, _ = write_step(tmp_path, records, sequences)
    results = run_covariance(
        records_ds, sequences, kl_cov_ratio=0.1, clip_cov_band=(0.05, 0.9),
        batch_records=batch_records,
    )  # fmt: skip
    for estimator, result in zip(("grpo", "dr_grpo"), results, strict=True):
        expected, top = reference_covariance(
            records, sequences, estimator, CATEGORIES, kl_ratio=0.1, band=(0.05, 0.9)
        )
        for key, value in result.row.items():
            if isinstance(value, float) and math.isnan(value):
                assert math.isnan(expected[key]), key
            else:
                assert value == pytest.approx(expected[key], rel=1e-12, abs=1e-12), key
        assert 0 < expected["clip_cov_band_share"] < 1  # the band is exercised
        got = result.top_tokens
        keys = ["prompt_index", "sample_index", "position"]
        assert got[keys].values.tolist() == top[keys].values.tolist()
        np.testing.assert_allclose(got["cov"], top["cov"], rtol=0, atol=1e-12)
        assert got["word"].tolist() == top["word"].tolist()
        assert got["category"].tolist() == top["category"].tolist()
        assert got["token_text"].tolist() == top["token_text"].tolist()
        np.testing.assert_array_equal(got["entropy"], top["entropy"].to_numpy(np.float64))


def test_kl_cov_count_is_verls():
    assert kl_cov_count(0, 0.002) == 0
    assert kl_cov_count(499, 0.002) == 1  # max(1, int(0.998))
    assert kl_cov_count(50_000_000, 0.002) == 100_000
    assert kl_cov_count(1501, 0.002) == 3


def test_record_of_unknown_response_is_named(tmp_path):
    records, sequences = random_step(RESPONSES)
    records_ds, _ = write_step(tmp_path, records, sequences)
    with pytest.raises(InputDataError, match=r"prompt_index=6, sample_index=2\), which is not in"):
        run_covariance(records_ds, sequences.iloc[:-1])


def test_category_outside_lexicon_is_named(tmp_path):
    records, sequences = random_step(RESPONSES)
    records.loc[3, "category"] = "hedging"
    records.loc[3, "is_special"] = False
    records_ds, _ = write_step(tmp_path, records, sequences)
    with pytest.raises(InputDataError, match="category 'hedging' is not one of the lexicon"):
        run_covariance(records_ds, sequences)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"kl_cov_ratio": 0}, "kl_cov_ratio"),
        ({"clip_cov_band": [5, 1]}, "clip_cov_band"),
        ({"batch_records": "many"}, "batch_records"),
    ],
)
def test_bad_settings(params, match):
    """The covariance settings are keys of ``dynamics`` (one model: DynamicsParams)."""
    with pytest.raises(ConfigError, match=rf"^dynamics\.{match} ") as caught:
        DynamicsParams.of(params)
    assert "\n" not in str(caught.value)


def test_row_group_batches_read_row_groups_in_order_and_in_memory_datasets_too(tmp_path):
    import pyarrow as pa
    import pyarrow.dataset as ds

    from hed.records.arrow_stream import row_group_batches

    records, sequences = random_step(RESPONSES, seed=3)
    records_ds, _ = write_step(tmp_path, records, sequences)  # row groups of 7 records
    columns = ["prompt_index", "sample_index", "position", "logprob"]
    batches = list(row_group_batches(records_ds, columns, 3))
    assert max(b.num_rows for b in batches) == 3
    streamed = pa.Table.from_batches(batches).to_pandas()
    pd.testing.assert_frame_equal(streamed, records[columns].astype(streamed.dtypes))
    memory = ds.dataset(records_ds.to_table())  # not file-based: read with to_batches
    from_file = run_covariance(records_ds, sequences, batch_records=4)
    from_memory = run_covariance(memory, sequences, batch_records=4)
    for a, b in zip(from_file, from_memory, strict=True):
        assert a.row == pytest.approx(b.row, nan_ok=True)
        pd.testing.assert_frame_equal(a.top_tokens, b.top_tokens)
