"""Generation pipeline nodes: the prompt set from real prompt files, the responses table.

(The records of ``generate_shard`` themselves: ``tests/decode/test_recording.py``; the pipeline on
real checkpoints: ``tests/test_default_run.py``, ``tests/runners/test_resume.py``.)
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from hed.decode.prompts import prompt_id
from hed.errors import ConfigError, InputDataError
from hed.io.datasets import PromptFileDataset
from hed.pipelines.generation.nodes import build_prompt_set

PARAMS = {
    "prompt_columns": ["prompt", "question", "problem"],
    "answer_column": "answer",
    "num_prompts": None,
    "seed": 0,
    "instruction_suffix": "",
}


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_aime24_through_the_prompt_node(shared_data):
    raw = PromptFileDataset(filepath=str(shared_data / "aime24.jsonl")).load()
    prompts = build_prompt_set(raw, {**PARAMS, "num_prompts": 5, "seed": 3})
    assert len(prompts) == 5
    assert prompts["prompt_index"].tolist() == [0, 1, 2, 3, 4]
    # `problem` and `question` both exist in aime24: `question` comes first in prompt_columns
    source = pd.read_json(shared_data / "aime24.jsonl", lines=True, dtype=False)
    row = source.iloc[int(prompts["source_row"].iloc[0])]
    assert prompts["prompt"].iloc[0] == row["question"]
    # zero-padded answers ("025") are normalised for math-verify
    assert prompts["answer"].iloc[0] == str(int(row["answer"]))
    assert prompts["prompt_id"].iloc[0] == prompt_id(row["question"])
    # same seed, same sample; another seed, another sample
    again = build_prompt_set(raw, {**PARAMS, "num_prompts": 5, "seed": 3})
    other = build_prompt_set(raw, {**PARAMS, "num_prompts": 5, "seed": 4})
    assert again["prompt_id"].tolist() == prompts["prompt_id"].tolist()
    assert other["prompt_id"].tolist() != prompts["prompt_id"].tolist()


def test_gsm8k_worked_solution_answer_keeps_the_final_number(shared_data):
    raw = PromptFileDataset(filepath=str(shared_data / "gsm8k_test.jsonl")).load()
    prompts = build_prompt_set(raw, {**PARAMS, "num_prompts": 3})
    source = pd.read_json(shared_data / "gsm8k_test.jsonl", lines=True, dtype=False)
    expected = (
        source.iloc[int(prompts["source_row"].iloc[0])]["answer"]
        .split("####")[-1]
        .strip()
        .replace(",", "")
    )
    assert prompts["answer"].iloc[0] == expected


def test_parquet_prompt_file_and_first_present_column(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"problem": ["1+1?", "2+2?"], "answer": [2.0, 4.0]}).to_parquet(path)
    prompts = build_prompt_set(
        PromptFileDataset(filepath=str(path)).load(), {**PARAMS, "instruction_suffix": " Box it."}
    )
    assert prompts["prompt"].tolist() == ["1+1? Box it.", "2+2? Box it."]
    assert prompts["answer"].tolist() == ["2", "4"]
    assert set(prompts["source_file"]) == {str(path)}


def test_file_without_prompt_columns_names_file_and_columns(tmp_path):
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"text": "hi", "answer": 1}])
    with pytest.raises(InputDataError) as err:
        build_prompt_set(PromptFileDataset(filepath=str(path)).load(), PARAMS)
    message = str(err.value)
    assert str(path) in message and "text" in message and "\n" not in message


def test_num_prompts_larger_than_the_file(tmp_path):
    path = _write_jsonl(tmp_path / "two.jsonl", [{"problem": "a"}, {"problem": "b"}])
    with pytest.raises(ConfigError) as err:
        build_prompt_set(PromptFileDataset(filepath=str(path)).load(), {**PARAMS, "num_prompts": 3})
    assert "num_prompts is 3" in str(err.value) and str(path) in str(err.value)


def test_missing_answer_column_gives_null_answers(tmp_path):
    path = _write_jsonl(tmp_path / "noans.jsonl", [{"question": "a"}])
    prompts = build_prompt_set(PromptFileDataset(filepath=str(path)).load(), PARAMS)
    assert prompts["answer"].isna().all()


def test_grading_ignores_the_eos_text():
    import numpy as np

    from hed.decode.hf import GeneratedSequence
    from hed.pipelines.generation.nodes import sequences_table

    seq = GeneratedSequence(
        prompt_index=0,
        prompt_id="p",
        sample_index=0,
        token_ids=np.array([10, 11, 2], np.int32),
        entropy=np.zeros(3, np.float32),
        logprob=np.zeros(3, np.float32),
        topk_token_ids=np.zeros((3, 1), np.int32),
        topk_probs=np.ones((3, 1), np.float32),
        token_texts=["The answer is ", "36", "<|im_end|>"],
        response_text="The answer is 36<|im_end|>",
        finish_reason="eos",
    )
    table = sequences_table(
        [seq], {0: "36"}, {0: "p"}, run="r", step=0, shard=0, special_ids=np.array([2])
    )
    row = table.to_pylist()[0]
    assert row["response_text"].endswith("<|im_end|>")
    assert row["extracted_answer"] == "36" and row["correct"] is True


def test_a_raw_dict_and_the_parsed_section_give_the_same_prompt_set(tmp_path):
    from hed.config.prompt_params import PromptsParams, prompts_params

    rows = [{"problem": f"{i}+{i}", "answer": str(2 * i)} for i in range(6)]
    path = _write_jsonl(tmp_path / "p.jsonl", [*rows, rows[2]])  # one duplicate, dropped
    raw = PromptFileDataset(filepath=str(path)).load()
    params = {**PARAMS, "num_prompts": 4, "seed": 5, "instruction_suffix": " Go."}
    parsed = prompts_params(params)
    assert PromptsParams.of(parsed) is parsed
    from_dict, from_parsed = build_prompt_set(raw, params), build_prompt_set(raw, parsed)
    pd.testing.assert_frame_equal(from_dict, from_parsed)
    assert len(from_dict) == 4 and from_dict["prompt"].str.endswith(" Go.").all()
    assert 6 not in from_dict["source_row"].tolist()  # the duplicate row (index 6) is gone
