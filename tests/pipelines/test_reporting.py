"""Reporting pipeline: Figure 2/3 tables against independent counts, PNGs, strict mode,
resolved_config (with the provenance hooks of ``tests/test_hooks.py``).

Inputs are hand-made: merged-record-like token rows (run, step, word, category, prob,
is_high_entropy, topk words/probs) from which the test derives ``summary_by_step`` and
``token_probability_mass_high_entropy`` the way the aggregation contract defines them; the
expected values are then computed again from the token rows with plain Python loops.
"""

from __future__ import annotations

import copy
import logging
from collections import defaultdict
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
import yaml
from kedro.framework.hooks.manager import _create_hook_manager
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline
from kedro.runner import SequentialRunner

from hed.errors import ConfigError, InputDataError
from hed.hooks import ProvenanceHooks
from hed.io import provenance
from hed.pipelines.reporting import create_pipeline
from hed.pipelines.reporting.nodes import (
    FIGURE2_COLUMNS,
    FIGURE3_COLUMNS,
    build_figure2_table,
    build_figure3_table,
    build_resolved_config,
    figure2_dataset,
    plan_figures,
    plot_figure2_png,
    rank_words,
)
from hed.report.figures import FIGURE2_MEASURES, figure3_size, figure_size

REPO = Path(__file__).resolve().parents[2]
RUNS = {
    "dapo_with_clip": {
        "role": "with_clip",
        "checkpoint_root": "/ckpt/with",
        "steps": [20, 80, 200],
    },
    "dapo_without_clip": {
        "role": "without_clip",
        "checkpoint_root": "/ckpt/without",
        "steps": [20, 80, 200],
    },
}
LEXICON = {
    "wait": "anthropomorphic",
    "perhaps": "anthropomorphic",
    "hmm": "anthropomorphic",
    "so": "reasoning",
    "let": "reasoning",
    "then": "reasoning",
    "but": "reasoning",
}
VOCAB = [
    *LEXICON,
    "the",
    "x",
    "we",
    "is",
    "number",
    "answer",
    "of",
    "a",
    "to",
    "and",
    "value",
    "sum",
    "it",
    "this",
    "that",
    "in",
    "for",
    "on",
    "be",
    "are",
    "",
]
REPORTING = {
    "strict": True,
    "top_n_words": 20,
    "fig3": {"steps": [20, 80, 200]},
    "figure2": {"panel_size": [3.5, 2.8], "dpi": 60},
    "figure3": {"panel_size": [2.6, 3.6], "dpi": 60},
}
REPORTING_ENTRIES = (
    "figure2_paper_reproduction",
    "figure2_single_run_diagnostic",
    "figure3_table",
    "figure2_png",
    "figure3_png",
    "resolved_config",
    "final_artifacts",
)


# ------------------------------------------------------------------ hand-made inputs


def make_records(runs=RUNS, seed=0, n_tokens=400) -> pd.DataFrame:
    """Merged-record-like token rows: run, step, word, category, prob, is_high_entropy,
    topk_words, topk_probs (is_special rows excluded already)."""
    rng = np.random.default_rng(seed)
    rows = []
    for run, cfg in runs.items():
        for step in cfg["steps"]:
            words = rng.choice(VOCAB, size=n_tokens, p=_zipf(len(VOCAB)))
            probs = rng.uniform(0.02, 1.0, size=n_tokens).round(4)
            high = rng.random(n_tokens) < 0.25
            for word, prob, is_high in zip(words, probs, high, strict=True):
                alts = rng.choice(VOCAB, size=3)
                alt_p = np.sort(rng.dirichlet(np.ones(3)) * (1 - prob))[::-1]
                rows.append(
                    {
                        "run": run,
                        "step": step,
                        "word": str(word),
                        "category": LEXICON.get(str(word), "other"),
                        "prob": float(prob),
                        "is_high_entropy": bool(is_high),
                        "topk_words": [str(word), *map(str, alts)],
                        "topk_probs": [float(prob), *map(float, alt_p)],
                    }
                )
    return pd.DataFrame(rows)


def _zipf(n: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1)
    return weights / weights.sum()


