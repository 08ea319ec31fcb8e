"""``params:mini_rl`` and ``params:mini_rl.task`` parsed once (hed.config.mini_rl): the
defaults, the one-line refusal of a bad value, the schema reading the defaults, and the
pre-run check handing the typed sections to the nodes."""

from __future__ import annotations

import pytest
from kedro.io import DataCatalog, MemoryDataset

from hed.config.mini_rl import (
    BaseModelParams,
    MiniRLParams,
    TaskParams,
    TrainingWandbParams,
    ValidationParams,
    mini_rl_params,
    task_params,
)
from hed.errors import ConfigError
from hed.hooks.parameters import hand_to_nodes, parsed_sections

from ..conftest import field_defaults

SMALLEST = {"runs": {"a": {}}, "base_model": {"model_dir": "base/actor_hf"}}


def test_the_defaults_of_a_smallest_section():
    parsed = mini_rl_params(SMALLEST)
    assert parsed == MiniRLParams(
        base_model=BaseModelParams(model_dir="base/actor_hf", embedded=False), runs={"a": {}}
    )
    assert parsed.wandb == TrainingWandbParams(dir=None, project="hed-mini-rl")
    assert parsed.validation == ValidationParams(
        metric_key="val-core/mini_arith/acc/mean@1", max_new_tokens=32, batch_size=16
    )
    assert (parsed.reward, parsed.torch_threads, parsed.task, parsed.training) == (
        "integer_match", None, None, {}
    )  # fmt: skip
    assert MiniRLParams.of(parsed) is parsed and MiniRLParams.of(SMALLEST) == parsed
    assert task_params({"num_train": 8, "num_validation": 4}) == TaskParams(
        num_train=8, num_validation=4, seed=0, kinds=None
    )


def test_the_models_declare_the_defaults():
    assert field_defaults(ValidationParams) == {
        "metric_key": "val-core/mini_arith/acc/mean@1", "max_new_tokens": 32, "batch_size": 16
    }  # fmt: skip
    assert field_defaults(TrainingWandbParams) == {"dir": None, "project": "hed-mini-rl"}
    assert field_defaults(TaskParams) == {
        "num_train": ..., "num_validation": ..., "seed": 0, "kinds": None
    }  # fmt: skip
    assert set(MiniRLParams.model_fields) == {
        "base_model", "runs", "training", "task", "wandb", "validation", "reward", "torch_threads"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {**SMALLEST, "runs": {}},
            "mini_rl.runs is empty: name the runs to train (keys of `runs`)",
        ),
        (
            {**SMALLEST, "base_model": {"embedded": True}},
            "mini_rl.base_model.model_dir is missing; set it in the parameters",
        ),
        (
            {**SMALLEST, "validation": {"batch_size": 0}},
            "mini_rl.validation.batch_size must be a positive integer, got 0",
        ),
        (
            {**SMALLEST, "wandb": {"project": ""}},
            "mini_rl.wandb.project must be a non-empty string, got ''",
        ),
        (
            {**SMALLEST, "training": [1]},
            "mini_rl.training must be a mapping (`training: {...}`), got [1]",
        ),
        (
            {**SMALLEST, "task": {"num_train": 8}},
            "mini_rl.task.num_validation is missing; set it in the parameters",
        ),
        (
            {**SMALLEST, "task": {"num_train": 8, "num_validation": 2, "kinds": "add"}},
            "mini_rl.task.kinds must be a list of strings or null, got 'add'",
        ),
    ],
)
def test_a_bad_value_is_refused_in_one_line(raw, message):
    with pytest.raises(ConfigError) as caught:
        mini_rl_params(raw)
    assert str(caught.value) == message


def test_the_pre_run_check_hands_both_sections_to_the_nodes():
    from kedro.pipeline import Node, Pipeline

    task = {"num_train": 8, "num_validation": 4, "kinds": ["add"]}
    raw = {**SMALLEST, "task": task}
    pipeline = Pipeline(
        [
            Node(lambda m: 1, "params:mini_rl", "a", name="reads_mini_rl"),
            Node(lambda t: 1, "params:mini_rl.task", "b", name="reads_task"),
        ]
    )
    catalog = DataCatalog(
        {"params:mini_rl": MemoryDataset(raw), "params:mini_rl.task": MemoryDataset(task)}
    )
    parsed = parsed_sections(pipeline, catalog, "/study/data")
    assert sorted(hand_to_nodes(catalog, parsed)) == ["params:mini_rl", "params:mini_rl.task"]
    assert catalog.load("params:mini_rl") == mini_rl_params(raw, "/study/data")
    assert catalog.load("params:mini_rl.task") == TaskParams(
        num_train=8, num_validation=4, kinds=("add",)
    )


def test_the_pre_run_check_puts_mini_rl_wandb_runs_under_the_run_data_root():
    """``mini_rl.wandb.dir`` left out: the run's data root (handed by the hook), so the
    training node never asks the layout for it."""
    from hed.config.mini_rl import mini_rl_params

    section = {"base_model": {"model_dir": "m"}, "runs": {"a": {}}}
    assert mini_rl_params(section, "/study/data").wandb.dir == "/study/data/01_raw/wandb"
    assert mini_rl_params(section).wandb.dir is None
    given = {**section, "wandb": {"dir": "/elsewhere"}}
    assert mini_rl_params(given, "/study/data").wandb.dir == "/elsewhere"
