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
#: A Kedro session id (the save version of every versioned output of the run).
RUN_ID = "2026-12-01T15.00.00.000Z"


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
    tables = [CSVDataset(filepath=str(p), version=Version(None, RUN_ID)) for p in paths]
    for table in tables:
        table.save(pd.DataFrame({"word": ["wait"]}))
    catalog = DataCatalog(
        {"figure3_table": tables[0], "summary_by_step": tables[1], "plan": MemoryDataset(1)}
    )
    pipeline = Pipeline(
        [Node(lambda: (None, None, None), None, ["figure3_table", "summary_by_step", "plan"])]
    )
    with caplog.at_level("INFO", logger="hed.hooks"):
        ProvenanceHooks().after_pipeline_run(
            run_params={"run_id": RUN_ID}, pipeline=pipeline, catalog=catalog
        )
    current = [str(p / RUN_ID / p.name) for p in paths]
    (summary,) = [r.getMessage() for r in caplog.records if "Run summary" in r.getMessage()]
    assert summary.splitlines() == [
        "Run summary: 2 figure(s) and table(s) written; current files:",
        f"  {current[0]}",
        f"  {current[1]}",
    ]


def test_the_summary_lists_only_what_this_run_wrote(tmp_path, caplog):
    """--only-missing-outputs with everything present: every node skipped, "nothing written";
    a run that rewrote one table lists that one, not the table an earlier run left."""
    import os

    from kedro.io import DataCatalog
    from kedro.io.core import Version
    from kedro.pipeline import Node, Pipeline
    from kedro_datasets.matplotlib import MatplotlibDataset
    from kedro_datasets.pandas import CSVDataset
    from matplotlib.figure import Figure

    earlier, now = "2026-12-01T14.00.00.000Z", "2026-12-01T15.00.00.000Z"
    png, table, plain = tmp_path / "f2.png", tmp_path / "f2.csv", tmp_path / "plain.csv"
    MatplotlibDataset(filepath=str(png), version=Version(None, earlier)).save(Figure())
    CSVDataset(filepath=str(table), version=Version(None, earlier)).save(pd.DataFrame({"a": [1]}))
    CSVDataset(filepath=str(plain)).save(pd.DataFrame({"a": [1]}))
    os.utime(plain, (1.0, 1.0))  # written long before this run started

    def catalog(save: str) -> DataCatalog:
        return DataCatalog(
            {
                "figure2_png": MatplotlibDataset(filepath=str(png), version=Version(None, save)),
                "figure3_table": CSVDataset(filepath=str(table), version=Version(None, save)),
                "summary_by_step": CSVDataset(filepath=str(plain)),
            }
        )

    pipeline = Pipeline(
        [Node(lambda: (1, 2, 3), None, ["figure2_png", "figure3_table", "summary_by_step"])]
    )

    def summary() -> str:
        caplog.clear()
        with caplog.at_level("INFO", logger="hed.hooks"):
            ProvenanceHooks().after_pipeline_run(
                run_params={"run_id": now}, pipeline=pipeline, catalog=run_catalog
            )
        (line,) = [r.getMessage() for r in caplog.records if "Run summary" in r.getMessage()]
        return line

    run_catalog = catalog(now)  # every node skipped: nothing saved under `now`
    assert summary().startswith("Run summary: nothing written")
    CSVDataset(filepath=str(table), version=Version(None, now)).save(pd.DataFrame({"a": [2]}))
    assert summary().splitlines() == [
        "Run summary: 1 figure(s) and table(s) written; current files:",
        f"  {table / now / table.name}",
    ]