def summary_from(records: pd.DataFrame) -> pd.DataFrame:
    """``summary_by_step`` per the aggregation contract (the columns reporting reads + the rest)."""
    rows = []
    for (run, step), g in records.groupby(["run", "step"], sort=True):
        high = g[g["is_high_entropy"]]
        rows.append(
            {
                "run": run,
                "step": step,
                "n_sequences": 8,
                "n_tokens": len(g),
                "mean_response_length": len(g) / 8,
                "mean_entropy": 1.0,
                "threshold": 0.5,
                "n_high_entropy": len(high),
                "n_high_entropy_anthropomorphic": int(
                    (high["category"] == "anthropomorphic").sum()
                ),
                "n_high_entropy_reasoning": int((high["category"] == "reasoning").sum()),
                "n_high_entropy_other": int((high["category"] == "other").sum()),
                "pass1_generated": 0.1,
            }
        )
    return pd.DataFrame(rows)


def token_mass_from(records: pd.DataFrame) -> pd.DataFrame:
    """``token_probability_mass_high_entropy`` per the aggregation contract (pandas groupby)."""
    high = records[records["is_high_entropy"] & (records["word"] != "")]
    parts = []
    for (run, step), g in high.groupby(["run", "step"], sort=True):
        words = g.groupby("word").agg(
            category=("category", "first"), count=("prob", "size"), sampled_prob_sum=("prob", "sum")
        )
        topk = g.explode(["topk_words", "topk_probs"])
        topk = (
            topk[topk["topk_words"] != ""].groupby("topk_words")["topk_probs"].sum().astype(float)
        )
        words["topk_mass"] = topk.reindex(words.index).fillna(0.0)
        words["count_share"] = words["count"] / words["count"].sum()
        words["sampled_prob_share"] = words["sampled_prob_sum"] / words["sampled_prob_sum"].sum()
        words["topk_mass_share"] = words["topk_mass"] / topk.sum()
        parts.append(words.reset_index().assign(run=run, step=step))
    columns = [
        "run",
        "step",
        "word",
        "category",
        "count",
        "count_share",
        "sampled_prob_sum",
        "sampled_prob_share",
        "topk_mass",
        "topk_mass_share",
    ]
    return pd.concat(parts, ignore_index=True)[columns]


def pass1_for_figures(runs=RUNS, source="wandb", missing=()) -> pd.DataFrame:
    rows = [
        {
            "run": run,
            "step": step,
            "pass1": np.nan if (run, step) in missing else 0.2 + step / 1000,
            "pass1_source": source,
            "has_checkpoint": True,
        }
        for run, cfg in runs.items()
        for step in cfg["steps"]
    ]
    return pd.DataFrame(rows)


def thresholds_from(records: pd.DataFrame) -> pd.DataFrame:
    rows = [
        {
            "run": run,
            "step": step,
            "n_tokens": len(g),
            "top_entropy_frac": 0.2,
            "n_high_entropy": int(g["is_high_entropy"].sum()),
            "threshold": 0.5,
            "p50": 0.1,
            "p80": 0.4,
            "p90": 0.8,
            "p95": 1.1,
            "frac_below_0_01": 0.5,
            "mean_entropy": 0.3,
        }
        for (run, step), g in records.groupby(["run", "step"], sort=True)
    ]
    return pd.DataFrame(rows)


def checkpoints_for(runs=RUNS) -> dict:
    return {
        run: {
            "role": cfg["role"],
            "checkpoint_root": cfg["checkpoint_root"],
            "steps": {
                str(step): {
                    "model_dir": f"{cfg['checkpoint_root']}/global_step_{step}/actor_hf",
                    "config_sha256": f"c{step}",
                    "weights_index_sha256": f"w{step}",
                }
                for step in cfg["steps"]
            },
        }
        for run, cfg in runs.items()
    }


# ------------------------------------------------------------------ catalog and runs


def reporting_catalog_config(root: Path) -> dict:
    """The reporting section of conf/base/catalog.yml with every path moved under ``root``."""
    text = (REPO / "conf" / "base" / "catalog.yml").read_text()
    conf = yaml.safe_load(text.replace("${globals:data_root}", "data"))  # base's data root
    entries = {name: copy.deepcopy(conf[name]) for name in REPORTING_ENTRIES}
    for entry in entries.values():
        entry["filepath"] = str(root / entry["filepath"])
    return entries


