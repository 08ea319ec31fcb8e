"""Teacher-forced re-scoring of fixed responses by a checkpoint (docs/rescoring.md).

A response ``r = (r_0 … r_{n-1})`` to a prompt ``x = (x_0 … x_{P-1})`` (token ids, the prompt
already chat-templated) is scored in one forward pass over ``x + r[:-1]``: the logits ``z_t``
at input index ``P - 1 + t`` are the model's next-token logits after ``x + r[:t]``, i.e. the
ones a sampler saw when it produced ``r_t``. Per position ``t`` (0-based within the response)
the distribution is ``p = softmax(z_t / T)`` over the *whole* vocabulary (:mod:`hed.core.entropy`)
and HED keeps:

* ``entropy`` = ``-Σ p log p`` in nats (float32, logsumexp form);
* ``logprob`` = ``log p[r_t]`` (natural log, ≤ 0);
* ``rank`` = the number of vocabulary entries with a strictly larger ``z / T`` than ``r_t``'s
  (int32): 0 = the response token is the most probable one; tokens tied with it do not count,
  so ties share the best rank;
* ``topk_token_ids`` / ``topk_probs``: the ``k`` most probable tokens, most probable first
  (``torch.topk`` order; ``k`` = ``top_prob_k``);
* with ``mass_ids`` given, ``mass``: per category the word-start mass
  ``Σ_{i ∈ S_c} p_i`` (:func:`hed.core.propensity.category_mass`), the token records'
  ``anthropomorphic_mass`` / ``reasoning_mass`` of another lexicon without re-sampling
  (:mod:`hed.decode.mass_refresh`).

Memory: the transformer body runs once per batch of responses (``(B, L, H)`` hidden states);
the response positions are then gathered and pushed through the LM head
``chunk_positions`` rows at a time, entropy / logsumexp / top-k / rank computed per chunk in
float32 and only ``O(k)`` numbers per position kept. Nothing of size ``length × vocabulary``
is ever allocated: for a 151,936-token vocabulary and 64-row chunks the float32 temporaries
are about 4 × 64 × 151,936 × 4 B ≈ 156 MB, whatever the response length
(``bench/rescoring.py``), where full logits of one 4,096-token response would take 2.5 GB.

Exactness: in float32 the re-scored values of the checkpoint that generated the responses
equal its decode-time records to ~1e-5 nats (the matmuls reduce in another order for a
``(B, L)`` pass than for one decode step). In bfloat16 the hidden states and logits carry a
bf16 rounding step that depends on the sequence length and batch shape, so a bf16 re-score
differs from bf16 decode-time records by hundredths of a nat on average (SmolLM2-135M,
``bench/rescoring.py``: 0.038 nats mean, 0.32 max; a float32 re-score of bf16 records 0.030
mean, 0.34 max); re-score in float32 (the default) for comparisons between checkpoints.

Models whose causal-LM head post-processes the logits (``final_logit_softcapping``,
``logit_scale``, ``logits_scaling`` in the config) are refused: the chunked head here applies
the output projection only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from hed.core.entropy import (
    DEFAULT_CHUNK_SIZE,
    check_finite_stats,
    scale_logits,
    token_distribution_stats,
    token_logprobs,
)
from hed.core.propensity import category_mass
from hed.decode.types import CONSISTENCY_TOLERANCE_NATS, ResponseToScore  # noqa: F401 - re-exported
from hed.errors import CheckpointError, InputDataError

#: Config attributes of heads that transform the logits after the output projection.
_LOGIT_POSTPROCESSING = ("final_logit_softcapping", "logit_scale", "logits_scaling")


@dataclass
class ScoredResponse:
    """Teacher-forced scores of one response, positions ``0 … n-1``.

    Attributes:
        prompt_index, sample_index: the response's key.
        token_ids: ``(n,)`` int32 the response tokens.
        entropy: ``(n,)`` float32 entropy of ``softmax(z / T)`` in nats.
        logprob: ``(n,)`` float32 log-probability of the response token (nats, ≤ 0).
        rank: ``(n,)`` int32 entries with a strictly larger probability (0 = most probable).
        topk_token_ids: ``(n, k)`` int32 most probable tokens, most probable first.
        topk_probs: ``(n, k)`` float32 their probabilities.
        mass: ``{category: (n,) float32}`` word-start mass per position (only when
            :func:`score_responses` was given ``mass_ids``).
    """

    prompt_index: int
    sample_index: int
    token_ids: np.ndarray
    entropy: np.ndarray
    logprob: np.ndarray
    rank: np.ndarray
    topk_token_ids: np.ndarray
    topk_probs: np.ndarray
    mass: dict[str, np.ndarray] = field(default_factory=dict)


def check_plain_lm_head(model) -> None:
    """Refuse models whose head transforms logits after the output projection.

    Raises:
        CheckpointError: the config sets ``final_logit_softcapping``, ``logit_scale`` or
            ``logits_scaling`` (Gemma 2, Cohere, Granite), which the chunked head omits.
    """
    config = getattr(model, "config", None)
    for name in _LOGIT_POSTPROCESSING:
        value = getattr(config, name, None)
        if value not in (None, 1, 1.0):
            raise CheckpointError(
                f"checkpoint config sets {name} = {value}: HED's chunked re-scoring applies the "
                "output projection only; re-score this model family with generation instead"
            )


def score_responses(
    model,
    responses: Sequence[ResponseToScore],
    *,
    temperature: float = 1.0,
    top_prob_k: int = 5,
    batch_size: int = 4,
    chunk_positions: int = DEFAULT_CHUNK_SIZE,
    pad_token_id: int = 0,
    mass_ids: Mapping[str, np.ndarray] | None = None,
) -> Iterator[ScoredResponse]:
    """Score ``responses`` teacher-forced; yield one :class:`ScoredResponse` each, in order.

    ``batch_size`` responses share a forward pass, right-padded (causal attention: a real
    position never sees the padding after it; position ids start at 0 in every row, as in
    left-padded generation with an attention mask).

    Args:
        model: a transformers causal LM in eval mode (``model.base_model`` is the body,
            ``model.get_output_embeddings()`` the output projection).
        responses: the pairs to score.
        temperature: ``T > 0`` of ``softmax(z / T)``.
        top_prob_k: ``k`` of the top-k columns.
        batch_size: responses per forward pass.
        chunk_positions: positions per LM-head chunk (bounds the ``(chunk, V)`` temporaries).
        pad_token_id: id written into padding (masked, never scored).
        mass_ids: ``{category: word-start token ids}``
            (:func:`hed.core.propensity.tokenizer_word_start_ids`); None: no ``mass``.

    Yields:
        :class:`ScoredResponse` per response, in the order given.

    Raises:
        InputDataError: an empty prompt, or a token id outside the model's vocabulary.
        NonFiniteLogitsError: the model produced NaN / infinite logits.
        CheckpointError: see :func:`check_plain_lm_head`.
    """
    if batch_size < 1 or chunk_positions < 1:
        raise ValueError("batch_size and chunk_positions must be ≥ 1")
    check_plain_lm_head(model)
    head = model.get_output_embeddings()
    body = model.base_model
    vocab = int(head.weight.shape[0])
    device = head.weight.device
    for start in range(0, len(responses), batch_size):
        batch = list(responses[start : start + batch_size])
        for item in batch:
            _check_ids(item, vocab)
        yield from _score_batch(
            body,
            head,
            batch,
            temperature=temperature,
            top_prob_k=top_prob_k,
            chunk_positions=chunk_positions,
            pad_token_id=pad_token_id,
            device=device,
            mass_ids={
                name: torch.as_tensor(np.asarray(ids, dtype=np.int64), device=device)
                for name, ids in (mass_ids or {}).items()
            },
        )


def _check_ids(item: ResponseToScore, vocab: int) -> None:
    where = f"prompt_index {item.prompt_index}, sample_index {item.sample_index}"
    if len(item.prompt_ids) == 0:
        raise InputDataError(f"re-scoring {where}: the prompt has no tokens")
    for name, given in (("prompt", item.prompt_ids), ("response", item.response_ids)):
        ids = np.asarray(given)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise InputDataError(
                f"re-scoring {where}: {name} token id {int(ids.max())} is outside the "
                f"checkpoint's vocabulary of {vocab}; the reference responses come from another "
                "tokenizer (re-score with checkpoints of the same base model)"
            )


def _score_batch(
    body,
    head,
    batch: list[ResponseToScore],
    *,
    temperature: float,
    top_prob_k: int,
    chunk_positions: int,
    pad_token_id: int,
    device: torch.device,
    mass_ids: Mapping[str, torch.Tensor],
) -> list[ScoredResponse]:
    """Scores of one batch (see :func:`score_responses`)."""
    inputs = [list(item.prompt_ids) + [int(t) for t in item.response_ids[:-1]] for item in batch]
    width = max(len(ids) for ids in inputs)
    input_ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, ids in enumerate(inputs):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    rows, positions = [], []
    for row, item in enumerate(batch):
        first = len(item.prompt_ids) - 1  # the logits after the prompt predict r_0
        n = len(item.response_ids)
        rows.append(np.full(n, row))
        positions.append(np.arange(first, first + n))
    row_index = torch.from_numpy(np.concatenate(rows)).to(device)
    position_index = torch.from_numpy(np.concatenate(positions)).to(device)
    targets = torch.from_numpy(
        np.concatenate([np.asarray(item.response_ids, dtype=np.int64) for item in batch])
    ).to(device)
    with torch.inference_mode():
        # without padding the mask is all ones: leave it out so attention can take its
        # causal fast path instead of materialising a (B, 1, L, L) mask
        padded = bool((attention_mask == 0).any())
        hidden = body(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device) if padded else None,
            use_cache=False,
        ).last_hidden_state  # (B, L, H)
        picked = hidden[row_index, position_index]  # (M, H): only the response positions
        del hidden
        # results go into buffers allocated before the loop: small tensors kept alive between
        # the (chunk, V) temporaries would pin glibc's heap and make RSS grow chunk by chunk
        m = int(targets.shape[0])
        k = min(top_prob_k, int(head.weight.shape[0]))
        host = {
            "entropy": torch.empty(m, dtype=torch.float32, device=device),
            "logprob": torch.empty(m, dtype=torch.float32, device=device),
            "rank": torch.empty(m, dtype=torch.int32, device=device),
            "topk_ids": torch.empty((m, k), dtype=torch.int32, device=device),
            "topk_probs": torch.empty((m, k), dtype=torch.float32, device=device),
            **{f"mass:{n}": torch.empty(m, dtype=torch.float32, device=device) for n in mass_ids},
        }
        for begin in range(0, m, chunk_positions):
            rows_ = slice(begin, min(begin + chunk_positions, m))
            h, target = picked[rows_], targets[rows_]
            logits = head(h)  # (c, V) in the model's dtype
            stats = token_distribution_stats(
                logits, temperature, top_prob_k, chunk_size=chunk_positions, check_finite=False
            )
            check_finite_stats(stats.entropy, stats.log_z, where="while re-scoring")
            host["entropy"][rows_] = stats.entropy
            host["logprob"][rows_] = token_logprobs(logits, target, stats.log_z, temperature)
            host["rank"][rows_] = token_ranks(logits, target, temperature)
            host["topk_ids"][rows_] = stats.topk_ids
            host["topk_probs"][rows_] = stats.topk_probs
            for name, ids in mass_ids.items():
                host[f"mass:{name}"][rows_] = category_mass(logits, stats.log_z, ids, temperature)
            del logits, stats
        host = {name: values.cpu().numpy() for name, values in host.items()}
    scored, offset = [], 0
    for item in batch:
        n = len(item.response_ids)
        cut = slice(offset, offset + n)
        offset += n
        scored.append(
            ScoredResponse(
                prompt_index=int(item.prompt_index),
                sample_index=int(item.sample_index),
                token_ids=np.asarray(item.response_ids, dtype=np.int32),
                entropy=_part(host["entropy"], cut, np.float32),
                logprob=_part(host["logprob"], cut, np.float32),
                rank=_part(host["rank"], cut, np.int32),
                topk_token_ids=_part(host["topk_ids"], cut, np.int32),
                topk_probs=_part(host["topk_probs"], cut, np.float32),
                mass={n: _part(host[f"mass:{n}"], cut, np.float32) for n in mass_ids},
            )
        )
    return scored


def _part(values: np.ndarray, cut: slice, dtype) -> np.ndarray:
    return values[cut].astype(dtype, copy=True)


def token_ranks(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0):
    """Rank of given tokens: how many entries have a strictly larger ``z / T``.

    Args:
        logits: ``(B, V)`` raw logits, any float dtype.
        token_ids: ``(B,)`` integer ids.
        temperature: ``T > 0`` (the same float32 division as :func:`hed.core.entropy.scale_logits`).

    Returns:
        ``(B,)`` int32; 0 = the token is (one of) the most probable.
    """
    scaled = scale_logits(logits, temperature)  # (B, V) float32
    picked = scaled.gather(-1, token_ids.long().unsqueeze(-1))  # (B, 1)
    return (scaled > picked).sum(dim=-1, dtype=torch.int32)


@dataclass(frozen=True)
class Consistency:
    """How far a re-score of a checkpoint's own responses is from its decode-time records.

    Attributes:
        n_positions: positions compared (every position of every response).
        tokens_equal: the two record sets hold the same token ids in the same key order.
        max_abs_entropy_diff, mean_abs_entropy_diff: ``|H_rescored − H_decode|`` in nats.
        max_abs_logprob_diff: ``|log p_rescored − log p_decode|`` of the response token.
        topk_ids_equal_share: fraction of positions with identical top-k id lists.
    """

    n_positions: int
    tokens_equal: bool
    max_abs_entropy_diff: float
    mean_abs_entropy_diff: float
    max_abs_logprob_diff: float
    topk_ids_equal_share: float


def compare_scores(decode: dict[str, np.ndarray], rescored: dict[str, np.ndarray]) -> Consistency:
    """Compare decode-time records with re-scored ones, both in the same key order.

    Args:
        decode, rescored: ``token_id`` ``(N,)``, ``entropy`` ``(N,)``, ``logprob`` ``(N,)``
            and ``topk_token_ids`` ``(N, k)`` arrays (the same ``k``).

    Returns:
        :class:`Consistency` (differences computed in float64).

    Raises:
        InputDataError: the two sets have a different number of positions.
    """
    n = len(decode["token_id"])
    if len(rescored["token_id"]) != n:
        raise InputDataError(
            f"re-scored records have {len(rescored['token_id'])} positions, the decode-time "
            f"records {n}: they are not the same responses"
        )
    if n == 0:
        return Consistency(0, True, 0.0, 0.0, 0.0, 1.0)
    entropy = np.abs(rescored["entropy"].astype(np.float64) - decode["entropy"].astype(np.float64))
    logprob = np.abs(rescored["logprob"].astype(np.float64) - decode["logprob"].astype(np.float64))
    same_topk = np.asarray(rescored["topk_token_ids"]) == np.asarray(decode["topk_token_ids"])
    return Consistency(
        n_positions=n,
        tokens_equal=bool(np.array_equal(rescored["token_id"], decode["token_id"])),
        max_abs_entropy_diff=float(entropy.max()),
        mean_abs_entropy_diff=float(entropy.mean()),
        max_abs_logprob_diff=float(logprob.max()),
        topk_ids_equal_share=float(same_topk.all(axis=1).mean()),
    )
