"""Analyses pipeline: pass@k, the entropy–performance fit and runs compared, through the catalog.

Two runs × three steps of hand-made sequences and per-step tables stand in for the
aggregation and metrics pipelines; every path lies under ``tmp_path``.
"""

from __future__ import annotations

from math import comb
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from kedro.config import OmegaConfigLoader
from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import SequentialRunner
from PIL import Image

from hed.config.layout import RunSpec, StudyLayout
from hed.pipelines.analyses import create_pipeline

REPO = Path(__file__).resolve().parents[2]
STEPS = (0, 8, 16)
RUNS = {"a": {"role": "without_clip"}, "b": {"role": "with_clip"}}
# correct samples per prompt (4 samples each, 3 prompts) per (run, step)
CORRECT = {
    ("a", 0): [0, 1, 2], ("a", 8): [1, 2, 2], ("a", 16): [2, 3, 4],
    ("b", 0): [0, 1, 2], ("b", 8): [2, 2, 3], ("b", 16): [3, 4, 4],
}  # fmt: skip
PLANTED = {"a": (0.1, 0.9), "b": (0.2, 1.1)}  # (a, b) of R = −a·exp(H) + b
ENTROPY = {0: 1.2, 8: 0.9, 16: 0.6}


def tmp_catalog(tmp_path: Path) -> DataCatalog:
    config = OmegaConfigLoader(str(REPO / "conf"), base_env="base", default_run_env="local")[
        "catalog"
    ]
    for entry in config.values():
        if isinstance(entry, dict) and "filepath" in entry:
            entry["filepath"] = str(tmp_path / entry["filepath"])
    return DataCatalog.from_config(config)


def sequences(correct: list[int]) -> ds.Dataset:
    prompt = np.repeat(np.arange(len(correct)), 4)
    flags = [i < c for c in correct for i in range(4)]
    return ds.dataset(pa.table({"prompt_index": pa.array(prompt, pa.int32()), "correct": flags}))


def merged_records(seed: int, with_mass: bool = True) -> ds.Dataset:
    """A step's merged records (the columns the propensity reads), planted masses; without
    the mass columns when ``with_mass`` is false (a step generated before they existed)."""
    rng = np.random.default_rng(seed)
    n = 500
    columns = {
        "is_special": rng.random(n) < 0.05,
        "is_high_entropy": rng.random(n) < 0.2,
        "category": rng.choice(["anthropomorphic", "reasoning", "other"], n, p=[0.1, 0.3, 0.6]),
    }
    if with_mass:
        columns["anthropomorphic_mass"] = rng.uniform(0, 0.3, n).astype(np.float32)
        columns["reasoning_mass"] = rng.uniform(0, 0.6, n).astype(np.float32)
    return ds.dataset(pa.table(columns))


def expected_propensity(data: ds.Dataset) -> dict[str, float]:
    """The propensity row by numpy in float64, independently of the pipeline."""
    frame = data.to_table().to_pandas()
    frame = frame[~frame.is_special]
    high = frame[frame.is_high_entropy]
    return {
        "n_tokens": len(frame),
        "n_high_entropy": len(high),
        "mean_anthropomorphic_mass": frame.anthropomorphic_mass.astype(np.float64).mean(),
        "mean_reasoning_mass": frame.reasoning_mass.astype(np.float64).mean(),
        "mean_anthropomorphic_mass_high_entropy": high.anthropomorphic_mass.astype(float).mean(),
        "mean_reasoning_mass_high_entropy": high.reasoning_mass.astype(np.float64).mean(),
        "sampled_anthropomorphic_share": np.mean(frame.category == "anthropomorphic"),
        "sampled_anthropomorphic_share_high_entropy": np.mean(high.category == "anthropomorphic"),
        "sampled_reasoning_share_high_entropy": np.mean(high.category == "reasoning"),
    }


