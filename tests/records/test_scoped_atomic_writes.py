"""Atomic writes are scoped to HED's datasets: importing ``hed.settings`` (as every
``kedro run`` and runner process does) and creating a session leave fsspec's ``file``, ``s3``
and ``s3a`` protocols to fsspec, so pandas, transformers or vLLM writing through fsspec get
plain writes; the datasets of a run get an ``AtomicLocalFileSystem`` or an atomic s3fs
subclass from ``AtomicWritesHooks``, and HED's own datasets open theirs by themselves.

Run in a fresh interpreter: ``tests/records/test_atomic_io.py`` registers the atomic filesystem
process-wide to test the filesystem itself, and pytest imports every test module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from ..conftest import REPO_ROOT
from ..s3_server import moto_s3, s3

#: Its own bucket: moto keeps buckets process-wide, and the object-storage tests made theirs.
BUCKET = "hed-scoped-writes"

PROBE = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import fsspec
    import pandas as pd
    from fsspec.implementations.local import LocalFileSystem
    from kedro.io import DataCatalog
    from kedro.pipeline import Node, Pipeline

    import hed.settings  # what `kedro run` imports
    from hed.hooks import AtomicWritesHooks
    from hed.io.datasets import ArrowParquetDataset
    from hed.records.atomic_io import AtomicLocalFileSystem

    out = Path(sys.argv[1])
    # 1. other libraries: fsspec's own `file` filesystem, plain writes (pandas through fsspec)
    assert fsspec.get_filesystem_class("file") is LocalFileSystem
    assert type(fsspec.filesystem("file")) is LocalFileSystem
    opened = fsspec.open(f"file://{out}/pandas.csv", "w")  # as pandas' URL writers do
    assert type(opened.fs) is LocalFileSystem
    with opened as handle:
        pd.DataFrame({"a": [1, 2]}).to_csv(handle, index=False)
    assert (out / "pandas.csv").read_text() == "a\\n1\\n2\\n"
    try:
        with fsspec.open(f"file://{out}/plain.txt", "w") as handle:
            handle.write("half")
            raise RuntimeError("interrupted")
    except RuntimeError:
        pass
    assert (out / "plain.txt").read_text() == "half"  # fsspec's behaviour, not HED's

    # 2. the run's datasets, a pattern's included: atomic after the hook
    catalog = DataCatalog.from_config({
        "table": {"type": "pandas.CSVDataset", "filepath": f"{out}/table.csv"},
        "{name}.figure_data": {"type": "json.JSONDataset", "filepath": f"{out}/{{name}}.json"},
    })
    pipeline = Pipeline([
        Node(lambda: 1, None, "table", name="a"),
        Node(lambda t: t, "table", "run1.figure_data", name="b"),
    ])
    AtomicWritesHooks().before_pipeline_run({}, pipeline, catalog)
    for name in ("table", "run1.figure_data"):
        dataset = catalog.get(name)
        assert type(dataset._fs) is AtomicLocalFileSystem, name
    fs = catalog.get("table")._fs
    try:
        with fs.open(f"{out}/table.csv", "w") as handle:
            handle.write("half")
            raise RuntimeError("interrupted")
    except RuntimeError:
        pass
    assert not (out / "table.csv").exists()  # nothing half-written
    catalog.save("table", pd.DataFrame({"b": [3]}))
    assert (out / "table.csv").read_text() == "b\\n3\\n"
    # 3. HED's own datasets open local paths atomically by themselves
    assert type(ArrowParquetDataset(filepath=f"{out}/x.parquet")._fs) is AtomicLocalFileSystem
    # the registry is still fsspec's after all this
    assert fsspec.get_filesystem_class("file") is LocalFileSystem
    print("ok")
    """
)


