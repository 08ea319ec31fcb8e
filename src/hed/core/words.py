"""The word each token belongs to (docs/aggregation.md), computed for whole chunks of records.

Rule (docs/aggregation.md):

* The response text is the concatenation of its tokens' ``token_text``.
* A *letter* is a character of Unicode category L* (letters) or M* (combining marks, so
  accents and the vowel signs of Indic and Thai scripts stay inside their word). Digits,
  punctuation, spaces, ``_`` and ``'`` are not letters.
* A *letter run* is a maximal stretch of letters of one response. Runs also break where the
  text switches between a script written without spaces between words
  (:func:`is_unspaced`: Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar) and any other
  script, and the text of special tokens (``<|im_end|>``) counts as no letters.
* A token's ``word`` is the first letter run that overlaps the token, lower-cased
  (``str.lower`` semantics via Arrow's ``utf8_lower``): ``" Wait,"`` → ``"wait"``;
  ``"Altern"`` + ``"atively"`` → ``"alternatively"`` for both tokens; ``"a.b"`` → ``"a"``;
  ``" 42"`` → ``""`` (no letters).
* Scripts without spaces: a run such as ``嗯等等我想一下`` is a clause, not a word. A token
  whose first letter is in such a script gets the longest dictionary word (the lexicon's words
  of that script) occurring inside the run and overlapping the token — ties: the word listed
  first in the lexicon, then the leftmost occurrence; otherwise the token's own letters in
  that run (its part of the run, e.g. ``"我想"``).

The implementation works on the Arrow string buffer of a chunk (the concatenated token texts)
with numpy: per byte a letter flag and run starts; a running count of letters maps each token
start to its first letter and so to its run; the runs' letters, compacted and lower-cased, are
the word strings. Non-ASCII characters are decoded and classified once per distinct code point
(a table of the Basic Multilingual Plane is built on first use). Cost: O(bytes) numpy work per
chunk (about 0.15–0.2 µs per token), no Python loop per token; the dictionary-word matching for
unspaced scripts loops over the occurrences of those words only.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Unicode name prefixes of the scripts written without spaces between words.
UNSPACED_SCRIPT_PREFIXES = (
    "CJK UNIFIED IDEOGRAPH",
    "CJK COMPATIBILITY IDEOGRAPH",
    "HIRAGANA",
    "KATAKANA",
    "HALFWIDTH KATAKANA",
    "THAI",
    "LAO",
    "KHMER",
    "MYANMAR",
)

_ASCII_LETTER = np.zeros(256, dtype=bool)
_ASCII_LETTER[ord("A") : ord("Z") + 1] = True
_ASCII_LETTER[ord("a") : ord("z") + 1] = True


def is_letter(char: str) -> bool:
    """True for a character of Unicode category L* or M* (one character)."""
    return unicodedata.category(char)[0] in "LM"


def is_unspaced(char: str) -> bool:
    """True for a letter of a script written without spaces between words (Han, Kana, Thai...)."""
    return is_letter(char) and unicodedata.name(char, "").startswith(UNSPACED_SCRIPT_PREFIXES)


@functools.cache
def _bmp_classes() -> tuple[np.ndarray, np.ndarray]:
    """(is_letter, is_unspaced) for every code point of the Basic Multilingual Plane, built once."""
    letter = np.zeros(0x10000, dtype=bool)
    unspaced = np.zeros(0x10000, dtype=bool)
    for cp in range(0x80, 0x10000):
        if 0xD800 <= cp < 0xE000:
            continue
        ch = chr(cp)
        if unicodedata.category(ch)[0] in "LM":
            letter[cp] = True
            unspaced[cp] = unicodedata.name(ch, "").startswith(UNSPACED_SCRIPT_PREFIXES)
    letter[:0x80] = _ASCII_LETTER[:0x80]
    return letter, unspaced


def _classify(codepoints: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Letter and unspaced-script flags of each code point (int64 array)."""
    bmp_letter, bmp_unspaced = _bmp_classes()
    in_bmp = codepoints < 0x10000
    cps = np.where(in_bmp, codepoints, 0)
    letter = bmp_letter[cps] & in_bmp
    unspaced = bmp_unspaced[cps] & in_bmp
    if not in_bmp.all():  # astral code points (emoji, rare ideographs): classify the distinct ones
        astral = np.flatnonzero(~in_bmp)
        values, inverse = np.unique(codepoints[astral], return_inverse=True)
        flags = np.array(
            [(is_letter(chr(v)), is_unspaced(chr(v))) for v in values.tolist()], dtype=bool
        )
        letter[astral] = flags[inverse, 0]
        unspaced[astral] = flags[inverse, 1]
    return letter, unspaced


