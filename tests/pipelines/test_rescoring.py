"""The rescoring pipeline on a mini chain: tiny random Llamas as the checkpoints of two runs,
generation → aggregation → rescoring in a project copy; every table checked against an
independent numpy computation from the files the chain wrote."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from PIL import Image

from hed.analysis.rescoring import RescoringConsistencyError, reference_plan, rescoring_section
from hed.config import layout, session
from hed.errors import ConfigError, InputDataError
from hed.pipelines.rescoring import create_pipeline
from hed.pipelines.rescoring.nodes import (
    check_self_consistency,
    collect_rescored_entropies,
    select_user_responses,
)

from ..conftest import build_tiny_model
from ..project_copy import (
    GPU_RUNNER_GENERATION,
    RUN,
    SMALL_STEP,
    copy_project,
    latest,
    run_kedro,
    run_kedro_cli,
    set_parameters,
)

pytestmark = pytest.mark.slow

RUNS = {"tiny_a": [0, 10, 20], "tiny_b": [0, 5]}
RHO = 0.2
GENERATION = {
    "num_shards": 2,
    "samples_per_prompt": 2,
    "max_new_tokens": 12,
    "batch_size": 4,
    "dtype": "float32",
    "torch_threads": 1,
}
KEY = ["prompt_index", "sample_index", "position"]


def make_project(root: Path, smollm2_dir: Path, tokenizer) -> Path:
    project = copy_project(root / "project", smollm2_dir)
    for i, (run, steps) in enumerate(RUNS.items()):
        for j, step in enumerate(steps):
            # different seeds and output scales: the entropies move from step to step
            build_tiny_model(
                root / "ckpt" / run / f"global_step_{step}" / "actor_hf",
                tokenizer,
                seed=10 * i + j,
                scale=40.0 + 20 * j,
            )
    base = project / "conf/base"
    params = yaml.safe_load((base / "parameters.yml").read_text())
    params["runs"] = {
        run: {"role": "single", "checkpoint_root": str(root / "ckpt" / run), "steps": steps}
        for run, steps in RUNS.items()
    }
    (base / "parameters.yml").write_text(yaml.safe_dump(params, sort_keys=False))
    gen = yaml.safe_load((base / "parameters_generation.yml").read_text())
    gen["prompts"]["num_prompts"] = 5
    gen["generation"].update(GENERATION)
    (base / "parameters_generation.yml").write_text(yaml.safe_dump(gen, sort_keys=False))
    return project


@pytest.fixture(scope="module")
def chain(tmp_path_factory, smollm2_dir, tokenizer):
    threads, active = torch.get_num_threads(), session.active_session()
    project = make_project(tmp_path_factory.mktemp("rescoring_chain"), smollm2_dir, tokenizer)
    try:
        for pipeline in ("generation", "aggregation", "rescoring"):
            run_kedro(project, pipeline)
        yield project
    finally:
        torch.set_num_threads(threads)
        session.activate(active and active.params, active and active.data_root)


# ------------------------------------------------------------------ independent computation


def rescored(project: Path, run: str, step: int) -> pd.DataFrame:
    """Both shards of one step's re-scored file, read with pyarrow, in key order."""
    folder = project / f"data/03_primary/rescoring/{run}/step_{step}"
    frames = [
        pq.read_table(latest(folder / f"shard_{k}.rescored.parquet")).to_pandas() for k in (0, 1)
    ]
    return pd.concat(frames).sort_values(KEY).reset_index(drop=True)


def top_set(frame: pd.DataFrame, rho: float) -> set[tuple]:
    regular = frame[~frame["is_special"]]
    k = math.ceil(Fraction(str(rho)) * len(regular))
    order = np.lexsort(
        [regular[c].to_numpy() for c in KEY[::-1]] + [-regular["entropy"].to_numpy(np.float64)]
    )
    chosen = regular.iloc[order[:k]]
    return set(map(tuple, chosen[KEY].to_numpy().tolist()))


