"""hed.decode.hf: decode-time records equal float64 values of the logits generate used."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from transformers import GenerationConfig

from hed.core.entropy import NonFiniteLogitsError
from hed.core.token_text import decode_text
from hed.decode.hf import (
    DecodeRecorder,
    GumbelSampler,
    PromptInput,
    SamplingParams,
    checkpoint_eos_token_ids,
    generate_sequences,
    load_model_and_tokenizer,
    record_batch,
    resolve_dtype,
    sequence_seed,
)
from hed.errors import CheckpointError, ConfigError

QUESTIONS = [
    "What is 2+2?",
    "Compute the sum of the first 100 positive integers and explain every step carefully.",
    "Hi",
]
#: The tiny random model almost never samples the real EOS (1 of 49,152 tokens); declaring
#: 2,000 more ids as EOS ends ~4% of steps, so one batch mixes "eos" and "length" responses.
MANY_EOS = [2, *range(1000, 3000)]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Run this module's tensors on one intra-op thread.

    They are small: a second thread buys nothing, and on a shared CPU OpenMP's spin-waiting
    made this module several times slower (measured: 111 s instead of 16 s at load 4 on 2 cores).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[PromptInput]:
    return [
        PromptInput(
            prompt_index=index,
            prompt_id=f"q{index}",
            text=tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
            ),
        )
        for index, question in enumerate(QUESTIONS)
    ]


@pytest.fixture(scope="module")
def fp32_model(tiny_model_dir):
    return load_model_and_tokenizer(tiny_model_dir, "float32", "cpu")


@pytest.fixture(scope="module")
def bf16_model(tiny_model_dir):
    return load_model_and_tokenizer(tiny_model_dir, "bfloat16", "cpu")


def rerun_with_logits(model, tokenizer, prompts, samples, *, params, eos, **overrides):
    """Replay the single batch ``generate_sequences`` ran, keeping every raw logit."""
    pairs = [(prompt, sample) for prompt in prompts for sample in range(samples)]
    encoded = tokenizer(
        [prompt.text for prompt, _ in pairs],
        add_special_tokens=False,
        padding=True,
        padding_side="left",
        return_tensors="pt",
    )
    seeds = [sequence_seed(params.seed, prompt.prompt_id, sample) for prompt, sample in pairs]
    output, recorder = record_batch(
        model,
        encoded["input_ids"],
        encoded["attention_mask"],
        seeds=seeds,
        params=params,
        eos_token_ids=eos,
        pad_token_id=tokenizer.pad_token_id,
        output_logits=True,
        return_dict_in_generate=True,
        **overrides,
    )
    return output, recorder, encoded["input_ids"].shape[1]


def float64_reference(output, row: int, n: int, *, temperature: float, k: int, prompt_len: int):
    """Entropy, sampled-token log-prob and top-k of softmax(z / T) in float64, per position."""
    scaled = torch.stack([step[row] for step in output.logits[:n]]).double() / temperature
    log_p = torch.log_softmax(scaled, dim=-1)  # (n, V)
    p = log_p.exp()
    tokens = output.sequences[row, prompt_len : prompt_len + n]
    top_probs, top_ids = p.topk(k, dim=-1)
    return {
        "entropy": -(p * log_p.nan_to_num(neginf=0.0)).sum(-1).numpy(),
        "logprob": log_p.gather(-1, tokens[:, None])[:, 0].numpy(),
        "topk_probs": top_probs.numpy(),
        "topk_token_ids": top_ids.numpy(),
        "token_ids": tokens.numpy(),
        "p": p,
    }


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_records_equal_float64_values_of_the_decode_logits(request, prompts, dtype):
    model, tokenizer = request.getfixturevalue("fp32_model" if dtype == "float32" else "bf16_model")
    params = SamplingParams(temperature=0.8, max_new_tokens=40, top_prob_k=4, batch_size=9, seed=3)
    records = list(generate_sequences(model, tokenizer, prompts, 3, params, eos_token_ids=MANY_EOS))
    output, _, prompt_len = rerun_with_logits(
        model, tokenizer, prompts, 3, params=params, eos=MANY_EOS
    )

    assert [(r.prompt_index, r.sample_index) for r in records] == [
        (p, s) for p in range(3) for s in range(3)
    ]
    assert {r.finish_reason for r in records} == {"eos", "length"}
    for row, record in enumerate(records):
        response = output.sequences[row, prompt_len:].numpy()
        ended = np.flatnonzero(np.isin(response, MANY_EOS))
        n = int(ended[0]) + 1 if len(ended) else params.max_new_tokens
        assert record.n_tokens == n  # up to and including the first EOS, nothing after
        assert record.finish_reason == ("eos" if len(ended) else "length")
        assert (record.token_ids[-1] in MANY_EOS) == (record.finish_reason == "eos")
        reference = float64_reference(
            output, row, n, temperature=params.temperature, k=4, prompt_len=prompt_len
        )
        np.testing.assert_array_equal(record.token_ids, reference["token_ids"])
        np.testing.assert_allclose(record.entropy, reference["entropy"], atol=1e-4, rtol=0)
        np.testing.assert_allclose(record.logprob, reference["logprob"], atol=1e-4, rtol=0)
        np.testing.assert_allclose(record.topk_probs, reference["topk_probs"], atol=1e-5, rtol=0)
        picked = reference["p"].gather(-1, torch.from_numpy(record.topk_token_ids).long())
        np.testing.assert_allclose(picked.numpy(), reference["topk_probs"], atol=1e-7, rtol=0)
        assert record.token_ids.dtype == np.int32 and record.topk_token_ids.shape == (n, 4)
        assert record.entropy.dtype == record.logprob.dtype == np.float32
        assert record.response_text == "".join(record.token_texts)
        assert record.response_text == decode_text(tokenizer, record.token_ids)


def test_top_k_sampling_still_records_the_full_distribution(fp32_model, prompts):
    model, tokenizer = fp32_model
    params = SamplingParams(temperature=0.7, top_k=5, top_p=0.9, max_new_tokens=12, seed=1)
    output, recorder, prompt_len = rerun_with_logits(
        model, tokenizer, prompts, 2, params=params, eos=[2], output_scores=True
    )
    stacked = recorder.stacked()
    full_vocab = math.log(len(tokenizer))
    for row in range(6):
        reference = float64_reference(output, row, 12, temperature=0.7, k=5, prompt_len=prompt_len)
        np.testing.assert_allclose(stacked["entropy"][:, row], reference["entropy"], atol=1e-4)
        np.testing.assert_allclose(stacked["logprob"][:, row], reference["logprob"], atol=1e-4)
        assert (stacked["entropy"][:, row] > full_vocab - 1.0).all()  # near-uniform tiny model
        filtered = torch.stack([step[row] for step in output.scores])  # what the sampler used
        assert ((filtered > -math.inf).sum(-1) <= 5).all()
        top5 = reference["p"].topk(5, dim=-1).indices
        assert (top5 == torch.from_numpy(reference["token_ids"])[:, None]).any(-1).all()


def test_checkpoint_generation_config_is_not_inherited(tmp_path, tiny_model_dir, prompts):
    model_dir = shutil.copytree(tiny_model_dir, tmp_path / "actor_hf")
    hostile = GenerationConfig(
        do_sample=True,
        temperature=0.1,
        top_k=3,
        repetition_penalty=3.0,
        no_repeat_ngram_size=1,
        suppress_tokens=list(range(3, 40_000)),
        min_new_tokens=5,
        bos_token_id=1,
        eos_token_id=[2],
        pad_token_id=2,
    )
    hostile.save_pretrained(model_dir)
    model, tok = load_model_and_tokenizer(model_dir, "float32", "cpu")
    assert model.generation_config.repetition_penalty == 3.0
    params = SamplingParams(max_new_tokens=20, seed=2)
    output, recorder, prompt_len = rerun_with_logits(
        model, tok, prompts[:2], 2, params=params, eos=[2]
    )
    stacked = recorder.stacked()
    sampled = output.sequences[:, prompt_len:]
    assert (sampled < 40_000).float().mean() > 0.5  # suppress_tokens did not apply
    for row in range(4):
        reference = float64_reference(output, row, 20, temperature=1.0, k=5, prompt_len=prompt_len)
        np.testing.assert_allclose(stacked["entropy"][:, row], reference["entropy"], atol=1e-4)
        np.testing.assert_allclose(stacked["logprob"][:, row], reference["logprob"], atol=1e-4)
    assert model.generation_config.repetition_penalty == 3.0  # restored after the call
    assert model.generation_config.suppress_tokens == list(range(3, 40_000))


def test_batched_and_unbatched_records_agree(fp32_model, prompts):
    """Same tokens and lengths whatever the batch; floats agree to 1e-5, not bit for bit.

    Float32 logits of one sequence differ by ~1e-7 between batch shapes (matmul and
    reduction order change with the batch), so entropies differ by ~1 ulp.
    """
    model, tokenizer = fp32_model
    runs = {
        size: list(
            generate_sequences(
                model,
                tokenizer,
                prompts,
                2,
                SamplingParams(max_new_tokens=30, batch_size=size, temperature=0.9),
                eos_token_ids=MANY_EOS,
            )
        )
        for size in (1, 4, 6)
    }
    assert len({r.n_tokens for r in runs[1]}) > 1  # responses of different lengths
    for size in (4, 6):
        for alone, batched in zip(runs[1], runs[size], strict=True):
            assert (alone.prompt_index, alone.sample_index) == (
                batched.prompt_index,
                batched.sample_index,
            )
            np.testing.assert_array_equal(alone.token_ids, batched.token_ids)
            assert alone.finish_reason == batched.finish_reason
            assert alone.token_texts == batched.token_texts
            for name in ("entropy", "logprob", "topk_probs"):
                np.testing.assert_allclose(
                    getattr(alone, name), getattr(batched, name), atol=1e-5, rtol=0
                )


def test_seeds(fp32_model, prompts):
    model, tokenizer = fp32_model

    def run(seed):
        params = SamplingParams(max_new_tokens=16, seed=seed)
        return list(generate_sequences(model, tokenizer, prompts[:1], 2, params, eos_token_ids=[2]))

    first, again, other = run(7), run(7), run(8)
    for a, b in zip(first, again, strict=True):
        for name in ("token_ids", "entropy", "logprob", "topk_token_ids", "topk_probs"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(first[0].token_ids, other[0].token_ids)
    assert not np.array_equal(first[0].token_ids, first[1].token_ids)  # samples differ
    assert sequence_seed(7, "q0", 0) != sequence_seed(7, "q0", 1) != sequence_seed(8, "q0", 1)


def test_progress_sees_token_counts_rise_within_a_batch(fp32_model, prompts):
    """The callback runs at every decode step: 4 rows x 5 steps, then 2 rows x 5 steps."""
    model, tokenizer = fp32_model
    calls = []
    results = generate_sequences(
        model,
        tokenizer,
        prompts,
        2,
        SamplingParams(max_new_tokens=5, batch_size=4),
        eos_token_ids=[],  # no EOS: every response has exactly max_new_tokens tokens
        progress=lambda done, tokens: calls.append((done, tokens)),
    )
    first = next(results)  # a generator: the first batch is ready before the rest runs
    assert calls == [(0, 4), (0, 8), (0, 12), (0, 16), (0, 20)] and first.prompt_index == 0
    rest = list(results)
    assert calls[5:] == [(4, 20), (4, 22), (4, 24), (4, 26), (4, 28), (4, 30), (6, 30)]
    assert len(rest) == 5 and {r.finish_reason for r in [first, *rest]} == {"length"}


def test_progress_stops_counting_a_row_at_its_eos(fp32_model, prompts):
    """With EOS ids, the in-batch count at the last step equals the records' token count."""
    model, tokenizer = fp32_model
    params = SamplingParams(max_new_tokens=12, batch_size=6, temperature=2.0)
    # EOS = the 4th token of the first response of a run without EOS: that row ends by step 4
    # (tokens before an EOS do not depend on it), the others later or at max_new_tokens
    free = list(generate_sequences(model, tokenizer, prompts, 2, params, eos_token_ids=[]))
    eos = [int(free[0].token_ids[3])]
    calls = []
    sequences = list(
        generate_sequences(
            model,
            tokenizer,
            prompts,
            2,
            params,
            eos_token_ids=eos,
            progress=lambda *c: calls.append(c),
        )
    )
    in_batch = [tokens for done, tokens in calls if done == 0]
    assert in_batch == sorted(in_batch) and len(in_batch) >= 2
    steps = [b - a for a, b in zip([0, *in_batch], in_batch, strict=False)]
    assert steps[0] == 6 and steps[-1] < 6  # some rows had ended before the last step
    assert in_batch[-1] == sum(s.n_tokens for s in sequences)
    assert {s.finish_reason for s in sequences} >= {"eos"}
    assert calls[-1] == (6, sum(s.n_tokens for s in sequences))


