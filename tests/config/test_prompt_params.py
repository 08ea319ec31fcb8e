"""The typed ``prompts`` section: defaults, one-line errors, handed parsed to the nodes."""

from __future__ import annotations

import pytest
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Node, Pipeline

from hed.config.prompt_params import PromptsParams, prompts_params
from hed.decode.prompts import PromptRendering
from hed.errors import ConfigError
from hed.hooks.parameters import hand_to_nodes, parsed_sections


def test_prompts_defaults():
    parsed = prompts_params(None)
    assert parsed == prompts_params({}) == PromptsParams()
    assert parsed.prompt_columns == ("prompt", "question", "problem")
    assert (parsed.answer_column, parsed.num_prompts, parsed.seed) == (None, None, 0)
    assert parsed.rendering == PromptRendering(True, None, None)
    assert (parsed.instruction_suffix, parsed.duplicates) == ("", "drop")
    assert PromptsParams.of(parsed) is parsed
    assert PromptsParams().model_dump(mode="json") == {
        "prompt_columns": ["prompt", "question", "problem"],
        "answer_column": None,
        "num_prompts": None,
        "seed": 0,
        "apply_chat_template": True,
        "enable_thinking": None,
        "system_prompt": None,
        "instruction_suffix": "",
        "duplicates": "drop",
    }


def test_prompts_values_are_read():
    parsed = prompts_params(
        {"prompt_columns": "problem", "answer_column": "reward_model.ground_truth",
         "num_prompts": 3, "seed": 7, "apply_chat_template": False, "enable_thinking": True,
         "system_prompt": "Be brief.", "instruction_suffix": None, "duplicates": "keep"}
    )  # fmt: skip
    assert parsed == PromptsParams(
        prompt_columns=("problem",), answer_column="reward_model.ground_truth", num_prompts=3,
        seed=7, apply_chat_template=False, enable_thinking=True, system_prompt="Be brief.",
        instruction_suffix="", duplicates="keep",
    )  # fmt: skip
    assert parsed.rendering.as_params() == {
        "apply_chat_template": False,
        "enable_thinking": True,
        "system_prompt": "Be brief.",
    }
    assert parsed.rendering_keys() == {**parsed.rendering.as_params(), "instruction_suffix": ""}
    # the decoding layer reads the same keys of a raw mapping
    assert PromptRendering.of({"system_prompt": "x", "seed": 1}) == PromptRendering(True, None, "x")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1], "parameter `prompts` must be a mapping (parameters_generation.yml), got [1]"),
        ({"prompt_columns": None},
         "prompts.prompt_columns must be a list of column names (e.g. [problem, question]), "
         "got None"),
        ({"prompt_columns": []},
         "prompts.prompt_columns must be a list of column names (e.g. [problem, question]), "
         "got []"),
        ({"answer_column": 3}, "prompts.answer_column must be a string or null, got 3"),
        ({"num_prompts": "all"},
         "prompts.num_prompts must be a positive integer or null, got 'all'"),
        ({"num_prompts": 0}, "prompts.num_prompts must be a positive integer or null, got 0"),
        ({"seed": "abc"}, "prompts.seed must be an integer, got 'abc'"),
        ({"apply_chat_template": "yes"},
         "prompts.apply_chat_template must be true or false (unquoted), got 'yes'"),
        ({"enable_thinking": 1}, "prompts.enable_thinking must be true or false (unquoted), got 1"),
        ({"system_prompt": ["a"]}, "prompts.system_prompt must be a string or null, got ['a']"),
        ({"instruction_suffix": 5}, "prompts.instruction_suffix must be a string or null, got 5"),
        ({"duplicates": "merge"},
         "prompts.duplicates is 'merge': use drop (keep the first row of each prompt) or keep "
         "(count every row)"),
    ],
)  # fmt: skip
def test_bad_prompts_values_are_one_line(value, message):
    with pytest.raises(ConfigError) as caught:
        prompts_params(value)
    assert str(caught.value) == message


def test_the_pre_run_check_hands_prompts_parsed():
    pipeline = Pipeline([Node(lambda p: p, "params:prompts", "out", name="n")])
    catalog = DataCatalog({"params:prompts": MemoryDataset({"seed": 3, "system_prompt": "s"})})
    parsed = parsed_sections(pipeline, catalog)
    assert hand_to_nodes(catalog, parsed) == ["params:prompts"]
    handed = catalog.load("params:prompts")
    assert handed == PromptsParams(seed=3, system_prompt="s")
    bad = DataCatalog({"params:prompts": MemoryDataset({"seed": 1.5})})
    with pytest.raises(ConfigError, match=r"^prompts\.seed must be an integer, got 1\.5$"):
        parsed_sections(pipeline, bad)
