"""The lexicon: which words are anthropomorphic, which are reasoning, the rest is ``other``.

Configured as ``aggregation.lexicon`` (``conf/base/parameters_aggregation.yml``), an ordered
mapping ``{category: [word, ...]}``. Words are matched against the lower-cased ``word`` of
each token (docs/aggregation.md), so entries are lower-cased when read; a word listed under two
categories takes the first category listed, with a warning naming it (docs/aggregation.md). The
QAE paper (arXiv 2509.22611) did not publish its list; the default is HED's, built around the
words it names ("wait", "perhaps" anthropomorphic; "so", "let" reasoning).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hed.core.words import Words, is_letter
from hed.errors import ConfigError

logger = logging.getLogger(__name__)

#: Category of every word the lexicon does not list (and of tokens without letters).
OTHER = "other"

_CATEGORY_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Lexicon:
    """Word → category, first listing wins.

    Attributes:
        categories: the configured categories in order, then ``other``.
        words: every distinct word, in the order first listed.
        word_categories: index into ``categories`` of each word's category.
    """

    categories: tuple[str, ...]
    words: tuple[str, ...]
    word_categories: tuple[int, ...]

    def category_of(self, word: str) -> str:
        """Category of one word (``other`` when unlisted)."""
        try:
            return self.categories[self.word_categories[self.words.index(word)]]
        except ValueError:
            return OTHER

    def categorise(self, words: pa.Array | pa.ChunkedArray | Words) -> pa.Array:
        """Category string of each word (``other`` for unlisted and empty words).

        With :class:`hed.core.words.Words`, each distinct run is looked up once.
        """
        if isinstance(words, Words):
            codes = self.category_codes(words.values)[words.index]
        else:
            codes = self.category_codes(words)
        return pa.array(self.categories, type=pa.string()).take(pa.array(codes))

    def category_codes(self, words: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Index into :attr:`categories` of each word's category (int8 array)."""
        other = len(self.categories) - 1
        if not self.words:
            return np.full(len(words), other, dtype=np.int8)
        position = pc.index_in(words, value_set=pa.array(self.words, type=pa.string()))
        position = pc.fill_null(position, len(self.words)).to_numpy(zero_copy_only=False)
        lookup = np.append(np.asarray(self.word_categories, dtype=np.int8), np.int8(other))
        return lookup[position]


def parse_lexicon(config: Any) -> Lexicon:
    """Validate ``aggregation.lexicon`` and build the :class:`Lexicon`.

    Args:
        config: ``{category: [word, ...]}``; categories are lower-case identifiers other than
            ``other``; words are non-empty strings of letters (Unicode categories L/M),
            lower-cased here.

    A word listed under two or more categories takes the first; one warning names each such
    word and its categories (once per process for the same words: the lexicon is parsed by
    every node that reads it).

    Raises:
        ConfigError: the mapping, a category name or an entry is invalid (one line naming it).
    """
    if not isinstance(config, Mapping) or not config:
        raise ConfigError(
            "aggregation.lexicon must be a mapping {category: [word, ...]}, "
            f"got {type(config).__name__}: {config!r}"
        )
    words: dict[str, int] = {}
    listed: dict[str, list[str]] = {}  # word -> every category listing it, in order
    categories = []
    for category, entries in config.items():
        where = f"aggregation.lexicon.{category}"
        if not isinstance(category, str) or not _CATEGORY_RE.match(category) or category == OTHER:
            raise ConfigError(
                f"aggregation.lexicon: category {category!r} must be a lower-case name "
                f"other than {OTHER!r}"
            )
        if isinstance(entries, str) or not isinstance(entries, list | tuple):
            raise ConfigError(
                f"{where} must be a list of words, got {type(entries).__name__}: {entries!r}"
            )
        categories.append(category)
        for i, entry in enumerate(entries):
            if not isinstance(entry, str):
                raise ConfigError(
                    f"{where}[{i}] = {entry!r} is a {type(entry).__name__}, not a string: quote it"
                )
            word = entry.strip().lower()
            if not word or not all(is_letter(c) for c in word):
                raise ConfigError(
                    f"{where}[{i}] = {entry!r} is not one word of letters "
                    "(words are letter runs, see docs/aggregation.md)"
                )
            words.setdefault(word, len(categories) - 1)  # first category listed wins
            if category not in listed.setdefault(word, []):
                listed[word].append(category)
    twice = tuple((word, tuple(cats)) for word, cats in listed.items() if len(cats) > 1)
    if twice:
        _warn_listed_twice(twice)
    return Lexicon(
        categories=(*categories, OTHER),
        words=tuple(words),
        word_categories=tuple(words.values()),
    )


@cache
def _warn_listed_twice(twice: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
    """One warning for the words listed under several categories (cached: once per set)."""
    named = "; ".join(f"{word!r} under {', '.join(cats)}" for word, cats in twice)
    logger.warning(
        "aggregation.lexicon lists %d word(s) under more than one category: %s; each counts "
        "under the first listed only (remove it from the others to say so)",
        len(twice),
        named,
    )