def input_catalog_config(root: Path) -> dict:
    """Versioned files standing in for the upstream pipelines' outputs."""

    def csv(name):
        return {
            "type": "pandas.CSVDataset",
            "filepath": str(root / f"data/04_feature/{name}.csv"),
            "versioned": True,
            "save_args": {"index": False},
        }

    return {
        "summary_by_step": csv("summary_by_step"),
        "token_probability_mass_high_entropy": csv("token_probability_mass_high_entropy"),
        "pass1_for_figures": csv("pass1_for_figures"),
        "entropy_thresholds": csv("entropy_thresholds"),
        "checkpoints": {
            "type": "json.JSONDataset",
            "filepath": str(root / "data/02_intermediate/checkpoints.json"),
            "versioned": True,
        },
    }


def make_catalog(root: Path, params: dict, save_version: str) -> DataCatalog:
    catalog = DataCatalog.from_config(
        {**reporting_catalog_config(root), **input_catalog_config(root)}, save_version=save_version
    )
    catalog["parameters"] = params
    for key, value in params.items():
        catalog[f"params:{key}"] = value
    return catalog


def write_inputs(
    root: Path,
    records: pd.DataFrame,
    pass1: pd.DataFrame,
    runs=RUNS,
    version="2025-01-01T00.00.00.000Z",
) -> None:
    """Save one version of every upstream input (as the upstream pipelines would)."""
    catalog = DataCatalog.from_config(input_catalog_config(root), save_version=version)
    catalog.save("summary_by_step", summary_from(records))
    catalog.save("token_probability_mass_high_entropy", token_mass_from(records).drop(columns=[]))
    catalog.save("pass1_for_figures", pass1)
    catalog.save("entropy_thresholds", thresholds_from(records))
    catalog.save("checkpoints", checkpoints_for(runs))


def run_pipeline(
    pipeline: Pipeline, catalog: DataCatalog, *, env: str | None, run_id: str, project: Path
) -> None:
    """Run ``pipeline`` the way a session does: before_pipeline_run, then the runner with hooks."""
    hooks = ProvenanceHooks()
    manager = _create_hook_manager()
    manager.register(hooks)
    run_params = {
        "env": env,
        "run_id": run_id,
        "project_path": str(project),
        "pipeline_names": ["reporting"],
    }
    manager.hook.before_pipeline_run(run_params=run_params, pipeline=pipeline, catalog=catalog)
    SequentialRunner().run(pipeline, catalog, manager, run_id=run_id)


def run_reporting(
    root: Path,
    runs=RUNS,
    reporting=REPORTING,
    *,
    version="2025-01-02T00.00.00.000Z",
    env="qae_repro",
):
    params = {"runs": runs, "reporting": reporting}
    catalog = make_catalog(root, params, save_version=version)
    run_pipeline(create_pipeline(params=params), catalog, env=env, run_id=version, project=root)
    return catalog


@pytest.fixture(autouse=True)
def _no_git(monkeypatch):
    """Tests never run git: the project's commit is stubbed."""
    monkeypatch.setattr(provenance, "git_state", lambda path: {"commit": "0" * 40, "dirty": False})


@pytest.fixture(scope="module")
def records() -> pd.DataFrame:
    return make_records()


# ------------------------------------------------------------------ Figure 2 and 3 tables


def plan(records, runs=RUNS, reporting=REPORTING, pass1=None):
    return plan_figures(
        summary_from(records),
        token_mass_from(records),
        pass1 if pass1 is not None else pass1_for_figures(runs),
        runs,
        reporting,
    )


