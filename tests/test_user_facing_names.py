"""The names users type keep working after the packages by layer: ``--runner
hed.runners.GPURunner`` / ``hed.runners.RayRunner`` in ``kedro run``, and every catalog
``type:`` of every ``conf/`` environment, old spellings (``hed.datasets.*``,
``hed.reference_datasets.*``) included."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from kedro.io import AbstractDataset
from kedro.io.core import parse_dataset_definition
from kedro.utils import load_obj

from .conftest import REPO_ROOT
from .runners.test_runners import PROJECT_FILES, kedro_run

CATALOGS = sorted((REPO_ROOT / "conf").rglob("catalog*.yml"))


def dataset_types(node: Any) -> set[str]:
    """Every ``type:`` in a catalog, nested ones (a PartitionedDataset's ``dataset``) too."""
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("type"), str):
            found.add(node["type"])
        for value in node.values():
            found |= dataset_types(value)
    elif isinstance(node, list):
        for value in node:
            found |= dataset_types(value)
    return found


def test_the_catalogs_of_every_environment_are_found():
    envs = {path.relative_to(REPO_ROOT / "conf").parts[0] for path in CATALOGS}
    assert {"base", "mini_dapo", "qae_repro"} <= envs
    types = set().union(*(dataset_types(yaml.safe_load(p.read_text())) for p in CATALOGS))
    assert {"pandas.CSVDataset", "hed.io.datasets.ArrowParquetDataset"} <= types


@pytest.mark.parametrize("catalog", CATALOGS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_catalog_type_loads(catalog: Path):
    """Each ``type:`` resolves as Kedro resolves it (``parse_dataset_definition``)."""
    for name in sorted(dataset_types(yaml.safe_load(catalog.read_text()))):
        cls, _ = parse_dataset_definition({"type": name})
        assert issubclass(cls, AbstractDataset), name


def test_runner_names_resolve_as_kedro_resolves_them():
    from hed.runners.gpu import GPURunner
    from hed.runners.ray import RayRunner

    assert load_obj("hed.runners.GPURunner", "kedro.runner") is GPURunner
    assert load_obj("hed.runners.RayRunner", "kedro.runner") is RayRunner


def test_kedro_run_with_hed_runners_gpurunner(tmp_path):
    """The small runner project (tests/runners/test_runners.py) through the command users type:
    every node runs, the ``gpu`` nodes in processes of their own."""
    for relative, text in PROJECT_FILES.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    (tmp_path / "data").mkdir()
    args = ["run", "--env", "local", "--runner", "hed.runners.GPURunner"]
    kedro_pid, returncode, output = kedro_run(
        tmp_path, [*args, "--runner-params", "gpus=cpu,cpu_workers=2"]
    )
    assert returncode == 0, output
    good = json.loads((tmp_path / "data/good.json").read_text())
    assert good["pid"] != kedro_pid  # a gpu node: its own process
    assert (tmp_path / "data/after_bad.json").exists()  # the last node of the chain ran
