"""hed.decode.prompts and prompt files: the chat template, an empty prompt file (node tests:
pipelines)."""

from __future__ import annotations

import pytest

from hed.decode.prompts import render_prompt
from hed.errors import InputDataError
from hed.io.datasets import PromptFileDataset


def test_empty_prompt_file_names_the_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(InputDataError, match="empty"):
        PromptFileDataset(filepath=str(path)).load()


def test_chat_template_applied_and_switchable(tokenizer):
    text = render_prompt(
        tokenizer, "What is 2+2?", {"apply_chat_template": True, "enable_thinking": None}
    )
    assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n")
    assert "What is 2+2?" in text
    plain = render_prompt(tokenizer, "What is 2+2?", {"apply_chat_template": False})
    assert plain == "What is 2+2?"
    with_system = render_prompt(
        tokenizer, "Q", {"apply_chat_template": True, "system_prompt": "Be brief."}
    )
    assert "Be brief." in with_system


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"apply_chat_template": False},
        {"apply_chat_template": True, "system_prompt": "Be brief.", "enable_thinking": False},
        {"system_prompt": "", "enable_thinking": None, "seed": 3},  # other keys: ignored
    ],
)
def test_a_raw_mapping_and_the_parsed_rendering_give_the_same_input(tokenizer, settings):
    from hed.config.prompt_params import prompts_params
    from hed.decode.prompts import PromptRendering

    rendering = prompts_params(settings).rendering
    assert PromptRendering.of(settings) == rendering
    typed = render_prompt(tokenizer, "What is 2+2?", rendering)
    assert typed == render_prompt(tokenizer, "What is 2+2?", settings)
    assert typed.startswith("<|im_start|>") == settings.get("apply_chat_template", True)
    assert ("Be brief." in typed) == (settings.get("system_prompt") == "Be brief.")