def test_every_checkpoint_scores_the_last_steps_responses(chain):
    for run, steps in RUNS.items():
        merged = latest(chain / f"data/03_primary/token_records/{run}/step_{steps[-1]}.parquet")
        decode = pq.read_table(merged).to_pandas().sort_values(KEY).reset_index(drop=True)
        for step in steps:
            frame = rescored(chain, run, step)
            assert frame[[*KEY, "token_id", "is_special"]].equals(
                decode[[*KEY, "token_id", "is_special"]]
            ), (run, step)
            assert (frame["step"] == step).all() and (frame["run"] == run).all()
            assert frame["topk_probs"].map(len).eq(5).all()
            # rank 0 ⇔ the response token is the most probable one
            top1 = frame["topk_token_ids"].map(lambda ids: ids[0])
            assert ((frame["rank"] == 0) == (top1 == frame["token_id"])).all()
            meta = json.loads(
                pq.read_schema(
                    latest(
                        chain
                        / f"data/03_primary/rescoring/{run}/step_{step}/shard_0.rescored.parquet"
                    )
                ).metadata[b"hed.decode.teacher_forced"]
            )
            assert (meta["dtype"], meta["reference"]["step"]) == ("float32", steps[-1])


def test_overlap_table_equals_an_independent_computation(chain):
    table = pd.read_csv(latest(chain / "data/04_feature/entropy_overlap.csv"))
    assert list(zip(table["run"], table["step"], strict=True)) == [
        (r, s) for r, steps in RUNS.items() for s in steps
    ]
    for run, steps in RUNS.items():
        sets = {s: top_set(rescored(chain, run, s), RHO) for s in steps}
        base, final = sets[steps[0]], sets[steps[-1]]
        rows = table[table["run"] == run].set_index("step")
        n = int((~rescored(chain, run, steps[0])["is_special"]).sum())
        for s in steps:
            assert rows.loc[s, "n_positions"] == n
            assert rows.loc[s, "k"] == len(base) == math.ceil(Fraction("0.2") * n)
            assert rows.loc[s, "overlap_with_base"] == pytest.approx(
                len(sets[s] & base) / len(base), abs=1e-12
            )
            assert rows.loc[s, "overlap_with_final"] == pytest.approx(
                len(sets[s] & final) / len(final), abs=1e-12
            )
        assert rows.loc[steps[0], "overlap_with_base"] == 1.0
        assert rows.loc[steps[-1], "overlap_with_final"] == 1.0
    # the random checkpoints differ: the overlaps are not all 1
    assert (table["overlap_with_base"] < 1).any()


def test_percentile_bin_table_equals_an_independent_computation(chain):
    table = pd.read_csv(latest(chain / "data/04_feature/entropy_change_by_percentile.csv"))
    for run, steps in RUNS.items():
        frames = {s: rescored(chain, run, s) for s in steps}
        frames = {s: f[~f["is_special"]].reset_index(drop=True) for s, f in frames.items()}
        base = frames[steps[0]]["entropy"].to_numpy()
        n = len(base)
        ranked = sorted(range(n), key=lambda i: (float(base[i]), i))  # ties in key order
        bins = np.empty(n, dtype=int)
        for rank, i in enumerate(ranked):
            bins[i] = (100 * rank) // (5 * n)
        for s in steps:
            rows = table[(table["run"] == run) & (table["step"] == s)].set_index("bin")
            assert len(rows) == 20 and (rows["base_step"] == steps[0]).all()
            values = frames[s]["entropy"].to_numpy(np.float64)
            for b in range(20):
                members = bins == b
                assert rows.loc[b, "n_positions"] == members.sum()
                mb, ms = base[members].astype(np.float64).mean(), values[members].mean()
                assert rows.loc[b, "mean_base_entropy"] == pytest.approx(mb, rel=1e-9)
                assert rows.loc[b, "mean_entropy"] == pytest.approx(ms, rel=1e-9)
                assert rows.loc[b, "mean_change"] == pytest.approx(ms - mb, abs=1e-9)


def test_percentiles_by_step_equal_numpy_on_the_merged_records(chain):
    table = pd.read_csv(latest(chain / "data/04_feature/entropy_percentiles_by_step.csv"))
    for row in table.itertuples():
        path = latest(chain / f"data/03_primary/token_records/{row.run}/step_{row.step}.parquet")
        records = pq.read_table(path, columns=["entropy", "is_special"]).to_pandas()
        entropy = records.loc[~records["is_special"], "entropy"].to_numpy()
        assert row.n_tokens == len(entropy)
        for name in ("p50", "p80", "p90", "p95"):
            q = int(name[1:])
            assert getattr(row, name) == pytest.approx(
                np.percentile(entropy.astype(np.float64), q), abs=1e-9
            )
        assert row.frac_below_0_01 == pytest.approx(np.mean(entropy < np.float32(0.01)), abs=1e-12)
        assert row.mean_entropy == pytest.approx(entropy.astype(np.float64).mean(), rel=1e-9)
    assert len(table) == sum(len(s) for s in RUNS.values())


