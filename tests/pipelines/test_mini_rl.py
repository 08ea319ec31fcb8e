"""The mini_rl pipeline: two 2-step GRPO runs on a tiny random model, end to end, then reuse.

CI-fast (a hidden-size-32 Llama with the real SmolLM2 tokenizer, 4-token completions): checks
the checkpoint layout HED reads, the offline W&B run's held-out pass@1 at the checkpoint steps,
that the generation pipeline's nodes accept the checkpoints and the prompt file, and that a
second run reuses everything.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import SequentialRunner
from kedro_datasets.json import JSONDataset
from transformers import AutoModelForCausalLM

from hed.decode.checkpoints import discover_steps, model_dir_for_step
from hed.mini_rl.datasets import TaskSetDataset
from hed.pass1.sources import read_wandb_offline_history
from hed.pipelines.generation.nodes import build_prompt_set, generate_shard, resolve_checkpoints
from hed.pipelines.mini_rl import TRAINING_MANIFEST, create_pipeline, training_inputs
from tests.conftest import build_tiny_model

pytestmark = pytest.mark.slow

RUNS = ("tiny_without_clip", "tiny_with_clip")
METRIC = "val-core/mini_arith/acc/mean@1"
STEP_KEY = "train/global_step"
PROMPTS = {
    "prompt_columns": ["problem"],
    "answer_column": "answer",
    "num_prompts": 2,
    "seed": 0,
    "apply_chat_template": True,
    "enable_thinking": None,
    "system_prompt": None,
    "instruction_suffix": "\nAnswer with the final number only.",
}


def _params(tmp_path: Path, base_model: Path) -> dict:
    return {
        "runs": {
            name: {
                "role": role,
                "checkpoint_root": str(tmp_path / "checkpoints" / name),
                "steps": [0, 2],
            }
            for name, role in zip(RUNS, ("without_clip", "with_clip"), strict=True)
        },
        "prompts": PROMPTS,
        "mini_rl": {
            "base_model": {"embedded": False, "model_dir": str(base_model)},
            "wandb": {"dir": str(tmp_path / "wandb"), "project": "hed-test"},
            "task": {"kinds": ["add", "word"], "num_train": 8, "num_validation": 4, "seed": 0},
            "validation": {"metric_key": METRIC, "max_new_tokens": 4, "batch_size": 4},
            "torch_threads": 1,
            "training": {
                "max_steps": 2,
                "save_every": 2,
                "seed": 0,
                "learning_rate": 1.0e-3,
                "per_device_train_batch_size": 4,
                "num_generations": 4,
                "steps_per_generation": 1,
                "num_iterations": 2,
                "loss_type": "dapo",
                "beta": 0.0,
                "epsilon": 0.2,
                "max_completion_length": 4,
                "bf16": False,
                "gradient_checkpointing": False,
            },
            "runs": {RUNS[0]: {"epsilon_high": 0.2}, RUNS[1]: {"epsilon_high": 0.28}},
        },
    }


def _catalog(tmp_path: Path, params: dict) -> DataCatalog:
    return DataCatalog(
        datasets={
            "raw_prompts": TaskSetDataset(filepath=str(tmp_path / "prompts" / "validation.jsonl")),
            "mini_rl_train_set": TaskSetDataset(filepath=str(tmp_path / "mini_rl" / "train.jsonl")),
            TRAINING_MANIFEST: JSONDataset(filepath=str(tmp_path / "mini_rl" / "manifest.json")),
            "params:runs": MemoryDataset(params["runs"]),
            "params:prompts": MemoryDataset(params["prompts"]),
            "params:mini_rl": MemoryDataset(params["mini_rl"]),
            "params:mini_rl.task": MemoryDataset(params["mini_rl"]["task"]),
        }
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizer) -> tuple[Path, dict, dict]:
    """Both tiny runs trained once: (tmp folder, params, the saved training manifest)."""
    tmp_path = tmp_path_factory.mktemp("mini_rl")
    base = build_tiny_model(tmp_path / "base", tokenizer, scale=20.0)
    params = _params(tmp_path, base)
    catalog = _catalog(tmp_path, params)
    SequentialRunner().run(create_pipeline(params), catalog)
    return tmp_path, params, catalog.load(TRAINING_MANIFEST)


def test_pipeline_trains_the_runs_one_after_another():
    params = _params(Path("x"), Path("base"))
    pipeline = create_pipeline(params)
    nodes = {node.name: node for node in pipeline.nodes}

    assert set(nodes) == {
        "generate_task_sets",
        "tiny_without_clip.train_policy",
        "tiny_with_clip.train_policy",
        "collect_training_manifests",
    }
    assert "raw_prompts" in nodes["generate_task_sets"].outputs
    assert "tiny_without_clip.training_manifest" in nodes["tiny_with_clip.train_policy"].inputs
    assert pipeline.outputs() == {TRAINING_MANIFEST}
    assert {"raw_prompts", "mini_rl_train_set"} <= pipeline.all_outputs()
    order = [node.name for node in pipeline.nodes]  # topological
    assert order.index("tiny_with_clip.train_policy") > order.index(
        "tiny_without_clip.train_policy"
    )


def test_pipeline_is_empty_without_mini_rl_parameters():
    assert create_pipeline({"runs": {}}).nodes == []
    assert training_inputs({"runs": {}}) == {}
    assert training_inputs({"mini_rl": {"runs": {"a": {}}}}) == {
        "training_manifest": TRAINING_MANIFEST
    }


def test_checkpoints_are_written_in_the_layout_hed_reads(trained):
    _, params, manifest = trained
    for run in RUNS:
        root = params["runs"][run]["checkpoint_root"]
        assert discover_steps(root) == [0, 2]
        for step in (0, 2):
            model_dir = model_dir_for_step(root, step)
            assert model_dir == Path(root) / f"global_step_{step}" / "actor_hf"
            assert not list(model_dir.glob("optimizer*")) and not list(model_dir.glob("*.pt"))
            model = AutoModelForCausalLM.from_pretrained(model_dir)
            assert str(model.dtype) == "torch.bfloat16"
            assert model.generation_config.eos_token_id == [2]
        assert manifest["runs"][run]["steps"] == [0, 2]
        assert manifest["runs"][run]["reused"] is False


def test_wandb_offline_run_holds_the_validation_at_the_checkpoint_steps(trained):
    _, params, manifest = trained
    for run in RUNS:
        entry = manifest["runs"][run]
        history = read_wandb_offline_history(
            Path(params["mini_rl"]["wandb"]["dir"]) / run / "wandb",
            metric_key=METRIC,
            step_key=STEP_KEY,
        )
        assert history["step"].tolist() == [0, 2]
        assert history["step_key"].unique().tolist() == [STEP_KEY]  # not W&B's own _step
        expected = [entry["checkpoints"][str(step)]["pass1"] for step in (0, 2)]
        assert history["pass1"].tolist() == pytest.approx(expected)
        assert Path(entry["wandb_run_dir"]).name.startswith("offline-run-")
        logged = {row["step"]: row for row in entry["train_log"]}
        assert set(logged) == {1, 2}
        assert "clip_ratio/high_mean" in logged[2] and "entropy" in logged[1]


def test_generation_nodes_accept_the_checkpoints_and_the_prompt_file(trained):
    tmp_path, params, _ = trained
    checkpoints = resolve_checkpoints(params["runs"], {"num_shards": 1})
    raw = TaskSetDataset(filepath=str(tmp_path / "prompts" / "validation.jsonl")).load()
    prompts = build_prompt_set(raw, PROMPTS)

    assert set(checkpoints) == set(RUNS)
    assert set(checkpoints[RUNS[1]]["steps"]) == {"0", "2"}
    assert prompts["answer"].notna().all() and len(prompts) == 2
    tables = generate_shard(
        prompts,
        checkpoints,
        PROMPTS,
        {
            "num_shards": 1,
            "samples_per_prompt": 1,
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": None,
            "max_new_tokens": 3,
            "batch_size": 2,
            "seed": 0,
            "top_prob_k": 2,
            "dtype": "float32",
            "torch_threads": 1,
        },
        run=RUNS[1],
        step=2,
        shard=0,
    )
    assert tables["sequences"].num_rows == 2


def test_second_run_reuses_checkpoints_and_wandb_runs(trained):
    """The second run gets the sections as the pre-run check hands them (parsed, typed): the
    runs are reused, so the typed sections give the training fingerprint of the raw dicts."""
    from hed.config.mini_rl import MiniRLParams, TaskParams
    from hed.hooks.parameters import hand_to_nodes, parsed_sections

    tmp_path, params, first = trained
    stamps = {
        run: Path(first["runs"][run]["checkpoints"]["2"]["model_dir"])
        .joinpath("model.safetensors")
        .stat()
        .st_mtime_ns
        for run in RUNS
    }
    catalog = _catalog(tmp_path, params)
    pipeline = create_pipeline(params)
    assert "params:mini_rl" in hand_to_nodes(catalog, parsed_sections(pipeline, catalog))
    assert isinstance(catalog.load("params:mini_rl"), MiniRLParams)
    assert isinstance(catalog.load("params:mini_rl.task"), TaskParams)
    SequentialRunner().run(pipeline, catalog)
    second = catalog.load(TRAINING_MANIFEST)

    for run in RUNS:
        assert second["runs"][run]["reused"] is True
        assert second["runs"][run]["wandb_run_dir"] == first["runs"][run]["wandb_run_dir"]
        model_file = (
            Path(second["runs"][run]["checkpoints"]["2"]["model_dir"]) / "model.safetensors"
        )
        assert model_file.stat().st_mtime_ns == stamps[run]
    assert (
        len(
            list(
                (Path(params["mini_rl"]["wandb"]["dir"]) / RUNS[0] / "wandb").glob("offline-run-*")
            )
        )
        == 1
    )


def test_the_task_set_node_gives_the_same_sets_from_the_parsed_section_and_the_raw_dict():
    from hed.config.mini_rl import task_params
    from hed.mini_rl.tasks import KINDS
    from hed.pipelines.mini_rl.nodes import generate_task_sets

    raw = {"num_train": 6, "num_validation": 3, "seed": 4, "kinds": ["add", "word"]}
    from_raw, from_parsed = generate_task_sets(raw), generate_task_sets(task_params(raw))
    for name in ("train", "validation"):
        pd.testing.assert_frame_equal(from_raw[name], from_parsed[name])
    assert len(from_parsed["train"]) == 6 and set(from_parsed["train"]["kind"]) <= {"add", "word"}
    every_kind = generate_task_sets({"num_train": 40, "num_validation": 1})["train"]
    assert set(every_kind["kind"]) == set(KINDS)  # no kinds: every kind


def test_task_set_files_load_as_prompt_files(trained):
    tmp_path, _, _ = trained
    frame = TaskSetDataset(filepath=str(tmp_path / "prompts" / "validation.jsonl")).load()
    train = TaskSetDataset(filepath=str(tmp_path / "mini_rl" / "train.jsonl")).load()

    assert list(frame.columns) == [
        "problem_index",
        "problem",
        "answer",
        "kind",
        "source_file",
        "source_line",  # 1-based line numbers, for messages
    ]
    assert frame["source_line"].tolist() == [1, 2, 3, 4]
    assert len(frame) == 4 and len(train) == 8
    assert not set(frame["problem"]) & set(train["problem"])
    assert pd.api.types.is_string_dtype(frame["answer"]) or frame["answer"].map(type).eq(str).all()


def test_checkpoint_and_wandb_readers_wait_for_the_training():
    from hed.config.layout import layout_from_params
    from hed.pipelines.generation import create_pipeline as generation_pipeline
    from hed.pipelines.metrics import create_pipeline as metrics_pipeline

    params = _params(Path("x"), Path("base"))
    params["generation"] = {"num_shards": 1}
    params["metrics"] = {
        "wandb_defaults": {"metric_key": "val/acc", "step_key": "train/global_step"},
        "runs": {run: {"sources": {"wandb_offline": {"path": f"w/{run}"}}} for run in RUNS},
    }
    layout = layout_from_params(params)
    chain = (
        create_pipeline(params)
        + generation_pipeline(layout, params=params)
        + metrics_pipeline(layout, params=params)
    )
    readers = [
        n
        for n in chain.nodes
        if n.name.split(".")[-1] in {"resolve_checkpoints", "fetch_wandb_history"}
    ]
    assert len(readers) == 1 + len(RUNS)
    order = [n.name for n in chain.nodes]  # topological
    for node in readers:
        assert TRAINING_MANIFEST in node.inputs
        assert order.index(node.name) > order.index("collect_training_manifests")
    # without mini_rl parameters nothing waits for a training
    plain = {k: v for k, v in params.items() if k != "mini_rl"}
    generation = generation_pipeline(layout, params=plain)
    assert all(TRAINING_MANIFEST not in n.inputs for n in generation.nodes)


def test_training_dumps_its_rollouts_in_verl_format_matching_the_train_prompts(trained, tokenizer):
    """TRL generates once per 2 updates (num_iterations 2): 2 updates give dump step 1 (by
    global_step_0) with the 4 completions of its one group, every row matched to a training
    prompt with its sampled ids."""
    import json

    from hed.decode.rollouts import prompt_lookup, rebuild_responses
    from hed.records.verl_dump import dump_steps, read_dump_step

    tmp_path, params, _ = trained
    train = TaskSetDataset(filepath=str(tmp_path / "mini_rl" / "train.jsonl")).load()
    prompts = build_prompt_set(train, {**PROMPTS, "num_prompts": None})
    for run in RUNS:
        folder = Path(params["runs"][run]["checkpoint_root"]) / "rollouts"
        assert dump_steps(folder) == [1]
        lines = [json.loads(x) for x in (folder / "1.jsonl").read_text().splitlines()]
        assert len(lines) == 4 and {x["step"] for x in lines} == {1}
        assert {"input", "output", "gts", "score", "acc", "response_ids"} <= set(lines[0])
        assert all(0 < len(x["response_ids"]) <= 4 for x in lines)
        rebuilt = rebuild_responses(
            read_dump_step(folder, 1),
            prompt_lookup(prompts, tokenizer, PROMPTS),
            tokenizer,
            eos_token_ids=[tokenizer.eos_token_id],
            max_response_length=4,
        )
        assert all(r.flag != "no_prompt" for r in rebuilt)
        assert len({r.prompt_index for r in rebuilt}) == 1  # one group per generation batch
        assert [r.response_ids.tolist() for r in rebuilt] == [x["response_ids"] for x in lines]
