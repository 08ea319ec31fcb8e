"""The decoding contract: both backends implement it, open_backend checks first, the shard
driver keeps and skips, and generate_shard is a short node over it."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hed.decode.backend import BACKENDS, DecodingBackend, generate_shard_sequences
from hed.decode.factory import open_backend
from hed.decode.types import (
    FINISH_LENGTH,
    GeneratedSequence,
    PromptInput,
    SamplingParams,
    sequence_pairs,
)
from hed.errors import ConfigError
from hed.records.shard_parts import ShardParts


class _Generation:
    """The three attributes of GenerationParams the shard driver reads."""

    def __init__(self, samples_per_prompt: int, sampling: SamplingParams) -> None:
        self.samples_per_prompt, self.sampling, self.log_every_s = samples_per_prompt, sampling, 30


class _CountingBackend(DecodingBackend):
    """A backend without a model: sequence (p, s) has tokens [p, s, 7]; can fail after n."""

    name = "counting"

    def __init__(self, fail_after: int | None = None) -> None:
        self.tokenizer, self.eos_token_ids, self.max_position_embeddings = None, [7], None
        self.metadata = {"name": "counting", "version": "0"}
        self.fail_after, self.requested, self.closed = fail_after, [], False

    def generate(self, prompts, samples_per_prompt, sampling, *, progress=None, skip=()):
        done = 0
        for prompt, sample in sequence_pairs(prompts, samples_per_prompt, skip):
            if self.fail_after is not None and done == self.fail_after:
                raise RuntimeError("killed")
            self.requested.append((prompt.prompt_index, sample))
            ids = np.array([prompt.prompt_index, sample, 7], np.int32)
            done += 1
            if progress is not None:
                progress(done, 3 * done)
            yield GeneratedSequence(
                prompt_index=prompt.prompt_index,
                prompt_id=prompt.prompt_id,
                sample_index=sample,
                token_ids=ids,
                entropy=np.full(3, 0.5, np.float32),
                logprob=np.full(3, -0.25, np.float32),
                topk_token_ids=np.zeros((3, 2), np.int32),
                topk_probs=np.full((3, 2), 0.5, np.float32),
                token_texts=["a", "b", "c"],
                response_text="abc",
                finish_reason=FINISH_LENGTH,
            )

    def close(self) -> None:
        self.closed = True


PROMPTS = [PromptInput(prompt_index=i, prompt_id=f"p{i}", text=f"q{i}") for i in range(3)]
SAMPLING = SamplingParams(max_new_tokens=3, batch_size=2)


def test_both_backends_implement_the_one_contract():
    from hed.decode.hf import HFBackend
    from hed.decode.vllm import VLLMBackend

    assert BACKENDS == ("hf", "vllm")
    for backend in (HFBackend, VLLMBackend):
        assert issubclass(backend, DecodingBackend)
        assert backend.generate is not DecodingBackend.generate
        assert list(inspect.signature(backend.generate).parameters) == [
            "self", "prompts", "samples_per_prompt", "sampling", "progress", "skip"
        ]  # fmt: skip


def test_the_implementations_keep_the_contracts_call_shape():
    """``RecordingEngine.generate`` (benchmarks keep one vLLM engine for several calls) takes the
    contract's arguments in the contract's order; what it adds is keyword-only, with defaults.
    The hf implementation takes its model and tokenizer, then the contract's arguments; the
    rest is keyword-only (no positional EOS list, progress or skip)."""
    from hed.decode.hf import generate_sequences
    from hed.decode.vllm import RecordingEngine

    hf = inspect.signature(generate_sequences).parameters
    assert list(hf)[:5] == ["model", "tokenizer", "prompts", "samples_per_prompt", "params"]
    assert {hf[name].kind for name in list(hf)[5:]} == {inspect.Parameter.KEYWORD_ONLY}

    parameters = inspect.signature(RecordingEngine.generate).parameters
    contract = inspect.signature(DecodingBackend.generate).parameters
    assert list(parameters)[:6] == list(contract) == [
        "self", "prompts", "samples_per_prompt", "sampling", "progress", "skip"
    ]  # fmt: skip
    for name in list(parameters)[4:]:
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameters[name].default is not inspect.Parameter.empty, name
    assert not hasattr(RecordingEngine, "run")  # the old positional shape is gone


def test_open_backend_refuses_an_unknown_name_before_loading_anything(tmp_path):
    with pytest.raises(ConfigError) as refused:
        open_backend("vlm", tmp_path / "missing")
    assert str(refused.value) == "generation.backend must be one of hf, vllm, got 'vlm'"


def test_a_backend_is_a_context_manager_that_closes():
    with _CountingBackend() as backend:
        assert not backend.closed
    assert backend.closed


def test_the_shard_driver_keeps_finished_sequences_and_generates_only_the_missing(tmp_path):
    parts = ShardParts(str(tmp_path / ".partial" / "shard_0"))
    binding = {"sampling": {"seed": 0}}
    generation = _Generation(2, SAMPLING)
    with pytest.raises(RuntimeError, match="killed"):
        generate_shard_sequences(
            _CountingBackend(fail_after=4), PROMPTS, generation, parts=parts, binding=binding,
            label="r.step_0.shard_0",
        )  # fmt: skip
    # 4 finished = 2 parts of batch_size 2 on disk; the rerun asks only for the other 2 pairs
    backend = _CountingBackend()
    sequences = generate_shard_sequences(
        backend, PROMPTS, generation, parts=parts, binding=binding, label="r.step_0.shard_0"
    )
    assert backend.requested == [(2, 0), (2, 1)]
    keys = sorted((s.prompt_index, s.sample_index) for s in sequences)
    assert keys == [(p, s) for p in range(3) for s in range(2)]
    kept = next(s for s in sequences if (s.prompt_index, s.sample_index) == (1, 1))
    assert kept.token_ids.tolist() == [1, 1, 7] and kept.response_text == "abc"
    assert kept.logprob.dtype == np.float32 and float(kept.logprob[0]) == -0.25


def test_without_parts_every_pair_is_generated_once():
    backend = _CountingBackend()
    sequences = generate_shard_sequences(
        backend, PROMPTS, _Generation(2, SAMPLING), parts=None, binding={}, label="x"
    )
    assert backend.requested == [(p, s) for p in range(3) for s in range(2)]
    assert len(sequences) == 6


def _body_lines(function) -> int:
    """Source lines of a function's body without its docstring and blank lines."""
    source = textwrap.dedent(inspect.getsource(function))
    node = ast.parse(source).body[0]
    first = node.body[1] if ast.get_docstring(node) else node.body[0]
    lines = source.splitlines()[first.lineno - 1 : node.end_lineno]
    return sum(1 for line in lines if line.strip())