def test_figure2_table_counts_equal_an_independent_count_of_the_records(records):
    table = build_figure2_table(summary_from(records), pass1_for_figures(), plan(records))
    assert list(table.columns) == FIGURE2_COLUMNS
    expected = defaultdict(
        lambda: [0, 0, 0]
    )  # (run, step) -> [n_tokens, n_high, n_anthropomorphic]
    for row in records.itertuples():
        cell = expected[(row.run, row.step)]
        cell[0] += 1
        cell[1] += int(row.is_high_entropy)
        cell[2] += int(row.is_high_entropy and row.category == "anthropomorphic")
    assert len(table) == len(expected) == 6
    for row in table.itertuples():
        n_tokens, n_high, n_anthropomorphic = expected[(row.run, row.step)]
        assert (row.n_tokens, row.n_high_entropy, row.anthropomorphic_count) == (
            n_tokens,
            n_high,
            n_anthropomorphic,
        )
        assert row.anthropomorphic_per_1k_high_entropy == pytest.approx(
            1000 * n_anthropomorphic / n_high
        )
        assert row.pass1 == pytest.approx(0.2 + row.step / 1000) and row.pass1_source == "wandb"
        assert row.role == RUNS[row.run]["role"]
    # panel order: without_clip first, then with_clip; steps ascending
    assert table["run"].tolist() == ["dapo_without_clip"] * 3 + ["dapo_with_clip"] * 3
    assert table["step"].tolist() == [20, 80, 200] * 2


def test_figure2_table_leaves_pass1_empty_where_the_step_has_none(records):
    pass1 = pass1_for_figures(missing={("dapo_with_clip", 80)})
    p = plan(records, reporting={**REPORTING, "strict": False}, pass1=pass1)
    table = build_figure2_table(summary_from(records), pass1, p)
    row = table[(table["run"] == "dapo_with_clip") & (table["step"] == 80)].iloc[0]
    assert np.isnan(row["pass1"])
    assert any("no pass@1 at step(s) [80]" in o for o in p["omissions"])


def test_figure3_shares_equal_an_independent_computation_and_ranks_follow_them(records):
    table = build_figure3_table(token_mass_from(records), plan(records))
    assert list(table.columns) == FIGURE3_COLUMNS
    for (run, step), group in table.groupby(["run", "step"]):
        prob_by_word: dict[str, float] = defaultdict(float)
        for row in records.itertuples():
            if row.run == run and row.step == step and row.is_high_entropy and row.word:
                prob_by_word[row.word] += row.prob
        total = sum(prob_by_word.values())
        expected = sorted(((-p / total, w) for w, p in prob_by_word.items()))[:20]
        assert group["rank"].tolist() == list(range(1, len(expected) + 1))
        assert group["word"].tolist() == [w for _, w in expected]
        np.testing.assert_allclose(
            group["sampled_prob_share"], [-s for s, _ in expected], rtol=1e-12
        )
        assert group["category"].tolist() == [LEXICON.get(w, "other") for _, w in expected]
        assert "" not in group["word"].tolist()
    assert sorted(table["step"].unique()) == [20, 80, 200]


def test_figure3_leaves_out_words_only_seen_among_the_topk_alternatives(records):
    mass = token_mass_from(records)
    extra = mass.iloc[[0]].assign(
        word="zzz", count=0, count_share=0.0, sampled_prob_sum=0.0, sampled_prob_share=0.0
    )
    few = pd.concat([mass[mass["word"].isin(["wait", "so"])], extra], ignore_index=True)
    table = build_figure3_table(few, plan(records))
    assert "zzz" not in set(table["word"])
    assert set(table["word"]) == {"wait", "so"}


def test_rank_ties_break_by_count_then_word():
    rows = pd.DataFrame(
        {
            "word": ["b", "a", "c", "d", "e"],
            "count": [5, 5, 9, 1, 1],
            "sampled_prob_share": [0.2, 0.2, 0.2, 0.3, 0.1],
        }
    )
    ranked = rank_words(rows, top_n=4)
    assert ranked["word"].tolist() == ["d", "c", "a", "b"]
    assert ranked["rank"].tolist() == [1, 2, 3, 4]


def test_figure2_table_name_follows_the_roles():
    assert figure2_dataset(RUNS) == "figure2_paper_reproduction"
    assert figure2_dataset({"demo": {"role": "single"}}) == "figure2_single_run_diagnostic"
    assert (
        figure2_dataset({"a": {"role": "with_clip"}, "b": {"role": "with_clip"}})
        == "figure2_single_run_diagnostic"
    )


# ------------------------------------------------------------------ strict mode


def single_role_runs():
    return {"dapo_with_clip": RUNS["dapo_with_clip"]}


