"""hed.records.shard_checks without Kedro: key scans, coverage, counts, the folder of a shard.

(The checks on whole shard files written by the pipeline's own writer, with every message:
``tests/pipelines/test_aggregation.py``.)
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from hed.errors import InputDataError
from hed.records.shard_checks import (
    check_response_keys,
    check_shard_count,
    examples,
    non_special_entropies,
    scan_record_keys,
    shard_folder,
)


def keys_dataset(rows: list[tuple[int, int, int]], shard: int = 0) -> ds.Dataset:
    p, s, pos = zip(*rows, strict=True) if rows else ((), (), ())
    return ds.dataset(
        pa.table(
            {
                "prompt_index": pa.array(p, pa.int32()),
                "sample_index": pa.array(s, pa.int16()),
                "position": pa.array(pos, pa.int32()),
                "shard": pa.array([shard] * len(rows), pa.int16()),
            }
        )
    )


def test_shard_folder_of_versioned_and_plain_files():
    root = "/d/data/02_intermediate/token_records/r/step_5"
    versioned = (
        f"{root}/shard_1.sequences.parquet/2026-01-02T03.04.05.678Z/shard_1.sequences.parquet"
    )
    assert shard_folder(versioned) == root
    assert shard_folder(f"{root}/shard_0.parquet") == root


def test_scan_counts_each_response_and_its_first_and_last_position():
    rows = [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (2, 0, 0), (2, 0, 1)]
    found = scan_record_keys(keys_dataset(rows), 0, "s.parquet")
    assert found.to_dict("records") == [
        {"prompt_index": 0, "sample_index": 0, "n_records": 3, "first_position": 0,
         "last_position": 2},
        {"prompt_index": 0, "sample_index": 1, "n_records": 1, "first_position": 0,
         "last_position": 0},
        {"prompt_index": 2, "sample_index": 0, "n_records": 2, "first_position": 0,
         "last_position": 1},
    ]  # fmt: skip


def test_scan_names_a_repeat_and_an_out_of_order_key():
    with pytest.raises(InputDataError, match=r"duplicated token records .*\(0, 0, 1\)"):
        scan_record_keys(keys_dataset([(0, 0, 0), (0, 0, 1), (0, 0, 1)]), 0, "s.parquet")
    with pytest.raises(InputDataError, match=r"\(2, 0, 0\) is followed by \(1, 0, 0\) near row 0"):
        scan_record_keys(keys_dataset([(2, 0, 0), (1, 0, 0)]), 0, "s.parquet")
    with pytest.raises(InputDataError, match="read as shard 1 but its column shard holds 0"):
        scan_record_keys(keys_dataset([(0, 0, 0)]), 1, "s.parquet")


def test_coverage_names_the_missing_response_and_its_shard():
    frame = pd.DataFrame(
        {
            "prompt_index": [0, 0, 1],
            "sample_index": [0, 1, 0],
            "shard": [0, 0, 1],
            "_shard": [0, 0, 1],
        }
    )
    prompts = pd.DataFrame({"prompt_index": [0, 1]})
    with pytest.raises(InputDataError) as exc:
        check_response_keys(
            frame, prompts, num_shards=2, samples=2, sources=["a", "b"], label="r.step_0"
        )
    assert str(exc.value) == (
        "r.step_0: missing responses (prompt_index, sample_index) (1, 1) (1 in all), expected "
        "in shard 1 (b); rerun generation for them"
    )


def test_a_dump_step_needs_no_full_coverage_but_keeps_the_other_checks():
    frame = pd.DataFrame(
        {"prompt_index": [0, 0, 0], "sample_index": [0, 1, 2], "shard": 0, "_shard": 0}
    )
    prompts = pd.DataFrame({"prompt_index": [0, 1]})
    kwargs = {"num_shards": 1, "samples": 2, "sources": ["a"], "label": "r.step_1"}
    check_response_keys(frame, prompts, every_sample=False, **kwargs)  # 3 samples, prompt 1 none
    with pytest.raises(InputDataError, match=r"unexpected responses .*\(0, 2\)"):
        check_response_keys(frame, prompts, **kwargs)
    with pytest.raises(InputDataError, match=r"duplicated responses .*\(0, 1\)"):
        check_response_keys(
            pd.concat([frame, frame.tail(2)]), prompts, every_sample=False, **kwargs
        )


def test_shard_count_and_examples():
    check_shard_count((None, None), 2, "r.step_0", "sequences")  # exactly right: no error
    with pytest.raises(InputDataError, match=r"missing shard\(s\) r.step_0.shard_1.sequences"):
        check_shard_count((None,), 2, "r.step_0", "sequences")
    assert examples([(1, 0), (3, 1)], 2) == "(1, 0), (3, 1) (2 in all)"
    assert examples([(k, 0) for k in range(7)], 7).endswith("(4, 0) … (7 in all)")


def test_non_special_entropies_skip_special_tokens_and_refuse_nan():
    table = pa.table(
        {
            "entropy": pa.array([0.5, 1.5, 2.5], pa.float32()),
            "is_special": [False, True, False],
        }
    )
    entropy = non_special_entropies((ds.dataset(table),), 3, run="r", step=0)
    assert entropy.tolist() == [0.5, 2.5]
    only_special = pa.table({"entropy": pa.array([1.0], pa.float32()), "is_special": [True]})
    with pytest.raises(InputDataError, match="zero non-special token records"):
        non_special_entropies((ds.dataset(only_special),), 1, run="r", step=0)