def test_self_consistency_passes_in_float32(chain):
    table = pd.read_csv(latest(chain / "data/08_reporting/tables/rescoring_consistency.csv"))
    assert table["run"].tolist() == list(RUNS)
    assert table["step"].tolist() == [steps[-1] for steps in RUNS.values()]
    assert table["status"].tolist() == ["pass", "pass"]
    assert (table["decode_dtype"] == "float32").all() and (
        table["rescore_dtype"] == "float32"
    ).all()
    assert table["tokens_equal"].all()
    assert (table["max_abs_entropy_diff"] <= 1e-4).all(), table
    assert (table["n_positions"] > 0).all()


def test_figures_are_pngs(chain):
    for name in ("entropy_overlap", "entropy_change_by_percentile", "entropy_percentiles_by_step"):
        with Image.open(latest(chain / f"data/08_reporting/figures/{name}.png")) as image:
            assert image.format == "PNG" and image.size[0] >= 500


def merged_records(project: Path, run: str, step: int) -> pd.DataFrame:
    merged = latest(project / f"data/03_primary/token_records/{run}/step_{step}.parquet")
    return pq.read_table(merged).to_pandas().sort_values(KEY).reset_index(drop=True)


def trainer_rescored(project: Path, run: str, step: int) -> pd.DataFrame:
    folder = project / f"data/03_primary/rescoring/{run}/step_{step}"
    frames = [
        pq.read_table(latest(folder / f"shard_{k}.trainer_rescored.parquet")).to_pandas()
        for k in (0, 1)
    ]
    return pd.concat(frames).sort_values(KEY).reset_index(drop=True)


def test_sampler_trainer_mismatch_equals_numpy_on_the_bf16_rescore(chain):
    """Each step's own responses re-scored in bfloat16 against the float32 decode-time records."""
    table = pd.read_csv(latest(chain / "data/04_feature/sampler_trainer_mismatch.csv"))
    assert len(table) == 5 * 5  # 5 (run, step) × 5 subsets
    assert set(table["rescore_dtype"]) == {"bfloat16"} and set(table["decode_dtype"]) == {"float32"}
    for run, steps in RUNS.items():
        for step in steps:
            records, scores = merged_records(chain, run, step), trainer_rescored(chain, run, step)
            assert records["token_id"].tolist() == scores["token_id"].tolist()
            keep = ~records["is_special"].to_numpy()
            d = (
                records["logprob"].to_numpy(np.float64)[keep]
                - scores["logprob"].to_numpy(np.float64)[keep]
            )
            r = np.exp(-d)
            row = table[(table.run == run) & (table.step == step) & (table.subset == "all")].iloc[0]
            assert row["n_tokens"] == keep.sum()
            assert row["mean_abs_delta_logprob"] == pytest.approx(np.abs(d).mean(), rel=1e-9)
            assert row["kl_k3"] == pytest.approx(np.mean(r - 1 - np.log(r)), rel=1e-6, abs=1e-12)
            assert row["ratio_outside_share"] == pytest.approx(np.mean((r < 0.5) | (r > 2.0)))
            high = records["is_high_entropy"].to_numpy()[keep]
            row = table[(table.run == run) & (table.step == step)]
            high_row = row[row.subset == "high_entropy"].iloc[0]
            assert high_row["n_tokens"] == high.sum()
            assert high_row["p90_abs_delta_logprob"] == pytest.approx(
                np.percentile(np.abs(d[high]), 90), rel=1e-9
            )
    assert table.loc[table.subset == "all", "mean_abs_delta_logprob"].max() > 1e-4  # bf16 ≠ fp32