def _decode_utf8(buf: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Code points of the characters starting at ``starts`` in the valid UTF-8 bytes ``buf``."""
    lead = buf[starts].astype(np.int64)
    n = np.where(lead < 0x80, 1, np.where(lead < 0xE0, 2, np.where(lead < 0xF0, 3, 4)))
    cp = np.where(
        n == 1, lead, np.where(n == 2, lead & 0x1F, np.where(n == 3, lead & 0x0F, lead & 0x07))
    )
    padded = np.concatenate([buf, np.zeros(3, dtype=np.uint8)]).astype(np.int64)
    for i in (1, 2, 3):
        more = n > i
        cp = np.where(more, (cp << 6) | (padded[starts + i] & 0x3F), cp)
    return cp


def _ragged_gather(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``buf[starts[i]:ends[i]]``; return (bytes, int32 offsets)."""
    lengths = ends - starts
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - starts, lengths)
    return buf[index], offsets.astype(np.int32)


def _string_array(data: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A ``pa.string()`` array from UTF-8 bytes and int32 offsets."""
    return pa.StringArray.from_buffers(
        len(offsets) - 1,
        pa.py_buffer(np.ascontiguousarray(offsets, dtype=np.int32)),
        pa.py_buffer(data.tobytes()),
    )


def _text_bytes(token_text: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(utf-8 bytes of the concatenated texts, int64 token offsets into them starting at 0)."""
    if isinstance(token_text, pa.ChunkedArray):
        token_text = (
            token_text.combine_chunks() if token_text.num_chunks != 1 else token_text.chunk(0)
        )
    if pa.types.is_large_string(token_text.type):
        token_text = token_text.cast(pa.string())
    if token_text.null_count:
        token_text = pc.fill_null(token_text, "")
    _, offsets_buf, data_buf = token_text.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32)[
        token_text.offset : token_text.offset + len(token_text) + 1
    ]
    offsets = offsets.astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)[start:end]
        if data_buf is not None
        else np.zeros(0, np.uint8)
    )
    return data, offsets - start


@dataclass(frozen=True)
class Words:
    """The words of a chunk of tokens: token ``i``'s word is ``values[index[i]]``.

    ``values`` holds each letter run once (and ``""``), so per-word work such as the lexicon
    lookup runs over ``values`` and is gathered with ``index``.
    """

    values: pa.Array  # (V,) string
    index: np.ndarray  # (T,) int64

    def to_array(self) -> pa.Array:
        """The word of every token (``pa.string()``)."""
        return self.values.take(pa.array(self.index))


def assign_words(
    token_text: pa.Array | pa.ChunkedArray,
    sequence_start: np.ndarray,
    is_special: np.ndarray | None = None,
    dictionary_words: Sequence[str] = (),
) -> pa.Array:
    """Return the word of every token of a chunk of whole responses (rule in the module docstring).

    Same arguments as :func:`find_words`; returns a ``pa.string()`` array, ``""`` for tokens
    without letters.
    """
    return find_words(token_text, sequence_start, is_special, dictionary_words).to_array()


