"""The mass columns of a new lexicon for existing responses, by teacher-forced re-scoring
(:mod:`hed.decode.mass_refresh`): equal to what generation would have recorded with that
lexicon (same seed, same tokens), every other column kept, the metadata naming the lexicon."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hed.core.lexicon import parse_lexicon
from hed.decode.mass_refresh import refresh_shard
from hed.decode.prompts import PromptRendering
from hed.pipelines.generation.nodes import generate_shard
from hed.records.sequence import MASS_COLUMNS
from hed.records.shard_metadata import GENERATION_METADATA_KEY, lexicon_sha256

OLD = {"anthropomorphic": ["wait"], "reasoning": ["so"]}
NEW = {"anthropomorphic": ["wait", "the", "a"], "reasoning": ["so", "is", "i"]}
GENERATION = {
    "num_shards": 1,
    "samples_per_prompt": 2,
    "temperature": 0.7,
    "max_new_tokens": 6,
    "batch_size": 2,
    "seed": 3,
    "top_prob_k": 2,
    "dtype": "float32",
    "torch_threads": 1,
}


@pytest.fixture(scope="module")
def shards(tmp_path_factory, tokenizer):
    """The same shard generated twice, its mass columns recorded with OLD and with NEW."""
    from ..conftest import build_tiny_model

    model = build_tiny_model(
        tmp_path_factory.mktemp("refresh") / "actor_hf", tokenizer, seed=1, scale=8.0
    )
    prompts = pd.DataFrame(
        {
            "prompt_index": [0, 1],
            "prompt_id": ["p0", "p1"],
            "prompt": ["2+2?", "Is 7 prime?"],
            "answer": ["4", "yes"],
        }
    )
    checkpoints = {"r": {"steps": {"0": {"model_dir": str(model)}}}}

    def generate(lexicon: dict) -> object:
        tables = generate_shard(
            prompts, checkpoints, {}, GENERATION, aggregation={"lexicon": lexicon},
            run="r", step=0, shard=0,
        )  # fmt: skip
        return tables["token_records"]

    return generate(OLD), generate(NEW), prompts, str(model)


def test_the_refreshed_mass_is_what_generation_records_with_the_new_lexicon(shards):
    old, new, prompts, model = shards
    assert old.column("token_id").equals(new.column("token_id"))  # same samples
    refreshed = refresh_shard(old, prompts, model, PromptRendering(), parse_lexicon(NEW))
    for column in MASS_COLUMNS:
        got = refreshed.column(column).to_numpy()
        expected = new.column(column).to_numpy()
        assert not np.allclose(old.column(column).to_numpy(), expected)  # the lexicon matters
        np.testing.assert_allclose(got, expected, atol=2e-6)
    kept = [c for c in old.column_names if c not in MASS_COLUMNS]
    assert refreshed.select(kept).equals(old.select(kept))
    meta = json.loads(refreshed.schema.metadata[GENERATION_METADATA_KEY])
    before = json.loads(old.schema.metadata[GENERATION_METADATA_KEY])
    assert meta["word_mass"] == {
        "lexicon_sha256": lexicon_sha256(parse_lexicon(NEW)),
        "by": "teacher_forced",
    }
    assert {k: v for k, v in meta.items() if k != "word_mass"} == {
        k: v for k, v in before.items() if k != "word_mass"
    }