def test_delta_logprob_equals_numpy_on_the_rescored_records(chain):
    table = pd.read_csv(latest(chain / "data/04_feature/delta_logprob_by_step.csv"))
    for run, steps in RUNS.items():
        base = rescored(chain, run, steps[0])
        keep = ~base["is_special"].to_numpy()
        for step in steps:
            d = rescored(chain, run, step)["logprob"].to_numpy(np.float64)[keep]
            d = d - base["logprob"].to_numpy(np.float64)[keep]
            row = table[(table.run == run) & (table.step == step) & (table.subset == "all")]
            assert row["mean"].iloc[0] == pytest.approx(d.mean(), rel=1e-9, abs=1e-12)
            assert row["p90"].iloc[0] == pytest.approx(np.percentile(d, 90), rel=1e-9, abs=1e-12)
            assert row["base_step"].iloc[0] == steps[0]
    base_rows = table[table.step == 0]
    assert (base_rows.loc[base_rows.n_tokens > 0, "mean_abs"] == 0).all()
    assert base_rows.loc[base_rows.n_tokens == 0, "mean_abs"].isna().all()  # empty subsets
    tops = pd.read_csv(latest(chain / "data/04_feature/delta_logprob_top_tokens.csv"))
    assert set(tops["direction"]) <= {"rose", "fell"} and set(tops["step"]) <= {20, 5}
    for name in ("sampler_trainer_mismatch.png", "delta_logprob_by_step.png"):
        assert Image.open(latest(chain / "data/08_reporting/figures" / name)).size[0] > 200


def test_a_float32_trainer_rescore_reproduces_the_sampler(chain):
    """Re-scorer = sampler (both float32): the mismatch vanishes to float32 rounding."""
    run_kedro(chain, "rescoring", params={"analyses": {"mismatch": {"dtype": "float32"}}})
    table = pd.read_csv(latest(chain / "data/04_feature/sampler_trainer_mismatch.csv"))
    assert set(table["rescore_dtype"]) == {"float32"}
    assert table["mean_abs_delta_logprob"].max() < 1e-5
    assert table["kl_k3"].max() < 1e-9
    assert (table["ratio_outside_share"].dropna() == 0).all()  # empty subsets: NaN
    assert table.loc[table.subset == "all", "ratio_outside_share"].notna().all()


def test_a_users_parquet_and_another_runs_reference(chain):
    """`source: file` re-scores a user's pairs; `run: tiny_a` makes tiny_b score tiny_a's."""
    path = chain / "data/01_raw/rescoring/responses.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {
            "prompt": ["What is 2 + 2?", "What is 2 + 2?", "Name a colour."],
            "response": ["It is 4.", "Four", "Blue"],
        }
    ).to_parquet(path)
    run_kedro(chain, "rescoring", params={"rescoring": {"reference": {"source": "file"}}})
    frame = rescored(chain, "tiny_a", 0)
    assert sorted(set(zip(frame["prompt_index"], frame["sample_index"], strict=True))) == [
        (0, 0),
        (0, 1),
        (1, 0),
    ]
    consistency = pd.read_csv(latest(chain / "data/08_reporting/tables/rescoring_consistency.csv"))
    assert consistency.empty  # no checkpoint generated these responses

    run_kedro(
        chain, "rescoring", params={"rescoring": {"reference": {"run": "tiny_a", "step": 10}}}
    )
    b = rescored(chain, "tiny_b", 5)
    merged = latest(chain / "data/03_primary/token_records/tiny_a/step_10.parquet")
    decode = pq.read_table(merged).to_pandas().sort_values(KEY).reset_index(drop=True)
    assert b["token_id"].tolist() == decode["token_id"].tolist()
    consistency = pd.read_csv(latest(chain / "data/08_reporting/tables/rescoring_consistency.csv"))
    assert consistency[["run", "step", "status"]].values.tolist() == [["tiny_a", 10, "pass"]]


def test_bad_rescoring_parameters_are_one_line_errors():
    steps = {"a": (0, 10)}
    assert reference_plan("a", steps, None).reference_step == 10
    with pytest.raises(ConfigError, match=r"rescoring\.reference\.step = 3 is not a step of run a"):
        reference_plan("a", steps, {"reference": {"step": 3}})
    with pytest.raises(ConfigError, match=r"rescoring\.reference\.run = 'z' is not a run"):
        reference_plan("a", steps, {"reference": {"run": "z"}})
    with pytest.raises(
        ConfigError, match=r"unknown parameter rescoring\.chunk: valid keys here: batch_size"
    ):
        rescoring_section({"chunk": 3})
    with pytest.raises(
        ConfigError, match=r"rescoring\.dtype must be one of float32, bfloat16, float16, got 'fp8'"
    ):
        rescoring_section({"dtype": "fp8"})
    lay = layout.layout_from_params({"runs": {"a": {"checkpoint_root": "/x", "steps": [0, 10]}}})
    with pytest.raises(
        ConfigError, match=r"rescoring\.reference\.source must be one of generated, file, got 'x'"
    ):
        create_pipeline(lay, {"rescoring": {"reference": {"source": "x"}}})


