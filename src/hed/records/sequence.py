"""One generated response and its per-token records, as every backend yields it.

:class:`GeneratedSequence` is what a decoding backend (:mod:`hed.decode.backend`) produces
and what a crash-safe shard keeps on disk (:mod:`hed.records.shard_parts`); it lives in
``records`` so that the shard files can be read back without importing a backend (and
torch). Backends import it through :mod:`hed.decode.types`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: ``finish_reason`` of a response ended by one of the checkpoint's EOS ids.
FINISH_EOS = "eos"
#: ``finish_reason`` of a response cut at ``max_new_tokens``.
FINISH_LENGTH = "length"

#: The per-token word-start mass columns (:mod:`hed.core.propensity`): float32, null in shards
#: generated before they existed.
MASS_COLUMNS = ("anthropomorphic_mass", "reasoning_mass")


@dataclass
class GeneratedSequence:
    """One response and its per-token records (positions 0..n-1, EOS included).

    Attributes:
        prompt_index, prompt_id, sample_index: which prompt and which of its samples.
        token_ids: (n,) int32 sampled tokens.
        entropy: (n,) float32 entropy of softmax(z / T) in nats.
        logprob: (n,) float32 log-probability of the sampled token, same distribution.
        topk_token_ids: (n, k) int32 most probable tokens, most probable first.
        topk_probs: (n, k) float32 their probabilities.
        token_texts: n strings, the exact text each token adds (:mod:`hed.core.token_text`).
        response_text: ``"".join(token_texts)``, i.e. the decode with special tokens kept.
        finish_reason: ``"eos"`` (ended by an EOS id) or ``"length"`` (max_new_tokens).
        anthropomorphic_mass, reasoning_mass: (n,) float32 Σ softmax(z / T) over the lexicon
            category's word-start ids (:mod:`hed.core.propensity`); None when not recorded.
    """

    prompt_index: int
    prompt_id: str
    sample_index: int
    token_ids: np.ndarray
    entropy: np.ndarray
    logprob: np.ndarray
    topk_token_ids: np.ndarray
    topk_probs: np.ndarray
    token_texts: list[str]
    response_text: str
    finish_reason: str
    anthropomorphic_mass: np.ndarray | None = None
    reasoning_mass: np.ndarray | None = None

    @property
    def n_tokens(self) -> int:
        """Number of recorded positions."""
        return len(self.token_ids)


__all__ = ["FINISH_EOS", "FINISH_LENGTH", "MASS_COLUMNS", "GeneratedSequence"]
