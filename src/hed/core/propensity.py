"""Exact hedging propensity: the probability of starting a lexicon word at a position.

Figure 2 counts the anthropomorphic words that were *sampled* at high-entropy positions, a
noisy measure of how strongly the model leans towards "wait", "perhaps", "hmm". The full
distribution softmax(z/T) at every position gives the same propensity without sampling noise:

    mass_c = Σ_{i ∈ S_c} p_i,   p = softmax(z / T) over the whole vocabulary,

where S_c is the set of *word-start token ids* of category c: the ids whose text, normalised as
HED's words are (docs/aggregation.md: the first letter run, lower-cased), is non-empty and a
prefix of a lexicon word of category c (``" Wait"`` → ``"wait"``; ``" Per"`` → ``"per"``, a
prefix of ``"perhaps"``). It is an **upper bound** of the probability of starting such a word:
a word-start token such as ``" per"`` also begins ``"percent"``, and a token without a leading
space may continue a word (``"al" + "so"``). The set is built once per tokenizer and lexicon.
Computed as exp(logsumexp(z[S_c] / T) − log Z) in float32: O(B·|S_c|) per decode step, with
|S_c| a few hundred ids at most.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from hed.core.words import is_letter

#: The categories whose mass the token records carry, as columns ``<category>_mass``.
MASS_CATEGORIES = ("anthropomorphic", "reasoning")


def first_letter_run(text: str) -> str:
    """The first maximal letter run of ``text``, lower-cased ("" when it has no letter).

    The token-level form of HED's word rule (:mod:`hed.core.words`): ``" Wait,"`` → ``"wait"``.
    """
    start = next((i for i, ch in enumerate(text) if is_letter(ch)), None)
    if start is None:
        return ""
    end = start
    while end < len(text) and is_letter(text[end]):
        end += 1
    return text[start:end].lower()


def word_start_ids(
    vocabulary: Sequence[str], words_by_category: Mapping[str, Sequence[str]]
) -> dict[str, np.ndarray]:
    """Token ids whose normalised text is a non-empty prefix of a word of each category.

    Args:
        vocabulary: the text of every token id (index = id), e.g. each id decoded alone.
        words_by_category: {category: lexicon words (lower-case)}.

    Returns:
        {category: sorted int64 ids}, one entry per category of ``words_by_category``.
    """
    prefixes = {
        category: {w[:n] for w in words for n in range(1, len(w) + 1)}
        for category, words in words_by_category.items()
    }
    ids: dict[str, list[int]] = {category: [] for category in words_by_category}
    for token_id, text in enumerate(vocabulary):
        run = first_letter_run(text)
        if not run:
            continue
        for category, allowed in prefixes.items():
            if run in allowed:
                ids[category].append(token_id)
    return {c: np.asarray(v, dtype=np.int64) for c, v in ids.items()}


def tokenizer_word_start_ids(tokenizer, lexicon) -> dict[str, np.ndarray]:
    """:func:`word_start_ids` for a transformers tokenizer and a :class:`hed.core.lexicon.Lexicon`
    (each id decoded alone; special ids left out), for :data:`MASS_CATEGORIES`."""
    vocabulary = tokenizer.batch_decode(
        [[i] for i in range(len(tokenizer))], clean_up_tokenization_spaces=False
    )
    special = set(tokenizer.all_special_ids)
    vocabulary = ["" if i in special else t for i, t in enumerate(vocabulary)]
    words = {
        category: [
            w
            for w, c in zip(lexicon.words, lexicon.word_categories, strict=True)
            if lexicon.categories[c] == category
        ]
        for category in MASS_CATEGORIES
    }
    return word_start_ids(vocabulary, words)


def category_mass(
    logits: torch.Tensor, log_z: torch.Tensor, ids: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Σ_{i ∈ ids} softmax(z / T)_i per row, exactly, in float32.

    Args:
        logits: (B, V) raw logits z.
        log_z: (B,) logsumexp(z / T) (as :func:`hed.core.entropy.token_distribution_stats`
            returns it).
        ids: (n,) int64 token ids on the logits' device.
        temperature: T > 0.

    Returns:
        (B,) float32 in [0, 1]; 0 when ``ids`` is empty.
    """
    if ids.numel() == 0:
        return torch.zeros(logits.shape[0], dtype=torch.float32, device=logits.device)
    chosen = logits.index_select(1, ids).float() / temperature  # (B, n)
    return torch.exp(torch.logsumexp(chosen, dim=1) - log_z.float()).clamp_(max=1.0)
