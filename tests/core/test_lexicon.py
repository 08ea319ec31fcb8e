"""The lexicon: validation, first category wins, the default lists of DESIGN.md §5.4."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from hed.core.lexicon import OTHER, parse_lexicon
from hed.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]

# DESIGN.md §5.4, verbatim
DESIGN_ANTHROPOMORPHIC = (
    "wait, hmm, hmmm, hm, perhaps, maybe, oh, ah, aha, oops, okay, ok, "
    "actually, i, me, my, myself, guess, seems"
)
DESIGN_REASONING = (
    "so, let, thus, therefore, hence, since, because, then, now, but, however, "
    "if, given, suppose, assume, define, first, next, finally, also, alternatively, consider, "
    "note, recall, check, verify, compute, find, need, means, implies"
)


def test_default_lexicon_is_design_lists():
    config = yaml.safe_load((REPO / "conf" / "base" / "parameters_aggregation.yml").read_text())
    lexicon = config["aggregation"]["lexicon"]
    assert list(lexicon) == ["anthropomorphic", "reasoning"]
    assert lexicon["anthropomorphic"] == DESIGN_ANTHROPOMORPHIC.split(", ")
    assert lexicon["reasoning"] == DESIGN_REASONING.split(", ")
    assert parse_lexicon(lexicon).categories == ("anthropomorphic", "reasoning", OTHER)


def test_first_category_wins_and_words_are_lower_cased():
    lexicon = parse_lexicon({"anthropomorphic": ["Wait", "hmm"], "reasoning": ["so", "wait"]})
    assert lexicon.category_of("wait") == "anthropomorphic"
    assert lexicon.category_of("so") == "reasoning"
    assert lexicon.category_of("answer") == OTHER
    assert lexicon.categorise(pa.array(["wait", "so", "", "answer", "hmm"])).to_pylist() == [
        "anthropomorphic",
        "reasoning",
        OTHER,
        OTHER,
        "anthropomorphic",
    ]


def test_a_word_under_two_categories_is_warned_once_naming_both(caplog):
    config = {
        "anthropomorphic": ["twicelisted", "hmm", "Twicelisted"],
        "reasoning": ["so", "twicelisted"],
    }
    with caplog.at_level(logging.WARNING, logger="hed.core.lexicon"):
        lexicon = parse_lexicon(config)
        parse_lexicon(config)  # every node that reads the lexicon parses it: still one warning
    assert lexicon.category_of("twicelisted") == "anthropomorphic"
    assert [r.getMessage() for r in caplog.records] == [
        "aggregation.lexicon lists 1 word(s) under more than one category: 'twicelisted' under "
        "anthropomorphic, reasoning; each counts under the first listed only (remove it from "
        "the others to say so)"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hed.core.lexicon"):
        parse_lexicon({"anthropomorphic": ["hmm", "hmm"], "reasoning": ["so"]})
    assert caplog.records == []  # twice in one category: nothing to say


def test_unspaced_words_are_accepted():
    lexicon = parse_lexicon({"anthropomorphic": ["等等", "嗯", "也许"]})
    assert lexicon.category_of("等等") == "anthropomorphic"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"anthropomorphic": ["wait", 42]},
            "aggregation.lexicon.anthropomorphic[1] = 42 is a int, not a string",
        ),
        (
            {"anthropomorphic": ["wait", True]},
            "aggregation.lexicon.anthropomorphic[1] = True is a bool",
        ),
        (
            {"reasoning": ["let's"]},
            'aggregation.lexicon.reasoning[0] = "let\'s" is not one word of letters',
        ),
        ({"reasoning": [""]}, "aggregation.lexicon.reasoning[0] = '' is not one word"),
        ({"reasoning": "so"}, "aggregation.lexicon.reasoning must be a list of words"),
        ({"Other": ["x"]}, "category 'Other' must be a lower-case name"),
        ({"other": ["x"]}, "category 'other' must be a lower-case name other than 'other'"),
        (["wait"], "aggregation.lexicon must be a mapping"),
        ({}, "aggregation.lexicon must be a mapping"),
    ],
)
def test_invalid_lexicon(config, message):
    with pytest.raises(ConfigError) as exc:
        parse_lexicon(config)
    assert message in str(exc.value) and "\n" not in str(exc.value)