def test_generate_shard_is_a_short_node_over_open_backend():
    from hed.pipelines.generation import nodes

    source = inspect.getsource(nodes.generate_shard)
    assert "open_backend(" in source and "shard_metadata(" in source
    assert "fmt: off" not in source and "fmt: skip" not in source  # counted as ruff writes it
    assert _body_lines(nodes.generate_shard) <= 25


def test_the_plain_types_load_without_torch():
    code = (
        "import sys; import hed.decode.types, hed.decode.backend, hed.records.shard_parts, "
        "hed.config.params, hed.hooks.parameters, hed.io.reused_shards, hed.analysis.rescoring; "
        "print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"  # after Kedro's logging-config line


def test_the_hf_backend_yields_what_generate_sequences_yields(tiny_model_dir):
    from hed.decode.hf import generate_sequences
    from hed.decode.loading import checkpoint_eos_token_ids, load_model_and_tokenizer

    prompts = PROMPTS[:2]
    with open_backend("hf", tiny_model_dir, dtype="float32") as backend:
        assert (backend.name, backend.dtype, backend.device) == ("hf", "float32", "cpu")
        assert backend.metadata["name"] == "hf"
        got = list(backend.generate(prompts, 2, SAMPLING, skip={(0, 1)}))
        special = backend.special_ids
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir, "float32", "cpu")
    eos = checkpoint_eos_token_ids(model, tokenizer)
    want = list(
        generate_sequences(model, tokenizer, prompts, 2, SAMPLING, eos_token_ids=eos, skip={(0, 1)})
    )
    assert [(s.prompt_index, s.sample_index) for s in got] == [(0, 0), (1, 0), (1, 1)]
    for a, b in zip(got, want, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        np.testing.assert_array_equal(a.entropy, b.entropy)
        assert a.token_texts == b.token_texts
    assert special.dtype == np.int32 and set(eos) <= set(special.tolist())
    assert backend.model is None  # closed: the model is released


def test_a_model_in_memory_given_token_ids_records_what_the_loaded_backend_records(
    tiny_model_dir,
):
    """``HFBackend.of_model`` over the loaded backend's model, no tokenizer, the prompts as
    token ids (as the GPU benches run random-weight models): the same tokens and records,
    bit for bit, and no token texts."""
    from dataclasses import replace

    from hed.decode.hf import HFBackend
    from hed.decode.types import encode_prompts

    prompts = PROMPTS[:2]
    with open_backend("hf", tiny_model_dir, dtype="float32") as backend:
        want = list(backend.generate(prompts, 2, SAMPLING))
        encoded = encode_prompts(backend.tokenizer, prompts)
        as_ids = [replace(p, text="", token_ids=tuple(encoded[p.prompt_index])) for p in prompts]
        bare = HFBackend.of_model(backend.model, eos_token_ids=backend.eos_token_ids)
        assert (bare.dtype, bare.device, bare.tokenizer) == ("float32", "cpu", None)
        got = list(bare.generate(as_ids, 2, SAMPLING))
    assert [(s.prompt_index, s.sample_index) for s in got] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for a, b in zip(got, want, strict=True):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        for name in ("entropy", "logprob", "topk_token_ids", "topk_probs"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert a.finish_reason == b.finish_reason
        assert a.token_texts == [] and a.response_text == ""
        assert len(b.token_texts) == b.n_tokens > 0
