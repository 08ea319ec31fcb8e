"""The catalog of every environment: each dataset and pattern resolves and sits in its layer.

A pattern (``"{run}.step_{step}.shard_{shard}.token_records"``) is resolved with a sample
name, so a typo in a placeholder or a path that does not take the placeholder fails here, not
in the first real run. Layers are the kedro-viz layers HED uses, and a dataset's file must
lie in that layer's data folder (``data/02_intermediate/...`` for ``intermediate``).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import pytest
from kedro.config import OmegaConfigLoader
from kedro.io import DataCatalog

from ..conftest import REPO_ROOT

ENVIRONMENTS = ["base", "mini_dapo", "qae_repro"]
#: kedro-viz layer → the data folder its files live in (``results/`` is for published copies).
LAYER_FOLDERS = {
    "raw": "01_raw",
    "intermediate": "02_intermediate",
    "primary": "03_primary",
    "feature": "04_feature",
    "reporting": "08_reporting",
}
PUBLISHED = "results"  # final_artifacts: copies of the reporting layer, tracked by git
SAMPLE = {"run": "dapo", "step": "80", "shard": "3"}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def catalog_config(env: str) -> dict:
    loader = OmegaConfigLoader(
        str(REPO_ROOT / "conf"), base_env="base", default_run_env="local", env=env
    )
    return loader["catalog"]


def sample_name(pattern: str) -> str:
    """``{run}.step_{step}`` → ``dapo.step_80`` (every placeholder HED uses has a sample)."""
    return _PLACEHOLDER.sub(lambda m: SAMPLE[m.group(1)], pattern)


def entries(env: str) -> list[tuple[str, str]]:
    """(catalog key, the dataset name that resolves it) for every entry but templates."""
    return [(key, sample_name(key)) for key in catalog_config(env) if not key.startswith("_")]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_dataset_and_pattern_resolves_in_an_allowed_layer(env):
    catalog = DataCatalog.from_config(catalog_config(env))
    found = entries(env)
    assert len(found) >= (3 if env != "base" else 25)
    for key, name in found:
        dataset = catalog.get(name)
        assert dataset is not None, f"{env}: {key} does not resolve {name}"
        layer = (dataset.metadata or {}).get("kedro-viz", {}).get("layer")
        assert layer in LAYER_FOLDERS, f"{env}: {key} has layer {layer!r}"
        filepath = PurePosixPath(str(dataset._describe()["filepath"]))
        parts = filepath.parts
        if PUBLISHED in parts and layer == "reporting":
            continue
        assert LAYER_FOLDERS[layer] in parts, f"{env}: {key} ({layer}) is written to {filepath}"
        # the placeholders reach the path: two steps never share a file
        for placeholder in _PLACEHOLDER.findall(key):
            assert SAMPLE[placeholder] in str(filepath), f"{env}: {key} → {filepath}"


def test_a_sample_pattern_name_resolves_to_its_own_file():
    catalog = DataCatalog.from_config(catalog_config("base"))
    path = catalog.get("dapo.step_80.shard_3.token_records")._describe()["filepath"]
    assert str(path).endswith("data/02_intermediate/token_records/dapo/step_80/shard_3.parquet")
    assert catalog.get("not_a_dataset_of_hed") is None
