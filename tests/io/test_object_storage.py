"""The demo chain with its data root on an S3-compatible server (moto, on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from kedro.framework.project import configure_project, pipelines
from kedro.framework.session import KedroSession

from hed.records.object_store import make_dataset_writes_atomic
from hed.runners.ray import RayRunner
from tests.project_copy import (
    GPU_RUNNER_GENERATION,
    MERGED_FOLDER,
    NUM_SHARDS,
    REPO_ROOT,
    RUN,
    run_kedro,
    run_kedro_cli,
    shard_paths,
    small_step_project,
    versions,
    wait_for,
)
from tests.ray_cluster import local_cluster
from tests.s3_server import BUCKET, moto_s3, s3

pytestmark = pytest.mark.ray  # one Ray cluster at a time (tests/conftest.py)

ENV = "s3_demo"


@pytest.fixture(scope="module")
def s3_server():
    with moto_s3() as endpoint:
        yield endpoint


def write_object_store_env(project: Path, root: str) -> dict[str, str]:
    """Write ``conf/<ENV>/``: ``globals.yml`` with ``data_root: <root>/data`` (every dataset of
    base moves there, as docs/ray.md says) and a catalog that reads the prompt file from
    there too (base's demo prompt file is a fixed local path).

    Returns:
        catalog name → the URL it now has.
    """
    from kedro.config import OmegaConfigLoader

    (project / "conf" / ENV).mkdir()
    (project / "conf" / ENV / "globals.yml").write_text(f"data_root: {root}/data\n")
    base = yaml.safe_load((project / "conf/base/catalog.yml").read_text())
    prompts = {**base["raw_prompts"], "filepath": f"{root}/data/01_raw/prompts/demo_math.jsonl"}
    (project / "conf" / ENV / "catalog.yml").write_text(
        yaml.safe_dump({"raw_prompts": prompts}, sort_keys=False)
    )
    loader = OmegaConfigLoader(
        str(project / "conf"), base_env="base", default_run_env="local", env=ENV
    )
    return {
        name: entry["filepath"]
        for name, entry in loader["catalog"].items()
        if not name.startswith("_") and "filepath" in entry
    }


def object_store_project(dest: Path, smollm2_dir: Path, prefix: str) -> tuple[Path, dict]:
    """A small-step project copy whose ``ENV`` puts every dataset under
    ``s3://<BUCKET>/<prefix>``, with the prompt file moved there (only the object remains).

    Returns:
        ``(project, urls)``: urls as :func:`write_object_store_env` returns them.
    """
    project = small_step_project(dest, smollm2_dir)
    urls = write_object_store_env(project, f"s3://{BUCKET}/{prefix}")
    s3().put_file(
        str(project / "data/01_raw/prompts/demo_math.jsonl"),
        f"{BUCKET}/{prefix}/data/01_raw/prompts/demo_math.jsonl",
    )
    os.remove(project / "data/01_raw/prompts/demo_math.jsonl")
    return project, urls


@pytest.fixture(scope="module")
def s3_chain(s3_server, tmp_path_factory, smollm2_dir):
    """The whole demo chain (small step) run with every dataset under s3://hed-test/chain."""
    project, urls = object_store_project(tmp_path_factory.mktemp("s3_chain"), smollm2_dir, "chain")
    run_kedro(project, env=ENV)
    return project, urls, sorted(s3().find(f"{BUCKET}/chain"))


def _versions(objects: list[str], url: str) -> list[str]:
    """Objects that are versions of the versioned dataset at ``url`` (oldest first)."""
    bare = url.removeprefix("s3://")
    name = bare.rsplit("/", 1)[1]
    return [o for o in objects if o.startswith(bare + "/") and o.endswith("/" + name)]


#: What the chain writes (versioned datasets: a folder of ``<version>/<file name>``).
CHAIN_OUTPUTS = [
    *(
        f"data/02_intermediate/token_records/{RUN}/step_0/shard_{k}{kind}.parquet"
        for k in range(NUM_SHARDS)
        for kind in ("", ".sequences")
    ),
    "data/02_intermediate/prompts.parquet",
    "data/02_intermediate/checkpoints.json",
    f"{MERGED_FOLDER}/step_0.parquet",
    f"{MERGED_FOLDER}/step_0.sequences.parquet",
    "data/04_feature/entropy_thresholds.csv",
    "data/04_feature/summary_by_step.csv",
    "data/04_feature/high_entropy_positions.parquet",
    "data/04_feature/pass1.csv",
    "data/08_reporting/tables/figure2_single_run_diagnostic.csv",
    "data/08_reporting/tables/figure3_high_entropy_token_probability.csv",
    "data/08_reporting/figures/figure2_anthropomorphic_high_entropy_vs_pass1.png",
    "data/08_reporting/figures/figure3_high_entropy_token_probability.png",
    "data/08_reporting/metadata/resolved_config.json",
]


@pytest.mark.slow
def test_records_tables_and_figures_land_on_the_object_store(s3_chain, uninterrupted_small_step):
    project, _, objects = s3_chain
    for relative in CHAIN_OUTPUTS:
        assert len(_versions(objects, f"s3://{BUCKET}/chain/{relative}")) == 1, relative
    # nothing of the chain was written to the local disk
    for layer in ("02_intermediate", "03_primary", "04_feature", "08_reporting"):
        assert not (project / "data" / layer).exists(), layer
    # the records equal those of the same step run on the local disk
    local_project, _ = uninterrupted_small_step
    fs = s3()
    for k in range(NUM_SHARDS):
        for local in shard_paths(local_project, k):
            (local_file,) = versions(local)
            relative = local_file.parent.parent.relative_to(local_project).as_posix()
            (remote,) = [o for o in objects if o.startswith(f"{BUCKET}/chain/{relative}/")]
            # the same writer, the same bytes: the object store changes nothing in the file
            assert fs.cat(remote) == local_file.read_bytes(), remote


def assert_shards_on_the_object_store(prefix: str, local_project: Path) -> None:
    """Each shard file of the step has one object under ``prefix``, with the bytes of the same
    shard run with SequentialRunner on the local disk."""
    fs = s3()
    objects = sorted(fs.find(f"{BUCKET}/{prefix}"))
    for k in range(NUM_SHARDS):
        for local in shard_paths(local_project, k):
            (local_file,) = versions(local)
            relative = local_file.parent.parent.relative_to(local_project).as_posix()
            (remote,) = [o for o in objects if o.startswith(f"{BUCKET}/{prefix}/{relative}/")]
            assert fs.cat(remote) == local_file.read_bytes(), remote


@pytest.mark.slow
def test_gpu_runner_writes_the_shards_of_its_node_processes_to_the_object_store(
    s3_server, tmp_path, smollm2_dir, uninterrupted_small_step
):
    # each generate_shard node runs in a spawned process: its task, with datasets on s3://,
    # is pickled there (hed.runners.process.pickle_task)
    project, _ = object_store_project(tmp_path, smollm2_dir, "gpu_runner")
    result = run_kedro_cli(project, *GPU_RUNNER_GENERATION, "--env", ENV, timeout=600)
    output = result.stdout + result.stderr
    assert output.count("done on CPU worker") == NUM_SHARDS, output[-3000:]
    assert not (project / "data" / "02_intermediate").exists()
    assert_shards_on_the_object_store("gpu_runner", uninterrupted_small_step[0])


@pytest.mark.slow
def test_ray_runner_writes_the_shards_of_its_tasks_to_the_object_store(
    s3_server, tmp_path, smollm2_dir, uninterrupted_small_step
):
    # the cluster starts after the S3 server: its workers inherit AWS_ENDPOINT_URL
    project, _ = object_store_project(tmp_path, smollm2_dir, "ray_runner")
    configure_project("hed")
    pipelines.configure("hed.pipeline_registry")
    runner = RayRunner()
    with (
        local_cluster(),
        contextlib.chdir(project),
        KedroSession.create(project_path=project, env=ENV) as session,
    ):
        session.run(pipeline_names=["generation"], runner=runner)
    generated = [f"{RUN}.step_0.shard_{k}.generate_shard" for k in range(NUM_SHARDS)]
    assert sorted(runner.placements) == generated  # each one a Ray task
    assert not (project / "data" / "02_intermediate").exists()
    assert_shards_on_the_object_store("ray_runner", uninterrupted_small_step[0])


def test_reporting_replots_from_the_object_store(s3_chain):
    project, _, before = s3_chain
    figure3_table = (
        f"s3://{BUCKET}/chain/data/08_reporting/tables/figure3_high_entropy_token_probability.csv"
    )
    figure3_png = (
        f"s3://{BUCKET}/chain/data/08_reporting/figures/figure3_high_entropy_token_probability.png"
    )
    run_kedro(project, "reporting", env=ENV)
    after = sorted(s3().find(f"{BUCKET}/chain"))
    fs = s3()
    tables = [fs.cat(o) for o in _versions(after, figure3_table)]
    pngs = [fs.cat(o) for o in _versions(after, figure3_png)]
    assert len(tables) == len(pngs) == 2  # a new version of each, next to the first
    assert tables[0] == tables[1]  # from the same records on the store
    assert pngs[1][:8] == b"\x89PNG\r\n\x1a\n"
    # the records were only read: no new version of them
    records = f"s3://{BUCKET}/chain/{MERGED_FOLDER}/step_0.parquet"
    assert _versions(after, records) == _versions(before, records)
    assert not (project / "data" / "08_reporting").exists()


def test_publish_copies_the_files_from_the_object_store(s3_chain):
    project, _, _ = s3_chain
    run_kedro(project, "publish", env=ENV)
    folder = project / "results/final_artifacts" / ENV
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    fs = s3()
    # the figures and tables of reporting, and the advantage-shaping table and figure the same
    # default run wrote (analyses)
    assert len(manifest["files"]) == 7
    shaping = [e for e in manifest["files"].values() if "advantage_shaping" in e["source"]]
    assert len(shaping) == 2, manifest["files"]
    for name, entry in manifest["files"].items():
        layer = "04_feature" if entry["source"].endswith(".csv") and entry in shaping else ""
        assert entry["source"].startswith(f"s3://{BUCKET}/chain/data/{layer or '08_reporting'}/"), (
            entry
        )
        assert (folder / name).read_bytes() == fs.cat(entry["source"].removeprefix("s3://"))


KILLED_WRITER = """
import sys, time
import pyarrow as pa
from kedro.io.core import Version
from hed.io.datasets import ArrowParquetDataset

url, marker = sys.argv[1:]
dataset = ArrowParquetDataset(filepath=url, version=Version(None, "2026-01-01T00.00.00.000Z"))

def chunks():
    yield pa.table({"entropy": [0.5] * 10_000})
    open(marker, "w").write("written")  # the first chunk is in the file: now kill me
    time.sleep(120)
    yield pa.table({"entropy": [0.25]})

dataset.save(chunks())
"""


def test_a_killed_write_leaves_no_object_a_later_run_takes_for_complete(s3_server, tmp_path):
    from kedro.io.core import Version

    from hed.io.datasets import ArrowParquetDataset

    url = f"s3://{BUCKET}/killed/records.parquet"
    marker = tmp_path / "marker"
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, url, str(marker)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])},
    )
    try:
        assert wait_for(marker.exists, 60), "the writer did not start writing"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    assert s3().find(f"{BUCKET}/killed") == []  # no object, not even a partial one
    later = ArrowParquetDataset(filepath=url, version=Version(None, None))
    assert not later.exists()  # --only-missing-outputs reruns the node that writes it
    # the killed writer's local scratch folder goes with the next upload on this host
    scratch = list(Path(tempfile.gettempdir()).glob(f"hed-upload-*-{writer.pid}-*"))
    assert len(scratch) == 1
    later.save(pa.table({"entropy": [0.125, 0.5]}))
    assert not scratch[0].exists()
    fresh = ArrowParquetDataset(filepath=url, version=Version(None, None))
    assert fresh.exists()
    assert fresh.load().to_table().column("entropy").to_pylist() == [0.125, 0.5]


def test_a_write_that_raises_half_way_leaves_no_object(s3_server):
    from kedro.io.core import DatasetError
    from kedro_datasets.json import JSONDataset

    dataset = JSONDataset(filepath=f"s3://{BUCKET}/raised/config.json")
    assert make_dataset_writes_atomic(dataset)  # as AtomicWritesHooks does before a run
    with pytest.raises(DatasetError):
        dataset.save({"entropy": 0.5, "not_json": object()})  # json.dump fails half-way
    assert s3().find(f"{BUCKET}/raised") == []
    assert not dataset.exists()
