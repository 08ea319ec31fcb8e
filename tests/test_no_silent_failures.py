"""No silent failures: what used to pass unnoticed is refused, in one line, before any node runs.

Each test drives a real ``kedro run`` (in-process, or the CLI for the command-line typos) in a
throwaway project copy (:mod:`tests.project_copy`) and checks the refusal and that no node ran
(no dataset file written).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from kedro.config import OmegaConfigLoader

from hed.config import session
from hed.decode.checkpoints import checkpoint_fingerprint
from hed.errors import ConfigError
from hed.io.missing_inputs import MissingInputError
from hed.io.run_lock import LOCK_NAME, RunLockedError

from .project_copy import (
    REPO_ROOT,
    RUN,
    TINY,
    copy_project,
    run_kedro,
    run_kedro_cli,
    sigint_not_ignored,
)


@pytest.fixture
def project(tmp_path, smollm2_dir, monkeypatch):
    monkeypatch.setattr(session, "_session", session.active_session())  # restored afterwards
    return copy_project(tmp_path / "project", smollm2_dir)


def files_under(folder: Path) -> list[Path]:
    """Every file under ``folder`` (none when it does not exist)."""
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def write_yaml(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


# ------------------------------------------------------------------ 1. one data root per env


@pytest.mark.parametrize("env", ["qae_repro", "mini_dapo"])
def test_every_dataset_of_an_environment_lies_under_its_own_data_root(env):
    def filepaths(run_env: str | None) -> dict[str, str]:
        loader = OmegaConfigLoader(
            str(REPO_ROOT / "conf"), base_env="base", default_run_env="local", env=run_env
        )
        catalog = loader["catalog"]
        root = loader["globals"]["data_root"]
        paths = {
            name: entry["filepath"]
            for name, entry in catalog.items()
            if not name.startswith("_") and "filepath" in entry
        }
        # results/ (published copies) is per environment by folder; the demo prompt file is
        # a shipped input
        written = {n: p for n, p in paths.items() if not p.startswith("results/")}
        return root, {n: p for n, p in written.items() if n != "raw_prompts" or run_env}

    base_root, base = filepaths(None)
    root, study = filepaths(env)
    assert (base_root, root) == ("data", f"data/{env}")
    assert all(p.startswith("data/") and not p.startswith("data/qae_repro") for p in base.values())
    assert all(p.startswith(f"{root}/") for p in study.values()), study
    assert not set(base.values()) & set(study.values())


@pytest.mark.slow
def test_base_reporting_after_a_study_run_reads_only_base_data(project):
    write_yaml(project / "conf/my_study/globals.yml", {"data_root": "data/my_study"})
    run_kedro(project, env="my_study", params=TINY)
    study_files = {p: p.read_bytes() for p in files_under(project / "data/my_study")}
    assert any(p.name.endswith("figure2_single_run_diagnostic.csv") for p in study_files)

    # base has no aggregation outputs of its own: its reporting is refused before any node (it
    # used to draw the study's tables and overwrite the demo's figures); the first input it
    # lacks is one of base's own files (data/..., not data/my_study/...)
    with pytest.raises(
        MissingInputError, match=r"never written: checkpoints \(data/02_intermediate/checkpoints"
    ):
        run_kedro(project, "reporting")
    assert not files_under(project / "data/08_reporting")
    assert {p: p.read_bytes() for p in files_under(project / "data/my_study")} == study_files


def test_an_environment_without_its_own_data_root_is_refused_before_any_node(project):
    (project / "conf/my_study").mkdir()  # no globals.yml: it would share base's `data`
    run_kedro(project, "generation", params=TINY)  # base owns data/
    before = files_under(project / "data")
    with pytest.raises(ConfigError, match=r"project/data belongs to environment base"):
        run_kedro(project, "generation", env="my_study", params=TINY)
    assert files_under(project / "data") == before


def test_a_concurrent_second_run_is_refused_naming_the_first(project):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from hed.io import run_lock; "
            "run_lock.acquire(sys.argv[1], 'base'); print('locked', flush=True); time.sleep(60)",
            str(project / "data"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError) as refused:
            run_kedro(project, "generation", params=TINY)
        message = str(refused.value)
        assert f"pid {holder.pid} on {socket.gethostname()}" in message and "\n" not in message
        assert not files_under(project / "data/02_intermediate")  # no node ran
    finally:
        holder.kill()
        holder.wait()
    # the first run is gone: its lock is stale, replaced with a warning, and the run goes on
    run_kedro(project, "generation", params=TINY)
    assert files_under(project / "data/02_intermediate")
    assert not (project / "data" / LOCK_NAME).exists()  # released at the end of the run


# ------------------------------------------------------------------ 2. unknown keys


def test_a_misspelt_key_in_a_parameters_file_is_refused_naming_file_and_key(project):
    path = project / "conf/base/parameters_generation.yml"
    path.write_text(path.read_text().replace("  temperature: 1.0", "  temprature: 0.7"))
    with pytest.raises(ConfigError) as refused:
        run_kedro(project, "generation", params=TINY)
    assert str(refused.value) == (
        "unknown parameter generation.temprature (set in "
        "conf/base/parameters_generation.yml): did you mean generation.temperature? HED does "
        "not read it, so it would be ignored"
    )
    assert not files_under(project / "data/02_intermediate")


def test_a_misspelt_runtime_param_is_refused_naming_params(project):
    with pytest.raises(ConfigError) as refused:
        run_kedro(project, params={"aggregation": {"top_entropy_fraction": 0.05}})
    assert "aggregation.top_entropy_fraction (set in --params)" in str(refused.value)
    assert "did you mean aggregation.top_entropy_frac?" in str(refused.value)


# ------------------------------------------------------------------ 3. strict mode up front


def test_strict_completeness_fails_before_any_node_runs(project):
    conf = project / "conf/qae_repro"
    params = yaml.safe_load((conf / "parameters.yml").read_text())
    del params["runs"]["dapo_without_clip"]  # one run: no role pair
    params["runs"]["dapo_with_clip"]["steps"] = [0]
    write_yaml(conf / "parameters.yml", params)
    reporting = yaml.safe_load((conf / "parameters_reporting.yml").read_text())
    reporting["reporting"]["fig3"]["steps"] = [0, 10]
    write_yaml(conf / "parameters_reporting.yml", reporting)

    started = time.perf_counter()
    with pytest.raises(ConfigError) as refused:
        run_kedro(project, env="qae_repro")
    message = str(refused.value)
    assert message.startswith("reporting.strict is true but the figures cannot be complete: ")
    assert "(1) runs needs a with_clip and a without_clip run" in message
    assert "(2) reporting.fig3.steps [10] are not in runs.dapo_with_clip.steps" in message
    assert not files_under(project / "data/qae_repro")  # no node ran, nothing written
    assert time.perf_counter() - started < 60


# ------------------------------------------------------------------ 4. content fingerprints


def test_checkpoints_differing_in_one_weight_have_different_fingerprints(tmp_path):
    from safetensors.numpy import save_file

    weights = {"w": np.zeros((64, 64), np.float32), "b": np.ones(64, np.float32)}
    folders = []
    for name, bump in (("a", 0.0), ("b", 1e-3)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text('{"model_type": "llama"}')
        changed = {**weights, "w": weights["w"].copy()}
        changed["w"][17, 3] += bump
        save_file(changed, folder / "model.safetensors")
        folders.append(folder)
    a, b = (checkpoint_fingerprint(f) for f in folders)
    assert (folders[0] / "model.safetensors").stat().st_size == (
        folders[1] / "model.safetensors"
    ).stat().st_size
    assert a["weights_index_sha256"] == b["weights_index_sha256"]  # names and sizes: the same
    assert a["weights_xxh3_128"] != b["weights_xxh3_128"]
    assert len(a["weights_xxh3_128"]) == 32
    assert checkpoint_fingerprint(folders[0]) == {**a}  # deterministic


@pytest.mark.slow
def test_reuse_of_shards_of_a_retrained_checkpoint_is_refused(tmp_path, smollm2_dir, monkeypatch):
    monkeypatch.setattr(session, "_session", session.active_session())
    project = tmp_path / "project"
    copy_project(project, smollm2_dir)
    # a checkpoint of our own (a copy of the model) that we can retrain in place
    step = project / "data/01_raw/checkpoints" / RUN / "global_step_0" / "actor_hf"
    step.unlink()
    step.mkdir()
    for item in smollm2_dir.iterdir():
        (step / item.name).symlink_to(item)
    (step / "model.safetensors").unlink()
    weights = (smollm2_dir / "model.safetensors").read_bytes()
    (step / "model.safetensors").write_bytes(weights)
    # an absolute root: the in-process run resolves parameter paths against this process's cwd
    params = {**TINY, "runs": {RUN: {"checkpoint_root": str(step.parent.parent)}}}
    run_kedro(project, "generation", params=params)

    # "retrain": one byte of the last tensor's data changes; names and sizes stay
    (step / "model.safetensors").write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))
    with pytest.raises(ConfigError) as refused:
        run_kedro(project, "generation", params=params, only_missing_outputs=True)
    assert "stale shard: checkpoint weights_xxh3_128 was" in str(refused.value)
    assert "restore the checkpoint it was generated from" in str(refused.value)


# ------------------------------------------------------------------ 5. prompts


def test_duplicate_prompts_are_warned_with_the_count_and_dropped_or_kept(tmp_path, caplog):
    from hed.io.datasets import PromptFileDataset
    from hed.pipelines.generation.nodes import build_prompt_set

    path = tmp_path / "prompts.jsonl"
    rows = [{"problem": p, "answer": "1"} for p in ("a", "b", "a", "c", "a", "b")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    raw = PromptFileDataset(filepath=str(path)).load()
    params = {"prompt_columns": ["problem"], "num_prompts": None, "seed": 0}
    with caplog.at_level(logging.WARNING, logger="hed.decode.prompts"):
        dropped = build_prompt_set(raw, params)
    assert dropped["source_row"].tolist() == [0, 1, 3]
    assert dropped["prompt_id"].is_unique
    (warning,) = [r.getMessage() for r in caplog.records if "duplicate" in r.getMessage()]
    assert "3 duplicate prompt(s)" in warning and "first: line 3, same as line 1" in warning
    assert "dropped (prompts.duplicates: drop)" in warning

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hed.decode.prompts"):
        kept = build_prompt_set(raw, {**params, "duplicates": "keep"})
    assert kept["source_row"].tolist() == [0, 1, 2, 3, 4, 5]
    assert any("3 duplicate prompt(s)" in r.getMessage() for r in caplog.records)


def test_a_prompt_longer_than_the_context_is_refused_before_generation(smollm2_dir, monkeypatch):
    import hed.decode.hf
    from hed.pipelines.generation.nodes import generate_shard

    def no_generation(*args, **kwargs):
        raise AssertionError("generation started")

    monkeypatch.setattr(hed.decode.hf, "generate_sequences", no_generation)
    prompts = pd.DataFrame(
        {
            "prompt_index": np.array([0, 1], np.int32),
            "prompt_id": ["a", "b"],
            "prompt": ["What is 1+1?", "word " * 9000],
            "answer": pd.array(["2", None], dtype="string"),
        }
    )
    checkpoints = {RUN: {"steps": {"0": {"model_dir": str(smollm2_dir)}}}}
    generation = {"num_shards": 1, "samples_per_prompt": 1, "max_new_tokens": 64,
                  "torch_threads": 1, "dtype": "float32"}  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        generate_shard(prompts, checkpoints, {}, generation, run=RUN, step=0, shard=0)
    message = str(refused.value)
    assert message.startswith("prompt_index 1 has ")
    assert "context of 8192 tokens" in message and "at most 8128 prompt tokens fit" in message
    assert "1 prompt(s) too long" in message


# ------------------------------------------------------------------ 6. kedro's own typos


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("--pipelines", "generaton"),
            "ConfigError: --pipelines generaton: no such pipeline; did you mean generation? "
            "HED's pipelines: aggregation, analyses, dynamics, generation, metrics, mini_rl, "
            "publish, reporting, rescoring (none: the whole chain) [HED_TRACEBACK=1 shows the "
            "traceback]",
        ),
        (
            ("--env", "my_stduy"),
            "ConfigError: --env my_stduy: there is no conf/my_stduy folder; did you mean --env "
            "my_study? environments: base, local, mini_dapo, mini_entropy, mini_rollouts, "
            "my_study, qae_repro (create "
            "conf/my_stduy/ for a new study) [HED_TRACEBACK=1 shows the traceback]",
        ),
    ],
)
def test_a_misspelt_pipeline_or_env_ends_in_one_line(tmp_path, smollm2_dir, args, line):
    project = copy_project(tmp_path / "project", smollm2_dir)
    (project / "conf/local").mkdir(exist_ok=True)
    (project / "conf/my_study").mkdir()
    result = run_kedro_cli(project, "run", *args, check=False, env={"HED_TRACEBACK": ""})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "Running node" not in output
    assert result.stderr.strip().splitlines()[-1] == line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("--nodes", "compute_entropy_threshold"),
            "ConfigError: --nodes compute_entropy_threshold: the pipeline has no such node; "
            "did you mean smollm2_demo.step_0.compute_entropy_threshold? ",
        ),
        (
            ("--from-nodes", "smollm2_demo.step_0.merge_token_record"),
            "ConfigError: --from-nodes smollm2_demo.step_0.merge_token_record: the pipeline has "
            "no such node; did you mean smollm2_demo.step_0.merge_token_records",
        ),
        (
            ("--to-nodes", "plot_figure_2"),
            "ConfigError: --to-nodes plot_figure_2: the pipeline has no such node; did you mean "
            "plot_figure2",
        ),
        (
            ("--tags", "reportin"),
            "ConfigError: --tags reportin: the pipeline has no such tag; did you mean reporting",
        ),
        (
            ("--to-outputs", "figure_plann"),
            "ConfigError: --to-outputs figure_plann: the pipeline has no such dataset; did you "
            "mean figure_plan",
        ),
        (
            ("--namespaces", "demo"),
            "ConfigError: --namespaces demo: the pipeline has no such namespace; the pipeline's "
            "namespaces: smollm2_demo, smollm2_demo.step_0, ",
        ),
        (
            ("--load-versions", "prompt:2026-12-01T10.00.00.000Z"),
            "ConfigError: --load-versions prompt:2026-12-01T10.00.00.000Z: the pipeline has no "
            "such dataset; did you mean prompts",
        ),
        (  # mini_rl has nodes only in conf/mini_dapo
            ("--pipelines", "mini_rl"),
            "ConfigError: --pipelines mini_rl: no node in the default environment (base + "
            "local); mini_rl runs only in --env mini_dapo: kedro run --env mini_dapo "
            "--pipelines mini_rl",
        ),
        (  # each exists, but nothing lies downstream of figure_plan and upstream of checkpoints
            ("--from-inputs", "figure_plan", "--to-outputs", "checkpoints"),
            "ConfigError: --from-inputs figure_plan --to-outputs checkpoints: together these "
            "select no node of the pipeline",
        ),
    ],
)
def test_a_misspelt_node_or_tag_ends_in_one_line(tmp_path, smollm2_dir, args, expected):
    project = copy_project(tmp_path / "project", smollm2_dir)
    (project / "conf/local").mkdir(exist_ok=True)
    result = run_kedro_cli(project, "run", *args, check=False, env={"HED_TRACEBACK": ""})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "Running node" not in output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(expected), last
    assert last.endswith("[HED_TRACEBACK=1 shows the traceback]"), last


# ------------------------------------------------------------------ 7. log hygiene


def test_the_last_progress_line_is_printed_once(caplog, monkeypatch):
    from hed.decode import progress as progress_module

    clock = iter([0.0, 10.0, 10.0, 10.0, 10.0, 10.0])
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: next(clock))
    progress = progress_module.ShardProgress("r.step_0.shard_0", 2, every_s=5, bar=False)
    with caplog.at_level(logging.INFO, logger=progress_module.__name__):
        progress(2, 8)  # 10 s later: a periodic line with the final counts
        progress.finish(["eos", "length"])
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "r.step_0.shard_0: 2/2 sequences, 8 tokens, 0.8 tokens/s, ETA 0 s",
        "r.step_0.shard_0: generated 2 sequence(s), 8 tokens in 10.0 s (0.8 tokens/s); "
        "finish reasons: eos 1, length 1",
    ]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="signals a process group")
def test_ctrl_c_reports_interrupted_with_the_resume_command(tmp_path):
    import signal

    script = (
        "from hed.errors import install_short_tracebacks; install_short_tracebacks(); "
        f"from tests import runner_nodes; runner_nodes.run_sleeper({str(tmp_path)!r})"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'src'}", "HED_TRACEBACK": ""}
    with (tmp_path / "parent.log").open("w") as log, sigint_not_ignored():
        parent = subprocess.Popen(
            [sys.executable, "-c", script], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        pid_file = tmp_path / "child.pid"
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        parent.send_signal(signal.SIGINT)  # what Ctrl-C sends
        parent.wait(timeout=30)
    finally:
        parent.kill()
        parent.wait()
    output = (tmp_path / "parent.log").read_text()
    assert "Node sleep interrupted on GPU 0" in output
    assert "failed" not in output and "Traceback" not in output
    assert (
        output.strip()
        .splitlines()[-1]
        .startswith(
            "RunInterruptedError: interrupted (Ctrl-C): 0 of 1 node(s) completed and kept their "
            "outputs; resume with: kedro run --runner hed.runners.GPURunner --runner-params "
            "'gpus=[0]' --from-nodes sleep"
        )
    )


@pytest.mark.slow
def test_gpu_runner_logs_name_the_cpu_and_hold_no_child_warnings(tmp_path, smollm2_dir):
    import torch

    project = copy_project(tmp_path / "project", smollm2_dir)
    params = ",".join(
        f"{section}.{key}={value}"
        for section, values in TINY.items()
        for key, value in values.items()
    )
    result = run_kedro_cli(
        project,
        "run",
        "--pipelines",
        "generation",
        "--runner",
        "hed.runners.GPURunner",
        "--runner-params",
        "gpus=[0]",
        "--params",
        params + ",generation.log_every_s=0.001",
    )
    output = result.stdout + result.stderr
    assert "has no attribute 'datasets'" not in output
    assert "'partial' function" not in output
    lines = output.splitlines()
    final = [line for line in lines if "generated 2 sequence(s)" in line]
    assert len(final) == 1, final  # one summary line (2 prompts x 1 sample, 1 shard)
    assert len([line for line in lines if "2/2 sequences" in line]) <= 1  # not repeated
    if not torch.cuda.is_available():
        assert "generate_shard done on CPU (GPU 0 named, no CUDA device)" in output


# ------------------------------------------------------------------ the catalog's templates


@pytest.mark.parametrize("env", [None, "qae_repro", "mini_dapo"])
def test_every_catalog_entry_resolves_with_a_type_and_an_allowed_layer(env):
    loader = OmegaConfigLoader(
        str(REPO_ROOT / "conf"), base_env="base", default_run_env="local", env=env
    )
    layers = {"raw", "intermediate", "primary", "feature", "reporting"}
    for name, entry in loader["catalog"].items():
        if name.startswith("_"):
            continue  # the YAML templates (anchors) of the repeated blocks
        assert entry.get("type"), name
        assert "${" not in str(entry.get("filepath", "")), name  # globals resolved
        assert entry["metadata"]["kedro-viz"]["layer"] in layers, name
        if str(entry["type"]).endswith("CSVDataset"):
            assert entry["save_args"] == {"index": False}, name
            # every table is versioned but the W&B export, a stable path users point at
            assert entry.get("versioned", False) is (name != "{run}.metrics_export"), name