def test_the_summary_names_a_figure_and_table_of_different_runs(tmp_path, caplog):
    """A run killed after saving Figure 2's table and before its PNG: the newest table is of
    that run, the newest PNG of the one before; the next run that skips both says so."""
    from kedro.io import DataCatalog
    from kedro.io.core import Version
    from kedro.pipeline import Node, Pipeline
    from kedro_datasets.matplotlib import MatplotlibDataset
    from kedro_datasets.pandas import CSVDataset
    from matplotlib.figure import Figure

    complete, killed, now = (f"2026-12-01T1{h}.00.00.000Z" for h in (3, 4, 5))
    png, table = tmp_path / "figure2.png", tmp_path / "figure2.csv"
    for version in (complete, killed):
        CSVDataset(filepath=str(table), version=Version(None, version)).save(
            pd.DataFrame({"a": [1]})
        )
    MatplotlibDataset(filepath=str(png), version=Version(None, complete)).save(Figure())
    catalog = DataCatalog(
        {
            "figure2_png": MatplotlibDataset(filepath=str(png), version=Version(None, now)),
            "figure2_paper_reproduction": CSVDataset(
                filepath=str(table), version=Version(None, now)
            ),
        }
    )
    pipeline = Pipeline([Node(lambda: (1, 2), None, ["figure2_paper_reproduction", "figure2_png"])])
    with caplog.at_level("INFO", logger="hed.hooks"):
        ProvenanceHooks().after_pipeline_run(
            run_params={"run_id": now}, pipeline=pipeline, catalog=catalog
        )
    lines = [r.getMessage() for r in caplog.records if "Run summary" in r.getMessage()]
    assert lines[0].startswith("Run summary: nothing written")
    assert lines[1] == (
        f"Run summary: figure2_png is of run {complete} but figure2_paper_reproduction of run "
        f"{killed} (a run was interrupted between them): redraw both with `kedro run "
        "--pipelines reporting` (without --only-missing-outputs)"
    )


def test_a_records_pipeline_says_what_it_wrote_or_that_nothing_was(tmp_path, caplog):
    """generation writes records, no table or figure: the summary counts its files."""
    from kedro.io import DataCatalog
    from kedro.io.core import Version
    from kedro.pipeline import Node, Pipeline
    from kedro_datasets.pandas import ParquetDataset

    from hed.hooks import ProvenanceHooks

    earlier, now = "2026-12-01T14.00.00.000Z", "2026-12-01T15.00.00.000Z"
    paths = [tmp_path / f"shard_{k}.parquet" for k in range(2)]
    for path in paths:
        ParquetDataset(filepath=str(path), version=Version(None, earlier)).save(
            pd.DataFrame({"a": [1]})
        )
    catalog = DataCatalog(
        {
            f"s{k}": ParquetDataset(filepath=str(p), version=Version(None, now))
            for k, p in enumerate(paths)
        }
    )
    pipeline = Pipeline([Node(lambda: (1, 2), None, ["s0", "s1"], tags=["gpu"])])

    def summary() -> str:
        caplog.clear()
        with caplog.at_level("INFO", logger="hed.hooks"):
            ProvenanceHooks().after_pipeline_run(
                run_params={"run_id": now}, pipeline=pipeline, catalog=catalog
            )
        (line,) = [r.getMessage() for r in caplog.records if "Run summary" in r.getMessage()]
        return line

    assert summary().startswith("Run summary: nothing written (every output of this pipeline")
    ParquetDataset(filepath=str(paths[1]), version=Version(None, now)).save(
        pd.DataFrame({"a": [2]})
    )
    assert summary().splitlines() == [
        "Run summary: 1 of 2 output file(s) written (records; this pipeline draws no figure or "
        "table), e.g.",
        f"  {paths[1] / now / paths[1].name}",
    ]


