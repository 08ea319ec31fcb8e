"""What a shard file records about how it was generated, and whether that is still current.

Every shard file (``<run>.step_<step>.shard_<k>.token_records`` and ``.sequences``) carries
the Parquet key-value metadata ``hed.generation`` (JSON, written by
:func:`hed.pipelines.generation.nodes.generate_shard`). Aggregation compares it with the
current configuration before it merges a step (:func:`stale_field`), because
``--only-missing-outputs`` and ``kedro run --pipelines aggregation`` reuse shard files that
exist, whatever parameters they were made with.

Compared — they change which tokens are sampled or what a record holds:

* ``generation.samples_per_prompt``, ``temperature``, ``top_p``, ``top_k``,
  ``max_new_tokens``, ``seed``, ``top_prob_k``;
* ``generation.backend`` (``hf`` or ``vllm``: the two samplers draw other tokens from the
  same distribution, so shards of one backend are not a continuation of the other's);
* ``generation.dtype`` (``by_device`` is resolved for the device the shard ran on: bfloat16
  on CUDA and on CPUs with native bfloat16, float32 on other CPUs; ``auto`` to the
  checkpoint's own dtype);
* the prompt rendering: ``prompts.apply_chat_template``, ``enable_thinking``,
  ``system_prompt``;
* the checkpoint: ``config_sha256`` and ``weights_index_sha256`` of the (run, step) in the
  ``checkpoints`` dataset (not ``model_dir``: a moved folder holds the same model);
* the prompt set: the shard's prompt ids (a prompt id hashes the prompt text, so
  ``prompts.num_prompts``, ``prompts.seed``, ``instruction_suffix``, ``prompt_columns`` and
  the prompt file itself are all covered);

Not compared — recorded for the audit trail only:

* ``generation.batch_size``: each response has its own random stream, so the batch changes
  only the floating-point order of the model's reductions (records agree to ~1e-5 in
  float32; in bfloat16 a sampled token can differ now and then). Shards made with another
  batch size are an equally valid sample of the same distribution, and lowering the batch
  size is the usual fix for an out-of-memory resume, which must not invalidate finished
  shards. Keep it fixed for bit-identical reruns.
* the device (``cuda`` / ``cpu``), ``torch_threads``, ``log_every_s``, ``hed_version``, the
  backend's version (transformers or vLLM) and ``generation.vllm`` (engine settings: memory,
  ``max_model_len``, ``max_num_seqs``, eager mode and prefix caching change only speed).
* ``generation.num_shards``, ``run``, ``step`` and ``shard`` are checked separately (the
  shard's place in the step).
* the lexicon (``aggregation.lexicon``, as ``word_mass.lexicon_sha256``): words and
  categories are post-hoc, so a lexicon change never makes a shard stale. The digest says
  which lexicon the records' ``anthropomorphic_mass`` / ``reasoning_mass`` (sums over its
  words' word-start ids) were computed with; the merge carries it into the merged records
  (:data:`WORD_MASS_METADATA_KEY`), and what reads the mass columns compares it with the
  current lexicon (:func:`hed.analysis.hedging_propensity.step_hedging_propensity`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from hed.errors import HEDError

#: Parquet key-value metadata key holding the generation parameters of a shard file.
GENERATION_METADATA_KEY = b"hed.generation"
#: Parquet key-value metadata key of merged token records: ``{"word_mass": {"lexicon_sha256":
#: <digest or null>}}``, the lexicon their mass columns were computed with (from the shards).
WORD_MASS_METADATA_KEY = b"hed.word_mass"

#: ``generation`` parameters compared, with their defaults: the one table of these defaults
#: (:class:`hed.decode.types.SamplingParams` takes its field defaults from it).
SAMPLING_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": None,
    "max_new_tokens": None,  # required
    "seed": 0,
    "top_prob_k": 5,
}

#: ``generation.backend`` and ``generation.dtype`` defaults (compared too): the one table of
#: them (:class:`hed.config.params.GenerationParams` and the generation section's key list read
#: it; ``by_device``: bfloat16 where the device has it natively, else float32).
DECODING_DEFAULTS: dict[str, str] = {"backend": "hf", "dtype": "by_device"}

#: ``generation`` parameters recorded but deliberately not compared (see the module docstring).
NOT_COMPARED = ("batch_size", "torch_threads", "log_every_s", "device", "hed_version")

#: Prompt rendering settings (``params:prompts``) compared.
CHAT_TEMPLATE_KEYS = ("apply_chat_template", "enable_thinking", "system_prompt")

_CHECKPOINT_HASHES = ("config_sha256", "weights_index_sha256", "weights_xxh3_128")


class StaleField(NamedTuple):
    """A recorded value that differs from the current configuration.

    Attributes:
        field: the parameter as a user writes it, e.g. ``generation.temperature``.
        recorded: the shard's value (as text).
        current: the current value (as text).
        restore: how to make the configuration match the shard instead, e.g.
            ``set generation.temperature: 1.0``.
    """

    field: str
    recorded: str
    current: str
    restore: str


def chat_template_settings(prompt_params: dict[str, Any]) -> dict[str, Any]:
    """The effective prompt rendering settings of ``params:prompts``.

    As :func:`hed.decode.prompts.render_prompt` applies them: ``apply_chat_template`` absent means
    true, ``enable_thinking`` null means "not passed", an empty ``system_prompt`` means none.

    Returns:
        ``{"apply_chat_template": bool, "enable_thinking": bool | None,
        "system_prompt": str | None}``.
    """
    thinking = prompt_params.get("enable_thinking")
    return {
        "apply_chat_template": bool(prompt_params.get("apply_chat_template", True)),
        "enable_thinking": None if thinking is None else bool(thinking),
        "system_prompt": prompt_params.get("system_prompt") or None,
    }


def generation_metadata(
    run: str,
    step: int,
    shard: int,
    *,
    generation: Any,
    backend: Any,
    checkpoint: dict[str, Any],
    prompt_ids: Iterable[str],
    prompt_params: dict[str, Any],
    lexicon: Any = None,
) -> dict[str, Any]:
    """The ``hed.generation`` metadata of one shard: how its sequences were generated.

    Args:
        run, step, shard: the shard's place.
        generation: the parsed ``params:generation`` (:class:`hed.config.params.GenerationParams`:
            ``num_shards``, ``samples_per_prompt`` and the effective ``sampling`` settings,
            recorded field by field).
        backend: the open backend (:class:`hed.decode.backend.DecodingBackend`: its resolved
            ``dtype`` and ``device``, and its ``metadata``: name, version, settings).
        checkpoint: the (run, step) entry of ``checkpoints`` (model_dir and its fingerprint).
        prompt_ids: the shard's prompt ids (recorded sorted, without repeats).
        prompt_params: ``params:prompts`` (the effective chat-template settings are recorded).
        lexicon: the :class:`hed.core.lexicon.Lexicon` whose word-start mass the records carry
            (recorded as ``word_mass.lexicon_sha256``); None: no mass columns, not recorded.

    Returns:
        A JSON-ready dict; written with ``json.dumps(..., sort_keys=True)`` under
        :data:`GENERATION_METADATA_KEY` and compared by :func:`stale_field`.
    """
    import hed

    mass = {} if lexicon is None else {"word_mass": {"lexicon_sha256": lexicon_sha256(lexicon)}}
    return {
        **mass,
        "run": run,
        "step": step,
        "shard": shard,
        "num_shards": generation.num_shards,
        "samples_per_prompt": generation.samples_per_prompt,
        "sampling": dict(vars(generation.sampling)),
        "dtype": backend.dtype,
        "device": backend.device,
        "checkpoint": checkpoint,
        "prompt_ids": sorted(set(prompt_ids)),
        "chat_template": chat_template_settings(prompt_params),
        "hed_version": hed.__version__,
        "backend": backend.metadata,
    }


def lexicon_sha256(lexicon: Any) -> str:
    """sha256 of a lexicon's (word, category) pairs, sorted, as JSON: what the word-start
    mass columns depend on (:class:`hed.core.lexicon.Lexicon`)."""
    pairs = sorted(
        (word, lexicon.categories[code])
        for word, code in zip(lexicon.words, lexicon.word_categories, strict=True)
    )
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()


def mass_lexicon_sha256(recorded: dict[str, Any]) -> str | None:
    """The digest (:func:`lexicon_sha256`) of the lexicon a file's mass columns were computed
    with: ``word_mass.lexicon_sha256`` of its ``hed.generation`` or ``hed.word_mass``
    metadata; None when the file has no mass columns (or was written before they existed)."""
    return (recorded.get("word_mass") or {}).get("lexicon_sha256")


def effective_dtype(configured: str | None, device: str, model_dir: str | None = None) -> str:
    """The dtype name ``generation.dtype`` resolves to on ``device``
    (:mod:`hed.core.compute_dtype`).

    ``by_device`` (the default) gives bfloat16 on CUDA and on CPUs with native bfloat16, else
    float32; ``auto`` the checkpoint's own dtype (read from ``model_dir``; ``"auto"`` itself
    when no folder is given).
    """
    from hed.core.compute_dtype import dtype_name

    return dtype_name(configured, device, model_dir)


def stale_field(
    recorded: dict[str, Any],
    *,
    generation: dict[str, Any],
    prompt_params: dict[str, Any] | None,
    checkpoint: dict[str, Any] | None,
    prompt_ids: Iterable[str] | None,
) -> StaleField | None:
    """The first field of a shard's ``hed.generation`` metadata that is no longer current.

    Only fields present in ``recorded`` are compared (files written before a field was
    recorded are not refused for it), and only those listed in the module docstring.

    Args:
        recorded: the decoded ``hed.generation`` metadata of one shard file.
        generation: the current ``params:generation``.
        prompt_params: the current ``params:prompts`` (``None``: rendering not compared).
        checkpoint: the current fingerprint of the shard's (run, step) from the
            ``checkpoints`` dataset (``None``: not compared).
        prompt_ids: the current ``prompt_id`` of every prompt of this shard (``None``: not
            compared).

    Returns:
        The first mismatch, or ``None`` when the shard is current.
    """
    for found in (
        _stale_sampling(recorded, generation),
        _stale_rendering(recorded, prompt_params),
        _stale_checkpoint(recorded, checkpoint),
        _stale_prompts(recorded, prompt_ids),
    ):
        if found is not None:
            return found
    return None


def _stale_sampling(recorded: dict[str, Any], generation: dict[str, Any]) -> StaleField | None:
    pairs: list[tuple[str, Any, Any]] = []
    if "samples_per_prompt" in recorded:
        pairs.append(
            (
                "samples_per_prompt",
                recorded["samples_per_prompt"],
                generation.get("samples_per_prompt"),
            )
        )
    sampling = recorded.get("sampling") or {}
    for name, default in SAMPLING_DEFAULTS.items():
        if name in sampling:
            then, now = sampling[name], generation.get(name, default)
            if name == "top_k":  # 0 (transformers, TRL) and -1 (vLLM, verl) also mean off
                then, now = (None if v in (0, -1) else v for v in (then, now))
            pairs.append((name, then, now))
    for name, then, now in pairs:
        if not _same_number(then, now):
            return _field(f"generation.{name}", then, now)
    backend = recorded.get("backend")
    if isinstance(backend, dict) and "name" in backend:
        now = generation.get("backend", DECODING_DEFAULTS["backend"])
        if backend["name"] != now:
            return _field("generation.backend", backend["name"], now)
    if "dtype" in recorded:
        device = str(recorded.get("device", "cpu"))
        configured = generation.get("dtype", DECODING_DEFAULTS["dtype"])
        model_dir = (recorded.get("checkpoint") or {}).get("model_dir")
        try:
            now = effective_dtype(configured, device, model_dir)
        except HEDError:  # auto, and the checkpoint is not on this machine (a re-plot):
            now = str(recorded["dtype"])  # its config_sha256 (compared below) covers its dtype
        if now == "auto":
            now = str(recorded["dtype"])
        if recorded["dtype"] != now:
            shown = f"{configured} (= {now} on {device})" if configured != now else now
            return StaleField(
                "generation.dtype",
                str(recorded["dtype"]),
                shown,
                f"set generation.dtype: {recorded['dtype']}",
            )
    return None


def _stale_rendering(
    recorded: dict[str, Any], prompt_params: dict[str, Any] | None
) -> StaleField | None:
    then = recorded.get("chat_template")
    if prompt_params is None or not isinstance(then, dict):
        return None
    now = chat_template_settings(prompt_params)
    for key in CHAT_TEMPLATE_KEYS:
        if key not in then:
            continue
        value = then[key]
        if key == "apply_chat_template" and value is None:
            continue  # older files recorded the raw value: absent and null cannot be told apart
        if key == "system_prompt":
            value = value or None
        if value != now[key]:
            return _field(f"prompts.{key}", value, now[key])
    return None


def _stale_checkpoint(
    recorded: dict[str, Any], checkpoint: dict[str, Any] | None
) -> StaleField | None:
    then = recorded.get("checkpoint")
    if checkpoint is None or not isinstance(then, dict):
        return None
    for key in _CHECKPOINT_HASHES:
        if key in then and then[key] != checkpoint.get(key):
            where = f"checkpoints dataset, {checkpoint.get('model_dir')}"
            return StaleField(
                f"checkpoint {key}",
                _short(then[key]),
                f"{_short(checkpoint.get(key))} ({where})",
                "restore the checkpoint it was generated from",
            )
    return None


def _stale_prompts(recorded: dict[str, Any], prompt_ids: Iterable[str] | None) -> StaleField | None:
    if prompt_ids is None or "prompt_ids" not in recorded:
        return None
    then, now = set(recorded["prompt_ids"]), set(prompt_ids)
    if then == now:
        return None
    gone, new = sorted(then - now), sorted(now - then)
    return StaleField(
        "prompt_ids",
        f"{len(then)} ids ({len(gone)} not in the current prompts"
        + (f", e.g. {gone[0]})" if gone else ")"),
        f"{len(now)} ids ({len(new)} not in the shard" + (f", e.g. {new[0]})" if new else ")"),
        "restore the prompt file and the prompts parameters (num_prompts, seed, "
        "instruction_suffix, prompt_columns) and rebuild the prompt set "
        "(`kedro run --nodes build_prompt_set`)",
    )


def _same_number(then: Any, now: Any) -> bool:
    if then is None or now is None:
        return then is None and now is None
    if isinstance(then, bool) or isinstance(now, bool):
        return then == now
    try:
        return float(then) == float(now)
    except (TypeError, ValueError):
        return then == now


def _field(name: str, then: Any, now: Any) -> StaleField:
    return StaleField(name, _show(then), _show(now), f"set {name}: {_show(then)}")


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _short(value: Any) -> str:
    return "null" if value is None else str(value)[:12]


def stale_reused_shard(
    recorded: dict[str, Any], generation: dict[str, Any], prompt_params: dict[str, Any] | None
) -> StaleField | None:
    """The first parameter that makes an existing shard stale, from the parameters alone.

    For ``--only-missing-outputs``, before anything runs: it compares the sampling parameters,
    the dtype and the prompt rendering (not the checkpoint or the prompt set, whose datasets
    may be rebuilt by the run itself; aggregation compares those).

    Args:
        recorded: the decoded ``hed.generation`` metadata of one shard file.
        generation: the current ``params:generation``.
        prompt_params: the current ``params:prompts``.

    Returns:
        The first mismatch, or ``None``.
    """
    return stale_field(
        recorded,
        generation=generation,
        prompt_params=prompt_params,
        checkpoint=None,
        prompt_ids=None,
    )
