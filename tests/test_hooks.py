"""hed.hooks.ProvenanceHooks: ``run_context`` only where a pipeline reads it; the end of a run
names the files written. (``ProjectHooks``' checks: ``tests/config/test_preflight.py``.)"""

from __future__ import annotations

import pandas as pd
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline

from hed.hooks import ProvenanceHooks
from hed.io import provenance
from hed.pipelines.reporting import create_pipeline

RUNS = {"r": {"role": "single", "checkpoint_root": "/ckpt/r", "steps": [0]}}


def test_hooks_leave_pipelines_without_run_context_alone(tmp_path):
    catalog = DataCatalog()
    hooks = ProvenanceHooks()
    hooks.before_pipeline_run(run_params={"env": None}, pipeline=Pipeline([]), catalog=catalog)
    assert provenance.RUN_CONTEXT not in catalog
    node = create_pipeline(params={"runs": RUNS}).nodes[0]  # a node without run_context
    assert hooks.before_node_run(node=node, catalog=catalog, inputs={}) is None


def test_the_end_of_a_run_names_the_files_written(tmp_path, caplog):
    from kedro.io import DataCatalog, MemoryDataset
    from kedro.io.core import Version
    from kedro.pipeline import Node, Pipeline
    from kedro_datasets.pandas import CSVDataset

    paths = [tmp_path / "figure3_high_entropy_token_probability.csv", tmp_path / "summary.csv"]
    tables = [CSVDataset(filepath=str(p), version=Version(None, None)) for p in paths]
    for table in tables:
        table.save(pd.DataFrame({"word": ["wait"]}))
    catalog = DataCatalog(
        {"figure3_table": tables[0], "summary_by_step": tables[1], "plan": MemoryDataset(1)}
    )
    pipeline = Pipeline(
        [Node(lambda: (None, None, None), None, ["figure3_table", "summary_by_step", "plan"])]
    )
    with caplog.at_level("INFO", logger="hed.hooks"):
        ProvenanceHooks().after_pipeline_run(run_params={}, pipeline=pipeline, catalog=catalog)
    current = [str(p / next(p.iterdir()).name / p.name) for p in paths]
    (summary,) = [r.getMessage() for r in caplog.records if "Run summary" in r.getMessage()]
    assert summary.splitlines() == [
        "Run summary: 2 figure(s) and table(s) written; current files:",
        f"  {current[0]}",
        f"  {current[1]}",
    ]