def find_words(
    token_text: pa.Array | pa.ChunkedArray,
    sequence_start: np.ndarray,
    is_special: np.ndarray | None = None,
    dictionary_words: Sequence[str] = (),
) -> Words:
    """Find the word of every token of a chunk of whole responses (rule in the module docstring).

    Args:
        token_text: the tokens' texts, responses one after the other, each in position order.
        sequence_start: bool array, True at the first token of each response (a letter run
            never crosses it).
        is_special: bool array, True for special tokens (their text holds no letters), or None.
        dictionary_words: words looked for inside runs of scripts without spaces (e.g. the
            lexicon's ``等等``, ``嗯``, ``也许``); words of other scripts are ignored here.

    Returns:
        The :class:`Words` (lower-cased; ``""`` for tokens without letters).
    """
    buf, offs = _text_bytes(token_text)  # (B,) uint8, (T + 1,) int64
    n_tokens, n_bytes = offs.size - 1, buf.size
    letter, unspaced = _letter_flags(buf)  # (B,) bool each
    if is_special is not None and np.any(is_special):
        letter[_span_bytes(offs, np.flatnonzero(is_special))] = False
    if not letter.any():
        return Words(
            values=pa.array([""], type=pa.string()), index=np.zeros(n_tokens, dtype=np.int64)
        )

    # runs: a letter starts one after a non-letter, at a response start, or at a script switch
    starts_run = letter.copy()
    starts_run[1:] &= ~letter[:-1]
    response_starts = offs[:-1][np.asarray(sequence_start, dtype=bool)]
    response_starts = response_starts[response_starts < n_bytes]
    starts_run[response_starts] = letter[response_starts]
    if unspaced is not None:
        starts_run[1:] |= letter[1:] & letter[:-1] & (unspaced[1:] != unspaced[:-1])
    letters = np.flatnonzero(letter)  # (L,) byte position of each letter
    letter_starts_run = starts_run[letters]  # (L,)
    run_first = np.flatnonzero(letter_starts_run)  # (R,) index in `letters` of each run's start
    run_of_letter = np.cumsum(letter_starts_run, dtype=np.int32) - 1  # (L,)
    run_offsets = np.append(run_first, letters.size)  # (R + 1,) runs in the compacted letters
    n_runs = run_first.size

    # the first letter at or after each token start: the token has letters when it is inside it
    letters_before = np.zeros(n_bytes + 1, dtype=np.int32)  # (B + 1,)
    np.cumsum(letter, out=letters_before[1:])
    first_letter = letters_before[offs[:-1]]  # (T,) index in `letters`
    has_letter = letters_before[offs[1:]] > first_letter
    # (T,) run of each token's first letter; index n_runs = "" (no letters)
    token_run = np.where(
        has_letter, run_of_letter[np.minimum(first_letter, letters.size - 1)], n_runs
    )

    letter_bytes = buf[letter]
    non_ascii = bool((letter_bytes >= 0x80).any())
    upper = letter_bytes - np.uint8(ord("A")) < 26
    letter_bytes |= upper.view(np.uint8) << np.uint8(5)  # ASCII lower-case: set bit 0x20 of A-Z
    runs = _string_array(letter_bytes, run_offsets)
    if non_ascii:  # Unicode lower-casing for the other letters
        runs = pc.utf8_lower(runs)
    sources = [runs, pa.array([""], type=pa.string())]

    if unspaced is not None:
        tokens = np.flatnonzero(has_letter)
        first = letters[first_letter[tokens]]  # byte position of each token's first letter
        keep = unspaced[first]
        tokens, first = tokens[keep], first[keep]
        if tokens.size:
            runs_of_tokens = token_run[tokens]
            run_end = letters[run_offsets[1:] - 1] + 1  # (R,) one past each run's last byte
            extra, index = _unspaced_words(
                buf,
                offs,
                tokens,
                letters=letters,
                run_of_letter=run_of_letter,
                run_end=run_end,
                first=first,
                runs_of_tokens=runs_of_tokens,
                dictionary_words=dictionary_words,
                base=n_runs + 1,
            )
            sources.append(extra)
            token_run[tokens] = index
    return Words(values=pa.concat_arrays(sources), index=token_run)


