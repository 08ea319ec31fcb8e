"""Answer checking with HuggingFace's ``math-verify`` (the ``generated`` pass@1 source).

A reference answer is *gold* LaTeX: math-verify extracts gold answers from math mode, so a
reference is parsed inside ``$...$`` unless it already carries delimiters (``$``, ``\\(``,
``\\[``) or a ``\\boxed{}``. Parsing ``3\\sqrt{13}`` or ``\\pi`` without delimiters finds only a
prefix (``3``) or nothing, which graded MATH-style answers wrong. A reference math-verify
cannot parse is never a silent False: :func:`grade_response` logs a warning naming the prompt
and returns ``correct=None`` (not graded).

``math-verify`` bounds its parsing with ``signal.alarm``, which only works in a process's main
thread; HED grades inside runner threads and subprocesses, so both timeouts are disabled
(``parsing_timeout=None``, ``timeout_seconds=None``).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify


class _DropTimeoutNotice(logging.Filter):
    """math-verify warns on every call that its timeout is off; HED disables it on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutNotice())

#: A power whose exponent has 7+ digits: sympy would compute it exactly (2^(10^21) needs
#: more memory than any machine has: a response ending in ``2^{5101551295342961622253}``
#: was killed at 24 GB), and no benchmark answer is one.
_RUNAWAY_POWER = re.compile(r"[0-9A-Za-z.]*\s*(\^|\*\*)\s*(\{\s*)?[-+]?\d{7,}(\s*\})?")
_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.S)
_EXTRACTION = [LatexExtractionConfig(), ExprExtractionConfig()]
#: A response that writes ``\\boxed{...}`` gives its answer there: plain-expression extraction
#: would otherwise pick up other text when the box is empty (``100 - 37 = ? ... \\boxed{}``
#: was read as ``100 - 37`` = 63 and graded correct).
_BOXED_ONLY = [LatexExtractionConfig()]
_BOXED = re.compile(r"\\boxed\s*\{")


@dataclass(frozen=True)
class Grade:
    """Outcome of grading one response.

    Attributes:
        extracted_answer: the answer math-verify extracted from the response (its string
            form), or None when it found none.
        correct: True/False against the reference; None when the prompt has no reference.
    """

    extracted_answer: str | None
    correct: bool | None


def normalise_reference(answer: Any) -> str | None:
    """Turn a reference answer from a benchmark file into the string math-verify parses.

    Handles the shapes of ``../shared/data``: zero-padded strings (AIME ``"025"``), floats
    (AMC ``27.0`` → ``"27"``), and GSM8K worked solutions whose last line is ``#### N``.

    Returns:
        The reference as a string, or None for a missing answer (None, NaN, empty).
    """
    if answer is None or (isinstance(answer, float) and math.isnan(answer)):
        return None
    if isinstance(answer, float) and answer.is_integer():
        return str(int(answer))
    text = str(answer).strip()
    if not text:
        return None
    final = _GSM8K_FINAL.search(text)
    if final:
        text = final.group(1).replace(",", "")
    if re.fullmatch(r"0+\d+", text):
        text = str(int(text))
    return text


# a delimiter is `$`, `\(` or `\[` after an even number of backslashes (`\\(` is a matrix row
# break then a bracket, `\$` a dollar sign), or `\boxed{`
_DELIMITED = re.compile(r"(?<!\\)(?:\\\\)*(?:\$|\\\(|\\\[)|\\boxed\s*\{")


def gold_latex(reference: str) -> str:
    """The reference as math-verify's gold LaTeX: wrapped in ``$...$`` unless already delimited.

    ``\\sqrt{51}`` → ``$\\sqrt{51}$``; ``$\\frac{1}{2}$``, ``\\(x\\)``, ``\\boxed{7}`` stay.
    """
    return reference if _DELIMITED.search(reference) else f"${reference}$"


@lru_cache(maxsize=4096)
def parse_reference(reference: str) -> tuple[Any, ...]:
    """Parse a normalised reference answer as gold (cached: every sample of a prompt reuses it).

    Returns:
        math-verify's parse (a tuple of the sympy value and its string), empty when
        math-verify finds no answer in the reference.
    """
    return tuple(parse(gold_latex(reference), extraction_config=_EXTRACTION, parsing_timeout=None))


def reference_parses(reference: str | None) -> bool:
    """Whether math-verify reads a value from ``reference`` (None, no reference, counts as yes).

    A parse that yields only text (``\\#3``, ``\\frac{1}{2}\\%``: no sympy value) counts as
    no: a response would then be compared as a string and graded False without a warning.
    """
    return reference is None or any(not isinstance(v, str) for v in parse_reference(reference))


def grade_response(response: str, reference: str | None) -> Grade:
    """Extract the final answer of ``response`` and compare it with ``reference``.

    The reference is parsed as gold LaTeX (:func:`gold_latex`); the response with math-verify's
    LaTeX then plain-expression extraction, its last match being the answer.

    Args:
        response: the model's response text.
        reference: normalised reference answer (:func:`normalise_reference`) or None.

    Returns:
        A :class:`Grade`; ``correct`` is None when ``reference`` is None or math-verify cannot
        parse it (the prompt set warns about such references before generation,
        :func:`reference_parses`), False when the response has no answer.
    """
    # math-verify's timeouts need signal.alarm (main thread only), so they are off: powers with
    # astronomically large exponents are replaced by a symbol before parsing instead
    response = _RUNAWAY_POWER.sub(r"\\text{overflow}", response)
    config = _BOXED_ONLY if _BOXED.search(response) else _EXTRACTION
    predicted = parse(response, extraction_config=config, parsing_timeout=None)
    extracted = str(predicted[-1]) if predicted else None
    if reference is None:
        return Grade(extracted_answer=extracted, correct=None)
    gold = parse_reference(reference)
    if not reference_parses(reference):
        return Grade(extracted_answer=extracted, correct=None)
    if not predicted:
        return Grade(extracted_answer=extracted, correct=False)
    return Grade(
        extracted_answer=extracted,
        correct=bool(verify(list(gold), predicted, timeout_seconds=None)),
    )