def test_strict_fig3_steps_missing_is_an_error_naming_it(records):
    with pytest.raises(ConfigError, match=r"reporting\.fig3\.steps is not set"):
        plan(records, reporting={**REPORTING, "fig3": {"steps": None}})


def test_strict_one_role_is_an_error_naming_the_missing_role(records):
    runs = single_role_runs()
    with pytest.raises(ConfigError, match=r"role pair: no run with role without_clip"):
        plan(records[records["run"] == "dapo_with_clip"], runs=runs, pass1=pass1_for_figures(runs))


def test_strict_fig3_step_without_records_is_an_error_naming_the_run_and_step(records):
    with pytest.raises(
        ConfigError,
        match=r"run dapo_without_clip: Figure 3 step\(s\) \[150\] have no high-entropy word",
    ):
        plan(records, reporting={**REPORTING, "fig3": {"steps": [20, 150]}})


def test_strict_run_without_pass1_is_an_error(records):
    pass1 = pass1_for_figures(missing={("dapo_with_clip", s) for s in (20, 80, 200)})
    with pytest.raises(
        ConfigError,
        match=r"run dapo_with_clip: no pass@1 at any of its steps \(figure source: wandb\)",
    ):
        plan(records, pass1=pass1)


def test_strict_lists_everything_missing_in_one_message(records):
    runs = single_role_runs()
    with pytest.raises(ConfigError) as info:
        plan(
            records[records["run"] == "dapo_with_clip"],
            runs=runs,
            reporting={**REPORTING, "fig3": {"steps": None}},
            pass1=pass1_for_figures(runs).assign(pass1=np.nan),
        )
    message = str(info.value)
    assert "\n" not in message
    for part in (
        "(1) role pair",
        "no pass@1 at any of its steps",
        "reporting.fig3.steps is not set",
    ):
        assert part in message


def test_strict_writes_nothing_when_it_fails(tmp_path, records):
    write_inputs(tmp_path, records, pass1_for_figures())
    with pytest.raises(ConfigError, match="fig3"):
        run_reporting(tmp_path, reporting={**REPORTING, "fig3": {"steps": None}})
    assert not (tmp_path / "data" / "08_reporting").exists()


@pytest.mark.parametrize(
    ("situation", "omission"),
    [
        ("fig3_steps_missing", "reporting.fig3.steps is not set"),
        ("one_role", "role pair: no run with role without_clip"),
        ("fig3_step_without_records", "Figure 3 step(s) [150] have no high-entropy word records"),
    ],
)
def test_non_strict_draws_what_exists_and_lists_the_omission(
    tmp_path, records, caplog, situation, omission
):
    runs, reporting = RUNS, {**REPORTING, "strict": False}
    if situation == "fig3_steps_missing":
        reporting["fig3"] = {"steps": None}
    elif situation == "one_role":
        runs = single_role_runs()
        records = records[records["run"] == "dapo_with_clip"]
    else:
        reporting["fig3"] = {"steps": [20, 150]}
    write_inputs(tmp_path, records, pass1_for_figures(runs), runs)
    with caplog.at_level(logging.WARNING, logger="hed.pipelines.reporting.nodes"):
        catalog = run_reporting(tmp_path, runs=runs, reporting=reporting)
    resolved = catalog.load("resolved_config")
    assert any(omission in item for item in resolved["omissions"]), resolved["omissions"]
    assert omission in caplog.text
    assert not catalog.load("figure3_table").empty
    figure2 = figure2_dataset(runs)
    assert len(catalog.load(figure2)) == 3 * len(runs)
    for png in ("figure2_png", "figure3_png"):
        assert Path(provenance.describe_dataset(catalog, png)["path"]).is_file()
    if situation == "fig3_steps_missing":
        assert resolved["figures"]["fig3_steps"] == [20, 80, 200]
        assert resolved["figures"]["fig3_steps_from"] == "fallback"


