"""The ``vllm`` generation backend: HED's sampling and exact records with a vLLM engine.

:class:`VLLMBackend` implements the decoding contract (:mod:`hed.decode.backend`) and yields
the same :class:`hed.records.sequence.GeneratedSequence` objects as the hf backend;
``generation.backend`` chooses which one :func:`hed.decode.factory.open_backend` opens. The
records come from
:class:`hed.decode.vllm_processor.DecodeRecordingProcessor`, which sees the sampler's raw float32
logits (that module's docstring has the order of vLLM's sampler).

Sampling as HED defines it: every request has ``temperature``, ``top_p``, ``top_k`` (null:
vLLM's 0 = off), ``max_tokens = max_new_tokens``, no penalties, ``min_tokens = 0``, and its
own seed :func:`hed.decode.types.sequence_seed` of (seed, prompt_id, sample_index), so its tokens
do not depend on its batch. EOS: ``ignore_eos`` with ``stop_token_ids`` = every EOS id of the
checkpoint (as the hf backend reads them), so the tokenizer's single EOS is not the only
stop; the EOS token is kept in the response. The engine is built with
``generation_config="vllm"``: nothing is taken from the checkpoint's
``generation_config.json`` (vLLM applies its sampling defaults otherwise).

Log-probability of the sampled token: with ``logprobs=0`` and ``logprobs_mode="raw_logits"``
vLLM returns the sampled token's raw float32 logit ``z_t`` (the tensor the processor saw);
``logprob = z_t / T - log Z`` with the recorded ``log Z`` of softmax(z / T).

The engine: one per call, in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so the
logits processor and the node share memory), with the V1 model runner
(``VLLM_USE_V2_MODEL_RUNNER=0``: Model Runner V2, vLLM's default on GPUs with Triton, has
another logits-processor interface). It is shut down, and its memory released, when the
generator ends or is closed. Sequences are yielded as their requests finish (not in index
order).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from hed.core.entropy import NonFiniteLogitsError
from hed.core.token_text import token_texts_batch
from hed.decode.backend import DecodingBackend, Progress, dtype_label
from hed.decode.loading import eos_token_ids_of, load_tokenizer
from hed.decode.types import (
    FINISH_EOS,
    FINISH_LENGTH,
    MASS_COLUMNS,
    GeneratedSequence,
    PromptInput,
    SamplingParams,
    VLLMSettings,
    encode_prompts,
    sequence_pairs,
    sequence_seed,
)
from hed.decode.vllm_engine import (
    CPU_DEFAULT_KV_CACHE_BYTES,
    INSTALL_HINT,
    PORT_STRIDE,
    check_architecture,
    engine_arguments,
    import_vllm,
    shutdown_engine,
    skip_output_token_ids,
    slot_port,
    start_engine,
    vllm_version,
)
from hed.errors import ConfigError

logger = logging.getLogger(__name__)


def sampling_request(
    vllm,
    params: SamplingParams,
    *,
    seed: int,
    key: int,
    eos: Sequence[int],
    max_tokens: int | None = None,
):
    """vLLM ``SamplingParams`` of one request as HED defines sampling (module docstring).

    ``max_tokens`` (default ``params.max_new_tokens``) limits this request alone.
    """
    return vllm.SamplingParams(
        n=1,
        temperature=float(params.temperature),
        top_p=float(params.top_p),
        top_k=0 if params.top_k is None else int(params.top_k),
        min_p=0.0,
        presence_penalty=0.0,
        frequency_penalty=0.0,
        repetition_penalty=1.0,
        max_tokens=int(params.max_new_tokens if max_tokens is None else max_tokens),
        min_tokens=0,
        seed=int(seed),
        ignore_eos=True,
        stop_token_ids=list(eos),
        logprobs=0,
        detokenize=False,
        skip_special_tokens=False,
        output_kind=vllm.sampling_params.RequestOutputKind.FINAL_ONLY,
        extra_args={"hed_request": int(key)},
    )


class RecordingEngine:
    """A vLLM engine with HED's recording processor, for one or more :meth:`generate` calls.

    :class:`VLLMBackend` starts one per ``generate`` call; benchmarks and tests keep one
    engine for several calls (and its ``llm`` for plain vLLM requests). :meth:`generate` has
    the decoding contract's call shape (:meth:`hed.decode.backend.DecodingBackend.generate`).

    Args:
        arguments: ``vllm.LLM`` keyword arguments (:func:`engine_arguments`).
        record: register the processor (False: plain vLLM, for benchmarks and tests).
        tokenizer: the checkpoint's tokenizer (prompt encoding, token texts); None when every
            prompt carries its ``token_ids`` (the sequences then have no token texts:
            benchmarks of tokenizer-less dummy models).
        eos_token_ids: every id that ends a response (empty: each response runs its
            ``max_tokens``).

    Raises:
        ConfigError: see :func:`start_engine`.
    """

    def __init__(
        self,
        arguments: dict[str, Any],
        record: bool = True,
        *,
        tokenizer: Any = None,
        eos_token_ids: Sequence[int] = (),
    ) -> None:
        from hed.decode.vllm_processor import make_processor_class

        self.tokenizer, self.eos_token_ids = tokenizer, list(eos_token_ids)
        self.vllm = import_vllm()
        self.processor_class = make_processor_class(None) if record else None
        self.llm = start_engine(arguments, [self.processor_class] if record else [])
        if record:
            skip_output_token_ids(self.llm)

    def generate(
        self,
        prompts: Sequence[PromptInput],
        samples_per_prompt: int,
        sampling: SamplingParams,
        *,
        progress: Progress | None = None,
        skip: Collection[tuple[int, int]] = (),
        encoded: Mapping[int, Sequence[int]] | None = None,
        max_tokens: Mapping[tuple[int, int], int] | None = None,
        mass_ids: dict[str, np.ndarray] | None = None,
    ) -> Iterator[GeneratedSequence]:
        """Sample and record, as :meth:`VLLMBackend.generate` (which see), on this engine.

        Beyond the contract, keyword-only: ``encoded`` (prompt_index -> prompt token ids, as
        :func:`hed.decode.types.encode_prompts` gives them) saves encoding the prompts again.
        ``mass_ids``: {category: word-start ids} whose mass the sink records
        (:class:`hed.decode.vllm_processor.RecordSink`); None: no mass columns. ``max_tokens``
        maps (prompt_index, sample_index) to a response length limit of its own (benchmarks
        and tests of varied lengths); others use ``sampling.max_new_tokens``.

        A finished request is yielded once its records are on the host: the sink's copies
        never block an engine step (:class:`hed.decode.vllm_processor.RecordSink`), and the
        run waits for the device once, after the engine's last step.
        """
        from hed.decode.vllm_processor import RecordSink

        tokenizer, eos_token_ids = self.tokenizer, self.eos_token_ids
        if encoded is None:
            encoded = encode_prompts(tokenizer, prompts)
        pairs = sequence_pairs(prompts, samples_per_prompt, set(skip))
        sink = RecordSink(
            sampling.temperature,
            sampling.top_prob_k,
            stats_kernel=sampling.stats_kernel,
            mass_ids=mass_ids,
        )
        limits = [
            (max_tokens or {}).get((prompt.prompt_index, sample), sampling.max_new_tokens)
            for prompt, sample in pairs
        ]
        if self.processor_class is not None:
            self.processor_class.sink = sink
        engine = self.llm.llm_engine
        for key, (prompt, sample) in enumerate(pairs):
            request = sampling_request(
                self.vllm,
                sampling,
                seed=sequence_seed(sampling.seed, prompt.prompt_id, sample),
                key=key,
                eos=eos_token_ids,
                max_tokens=limits[key],
            )
            engine.add_request(
                str(key), {"prompt_token_ids": list(encoded[prompt.prompt_index])}, request
            )
        n_sequences = n_tokens = 0
        waiting: deque[tuple[Any, int]] = deque()  # finished, with the steps they need filed
        try:
            while engine.has_unfinished_requests() or waiting:
                if engine.has_unfinished_requests():
                    finished = [out for out in engine.step() if out.finished]
                else:  # the engine is done: wait for the last copies (one sync per run)
                    finished = []
                    sink.flush()
                if self.processor_class is None:  # plain vLLM: tokens only
                    n_sequences += len(finished)
                    n_tokens += sum(len(out.outputs[0].token_ids) for out in finished)
                    continue
                waiting.extend((out, sink.steps_recorded) for out in finished)
                if finished:
                    sink.start_copy()  # non-blocking: their last rows head for the host now
                filed = sink.poll()
                ready = []
                while waiting and waiting[0][1] <= filed:
                    ready.append(waiting.popleft()[0])
                if not ready:
                    continue
                results = [
                    _sequence(
                        out, pairs, sink, limits, params=sampling, eos_token_ids=eos_token_ids
                    )
                    for out in ready
                ]
                texts = (
                    token_texts_batch(tokenizer, [seq.token_ids for seq in results])
                    if tokenizer is not None
                    else [[] for _ in results]  # benchmarks of tokenizer-less dummy models
                )
                for seq, token_text in zip(results, texts, strict=True):
                    seq.token_texts = token_text
                    seq.response_text = "".join(token_text)
                n_sequences += len(results)
                n_tokens += sum(seq.n_tokens for seq in results)
                yield from results
                if progress is not None:
                    progress(n_sequences, n_tokens)
        finally:
            if engine.has_unfinished_requests():  # closed early: leave the engine clean
                engine.abort_request([str(key) for key in range(len(pairs))])
            if self.processor_class is not None:
                self.processor_class.sink = None
        if self.processor_class is None and progress is not None:
            progress(n_sequences, n_tokens)

    def close(self) -> None:
        """Shut the engine down and release its memory."""
        llm, self.llm = self.llm, None
        if llm is not None:
            shutdown_engine(llm)


def _sequence(
    output, pairs, sink, limits, *, params: SamplingParams, eos_token_ids: Sequence[int]
) -> GeneratedSequence:
    """One finished request as a :class:`GeneratedSequence` (texts filled by the caller)."""
    key = int(output.request_id)
    prompt, sample = pairs[key]
    (completion,) = output.outputs
    ids = np.asarray(completion.token_ids, dtype=np.int32)
    n = len(ids)
    records = sink.take(key, n)
    raw = np.array(
        [entry[int(token)].logprob for entry, token in zip(completion.logprobs, ids, strict=True)],
        dtype=np.float32,
    )  # z_t, the raw float32 logit of each sampled token
    logprob = raw / np.float32(params.temperature) - records["log_z"]
    if n and int(ids[-1]) in set(eos_token_ids):
        finish_reason = FINISH_EOS
    elif n == limits[key]:
        finish_reason = FINISH_LENGTH
    else:
        raise RuntimeError(
            f"vLLM request {key} stopped after {n} tokens without EOS ({completion.finish_reason})"
        )
    bad = np.flatnonzero(~np.isfinite(records["entropy"]))
    if len(bad):
        raise NonFiniteLogitsError(
            f"NaN logits at decode step {int(bad[0])} (prompt_index {prompt.prompt_index}, "
            f"sample_index {sample}): the checkpoint produces NaN; try dtype float32"
        )
    return GeneratedSequence(
        prompt_index=prompt.prompt_index,
        prompt_id=prompt.prompt_id,
        sample_index=sample,
        token_ids=ids,
        entropy=records["entropy"],
        logprob=logprob.astype(np.float32),
        topk_token_ids=records["topk_token_ids"],
        topk_probs=records["topk_probs"],
        **{name: records[name] for name in MASS_COLUMNS if name in records},
        token_texts=[],
        response_text="",
        finish_reason=finish_reason,
    )


class VLLMBackend(DecodingBackend):
    """The ``vllm`` backend (:class:`hed.decode.backend.DecodingBackend`), checked before any work.

    Opening checks, in order: vLLM imports, the checkpoint's architecture is one vLLM
    implements, its tokenizer loads. The engine itself starts in each :meth:`generate` call
    (it needs the prompts for ``max_model_len``) and is shut down when that call's iterator
    ends or is closed.

    Args:
        model_dir: the checkpoint folder (HuggingFace layout).
        settings: the engine settings (``generation.vllm``).
        dtype: the resolved ``torch.dtype`` (or its name).
        device: ``cpu`` or ``cuda``: the defaults of ``enforce_eager`` and the KV cache.

    Raises:
        ConfigError: vLLM is not installed.
        CheckpointError: no ``config.json``, an architecture vLLM does not implement, or a
            tokenizer that does not load.
    """

    name = "vllm"

    def __init__(
        self, model_dir: str | Path, settings: VLLMSettings, *, dtype: Any, device: str
    ) -> None:
        import transformers

        version = vllm_version()
        check_architecture(model_dir)
        self.model_dir, self.settings, self.device = model_dir, settings, device
        self.dtype = dtype_label(dtype)
        self.tokenizer = load_tokenizer(model_dir)
        self.eos_token_ids = eos_token_ids_of(model_dir, self.tokenizer)
        config = transformers.AutoConfig.from_pretrained(model_dir)
        self.max_position_embeddings = getattr(config, "max_position_embeddings", None)
        self.metadata = {"name": "vllm", "version": version, "settings": asdict(settings)}

    def generate(
        self,
        prompts: Sequence[PromptInput],
        samples_per_prompt: int,
        sampling: SamplingParams,
        *,
        progress: Progress | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> Iterator[GeneratedSequence]:
        """Sample with one vLLM engine started for this call (see the contract).

        ``sampling.batch_size`` is not used: vLLM batches by itself, up to
        ``settings.max_num_seqs``. Sequences are yielded as their requests finish; a pair in
        ``skip`` is not requested (each request's seed comes from (seed, prompt_id,
        sample_index), so the others sample the same tokens).

        Raises:
            ConfigError: a prompt does not fit in ``max_model_len``; the KV cache does not fit.
            NonFiniteLogitsError: the model produced NaN logits.
        """
        encoded = encode_prompts(self.tokenizer, prompts)
        if not prompts or samples_per_prompt < 1:
            return
        max_model_len = _max_model_len(encoded, sampling.max_new_tokens, self.settings)
        arguments = engine_arguments(
            self.model_dir,
            self.settings,
            dtype=self.dtype,
            device=self.device,
            max_model_len=max_model_len,
            seed=sampling.seed,
        )
        engine = RecordingEngine(
            arguments, tokenizer=self.tokenizer, eos_token_ids=self.eos_token_ids
        )
        try:
            yield from engine.generate(
                prompts,
                samples_per_prompt,
                sampling,
                progress=progress,
                skip=skip,
                encoded=encoded,
                mass_ids=self.mass_ids,
            )
        finally:
            engine.close()


def _max_model_len(encoded: dict[int, list[int]], max_new_tokens: int, settings) -> int:
    """``generation.vllm.max_model_len``, or the longest prompt + ``max_new_tokens`` when null.

    Raises:
        ConfigError: the longest prompt + ``max_new_tokens`` exceeds the configured length.
    """
    longest = max(encoded, key=lambda index: len(encoded[index]))
    need = len(encoded[longest]) + max_new_tokens
    max_model_len = settings.max_model_len or need
    if need > max_model_len:
        raise ConfigError(
            f"prompt_index {longest} has {len(encoded[longest])} "
            f"tokens: with max_new_tokens = {max_new_tokens} it needs "
            f"generation.vllm.max_model_len >= {need}, got {max_model_len}; raise it (or set "
            "null) or lower generation.max_new_tokens"
        )
    return max_model_len


__all__ = [
    "CPU_DEFAULT_KV_CACHE_BYTES",
    "INSTALL_HINT",
    "PORT_STRIDE",
    "RecordingEngine",
    "VLLMBackend",
    "VLLMSettings",
    "check_architecture",
    "engine_arguments",
    "eos_token_ids_of",
    "import_vllm",
    "load_tokenizer",
    "sampling_request",
    "shutdown_engine",
    "skip_output_token_ids",
    "slot_port",
    "start_engine",
    "vllm_version",
]
