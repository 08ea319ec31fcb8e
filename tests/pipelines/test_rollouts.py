"""A verl dump as a study (docs/rollouts.md): a miniature verl-style writer dumps rollouts of two
tiny checkpoints; the dump run's shard node scores them teacher-forced into token records equal
to a float64 oracle of the generating checkpoint (the one before the dump step)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM

from hed.config.layout import layout_from_params
from hed.core.lexicon import parse_lexicon
from hed.core.propensity import tokenizer_word_start_ids
from hed.decode.rollouts import generating_step
from hed.errors import CheckpointError, ConfigError, InputDataError
from hed.pipelines.generation import create_pipeline
from hed.pipelines.generation.nodes import build_prompt_set, resolve_checkpoints
from hed.pipelines.generation.rollout_nodes import score_dump_shard
from hed.records.schema import SEQUENCE_SCHEMA, TOKEN_RECORD_SCHEMA
from hed.records.shard_metadata import GENERATION_METADATA_KEY

from ..conftest import build_tiny_model

MAX_RESPONSE = 12
QUESTIONS = ["What is 2+2?", "Name a prime.", "Spell cat."]
GTS = ["4", "2", "cat"]


@pytest.fixture(scope="module")
def root(tmp_path_factory, tokenizer):
    """A verl checkpoint root: global_step_0 and global_step_1, different random weights."""
    path = tmp_path_factory.mktemp("rollout_run")
    for step in (0, 1):
        build_tiny_model(path / f"global_step_{step}" / "actor_hf", tokenizer, seed=10 + step)
    return path


def rendered(tokenizer, question: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def verl_dump(folder, step, prompt_ids, response_ids, *, tokenizer, scores, extras):
    """What verl's ``RayPPOTrainer._dump_generations`` writes, plus ``response_ids``:
    ``batch_decode(..., skip_special_tokens=True)`` of the ids, one JSON object per line."""
    inputs = tokenizer.batch_decode(prompt_ids, skip_special_tokens=True)
    outputs = tokenizer.batch_decode(response_ids, skip_special_tokens=True)
    n = len(inputs)
    gts = gts_of(prompt_ids, tokenizer)
    base = {"input": inputs, "output": outputs, "gts": gts, "score": scores,
            "step": [step] * n, **extras, "response_ids": response_ids}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({k: v[i] for k, v in base.items()}, ensure_ascii=False) for i in range(n)]
    (folder / f"{step}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def gts_of(prompt_ids, tokenizer):
    texts = tokenizer.batch_decode(prompt_ids, skip_special_tokens=True)
    return [next((g for q, g in zip(QUESTIONS, GTS, strict=True) if q in t), None) for t in texts]


@pytest.fixture(scope="module")
def study(root, tokenizer):
    """The dump folder (steps 1 and 2), the prompt set, and what each row should become."""
    eos = tokenizer.eos_token_id
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    p = [rendered(tokenizer, q) for q in QUESTIONS]
    hello = tokenizer.convert_tokens_to_ids(["hel", "lo"])  # non-canonical split of "hello"
    spelt = tokenizer.convert_tokens_to_ids(["<", "|", "im", "_", "end", "|", ">"])
    long = (enc(" one two three four five six seven eight nine ten") * 2)[:MAX_RESPONSE]
    other = rendered(tokenizer, "A prompt the prompt set does not have")
    dumps = root / "rollouts"
    # step 1: canonical responses with EOS, one cut at max_response_length, an unmatched row
    verl_dump(
        dumps,
        1,
        [p[0], p[0], p[1], other],
        [[*enc("The answer is 4"), eos], [*enc(" 5"), eos], long, [*enc("x"), eos]],
        tokenizer=tokenizer,
        scores=[1.0, 0.0, -1.0, 1.0],
        extras={"acc": [True, False, False, True]},
    )
    # step 2: a non-canonical split (sampled ids differ), a non-round-tripping response
    # (special-token text spelt as plain pieces), no acc field (score decides)
    verl_dump(
        dumps,
        2,
        [p[2], p[2], p[0]],
        [[*enc("c"), *hello, eos], [*spelt, *enc(" 4"), eos], [*enc("4"), eos]],
        tokenizer=tokenizer,
        scores=[0.0, 0.5, 1.0],
        extras={},
    )
    raw = pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": q}] for q in QUESTIONS],
            "reward_model": [{"ground_truth": g} for g in GTS],
            "source_file": "train.parquet",
        }
    )
    prompts = build_prompt_set(
        raw, {"prompt_columns": ["prompt"], "answer_column": "reward_model.ground_truth"}
    )
    return dumps, prompts


def params(root, dumps, **responses):
    runs = {
        "dapo": {
            "checkpoint_root": str(root),
            "steps": "all",
            "responses": {
                "source": "verl_dump",
                "path": str(dumps),
                "max_response_length": MAX_RESPONSE,
                "temperature": 0.7,
                **responses,
            },
        }
    }
    generation = {
        "samples_per_prompt": 2,
        "max_new_tokens": MAX_RESPONSE,
        "dtype": "float32",
        "batch_size": 2,
        "top_prob_k": 3,
    }
    return runs, generation


LEXICON = {"anthropomorphic": ["wait", "perhaps", "i"], "reasoning": ["so", "let", "the"]}


def oracle(model_dir, prompt_ids, response_ids, temperature, mass_ids):
    """Float64 entropy, logprob and word-start masses of one unpadded forward pass over the
    full logits."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + response_ids[:-1]])).logits[0].numpy()
    first = len(prompt_ids) - 1
    z = logits[first : first + len(response_ids)] / temperature
    logp = z - (np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1))[:, None]
    p = np.exp(logp)
    masses = {name: p[:, ids].sum(1) for name, ids in mass_ids.items()}
    return -(p * logp).sum(1), logp[np.arange(len(response_ids)), response_ids], masses