#: The demo step of the GPURunner test: the small step's generation (float32) in two shards of
#: 2 prompts × 2 samples, one per CPU worker (each ``gpu`` node is a fresh process: a shard
#: costs two of them, the re-scoring and the trainer's).
TWO_SHARD_STEP = {
    "prompts": {"num_prompts": 4},
    "generation": {**SMALL_STEP["generation"], "num_shards": 2},
}


def test_demo_step_rescored_under_gpu_runner_reproduces_its_records(tmp_path, smollm2_dir):
    """The demo model (SmolLM2-135M, float32 on CPU) re-scores its own 4 × 2 responses, one
    ``gpu`` node per shard on GPURunner's CPU workers: the consistency check passes."""
    project = copy_project(tmp_path / "demo", smollm2_dir)
    set_parameters(project, TWO_SHARD_STEP)
    threads, active = torch.get_num_threads(), session.active_session()
    try:
        for pipeline in ("generation", "aggregation"):
            run_kedro(project, pipeline)
    finally:  # the run set one torch thread and its layout in this process
        torch.set_num_threads(threads)
        session.activate(active and active.params, active and active.data_root)
    run_kedro_cli(project, "run", "--pipelines", "rescoring", *GPU_RUNNER_GENERATION[3:])
    table = pd.read_csv(latest(project / "data/08_reporting/tables/rescoring_consistency.csv"))
    assert table[["run", "step", "status"]].values.tolist() == [[RUN, 0, "pass"]]
    assert (table["decode_dtype"].item(), table["rescore_dtype"].item()) == ("float32", "float32")
    assert table["tokens_equal"].item()
    assert table["max_abs_entropy_diff"].item() <= 1e-4
    assert table["topk_ids_equal_share"].item() >= 0.99
    overlap = pd.read_csv(latest(project / "data/04_feature/entropy_overlap.csv"))
    assert overlap[["step", "overlap_with_base", "overlap_with_final"]].values.tolist() == [
        [0, 1.0, 1.0]
    ]
    num_shards = TWO_SHARD_STEP["generation"]["num_shards"]
    shards = [
        latest(project / f"data/03_primary/rescoring/{RUN}/step_0/shard_{k}.rescored.parquet")
        for k in range(num_shards)
    ]
    assert sum(pq.read_metadata(p).num_rows for p in shards) == table["n_positions"].item()


# ------------------------------------------------------------------ nodes on hand-made tables


def _records(entropy, *, dtype=None, name="hed.decode.teacher_forced") -> ds.Dataset:
    n = len(entropy)
    table = pa.table(
        {
            "prompt_index": pa.array([0] * n, pa.int32()),
            "sample_index": pa.array([0] * n, pa.int16()),
            "position": pa.array(range(n), pa.int32()),
            "token_id": pa.array([5] * n, pa.int32()),
            "entropy": pa.array(entropy, pa.float32()),
            "logprob": pa.array([-0.5] * n, pa.float32()),
            "topk_token_ids": pa.array([[5, 6]] * n, pa.list_(pa.int32())),
            "is_special": pa.array([False] * n),
        }
    )
    if dtype:
        table = table.replace_schema_metadata({name: json.dumps({"dtype": dtype})})
    return ds.dataset(table)


def _reference(decode_dtype: str) -> ds.Dataset:
    table = pa.table({"prompt_index": pa.array([0], pa.int32())})
    meta = {"source": "generated", "decode_dtype": decode_dtype}
    return ds.dataset(table.replace_schema_metadata({"hed.reference": json.dumps(meta)}))


