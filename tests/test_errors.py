"""HED's error helpers: one line out of any exception, failed-node summaries by type."""

from __future__ import annotations

from hed.errors import HEDError, NodeFailuresError, one_line, short_message


def test_one_line_takes_the_first_non_blank_line_with_spaces_collapsed():
    assert one_line(ValueError("\n  bad   value\tin x\nTraceback line 2")) == "bad value in x"
    assert one_line(KeyError()) == "KeyError"  # empty message: the type
    assert one_line("already  a message") == "already a message"


def test_one_line_cuts_at_the_limit_with_an_ellipsis():
    long = ValueError("x" * 400)
    assert one_line(long) == "x" * 299 + "…" and len(one_line(long)) == 300
    assert one_line(long, limit=10) == "x" * 9 + "…"
    assert one_line(long, limit=None) == "x" * 400


def test_node_failures_are_recognised_by_type_not_by_name():
    class FailedNodesError(RuntimeError):  # same name, not HED's: no special treatment
        pass

    assert short_message(FailedNodesError("a\nb")) is None
    summary = NodeFailuresError("2 node(s) failed:\n  - a: x\n  - b: y")
    assert isinstance(summary, HEDError)
    assert short_message(summary) == f"NodeFailuresError: {summary}"  # shown whole
