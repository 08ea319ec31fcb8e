"""The exact text each generated token adds to its response (docs/aggregation.md).

Contract: for a response's ids, ``"".join(token_texts(tokenizer, ids)) ==
tokenizer.decode(ids, **DECODE_KWARGS)``, where :data:`DECODE_KWARGS` keeps special tokens
(``<|im_end|>`` is part of the text) and turns off ``clean_up_tokenization_spaces`` (a
WordPiece-era rewrite that is not local to a token). A byte-level BPE token can end in the
middle of a UTF-8 character (an emoji is often two or three tokens); decoding it alone gives
U+FFFD. Such a token gets ``""`` and the bytes are attributed to the token that completes the
character, so no fragment of a replacement character appears where the response has none.
The raw vocabulary strings (``Ġwait``, ``▁wait``) are never used.

Method (after vLLM's incremental detokenizer): the tokens of a response are taken in blocks
of :data:`BLOCK_TOKENS`; each block is decoded together with up to :data:`CONTEXT_TOKENS`
preceding tokens as growing windows ``ids[s:b]``, ``ids[s:b+1]``, ... (one batched decode
call for all responses). Token ``i`` adds ``stable(window ending at i)`` minus
``stable(window ending at i-1)``, where ``stable`` drops trailing U+FFFD (a character still
incomplete; the last token of a response keeps them, so a response cut mid-character still
joins exactly). That is ``O(n · (CONTEXT_TOKENS + BLOCK_TOKENS))`` work instead of the
``O(n²)`` of decoding every prefix. The join is then checked against the full decode; a
tokenizer whose decoding is not local (the check fails) falls back to the exact prefix method.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from transformers.tokenization_utils_tokenizers import TokenizersBackend

logger = logging.getLogger(__name__)

#: Keyword arguments of every ``tokenizer.decode`` HED makes for response text.
DECODE_KWARGS = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}

#: Tokens of context decoded before each block. A character still incomplete when a block
#: starts began at most 3 bytes (so at most 3 tokens) earlier; the context holds those bytes,
#: so the block's first token completes it exactly as in the full decode. 8 leaves a margin.
CONTEXT_TOKENS = 8

#: Tokens per block: windows of one block share their start, so each token costs one decode.
BLOCK_TOKENS = 32

REPLACEMENT_CHAR = "\ufffd"


def token_texts(tokenizer, ids: Sequence[int]) -> list[str]:
    """Return the exact text contribution of each token of one response.

    Args:
        tokenizer: a transformers tokenizer.
        ids: the response's token ids (no prompt), e.g. ``[19556, 40303, 218]``.

    Returns:
        One string per token; ``"".join(result) == decode_text(tokenizer, ids)``.
    """
    return token_texts_batch(tokenizer, [ids])[0]


def token_texts_batch(tokenizer, sequences: Sequence[Sequence[int]]) -> list[list[str]]:
    """:func:`token_texts` for several responses, with one batched decode call.

    Args:
        tokenizer: a transformers tokenizer.
        sequences: token ids of each response.

    Returns:
        Per response, one string per token.
    """
    sequences = [[int(i) for i in ids] for ids in sequences]
    per_sequence = [_block_windows(ids) for ids in sequences]
    decoded = _decode_many(tokenizer, [w for windows in per_sequence for w in windows])
    results, offset = [], 0
    for ids, windows in zip(sequences, per_sequence, strict=True):
        texts = _texts_from_windows(ids, decoded[offset : offset + len(windows)])
        offset += len(windows)
        full = decode_text(tokenizer, ids)
        if texts is None or "".join(texts) != full:
            logger.warning(
                "token_text: windowed decoding of %s is not local; using the exact prefix "
                "method for a response of %d tokens",
                type(tokenizer).__name__,
                len(ids),
            )
            texts = _prefix_token_texts(tokenizer, ids, full)
        results.append(texts)
    return results


def decode_text(tokenizer, ids: Sequence[int]) -> str:
    """Decode a response exactly as :func:`token_texts` joins it (:data:`DECODE_KWARGS`)."""
    return tokenizer.decode(list(ids), **DECODE_KWARGS)


def _block_windows(ids: list[int]) -> list[list[int]]:
    """Windows to decode for one response: per block, ``ids[s:b]``, ``ids[s:b+1]``, ..."""
    windows = []
    for block_start in range(0, len(ids), BLOCK_TOKENS):
        start = max(0, block_start - CONTEXT_TOKENS)
        block_end = min(block_start + BLOCK_TOKENS, len(ids))
        windows.extend(ids[start:end] for end in range(block_start, block_end + 1))
    return windows


def _texts_from_windows(ids: list[int], decoded: list[str]) -> list[str] | None:
    """Differences of consecutive stable window texts; None when one is not a prefix.

    ``decoded`` holds the texts of :func:`_block_windows` ``(ids)``, in order.
    """
    texts: list[str] = []
    window = 0
    for block_start in range(0, len(ids), BLOCK_TOKENS):
        block_end = min(block_start + BLOCK_TOKENS, len(ids))
        previous = decoded[window].rstrip(REPLACEMENT_CHAR)  # context before the block
        window += 1
        for i in range(block_start, block_end):
            current = decoded[window]
            window += 1
            if i < len(ids) - 1:
                current = current.rstrip(REPLACEMENT_CHAR)
            if not current.startswith(previous):
                return None
            texts.append(current[len(previous) :])
            previous = current
    return texts


def _prefix_token_texts(tokenizer, ids: list[int], full: str) -> list[str]:
    """Exact but O(n²) attribution: decode every prefix, align it with the full text.

    Token ``i`` ends at ``c_i = max(c_{i-1}, lcp(stable(decode(ids[:i+1])), full))`` and the
    last token ends at ``len(full)``, so the pieces always join to ``full``.
    """
    prefixes = _decode_many(tokenizer, [ids[: i + 1] for i in range(len(ids))])
    texts, end = [], 0
    for i, prefix in enumerate(prefixes):
        if i == len(ids) - 1:
            new_end = len(full)
        else:
            stable = prefix.rstrip(REPLACEMENT_CHAR)
            common = _common_prefix_length(stable, full)
            new_end = max(end, common)
        texts.append(full[end:new_end])
        end = new_end
    return texts


def _common_prefix_length(a: str, b: str) -> int:
    """Length of the longest common prefix of two strings."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid
    return low


def _decode_many(tokenizer, windows: list[list[int]]) -> list[str]:
    """Decode many id lists with :data:`DECODE_KWARGS`, in one Rust call when possible.

    transformers 5's ``batch_decode`` loops in Python; a ``TokenizersBackend`` whose
    ``_decode`` is the stock one is exactly ``backend_tokenizer.decode`` when cleanup is off,
    and ``decode_batch`` runs that in parallel.
    """
    if not windows:
        return []
    if _has_stock_fast_decode(tokenizer):
        return tokenizer.backend_tokenizer.decode_batch(
            windows, skip_special_tokens=DECODE_KWARGS["skip_special_tokens"]
        )
    return tokenizer.batch_decode(windows, **DECODE_KWARGS)


def _has_stock_fast_decode(tokenizer) -> bool:
    """Whether ``tokenizer.decode`` is the stock Rust-backed one (no subclass override)."""
    return (
        isinstance(tokenizer, TokenizersBackend)
        and type(tokenizer)._decode is TokenizersBackend._decode
    )
