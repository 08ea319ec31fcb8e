"""The embedded default, end to end: `kedro run` on SmolLM2-135M-Instruct and the demo prompts.

One session-scoped run (a copy of the project in a temporary folder, the converted model
linked from the test cache, fewer prompts and tokens than the README's `make run`) feeds the
checks of issues 2–5 on real records: schema and value ranges of the shard records, an
independent numpy recomputation of the step's high-entropy set, the `generated` pass@1, and
both figures.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from hed.records.schema import MERGED_TOKEN_RECORD_SCHEMA, SEQUENCE_SCHEMA, TOKEN_RECORD_SCHEMA

from .conftest import REPO_ROOT
from .project_copy import RUN, copy_project, latest, run_kedro, run_kedro_cli

pytestmark = pytest.mark.slow

RUNTIME_PARAMS = {  # nested, as `kedro run --params "prompts.num_prompts=6,..."` produces
    "prompts": {"num_prompts": 6},
    "generation": {"max_new_tokens": 40, "samples_per_prompt": 2, "num_shards": 2, "batch_size": 6},
}


@pytest.fixture(scope="session")
def default_project(tmp_path_factory, smollm2_dir) -> Path:
    project = copy_project(tmp_path_factory.mktemp("default_project"), smollm2_dir)
    run_kedro(project, params=RUNTIME_PARAMS)
    return project


@pytest.fixture(scope="session", params=["hf", pytest.param("vllm", marks=pytest.mark.vllm)])
def demo_project(request, tmp_path_factory, smollm2_dir) -> Path:
    """The demo chain with each generation backend (vllm: `kedro run --params ...backend=vllm`)."""
    if request.param == "hf":
        return request.getfixturevalue("default_project")
    project = copy_project(tmp_path_factory.mktemp("vllm_project"), smollm2_dir)
    flat = [
        f"{section}.{key}={value}"
        for section, values in RUNTIME_PARAMS.items()
        for key, value in values.items()
    ]
    run_kedro_cli(project, "run", "--params", ",".join([*flat, "generation.backend=vllm"]))
    return project


def test_shard_records_have_the_contract_schema_and_ranges(demo_project, tokenizer):
    files = [
        latest(demo_project / f"data/02_intermediate/token_records/{RUN}/step_0/shard_{k}.parquet")
        for k in range(2)
    ]
    tables = [pq.read_table(f) for f in files]
    for k, table in enumerate(tables):
        assert table.schema.equals(TOKEN_RECORD_SCHEMA, check_metadata=False)
        assert set(table.column("shard").to_pylist()) == {k}
        assert all(p % 2 == k for p in table.column("prompt_index").to_pylist())
    records = pa.concat_tables(tables).to_pandas()
    assert len(records) > 0
    vocab = len(tokenizer)
    assert records["entropy"].between(0, math.log(vocab) + 1e-4).all()
    assert ((records["prob"] > 0) & (records["prob"] <= 1)).all()
    np.testing.assert_allclose(records["prob"], np.exp(records["logprob"]), rtol=1e-5)
    topk = np.stack(records["topk_probs"].to_numpy())
    assert topk.shape[1] == 5
    assert (np.diff(topk, axis=1) <= 0).all(), "top-k probabilities must be non-increasing"
    assert (records["prob"].to_numpy() <= topk[:, 0] + 1e-6).all()
    # per response: positions 0..n-1, at most one EOS and only at the end, text == decode
    for (_p, _s), rows in records.groupby(["prompt_index", "sample_index"]):
        assert rows["position"].tolist() == list(range(len(rows)))
        ids = rows["token_id"].tolist()
        assert "".join(rows["token_text"]) == tokenizer.decode(ids)
        specials = rows["is_special"].to_numpy()
        assert not specials[:-1].any()


def test_sequences_match_records(demo_project):
    seqs = pq.read_table(
        latest(demo_project / f"data/03_primary/token_records/{RUN}/step_0.sequences.parquet")
    )
    assert seqs.schema.equals(SEQUENCE_SCHEMA, check_metadata=False)
    seqs = seqs.to_pandas()
    assert len(seqs) == 6 * 2
    merged = pq.read_table(
        latest(demo_project / f"data/03_primary/token_records/{RUN}/step_0.parquet"),
        columns=["prompt_index", "sample_index"],
    ).to_pandas()
    counts = merged.groupby(["prompt_index", "sample_index"]).size()
    for row in seqs.itertuples():
        assert counts[(row.prompt_index, row.sample_index)] == row.n_tokens
        assert row.finish_reason in {"eos", "length"}
        assert row.correct in (True, False)  # every demo prompt has an answer


def test_threshold_and_set_recomputed_independently_with_numpy(demo_project):
    merged_path = latest(demo_project / f"data/03_primary/token_records/{RUN}/step_0.parquet")
    merged = pq.read_table(merged_path)
    assert merged.schema.equals(MERGED_TOKEN_RECORD_SCHEMA, check_metadata=False)
    frame = merged.select(
        ["prompt_index", "sample_index", "position", "entropy", "is_special", "is_high_entropy"]
    ).to_pandas()
    candidates = frame[~frame["is_special"]]
    n = len(candidates)
    k = math.ceil(0.2 * n - 1e-9)
    # sort by entropy descending, ties by (prompt_index, sample_index, position) ascending
    order = np.lexsort(
        (
            candidates["position"],
            candidates["sample_index"],
            candidates["prompt_index"],
            -candidates["entropy"].astype(np.float64),
        )
    )
    chosen = candidates.iloc[order[:k]]
    expected = set(map(tuple, chosen[["prompt_index", "sample_index", "position"]].to_numpy()))
    got = set(
        map(
            tuple,
            frame[frame["is_high_entropy"]][
                ["prompt_index", "sample_index", "position"]
            ].to_numpy(),
        )
    )
    assert got == expected
    thresholds = pd.read_csv(latest(demo_project / "data/04_feature/entropy_thresholds.csv"))
    row = thresholds[(thresholds["run"] == RUN) & (thresholds["step"] == 0)].iloc[0]
    assert row["n_tokens"] == n
    assert row["n_high_entropy"] == k
    assert np.float32(row["threshold"]) == chosen["entropy"].min()


def test_generated_pass1_is_the_mean_of_correct(demo_project):
    seqs = pq.read_table(
        latest(demo_project / f"data/03_primary/token_records/{RUN}/step_0.sequences.parquet")
    ).to_pandas()
    expected = seqs["correct"].astype(float).mean()
    pass1 = pd.read_csv(latest(demo_project / "data/04_feature/pass1.csv"))
    row = pass1[(pass1["run"] == RUN) & (pass1["step"] == 0) & (pass1["source"] == "generated")]
    assert len(row) == 1
    assert row["pass1"].iloc[0] == pytest.approx(expected, abs=1e-12)


def test_shards_record_the_backend_and_its_version(demo_project, request):
    import json

    backend = request.node.callspec.params["demo_project"]
    path = latest(demo_project / f"data/02_intermediate/token_records/{RUN}/step_0/shard_0.parquet")
    recorded = json.loads(pq.read_schema(path).metadata[b"hed.generation"])
    assert recorded["backend"]["name"] == backend
    if backend == "vllm":
        import vllm

        assert recorded["backend"]["version"] == vllm.__version__
        assert recorded["backend"]["settings"]["max_model_len"] is None
    else:
        import transformers

        assert recorded["backend"]["version"] == transformers.__version__


def test_both_figures_written(default_project):
    from PIL import Image

    for name in (
        "figure2_anthropomorphic_high_entropy_vs_pass1.png",
        "figure3_high_entropy_token_probability.png",
    ):
        image = Image.open(latest(default_project / "data/08_reporting/figures" / name))
        pixels = np.asarray(image.convert("L"), dtype=float)
        assert min(image.size) > 200 and pixels.std() > 5
    assert latest(
        default_project / "data/08_reporting/tables/figure2_single_run_diagnostic.csv"
    ).exists()


def test_notebook_runs_top_to_bottom(default_project):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(
        REPO_ROOT / "notebooks/explore_high_entropy_tokens.ipynb", as_version=4
    )
    (default_project / "notebooks").mkdir(exist_ok=True)
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(default_project / "notebooks")}},
    ).execute()
    outputs = [
        o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
    ]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the histogram was not drawn"
    text = "".join(str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "threshold" in text and "sampled_prob_share" in text


def test_kedro_viz_build_shows_the_lineage(default_project):
    import json

    run_kedro_cli(default_project, "viz", "build")
    graph = json.loads((default_project / "build/api/main").read_text())
    names = {n["id"]: n["name"] for n in graph["nodes"]}
    edges = {(names.get(e["source"]), names.get(e["target"])) for e in graph["edges"]}
    datasets = set(names.values())
    chain = [
        "prompts",
        f"{RUN}.step_0.shard_0.token_records",
        f"{RUN}.step_0.token_records",
        f"{RUN}.step_0.entropy_thresholds",
        "entropy_thresholds",
        "pass1",
        "figure2_png",
        "figure3_png",
    ]
    missing = [d for d in chain if d not in datasets]
    assert not missing, f"lineage lacks {missing}"
    # walk the graph: every dataset of the chain reaches both figures
    children: dict[str, set[str]] = {}
    for src, dst in edges:
        children.setdefault(src, set()).add(dst)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            here = todo.pop()
            if here == goal:
                return True
            if here not in seen:
                seen.add(here)
                todo.extend(children.get(here, ()))
        return False

    # prompts reaches every dataset of the chain; all but the all-steps table lead to both figures
    for dataset in chain[1:]:
        assert reaches("prompts", dataset), f"prompts does not lead to {dataset}"
    # the figures are computed from the merged records and the step's threshold row
    lead_to_figures = [d for d in chain[:-2] if d != "entropy_thresholds"]  # all-steps: a sink
    for dataset in lead_to_figures:
        assert reaches(dataset, "figure2_png") and reaches(dataset, "figure3_png"), dataset


@pytest.mark.parametrize("traceback", [False, True])
def test_kedro_run_shows_a_bad_parameter_in_one_line_before_any_node(default_project, traceback):
    result = run_kedro_cli(
        default_project,
        "run",
        "--params",
        "aggregation.top_entropy_frac=20",
        check=False,
        env={"HED_TRACEBACK": "1" if traceback else ""},
    )
    assert result.returncode != 0
    assert "Running node" not in result.stdout + result.stderr  # refused before the first node
    if traceback:
        assert "Traceback (most recent call last)" in result.stderr
    else:
        assert "Traceback" not in result.stdout + result.stderr
        assert "register_new_resolver" not in result.stderr
        assert result.stderr.strip().splitlines()[-1] == (
            "ConfigError: aggregation.top_entropy_frac (set in --params) = 20 is outside (0, 1]; "
            "set the high-entropy fraction, e.g. 0.2 (the top 20% of a step's tokens) "
            "[HED_TRACEBACK=1 shows the traceback]"
        )


def test_dynamics_tables_equal_independent_numpy_on_the_demo(default_project):
    from hed.core.lexicon import parse_lexicon
    from hed.pipelines.dynamics.nodes import NO_GRADING

    from .dynamics_reference import reference_correctness, reference_covariance

    merged = default_project / f"data/03_primary/token_records/{RUN}"
    records = pq.read_table(latest(merged / "step_0.parquet")).to_pandas()
    sequences = pq.read_table(latest(merged / "step_0.sequences.parquet")).to_pandas()
    assert sequences["correct"].notna().all()  # the demo prompts have reference answers
    params = yaml.safe_load((REPO_ROOT / "conf/base/parameters_aggregation.yml").read_text())
    categories = parse_lexicon(params["aggregation"]["lexicon"]).categories
    table = pd.read_csv(
        latest(default_project / "data/04_feature/advantage_covariance_by_step.csv")
    )
    tops = pd.read_csv(
        latest(default_project / "data/04_feature/advantage_covariance_top_tokens.csv"),
        keep_default_na=False,
        na_values=[""],
    )
    assert table["estimator"].tolist() == ["grpo", "dr_grpo"]
    for estimator in ("grpo", "dr_grpo"):
        expected, top = reference_covariance(records, sequences, estimator, categories)
        row = table[table["estimator"] == estimator].iloc[0]
        assert pd.isna(row["skipped"]) and row["skipped"] != NO_GRADING
        for key, value in expected.items():
            if isinstance(value, float) and math.isnan(value):
                assert pd.isna(row[key]), key
            else:
                assert row[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
        got = tops[tops["estimator"] == estimator]
        keys = ["prompt_index", "sample_index", "position"]
        assert got[keys].values.tolist() == top[keys].values.tolist()
        assert got["word"].fillna("").tolist() == top["word"].tolist()
    correctness = pd.read_csv(
        latest(default_project / "data/04_feature/entropy_by_correctness.csv")
    )
    for value, expected in reference_correctness(records, sequences).items():
        row = correctness[correctness["correct"] == value].iloc[0]
        for key, number in expected.items():
            if isinstance(number, float) and math.isnan(number):
                assert pd.isna(row[key]), key
            else:
                assert row[key] == pytest.approx(number, rel=1e-9, abs=1e-12), key
    for name in ("advantage_covariance_by_step.png", "entropy_by_correctness.png"):
        assert latest(default_project / "data/08_reporting/figures" / name).stat().st_size > 0


def test_advantage_shaping_of_the_demo_agrees_with_dynamics_and_numpy(default_project):
    feature = default_project / "data/04_feature"
    table = pd.read_csv(latest(feature / "advantage_shaping_by_step.csv"))
    dynamics = pd.read_csv(latest(feature / "advantage_covariance_by_step.csv"))
    assert set(table["scheme"]) == {"grpo", "dr_grpo", "top_rho_mask", "entropy_advantage",
                                    "gtpo", "grpo_s"}  # fmt: skip
    whole = table[(table["subset"] == "all") & (table["response"] == "all")].set_index("scheme")
    for estimator in ("grpo", "dr_grpo"):  # two implementations of the same Cov(log π, A)
        row = dynamics[dynamics["estimator"] == estimator].iloc[0]
        assert whole.loc[estimator, "n_tokens"] == row["n_tokens"]
        assert whole.loc[estimator, "mean_advantage"] == pytest.approx(row["mean_advantage"])
        assert whole.loc[estimator, "cov_logp_advantage"] == pytest.approx(
            row["mean_cov"], rel=1e-9, abs=1e-12
        )
    merged = default_project / f"data/03_primary/token_records/{RUN}"
    records = pq.read_table(latest(merged / "step_0.parquet")).to_pandas()
    sequences = pq.read_table(latest(merged / "step_0.sequences.parquet")).to_pandas()
    high = table[(table["subset"] == "high_entropy") & (table["response"] == "all")]
    n_high = int(records.loc[~records["is_special"], "is_high_entropy"].sum())
    assert high["n_tokens"].tolist() == [n_high] * 6
    if (sequences.groupby("prompt_index")["correct"].nunique() < 2).all():
        # no prompt with both outcomes: every A is 0, no credit to share
        assert table["credit_share"].isna().all()
    else:
        assert high.set_index("scheme").loc["top_rho_mask", "credit_share"] > 0.99
        parts = table[table["subset"].isin(["high_entropy", "other"])]
        parts = parts[parts["response"] != "all"]
        assert parts.groupby("scheme")["credit_share"].sum().tolist() == pytest.approx([1.0] * 6)
    assert (
        latest(default_project / "data/08_reporting/figures/advantage_shaping.png").stat().st_size
    )


def test_token_report_of_the_demo_in_chromium(default_project, tmp_path):
    """The demo's own token_report_html, opened from disk offline: one span per record of
    the chosen responses (8 of the 12, `reporting.token_report`), each response's exact text,
    alternatives named by the checkpoint's tokenizer."""
    from .browser import open_page

    path = latest(default_project / "data/08_reporting/token_report/token_report.html")
    step = default_project / f"data/03_primary/token_records/{RUN}/step_0"
    records = pq.read_table(
        latest(step.with_suffix(".parquet")), columns=["prompt_index", "sample_index"]
    ).to_pandas()
    seqs = pq.read_table(latest(step.with_suffix(".sequences.parquet"))).to_pandas()
    with open_page(path, tmp_path / "profile") as page:
        assert page.events["requests"] == [path.as_uri()] and page.events["errors"] == []
        shown = page.eval_on_selector_all(".resp", "c => c.map(e => e.dataset.key)")
        keys = {tuple(int(v) for v in key.split(":")[1:]) for key in shown}
        assert len(shown) == len(keys) == 8
        pairs = records.apply(tuple, axis=1)
        assert page.locator("#grid span.t").count() == int(pairs.isin(keys).sum())
        for p, s in sorted(keys)[:3]:
            text = page.locator(f'.resp[data-key="0:{p}:{s}"] .body').evaluate(
                "b => [...b.querySelectorAll('span.t')].map(x => x.textContent).join('')"
            )
            row = seqs[(seqs["prompt_index"] == p) & (seqs["sample_index"] == s)].iloc[0]
            assert text == row["response_text"]
        notes = page.locator("#notes").inner_text()
        assert "8 of 12 responses" in notes and "no tokenizer" not in notes
