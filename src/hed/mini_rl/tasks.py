"""The verifiable task of the miniature DAPO experiment: integer arithmetic and word problems.

Every problem has one integer answer. Kinds (``kinds`` parameter):

* ``add``: ``What is 37 + 48?`` (two-digit operands);
* ``sub``: ``What is 83 - 29?`` (non-negative result);
* ``mul``: ``What is 7 * 12?`` (operands 2–12);
* ``word``: one-sentence stories with one operation (buy more, give away, boxes of, share
  equally), e.g. ``Tom has 12 apples. He buys 7 more. How many apples does he have now?``.

The training and the held-out validation set come from one seeded stream of problems
(``numpy.random.default_rng(seed)``), de-duplicated by text: the validation set is drawn first,
the training set from the problems that follow and that are not in it, so the two never share a
problem and the validation set does not change when the training set grows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

from hed.core.validators import positive_int
from hed.errors import ConfigError

KINDS = ("add", "sub", "mul", "word")

#: Columns of a task set (the validation set is also HED's prompt file: ``problem``, ``answer``).
TASK_COLUMNS = ["problem_index", "problem", "answer", "kind"]

_NAMES = (
    ("Tom", "he"),
    ("Anna", "she"),
    ("Ben", "he"),
    ("Mia", "she"),
    ("Sam", "he"),
    ("Lily", "she"),
)
_THINGS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "coins")
_MAX_DRAWS_PER_PROBLEM = (
    50  # the kinds hold thousands of distinct problems; this bounds bad requests
)


def _word_problem(rng: np.random.Generator) -> tuple[str, int]:
    name, pronoun = _NAMES[rng.integers(len(_NAMES))]
    things = _THINGS[rng.integers(len(_THINGS))]
    form = int(rng.integers(4))
    if form == 0:
        a, b = int(rng.integers(3, 40)), int(rng.integers(2, 30))
        return (
            f"{name} has {a} {things}. {pronoun.capitalize()} buys {b} more. "
            f"How many {things} does {pronoun} have now?",
            a + b,
        )
    if form == 1:
        a = int(rng.integers(10, 60))
        b = int(rng.integers(1, a))
        return (
            f"{name} had {a} {things} and gave {b} of them to a friend. "
            f"How many {things} does {pronoun} have left?",
            a - b,
        )
    if form == 2:
        a, b = int(rng.integers(2, 10)), int(rng.integers(2, 12))
        return (
            f"There are {a} boxes with {b} {things} in each box. "
            f"How many {things} are there in total?",
            a * b,
        )
    children, each = int(rng.integers(2, 9)), int(rng.integers(2, 10))
    return (
        f"{children * each} {things} are shared equally among {children} children. "
        f"How many {things} does each child get?",
        each,
    )


def make_problem(kind: str, rng: np.random.Generator) -> tuple[str, int]:
    """Draw one problem of ``kind`` from ``rng``.

    Returns:
        ``(problem text, integer answer)``.

    Raises:
        ConfigError: an unknown kind.
    """
    if kind == "add":
        a, b = (int(x) for x in rng.integers(10, 100, size=2))
        return f"What is {a} + {b}?", a + b
    if kind == "sub":
        a, b = sorted((int(x) for x in rng.integers(10, 100, size=2)), reverse=True)
        return f"What is {a} - {b}?", a - b
    if kind == "mul":
        a, b = (int(x) for x in rng.integers(2, 13, size=2))
        return f"What is {a} * {b}?", a * b
    if kind == "word":
        return _word_problem(rng)
    raise ConfigError(f"mini_rl.task.kinds: unknown kind {kind!r}; use some of {', '.join(KINDS)}")


def _problem_stream(kinds: Sequence[str], seed: int) -> Iterator[tuple[str, int, str]]:
    """Endless stream of distinct problems ``(text, answer, kind)``, kinds drawn uniformly."""
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    misses = 0
    while True:
        kind = kinds[int(rng.integers(len(kinds)))]
        text, answer = make_problem(kind, rng)
        if text in seen:
            misses += 1
            if misses > _MAX_DRAWS_PER_PROBLEM * (len(seen) + 1):
                raise ConfigError(
                    f"mini_rl.task: only {len(seen)} distinct problems of kinds {list(kinds)}; "
                    "ask for fewer problems or add kinds"
                )
            continue
        seen.add(text)
        yield text, answer, kind


def make_task_sets(
    *, num_train: int, num_validation: int, seed: int, kinds: Sequence[str] = KINDS
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build the training and held-out validation sets.

    Args:
        num_train: problems in the training set.
        num_validation: problems in the validation set (drawn first).
        seed: seed of the problem stream.
        kinds: problem kinds to draw from, uniformly.

    Returns:
        ``(train, validation)``, each with ``problem_index`` (0-based), ``problem``, ``answer``
        (the integer as a string, as HED's prompt files hold it) and ``kind``.

    Raises:
        ConfigError: a size below 1, no kinds or an unknown kind.
    """
    for name, value in (("num_train", num_train), ("num_validation", num_validation)):
        positive_int(value, f"mini_rl.task.{name}")
    if not kinds:
        raise ConfigError(f"mini_rl.task.kinds is empty; use some of {', '.join(KINDS)}")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ConfigError(
            f"mini_rl.task.kinds: unknown kind(s) {unknown}; use some of {', '.join(KINDS)}"
        )
    stream = _problem_stream(list(kinds), seed)
    rows = [next(stream) for _ in range(num_validation + num_train)]
    return _frame(rows[num_validation:]), _frame(rows[:num_validation])


def _frame(rows: list[tuple[str, int, str]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "problem_index": np.arange(len(rows), dtype=np.int64),
            "problem": [text for text, _, _ in rows],
            "answer": [str(answer) for _, answer, _ in rows],
            "kind": [kind for _, _, kind in rows],
        },
        columns=TASK_COLUMNS,
    )