def _letter_flags(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Per byte: part of a letter?; part of an unspaced-script letter? (None when there are none).

    ASCII bytes are looked up in a table; only the non-ASCII characters are decoded.
    """
    letter = (buf | np.uint8(0x20)) - np.uint8(ord("a")) < 26  # [A-Za-z], with uint8 wrap-around
    leads = np.flatnonzero(buf >= 0xC0)  # first bytes of multi-byte characters
    if leads.size == 0:
        return letter, None
    char_letter, char_unspaced = _classify(_decode_utf8(buf, leads))
    if not char_unspaced.any():
        unspaced = None
    else:
        unspaced = np.zeros(buf.size, dtype=bool)
    lengths = np.where(buf[leads] < 0xE0, 2, np.where(buf[leads] < 0xF0, 3, 4))
    for i in range(4):  # the character's bytes take its flags
        at = lengths > i
        letter[leads[at] + i] = char_letter[at]
        if unspaced is not None:
            unspaced[leads[at] + i] = char_unspaced[at]
    return letter, unspaced


def _span_bytes(offs: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Byte positions of ``tokens`` (their concatenated spans)."""
    starts, ends = offs[tokens], offs[tokens + 1]
    lengths = ends - starts
    return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())


def _unspaced_words(
    buf: np.ndarray,
    offs: np.ndarray,
    tokens: np.ndarray,
    *,
    letters: np.ndarray,
    run_of_letter: np.ndarray,
    run_end: np.ndarray,
    first: np.ndarray,
    runs_of_tokens: np.ndarray,
    dictionary_words: Sequence[str],
    base: int,
) -> tuple[pa.Array, np.ndarray]:
    """Words of ``tokens``, whose first letter is in a script without spaces (module docstring).

    Returns:
        (extra word strings, index of each token's word in ``[runs..., "", extra...]``, whose
        extra part starts at ``base``).
    """
    # default: the token's own letters of its run, from its first letter to its end or the run's end
    start = first
    end = np.minimum(run_end[runs_of_tokens], offs[tokens + 1])
    data, own_offsets = _ragged_gather(buf, start, end)
    own = _string_array(data, own_offsets)
    index = base + np.arange(tokens.size, dtype=np.int64)

    candidates = [
        w for w in dict.fromkeys(dictionary_words) if w and all(is_unspaced(c) for c in w)
    ]
    if not candidates:
        return own, index
    order = sorted(
        range(len(candidates)), key=lambda i: -len(candidates[i])
    )  # stable: lexicon order
    text = buf.tobytes()
    run_of_byte = np.full(buf.size, -1, dtype=np.int64)
    run_of_byte[letters] = run_of_letter
    assigned = np.zeros(tokens.size, dtype=bool)
    dict_base = base + tokens.size
    for rank in order:
        word = candidates[rank].encode()
        at = text.find(word)
        while at != -1:
            stop = at + len(word)
            run = run_of_byte[at]
            if run >= 0 and run == run_of_byte[stop - 1]:  # inside one run
                # our tokens overlapping [at, stop) whose first letter is in that run
                t0 = np.searchsorted(offs, at, side="right") - 1
                t1 = np.searchsorted(offs, stop, side="left") - 1
                lo, hi = np.searchsorted(tokens, [t0, t1 + 1])
                for i in range(lo, hi):
                    if not assigned[i] and runs_of_tokens[i] == run:
                        assigned[i] = True
                        index[i] = dict_base + rank
            at = text.find(word, at + 1)
    return pa.concat_arrays([own, pa.array(candidates, type=pa.string())]), index


def token_own_words(token_text: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The word of each token's text taken alone (its first letter run, lower-cased).

    Used for the top-k candidates, which have no context: ``" Wait"`` → ``"wait"``,
    ``"atively"`` → ``"atively"``.
    """
    n = len(token_text)
    return assign_words(token_text, np.ones(n, dtype=bool))
