"""The word of each token (DESIGN.md §5.3): letter runs of the decoded response, CJK rule."""

from __future__ import annotations

import unicodedata

import numpy as np
import pyarrow as pa
import pytest

from hed.core.words import assign_words, is_letter, is_unspaced, token_own_words


def words(tokens, starts=None, special=None, dictionary=()):
    starts = np.array(starts if starts is not None else [i == 0 for i in range(len(tokens))])
    special = None if special is None else np.array(special, dtype=bool)
    return assign_words(pa.array(tokens, pa.string()), starts, special, dictionary).to_pylist()


def test_word_split_over_two_tokens():
    assert words(["Altern", "atively", ","]) == ["alternatively", "alternatively", ""]
    assert words([" Al", "tern", "atively", " we"]) == ["alternatively"] * 3 + ["we"]


def test_punctuation_and_tokens_without_letters():
    assert words([" Wait", ","]) == ["wait", ""]
    assert words([" Wait,"]) == ["wait"]
    assert words([" 42", "\n\n", "$", ""]) == ["", "", "", ""]


def test_first_letter_run_of_a_token():
    assert words(["a.b"]) == ["a"]
    assert words([",\n\nSo", " we"]) == ["so", "we"]
    assert words(["x2y"]) == ["x"]
    assert words(["don't"]) == ["don"]


def test_runs_stop_at_response_and_special_tokens():
    assert words([" so", "Wait"], starts=[1, 1]) == ["so", "wait"]
    assert words([" so", "Wait"], starts=[1, 0]) == ["sowait", "sowait"]
    assert words(["end", "<|im_end|>", "start"], special=[0, 1, 0]) == ["end", "", "start"]


def test_non_ascii_letters():
    assert words([" Größe", " café", " naïve", " ΑΒΓ", "δ", "😀"]) == [
        "größe",
        "café",
        "naïve",
        "αβγδ",
        "αβγδ",
        "",
    ]
    decomposed = unicodedata.normalize("NFD", " café")  # e + combining accent stays in the word
    assert words([decomposed]) == [unicodedata.normalize("NFD", "café")]


def test_unspaced_scripts_use_dictionary_words():
    lexicon = ["等等", "嗯", "也许"]
    tokens = ["嗯", "，", "等", "等", "，我", "想", "也许", "吧"]
    assert words(tokens, dictionary=lexicon) == ["嗯", "", "等等", "等等", "我", "想", "也许", "吧"]
    # inside one clause without punctuation the longest dictionary word overlapping a token wins
    assert words(["嗯等", "等我", "想也", "许吧"], dictionary=lexicon) == [
        "等等",
        "等等",
        "也许",
        "也许",
    ]
    # without dictionary words a token keeps its own letters of the clause
    assert words(["嗯等", "等我"]) == ["嗯等", "等我"]
    # a switch between Latin and Han letters splits the run
    assert words(["OK", "好的"]) == ["ok", "好的"]
    assert words(["ちょっと", "待って"], dictionary=["待って"]) == ["ちょっと", "待って"]


def test_chunk_slices_and_chunked_arrays():
    array = pa.array(["x", " Wait", ",", " so"])
    assert assign_words(array.slice(1), np.array([True, False, False])).to_pylist() == [
        "wait",
        "",
        "so",
    ]
    chunked = pa.chunked_array([["Altern"], ["atively", " now"]])
    assert assign_words(chunked, np.array([True, False, False])).to_pylist() == [
        "alternatively"
    ] * 2 + ["now"]


def test_token_own_words():
    assert token_own_words(pa.array([" Wait", "atively", "12", "", " So,"])).to_pylist() == [
        "wait",
        "atively",
        "",
        "",
        "so",
    ]


def test_character_classes():
    assert is_letter("é") and is_letter("\u0301") and not is_letter("1") and not is_letter("_")
    assert is_unspaced("等") and is_unspaced("ち") and is_unspaced("ก") and not is_unspaced("a")


def _reference_words(tokens: list[str], starts: list[bool]) -> list[str]:
    """Per-character reference of the rule (no dictionary words)."""
    out = []
    seq_start = 0
    for i, token in enumerate(tokens):
        if starts[i]:
            seq_start = i
        text = "".join(tokens[seq_start:])
        end_of_response = next((j for j in range(i + 1, len(tokens)) if starts[j]), len(tokens))
        text = "".join(tokens[seq_start:end_of_response])
        at = sum(len(t) for t in tokens[seq_start:i])
        span = range(at, at + len(token))
        first = next((k for k in span if is_letter(text[k])), None)
        if first is None:
            out.append("")
            continue
        lo = first
        while (
            lo > 0
            and is_letter(text[lo - 1])
            and is_unspaced(text[lo - 1]) == is_unspaced(text[first])
        ):
            lo -= 1
        hi = first
        while (
            hi < len(text)
            and is_letter(text[hi])
            and is_unspaced(text[hi]) == is_unspaced(text[first])
        ):
            hi += 1
        if is_unspaced(text[first]):
            lo, hi = first, min(hi, at + len(token))
        out.append(text[lo:hi].lower())
    return out


@pytest.mark.parametrize("seed", range(5))
def test_matches_character_reference(seed):
    rng = np.random.default_rng(seed)
    alphabet = [*"abcXYZ  ,.'1é", "等", "ก", "ß", "\u0301", "😀"]
    tokens = ["".join(rng.choice(alphabet, int(rng.integers(0, 4)))) for _ in range(300)]
    starts = (rng.random(300) < 0.1).tolist()
    starts[0] = True
    assert words(tokens, starts=starts) == _reference_words(tokens, starts)
