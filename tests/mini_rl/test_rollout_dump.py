"""The miniature's rollouts in verl's dump format: the reward wrapper's file, read back by HED."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd

from hed.decode.prompts import render_prompt
from hed.decode.rollouts import prompt_lookup, rebuild_responses
from hed.mini_rl.rollout_dump import RolloutDumper
from hed.records.verl_dump import read_dump_step


def test_dumper_writes_verl_lines_per_step_that_rebuild_to_the_sampled_ids(tmp_path, tokenizer):
    (tmp_path / "7.jsonl").write_text("stale\n")  # an earlier training's dump is removed
    calls = []

    def reward(prompts, completions, **kwargs):
        calls.append(len(prompts))
        return [1.0 if "4" in c else 0.0 for c in completions]

    dumper = RolloutDumper(reward, tmp_path, tokenizer)
    assert dumper.__name__ == "reward" and not (tmp_path / "7.jsonl").exists()
    prompt = render_prompt(tokenizer, "What is 2+2?", {})
    eos = tokenizer.eos_token_id
    answers = ["The answer is 4", "5"]
    ids = [tokenizer(a, add_special_tokens=False)["input_ids"] + [eos] for a in answers]
    state = SimpleNamespace(global_step=2)  # after 2 updates: verl's dump step 3
    for _ in range(2):  # two generation batches of one step are appended
        out = dumper(
            prompts=[prompt, prompt], completions=answers, completion_ids=ids,
            answer=["4", "4"], trainer_state=state,
        )  # fmt: skip
        assert out == [1.0, 0.0]
    lines = [json.loads(x) for x in (tmp_path / "3.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and calls == [2, 2]
    assert lines[1] == {
        "input": tokenizer.decode(tokenizer(prompt, add_special_tokens=False)["input_ids"],
                                  skip_special_tokens=True),
        "output": "5", "gts": "4", "score": 0.0, "step": 3, "acc": False,
        "response_ids": ids[1],
    }  # fmt: skip
    prompts = pd.DataFrame({"prompt_index": [0], "prompt": ["What is 2+2?"]})
    rebuilt = rebuild_responses(
        read_dump_step(tmp_path, 3),
        prompt_lookup(prompts, tokenizer, {}),
        tokenizer,
        eos_token_ids=[eos],
        max_response_length=32,
    )
    assert [(r.prompt_index, r.sample_index, r.flag) for r in rebuilt] == [
        (0, 0, "ok"), (0, 1, "ok"), (0, 2, "ok"), (0, 3, "ok"),
    ]  # fmt: skip
    assert [r.response_ids.tolist() for r in rebuilt] == ids * 2