def test_non_strict_without_any_summary_row_refuses_an_empty_figure2_table(tmp_path, records):
    write_inputs(tmp_path, records, pass1_for_figures())
    catalog = make_catalog(
        tmp_path, {"runs": RUNS, "reporting": REPORTING}, "2025-01-03T00.00.00.000Z"
    )
    catalog["summary_by_step"] = summary_from(records).iloc[0:0]
    catalog["token_probability_mass_high_entropy"] = token_mass_from(records).iloc[0:0]
    reporting = {**REPORTING, "strict": False, "fig3": {"steps": None}}
    catalog["params:reporting"] = reporting
    catalog["parameters"] = {"runs": RUNS, "reporting": reporting}
    with pytest.raises(InputDataError) as refused:
        run_pipeline(
            create_pipeline(params={"runs": RUNS}),
            catalog,
            env=None,
            run_id="2025-01-03T00.00.00.000Z",
            project=tmp_path,
        )
    assert str(refused.value) == (
        "summary_by_step has no row of run(s) dapo_without_clip, dapo_with_clip, so the Figure 2 "
        "table would be empty; write it again with the aggregation pipeline "
        "(kedro run --pipelines aggregation,reporting)"
    )
    assert not catalog.exists("figure2_paper_reproduction")


# ------------------------------------------------------------------ pipeline runs, resolved_config


def _files(root: Path, pattern: str) -> list[Path]:
    return sorted(root.glob(pattern))


def test_pair_run_writes_the_paper_table_pngs_of_the_configured_size_and_resolved_config(
    tmp_path, records
):
    write_inputs(tmp_path, records, pass1_for_figures())
    catalog = run_reporting(tmp_path)
    tables = tmp_path / "data" / "08_reporting" / "tables"
    assert [p.name for p in _files(tables, "figure2_*/*/*.csv")] == [
        "figure2_paper_reproduction.csv"
    ]
    assert len(_files(tables, "figure3_high_entropy_token_probability.csv/*/*.csv")) == 1
    for name, n_cols, n_rows, style, size in (
        ("figure2_png", 2, 1, REPORTING["figure2"], figure_size),
        ("figure3_png", 3, 2, REPORTING["figure3"], figure3_size),
    ):
        path = Path(provenance.describe_dataset(catalog, name)["path"])
        image = mpimg.imread(path)
        width, height = size(n_cols, n_rows, style["panel_size"])
        assert image.shape[:2] == (round(height * style["dpi"]), round(width * style["dpi"]))
        assert float(image[..., :3].var()) > 0.01
    figure2 = catalog.load("figure2_paper_reproduction")
    assert (
        figure2["anthropomorphic_count"].tolist()
        == build_figure2_table(summary_from(records), pass1_for_figures(), plan(records))[
            "anthropomorphic_count"
        ].tolist()
    )


def test_single_run_configuration_writes_the_single_run_table(tmp_path):
    runs = {"smollm2_demo": {"role": "single", "checkpoint_root": "/ckpt/demo", "steps": [0]}}
    records = make_records(runs, seed=3)
    write_inputs(tmp_path, records, pass1_for_figures(runs, source="generated"), runs)
    reporting = {**REPORTING, "strict": False, "fig3": {"steps": [0]}}
    catalog = run_reporting(tmp_path, runs=runs, reporting=reporting, env=None)
    tables = tmp_path / "data" / "08_reporting" / "tables"
    assert [p.name for p in _files(tables, "figure2_*/*/*.csv")] == [
        "figure2_single_run_diagnostic.csv"
    ]
    assert catalog.load("resolved_config")["figures"]["figure2_kind"] == "single_run_diagnostic"