def test_consistency_fails_in_float32_and_only_reports_bfloat16():
    decode = _records([0.5, 1.0, 2.0])
    off = _records([0.5, 1.0, 2.001], dtype="float32")
    with pytest.raises(RescoringConsistencyError, match=r"r\.step_3: .* up to 0\.001 nats"):
        check_self_consistency({}, _reference("float32"), decode, off, checks=[("r", 3, 1)])
    table = check_self_consistency({}, _reference("bfloat16"), decode, off, checks=[("r", 3, 1)])
    assert table[["status", "decode_dtype", "rescore_dtype"]].values.tolist() == [
        ["reported", "bfloat16", "float32"]
    ]
    assert table["max_abs_entropy_diff"].item() == pytest.approx(0.001, abs=1e-6)
    close = _records([0.5, 1.00005, 2.0], dtype="float32")
    table = check_self_consistency({}, _reference("float32"), decode, close, checks=[("r", 3, 1)])
    assert table["status"].tolist() == ["pass"]
    assert table["n_positions"].tolist() == [3]


def test_user_responses_are_numbered_and_checked():
    table = select_user_responses(
        pd.DataFrame({"prompt": ["a", "b", "a"], "response": ["x", "y", "z"]})
    )
    assert table.column("prompt_index").to_pylist() == [0, 0, 1]
    assert table.column("sample_index").to_pylist() == [0, 1, 0]
    assert table.column("response_text").to_pylist() == ["x", "z", "y"]
    with pytest.raises(InputDataError, match="no column 'response'"):
        select_user_responses(pd.DataFrame({"prompt": ["a"], "text": ["x"]}))
    with pytest.raises(InputDataError, match="column 'response' is empty in row 1"):
        select_user_responses(pd.DataFrame({"prompt": ["a", "b"], "response": ["x", ""]}))
    with pytest.raises(InputDataError, match=r"\(prompt_index 0, sample_index 0\) appears twice"):
        select_user_responses(
            pd.DataFrame(
                {
                    "prompt": ["a", "a"],
                    "response": ["x", "y"],
                    "prompt_index": [0, 0],
                    "sample_index": [0, 0],
                }
            )
        )


def test_response_pairs_file_errors_are_one_line(tmp_path):
    from hed.io.reference_datasets import ResponsePairsDataset

    missing = ResponsePairsDataset(filepath=str(tmp_path / "pairs.parquet"))
    with pytest.raises(InputDataError, match=r"pairs\.parquet does not exist: write your"):
        missing.load()
    (tmp_path / "pairs.csv").write_text("prompt,response\n")
    with pytest.raises(InputDataError, match=r"unsupported format '\.csv'"):
        ResponsePairsDataset(filepath=str(tmp_path / "pairs.csv")).load()
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputDataError, match=r"bad\.parquet cannot be read"):
        ResponsePairsDataset(filepath=str(tmp_path / "bad.parquet")).load()
    pd.DataFrame({"prompt": ["a"], "response": ["b"]}).to_parquet(tmp_path / "ok.parquet")
    frame = ResponsePairsDataset(filepath=str(tmp_path / "ok.parquet")).load()
    assert frame.to_dict("records") == [{"prompt": "a", "response": "b"}]


def test_steps_scored_on_other_responses_are_refused():
    a, b = _records([1.0, 2.0]), _records([1.0, 2.0, 3.0])
    with pytest.raises(InputDataError, match=r"r\.step_5 and r\.step_0 rescored_records hold"):
        collect_rescored_entropies(a, b, index=[("r", 0, 0), ("r", 5, 0)])


def test_mini_dapo_default_run_includes_rescoring_and_base_does_not():
    from kedro.config import OmegaConfigLoader
    from kedro.framework.project import configure_project

    from hed.pipeline_registry import register_pipelines

    repo = Path(__file__).resolve().parents[2]

    def parameters(env: str) -> dict:
        loader = OmegaConfigLoader(str(repo / "conf"), base_env="base", default_run_env=env)
        return loader["parameters"]

    configure_project("hed")
    for env, expected in (("mini_dapo", True), ("local", False)):  # local: base only
        with session.session_config(parameters(env)):
            default = register_pipelines()["__default__"]
        names = {n.name for n in default.nodes}
        assert ("check_self_consistency" in names) is expected, env
    params = parameters("mini_dapo")
    pipeline = create_pipeline(layout.layout_from_params(params), params)
    shard_nodes = [n for n in pipeline.nodes if n.name.endswith(".rescore_shard")]
    assert len(shard_nodes) == 8 and all("gpu" in n.tags for n in shard_nodes)
    (check,) = [n for n in pipeline.nodes if n.name == "check_self_consistency"]
    assert "mini_dapo_with_clip.step_24.token_records" in check.inputs
    assert "mini_dapo_without_clip.step_24.token_records" in check.inputs