@pytest.mark.slow
def test_dump_becomes_records_equal_to_a_float64_oracle_of_the_checkpoint_before(
    root, study, tokenizer
):
    torch.set_num_threads(1)
    dumps, prompts = study
    runs, generation = params(root, dumps)
    layout = layout_from_params({"runs": runs, "generation": generation})
    assert layout.run("dapo").steps == (1, 2)  # steps: all = the dump's steps
    checkpoints = resolve_checkpoints(runs, generation)
    by_step = checkpoints["dapo"]["steps"]
    assert by_step["1"]["model_dir"] == str(root / "global_step_0" / "actor_hf")
    assert by_step["2"]["model_dir"] == str(root / "global_step_1" / "actor_hf")
    prompt_params = {"prompt_columns": ["prompt"]}
    mass_ids = tokenizer_word_start_ids(tokenizer, parse_lexicon(LEXICON))
    lines = {
        s: [json.loads(x) for x in (dumps / f"{s}.jsonl").read_text().splitlines()] for s in (1, 2)
    }
    for step in (1, 2):
        out = score_dump_shard(
            prompts,
            checkpoints,
            prompt_params,
            generation,
            runs,
            {"lexicon": LEXICON},
            run="dapo",
            step=step,
            shard=0,
        )
        records, seqs = out["token_records"], out["sequences"]
        assert records.schema.equals(TOKEN_RECORD_SCHEMA, check_metadata=False)
        assert seqs.select(SEQUENCE_SCHEMA.names).schema.equals(
            SEQUENCE_SCHEMA, check_metadata=False
        )
        meta = json.loads(seqs.schema.metadata[GENERATION_METADATA_KEY])
        assert meta["source"] == "verl_dump"
        assert meta["rollouts"]["generated_by"] == f"global_step_{step - 1}"
        assert meta["rollouts"]["temperature"] == 0.7 and meta["rollouts"]["temperature_set"]
        frame = records.to_pandas()
        model_dir = str(root / f"global_step_{step - 1}" / "actor_hf")
        expected, seen = {}, {}  # (prompt_index, sample_index) -> line, in file order
        for line in lines[step]:
            q = next((i for i, q in enumerate(QUESTIONS) if q in line["input"]), None)
            if q is not None:
                expected[(q, seen.setdefault(q, 0))] = line
                seen[q] += 1
        keys = [
            tuple(k.values()) for k in seqs.select(["prompt_index", "sample_index"]).to_pylist()
        ]
        assert sorted(keys) == sorted(expected)
        for (q, sample), line in expected.items():
            mine = frame[(frame.prompt_index == q) & (frame.sample_index == sample)]
            assert mine["token_id"].tolist() == line["response_ids"]
            h, lp, mass = oracle(
                model_dir, rendered(tokenizer, QUESTIONS[q]), line["response_ids"], 0.7, mass_ids
            )
            assert np.abs(mine["entropy"].to_numpy(np.float64) - h).max() < 1e-5
            assert np.abs(mine["logprob"].to_numpy(np.float64) - lp).max() < 1e-5
            for name, values in mass.items():
                assert values.max() > 0  # the lexicon has word-start ids in this vocabulary
                assert np.abs(mine[f"{name}_mass"].to_numpy(np.float64) - values).max() < 1e-6
    # flags, correctness and finish reasons of step 1 and step 2
    one = score_dump_shard(
        prompts, checkpoints, prompt_params, generation, runs, run="dapo", step=1, shard=0
    )
    s1 = one["sequences"].to_pandas()
    assert s1["rollout_flag"].tolist() == ["ok", "ok", "ok"]
    assert s1["correct"].tolist() == [True, False, False]  # acc, not score
    assert s1["finish_reason"].tolist() == ["eos", "eos", "length"]
    meta = json.loads(one["sequences"].schema.metadata[GENERATION_METADATA_KEY])["rollouts"]
    assert meta["unmatched_lines"] == [4] and meta["ids_differ_share"] == 0.0
    two = score_dump_shard(
        prompts, checkpoints, prompt_params, generation, runs, run="dapo", step=2, shard=0
    )
    s2 = two["sequences"].to_pandas().sort_values(["prompt_index", "sample_index"])
    # prompt 0: "4" (ok, score 1.0 > 0); prompt 2: the hel+lo split, the spelt <|im_end|>
    assert s2["rollout_flag"].tolist() == ["ok", "ids_differ", "text_not_round_trip"]
    assert s2["correct"].tolist() == [True, False, True]  # score > 0.0
    meta = json.loads(two["sequences"].schema.metadata[GENERATION_METADATA_KEY])["rollouts"]
    assert meta["ids_differ_share"] == pytest.approx(2 / 3)
    assert meta["flags"] == {"ok": 1, "ids_differ": 1, "text_not_round_trip": 1}
    # score_threshold null: rows without acc are graded with math-verify against gts
    runs["dapo"]["responses"]["score_threshold"] = None
    graded = score_dump_shard(
        prompts, checkpoints, prompt_params, generation, runs, run="dapo", step=2, shard=0
    )["sequences"].to_pandas()
    assert graded.sort_values(["prompt_index", "sample_index"])["correct"].tolist() == [
        True, False, False,
    ]  # fmt: skip


