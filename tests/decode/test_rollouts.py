"""hed.decode.rollouts without a model: correctness from a dump's fields."""

from __future__ import annotations

import pandas as pd

from hed.decode.rollouts import dump_correctness


def test_acc_first_then_score_threshold_then_grading():
    dump = pd.DataFrame(
        {
            "score": [1.0, -1.0, 0.3, 0.0, 2.0],
            "acc": pd.Series([True, 1.0, 0.2, None, float("nan")], dtype=object),
        }
    )
    # acc: bool as is, a number correct when >= 0.5; absent (None / NaN): score > threshold
    assert dump_correctness(dump, 0.0) == [True, True, False, False, True]
    assert dump_correctness(dump, 5.0) == [True, True, False, False, False]
    # threshold null: rows without acc are left to math-verify against gts (None)
    assert dump_correctness(dump, None) == [True, True, False, None, None]
    assert dump_correctness(dump.drop(columns="acc"), 0.5) == [True, False, False, False, True]
