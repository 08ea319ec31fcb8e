"""`kedro run --env mini_rollouts` end to end on a miniature's checkpoints and dumps: tiny
random checkpoints at the mini schedule's steps, rollouts dumped by the mini trainer's hook
(RolloutDumper), the shipped environment unchanged; through reporting and the explorer."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pyarrow.parquet as pq
import pytest

from hed.decode.prompts import render_prompt
from hed.mini_rl.rollout_dump import RolloutDumper

from ..conftest import build_tiny_model
from ..project_copy import GPU_RUNNER_GENERATION, copy_project, latest, run_kedro_cli

SUFFIX = "\nAnswer with the final number only."
RUNS = ("mini_dapo_with_clip", "mini_dapo_without_clip")  # sorted, as the run summary lists them
PROBLEMS = [("What is 2 + 3?", 5), ("What is 4 times 2?", 8), ("What is 9 - 7?", 2)]


@pytest.mark.slow
def test_mini_rollouts_env_runs_end_to_end(tmp_path, smollm2_dir, tokenizer):
    project = copy_project(tmp_path / "project", smollm2_dir)
    mini = project / "data/mini_dapo/01_raw"
    (mini / "mini_rl").mkdir(parents=True)
    train = pd.DataFrame({"problem": [p for p, _ in PROBLEMS], "answer": [a for _, a in PROBLEMS]})
    train.to_json(mini / "mini_rl/mini_arith_train.jsonl", orient="records", lines=True)
    eos = tokenizer.eos_token_id
    for run in RUNS:
        root = mini / "checkpoints" / run
        for seed, step in enumerate((0, 8, 16)):
            build_tiny_model(root / f"global_step_{step}" / "actor_hf", tokenizer, seed=seed)
        reward = lambda completions, answer, **_: [  # noqa: E731
            float(c.strip() == str(a)) for c, a in zip(completions, answer, strict=True)
        ]
        dumper = RolloutDumper(reward, root / "rollouts", tokenizer)
        for updates in range(0, 18, 2):  # TRL generates every 2 updates (num_iterations: 2)
            prompts, completions, answers = [], [], []
            for problem, answer in PROBLEMS:
                for guess in (answer, answer + updates % 3 + 1):
                    prompts.append(render_prompt(tokenizer, problem + SUFFIX, {}))
                    completions.append(str(guess))
                    answers.append(str(answer))
            ids = [tokenizer(c, add_special_tokens=False)["input_ids"] + [eos] for c in completions]
            dumper(prompts=prompts, completions=completions, completion_ids=ids, answer=answers,
                   trainer_state=SimpleNamespace(global_step=updates))  # fmt: skip
    # the scoring nodes under GPURunner (spawned workers, as generation's), then the rest of
    # the default run reusing their shards (--only-missing-outputs: the shards are current)
    env = ("--env", "mini_rollouts")
    scoring = run_kedro_cli(project, *GPU_RUNNER_GENERATION[:3], *env, *GPU_RUNNER_GENERATION[3:])
    # the run summary's flag shares, from the metadata of the shards this run wrote: the
    # dumper's ids are the canonical tokenisation + EOS, so no row is flagged
    steps = [f"{r}.step_{s}: 6 scored, none flagged" for r in RUNS for s in (1, 9, 17)]
    flag_lines = ["Run summary: verl dump rows:", *[f"  {x}" for x in steps]]
    flag_lines.append("  all 6 steps: 36 scored, none flagged")
    log = (scoring.stdout + scoring.stderr).splitlines()
    (start,) = [i for i, line in enumerate(log) if "verl dump rows" in line]
    assert [log[start].split("hed.hooks: ")[1], *log[start + 1 : start + 8]] == flag_lines
    found = (project / "data/mini_rollouts/02_intermediate").rglob("shard_0*.parquet")
    shard_files = sorted(p for p in found if p.is_dir())  # versioned: one folder per file
    stamps = {p: sorted(x.name for x in p.iterdir()) for p in shard_files}
    assert len(stamps) == 2 * 3 * 2  # (token_records, sequences) × 3 steps × 2 runs
    rest = run_kedro_cli(project, "run", *env, "--only-missing-outputs", timeout=900)
    assert "verl dump rows" not in rest.stdout + rest.stderr  # it wrote no shard
    assert stamps == {p: sorted(x.name for x in p.iterdir()) for p in shard_files}
    data = project / "data/mini_rollouts"
    summary = pd.read_csv(latest(data / "04_feature/summary_by_step.csv"))
    assert sorted(summary["step"].unique().tolist()) == [1, 9, 17]  # global_step_0, 8, 16
    assert (summary["n_sequences"] == 6).all()
    assert summary["pass1_generated"].tolist() == [0.5] * 6
    found = (data / "02_intermediate").rglob("*.parquet")
    shards = [p for p in found if p.is_file() and "step_9" in str(p) and "shard_" in str(p)]
    metas = [json.loads(pq.read_schema(p).metadata[b"hed.generation"]) for p in shards]
    assert metas and {m["rollouts"]["generated_by"] for m in metas} == {"global_step_8"}
    assert {m["source"] for m in metas} == {"verl_dump"}
    explorer = Path(latest(data / "08_reporting/explorer/study_explorer.html")).read_text()
    # conf/base's analyses.advantage_shaping: the tooltip's six schemes, values embedded
    assert '"labels":["grpo","Dr. GRPO","80/20","entropy-adv","GTPO","GRPO-S"]' in explorer
    assert '"A":[' in explorer
    assert Path(latest(data / "08_reporting/token_report/token_report.html")).is_file()