def test_a_stale_dataset_is_named_with_the_pipeline_that_writes_it_in_the_runs_own_layout():
    """The stale-data command names the pipelines that write a dataset, built from the run's
    parameters: a study's own run (not in conf/base) has producers too, although the session's
    layout is no longer active once the run starts."""
    from kedro.framework.project import configure_project

    from hed.config import session
    from hed.config.loader import HEDConfigLoader
    from hed.io.missing_inputs import pipelines_to_update, project_pipelines

    from .conftest import REPO_ROOT

    configure_project("hed")
    loader = HEDConfigLoader(
        conf_source=str(REPO_ROOT / "conf"), base_env="base", default_run_env="local"
    )
    params = dict(loader["parameters"])
    (run,) = params["runs"].values()
    params["runs"] = {"my_study_run": {**run, "steps": [0, 30]}}
    assert session.active_session() is None  # as during a run
    built = project_pipelines(params)

    def fix(dataset: str) -> list[str]:
        return pipelines_to_update(dataset, [], built, params)

    assert fix("my_study_run.step_30.token_records")[0] == "aggregation"
    assert fix("my_study_run.step_30.shard_0.token_records")[:2] == ["generation", "aggregation"]
    assert fix("smollm2_demo.step_0.token_records") == []


def test_one_hook_checks_a_runs_inputs_and_it_runs_first():
    """Missing, stale and damaged inputs are checked by one hook (hed.hooks.inputs), registered
    last in settings.HOOKS so pluggy calls its before_pipeline_run first (before the run lock)."""
    import re

    from hed import settings
    from hed.hooks import InputHooks

    from .conftest import REPO_ROOT

    src = REPO_ROOT / "src" / "hed"
    called = re.compile(r"(?<!def )\b(check_inputs_exist|check_input_tables)\(")
    callers = {str(p.relative_to(src)) for p in src.rglob("*.py") if called.search(p.read_text())}
    assert callers == {"hooks/inputs.py"}
    assert isinstance(settings.HOOKS[-1], InputHooks)
    assert sum(isinstance(hook, InputHooks) for hook in settings.HOOKS) == 1


def test_a_run_that_scored_dump_shards_shows_the_flag_shares(tmp_path, caplog):
    """The summary reads the flags from the metadata of the shards this run wrote; a shard of
    an earlier run is not counted."""
    import json

    import pyarrow as pa
    from kedro.io import DataCatalog
    from kedro.io.core import Version
    from kedro.pipeline import Node, Pipeline

    from hed.io.datasets import ArrowParquetDataset
    from hed.records.shard_metadata import GENERATION_METADATA_KEY

    earlier, now = "2026-12-01T14.00.00.000Z", "2026-12-01T15.00.00.000Z"

    def planted(name, version, ok, ids_differ, unmatched):
        meta = {
            "source": "verl_dump",
            "run": "dapo",
            "step": 3,
            "num_shards": 2,
            "rollouts": {
                "dump_rows": 66,
                "shard_rows": ok + ids_differ,
                "flags": {"ok": ok, "ids_differ": ids_differ, "text_not_round_trip": 0},
                "unmatched_lines": unmatched,
            },
        }
        table = pa.table({"a": [1]}).replace_schema_metadata(
            {GENERATION_METADATA_KEY: json.dumps(meta).encode()}
        )
        path = str(tmp_path / f"{name}.parquet")
        ArrowParquetDataset(filepath=path, version=Version(None, version)).save(table)
        return ArrowParquetDataset(filepath=path, version=Version(None, now))

    names = [f"dapo.step_3.shard_{k}.sequences" for k in range(2)]
    catalog = DataCatalog(
        {
            names[0]: planted("s0", now, 30, 3, [4, 9]),
            names[1]: planted("s1", earlier, 31, 0, [4, 9]),  # of an earlier run
        }
    )
    pipeline = Pipeline([Node(lambda: (1, 2), None, names)])
    with caplog.at_level("INFO", logger="hed.hooks"):
        ProvenanceHooks().after_pipeline_run(
            run_params={"run_id": now}, pipeline=pipeline, catalog=catalog
        )
    lines = [r.getMessage() for r in caplog.records if "verl dump rows" in r.getMessage()]
    # 3 / 33 = 9.09 %
    assert lines == [
        "Run summary: verl dump rows: dapo.step_3 (1 of 2 shards): 33 scored, 3 ids_differ "
        "(9.1 %), 2 no_prompt (not scored)"
    ]
