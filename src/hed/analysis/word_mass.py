"""How much probability sits on each word (and category) at a step's high-entropy positions.

Over the high-entropy tokens of a step with a non-empty word:

* ``count`` — tokens with that word; ``count_share`` = count ÷ Σ count.
* ``sampled_prob_sum`` — Σ ``prob`` (the probability of the sampled token) of those tokens;
  ``sampled_prob_share`` = ÷ Σ over all words (Figure 3's bar height).
* ``topk_mass`` — every high-entropy position spreads its recorded top-k probabilities over
  the candidates' words: the candidate that is the sampled token gets the token's word in
  context, any other candidate the word of its own text
  (:func:`hed.analysis.step_merge.first_sampled_words`); candidates never sampled in the step (no
  known text) or with an empty word are left out; ``topk_mass_share`` = ÷ Σ over all words.

Each share sums to 1 over a step's rows. Words only seen as candidates have count 0. The
category table sums the word table per category (every lexicon category and ``other``) over
the same denominators. Probabilities are those of softmax(z / T) recorded at generation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from hed.core.lexicon import Lexicon
from hed.core.thresholds import EntropyThreshold
from hed.records.arrow_stream import record_batches


def token_probability_mass(
    selection: EntropyThreshold,
    high_entropy_positions: ds.Dataset,
    candidate_words: pd.DataFrame,
    lexicon: Lexicon,
) -> pd.DataFrame:
    """The per-word table of a step (``token_probability_mass_high_entropy``).

    Args:
        selection: the step's threshold (its run and step label the rows).
        high_entropy_positions: the step's high-entropy rows (HIGH_ENTROPY_POSITION_SCHEMA).
        candidate_words: token_id → word (:func:`hed.analysis.step_merge.first_sampled_words`).
        lexicon: word → category.

    Returns:
        run, step, word, category, count, count_share, sampled_prob_sum, sampled_prob_share,
        topk_mass, topk_mass_share; sorted by sampled_prob_sum, descending, then topk_mass,
        descending, then word.
    """
    index: dict[str, int] = {}
    candidate_index = _candidate_word_index(candidate_words, index)
    count = np.zeros(0)
    prob_sum = np.zeros(0)
    topk_mass = np.zeros(0)
    columns = ["token_id", "word", "prob", "topk_token_ids", "topk_probs"]
    for batch in record_batches(high_entropy_positions, columns):
        word_idx = _word_indices(batch.column("word"), index)
        size = len(index)
        count = _grow(count, size) + np.bincount(word_idx, minlength=size)
        prob = batch.column("prob").to_numpy(zero_copy_only=False).astype(np.float64)
        prob_sum = _grow(prob_sum, size) + np.bincount(word_idx, weights=prob, minlength=size)
        cand, mass = _candidate_indices(batch, word_idx, candidate_index)
        topk_mass = _grow(topk_mass, size) + np.bincount(cand, weights=mass, minlength=size)
    words = np.array(list(index), dtype=object)
    size = len(words)
    count, prob_sum, topk_mass = _grow(count, size), _grow(prob_sum, size), _grow(topk_mass, size)
    keep = (words != "") & ((count > 0) | (topk_mass > 0))
    frame = pd.DataFrame(
        {
            "run": selection.run,
            "step": selection.step,
            "word": words[keep].astype(str),
            "category": [lexicon.category_of(w) for w in words[keep]],
            "count": count[keep].astype(np.int64),
            "count_share": _share(count[keep]),
            "sampled_prob_sum": prob_sum[keep],
            "sampled_prob_share": _share(prob_sum[keep]),
            "topk_mass": topk_mass[keep],
            "topk_mass_share": _share(topk_mass[keep]),
        }
    )
    return frame.sort_values(
        ["sampled_prob_sum", "topk_mass", "word"], ascending=[False, False, True], ignore_index=True
    )


def category_probability_mass(
    token_mass: pd.DataFrame, selection: EntropyThreshold, lexicon: Lexicon
) -> pd.DataFrame:
    """The per-word measures of :func:`token_probability_mass` summed per category.

    Returns:
        run, step, category, count, count_share, sampled_prob_sum, sampled_prob_share,
        topk_mass, topk_mass_share; categories in lexicon order, ``other`` last (a category
        with no token has zeros, and NaN shares when the step has none at all).
    """
    sums = token_mass.groupby("category")[["count", "sampled_prob_sum", "topk_mass"]].sum()
    sums = sums.reindex(list(lexicon.categories), fill_value=0)
    return pd.DataFrame(
        {
            "run": selection.run,
            "step": selection.step,
            "category": list(lexicon.categories),
            "count": sums["count"].to_numpy().astype(np.int64),
            "count_share": _share(sums["count"].to_numpy()),
            "sampled_prob_sum": sums["sampled_prob_sum"].to_numpy(dtype=np.float64),
            "sampled_prob_share": _share(sums["sampled_prob_sum"].to_numpy(dtype=np.float64)),
            "topk_mass": sums["topk_mass"].to_numpy(dtype=np.float64),
            "topk_mass_share": _share(sums["topk_mass"].to_numpy(dtype=np.float64)),
        }
    )


def _candidate_word_index(candidate_words: pd.DataFrame, index: dict[str, int]) -> np.ndarray:
    """token_id → index of its word in ``index`` (grown), −1 for unknown ids and empty words."""
    if candidate_words.empty:
        return np.full(0, -1, dtype=np.int64)
    ids = candidate_words["token_id"].to_numpy().astype(np.int64)
    lookup = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    words = candidate_words["word"].fillna("").astype(str).tolist()
    for token_id, word in zip(ids.tolist(), words, strict=True):
        if word:
            lookup[token_id] = index.setdefault(word, len(index))
    return lookup


def _candidate_indices(
    batch: pa.RecordBatch, word_idx: np.ndarray, candidate_index: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Word index and probability of every top-k candidate of a batch with a known word.

    The candidate that is the sampled token itself takes the sampled token's word (its word
    in context, e.g. ``alternatively`` for ``"Altern"``); the others their own word.
    """
    lists = batch.column("topk_token_ids")
    ids = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    mass = (
        pc.list_flatten(batch.column("topk_probs"))
        .to_numpy(zero_copy_only=False)
        .astype(np.float64)
    )
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    row = np.repeat(np.arange(len(lengths)), lengths)
    cand = np.full(ids.size, -1, dtype=np.int64)
    known = (ids >= 0) & (ids < candidate_index.size)
    cand[known] = candidate_index[ids[known]]
    sampled = ids == batch.column("token_id").to_numpy(zero_copy_only=False)[row]
    cand[sampled] = word_idx[row[sampled]]
    keep = cand >= 0
    return cand[keep], mass[keep]


def _word_indices(words: pa.Array | pa.ChunkedArray, index: dict[str, int]) -> np.ndarray:
    """Index in ``index`` (grown) of every word of a batch."""
    encoded = pc.dictionary_encode(words)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    local = np.array(
        [index.setdefault(w or "", len(index)) for w in encoded.dictionary.to_pylist()],
        dtype=np.int64,
    )
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    return local[codes] if local.size else np.zeros(len(words), dtype=np.int64)


def _grow(values: np.ndarray, size: int) -> np.ndarray:
    return np.concatenate([values, np.zeros(size - values.size)]) if values.size < size else values


def _share(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    total = values.sum()
    return values / total if total > 0 else np.full(values.size, np.nan)
