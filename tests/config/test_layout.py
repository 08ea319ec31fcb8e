"""hed.config.layout: the runs × steps × shards the pipelines are built for, from the parameters."""

from __future__ import annotations

import pytest

from hed.config.layout import layout_from_params, training_inputs
from hed.errors import ConfigError


def test_layout_sorts_steps_and_keeps_run_order(tmp_path):
    for step in (200, 20, 80):
        (tmp_path / f"global_step_{step}").mkdir()
    layout = layout_from_params(
        {
            "runs": {
                "without": {"role": "without_clip", "checkpoint_root": "/c/w", "steps": [80, 20]},
                "with": {"role": "with_clip", "checkpoint_root": str(tmp_path), "steps": "all"},
            },
            "generation": {"num_shards": 4},
        }
    )
    assert layout.num_shards == 4
    assert [(run.name, step) for run, step in layout.run_steps()] == [
        ("without", 20),
        ("without", 80),
        ("with", 20),
        ("with", 80),
        ("with", 200),
    ]
    assert layout.run("with").role == "with_clip"
    with pytest.raises(ConfigError, match="unknown run 'other': known runs are without, with"):
        layout.run("other")


def test_embedded_run_without_checkpoints_yet_is_step_0():
    layout = layout_from_params(
        {"runs": {"demo": {"checkpoint_root": "/nowhere", "steps": "all", "embedded": True}}}
    )
    assert layout.runs[0].steps == (0,) and layout.num_shards == 1  # default: one shard


@pytest.mark.parametrize(
    ("runs", "generation", "message"),
    [
        ({}, {}, "parameter `runs` is missing or empty"),
        ({"a b": {"checkpoint_root": "/c", "steps": [0]}}, {}, "run name 'a b'"),
        ({"r": {"checkpoint_root": "/c", "steps": [0], "role": "clip"}}, {}, "runs.r.role"),
        ({"r": {"checkpoint_root": "/c", "steps": [1, 1]}}, {}, "lists a step twice: [1, 1]"),
        ({"r": {"checkpoint_root": "/c", "steps": [True]}}, {}, "True is not a non-negative"),
        ({"r": {"checkpoint_root": "/c", "steps": [0]}}, {"num_shards": 0}, "num_shards must"),
    ],
)
def test_bad_layouts_are_one_line_config_errors(runs, generation, message):
    with pytest.raises(ConfigError) as exc:
        layout_from_params({"runs": runs, "generation": generation})
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_training_inputs_only_with_a_mini_rl_section():
    assert training_inputs({"mini_rl": {"runs": {}}}) == {"training_manifest": "mini_rl_manifest"}
    assert training_inputs({"runs": {}}) == {}
