"""hed.core.token_text on the real SmolLM2 byte-level BPE tokenizer (DESIGN.md §5.3)."""

from __future__ import annotations

import random
import time

import pytest

from hed.core import token_text as token_text_module
from hed.core.token_text import (
    BLOCK_TOKENS,
    DECODE_KWARGS,
    REPLACEMENT_CHAR,
    decode_text,
    token_texts,
    token_texts_batch,
)

TEXTS = [
    "Alternatively, let's check: 12345 + 678 = 13023.",
    "Emoji 😀🧑‍🚀👍🏽 and flags 🇫🇷 end here",
    "中文测试：等等，也许我们应该重新考虑。日本語もね",
    "Accents: naïve café, Straße, Ærøskøbing, œuvre, São Paulo",
    "Math ∑_{i=1}^n i² = n(n+1)/2, √2 ≈ 1.41421356, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "  leading spaces\n\ttabs\r\nand a final newline\n",
    "Wait, wait. Hmm... perhaps the answer is \\boxed{42}.<|im_end|>",
]


@pytest.mark.parametrize("text", TEXTS)
def test_join_equals_decode_without_replacement_chars(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    pieces = token_texts(tokenizer, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tokenizer.decode(ids, **DECODE_KWARGS) == text
    assert not any(REPLACEMENT_CHAR in piece for piece in pieces)


def test_never_raw_vocabulary_strings(tokenizer):
    ids = tokenizer.encode(" wait Alternatively", add_special_tokens=False)
    pieces = token_texts(tokenizer, ids)
    assert pieces[0] == " wait"
    assert "".join(pieces[1:]) == " Alternatively"
    assert not any("Ġ" in piece for piece in pieces)
    assert tokenizer.convert_ids_to_tokens(ids)[0] == "Ġwait"  # what must not leak


def test_mid_character_bytes_go_to_the_completing_token(tokenizer):
    ids = tokenizer.encode("Hello 😀 and 中文", add_special_tokens=False)
    # SmolLM2 splits " 😀" into "Ġ" + 3 emoji bytes, then the last emoji byte.
    alone = [tokenizer.decode([i]) for i in ids]
    assert alone[1].endswith(REPLACEMENT_CHAR) and alone[2] == REPLACEMENT_CHAR
    pieces = token_texts(tokenizer, ids)
    assert pieces[:3] == ["Hello", " ", "😀"]
    assert pieces[3:] == [" and", " ", "中", "文"]


def test_a_character_spread_over_several_tokens(tokenizer):
    ids = tokenizer.encode("x🧑‍🚀", add_special_tokens=False)
    pieces = token_texts(tokenizer, ids)
    assert "".join(pieces) == "x🧑‍🚀"
    assert "" in pieces  # tokens that end mid-character carry nothing
    for piece in pieces:  # every non-empty piece is whole characters
        assert piece.encode("utf-8").decode("utf-8") == piece


def test_response_cut_mid_character_still_joins(tokenizer):
    ids = tokenizer.encode("ok 😀", add_special_tokens=False)[:-1]  # drop the completing token
    pieces = token_texts(tokenizer, ids)
    assert "".join(pieces) == tokenizer.decode(ids) and pieces[-1].endswith(REPLACEMENT_CHAR)


def test_special_tokens_are_kept(tokenizer):
    ids = [*tokenizer.encode("The answer is 4.", add_special_tokens=False), tokenizer.eos_token_id]
    pieces = token_texts(tokenizer, ids)
    assert pieces[-1] == "<|im_end|>"
    assert "".join(pieces) == decode_text(tokenizer, ids) == "The answer is 4.<|im_end|>"


def test_random_id_sequences_join_exactly(tokenizer, caplog):
    rng = random.Random(0)
    sequences = [
        [rng.randrange(len(tokenizer)) for _ in range(rng.randrange(1, 3 * BLOCK_TOKENS))]
        for _ in range(200)
    ]
    # Byte tokens (ids 3..258 hold single bytes in SmolLM2) make many incomplete characters.
    sequences += [[rng.randrange(3, 259) for _ in range(40)] for _ in range(50)]
    for ids, pieces in zip(sequences, token_texts_batch(tokenizer, sequences), strict=True):
        assert len(pieces) == len(ids)
        assert "".join(pieces) == tokenizer.decode(ids, **DECODE_KWARGS)
    assert "not local" not in caplog.text  # the windowed method alone was exact


def test_batch_equals_single_and_handles_empty(tokenizer):
    sequences = [tokenizer.encode(text, add_special_tokens=False) for text in TEXTS] + [[]]
    assert token_texts_batch(tokenizer, sequences) == [
        token_texts(tokenizer, ids) for ids in sequences
    ]
    assert token_texts(tokenizer, []) == []


def test_windowed_method_agrees_with_exact_prefix_method(tokenizer):
    rng = random.Random(1)
    text = " ".join(rng.choice(TEXTS) for _ in range(6))
    ids = tokenizer.encode(text, add_special_tokens=False)
    full = decode_text(tokenizer, ids)
    assert token_texts(tokenizer, ids) == token_text_module._prefix_token_texts(
        tokenizer, ids, full
    )


@pytest.mark.parametrize("windowed", [None, "wrong"], ids=["not-a-prefix", "join-mismatch"])
def test_fallback_when_decoding_is_not_local(tokenizer, monkeypatch, caplog, windowed):
    ids = tokenizer.encode("Alternatively 😀 done", add_special_tokens=False)
    expected = token_texts(tokenizer, ids)
    fake = None if windowed is None else ["x"] * len(ids)
    monkeypatch.setattr(token_text_module, "_texts_from_windows", lambda ids, decoded: fake)
    assert token_texts(tokenizer, ids) == expected  # the exact prefix method
    assert "not local" in caplog.text


def test_long_response_is_fast(tokenizer):
    ids = tokenizer.encode(" ".join(TEXTS) * 200, add_special_tokens=False)[:20_000]
    assert len(ids) == 20_000
    started = time.perf_counter()
    pieces = token_texts(tokenizer, ids)
    elapsed = time.perf_counter() - started
    assert "".join(pieces) == decode_text(tokenizer, ids)
    assert elapsed < 5.0, f"20k tokens took {elapsed:.1f} s"  # O(n²) prefix decoding takes minutes
