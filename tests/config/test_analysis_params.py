"""The typed ``dynamics`` and ``analyses`` sections: defaults, one-line errors, handed parsed."""

from __future__ import annotations

import pytest
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Node, Pipeline

from hed.analysis.covariance import CovarianceSettings
from hed.config.analysis_params import (
    AnalysesParams,
    DeltaLogprobSettings,
    DynamicsFigures,
    DynamicsParams,
    MismatchSettings,
    TrainerEntropySettings,
    analyses_params,
    dynamics_params,
)
from hed.errors import ConfigError
from hed.hooks.parameters import TYPED_SECTIONS, hand_to_nodes, parsed_sections

from ..conftest import field_defaults


def test_dynamics_defaults():
    parsed = dynamics_params(None)
    assert parsed == dynamics_params({}) == DynamicsParams()
    assert parsed.estimators == ("grpo", "dr_grpo")
    assert parsed.epsilon == 1e-6
    assert parsed.covariance == CovarianceSettings(0.002, (1.0, 5.0), 65536)
    assert parsed.figures == DynamicsFigures(panel_size=(3.2, 2.2), dpi=200)
    assert DynamicsParams.of(parsed) is parsed
    assert field_defaults(DynamicsParams) == {
        "estimators": ("grpo", "dr_grpo"),
        "epsilon": 1e-6,
        "clip_cov_band": (1.0, 5.0),
        "kl_cov_ratio": 0.002,
        "batch_records": 65536,
        "figures": DynamicsFigures(panel_size=(3.2, 2.2), dpi=200),
    }


def test_dynamics_values_are_read():
    parsed = dynamics_params(
        {"estimators": "dr_grpo", "epsilon": 1, "kl_cov_ratio": 1, "clip_cov_band": [0, 2],
         "batch_records": 7, "figures": {"panel_size": [3, 2], "dpi": 72}}
    )  # fmt: skip
    assert parsed == DynamicsParams(
        estimators=("dr_grpo",), epsilon=1.0, kl_cov_ratio=1.0, clip_cov_band=(0.0, 2.0),
        batch_records=7, figures=DynamicsFigures(panel_size=(3.0, 2.0), dpi=72),
    )  # fmt: skip
    assert parsed.covariance == CovarianceSettings(1.0, (0.0, 2.0), 7)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1], "parameter `dynamics` must be a mapping (parameters_dynamics.yml), got [1]"),
        ({"estimators": ["ppo"]},
         "dynamics.estimators must be a list of distinct names from ['grpo', 'dr_grpo'], "
         "got ['ppo']"),
        ({"epsilon": 0}, "dynamics.epsilon must be a number > 0, got 0"),
        ({"epsilon": True}, "dynamics.epsilon must be a number > 0, got True"),
        ({"kl_cov_ratio": 2}, "dynamics.kl_cov_ratio must be a number in (0, 1], got 2"),
        ({"clip_cov_band": [5, 1]},
         "dynamics.clip_cov_band must be [lo, hi] with lo < hi, got [5, 1]"),
        ({"figures": 3}, "dynamics.figures must be a mapping (`figures: {...}`), got 3"),
        ({"figures": {"panel_size": [3]}},
         "dynamics.figures.panel_size must be [width, height] in inches, both > 0 and at "
         "most 20, got [3]"),
        ({"figures": {"dpi": 9}}, "dynamics.figures.dpi must be an integer from 10 to 1200, got 9"),
    ],
)  # fmt: skip
def test_bad_dynamics_values_are_one_line(value, message):
    with pytest.raises(ConfigError) as caught:
        dynamics_params(value)
    assert str(caught.value) == message


def test_analyses_defaults():
    parsed = analyses_params(None)
    assert parsed == analyses_params({}) == AnalysesParams()
    assert parsed.reference_run is None and parsed.dpi == 200
    assert parsed.mismatch == MismatchSettings(dtype="bfloat16", ratio_bounds=(0.5, 2.0))
    assert parsed.trainer_entropy == TrainerEntropySettings(
        metric_key="actor/entropy", tolerance_nats=0.05
    )
    assert parsed.delta_logprob == DeltaLogprobSettings(top_n=20, min_count=2)
    assert AnalysesParams.of(parsed) is parsed
    assert field_defaults(AnalysesParams) == {
        "reference_run": None,
        "mismatch": MismatchSettings(dtype="bfloat16", ratio_bounds=(0.5, 2.0)),
        "trainer_entropy": TrainerEntropySettings(metric_key="actor/entropy", tolerance_nats=0.05),
        "delta_logprob": DeltaLogprobSettings(top_n=20, min_count=2),
        "dpi": 200,
        "advantage_shaping": None,  # null: not tabulated (conf/base sets it)
    }


