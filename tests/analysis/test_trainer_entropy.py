"""trainer_entropy: the trainer's logged entropy next to HED's, with the tolerance warning."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from hed.analysis.trainer_entropy import compare_trainer_entropy


def test_difference_and_a_warning_beyond_the_tolerance(caplog):
    trainer = pd.DataFrame(
        {"run": ["r", "r", "r"], "step": [0, 8, 8], "trainer_entropy": [1.02, 0.9, 0.61]}
    )
    summary = pd.DataFrame({"run": ["r"] * 3, "step": [0, 8, 16], "mean_entropy": [1.0, 1.0, 0.8]})
    with caplog.at_level(logging.WARNING, logger="hed.analysis.trainer_entropy"):
        table = compare_trainer_entropy(
            trainer, summary, metric_key="actor/entropy", temperature=1.0, tolerance=0.05
        )
    assert table["trainer_entropy"].tolist()[:2] == [1.02, 0.61]  # the last value of step 8
    assert table["difference"].tolist()[:2] == pytest.approx([0.02, -0.39])
    assert table["within_tolerance"].tolist() == [True, False, None]
    assert pd.isna(table.loc[2, "trainer_entropy"])
    assert "run r step 8: the trainer's actor/entropy is 0.6100 nats" in caplog.text
    assert "step 0" not in caplog.text
    assert set(table["metric_key"]) == {"actor/entropy"} and set(table["hed_temperature"]) == {1.0}
