"""The records' word-start mass columns (``anthropomorphic_mass``, ``reasoning_mass``) on the
``hf`` backend: each equals Σ softmax(z / T) over the lexicon's word-start ids computed in float64
from an independent teacher-forced forward of the same tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

from hed.core.lexicon import parse_lexicon
from hed.core.propensity import tokenizer_word_start_ids
from hed.decode.hf import PromptInput, SamplingParams, generate_sequences, load_model_and_tokenizer

QUESTIONS = ["What is 2+2?", "Wait, perhaps think again: is 7 prime?"]
MANY_EOS = [2, *range(1000, 3000)]


def default_lexicon():
    """The lexicon of conf/base (what a run uses unless it overrides it)."""
    from pathlib import Path

    conf = Path(__file__).parents[2] / "conf" / "base" / "parameters_aggregation.yml"
    return parse_lexicon(yaml.safe_load(conf.read_text())["aggregation"]["lexicon"])


def chat_prompts(tokenizer) -> list[PromptInput]:
    return [
        PromptInput(
            prompt_index=index,
            prompt_id=f"q{index}",
            text=tokenizer.apply_chat_template(
                [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
            ),
        )
        for index, q in enumerate(QUESTIONS)
    ]


def float64_masses(model_dir, tokenizer, prompt, token_ids, *, ids, temperature):
    """{category: (n,) float64 Σ_{i ∈ ids} softmax(z / T)_i} from a float64 teacher-forced pass."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64).eval()
    prompt_ids = tokenizer(prompt.text, add_special_tokens=False)["input_ids"]
    full = torch.tensor([[*prompt_ids, *token_ids.tolist()]])
    with torch.no_grad():
        logits = model(full).logits[0, len(prompt_ids) - 1 : -1].numpy() / temperature
    log_p = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)  # numpy, float64
    p = np.exp(log_p)
    return {category: p[:, index].sum(axis=1) for category, index in ids.items()}


@pytest.fixture(scope="module")
def peaked_model_dir(tmp_path_factory, tokenizer):
    """A tiny random model with larger weights: distributions far from uniform."""
    from ..conftest import build_tiny_model

    root = tmp_path_factory.mktemp("peaked")
    return build_tiny_model(root / "global_step_0" / "actor_hf", tokenizer, seed=1, scale=8.0)


def test_word_start_ids_of_the_real_tokenizer(tokenizer):
    ids = tokenizer_word_start_ids(tokenizer, default_lexicon())
    texts = {c: [tokenizer.decode([i]) for i in v] for c, v in ids.items()}
    assert " wait" in texts["anthropomorphic"] and " Wait" in texts["anthropomorphic"]
    assert " So" in texts["reasoning"] and " therefore" in texts["reasoning"]
    assert " the" in texts["reasoning"]  # begins "then": the mass is an upper bound
    assert " cat" not in texts["anthropomorphic"] + texts["reasoning"]
    assert all(v.dtype == np.int64 and np.all(np.diff(v) > 0) for v in ids.values())


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_hf_mass_columns_equal_a_float64_softmax_sum(peaked_model_dir, tokenizer, temperature):
    model, _ = load_model_and_tokenizer(peaked_model_dir, "float32", "cpu")
    ids = tokenizer_word_start_ids(tokenizer, default_lexicon())
    params = SamplingParams(temperature=temperature, max_new_tokens=16, batch_size=4, seed=2)
    prompts = chat_prompts(tokenizer)
    sequences = list(
        generate_sequences(
            model, tokenizer, prompts, 2, params, eos_token_ids=MANY_EOS, mass_ids=ids
        )
    )
    assert len(sequences) == 4
    seen = []
    for seq in sequences:
        reference = float64_masses(
            peaked_model_dir,
            tokenizer,
            prompts[seq.prompt_index],
            seq.token_ids,
            ids=ids,
            temperature=temperature,
        )
        for category in ("anthropomorphic", "reasoning"):
            got = getattr(seq, f"{category}_mass")
            assert got.dtype == np.float32 and got.shape == (seq.n_tokens,)
            np.testing.assert_allclose(got, reference[category], rtol=1e-4, atol=1e-7)
            seen.append(got)
    values = np.concatenate(seen)
    assert values.min() >= 0.0 and values.max() <= 1.0 and values.std() > 1e-3  # not constant


def test_without_mass_ids_the_columns_are_none(tiny_model_dir, tokenizer):
    model, _ = load_model_and_tokenizer(tiny_model_dir, "float32", "cpu")
    params = SamplingParams(max_new_tokens=3, seed=0)
    (seq,) = generate_sequences(
        model, tokenizer, chat_prompts(tokenizer)[:1], 1, params, eos_token_ids=[2]
    )
    assert seq.anthropomorphic_mass is None and seq.reasoning_mass is None