def test_resolved_config_records_parameters_inputs_versions_checkpoints_and_packages(
    tmp_path, records
):
    write_inputs(tmp_path, records, pass1_for_figures(), version="2025-01-01T00.00.00.000Z")
    write_inputs(
        tmp_path, records, pass1_for_figures(), version="2025-01-01T12.00.00.000Z"
    )  # the latest
    catalog = run_reporting(tmp_path, version="2025-01-02T00.00.00.000Z")
    resolved = catalog.load("resolved_config")
    assert resolved["env"] == "qae_repro" and resolved["run_id"] == "2025-01-02T00.00.00.000Z"
    assert resolved["git_commit"] == "0" * 40 and resolved["provenance_recorded"] is True
    assert (
        resolved["parameters"]["reporting"] == REPORTING and resolved["parameters"]["runs"] == RUNS
    )
    assert resolved["strict"] is True and resolved["omissions"] == []
    for package in (
        "hed",
        "kedro",
        "torch",
        "transformers",
        "pyarrow",
        "pandas",
        "matplotlib",
        "wandb",
    ):
        assert package in resolved["packages"]
    assert resolved["packages"]["kedro"] is not None
    for name in (
        "summary_by_step",
        "token_probability_mass_high_entropy",
        "pass1_for_figures",
        "entropy_thresholds",
        "checkpoints",
    ):
        info = resolved["inputs"][name]
        assert info["version"] == "2025-01-01T12.00.00.000Z", name
        assert Path(info["path"]).is_file() and "2025-01-01T12.00.00.000Z" in info["path"]
    assert resolved["inputs"]["summary_by_step"]["coverage"]["steps"] == {
        r: [20, 80, 200] for r in sorted(RUNS)
    }
    step = resolved["checkpoints"]["dapo_with_clip"]["steps"]["80"]
    assert step == {
        "model_dir": "/ckpt/with/global_step_80/actor_hf",
        "config_sha256": "c80",
        "weights_index_sha256": "w80",
    }
    assert {t["step"] for t in resolved["thresholds"]} == {20, 80, 200}
    artifacts = resolved["artifacts"]
    assert set(artifacts) == {
        "figure2_paper_reproduction",
        "figure3_table",
        "figure2_png",
        "figure3_png",
        "resolved_config",
    }
    for info in artifacts.values():
        assert info["version"] == "2025-01-02T00.00.00.000Z" and Path(info["path"]).is_file()


def test_resolved_config_without_the_hooks_says_provenance_was_not_recorded(records):
    resolved = build_resolved_config(
        figure_plan=plan(records),
        checkpoints=checkpoints_for(),
        entropy_thresholds=thresholds_from(records),
        summary_by_step=summary_from(records),
        token_probability_mass_high_entropy=token_mass_from(records),
        pass1_for_figures=pass1_for_figures(),
        parameters={"runs": RUNS},
        run_context={},
        artifacts=("figure2_png",),
    )
    assert resolved["provenance_recorded"] is False
    assert resolved["artifacts"] == {"figure2_png": None}


def test_pipeline_nodes_and_datasets():
    pipeline = create_pipeline(params={"runs": RUNS})
    assert {n.name for n in pipeline.nodes} == {
        "plan_figures",
        "build_figure2_table",
        "build_figure3_table",
        "plot_figure2",
        "plot_figure3",
        "build_resolved_config",
    }
    assert pipeline.inputs() == {
        "summary_by_step",
        "token_probability_mass_high_entropy",
        "pass1_for_figures",
        "entropy_thresholds",
        "checkpoints",
        "params:runs",
        "params:reporting",
        "parameters",
        "run_context",
    }
    assert pipeline.all_outputs() == {
        "figure_plan",
        "figure2_paper_reproduction",
        "figure3_table",
        "figure2_png",
        "figure3_png",
        "resolved_config",
    }
    assert all("reporting" in n.tags for n in pipeline.nodes)


def test_base_and_qae_repro_reporting_parameters():
    base = yaml.safe_load((REPO / "conf/base/parameters_reporting.yml").read_text())
    qae = yaml.safe_load((REPO / "conf/qae_repro/parameters_reporting.yml").read_text())
    assert base["reporting"]["strict"] is False and qae["reporting"]["strict"] is True
    assert qae["reporting"]["fig3"]["steps"] == [20, 80, 200]
    assert base["reporting"]["top_n_words"] == qae["reporting"]["top_n_words"] == 20
    assert "publish" not in base and "publish" not in qae  # in parameters_publish.yml
    published = yaml.safe_load((REPO / "conf/base/parameters_publish.yml").read_text())
    assert published["publish"]["env_name"] is None


# ------------------------------------------------------------------ Figure 2 measure and slots