def test_skipped_pairs_are_not_generated_and_the_rest_is_unchanged(fp32_model, prompts):
    model, tokenizer = fp32_model
    params = SamplingParams(max_new_tokens=6, batch_size=2)
    full = list(generate_sequences(model, tokenizer, prompts, 2, params, eos_token_ids=[]))
    skip = {(0, 0), (0, 1), (1, 0)}  # batch 0 whole, half of batch 1
    rest = list(
        generate_sequences(model, tokenizer, prompts, 2, params, eos_token_ids=[], skip=skip)
    )
    assert [(s.prompt_index, s.sample_index) for s in rest] == [(1, 1), (2, 0), (2, 1)]
    for got in rest:
        [want] = [
            s
            for s in full
            if (s.prompt_index, s.sample_index) == (got.prompt_index, got.sample_index)
        ]
        for name in ("token_ids", "entropy", "logprob", "topk_token_ids", "topk_probs"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), name


def test_gumbel_sampler_samples_the_filtered_softmax():
    probs = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03])
    rows, steps = 1000, 20
    generators = [torch.Generator().manual_seed(seed) for seed in range(rows)]
    sampler = GumbelSampler(generators, recorder=None)
    scores = probs.log().expand(rows, -1).contiguous()
    counts = torch.zeros(5)
    for _ in range(steps):
        counts += torch.bincount(sampler(None, scores).argmax(-1), minlength=5)
    frequencies = counts / (rows * steps)
    sigma = (probs * (1 - probs) / (rows * steps)).sqrt()
    assert ((frequencies - probs).abs() < 5 * sigma).all(), frequencies
    filtered = scores.clone()
    filtered[:, 2:] = -math.inf  # top-k = 2
    picks = torch.cat([sampler(None, filtered).argmax(-1) for _ in range(5)])
    assert picks.max() <= 1 and 0.6 < (picks == 0).float().mean() < 0.74  # 2/3 expected


