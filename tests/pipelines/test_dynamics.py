"""Dynamics pipeline: per-step tables equal an independent numpy computation; skipped steps.

Hand-made merged steps (``tests/dynamics_reference.py``) stand in for the aggregation
pipeline's output; the pipeline runs with ``SequentialRunner`` on the project's catalog
entries, every path under ``tmp_path``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kedro.config import OmegaConfigLoader
from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import SequentialRunner
from PIL import Image

from hed.config.analysis_params import DynamicsParams, dynamics_params
from hed.config.layout import RunSpec, StudyLayout
from hed.errors import ConfigError, InputDataError
from hed.pipelines.dynamics import create_pipeline
from hed.pipelines.dynamics import nodes as dyn

from ..dynamics_reference import (
    CATEGORIES,
    LEXICON,
    RESPONSES,
    random_step,
    reference_correctness,
    reference_covariance,
    thresholds_row,
    write_step,
)

REPO = Path(__file__).resolve().parents[2]
DYNAMICS = {
    "estimators": ["grpo", "dr_grpo"],
    "kl_cov_ratio": 0.1,
    "clip_cov_band": [0.05, 0.9],
    "batch_records": 5,
    "figures": {"panel_size": [3.0, 2.0], "dpi": 50},
}
AGGREGATION = {"lexicon": LEXICON}
RUNS = {"r": {"role": "single", "checkpoint_root": "unused", "steps": [0, 5, 10]}}
UNGRADED = [(p, s, None) for p, s, _ in RESPONSES]


def tmp_catalog(tmp_path: Path) -> DataCatalog:
    config = OmegaConfigLoader(str(REPO / "conf"), base_env="base", default_run_env="local")[
        "catalog"
    ]
    for entry in config.values():
        if isinstance(entry, dict) and "filepath" in entry:
            entry["filepath"] = str(tmp_path / entry["filepath"])
    return DataCatalog.from_config(config)


def steps() -> dict[int, tuple[pd.DataFrame, pd.DataFrame]]:
    """Step 0 and 10 graded (different seeds), step 5 without any reference answer."""
    return {
        0: random_step(RESPONSES, seed=0, step=0),
        5: random_step(UNGRADED, seed=1, step=5),
        10: random_step(RESPONSES, seed=2, step=10),
    }


def seed_catalog(catalog: DataCatalog, tmp_path: Path, data) -> None:
    catalog["params:aggregation"] = MemoryDataset(AGGREGATION)
    catalog["params:dynamics"] = MemoryDataset(DYNAMICS)
    catalog["params:runs"] = MemoryDataset(RUNS)
    for step, (records, sequences) in data.items():
        records_ds, sequences_ds = write_step(tmp_path / f"in_{step}", records, sequences)
        catalog[f"r.step_{step}.token_records"] = MemoryDataset(records_ds, copy_mode="assign")
        catalog[f"r.step_{step}.sequences"] = MemoryDataset(sequences_ds, copy_mode="assign")
        catalog[f"r.step_{step}.entropy_thresholds"] = MemoryDataset(
            thresholds_row(records, step=step)
        )


def layout() -> StudyLayout:
    return StudyLayout(
        runs=(RunSpec(name="r", role="single", checkpoint_root="unused", steps=(0, 5, 10)),),
        num_shards=1,
    )


def assert_row_equals(got: pd.Series, expected: dict) -> None:
    for key, value in expected.items():
        if isinstance(value, float) and math.isnan(value):
            assert pd.isna(got[key]), key
        else:
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_pipeline_tables_equal_independent_numpy(tmp_path, caplog):
    catalog = tmp_catalog(tmp_path)
    data = steps()
    seed_catalog(catalog, tmp_path, data)
    with caplog.at_level(logging.WARNING, logger="hed.pipelines.dynamics.nodes"):
        SequentialRunner().run(create_pipeline(layout()), catalog)

    table = catalog.load("advantage_covariance_by_step")  # read back from the CSV
    assert table[["step", "estimator"]].values.tolist() == [
        [0, "grpo"], [0, "dr_grpo"], [5, "grpo"], [5, "dr_grpo"], [10, "grpo"], [10, "dr_grpo"],
    ]  # fmt: skip
    tops = catalog.load("advantage_covariance_top_tokens")
    for step in (0, 10):
        records, sequences = data[step]
        for estimator in ("grpo", "dr_grpo"):
            expected, top = reference_covariance(
                records, sequences, estimator, CATEGORIES, kl_ratio=0.1, band=(0.05, 0.9)
            )
            row = table[(table.step == step) & (table.estimator == estimator)].iloc[0]
            assert pd.isna(row["skipped"]) and row["n_responses_ungraded"] == 2
            assert_row_equals(row, expected)
            got = tops[(tops.step == step) & (tops.estimator == estimator)]
            keys = ["prompt_index", "sample_index", "position"]
            assert got[keys].values.tolist() == top[keys].values.tolist()
            assert got["word"].tolist() == top["word"].tolist()
            np.testing.assert_allclose(got["cov"], top["cov"], rtol=1e-12, atol=1e-12)
    # hand-checked counts of RESPONSES: 14 graded, 6 zero advantage, 2 single samples
    graded = table[table.step == 0].iloc[0]
    assert graded["n_responses"] == 14 and graded["n_prompts"] == 6
    assert graded["zero_advantage_share"] == pytest.approx(6 / 14, abs=1e-15)
    assert graded["n_single_sample_responses"] == 2

    skipped = table[table.step == 5]
    assert (skipped["skipped"] == dyn.NO_GRADING).all()
    assert skipped["mean_cov"].isna().all() and (skipped["n_responses"] == 0).all()
    assert (skipped["n_responses_ungraded"] == 16).all()
    assert "dynamics skips r.step_5: no graded response" in caplog.text
    assert (tops.step != 5).all()

    correctness = catalog.load("entropy_by_correctness")
    assert list(zip(correctness["step"], correctness["correct"].fillna(""), strict=True)) == [
        (0, True), (0, False), (5, ""), (10, True), (10, False),
    ]  # fmt: skip
    for step in (0, 10):
        records, sequences = data[step]
        for value, expected in reference_correctness(records, sequences).items():
            row = correctness[(correctness.step == step) & (correctness.correct == value)]
            assert_row_equals(row.iloc[0], expected)
    no_grading = correctness[correctness.step == 5].iloc[0]
    assert no_grading["skipped"] == dyn.NO_GRADING and pd.isna(no_grading["mean_entropy"])

    per_step = catalog.load("r.step_10.advantage_covariance_by_step")  # loads on its own
    assert per_step["step"].tolist() == [10, 10]
    for dataset, size in (("advantage_covariance_png", (150, 200)),
                          ("entropy_by_correctness_png", (150, 200))):  # fmt: skip
        path = catalog.get(dataset)._get_load_path()
        image = Image.open(path)
        assert image.size == size
        assert np.asarray(image.convert("L"), dtype=float).std() > 5


def test_step_with_other_n_tokens_is_refused(tmp_path):
    records, sequences = random_step(RESPONSES)
    records_ds, sequences_ds = write_step(tmp_path, records, sequences)
    wrong = thresholds_row(records).assign(n_tokens=3)
    with pytest.raises(InputDataError, match="rerun the aggregation of this step"):
        dyn.tabulate_entropy_by_correctness(wrong, sequences_ds, records_ds, DYNAMICS)


def test_bad_dynamics_section_is_one_line(tmp_path):
    records, sequences = random_step(RESPONSES)
    records_ds, sequences_ds = write_step(tmp_path, records, sequences)
    thresholds = thresholds_row(records)
    with pytest.raises(ConfigError, match=r"dynamics\.estimators"):
        dyn.tabulate_advantage_covariance(
            thresholds, sequences_ds, records_ds, {}, {"estimators": ["ppo"]}
        )
    with pytest.raises(ConfigError, match=r"dynamics\.epsilon"):
        dyn.tabulate_advantage_covariance(thresholds, sequences_ds, records_ds, {}, {"epsilon": -1})
    with pytest.raises(ConfigError, match="must be a mapping"):
        dyn.tabulate_entropy_by_correctness(thresholds, sequences_ds, records_ds, [1])


def test_a_raw_dict_and_the_parsed_section_give_identical_tables_and_figures(tmp_path):
    records, sequences = random_step(RESPONSES)
    records_ds, sequences_ds = write_step(tmp_path, records, sequences)
    thresholds, aggregation = thresholds_row(records), AGGREGATION
    parsed = dynamics_params(DYNAMICS)
    assert DynamicsParams.of(parsed) is parsed
    assert (parsed.covariance.kl_cov_ratio, parsed.figures.dpi) == (0.1, 50)
    raw = dyn.tabulate_advantage_covariance(thresholds, sequences_ds, records_ds, aggregation,
                                            DYNAMICS)  # fmt: skip
    typed = dyn.tabulate_advantage_covariance(
        thresholds, sequences_ds, records_ds, aggregation, parsed
    )
    for a, b in zip(raw, typed, strict=True):
        pd.testing.assert_frame_equal(a, b)
    assert set(raw[0]["kl_cov_ratio"]) == {0.1}
    pd.testing.assert_frame_equal(
        dyn.tabulate_entropy_by_correctness(thresholds, sequences_ds, records_ds, DYNAMICS),
        dyn.tabulate_entropy_by_correctness(thresholds, sequences_ds, records_ds, parsed),
    )
    for source in (DYNAMICS, parsed):
        figure = dyn.plot_advantage_covariance(raw[0], RUNS, source)
        assert (tuple(figure.get_size_inches()), figure.dpi) == ((3.0, 4.0), 50)


def test_pipeline_shape():
    pipeline = create_pipeline(layout())
    names = {n.name for n in pipeline.nodes}
    assert "r.step_5.tabulate_advantage_covariance" in names
    assert {"combine_advantage_covariance", "plot_entropy_by_correctness"} <= names
    assert pipeline.inputs() == {
        "params:aggregation",
        "params:dynamics",
        "params:runs",
        *(f"r.step_{s}.{n}" for s in (0, 5, 10)
          for n in ("entropy_thresholds", "sequences", "token_records")),
    }  # fmt: skip


@pytest.mark.parametrize("env", ["mini_dapo", "qae_repro", "local"])
def test_every_environment_runs_dynamics_in_default_on_catalog_datasets(env):
    """``__default__`` of each environment holds the dynamics nodes of every (run, step), and
    each dataset they write or read is a persisted catalog entry (a pattern or a name)."""
    from kedro.framework.project import configure_project

    from hed.config import layout as hed_layout
    from hed.config import session as hed_session
    from hed.pipeline_registry import register_pipelines

    loader = OmegaConfigLoader(
        str(REPO / "conf"), base_env="base", default_run_env="local", env=env
    )
    params = loader["parameters"]
    assert dynamics_params(params["dynamics"]).covariance.kl_cov_ratio == 0.002
    configure_project("hed")
    with hed_session.session_config(params):
        default = register_pipelines()["__default__"]
    names = {node.name for node in default.nodes}
    runs = hed_layout.layout_from_params(params).run_steps()
    for run, step in runs:
        assert f"{run.name}.step_{step}.tabulate_advantage_covariance" in names
        assert f"{run.name}.step_{step}.tabulate_entropy_by_correctness" in names
    catalog = DataCatalog.from_config(loader["catalog"])
    dynamics = [n for n in default.nodes if "dynamics" in n.tags]
    assert len(dynamics) == 2 * len(runs) + 5
    for node in dynamics:
        for name in {*node.inputs, *node.outputs} - {n for n in node.inputs if "params:" in n}:
            dataset = catalog.get(name)
            assert dataset is not None and not isinstance(dataset, MemoryDataset), name


def test_mini_dapo_dynamics_runs_on_its_configuration(tmp_path, smollm2_dir):
    """``kedro run --env mini_dapo --pipelines dynamics`` in a project copy, on hand-made
    merged steps saved through the environment's catalog (its 2 runs × 4 steps, one step
    without reference answers): every table and figure is written, the skipped step listed."""
    import yaml
    from kedro.framework.project import configure_project
    from kedro.framework.session import KedroSession

    from ..project_copy import copy_project, latest, run_kedro

    project = copy_project(tmp_path / "project", smollm2_dir)
    runs = yaml.safe_load((project / "conf/mini_dapo/parameters.yml").read_text())["runs"]
    configure_project("hed")
    with KedroSession.create(project_path=project, env="mini_dapo") as session:
        catalog = session.load_context().catalog
        for r, (run, cfg) in enumerate(runs.items()):
            for step in cfg["steps"]:
                answers = UNGRADED if (r, step) == (1, 8) else RESPONSES
                records, sequences = random_step(answers, seed=step + r, run=run, step=step)
                catalog.save(f"{run}.step_{step}.token_records", records)
                catalog.save(f"{run}.step_{step}.sequences", sequences)
                catalog.save(
                    f"{run}.step_{step}.entropy_thresholds", thresholds_row(records, run, step)
                )
    run_kedro(project, pipeline="dynamics", env="mini_dapo")

    table = pd.read_csv(
        latest(project / "data/mini_dapo/04_feature/advantage_covariance_by_step.csv")
    )
    assert len(table) == 2 * 4 * 2  # runs × steps × estimators
    skipped = table[table["skipped"].notna()]
    assert set(zip(skipped["run"], skipped["step"], strict=True)) == {("mini_dapo_with_clip", 8)}
    assert table.loc[table["skipped"].isna(), "mean_cov"].notna().all()
    correctness = pd.read_csv(
        latest(project / "data/mini_dapo/04_feature/entropy_by_correctness.csv")
    )
    assert len(correctness) == 7 * 2 + 1
    for name in ("advantage_covariance_by_step.png", "entropy_by_correctness.png"):
        image = Image.open(latest(project / "data/mini_dapo/08_reporting/figures" / name))
        assert image.size == (2 * 640, 2 * 440)  # 2 runs × 3.2 in, 2 rows × 2.2 in, 200 dpi
