"""The verifiable reward: 1 when the response's final answer equals the reference integer, else 0.

Two graders (``mini_rl.reward``):

* ``integer_match`` (default): the last integer written in the response (digits with an
  optional sign; thousands separators allowed) equals the answer. ``11 + 25 = 36`` and
  ``The answer is 36.`` are correct for 36; ``11 + 25`` is not.
* ``math_verify``: :func:`hed.core.grading.grade_response`, the grader of HED's ``generated``
  pass@1. It evaluates expressions, so the bare restatement ``11 + 25`` counts as 36. Measured
  on the embedded SmolLM2 with this grader, the policy learned within 24 steps to echo the
  question's expression (``What is 11 + 25?`` → ``11 + 25``): held-out greedy "pass@1" rose
  from 0.19 to 0.72 without the model computing anything. The default avoids that hack.

The same grader scores the training reward and the held-out validation logged to W&B.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from hed.core.grading import grade_response
from hed.errors import ConfigError

# an integer not glued to a word or a decimal point; a minus sign only when it starts a token
_INTEGER = re.compile(r"(?<![\w.])-?\d[\d,]*")


def final_integer(text: str) -> int | None:
    """The last integer written in ``text`` (``1,024`` is 1024), or None when there is none."""
    found = [m.replace(",", "") for m in _INTEGER.findall(text)]
    found = [m for m in found if m.strip("-")]
    return int(found[-1]) if found else None


def integer_match(response: str, answer: str) -> bool:
    """Whether the last integer of ``response`` equals the integer ``answer``."""
    return final_integer(response) == int(str(answer).strip())


def math_verify_match(response: str, answer: str) -> bool:
    """Whether math-verify accepts ``response``'s final answer against ``answer``."""
    return bool(grade_response(response, str(answer)).correct)


GRADERS: dict[str, Callable[[str, str], bool]] = {
    "integer_match": integer_match,
    "math_verify": math_verify_match,
}


def grader(name: str) -> Callable[[str, str], bool]:
    """The grader called ``name``.

    Raises:
        ConfigError: an unknown name.
    """
    try:
        return GRADERS[name]
    except KeyError:
        raise ConfigError(f"mini_rl.reward is {name!r}; use one of {', '.join(GRADERS)}") from None


def correctness_reward(name: str) -> Callable[..., list[float]]:
    """A TRL reward function grading with :func:`grader` ``(name)``.

    TRL calls it with the batch's completions and every dataset column as a keyword
    (``answer`` here); its name, ``correctness``, names the reward in the logs
    (``train/rewards/correctness/mean``).
    """
    grade = grader(name)

    def correctness(
        completions: Sequence[Any], answer: Sequence[str], **kwargs: Any
    ) -> list[float]:
        """1.0 for a correct completion, 0.0 otherwise.

        Args:
            completions: completion texts (plain-text prompts), or message lists
                (conversational prompts: the last message's ``content`` is graded).
            answer: the reference integer of each completion's problem, as a string.
            **kwargs: the other columns and TRL's extras (trainer_state, ...), unused.
        """
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [1.0 if grade(t, ref) else 0.0 for t, ref in zip(texts, answer, strict=True)]

    return correctness
