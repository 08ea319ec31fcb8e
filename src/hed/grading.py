"""Answer checking with HuggingFace's ``math-verify`` (docs/metrics.md, source ``generated``).

``math-verify`` bounds its parsing with ``signal.alarm``, which only works in a process's main
thread; HED grades inside runner threads and subprocesses, so both timeouts are disabled
(``parsing_timeout=None``, ``timeout_seconds=None``).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify


class _DropTimeoutNotice(logging.Filter):
    """math-verify warns on every call that its timeout is off; HED disables it on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutNotice())

_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.S)
_EXTRACTION = [LatexExtractionConfig(), ExprExtractionConfig()]


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


def grade_response(response: str, reference: str | None) -> Grade:
    """Extract the final answer of ``response`` and compare it with ``reference``.

    Args:
        response: the model's response text.
        reference: normalised reference answer (:func:`normalise_reference`) or None.

    Returns:
        A :class:`Grade`; ``correct`` is None when ``reference`` is None.
    """
    predicted = parse(response, extraction_config=_EXTRACTION, parsing_timeout=None)
    extracted = str(predicted[-1]) if predicted else None
    if reference is None:
        return Grade(extracted_answer=extracted, correct=None)
    gold = parse(
        reference if "$" in reference or "\\" in reference else f"${reference}$",
        extraction_config=_EXTRACTION,
        parsing_timeout=None,
    )
    if not predicted or not gold:
        return Grade(extracted_answer=extracted, correct=False)
    return Grade(
        extracted_answer=extracted, correct=bool(verify(gold, predicted, timeout_seconds=None))
    )