def test_analyses_pipeline_tables_and_figures(tmp_path, caplog):
    catalog = tmp_catalog(tmp_path)
    layout = StudyLayout(
        runs=tuple(
            RunSpec(name=r, role=c["role"], checkpoint_root="x", steps=STEPS)
            for r, c in RUNS.items()
        ),
        num_shards=1,
    )
    summary, pass1 = [], []
    for run, (a, b) in PLANTED.items():
        for step in STEPS:
            catalog[f"{run}.step_{step}.sequences"] = MemoryDataset(
                sequences(CORRECT[(run, step)]), copy_mode="assign"
            )
            old = (run, step) == ("b", 0)  # generated before the mass columns existed
            catalog[f"{run}.step_{step}.token_records"] = MemoryDataset(
                merged_records(step + len(run), with_mass=not old), copy_mode="assign"
            )
            h = ENTROPY[step]
            summary.append({"run": run, "step": step, "n_tokens": 1000, "mean_entropy": h,
                            "n_high_entropy_anthropomorphic": step // 8})  # fmt: skip
            pass1.append({"run": run, "step": step, "pass1": b - a * np.exp(h),
                          "pass1_source": "csv"})  # fmt: skip
    catalog["summary_by_step"] = MemoryDataset(pd.DataFrame(summary))
    catalog["pass1_for_figures"] = MemoryDataset(pd.DataFrame(pass1))
    catalog["params:analyses"] = MemoryDataset({"reference_run": "a", "dpi": 40})
    catalog["params:aggregation"] = MemoryDataset({"lexicon": {"anthropomorphic": ["wait"]}})
    catalog["params:reporting"] = MemoryDataset({"strict": False})
    catalog["params:runs"] = MemoryDataset(RUNS)
    catalog["params:metrics"] = MemoryDataset({"runs": {}})  # no W&B source: no trainer entropy
    catalog["params:generation"] = MemoryDataset(
        {"temperature": 1.0, "samples_per_prompt": 4, "max_new_tokens": 8}
    )
    catalog["pass1"] = MemoryDataset(pd.DataFrame(pass1))
    SequentialRunner().run(create_pipeline(layout, params={}), catalog)

    table = catalog.load("pass_at_k")
    assert len(table) == 6 * 4
    for (run, step), correct in CORRECT.items():
        got = table[(table.run == run) & (table.step == step)].sort_values("k")
        expected = [
            np.mean([1 - comb(4 - c, k) / comb(4, k) for c in correct]) for k in range(1, 5)
        ]
        np.testing.assert_allclose(got["pass_at_k"], expected, atol=1e-12)

    fit = catalog.load("entropy_performance_fit").set_index("run")
    for run, (a, b) in PLANTED.items():
        assert fit.loc[run, "a"] == pytest.approx(a, abs=1e-9)
        assert fit.loc[run, "b"] == pytest.approx(b, abs=1e-9)
        assert fit.loc[run, "ceiling"] == pytest.approx(b - a, abs=1e-9)
        assert fit.loc[run, "n_steps"] == 3 and fit.loc[run, "pass1_source"] == "csv"

    comparison = catalog.load("runs_comparison")
    b16 = comparison[(comparison.run == "b") & (comparison.step == 16)].iloc[0]
    assert b16["anthropomorphic_per_1k_tokens"] == pytest.approx(2.0)
    expected_delta = (1.1 - 0.2 * np.exp(0.6)) - (0.9 - 0.1 * np.exp(0.6))
    assert b16["delta_pass1"] == pytest.approx(expected_delta, abs=1e-12)
    assert b16["pass_at_max_k"] == pytest.approx(1.0) and b16["max_k"] == 4
    assert b16["delta_pass_at_max_k"] == pytest.approx(0.0)

    trainer = catalog.load("trainer_entropy")
    assert len(trainer) == 6 and trainer["trainer_entropy"].isna().all()
    assert trainer["hed_mean_entropy"].tolist() == pytest.approx([1.2, 0.9, 0.6] * 2)

    propensity = catalog.load("hedging_propensity_by_step").set_index(["run", "step"])
    assert len(propensity) == 6
    for run in RUNS:
        for step in STEPS:
            row = propensity.loc[(run, step)]
            if (run, step) == ("b", 0):
                assert not row["mass_recorded"] and np.isnan(row["mean_anthropomorphic_mass"])
                continue
            assert row["mass_recorded"]
            for column, value in expected_propensity(merged_records(step + len(run))).items():
                assert row[column] == pytest.approx(value, rel=1e-12), (run, step, column)
    lines = [r.getMessage() for r in caplog.records if "anthropomorphic_mass" in r.getMessage()]
    assert lines == [
        "b.step_0: its token records have no anthropomorphic_mass / reasoning_mass (generated "
        "before HED recorded them): hedging_propensity_by_step leaves the mass columns empty; "
        "`kedro hed refresh-mass` adds them without re-sampling"
    ]

    for name in ("pass_at_k_png", "entropy_performance_fit_png", "runs_comparison_png",
                 "hedging_propensity_png"):  # fmt: skip
        path = Path(catalog.get(name)._get_load_path())
        with Image.open(path) as image:
            assert image.size[0] > 100 and image.size[1] > 80, name


def test_the_comparison_takes_the_mismatch_measures_only():
    from hed.pipelines.analyses.nodes import build_runs_comparison

    summary = pd.DataFrame(
        {
            "run": ["a"],
            "step": [0],
            "n_tokens": [10],
            "mean_entropy": [1.0],
            "n_high_entropy_anthropomorphic": [1],
        }
    )
    mismatch = pd.DataFrame(
        {
            "run": ["a", "a"],
            "step": [0, 0],
            "subset": ["all", "other"],
            "n_tokens": [10, 8],
            "kl_k3": [0.002, 0.001],
            "ratio_outside_share": [0.0, 0.0],
            "ratio_low": [0.5, 0.5],
        }
    )
    pass1 = pd.DataFrame({"run": ["a"], "step": [0], "pass1": [0.5]})
    out = build_runs_comparison(summary, pass1, pd.DataFrame(), {}, {"a": {}}, mismatch=mismatch)
    # params:runs as the pre-run check hands it: the same table (reference = the first run)
    layout = StudyLayout(runs=(RunSpec("a", "single", "x", (0,)),), num_shards=1)
    typed = build_runs_comparison(summary, pass1, pd.DataFrame(), {}, layout, mismatch=mismatch)
    pd.testing.assert_frame_equal(typed, out)
    assert out["mismatch_kl_k3"].tolist() == [0.002]
    assert "mismatch_ratio_low" not in out and "mismatch_n_tokens" not in out
    assert out["anthropomorphic_per_1k_tokens"].tolist() == [100.0]


def test_the_nodes_give_the_same_from_the_dict_and_the_parsed_section(caplog):
    from hed.config.analysis_params import analyses_params
    from hed.pipelines.analyses import nodes

    raw = {"reference_run": "b", "dpi": 30, "trainer_entropy": {"metric_key": "t/H",
           "tolerance_nats": 0.25}}  # fmt: skip
    parsed = analyses_params(raw)
    summary = pd.DataFrame({"run": ["a", "b"], "step": [0, 0], "n_tokens": [10, 10],
                            "mean_entropy": [1.0, 1.5],
                            "n_high_entropy_anthropomorphic": [1, 2]})  # fmt: skip
    pass1 = pd.DataFrame({"run": ["a", "b"], "step": [0, 0], "pass1": [0.5, 0.25]})
    comparisons = [
        nodes.build_runs_comparison(summary, pass1, pd.DataFrame(), source, RUNS)
        for source in (raw, parsed)
    ]
    pd.testing.assert_frame_equal(*comparisons)
    assert set(comparisons[0]["reference_run"]) == {"b"}
    assert comparisons[0].set_index("run").loc["a", "delta_pass1"] == pytest.approx(0.25)
    trainer = pd.DataFrame({"run": ["a", "b"], "step": [0, 0], "trainer_entropy": [1.2, 1.0]})
    generation = {"temperature": 1.0, "samples_per_prompt": 4, "max_new_tokens": 8}
    tables = [
        nodes.tabulate_trainer_entropy(summary, generation, s, trainer) for s in (raw, parsed)
    ]
    pd.testing.assert_frame_equal(*tables)
    assert tables[0]["metric_key"].tolist() == ["t/H", "t/H"]
    assert tables[0]["within_tolerance"].tolist() == [True, False]  # |0.2| ≤ 0.25 < |−0.5|
    for source in (raw, parsed):
        assert nodes.plot_runs_comparison_png(comparisons[0], source).dpi == 30


def test_trainer_entropy_is_the_same_from_the_parsed_metrics_and_the_raw_dict(monkeypatch):
    from hed.pass1 import wandb_online
    from hed.pass1.config import metrics_params
    from hed.pipelines.analyses.nodes import fetch_trainer_entropy
    from tests.pass1.test_pass1_sources import FakeApi, FakeRun

    step_key = "training/global_step"
    rows = [{"_step": s, step_key: s, "actor/entropy": 1.0 / (s + 1)} for s in (0, 10, 20)]
    api = FakeApi({"ent/proj/abc": FakeRun(rows)})
    monkeypatch.setattr(wandb_online, "default_api_factory", lambda **kwargs: api)
    raw = {"runs": {"r": {"sources": {"wandb": {"run": "ent/proj/abc"}}}}}
    from_raw = fetch_trainer_entropy(raw, {}, pd.DataFrame(), run="r")
    from_parsed = fetch_trainer_entropy(metrics_params(raw), {}, pd.DataFrame(), run="r")
    pd.testing.assert_frame_equal(from_raw, from_parsed)
    assert from_parsed["step"].tolist() == [0, 10, 20]
    assert from_parsed["trainer_entropy"].tolist() == [1.0, 1 / 11, 1 / 21]
    # a run without a W&B source: no row, from either
    assert fetch_trainer_entropy(metrics_params(raw), {}, pd.DataFrame(), run="other").empty
