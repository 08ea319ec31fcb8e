"""Grading with math-verify (hed.core.grading): MATH-style reference answers of every common shape.

Each case is (reference as a benchmark file stores it, the answer as a model writes it inside
``\\boxed{}``, a different answer of the same shape). The reference must grade True against
itself and False against the changed answer; ``3`` vs ``3\\sqrt{13}`` is the case that used to
pass because the reference parsed only as its prefix ``3``.
"""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from hed.core.grading import (
    gold_latex,
    grade_response,
    normalise_reference,
    parse_reference,
    reference_parses,
)

CASES = [
    # integers, zero-padded (AIME), floats (AMC), negative, large
    ("25", "25", "26"),
    ("025", "25", "52"),
    (27.0, "27", "28"),
    ("-7", "-7", "7"),
    ("1000000", "1000000", "100000"),
    ("0", "0", "1"),
    # decimals and percentages
    ("0.5", "0.5", "0.25"),
    ("3.14", "3.14", "3.15"),
    ("10\\%", "10\\%", "20\\%"),
    ("\\$18.90", "18.90", "18.09"),
    # fractions
    ("\\frac{14}{3}", "\\frac{14}{3}", "\\frac{3}{14}"),
    ("\\dfrac{3}{4}", "\\frac{3}{4}", "\\frac{4}{3}"),
    ("-\\frac{1}{2}", "-\\frac{1}{2}", "\\frac{1}{2}"),
    ("\\tfrac{5}{8}", "\\frac{5}{8}", "\\frac{5}{9}"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{2}}{2}"),
    # radicals
    ("\\sqrt{51}", "\\sqrt{51}", "\\sqrt{52}"),
    ("3\\sqrt{13}", "3\\sqrt{13}", "3"),
    ("5\\sqrt{2}", "5\\sqrt{2}", "5"),
    ("2+\\sqrt{3}", "2+\\sqrt{3}", "2-\\sqrt{3}"),
    ("\\sqrt[3]{2}", "\\sqrt[3]{2}", "\\sqrt{2}"),
    # pi
    ("\\pi", "\\pi", "2\\pi"),
    ("2\\pi", "2\\pi", "\\pi"),
    ("\\frac{\\pi}{3}", "\\frac{\\pi}{3}", "\\frac{\\pi}{6}"),
    ("12\\pi", "12\\pi", "12"),
    # intervals
    ("(-\\infty, 3]", "(-\\infty, 3]", "(-\\infty, 3)"),
    ("[2, 5)", "[2, 5)", "[2, 5]"),
    ("(-2, 7)", "(-2, 7)", "(-2, 8)"),
    ("(-\\infty,-2)\\cup(3,\\infty)", "(-\\infty,-2)\\cup(3,\\infty)", "(-2,3)"),
    # tuples, points, sets, lists
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi)"),
    ("(1,-2)", "(1,-2)", "(-2,1)"),
    ("\\{1,2\\}", "\\{1,2\\}", "\\{1,3\\}"),
    ("1, 2, 3", "1, 2, 3", "1, 2, 4"),
    # words (\text{}), multiple choice
    ("\\text{Evelyn}", "\\text{Evelyn}", "\\text{Alice}"),
    ("\\text{(C)}", "\\text{(C)}", "\\text{(D)}"),
    ("\\text{odd}", "\\text{odd}", "\\text{even}"),
    # matrices and vectors
    (
        "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
        "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
        "\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}",
    ),
    (
        "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}",
        "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}",
        "\\begin{pmatrix} 0 & 1 \\\\ 1 & 0 \\end{pmatrix}",
    ),
    # expressions, degrees, infinity, complex
    ("x^2+1", "x^2+1", "x^2-1"),
    ("90^\\circ", "90^\\circ", "45^\\circ"),
    ("\\infty", "\\infty", "0"),
    ("3+4i", "3+4i", "3-4i"),
    ("2^{10}", "1024", "2^{11}"),
    # GSM8K worked solutions end with `#### N`
    ("She pays 3 * 4 = <<3*4=12>>12 dollars.\n#### 12", "12", "13"),
    ("Total: 1,234 apples\n#### 1,234", "1234", "1243"),
    # already delimited references stay as they are
    ("$\\frac{1}{3}$", "\\frac{1}{3}", "\\frac{1}{4}"),
    ("\\boxed{42}", "42", "24"),
]


def _response(answer: str) -> str:
    return f"Let me work it out step by step.\n\nThe answer is $\\boxed{{{answer}}}$."


