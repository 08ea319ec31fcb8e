"""The advantage-shaping nodes of the analyses pipeline, through the catalog."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
from kedro.io import MemoryDataset
from kedro.runner import SequentialRunner
from PIL import Image

from hed.analysis.advantage_shaping import SHAPING_COLUMNS, subsets
from hed.config.layout import RunSpec, StudyLayout
from hed.pipelines.analyses import create_pipeline
from tests.analysis.test_advantage_shaping import RECORDS, SEQUENCES, TAU
from tests.pipelines.test_analyses import tmp_catalog

STEPS = (0, 4)
LEXICON = {"anthropomorphic": ["wait"], "reasoning": ["thus"]}
NODES = ("tabulate_advantage_shaping", "plot_advantage_shaping")


def _layout() -> StudyLayout:
    runs = tuple(
        RunSpec(name=r, role="single", checkpoint_root="x", steps=STEPS) for r in ("a", "b")
    )
    return StudyLayout(runs=runs, num_shards=1)


def test_the_table_and_figure_of_every_run_and_step(tmp_path):
    catalog = tmp_catalog(tmp_path)
    shaping = {"schemes": ["dr_grpo", "gtpo"], "alpha": 0.5}
    params = {"analyses": {"advantage_shaping": shaping}}
    thresholds = []
    for run in ("a", "b"):
        for step in STEPS:
            records = pa.Table.from_pandas(RECORDS, preserve_index=False)
            sequences = pa.Table.from_pandas(SEQUENCES, preserve_index=False)
            catalog[f"{run}.step_{step}.token_records"] = MemoryDataset(
                ds.dataset(records), copy_mode="assign"
            )
            catalog[f"{run}.step_{step}.sequences"] = MemoryDataset(
                ds.dataset(sequences), copy_mode="assign"
            )
            thresholds.append({"run": run, "step": step, "threshold": TAU})
    catalog["entropy_thresholds"] = MemoryDataset(pd.DataFrame(thresholds))
    catalog["params:aggregation"] = MemoryDataset({"lexicon": LEXICON})
    catalog["params:analyses"] = MemoryDataset({"dpi": 40, "advantage_shaping": shaping})
    catalog["params:analyses.advantage_shaping"] = MemoryDataset(shaping)
    pipeline = create_pipeline(_layout(), params=params).only_nodes(*NODES)
    SequentialRunner().run(pipeline, catalog)

    table = catalog.load("advantage_shaping_by_step")
    assert list(table.columns) == SHAPING_COLUMNS
    assert len(table) == 2 * 2 * 2 * len(subsets(("anthropomorphic", "reasoning", "other"))) * 3
    row = table[
        (table.run == "b")
        & (table.step == 4)
        & (table.scheme == "dr_grpo")
        & (table.subset == "high_entropy_anthropomorphic")
        & (table.response == "all")
    ]
    assert row.credit_share.tolist() == [0.5 / 2.5]  # tests/analysis: |A| = 0.5 of 2.5
    path = Path(catalog.get("advantage_shaping_png")._get_load_path())
    with Image.open(path) as image:
        assert image.size[0] > 100 and image.size[1] > 80


def test_the_nodes_are_left_out_when_disabled_or_absent():
    for params in ({}, {"analyses": {"advantage_shaping": {"enabled": False}}}):
        names = {n.name for n in create_pipeline(_layout(), params=params).nodes}
        assert not names & set(NODES)
    names = {n.name for n in create_pipeline(_layout(), params={"analyses": {
        "advantage_shaping": {}}}).nodes}  # fmt: skip
    assert set(NODES) <= names


def test_a_run_that_wrote_the_figure_publishes_it_with_reporting_artifacts():
    from hed.pipelines.reporting.nodes import build_resolved_config

    empty = pd.DataFrame({"run": [], "step": []})
    figure = {"path": "data/08_reporting/figures/advantage_shaping.png/v/x.png", "version": "v"}
    common = {
        "figure_plan": {"strict": False, "omissions": []},
        "checkpoints": {},
        "entropy_thresholds": empty,
        "summary_by_step": empty,
        "token_probability_mass_high_entropy": empty,
        "pass1_for_figures": empty,
        "parameters": {},
        "artifacts": ("figure2_png",),
    }
    outputs = {"figure2_png": {"path": "f2.png"}, "advantage_shaping_png": figure}
    resolved = build_resolved_config(**common, run_context={"outputs": outputs})
    assert resolved["artifacts"] == {"figure2_png": {"path": "f2.png"}, **{
        "advantage_shaping_png": figure}}  # fmt: skip
    alone = build_resolved_config(**common, run_context={"outputs": {"figure2_png": {}}})
    assert set(alone["artifacts"]) == {"figure2_png"}  # a reporting-only run
