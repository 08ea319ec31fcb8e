"""Checkpoint discovery: step parsing, layouts, and the one-line errors for bad folders."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from hed.decode.checkpoints import (
    checkpoint_fingerprint,
    discover_steps,
    identical_checkpoints,
    model_dir_for_step,
    step_from_path,
    warn_identical_checkpoints,
)
from hed.errors import CheckpointError


def _model(folder, weights=True, adapter=False):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    if weights:
        (folder / "model.safetensors").write_bytes(b"0" * 16)
    if adapter:
        (folder / "adapter_config.json").write_text("{}")
        (folder / "adapter_model.safetensors").write_bytes(b"0")
    return folder


@pytest.mark.parametrize(
    ("path", "step"),
    [
        ("/ckpt/run/global_step_20/actor_hf", 20),
        ("/ckpt/run/global_step_7/actor/huggingface", 7),
        ("/x/global_step_900/archive/global_step_12/actor_hf", 12),
        ("global_step_0", 0),
    ],
)
def test_step_from_path_takes_the_nearest_component(path, step):
    assert step_from_path(path) == step


def test_step_from_path_without_step_component_fails():
    with pytest.raises(CheckpointError, match="no 'global_step_<N>'"):
        step_from_path("/ckpt/run/actor_hf")


def test_discover_steps_sorts_numerically_and_ignores_other_folders(tmp_path):
    for step in (100, 20, 3):
        (tmp_path / f"global_step_{step}").mkdir()
    (tmp_path / "global_step_x").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")
    assert discover_steps(tmp_path) == [3, 20, 100]


def test_both_model_layouts_are_found(tmp_path):
    _model(tmp_path / "global_step_1" / "actor_hf")
    _model(tmp_path / "global_step_2" / "actor" / "huggingface")
    assert model_dir_for_step(tmp_path, 1) == tmp_path / "global_step_1" / "actor_hf"
    assert model_dir_for_step(tmp_path, 2) == tmp_path / "global_step_2" / "actor" / "huggingface"


def test_missing_step_names_the_folder(tmp_path):
    _model(tmp_path / "global_step_1" / "actor_hf")
    with pytest.raises(CheckpointError) as err:
        model_dir_for_step(tmp_path, 5)
    assert str(tmp_path / "global_step_5") in str(err.value)
    assert "\n" not in str(err.value)


def test_config_only_checkpoint_needs_merging(tmp_path):
    _model(tmp_path / "global_step_3" / "actor" / "huggingface", weights=False)
    with pytest.raises(CheckpointError, match=r"needs merging \(verl model_merger\)"):
        model_dir_for_step(tmp_path, 3)


def test_fsdp_shards_only_needs_merging(tmp_path):
    actor = tmp_path / "global_step_4" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_8_rank_0.pt").write_bytes(b"0")
    with pytest.raises(CheckpointError, match="needs merging"):
        model_dir_for_step(tmp_path, 4)


def test_lora_adapter_only_fails_clearly(tmp_path):
    _model(tmp_path / "global_step_5" / "actor_hf", weights=False, adapter=True)
    with pytest.raises(CheckpointError, match="LoRA adapter"):
        model_dir_for_step(tmp_path, 5)


def test_fingerprint_changes_with_config(tmp_path):
    folder = _model(tmp_path / "global_step_1" / "actor_hf")
    first = checkpoint_fingerprint(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    second = checkpoint_fingerprint(folder)
    assert first["config_sha256"] != second["config_sha256"]
    assert first["weights_index_sha256"] == second["weights_index_sha256"]
    assert len(first["config_sha256"]) == 64


def test_byte_identical_checkpoints_of_two_steps_or_runs_get_one_warning(tmp_path, caplog):
    def model(path, weights):
        folder = _model(tmp_path / path)
        (folder / "model.safetensors").write_bytes(weights)
        return checkpoint_fingerprint(folder)

    fingerprints = {
        "dapo": {
            "0": model("dapo/0", b"base"),
            "10": model("dapo/10", b"w10"),
            "20": model("dapo/20", b"w10"),
        },  # step 20 is step 10 copied
        "ppo": {"0": model("ppo/0", b"base"), "10": model("ppo/10", b"w10-other")},
        "copy": {"5": model("copy/5", b"w10-other")},  # pointed at ppo's step 10
    }
    assert identical_checkpoints(fingerprints) == [
        [("dapo", 0), ("ppo", 0)],
        [("dapo", 10), ("dapo", 20)],
        [("ppo", 10), ("copy", 5)],
    ]
    with caplog.at_level(logging.INFO, logger="hed.decode.checkpoints"):
        warn_identical_checkpoints(fingerprints)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "byte-identical checkpoints (same config.json and weights): [dapo step 10, dapo step "
        "20]; [ppo step 10, copy step 5]; their tables would be identical: check "
        "checkpoint_root and steps of these runs"
    ]
    # one base model both runs start from is expected: said, not warned
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert infos == ["runs start from the same checkpoint: dapo step 0, ppo step 0"]


def test_distinct_checkpoints_give_no_warning(tmp_path, caplog):
    a = _model(tmp_path / "a")
    b = _model(tmp_path / "b")
    (b / "model.safetensors").write_bytes(b"1" * 16)  # same size, other bytes
    with caplog.at_level(logging.INFO, logger="hed.decode.checkpoints"):
        warn_identical_checkpoints(
            {"r": {0: checkpoint_fingerprint(a), 1: checkpoint_fingerprint(b)}}
        )
    assert caplog.records == []


class _Saves:
    """Stands for a model or tokenizer: ``save_pretrained`` writes one file, or fails."""

    def __init__(self, name: str, fail: bool = False):
        self.name, self.fail = name, fail

    def save_pretrained(self, folder):
        if self.fail:
            raise OSError(28, "No space left on device")
        (Path(folder) / self.name).write_text(self.name)


def test_write_model_folder_replaces_atomically_and_is_world_readable(tmp_path):
    from hed.decode.checkpoints import write_model_folder

    target = tmp_path / "global_step_3" / "actor_hf"
    write_model_folder(_Saves("old.json"), _Saves("tok.json"), target)
    write_model_folder(_Saves("config.json"), _Saves("tok.json"), target)
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "tok.json"]
    assert target.stat().st_mode & 0o777 == 0o755
    with pytest.raises(OSError, match="No space"):
        write_model_folder(_Saves("config.json"), _Saves("tok.json", fail=True), target)
    # the failed write left no temporary folder and did not touch the complete one
    assert [p.name for p in target.parent.iterdir()] == ["actor_hf"]
    assert (target / "config.json").read_text() == "config.json"


# ------------------------------------------------------------------ TRL / HF Trainer layout


def _trainer_run(root: Path, steps: list[int]) -> Path:
    """A TRL / HF Trainer output folder: checkpoint-<N>/ with weights and optimizer state."""
    for step in steps:
        folder = _model(root / f"checkpoint-{step}")
        (folder / "optimizer.pt").write_bytes(b"0")
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (root / "runs").mkdir()  # TensorBoard logs beside them are not steps
    return root


def test_trainer_checkpoint_folders_are_steps(tmp_path):
    _trainer_run(tmp_path, [500, 20, 1000])
    assert discover_steps(tmp_path) == [20, 500, 1000]
    assert model_dir_for_step(tmp_path, 500) == tmp_path / "checkpoint-500"
    assert step_from_path(tmp_path / "checkpoint-500") == 500


def test_steps_all_finds_trainer_checkpoints(tmp_path):
    from hed.config.layout import layout_from_params

    _trainer_run(tmp_path, [100, 10])
    runs = {"trl_run": {"role": "with_clip", "checkpoint_root": str(tmp_path), "steps": "all"}}
    layout = layout_from_params({"runs": runs, "generation": {"num_shards": 1}})
    assert [step for _, step in layout.run_steps()] == [10, 100]


def test_a_missing_trainer_step_names_both_layouts(tmp_path):
    _trainer_run(tmp_path, [10])
    with pytest.raises(CheckpointError) as err:
        model_dir_for_step(tmp_path, 20)
    message = str(err.value)
    assert str(tmp_path / "global_step_20") in message
    assert str(tmp_path / "checkpoint-20") in message


def test_a_lora_only_trainer_checkpoint_is_refused(tmp_path):
    _model(tmp_path / "checkpoint-5", weights=False, adapter=True)
    with pytest.raises(CheckpointError, match="only LoRA adapter weights"):
        model_dir_for_step(tmp_path, 5)


def test_a_mixed_folder_is_one_line_naming_both_layouts(tmp_path):
    _model(tmp_path / "global_step_10" / "actor_hf")
    _trainer_run(tmp_path, [20])
    for call in (lambda: discover_steps(tmp_path), lambda: model_dir_for_step(tmp_path, 10)):
        with pytest.raises(CheckpointError) as err:
            call()
        message = str(err.value)
        assert "\n" not in message
        assert "verl (global_step_<N>/actor_hf) (global_step_10, ...)" in message
        assert "TRL / HF Trainer (checkpoint-<N>/) (checkpoint-20, ...)" in message