S3_PROBE = textwrap.dedent(
    """
    import pickle
    import shutil
    import sys
    from pathlib import Path

    import fsspec
    import pandas as pd
    import pyarrow as pa
    import s3fs
    from kedro.framework.session import KedroSession
    from kedro.framework.project import configure_project
    from kedro.io import DataCatalog
    from kedro.io.core import Version
    from kedro.pipeline import Node, Pipeline

    import hed.settings  # what `kedro run` imports
    from hed.hooks import AtomicWritesHooks
    from hed.io.datasets import ArrowParquetDataset

    repo, project, bucket = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    shutil.copytree(repo / "conf", project / "conf")
    shutil.copy(repo / "pyproject.toml", project / "pyproject.toml")
    configure_project("hed")  # as bootstrap_project does for the project's own src/
    with KedroSession.create(project_path=project) as session:
        session.load_context().catalog  # the hooks of a session have run
    Plain = s3fs.S3FileSystem

    # 1. other libraries: s3fs's own class for s3:// (pandas through fsspec), plain writes
    for protocol in ("s3", "s3a"):
        assert fsspec.get_filesystem_class(protocol) is Plain, protocol
    assert type(fsspec.filesystem("s3")) is Plain
    assert type(fsspec.core.url_to_fs(f"s3://{bucket}/x")[0]) is Plain  # what pandas opens
    frame = pd.DataFrame({"entropy": [0.5, 0.25], "token": ["so", "let"]})
    frame.to_parquet(f"s3://{bucket}/pandas/frame.parquet")
    assert pd.read_parquet(f"s3://{bucket}/pandas/frame.parquet").equals(frame)
    try:
        with fsspec.open(f"s3://{bucket}/plain/half.txt", "w") as handle:
            handle.write("half")
            raise RuntimeError("interrupted")
    except RuntimeError:
        pass
    fresh = fsspec.filesystem("s3", skip_instance_cache=True)
    assert fresh.cat(f"{bucket}/plain/half.txt") == b"half"  # s3fs's behaviour, not HED's

    # 2. the run's datasets, a pattern's included: abortable writes after the hook
    root = f"s3://{bucket}/run"
    catalog = DataCatalog.from_config({
        "table": {"type": "pandas.CSVDataset", "filepath": f"{root}/table.csv"},
        "{name}.figure_data": {"type": "json.JSONDataset", "filepath": f"{root}/{{name}}.json"},
    })
    pipeline = Pipeline([
        Node(lambda: 1, None, "table", name="a"),
        Node(lambda t: t, "table", "run1.figure_data", name="b"),
    ])
    AtomicWritesHooks().before_pipeline_run({}, pipeline, catalog)
    for name in ("table", "run1.figure_data"):
        fs = catalog.get(name)._fs
        assert type(fs).__name__ == "AtomicS3FileSystem" and isinstance(fs, Plain), name
    fs = catalog.get("table")._fs
    try:
        with fs.open(f"{root}/table.csv", "w") as handle:
            handle.write("half")
            raise RuntimeError("interrupted")
    except RuntimeError:
        pass
    assert not fresh.exists(f"{bucket}/run/table.csv")  # nothing half-uploaded
    catalog.save("table", pd.DataFrame({"b": [3, 4]}))
    assert fresh.cat(f"{bucket}/run/table.csv") == b"b\\n3\\n4\\n"
    assert catalog.load("table")["b"].tolist() == [3, 4]
    catalog.save("run1.figure_data", {"entropy": 0.5})
    assert catalog.load("run1.figure_data") == {"entropy": 0.5}
    # the filesystem pickles by its class's name (another process finds the same class)
    sent = pickle.loads(pickle.dumps(catalog.get("table")._fs))
    assert type(sent) is type(fs) and sent.cat(f"{bucket}/run/table.csv") == b"b\\n3\\n4\\n"

    # 3. HED's own datasets open object stores atomically by themselves; records round-trip
    url = f"{root}/records.parquet"
    records = ArrowParquetDataset(filepath=url, version=Version(None, "2026-01-01T00.00.00.000Z"))
    assert type(records._fs).__name__ == "AtomicS3FileSystem"
    table = pa.table({"entropy": [0.125, 0.5, 2.0], "position": [0, 1, 2]})
    records.save(table)
    loaded = ArrowParquetDataset(filepath=url, version=Version(None, None)).load().to_table()
    assert loaded.equals(table)
    # the registry is still fsspec's after all this
    for protocol in ("s3", "s3a"):
        assert fsspec.get_filesystem_class(protocol) is Plain, protocol
    assert type(fsspec.filesystem("s3")) is Plain
    print("ok")
    """
)


def _probe(code: str, *args: str, cwd) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])}
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_settings_leave_fsspec_file_alone_and_the_runs_datasets_write_atomically(tmp_path):
    _probe(PROBE, str(tmp_path), cwd=tmp_path)


def test_a_session_leaves_fsspec_s3_to_s3fs_and_hed_s3_datasets_round_trip(tmp_path):
    with moto_s3(BUCKET) as _endpoint:  # AWS_ENDPOINT_URL for the probe's s3fs
        _probe(S3_PROBE, str(REPO_ROOT), str(tmp_path / "project"), BUCKET, cwd=tmp_path)
        objects = sorted(s3().find(BUCKET))
    assert objects == [
        f"{BUCKET}/pandas/frame.parquet",
        f"{BUCKET}/plain/half.txt",
        f"{BUCKET}/run/records.parquet/2026-01-01T00.00.00.000Z/records.parquet",
        f"{BUCKET}/run/run1.json",
        f"{BUCKET}/run/table.csv",
    ]
