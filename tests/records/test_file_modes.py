"""Files HED writes atomically get the mode a plain ``open()`` gives: ``0o666 & ~umask``.

A temporary file made by ``tempfile.mkstemp`` is 0600 whatever the umask; renamed onto the
target it left every shard, table, figure and published file unreadable to a study's group.
Each test sets the process umask (restored afterwards) and writes through the real path a run
takes: a Kedro catalog's datasets after ``AtomicWritesHooks``, HED's own Parquet dataset,
``atomic_path`` and the publish step's copies.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile

import pandas as pd
import pyarrow as pa
import pytest
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline, node

from hed.hooks import AtomicWritesHooks
from hed.io.datasets import ArrowParquetDataset
from hed.io.publishing import GITATTRIBUTES, MANIFEST, publish
from hed.records.atomic_io import (
    AtomicLocalFileSystem,
    atomic_folder,
    atomic_path,
    new_temporary,
)


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def files_under(folder) -> list:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_a_catalogs_datasets_written_through_the_hook_follow_the_umask(tmp_path, umask):
    catalog = DataCatalog.from_config(
        {
            "summary_by_step": {
                "type": "pandas.CSVDataset",
                "filepath": str(tmp_path / "04_feature" / "summary_by_step.csv"),
                "versioned": True,
            },
            "resolved_config": {
                "type": "json.JSONDataset",
                "filepath": str(tmp_path / "08_reporting" / "resolved_config.json"),
            },
            "token_records": {
                "type": "hed.io.datasets.ArrowParquetDataset",
                "filepath": str(tmp_path / "03_primary" / "step_0.parquet"),
            },
        }
    )
    pipeline = Pipeline(
        [node(lambda: None, None, ["summary_by_step", "resolved_config", "token_records"])]
    )
    AtomicWritesHooks().before_pipeline_run({}, pipeline, catalog)
    summary = catalog.get("summary_by_step")
    assert isinstance(summary._fs, AtomicLocalFileSystem)  # the run's own filesystem
    catalog.save("summary_by_step", pd.DataFrame({"step": [0, 10], "mean_entropy": [0.5, 0.4]}))
    catalog.save("resolved_config", {"parameters": {"top_entropy_frac": 0.2}})
    catalog.save("token_records", pa.table({"entropy": [0.1, 0.2]}))
    written = files_under(tmp_path)
    assert len(written) == 3  # no temporary left
    assert {p.name: mode(p) for p in written} == {
        "summary_by_step.csv": 0o666 & ~umask,
        "resolved_config.json": 0o666 & ~umask,
        "step_0.parquet": 0o666 & ~umask,
    }
    assert catalog.load("resolved_config") == {"parameters": {"top_entropy_frac": 0.2}}


def test_atomic_path_and_its_temporary_match_a_plain_open(tmp_path, umask):
    with open(tmp_path / "plain.txt", "w") as handle:  # what the umask gives
        handle.write("x")
    expected = mode(tmp_path / "plain.txt")
    assert expected == 0o666 & ~umask
    assert mode(new_temporary(tmp_path / "shard_0.parquet")) == expected
    with atomic_path(tmp_path / "MANIFEST.json") as temp:
        temp.write_text("{}")
    assert mode(tmp_path / "MANIFEST.json") == expected
    ArrowParquetDataset(filepath=str(tmp_path / "records.parquet")).save(pa.table({"a": [1]}))
    assert mode(tmp_path / "records.parquet") == expected


def test_published_files_follow_the_umask(tmp_path, umask):
    project = tmp_path / "project"
    sources = {
        "figure2_paper_reproduction.csv": "run,step,pass1\nrun_a,10,0.25\n",
        "resolved_config.json": json.dumps({"env": "s1"}),
    }
    files = {}
    for name, text in sources.items():
        path = project / "data" / "s1" / "08_reporting" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files[name] = {"dataset": name.split(".")[0], "path": str(path), "version": None}
    root = project / "results" / "final_artifacts"
    publish({"env": "s1", "project_path": str(project), "files": files}, root)
    published = files_under(root / "s1")
    names = {p.name for p in published}
    assert names == {*sources, MANIFEST, GITATTRIBUTES}
    assert {p.name: mode(p) for p in published} == dict.fromkeys(names, 0o666 & ~umask)
    assert (root / "s1" / "figure2_paper_reproduction.csv").read_text() == sources[
        "figure2_paper_reproduction.csv"
    ]


def test_a_model_folders_files_follow_the_umask_whatever_the_library_wrote(tmp_path, umask):
    # safetensors writes model.safetensors 0600 (seen in the demo's embedded checkpoint)
    target = tmp_path / "global_step_0" / "actor_hf"
    with atomic_folder(target) as temp:
        (temp / "config.json").write_text("{}")
        fd, weights = tempfile.mkstemp(dir=temp)  # 0600, as that library leaves it
        os.write(fd, b"weights")
        os.close(fd)
        os.rename(weights, temp / "model.safetensors")
    assert {p.name: mode(p) for p in target.iterdir()} == {
        "config.json": 0o666 & ~umask,
        "model.safetensors": 0o666 & ~umask,
    }
    assert mode(target) == 0o755  # folders as before
    assert (target / "model.safetensors").read_bytes() == b"weights"