@pytest.mark.parametrize(("reference", "written", "changed"), CASES, ids=[str(c[0]) for c in CASES])
def test_reference_grades_true_against_itself_and_false_against_a_change(
    reference, written, changed
):
    gold = normalise_reference(reference)
    assert reference_parses(gold)
    assert grade_response(_response(written), gold).correct is True
    assert grade_response(_response(changed), gold).correct is False


def test_at_least_forty_reference_shapes():
    assert len(CASES) >= 40


def test_prefix_of_a_radical_is_not_the_answer():
    # before: the reference `3\sqrt{13}` parsed as `3`, so a response answering 3 was correct
    assert [str(v) for v in parse_reference("3\\sqrt{13}")] == ["3*sqrt(13)", "3\\sqrt{13}"]
    assert grade_response(_response("3"), "3\\sqrt{13}").correct is False


def test_gold_latex_wraps_only_undelimited_references():
    assert gold_latex("\\sqrt{51}") == "$\\sqrt{51}$"
    assert gold_latex("25") == "$25$"
    assert gold_latex("$\\pi$") == "$\\pi$"
    assert gold_latex("\\(x+1\\)") == "\\(x+1\\)"
    assert gold_latex("\\boxed{7}") == "\\boxed{7}"


def test_a_matrix_row_break_before_a_bracket_is_no_delimiter():
    # `\\(` and `\\[` are a row break then a bracket, not the `\(` / `\[` math delimiters
    reference = "\\begin{pmatrix} 1 \\\\(-2) \\end{pmatrix}"
    assert gold_latex(reference) == f"${reference}$"
    assert gold_latex("x \\\\[2pt] y") == "$x \\\\[2pt] y$"
    assert gold_latex("\\\\\\(x\\)") == "\\\\\\(x\\)"  # a row break, then `\(`
    assert grade_response(_response("\\begin{pmatrix} 1 \\\\ -2 \\end{pmatrix}"), reference).correct
    assert (
        grade_response(_response("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"), reference).correct
        is False
    )


@pytest.mark.parametrize("reference", ["\\text{}", "\\#3", "\\frac{1}{2}\\%"])
def test_references_without_a_value_are_not_parseable(reference):
    # math-verify returns no value (or only the text): grading would be a silent False
    assert not reference_parses(reference)
    assert grade_response(_response("3"), reference).correct is None


def test_unparseable_reference_is_ungraded_not_false():
    assert not reference_parses("\\text{}")
    grade = grade_response(_response("5"), "\\text{}")
    assert grade.correct is None
    assert grade.extracted_answer == "5"


def test_response_without_an_answer_is_false():
    assert grade_response("I do not know.", "12").correct is False


def test_prompt_set_warns_about_an_unparseable_reference(caplog):
    from hed.pipelines.generation.nodes import build_prompt_set

    raw = pd.DataFrame(
        {
            "problem": ["What is 1+1?", "Name the set."],
            "answer": ["2", "\\text{}"],
            "source_file": "math.jsonl",
        }
    )
    params = {"prompt_columns": ["problem"], "answer_column": "answer", "seed": 0}
    with caplog.at_level(logging.WARNING):
        prompts = build_prompt_set(raw, params)
    bad = prompts.loc[prompts["answer"] == "\\text{}", "prompt_index"].item()
    messages = [r.getMessage() for r in caplog.records if "cannot parse" in r.getMessage()]
    assert messages == [
        f"prompt file math.jsonl, source_row 1 (prompt_index {bad}): math-verify cannot parse "
        "the reference answer '\\\\text{}'; its responses stay ungraded (correct = null)"
    ]


@pytest.mark.parametrize(
    "response",
    [
        "so $0.5 = 2^{5101551295342961622253}$",  # a real vLLM response's ending on the demo
        "x = 3**12345678",
        "$\\boxed{10^{ 99999999999 }}$",
    ],
)
def test_runaway_powers_are_not_computed_and_grade_false(response):
    # sympy would compute them exactly (the first was killed at 24 GB); no answer is one
    import time

    started = time.monotonic()
    grade = grade_response(response, "3")
    assert time.monotonic() - started < 5
    assert grade.correct is False


def test_ordinary_powers_still_grade():
    assert grade_response("$\\boxed{2^{10}}$", "1024").correct is True
    assert grade_response("The answer is $\\boxed{7}$, since 2^{99999999} is big.", "7").correct


def test_an_empty_box_is_no_answer_even_when_the_question_evaluates_to_it():
    # a real vLLM demo response: the restated question 100 - 37 was read as the answer 63
    response = "100 - 37 = ?\nThe final answer is \\boxed{}."
    grade = grade_response(response, "63")
    assert (grade.extracted_answer, grade.correct) == (None, False)
    assert grade_response("so 100 - 37 = 63. The answer is 63", "63").correct is True
