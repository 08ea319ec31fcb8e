"""Atomic local writes are scoped to HED's datasets: importing ``hed.settings`` (as every
``kedro run`` and runner process does) leaves fsspec's ``file`` protocol to fsspec, so pandas,
transformers or vLLM writing through fsspec get plain writes; the datasets of a run get an
``AtomicLocalFileSystem`` from ``AtomicWritesHooks``.

Run in a fresh interpreter: ``tests/records/test_atomic_io.py`` registers the atomic filesystem
process-wide to test the filesystem itself, and pytest imports every test module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from ..conftest import REPO_ROOT

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


def test_settings_leave_fsspec_file_alone_and_the_runs_datasets_write_atomically(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