def test_generating_checkpoint_is_the_one_before():
    assert [generating_step(s) for s in (1, 2, 7)] == [0, 1, 6]
    assert [generating_step(s, "validation") for s in (0, 3)] == [0, 3]
    with pytest.raises(InputDataError, match="verl numbers training steps from 1"):
        generating_step(0)


def test_missing_generating_checkpoint_is_refused_in_one_line(tmp_path, root):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    for step in (1, 2, 3):
        (dumps / f"{step}.jsonl").write_text('{"input": "q", "output": "a", "score": 1}\n')
    runs, generation = params(root, dumps)
    runs["dapo"]["steps"] = [3]  # generated by global_step_2: the root has 0 and 1
    with pytest.raises(
        CheckpointError, match="rollout dump step 3 was generated by global_step_2"
    ) as e:
        resolve_checkpoints(runs, generation)
    assert "\n" not in str(e.value)
    runs["dapo"]["steps"] = "all"  # all = the dump steps whose checkpoint is on disk
    assert layout_from_params({"runs": runs, "generation": generation}).run("dapo").steps == (1, 2)
    runs["dapo"]["responses"]["kind"] = "validation"  # step s from global_step_<s>
    assert layout_from_params({"runs": runs, "generation": generation}).run("dapo").steps == (1,)
    (dumps / "1.jsonl").unlink()
    (dumps / "2.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"no dump step .* has its generating checkpoint"):
        layout_from_params({"runs": runs, "generation": generation})


def test_a_missing_dump_folder_or_step_is_refused_when_checkpoints_are_resolved(tmp_path, root):
    runs, generation = params(root, tmp_path / "no_dumps")
    runs["dapo"]["steps"] = [1]  # listed steps: the layout does not read the folder
    folder_missing = r"runs\.dapo\.responses\.path: verl dump folder .*no_dumps does not exist"
    with pytest.raises(InputDataError, match=folder_missing):
        resolve_checkpoints(runs, generation)
    (tmp_path / "no_dumps").mkdir()
    (tmp_path / "no_dumps" / "2.jsonl").write_text('{"input": "q", "output": "a", "score": 1}\n')
    missing = r"1\.jsonl does not exist \(the folder has steps \[2\]\)"
    with pytest.raises(InputDataError, match=missing):
        resolve_checkpoints(runs, generation)


def test_a_missing_dump_step_is_refused_before_the_first_node(tmp_path, root):
    """The pre-run check of a run that resolves checkpoints: the prompt set (the first node's
    output) would otherwise be written before resolve_checkpoints refuses the dump."""
    from kedro.io import DataCatalog, MemoryDataset

    from hed.hooks.parameters import parsed_sections

    runs, generation = params(root, tmp_path / "no_dumps")
    runs["dapo"]["steps"] = [1]
    pipeline = create_pipeline(layout_from_params({"runs": runs, "generation": generation}))
    assert "checkpoints" in pipeline.all_outputs()
    lexicon = {"lexicon": {"anthropomorphic": ["I"], "reasoning": ["so"]}}
    sections = {"runs": runs, "generation": generation, "aggregation": lexicon}
    catalog = DataCatalog({f"params:{k}": MemoryDataset(v) for k, v in sections.items()})
    folder_missing = r"^runs\.dapo\.responses\.path: verl dump folder .*no_dumps does not exist"
    with pytest.raises(InputDataError, match=folder_missing):
        parsed_sections(pipeline, catalog)
    (tmp_path / "no_dumps").mkdir()
    (tmp_path / "no_dumps" / "1.jsonl").write_text('{"input": "q", "output": "a", "score": 1}\n')
    assert parsed_sections(pipeline, catalog)["runs"].run("dapo").steps == (1,)


def test_dump_run_gets_a_scoring_gpu_node(root, study):
    dumps, _ = study
    runs, generation = params(root, dumps)
    layout = layout_from_params({"runs": runs, "generation": {**generation, "num_shards": 2}})
    nodes = {n.name: n for n in create_pipeline(layout).nodes}
    node = nodes["dapo.step_2.shard_1.score_dump_shard"]
    assert "gpu" in node.tags
    assert set(node.inputs) >= {"prompts", "checkpoints", "params:runs"}
    assert node.outputs == ["dapo.step_2.shard_1.token_records", "dapo.step_2.shard_1.sequences"]


@pytest.mark.parametrize(
    ("responses", "message"),
    [
        (
            {"path": None, "max_response_length": None},
            "runs.dapo.responses has source: verl_dump but no path and no max_response_length: "
            "set path to verl's trainer.rollout_data_dir (or validation_data_dir) and "
            "max_response_length to verl's data.max_response_length (docs/rollouts.md)",
        ),
        ({"sorce": "x"}, "unknown parameter runs.dapo.responses.sorce: did you mean"),
        ({"kind": "eval"}, "runs.dapo.responses.kind must be one of rollout, validation"),
    ],
)
def test_bad_responses_section_is_one_line(root, study, responses, message):
    runs, generation = params(root, study[0], **responses)
    with pytest.raises(ConfigError, match=re.escape(message)):
        layout_from_params({"runs": runs, "generation": generation})


def test_a_dump_matching_no_prompt_is_refused(tmp_path, root, study):
    _, prompts = study
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    row = {"input": "x", "output": "y", "score": 1.0, "step": 1}
    (dumps / "1.jsonl").write_text(json.dumps(row) + "\n")
    runs, generation = params(root, dumps)
    checkpoints = resolve_checkpoints(runs, generation)
    with pytest.raises(InputDataError, match=r"1\.jsonl: none of its 1 row\(s\) matches a prompt"):
        score_dump_shard(prompts, checkpoints, {}, generation, runs, run="dapo", step=1, shard=0)


def test_an_empty_dump_step_writes_nothing(tmp_path, root, study):
    _, prompts = study
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "1.jsonl").write_text("")
    runs, generation = params(root, dumps)
    checkpoints = resolve_checkpoints(runs, generation)
    with pytest.raises(InputDataError, match=r"1\.jsonl is empty"):
        score_dump_shard(prompts, checkpoints, {}, generation, runs, run="dapo", step=1, shard=0)
