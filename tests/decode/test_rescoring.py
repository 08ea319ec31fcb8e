"""Teacher-forced re-scoring (hed.decode.teacher_forced): values against a float64 full-logits
reference,
the chunking, the rank definition, and self-consistency with decode-time records on SmolLM2."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from hed.decode.hf import (
    PromptInput,
    SamplingParams,
    checkpoint_eos_token_ids,
    generate_sequences,
    load_model_and_tokenizer,
)
from hed.decode.teacher_forced import (
    CONSISTENCY_TOLERANCE_NATS,
    ResponseToScore,
    compare_scores,
    score_responses,
    token_ranks,
)
from hed.errors import CheckpointError, InputDataError


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def reference_scores(model, item: ResponseToScore, temperature: float, k: int) -> dict:
    """Full logits of one unpadded forward pass, statistics in float64 with numpy."""
    ids = list(item.prompt_ids) + list(item.response_ids[:-1])
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double().numpy()
    first = len(item.prompt_ids) - 1
    z = logits[first : first + len(item.response_ids)] / temperature  # (n, V)
    log_z = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    logp = z - log_z[:, None]
    p = np.exp(logp)
    tokens = np.asarray(item.response_ids)
    picked = z[np.arange(len(tokens)), tokens]
    order = np.argsort(-z, axis=1, kind="stable")[:, :k]
    return {
        "entropy": -(p * logp).sum(1),
        "logprob": logp[np.arange(len(tokens)), tokens],
        "rank": (z > picked[:, None]).sum(1),
        "topk_ids": order,
        "topk_probs": np.take_along_axis(p, order, 1),
    }


def some_responses(vocab: int, seed: int = 0) -> list[ResponseToScore]:
    rng = np.random.default_rng(seed)
    lengths = [(5, 9), (12, 1), (3, 23), (7, 14), (1, 6)]  # (prompt, response) lengths
    return [
        ResponseToScore(
            prompt_index=i // 2,
            sample_index=i % 2,
            prompt_ids=rng.integers(0, vocab, p).tolist(),
            response_ids=rng.integers(0, vocab, n).astype(np.int32),
        )
        for i, (p, n) in enumerate(lengths)
    ]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_scores_equal_a_float64_full_logits_reference(tiny_model, temperature):
    vocab = tiny_model.config.vocab_size
    responses = some_responses(vocab)
    # batches of 3 (right padding) and LM-head chunks of 4 positions cross response boundaries
    scored = list(
        score_responses(
            tiny_model,
            responses,
            temperature=temperature,
            top_prob_k=5,
            batch_size=3,
            chunk_positions=4,
        )
    )
    assert [(s.prompt_index, s.sample_index) for s in scored] == [
        (r.prompt_index, r.sample_index) for r in responses
    ]
    for item, got in zip(responses, scored, strict=True):
        want = reference_scores(tiny_model, item, temperature, 5)
        n = len(item.response_ids)
        assert got.entropy.dtype == np.float32 and got.entropy.shape == (n,)
        np.testing.assert_allclose(got.entropy, want["entropy"], atol=1e-4, rtol=0)
        np.testing.assert_allclose(got.logprob, want["logprob"], atol=1e-4, rtol=0)
        np.testing.assert_array_equal(got.rank, want["rank"])
        np.testing.assert_array_equal(got.topk_token_ids, want["topk_ids"])
        np.testing.assert_allclose(got.topk_probs, want["topk_probs"], atol=1e-6)
        np.testing.assert_array_equal(got.token_ids, item.response_ids)


def test_batch_and_chunk_sizes_do_not_change_the_scores(tiny_model):
    responses = some_responses(tiny_model.config.vocab_size, seed=3)
    one = list(score_responses(tiny_model, responses, batch_size=1, chunk_positions=1000))
    many = list(score_responses(tiny_model, responses, batch_size=5, chunk_positions=2))
    for a, b in zip(one, many, strict=True):
        np.testing.assert_allclose(a.entropy, b.entropy, atol=1e-5)
        np.testing.assert_array_equal(a.topk_token_ids, b.topk_token_ids)


def test_rank_counts_strictly_larger_logits_and_ties_share_the_best_rank():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.5, 2.0]] * 4)
    ranks = token_ranks(logits, torch.tensor([1, 2, 4, 3]))
    assert ranks.tolist() == [0, 0, 2, 4]
    assert ranks.dtype == torch.int32


def test_token_outside_the_vocabulary_is_one_line_error(tiny_model):
    vocab = tiny_model.config.vocab_size
    bad = ResponseToScore(0, 0, [1, 2], np.array([3, vocab], dtype=np.int32))
    with pytest.raises(InputDataError, match=f"token id {vocab} is outside .* {vocab}"):
        list(score_responses(tiny_model, [bad]))
    with pytest.raises(InputDataError, match="prompt has no tokens"):
        list(score_responses(tiny_model, [ResponseToScore(0, 0, [], np.array([1]))]))


def test_softcapped_heads_are_refused(tiny_model):
    tiny_model.config.final_logit_softcapping = 30.0
    try:
        with pytest.raises(CheckpointError, match=r"final_logit_softcapping = 30\.0"):
            list(score_responses(tiny_model, some_responses(10)[:1]))
    finally:
        tiny_model.config.final_logit_softcapping = None


@pytest.mark.slow
def test_demo_model_reproduces_its_decode_time_records_in_float32(smollm2_dir):
    """SmolLM2-135M in float32: sample 8 responses, re-score them, compare (1e-4 nats)."""
    torch.set_num_threads(1)
    model, tokenizer = load_model_and_tokenizer(smollm2_dir, dtype="float32")
    eos = checkpoint_eos_token_ids(model, tokenizer)
    texts = ["What is 12 + 30?", "Name a prime number above 50.", "Say hello.", "2*7="]
    prompts = [
        PromptInput(
            i,
            f"p{i}",
            tokenizer.apply_chat_template(
                [{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True
            ),
        )
        for i, t in enumerate(texts)
    ]
    params = SamplingParams(max_new_tokens=24, top_prob_k=5, seed=1, batch_size=8)
    generated = list(generate_sequences(model, tokenizer, prompts, 2, params, eos_token_ids=eos))
    items = [
        ResponseToScore(
            s.prompt_index,
            s.sample_index,
            tokenizer(prompts[s.prompt_index].text, add_special_tokens=False)["input_ids"],
            s.token_ids,
        )
        for s in generated
    ]
    scored = list(score_responses(model, items, batch_size=3, chunk_positions=16))

    def stack(seqs, *, ids="token_ids", topk="topk_token_ids"):
        return {
            "token_id": np.concatenate([getattr(s, ids) for s in seqs]),
            "entropy": np.concatenate([s.entropy for s in seqs]),
            "logprob": np.concatenate([s.logprob for s in seqs]),
            "topk_token_ids": np.concatenate([getattr(s, topk) for s in seqs]),
        }

    result = compare_scores(stack(generated), stack(scored))
    assert result.n_positions == sum(len(s.token_ids) for s in generated) > 50
    assert result.tokens_equal
    assert result.max_abs_entropy_diff <= CONSISTENCY_TOLERANCE_NATS, result
    assert result.max_abs_logprob_diff <= 1e-3, result
    assert result.topk_ids_equal_share >= 0.99, result
    # the sampled token's rank is consistent with its log-probability and the top-k
    ranks = np.concatenate([s.rank for s in scored])
    top1 = stack(scored)["topk_token_ids"][:, 0]
    np.testing.assert_array_equal(ranks == 0, top1 == stack(scored)["token_id"])
