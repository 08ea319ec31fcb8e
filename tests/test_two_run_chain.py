"""A with_clip / without_clip study through the whole chain, then a re-plot without checkpoints.

Two runs of three checkpoint steps each (20, 80, 200: the ``qae_repro`` Figure 3 steps, so its
reporting parameters stay as shipped), every checkpoint a different tiny random Llama with the
real SmolLM2 tokenizer. Random weights rarely sample a real word, so each checkpoint's output
layer is biased towards a few lexicon words (" wait", " perhaps", " maybe", " so", " let") and
" the", by a different amount per step: anthropomorphic high-entropy counts are then non-zero
and differ from step to step.

A copy of the project runs ``__default__`` (generation → aggregation → metrics → reporting) in
the ``qae_repro`` environment, with its runs, prompt file, generation size and pass@1 sources
rewritten in the copy's ``conf/qae_repro`` (pass@1: ``generated`` for one run, a CSV written
here for the other). The tables of both figures are checked against counts and shares computed
here from the merged token records (pyarrow, the lexicon of the parameters, the high-entropy set
recomputed from the entropies); the PNGs against the configured pixel size. Then the checkpoint
folders are moved away and ``--pipelines reporting`` must re-plot from the existing records.

The single-run table name (``figure2_single_run_diagnostic``) is covered elsewhere:
``tests/pipelines/test_reporting.py::test_single_run_configuration_writes_the_single_run_table``
and, through the whole chain, ``tests/test_default_run.py::test_both_figures_written``.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from kedro.config import OmegaConfigLoader
from kedro.framework.project import configure_project, pipelines
from kedro.framework.session import KedroSession
from PIL import Image
from transformers import LlamaForCausalLM

from hed.config import session
from hed.report.figures import CATEGORY_COLOURS, figure3_size, figure_size

from .conftest import REPO_ROOT, build_tiny_model

pytestmark = pytest.mark.slow

ENV = "qae_repro"
#: run → role, in panel order (without_clip first).
RUNS = {"tiny_without_clip": "without_clip", "tiny_with_clip": "with_clip"}
STEPS = (20, 80, 200)
#: Words whose tokens the tiny checkpoints are biased towards (first three: anthropomorphic).
BIASED_WORDS = (" wait", " perhaps", " maybe", " so", " let", " the")
#: Logit bias of those tokens per step; larger = the words are sampled more often.
STEP_BIAS = {20: 2.6, 80: 3.0, 200: 3.4}
GENERATION = {
    "num_shards": 2,
    "samples_per_prompt": 2,
    "max_new_tokens": 24,
    "batch_size": 4,
    "dtype": "float32",
    "torch_threads": 1,
}
NUM_PROMPTS = 4
FIGURE_FILES = {
    "figure2_png": "figures/figure2_anthropomorphic_high_entropy_vs_pass1.png",
    "figure3_png": "figures/figure3_high_entropy_token_probability.png",
    "figure2_table": "tables/figure2_paper_reproduction.csv",
    "figure3_table": "tables/figure3_high_entropy_token_probability.csv",
    "resolved_config": "metadata/resolved_config.json",
}


# ------------------------------------------------------------------ set-up


def build_biased_model(dest: Path, tokenizer, *, seed: int, bias: float) -> Path:
    """A tiny random Llama (``build_tiny_model``) whose output favours :data:`BIASED_WORDS`.

    Every input embedding gets the same value in hidden dimension 0, so after the final norm
    that dimension is large and about constant; the output-layer weight of each biased token in
    that dimension then acts as a logit bias of about ``bias`` × that value, while the other
    dimensions keep position-dependent random logits (entropies still vary by position).
    """
    build_tiny_model(dest, tokenizer, seed=seed, scale=20.0)
    model = LlamaForCausalLM.from_pretrained(dest)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 0.1
        for word in BIASED_WORDS:
            (token_id,) = tokenizer.encode(word, add_special_tokens=False)
            model.lm_head.weight[token_id, 0] = bias
    model.save_pretrained(dest)
    return dest


def write_yaml(path: Path, content: dict) -> None:
    path.write_text(yaml.safe_dump(content, sort_keys=False))


#: Where the study writes: `data_root` of conf/qae_repro/globals.yml (one data root per env).
DATA_ROOT = "data/qae_repro"


def make_study(root: Path, tokenizer) -> tuple[Path, Path, dict[int, float]]:
    """Checkpoints under ``root/checkpoints`` and a project copy at ``root/project`` whose
    ``conf/qae_repro`` points at them. Returns (project, checkpoints folder, CSV pass@1)."""
    checkpoints = root / "checkpoints"
    for i, run in enumerate(RUNS):
        for j, step in enumerate(STEPS):
            build_biased_model(
                checkpoints / run / f"global_step_{step}" / "actor_hf",
                tokenizer,
                seed=10 * i + j,
                bias=STEP_BIAS[step],
            )

    project = root / "project"
    shutil.copytree(
        REPO_ROOT / "conf", project / "conf", ignore=shutil.ignore_patterns("credentials*")
    )
    (project / "data/01_raw/prompts").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "data/01_raw/prompts/demo_math.jsonl", project / "data/01_raw/prompts/")
    shutil.copy(REPO_ROOT / "pyproject.toml", project / "pyproject.toml")
    shutil.copy(REPO_ROOT / ".telemetry", project / ".telemetry")

    conf = project / "conf" / ENV
    write_yaml(
        conf / "parameters.yml",
        {
            "runs": {
                run: {
                    "role": role,
                    "checkpoint_root": str(checkpoints / run),
                    "steps": list(STEPS),
                }
                for run, role in RUNS.items()
            }
        },
    )
    generation = yaml.safe_load((conf / "parameters_generation.yml").read_text())
    generation["prompts"]["num_prompts"] = NUM_PROMPTS
    generation["generation"].update(GENERATION)
    write_yaml(conf / "parameters_generation.yml", generation)

    rng = np.random.default_rng(7)
    csv_pass1 = {step: round(float(rng.uniform(0.1, 0.6)), 4) for step in STEPS}
    csv_path = project / "data/01_raw/metrics/tiny_with_clip_pass1.csv"
    csv_path.parent.mkdir(parents=True)
    csv_table = pd.DataFrame({"step": list(csv_pass1), "pass1": list(csv_pass1.values())})
    csv_table.to_csv(csv_path, index=False)
    metrics = yaml.safe_load((conf / "parameters_metrics.yml").read_text())
    metrics["metrics"]["runs"] = {
        "tiny_without_clip": {"sources": {"generated": {}}},
        "tiny_with_clip": {
            "figure_source": "csv",
            "sources": {"csv": {"path": str(csv_path)}, "generated": {}},
        },
    }
    write_yaml(conf / "parameters_metrics.yml", metrics)

    catalog = yaml.safe_load((conf / "catalog.yml").read_text())
    catalog["raw_prompts"]["filepath"] = "data/01_raw/prompts/demo_math.jsonl"
    write_yaml(conf / "catalog.yml", catalog)
    return project, checkpoints, csv_pass1


def run_session(project: Path, pipeline: str | None = None) -> None:
    """Run ``pipeline`` (default ``__default__``) of ``project`` in ``qae_repro``, in-process."""
    configure_project("hed")
    pipelines.configure("hed.pipeline_registry")  # rebuilt from this env's runs and shards
    with contextlib.chdir(project), KedroSession.create(project_path=project, env=ENV) as session:
        session.run(pipeline_names=[pipeline] if pipeline else None)


def versions(path: Path) -> list[Path]:
    """The saved versions of a versioned dataset file, oldest first."""
    if not path.is_dir():
        return []
    return sorted(v / path.name for v in path.iterdir() if (v / path.name).exists())


def latest(path: Path) -> Path:
    found = versions(path)
    assert found, f"no version of {path}"
    return found[-1]


def parameters(project: Path) -> dict:
    """The parameters of ``qae_repro`` in the copy, as Kedro resolves them."""
    loader = OmegaConfigLoader(str(project / "conf"), base_env="base", default_run_env=ENV)
    return loader["parameters"]


@pytest.fixture(scope="module")
def study(tmp_path_factory, tokenizer):
    """The study after one ``kedro run --env qae_repro`` (every pipeline of ``__default__``)."""
    threads, active = torch.get_num_threads(), session.active_session()
    project, checkpoints, csv_pass1 = make_study(
        tmp_path_factory.mktemp("two_run_chain"), tokenizer
    )
    try:
        run_session(project)
        yield project, checkpoints, csv_pass1
    finally:  # the run set one torch thread and this env's layout in this process
        torch.set_num_threads(threads)
        session.activate(active and active.params, active and active.data_root)


# ------------------------------------------------------------------ independent computation


def lexicon_categories(lexicon: dict[str, list[str]]) -> dict[str, str]:
    """word → category; a word listed twice keeps the first category listed (DESIGN.md §5.4)."""
    categories: dict[str, str] = {}
    for category, words in lexicon.items():
        for word in words:
            categories.setdefault(str(word).lower(), category)
    return categories


def high_entropy_records(project: Path, run: str, step: int, rho: float) -> pd.DataFrame:
    """Non-special records of the step with ``in_set``: the ⌈ρ·N⌉ largest entropies, ties by
    (prompt_index, sample_index, position), recomputed from the merged Parquet file."""
    path = latest(project / DATA_ROOT / f"03_primary/token_records/{run}/step_{step}.parquet")
    key = ["prompt_index", "sample_index", "position"]
    columns = [*key, "entropy", "prob", "word", "is_special", "is_high_entropy"]
    records = pq.read_table(path, columns=columns).to_pandas()
    records = records[~records["is_special"]].reset_index(drop=True)
    k = math.ceil(Fraction(str(rho)) * len(records))
    # np.lexsort: the last key is the primary one
    order = np.lexsort([records[c] for c in key[::-1]] + [-records["entropy"].astype(np.float64)])
    records["in_set"] = False
    records.loc[order[:k], "in_set"] = True
    return records


# ------------------------------------------------------------------ checks


def test_figure2_counts_equal_an_independent_count_of_the_merged_records(study):
    project, _, csv_pass1 = study
    params = parameters(project)
    rho = params["aggregation"]["top_entropy_frac"]
    categories = lexicon_categories(params["aggregation"]["lexicon"])
    reporting = project / DATA_ROOT / "08_reporting"
    table = pd.read_csv(latest(reporting / FIGURE_FILES["figure2_table"]))
    assert not (reporting / "tables/figure2_single_run_diagnostic.csv").exists()
    assert list(zip(table["run"], table["step"], strict=True)) == [
        (r, s) for r in RUNS for s in STEPS
    ]
    assert table["role"].tolist() == [RUNS[r] for r in RUNS for _ in STEPS]

    expected_counts = []
    for row in table.itertuples():
        records = high_entropy_records(project, row.run, row.step, rho)
        assert records["is_high_entropy"].tolist() == records["in_set"].tolist()
        chosen = records[records["in_set"]]
        anthropomorphic = int((chosen["word"].map(categories) == "anthropomorphic").sum())
        assert (row.n_tokens, row.n_high_entropy) == (len(records), len(chosen))
        assert row.anthropomorphic_count == anthropomorphic, (row.run, row.step)
        assert row.anthropomorphic_per_1k_high_entropy == pytest.approx(
            1000 * anthropomorphic / len(chosen)
        )
        expected_counts.append(anthropomorphic)
    # the biased checkpoints make the comparison meaningful: counts > 0, not all alike
    assert all(sum(table.loc[table["run"] == run, "anthropomorphic_count"]) > 0 for run in RUNS)
    assert len(set(expected_counts)) > 1

    for run in RUNS:
        rows = table[table["run"] == run]
        if run == "tiny_with_clip":
            assert set(rows["pass1_source"]) == {"csv"}
            assert rows["pass1"].tolist() == pytest.approx([csv_pass1[s] for s in STEPS])
        else:
            assert set(rows["pass1_source"]) == {"generated"}
            for row in rows.itertuples():
                seqs = pq.read_table(
                    latest(
                        project
                        / DATA_ROOT
                        / f"03_primary/token_records/{run}/step_{row.step}.sequences.parquet"
                    ),
                    columns=["correct"],
                ).to_pandas()
                assert len(seqs) == NUM_PROMPTS * GENERATION["samples_per_prompt"]
                assert row.pass1 == pytest.approx(seqs["correct"].astype(float).mean())


def test_figure3_shares_equal_an_independent_computation_from_the_merged_records(study):
    project, _, _ = study
    params = parameters(project)
    rho = params["aggregation"]["top_entropy_frac"]
    top_n = params["reporting"]["top_n_words"]
    categories = lexicon_categories(params["aggregation"]["lexicon"])
    table = pd.read_csv(
        latest(project / DATA_ROOT / "08_reporting" / FIGURE_FILES["figure3_table"]),
        keep_default_na=False,
        na_values=[""],
    )
    fig3_steps = params["reporting"]["fig3"]["steps"]
    assert sorted(set(zip(table["run"], table["step"], strict=True))) == sorted(
        (r, s) for r in RUNS for s in fig3_steps
    )
    anthropomorphic_shares = 0.0
    for run, role in RUNS.items():
        for step in fig3_steps:
            records = high_entropy_records(project, run, step, rho)
            chosen = records[records["in_set"] & (records["word"] != "")]
            words = (
                chosen.assign(prob=chosen["prob"].astype(np.float64))
                .groupby("word")
                .agg(count=("prob", "size"), prob=("prob", "sum"))
                .reset_index()
            )
            words["share"] = words["prob"] / words["prob"].sum()
            words = words.sort_values(
                ["share", "count", "word"], ascending=[False, False, True], kind="stable"
            ).head(top_n)
            rows = table[(table["run"] == run) & (table["step"] == step)].sort_values("rank")
            assert rows["rank"].tolist() == list(range(1, len(words) + 1))
            assert rows["word"].tolist() == words["word"].tolist(), (run, step)
            assert rows["count"].tolist() == words["count"].tolist()
            assert rows["sampled_prob_share"].to_numpy() == pytest.approx(
                words["share"].to_numpy(), rel=1e-6
            )
            assert rows["category"].tolist() == [categories.get(w, "other") for w in words["word"]]
            assert set(rows["role"]) == {role}
            is_anthropomorphic = words["word"].map(categories) == "anthropomorphic"
            anthropomorphic_shares += words.loc[is_anthropomorphic, "share"].sum()
    assert anthropomorphic_shares > 0


def _image(path: Path) -> tuple[tuple[int, int], np.ndarray]:
    image = Image.open(path)
    return image.size, np.asarray(image.convert("RGB"), dtype=float)


def test_both_pngs_have_the_configured_pixel_size_and_show_the_bars(study):
    project, _, _ = study
    style = parameters(project)["reporting"]
    reporting = project / DATA_ROOT / "08_reporting"
    n_steps = len(style["fig3"]["steps"])
    for name, size in (
        ("figure2_png", figure_size(len(RUNS), 1, style["figure2"]["panel_size"])),
        ("figure3_png", figure3_size(n_steps, len(RUNS), style["figure3"]["panel_size"])),
    ):
        dpi = style[name.removesuffix("_png")]["dpi"]
        (width, height), pixels = _image(latest(reporting / FIGURE_FILES[name]))
        assert (width, height) == (round(size[0] * dpi), round(size[1] * dpi)), name
        assert pixels.mean(axis=2).std() > 5, f"{name} is (nearly) blank"
        # anthropomorphic bars (vermillion) are drawn: the counts and shares are not zero
        hex_colour = CATEGORY_COLOURS["anthropomorphic"]
        vermillion = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])
        assert (np.abs(pixels - vermillion).max(axis=2) < 8).sum() > 100, name


def test_reporting_replots_from_existing_records_without_the_checkpoints(study):
    project, checkpoints, _ = study
    reporting = project / DATA_ROOT / "08_reporting"
    upstream = [
        project / DATA_ROOT / "04_feature/summary_by_step.csv",
        project / DATA_ROOT / "04_feature/pass1_for_figures.csv",
        project / DATA_ROOT / "02_intermediate/checkpoints.json",
        *(
            project / DATA_ROOT / f"03_primary/token_records/{run}/step_{s}.parquet"
            for run in RUNS
            for s in STEPS
        ),
    ]
    before = {name: versions(reporting / f) for name, f in FIGURE_FILES.items()}
    upstream_before = {p: versions(p) for p in upstream}
    assert all(before.values())
    moved = checkpoints.with_name("checkpoints_moved_away")
    checkpoints.rename(moved)  # any model load would now fail
    try:
        run_session(project, "reporting")
    finally:
        moved.rename(checkpoints)
    after = {name: versions(reporting / f) for name, f in FIGURE_FILES.items()}
    for name in FIGURE_FILES:
        assert after[name][:-1] == before[name], f"{name}: no new version, or an old one changed"
    assert {p: versions(p) for p in upstream} == upstream_before  # nothing upstream was rerun
    for name in ("figure2_table", "figure3_table"):
        pd.testing.assert_frame_equal(pd.read_csv(after[name][-2]), pd.read_csv(after[name][-1]))
    for name in ("figure2_png", "figure3_png"):
        old_size, _ = _image(after[name][-2])
        new_size, new = _image(after[name][-1])
        assert new_size == old_size and new.mean(axis=2).std() > 5
    resolved = json.loads(after["resolved_config"][-1].read_text())
    assert resolved["env"] == ENV
    assert resolved["kedro_run"]["pipeline_names"] == ["reporting"]
    assert resolved["figures"]["figure2_kind"] == "paper_reproduction"


def _token_report_data(path: Path) -> dict:
    page = path.read_text(encoding="utf-8")
    start = '<script type="application/json" id="hed-data">'
    return json.loads(page.split(start, maxsplit=1)[1].split("</script>", maxsplit=1)[0])


def test_token_report_replots_without_the_checkpoints(study):
    """token_report_html of the chain names the alternatives with the checkpoints' tokenizer;
    re-plotted with the checkpoint folders gone it shows the same responses, naming sampled
    ids from the records' token_text and saying so."""
    project, checkpoints, _ = study
    report = project / DATA_ROOT / "08_reporting/token_report/token_report.html"
    first = _token_report_data(versions(report)[0])
    assert [r["run"] for r in first["runs"]] == sorted(RUNS)
    for run in first["runs"]:
        assert run["vocab_source"].startswith("the tokenizer of ")
        assert [s["step"] for s in run["steps"]] == list(STEPS)
    moved = checkpoints.with_name("checkpoints_moved_for_token_report")
    checkpoints.rename(moved)
    try:
        run_session(project, "reporting")
    finally:
        moved.rename(checkpoints)
    again = _token_report_data(latest(report))
    assert any("no tokenizer found" in note for note in again["notes"])
    for old, new in zip(first["runs"], again["runs"], strict=True):
        assert new["keys"] == old["keys"]
        assert new["responses"] == old["responses"]  # same rows, same values
        texts: dict[str, set[str]] = {}
        for response in new["responses"][str(STEPS[0])]:
            for tid, text in zip(response["id"], response["text"], strict=True):
                texts.setdefault(str(tid), set()).add(text)
        # an id recorded with one text is named by it (a byte of a split character has two)
        single = {tid: next(iter(t)) for tid, t in texts.items() if len(t) == 1}
        assert single and all(new["vocab"][tid] == text for tid, text in single.items())
