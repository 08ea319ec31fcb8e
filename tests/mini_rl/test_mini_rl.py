"""hed.mini_rl without training: tasks, reward, parameters, export, validation, reuse, CPU, W&B."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from hed.config import session
from hed.decode.checkpoints import validate_model_dir
from hed.errors import ConfigError
from hed.mini_rl import config as mini_config
from hed.mini_rl.config import checkpoint_schedule, frame_hash, training_specs
from hed.mini_rl.cpu import CoreMeter, torch_threads_for
from hed.mini_rl.export import export_actor_hf
from hed.mini_rl.manifest import (
    STATUS_COMPLETE,
    STATUS_TRAINING,
    clear_run_outputs,
    read_manifest,
    reusable_manifest,
    write_manifest,
)
from hed.mini_rl.reward import correctness_reward, final_integer, grader, integer_match
from hed.mini_rl.tasks import KINDS, make_task_sets
from hed.mini_rl.trainer import CheckpointCallback, trainer_log_rows
from hed.mini_rl.validation import ValidationResult, greedy_validation
from hed.mini_rl.wandb_offline import offline_run_folder, offline_wandb_run
from hed.pass1.sources import read_wandb_offline_history
from tests.conftest import build_tiny_model

# ------------------------------------------------------------------ tasks


def _solve(problem: str) -> int:
    """Independent reference: the arithmetic each problem template asks for."""
    if m := re.fullmatch(r"What is (\d+) ([+*-]) (\d+)\?", problem):
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        return {"+": a + b, "-": a - b, "*": a * b}[op]
    numbers = [int(n) for n in re.findall(r"\d+", problem)]
    if "buys" in problem:
        return numbers[0] + numbers[1]
    if "gave" in problem:
        return numbers[0] - numbers[1]
    if "in each box" in problem:
        return numbers[0] * numbers[1]
    if "shared equally" in problem:
        return numbers[0] // numbers[1]
    raise AssertionError(problem)


def test_task_sets_are_seeded_disjoint_and_correct():
    train, validation = make_task_sets(num_train=200, num_validation=50, seed=3)
    again_train, again_validation = make_task_sets(num_train=200, num_validation=50, seed=3)

    assert train.equals(again_train) and validation.equals(again_validation)
    assert len(train) == 200 and len(validation) == 50
    assert not set(train["problem"]) & set(validation["problem"])
    assert train["problem"].is_unique
    assert set(train["kind"]) == set(KINDS)
    for frame in (train, validation):
        assert all(
            int(a) == _solve(p) for p, a in zip(frame["problem"], frame["answer"], strict=True)
        )
        assert frame["problem_index"].tolist() == list(range(len(frame)))


def test_validation_set_does_not_depend_on_the_training_set_size():
    _, small = make_task_sets(num_train=10, num_validation=20, seed=0)
    _, large = make_task_sets(num_train=500, num_validation=20, seed=0)
    _, other_seed = make_task_sets(num_train=10, num_validation=20, seed=1)

    assert small.equals(large)
    assert not small.equals(other_seed)


def test_task_sets_reject_bad_requests():
    with pytest.raises(ConfigError, match="unknown kind"):
        make_task_sets(num_train=2, num_validation=2, seed=0, kinds=["add", "div"])
    with pytest.raises(ConfigError, match="num_train must be a positive integer"):
        make_task_sets(num_train=0, num_validation=2, seed=0)
    with pytest.raises(ConfigError, match=r"only .* distinct problems"):
        make_task_sets(num_train=200, num_validation=0 + 1, seed=0, kinds=["mul"])  # 121 exist


# ------------------------------------------------------------------ reward


def test_final_integer_is_the_last_integer_written():
    assert final_integer("11 + 25 = 36") == 36
    assert final_integer("The answer is 1,024.") == 1024
    assert final_integer("25-1=24 cookies") == 24
    assert final_integer("it is -5") == -5
    assert final_integer("no number") is None
    assert not integer_match("11 + 25", "36")  # echoing the question is not an answer


def test_reward_graders():
    completions = ["The answer is 42.", "42", "17 + 25 = 41", "no number", "\\boxed{42}", "40 + 2"]
    by_integer = correctness_reward("integer_match")
    by_math_verify = correctness_reward("math_verify")

    assert by_integer.__name__ == "correctness"  # the reward's name in TRL's logs
    assert by_integer(completions, answer=["42"] * 6, trainer_state=None) == [1, 1, 0, 0, 1, 0]
    assert by_math_verify(completions, answer=["42"] * 6) == [1, 1, 0, 0, 1, 1]
    assert by_integer([[{"role": "assistant", "content": "It is 7."}]], answer=["7"]) == [1.0]
    with pytest.raises(ConfigError, match=r"mini_rl.reward is 'exact'"):
        grader("exact")


# ------------------------------------------------------------------ parameters


def _mini_rl(**training) -> dict:
    return {
        "base_model": {"embedded": False, "model_dir": "base"},
        "task": {"num_train": 8, "num_validation": 4, "seed": 0},
        "training": {
            "max_steps": 24,
            "save_every": 8,
            "learning_rate": 2e-5,
            "epsilon": 0.2,
            **training,
        },
        "runs": {"a": {"epsilon_high": 0.2}, "b": {"epsilon_high": 0.28}},
    }


RUNS = {
    "a": {"checkpoint_root": "ck/a", "steps": [0, 8, 24]},
    "b": {"checkpoint_root": "ck/b", "steps": "all"},
}


def test_checkpoint_schedule_starts_at_zero_and_ends_at_the_last_step():
    assert checkpoint_schedule(24, 8) == (0, 8, 16, 24)
    assert checkpoint_schedule(10, 4) == (0, 4, 8, 10)
    assert checkpoint_schedule(2, 2) == (0, 2)
    with pytest.raises(ConfigError, match="save_every must be a positive integer"):
        checkpoint_schedule(24, 0)


def test_training_specs_merge_shared_and_run_arguments():
    specs = training_specs(_mini_rl(), RUNS, {"instruction_suffix": "!", "num_prompts": 3})

    assert [s.run for s in specs] == ["a", "b"]
    a, b = specs
    assert a.trainer_args["epsilon_high"] == 0.2 and b.trainer_args["epsilon_high"] == 0.28
    assert a.trainer_args["save_strategy"] == "no" and a.trainer_args["report_to"] == ["wandb"]
    assert "save_every" not in a.trainer_args
    assert a.save_steps == (0, 8, 16, 24) and a.checkpoint_root == "ck/a"
    # no `wandb.dir`: under the active environment's data root (`data` in base)
    assert a.wandb_dir == str(Path(session.data_root()) / "01_raw/wandb" / "a")
    assert a.prompt_params["instruction_suffix"] == "!" and "num_prompts" not in a.prompt_params


@pytest.mark.parametrize(
    ("mini_rl", "runs", "message"),
    [
        ({**_mini_rl(), "runs": {"c": {}}}, RUNS, r"no run 'c' in `runs`"),
        (_mini_rl(epsilon_hihg=0.3), RUNS, "unknown GRPOConfig field.*epsilon_hihg"),
        (_mini_rl(save_strategy="steps"), RUNS, "save_strategy: HED sets these itself"),
        (
            _mini_rl(),
            {**RUNS, "a": {"checkpoint_root": "x", "steps": [0, 5]}},
            r"lists \[5\] but mini_rl writes",
        ),
        ({**_mini_rl(), "runs": {}}, RUNS, "mini_rl.runs is empty"),
        ({**_mini_rl(), "reward": "exact"}, RUNS, "mini_rl.reward is 'exact'"),
    ],
)
def test_training_specs_reject_bad_parameters(mini_rl, runs, message):
    with pytest.raises(ConfigError, match=message):
        training_specs(mini_rl, runs)


def test_training_specs_are_the_same_from_the_parsed_section_and_the_raw_dict():
    from hed.config.layout import RunSpec, StudyLayout
    from hed.config.mini_rl import mini_rl_params

    raw = _mini_rl()
    parsed = mini_rl_params(raw)
    prompts = {"instruction_suffix": "!"}
    from_raw = training_specs(raw, RUNS, prompts)
    from_parsed = training_specs(parsed, RUNS, prompts)
    assert from_raw == from_parsed
    assert [s.fingerprint("d", "m") for s in from_raw] == [
        s.fingerprint("d", "m") for s in from_parsed
    ]
    assert from_parsed[0].task == {"num_train": 8, "num_validation": 4, "seed": 0}  # as written
    # params:runs as the pre-run check hands it (a StudyLayout): the same specifications
    layout = StudyLayout(
        runs=(
            RunSpec("a", "single", "ck/a", (0, 8, 24)),
            RunSpec("b", "single", "ck/b", (0, 8, 16, 24), steps_found=True),
        ),
        num_shards=1,
    )
    assert training_specs(parsed, layout, prompts) == from_raw
    assert (from_parsed[0].validation_max_new_tokens, from_parsed[0].wandb_project) == (
        32, "hed-mini-rl"
    )  # fmt: skip


def test_fingerprint_follows_what_shapes_the_weights_only():
    a = training_specs(_mini_rl(), RUNS)[0]
    moved = training_specs(
        _mini_rl(), {**RUNS, "a": {"checkpoint_root": "elsewhere", "steps": [0]}}
    )[0]
    threads = training_specs({**_mini_rl(), "torch_threads": 1}, RUNS)[0]
    lr = training_specs(_mini_rl(learning_rate=1e-5), RUNS)[0]
    b = training_specs(_mini_rl(), RUNS)[1]
    math_verify = training_specs({**_mini_rl(), "reward": "math_verify"}, RUNS)[0]

    reference = a.fingerprint("data", "model")
    assert moved.fingerprint("data", "model") == reference
    assert threads.fingerprint("data", "model") == reference
    assert lr.fingerprint("data", "model") != reference
    assert b.fingerprint("data", "model") != reference  # epsilon_high
    assert math_verify.fingerprint("data", "model") != reference
    assert a.fingerprint("other data", "model") != reference
    assert a.fingerprint("data", "other model") != reference


def test_frame_hash_depends_on_content():
    train, validation = make_task_sets(num_train=5, num_validation=3, seed=0)
    assert frame_hash(train, validation) == frame_hash(train.copy(), validation.copy())
    assert frame_hash(train, validation) != frame_hash(validation, train)


# ------------------------------------------------------------------ export and validation


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory, tokenizer):
    folder = build_tiny_model(tmp_path_factory.mktemp("policy") / "actor_hf", tokenizer, scale=20.0)
    return AutoModelForCausalLM.from_pretrained(folder), tokenizer


def test_export_writes_a_bf16_actor_hf_folder_and_leaves_the_policy_alone(tiny_policy, tmp_path):
    model, tokenizer = tiny_policy
    folder = export_actor_hf(model, tokenizer, tmp_path / "run", 6, [2, 0])

    assert folder == tmp_path / "run" / "global_step_6" / "actor_hf"
    validate_model_dir(folder)
    assert [p.name for p in folder.parent.iterdir()] == ["actor_hf"]  # no temporary left
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert str(loaded.dtype) == "torch.bfloat16" and str(model.dtype) == "torch.float32"
    assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == [2, 0]
    assert AutoTokenizer.from_pretrained(folder).eos_token == tokenizer.eos_token


def test_greedy_validation_grades_and_measures_entropy(tiny_policy):
    model, tokenizer = tiny_policy
    model.train()
    result = greedy_validation(
        model,
        tokenizer,
        ["What is 1 + 1?", "Hi"],
        ["2", "3"],
        eos_token_ids=[2],
        max_new_tokens=3,
        batch_size=1,
    )

    assert model.training  # mode restored
    assert result.n_problems == 2 and 0.0 <= result.pass1 <= 1.0
    assert 0.0 < result.mean_length <= 3.0 and result.mean_entropy >= 0.0
    row = result.as_wandb("val-core/mini_arith/acc/mean@1")
    assert set(row) == {
        "val-core/mini_arith/acc/mean@1",
        "val-aux/mini_arith/entropy/mean",
        "val-aux/mini_arith/response_length/mean",
    }


def test_checkpoint_callback_fires_at_step_zero_and_scheduled_steps():
    class State:
        global_step = 0

    seen = []
    callback = CheckpointCallback([0, 2], lambda model, step: seen.append(step) or {"step": step})
    callback.on_train_begin(None, State, None, model="m")
    for step in (1, 2, 2):
        State.global_step = step
        callback.on_step_end(None, State, None, model="m")

    assert seen == [0, 2]
    assert callback.checkpoints == {0: {"step": 0}, 2: {"step": 2}}


def test_trainer_log_rows_keep_the_per_step_metrics():
    history = [
        {"step": 1, "loss": 0.1, "entropy": 2.0, "reward": 0.5, "profiling": 1},
        {"step": 2, "entropy": 1.5, "clip_ratio/high_mean": 0.01},
        {"step": 2, "train_runtime": 10.0},
    ]
    assert trainer_log_rows(history) == [
        {"step": 1, "loss": 0.1, "entropy": 2.0, "reward": 0.5},
        {"step": 2, "entropy": 1.5, "clip_ratio/high_mean": 0.01},
    ]


def test_validation_result_keys_for_a_flat_metric_key():
    result = ValidationResult(pass1=0.5, mean_entropy=1.0, mean_length=3.0, n_problems=2)
    assert "val-aux/validation/entropy/mean" in result.as_wandb("acc")


# ------------------------------------------------------------------ reuse


def _spec(tmp_path: Path):
    runs = {"a": {"checkpoint_root": str(tmp_path / "ck"), "steps": [0, 2]}}
    mini = {
        **_mini_rl(max_steps=2, save_every=2),
        "runs": {"a": {}},
        "wandb": {"dir": str(tmp_path / "wandb")},
    }
    return training_specs(mini, runs)[0]


def _fake_run(spec, tokenizer_model, fingerprint: str, status: str = STATUS_COMPLETE) -> None:
    model, tokenizer = tokenizer_model
    for step in spec.save_steps:
        export_actor_hf(model, tokenizer, spec.checkpoint_root, step, [2])
    run_dir = Path(spec.wandb_dir) / "wandb" / "offline-run-20250101_000000-abc"
    run_dir.mkdir(parents=True)
    (run_dir / "run-abc.wandb").write_bytes(b"")
    write_manifest(
        spec.checkpoint_root,
        {
            "status": status,
            "fingerprint": fingerprint,
            "steps": list(spec.save_steps),
            "wandb_run_dir": str(run_dir),
        },
    )


def test_reuse_needs_a_complete_matching_manifest_and_every_output(tmp_path, tiny_policy):
    spec = _spec(tmp_path)
    assert reusable_manifest(spec, "f1") is None  # nothing written yet

    _fake_run(spec, tiny_policy, "f1")
    assert reusable_manifest(spec, "f1")["fingerprint"] == "f1"
    assert reusable_manifest(spec, "f2") is None  # a training parameter changed

    write_manifest(
        spec.checkpoint_root, {**read_manifest(spec.checkpoint_root), "status": STATUS_TRAINING}
    )
    assert reusable_manifest(spec, "f1") is None  # killed half-way

    write_manifest(
        spec.checkpoint_root, {**read_manifest(spec.checkpoint_root), "status": STATUS_COMPLETE}
    )
    (Path(spec.checkpoint_root) / "global_step_2" / "actor_hf" / "model.safetensors").unlink()
    assert reusable_manifest(spec, "f1") is None  # a checkpoint lost its weights


def test_clear_run_outputs_removes_its_own_outputs_only(tmp_path, tiny_policy):
    spec = _spec(tmp_path)
    _fake_run(spec, tiny_policy, "f1")
    (Path(spec.checkpoint_root) / "notes.txt").write_text("kept")

    clear_run_outputs(spec)

    assert sorted(p.name for p in Path(spec.checkpoint_root).iterdir()) == ["notes.txt"]
    assert not (Path(spec.wandb_dir) / "wandb").exists()


def test_clear_run_outputs_refuses_checkpoints_it_did_not_write(tmp_path, tiny_policy):
    spec = _spec(tmp_path)
    model, tokenizer = tiny_policy
    export_actor_hf(model, tokenizer, spec.checkpoint_root, 100, [2])

    with pytest.raises(ConfigError, match="mini_rl did not write"):
        clear_run_outputs(spec)
    assert (Path(spec.checkpoint_root) / "global_step_100").is_dir()


# ------------------------------------------------------------------ CPU and W&B


def test_core_meter_subtracts_other_processes_load(monkeypatch):
    from hed.mini_rl import cpu

    # machine-wide (busy, total) CPU seconds and this process's own CPU seconds, per reading
    readings = iter(
        [
            ((100.0, 200.0), 10.0),  # start
            ((106.0, 210.0), 11.0),  # 5 s on 2 cores: 6 busy, 1 own → others 1 core → 1 free
            ((107.0, 220.0), 12.0),  # 1 busy, all of it ours → 2 free
            ((127.0, 230.0), 12.0),  # 20 busy on 2 cores (saturated by others) → at least 1
        ]
    )
    current: dict[str, float] = {}

    def machine():
        (busy_total, own) = next(readings)
        current["own"] = own
        return busy_total

    monkeypatch.setattr(cpu, "_busy_and_total_seconds", machine)
    monkeypatch.setattr(cpu, "_own_cpu_seconds", lambda: current["own"])
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: 2)
    meter = CoreMeter(cores=2)
    assert [meter.free_cores() for _ in range(3)] == [1, 2, 1]
    assert torch_threads_for(3) == 3  # an explicit request is kept


def test_offline_wandb_run_restores_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "secret-not-used")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    with offline_wandb_run(tmp_path, project="p", name="n", config={"lr": 1}) as run:
        assert os.environ["WANDB_MODE"] == "offline" and "WANDB_API_KEY" not in os.environ
        run.log({"m": 0.5, "train/global_step": 3})

    assert "WANDB_MODE" not in os.environ and os.environ["WANDB_API_KEY"] == "secret-not-used"
    history = read_wandb_offline_history(
        offline_run_folder(tmp_path), metric_key="m", step_key="train/global_step"
    )
    assert history[["step", "pass1"]].values.tolist() == [[3, 0.5]]


def test_fixed_trainer_arguments_keep_trl_from_saving_its_own_checkpoints():
    assert mini_config.FIXED_TRAINER_ARGS["save_strategy"] == "no"
    assert mini_config.FIXED_TRAINER_ARGS["use_cpu"] is True


def test_the_shipped_mini_dapo_parameters_give_the_same_specs_parsed_or_raw():
    """conf/mini_dapo as the pre-run check hands it (MiniRLParams, the StudyLayout, the parsed
    prompts): the same training specifications, so the same fingerprints (no retrain)."""
    from hed.config.layout import StudyLayout
    from hed.config.loader import HEDConfigLoader
    from hed.config.mini_rl import mini_rl_params
    from hed.config.prompt_params import prompts_params

    conf = Path(__file__).resolve().parents[2] / "conf"
    params = HEDConfigLoader(
        conf_source=str(conf), base_env="base", default_run_env="local", env="mini_dapo"
    )["parameters"]
    raw = training_specs(params["mini_rl"], params["runs"], params["prompts"],
                         check_trainer_args=False)  # fmt: skip
    parsed = training_specs(
        mini_rl_params(params["mini_rl"]),
        StudyLayout.of(params["runs"], params["generation"]),
        prompts_params(params["prompts"]),
        check_trainer_args=False,
    )
    assert parsed == raw and [s.run for s in parsed] == [
        "mini_dapo_without_clip", "mini_dapo_with_clip"
    ]  # fmt: skip
    assert [s.fingerprint("d", "m") for s in parsed] == [s.fingerprint("d", "m") for s in raw]
    assert parsed[0].save_steps == (0, 8, 16, 24) and parsed[0].validation_batch_size == 16
