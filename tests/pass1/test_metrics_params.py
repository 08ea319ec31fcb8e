"""``params:metrics`` parsed once into :class:`hed.pass1.config.MetricsParams`: its defaults,
the one-line refusal of a bad value, and the pre-run check handing it to the nodes."""

from __future__ import annotations

import pytest
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Node, Pipeline

from hed.errors import ConfigError
from hed.hooks.parameters import hand_to_nodes, parsed_sections
from hed.pass1.config import (
    MetricsParams,
    RunPass1Config,
    WandbDefaults,
    metrics_params,
    parse_run_config,
)

from ..conftest import field_defaults


def test_the_defaults_of_an_empty_section():
    parsed = metrics_params(None)
    assert parsed == MetricsParams() == metrics_params({})
    assert parsed.wandb_defaults == WandbDefaults(
        metric_key="val-core/aime2025/acc/mean@1", step_key="training/global_step"
    )
    assert parsed.run("any") == RunPass1Config(run="any", sources=(), figure_source=None)
    # the model declares them once (the schema and the reference are generated from it)
    assert field_defaults(WandbDefaults) == {
        "metric_key": "val-core/aime2025/acc/mean@1",
        "step_key": "training/global_step",
    }
    assert field_defaults(MetricsParams) == {"wandb_defaults": WandbDefaults(), "runs": {}}


def test_every_run_is_parsed_with_the_wandb_defaults_filled_in():
    raw = {
        "wandb_defaults": {"metric_key": "val/acc", "step_key": None},
        "runs": {
            "a": {"sources": {"wandb_offline": {"path": "/w"}, "generated": {}}},
            "b": {"sources": {"csv": {"path": "b.csv"}}, "figure_source": "csv"},
        },
    }
    parsed = metrics_params(raw)
    assert list(parsed.runs) == ["a", "b"]
    offline = parsed.run("a").source("wandb_offline").options
    assert (offline["metric_key"], offline["step_key"]) == ("val/acc", "training/global_step")
    assert parsed.run("b").figure_source == "csv"
    assert parse_run_config(parsed, "a") is parsed.run("a")  # parsed: returned as it is
    assert parse_run_config(raw, "a") == parsed.run("a")
    assert list(metrics_params(raw, runs=["b"]).runs) == ["b"]  # a run outside `runs`: ignored


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"wandb_defaults": {"metric_key": 5}},
            "metrics.wandb_defaults.metric_key must be a non-empty string, got 5",
        ),
        (
            {"wandb_defaults": ["val/acc"]},
            "metrics.wandb_defaults must be a mapping (`wandb_defaults: {...}`), got ['val/acc']",
        ),
        (
            {"runs": {"a": {"sources": {"csv": {"path": "x.csv", "scale": "ratio"}}}}},
            "metrics.runs.a.sources.csv.scale is 'ratio': use fraction (pass@1 in [0, 1]) or "
            "percent (in [0, 100], divided by 100)",
        ),
        ("pass1", "parameter `metrics` must be a mapping (parameters_metrics.yml), got 'pass1'"),
    ],
)
def test_a_bad_value_is_refused_in_one_line(raw, message):
    with pytest.raises(ConfigError) as caught:
        metrics_params(raw)
    assert str(caught.value) == message


def test_the_pre_run_check_hands_the_parsed_section_to_the_nodes():
    raw = {"runs": {"r": {"sources": {"generated": {}}}, "other": {"sources": {"generated": {}}}}}
    pipeline = Pipeline([Node(lambda m: 1, "params:metrics", "out", name="reads_metrics")])
    catalog = DataCatalog(
        {
            "params:metrics": MemoryDataset(raw),
            "params:runs": MemoryDataset({"r": {"checkpoint_root": "x", "steps": [0]}}),
        }
    )
    parsed = parsed_sections(pipeline, catalog)
    assert list(parsed) == ["metrics"]
    assert hand_to_nodes(catalog, parsed) == ["params:metrics"]
    handed = catalog.load("params:metrics")
    assert isinstance(handed, MetricsParams) and list(handed.runs) == ["r"]
    assert handed.run("r").sources[0].name == "generated"