def test_recorder_keeps_only_k_numbers_per_position():
    batch, vocab, steps, k = 4, 50_000, 64, 5
    recorder = DecodeRecorder(temperature=0.9, top_prob_k=k)
    sampler = GumbelSampler([torch.Generator().manual_seed(i) for i in range(batch)], recorder)
    logits = torch.randn(batch, vocab)
    for _ in range(steps):
        sampler(None, recorder(None, logits) / 0.9)
    retained = recorder.retained_tensors()
    assert recorder.n_steps == steps
    assert all(vocab not in t.shape for t in retained)
    assert sum(t.numel() for t in retained) == steps * batch * (3 + 2 * k)
    with pytest.raises(RuntimeError):
        recorder.record_sampled(torch.zeros(batch, dtype=torch.long))  # no pending step


def test_nan_logits_raise(tiny_model_dir, prompts):
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir, "float32", "cpu")
    with torch.no_grad():
        model.lm_head.weight[123] = math.nan
    params = SamplingParams(max_new_tokens=4)
    with pytest.raises(NonFiniteLogitsError, match=r"^NaN logits at decode step 0 .*float32$"):
        list(generate_sequences(model, tokenizer, prompts[:1], 1, params, eos_token_ids=[2]))


def test_load_model_and_tokenizer(tiny_model_dir, tmp_path):
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir, "auto", "cpu")
    assert model.dtype == torch.float32 and not model.training
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id is not None
    assert checkpoint_eos_token_ids(model, tokenizer) == [2]

    with pytest.raises(CheckpointError, match=r"no config\.json"):
        load_model_and_tokenizer(tmp_path / "missing", "float32", "cpu")
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (broken / name).write_bytes((tiny_model_dir / name).read_bytes())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match=r"checkpoint .*broken cannot be loaded") as info:
        load_model_and_tokenizer(broken, "float32", "cpu")
    assert "\n" not in str(info.value)