@pytest.mark.parametrize("measure", ["count", "per_1k_high_entropy", "per_1k_tokens"])
def test_fig2_measure_is_in_the_plan_and_names_the_axis(records, measure):
    figure_plan = plan(records, reporting={**REPORTING, "fig2_measure": measure})
    assert figure_plan["fig2_measure"] == measure
    table = build_figure2_table(summary_from(records), pass1_for_figures(), figure_plan)
    fig = plot_figure2_png(table, figure_plan, REPORTING)
    labels = {ax.get_ylabel() for ax in fig.axes if ax.get_title()}
    assert labels == {FIGURE2_MEASURES[measure]}


def test_fig2_measure_defaults_to_count_and_refuses_other_values(records):
    assert plan(records)["fig2_measure"] == "count"
    with pytest.raises(ConfigError, match=r"reporting.fig2_measure must be one of count, "):
        plan(records, reporting={**REPORTING, "fig2_measure": "per_token"})
    with pytest.raises(ConfigError, match=r"reporting\.fig2_measure"):
        plan(records, reporting={**REPORTING, "fig2_measure": ["count"]})


def test_fig2_steps_hold_configured_steps_without_summary_rows(records):
    runs = copy.deepcopy(RUNS)
    runs["dapo_with_clip"]["steps"] = [20, 80, 200, 300]  # 300: configured, never aggregated
    figure_plan = plan(records, runs=runs, reporting={**REPORTING, "strict": False})
    assert figure_plan["fig2_steps"] == [20, 80, 200, 300]
    table = build_figure2_table(summary_from(records), pass1_for_figures(), figure_plan)
    fig = plot_figure2_png(table, figure_plan, REPORTING)
    for ax in (ax for ax in fig.axes if ax.get_title()):
        hatched = [p.get_x() + p.get_width() / 2 for p in ax.patches if p.get_hatch()]
        assert hatched == [300.0]  # both panels: the slot is "no data", not a zero


def test_shipped_reporting_parameters_say_count():
    for env in ("base", "qae_repro", "mini_dapo"):
        params = yaml.safe_load((REPO / f"conf/{env}/parameters_reporting.yml").read_text())
        assert params["reporting"]["fig2_measure"] == "count"


def test_the_plan_is_the_same_from_the_parsed_runs_and_the_raw_dict(records):
    """``params:runs`` as the pre-run check hands it (a StudyLayout) plans the same figures."""
    from hed.config.layout import StudyLayout

    parsed = StudyLayout.of(RUNS)
    pass1 = pass1_for_figures(RUNS)
    assert plan(records, runs=parsed, pass1=pass1) == plan(records, runs=RUNS, pass1=pass1)
    assert plan(records, runs=parsed, pass1=pass1)["panels"] == [
        ["dapo_without_clip", "without_clip"], ["dapo_with_clip", "with_clip"]
    ]  # fmt: skip
    assert figure2_dataset(parsed) == figure2_dataset(RUNS) == "figure2_paper_reproduction"


def test_figure_nodes_draw_the_same_png_from_the_raw_dict_and_from_the_parsed_section(
    records, tmp_path
):
    """The pre-run check hands plot_figure*_png a ReportingParams (its figure2/figure3 a
    FigureStyle); a notebook passes the dict: the same size, dpi and pixels either way."""
    from hed.config.params import ReportingParams
    from hed.pipelines.reporting.nodes import plot_figure3_png

    figure_plan = plan(records)
    parsed = ReportingParams.of(REPORTING)
    fig2 = build_figure2_table(summary_from(records), pass1_for_figures(), figure_plan)
    fig3 = build_figure3_table(token_mass_from(records), figure_plan)
    for node, table, style in (
        (plot_figure2_png, fig2, REPORTING["figure2"]),
        (plot_figure3_png, fig3, REPORTING["figure3"]),
    ):
        pngs = []
        for i, reporting in enumerate((REPORTING, parsed)):
            fig = node(table, figure_plan, reporting)
            assert fig.dpi == style["dpi"] == 60
            path = tmp_path / f"{node.__name__}_{i}.png"
            fig.savefig(path, dpi=fig.dpi)
            pngs.append(path.read_bytes())
        assert pngs[0] == pngs[1]
    message = r"^reporting\.figure2\.dpi must be an integer from 10 to 1200, got 0$"
    with pytest.raises(ConfigError, match=message):
        plot_figure2_png(fig2, figure_plan, {**REPORTING, "figure2": {"dpi": 0}})
