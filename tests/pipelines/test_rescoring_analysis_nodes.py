"""The rescoring pipeline's research nodes read ``params:analyses`` parsed or raw alike."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from hed.config.analysis_params import analyses_params
from hed.pipelines.rescoring import analysis_nodes as nodes

N = 60
ANALYSES = {"mismatch": {"ratio_bounds": [0.9, 1.1]}, "delta_logprob": {"top_n": 2,
            "min_count": 3}, "dpi": 30}  # fmt: skip


def _key(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "prompt_index": np.repeat(np.arange(3), N // 3).astype(np.int64),
        "sample_index": np.zeros(N, dtype=np.int64),
        "position": np.tile(np.arange(N // 3), 3).astype(np.int64),
        "token_id": rng.integers(0, 50, N).astype(np.int64),
    }


def records(seed: int = 0) -> ds.Dataset:
    rng = np.random.default_rng(seed)
    return ds.dataset(
        pa.table(
            {
                **_key(rng),
                "logprob": -rng.uniform(0, 3, N).astype(np.float32),
                "is_special": rng.random(N) < 0.1,
                "is_high_entropy": rng.random(N) < 0.3,
                "category": rng.choice(["anthropomorphic", "reasoning", "other"], N),
                "word": rng.choice(["maybe", "so", "thus", "we"], N),
            }
        )
    )


def rescored(seed: int, shift: int) -> ds.Dataset:
    key = _key(np.random.default_rng(0))  # the same positions and tokens as ``records``
    logprob = -np.random.default_rng(seed + shift).uniform(0, 3, N).astype(np.float32)
    return ds.dataset(pa.table({**key, "logprob": logprob, "is_special": np.zeros(N, bool)}))


def test_mismatch_and_delta_logprob_are_the_same_from_the_dict_and_the_parsed_section():
    parsed = analyses_params(ANALYSES)
    merged, own = records(), rescored(0, 1)
    tables = [
        nodes.tabulate_sampler_trainer_mismatch(source, merged, own, run="r", step=4)
        for source in (ANALYSES, parsed)
    ]
    pd.testing.assert_frame_equal(*tables)
    assert set(tables[0]["ratio_low"]) == {0.9} and set(tables[0]["ratio_high"]) == {1.1}

    shards = [rescored(0, shift) for shift in (0, 1, 2)]
    delta = [
        nodes.tabulate_delta_logprob(
            source, merged, *shards, run="r", steps=[0, 4, 8], num_shards=1, with_records=True
        )
        for source in (ANALYSES, parsed)
    ]
    for raw, typed in zip(*delta, strict=True):
        pd.testing.assert_frame_equal(raw, typed)
    by_step, top = delta[0]
    assert by_step["step"].unique().tolist() == [0, 4, 8]
    assert top.groupby("direction").size().max() <= 2  # delta_logprob.top_n
    for source in (ANALYSES, parsed):
        assert nodes.plot_delta_logprob_png(by_step, source).dpi == 30
        assert nodes.plot_sampler_trainer_mismatch_png(tables[0], source).dpi == 30