def test_resolve_dtype_and_params_validation(monkeypatch, tiny_model_dir, tmp_path):
    from hed.core import compute_dtype

    monkeypatch.setattr(compute_dtype, "cpu_has_native_bf16", lambda: False)
    assert resolve_dtype("by_device", "cpu") == torch.float32
    assert resolve_dtype(None, "cpu") == torch.float32
    assert resolve_dtype("by_device", "cuda:0") == torch.bfloat16
    monkeypatch.setattr(compute_dtype, "cpu_has_native_bf16", lambda: True)
    assert resolve_dtype("by_device", "cpu") == torch.bfloat16
    # auto: the checkpoint's own dtype, as transformers' dtype="auto"
    config = json.loads((tiny_model_dir / "config.json").read_text())
    for key, value, want in [
        ("dtype", "bfloat16", torch.bfloat16),
        ("torch_dtype", "float16", torch.float16),
        (None, None, torch.float32),
    ]:
        folder = tmp_path / f"ckpt_{key}"
        folder.mkdir()
        written = {k: v for k, v in config.items() if k not in ("dtype", "torch_dtype")}
        if key:
            written[key] = value
        (folder / "config.json").write_text(json.dumps(written))
        assert resolve_dtype("auto", "cuda:0", folder) == want
    assert resolve_dtype("float16", "cpu") == torch.float16
    with pytest.raises(ConfigError, match="'fp8' is not one of by_device, auto, float32"):
        resolve_dtype("fp8", "cpu")
    with pytest.raises(ConfigError, match="temperature must be > 0"):
        SamplingParams(max_new_tokens=4, temperature=0)
    with pytest.raises(ConfigError, match="top_k"):
        SamplingParams(max_new_tokens=4, top_k=-2)
    with pytest.raises(ConfigError, match="top_k"):
        SamplingParams(max_new_tokens=4, top_k=True)
    # off as transformers / TRL (0) and vLLM / verl (-1) write it
    assert SamplingParams(max_new_tokens=4, top_k=0).top_k is None
    assert SamplingParams(max_new_tokens=4, top_k=-1).top_k is None
    assert SamplingParams(max_new_tokens=4, top_k=3).top_k == 3
    assert json.dumps(SamplingParams(max_new_tokens=4).__dict__)  # plain, recordable values