def test_analyses_values_are_read():
    parsed = analyses_params(
        {"reference_run": "b", "dpi": 40,
         "mismatch": {"dtype": "float32", "ratio_bounds": [0.8, 1.25]},
         "trainer_entropy": {"metric_key": "train/entropy", "tolerance_nats": 0},
         "delta_logprob": {"top_n": 3, "min_count": 1}}
    )  # fmt: skip
    assert parsed == AnalysesParams(
        reference_run="b",
        mismatch=MismatchSettings(dtype="float32", ratio_bounds=(0.8, 1.25)),
        trainer_entropy=TrainerEntropySettings(metric_key="train/entropy", tolerance_nats=0.0),
        delta_logprob=DeltaLogprobSettings(top_n=3, min_count=1),
        dpi=40,
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x", "parameter `analyses` must be a mapping (parameters_analyses.yml), got 'x'"),
        ({"dpi": 5}, "analyses.dpi must be an integer from 10 to 1200, got 5"),
        ({"mismatch": {"dtype": "fp8"}},
         "analyses.mismatch.dtype must be one of float32, bfloat16, float16, got 'fp8'"),
        ({"mismatch": {"ratio_bounds": [2.0, 0.5]}},
         "analyses.mismatch.ratio_bounds must be [lo, hi] with lo < hi, got [2.0, 0.5]"),
        ({"mismatch": [1]},
         "analyses.mismatch must be a mapping (`mismatch: {...}`), got [1]"),
        ({"trainer_entropy": {"metric_key": ""}},
         "analyses.trainer_entropy.metric_key must be a non-empty string, got ''"),
        ({"trainer_entropy": {"tolerance_nats": -0.1}},
         "analyses.trainer_entropy.tolerance_nats must be a number >= 0, got -0.1"),
        ({"delta_logprob": {"top_n": 0}},
         "analyses.delta_logprob.top_n must be a positive integer, got 0"),
        ({"delta_logprob": {"min_count": 1.5}},
         "analyses.delta_logprob.min_count must be a positive integer, got 1.5"),
    ],
)  # fmt: skip
def test_bad_analyses_values_are_one_line(value, message):
    with pytest.raises(ConfigError) as caught:
        analyses_params(value)
    assert str(caught.value) == message


def test_the_pre_run_check_hands_dynamics_and_analyses_parsed():
    seen = {}

    def node(dynamics, analyses):
        seen.update(dynamics=dynamics, analyses=analyses)
        return 1

    pipeline = Pipeline([Node(node, ["params:dynamics", "params:analyses"], "out", name="n")])
    catalog = DataCatalog(
        {
            "params:dynamics": MemoryDataset({"epsilon": 0.5}),
            "params:analyses": MemoryDataset({"delta_logprob": {"top_n": 4}}),
        }
    )
    assert {"dynamics", "analyses"} <= set(TYPED_SECTIONS)
    parsed = parsed_sections(pipeline, catalog)
    assert list(parsed) == ["dynamics", "analyses"]
    assert hand_to_nodes(catalog, parsed) == ["params:dynamics", "params:analyses"]
    assert catalog.load("params:dynamics") == DynamicsParams(epsilon=0.5)
    assert catalog.load("params:analyses").delta_logprob == DeltaLogprobSettings(
        top_n=4, min_count=2
    )
    bad = DataCatalog({"params:dynamics": MemoryDataset({"epsilon": -1}),
                       "params:analyses": MemoryDataset(None)})  # fmt: skip
    with pytest.raises(ConfigError, match=r"^dynamics\.epsilon must be a number > 0"):
        parsed_sections(pipeline, bad)


def test_a_reference_run_that_is_not_a_run_is_refused_before_the_first_node():
    """The runs comparison is the chain's last node: a misspelt reference_run must not cost
    the generation before it."""
    pipeline = Pipeline([Node(lambda a, r: 1, ["params:analyses", "params:runs"], "out")])
    runs = {"dapo_with_clip": {"checkpoint_root": "c", "steps": [0]},
            "dapo_without_clip": {"checkpoint_root": "d", "steps": [0]}}  # fmt: skip

    def catalog(reference):
        return DataCatalog(
            {
                "params:analyses": MemoryDataset({"reference_run": reference}),
                "params:runs": MemoryDataset(runs),
            }
        )

    with pytest.raises(ConfigError) as refused:
        parsed_sections(pipeline, catalog("nope"))
    assert str(refused.value) == (
        "analyses.reference_run 'nope' is not a run of `runs` "
        "(runs: dapo_with_clip, dapo_without_clip); set it to one of them or null"
    )
    parsed = parsed_sections(pipeline, catalog("dapo_without_clip"))
    assert parsed["analyses"].reference_run == "dapo_without_clip"
    assert parsed_sections(pipeline, catalog(None))["analyses"].reference_run is None
