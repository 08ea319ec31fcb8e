"""Exact hedging propensity (hed.core.propensity): word-start ids and the mass of their
probabilities against a float64 numpy softmax."""

from __future__ import annotations

import numpy as np
import torch

from hed.core.propensity import category_mass, first_letter_run, word_start_ids

VOCAB = [
    " Wait",
    "wait",
    " wa",
    " Per",
    "haps",
    " perhaps",
    " so",
    "So,",
    " 42",
    "",
    " hmm",
    " the",
    " percent",
    "\n",
    " Hmm...",
]
WORDS = {"anthropomorphic": ["wait", "perhaps", "hmm"], "reasoning": ["so", "therefore"]}


def test_first_letter_run_normalises_as_hed_words():
    assert first_letter_run(" Wait,") == "wait"
    assert first_letter_run(" 42") == ""
    assert first_letter_run("...Hmm!") == "hmm"


def test_word_start_ids_are_the_prefixes_of_lexicon_words():
    ids = word_start_ids(VOCAB, WORDS)
    # " percent" → "percent" is not a prefix of "perhaps"; " Per" → "per" is (an upper bound)
    assert ids["anthropomorphic"].tolist() == [0, 1, 2, 3, 5, 10, 14]
    # " the" → "the" begins "therefore": counted, which is why the mass is an upper bound
    assert ids["reasoning"].tolist() == [6, 7, 11]


def test_mass_equals_a_float64_softmax_sum():
    rng = np.random.default_rng(0)
    z = rng.normal(0, 3, (4, len(VOCAB))).astype(np.float32)
    z[1, 3] = -np.inf  # a masked logit contributes 0
    ids = word_start_ids(VOCAB, WORDS)["anthropomorphic"]
    for temperature in (1.0, 0.6):
        scaled = z.astype(np.float64) / temperature
        p = np.exp(scaled - np.logaddexp.reduce(scaled, axis=1, keepdims=True))
        logits = torch.from_numpy(z)
        log_z = torch.logsumexp(logits / temperature, dim=1)
        got = category_mass(logits, log_z, torch.from_numpy(ids), temperature)
        assert got.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), p[:, ids].sum(axis=1), rtol=1e-5, atol=1e-7)
    log_z = torch.logsumexp(logits, dim=1)  # T = 1
    empty = category_mass(logits, log_z, torch.empty(0, dtype=torch.int64), 1.0)
    assert empty.tolist() == [0.0] * 4
    whole = category_mass(logits, log_z, torch.arange(len(VOCAB)), 1.0)
    np.testing.assert_allclose(whole.numpy(), 1.0, rtol=1e-6)
