"""The metrics pipeline: nodes per run and source, a run with an in-memory catalog, the catalog."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pandas as pd
import pytest
from kedro.config import MissingConfigException, OmegaConfigLoader
from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import SequentialRunner
from kedro_datasets.pandas import CSVDataset

from hed.config import session
from hed.config.layout import layout_from_params
from hed.errors import ConfigError
from hed.hooks import ProjectHooks
from hed.pass1 import sources as pass1_sources
from hed.pass1 import wandb_online
from hed.pipelines.metrics import create_pipeline
from tests.pass1.test_pass1_sources import FakeApi, FakeRun

REPO_ROOT = Path(__file__).resolve().parents[2]
METRIC = pass1_sources.DEFAULT_METRIC_KEY
STEP = pass1_sources.DEFAULT_STEP_KEY


def _params(metrics_runs: dict) -> dict:
    return {
        "runs": {
            "dapo_with_clip": {"role": "with_clip", "checkpoint_root": "x", "steps": [20, 40, 60]},
            "smollm2_demo": {"role": "single", "checkpoint_root": "y", "steps": [0, 10]},
        },
        "metrics": {
            "wandb_defaults": {"metric_key": METRIC, "step_key": STEP},
            "runs": metrics_runs,
        },
    }


def _wandb_rows() -> list[dict]:
    rows = []
    for step in range(1, 51):
        rows.append({"_step": step, "actor/entropy": 1.0 / step, STEP: step})
        if step % 20 == 0 or step == 50:
            rows.append({"_step": step, METRIC: step / 100, STEP: step})
    return rows


def _summary_by_step() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run": ["smollm2_demo", "smollm2_demo"],
            "step": [0, 10],
            "n_tokens": [100, 120],
            "pass1_generated": [0.25, None],
        }
    )


def _outputs(folder: Path) -> dict[str, CSVDataset]:
    """``pass1`` and ``pass1_for_figures`` as CSV files, as in the catalog (unversioned here)."""
    return {
        name: CSVDataset(filepath=str(folder / f"{name}.csv"), save_args={"index": False})
        for name in ("pass1", "pass1_for_figures")
    }


def _run(params: dict, tmp_path: Path, monkeypatch, **extra) -> DataCatalog:
    api = FakeApi({"ent/proj/abc": FakeRun(_wandb_rows())})
    monkeypatch.setattr(wandb_online, "default_api_factory", lambda **kwargs: api)
    pipeline = create_pipeline(layout_from_params(params), params)
    catalog = DataCatalog(
        datasets={
            "params:metrics": MemoryDataset(params["metrics"]),
            "summary_by_step": MemoryDataset(_summary_by_step()),
            "dapo_with_clip.metrics_export": CSVDataset(
                filepath=str(tmp_path / "metrics" / "dapo_with_clip.csv"),
                save_args={"index": False},
            ),
            **_outputs(tmp_path),
            **extra,
        }
    )
    SequentialRunner().run(pipeline, catalog)
    return catalog


WANDB_SOURCE = {"wandb": {"entity": "ent", "project": "proj", "run_id": "abc"}}


def test_pipeline_has_nodes_per_run_and_source():
    params = _params(
        {
            "dapo_with_clip": {"sources": {**WANDB_SOURCE, "csv": {"path": "a.csv"}}},
            "smollm2_demo": {"sources": {"generated": {}}},
        }
    )
    pipeline = create_pipeline(layout_from_params(params), params)
    names = {node.name: node for node in pipeline.nodes}

    assert set(names) == {
        "dapo_with_clip.fetch_wandb_history",
        "dapo_with_clip.read_csv_pass1",
        "dapo_with_clip.collect_run_pass1",
        "smollm2_demo.collect_run_pass1",
        "combine_pass1",
        "select_pass1_for_figures",
    }
    assert names["dapo_with_clip.fetch_wandb_history"].outputs == ["dapo_with_clip.metrics_export"]
    assert "wandb" in names["dapo_with_clip.fetch_wandb_history"].tags
    assert "summary_by_step" not in names["dapo_with_clip.collect_run_pass1"].inputs
    assert "summary_by_step" in names["smollm2_demo.collect_run_pass1"].inputs
    assert pipeline.outputs() == {"pass1_for_figures"}


def test_pipeline_run_keeps_every_source_and_exports_the_wandb_history(
    tmp_path, monkeypatch, caplog
):
    params = _params(
        {
            "dapo_with_clip": {"sources": WANDB_SOURCE},
            "smollm2_demo": {"sources": {"generated": {}}},
        }
    )
    with caplog.at_level(logging.WARNING):
        catalog = _run(params, tmp_path, monkeypatch)

    pass1 = catalog.load("pass1")
    assert list(pass1.columns) == ["run", "step", "pass1", "source", "metric_key"]
    dapo = pass1[pass1["run"] == "dapo_with_clip"]
    # step 50 has no checkpoint and is kept; steps 20 and 40 match exactly
    assert dapo[["step", "pass1"]].values.tolist() == [[20, 0.2], [40, 0.4], [50, 0.5]]
    assert set(dapo["source"]) == {"wandb"} and set(dapo["metric_key"]) == {METRIC}
    demo = pass1[pass1["run"] == "smollm2_demo"]
    assert demo[["step", "pass1", "source"]].values.tolist() == [[0, 0.25, "generated"]]

    # checkpoint steps without pass@1 in the figure source are listed in a warning
    assert "run dapo_with_clip: no pass@1 from source wandb at checkpoint step(s) 60" in caplog.text
    assert (
        "run smollm2_demo: no pass@1 from source generated at checkpoint step(s) 10" in caplog.text
    )

    export = pd.read_csv(tmp_path / "metrics" / "dapo_with_clip.csv")
    assert export["step"].tolist() == [20, 40, 50]
    assert set(export["source"]) == {"wandb"}

    figures = catalog.load("pass1_for_figures")
    rows = figures[figures["run"] == "dapo_with_clip"]
    assert rows["step"].tolist() == [20, 40, 50, 60]
    assert rows["has_checkpoint"].tolist() == [True, True, False, True]
    assert rows["pass1"].isna().tolist() == [False, False, False, True]


def test_exported_history_feeds_the_csv_source_without_network(tmp_path, monkeypatch):
    params = _params({"dapo_with_clip": {"sources": WANDB_SOURCE}})
    first = _run(params, tmp_path, monkeypatch).load("pass1")

    def no_network(**kwargs):
        raise AssertionError("the csv source must not touch W&B")

    monkeypatch.setattr(wandb_online, "default_api_factory", no_network)
    export = str(tmp_path / "metrics" / "dapo_with_clip.csv")
    csv_params = _params({"dapo_with_clip": {"sources": {"csv": {"path": export}}}})
    pipeline = create_pipeline(layout_from_params(csv_params), csv_params)
    catalog = DataCatalog(
        datasets={
            "params:metrics": MemoryDataset(csv_params["metrics"]),
            **_outputs(tmp_path / "second"),
        }
    )
    SequentialRunner().run(pipeline, catalog)
    second = catalog.load("pass1")

    assert second[["run", "step", "pass1"]].equals(first[["run", "step", "pass1"]])
    assert set(second["source"]) == {"csv"}


def test_unknown_source_fails_when_the_pipeline_is_built():
    params = _params({"dapo_with_clip": {"sources": {"tensorboard": {}}}})
    with pytest.raises(ConfigError, match="unknown source 'tensorboard'"):
        create_pipeline(layout_from_params(params), params)


def test_base_environment_uses_generated_for_the_demo():
    loader = OmegaConfigLoader(
        conf_source=str(REPO_ROOT / "conf"), base_env="base", default_run_env="base"
    )
    params = loader["parameters"]
    config = pass1_sources.parse_run_config(params["metrics"], "smollm2_demo")
    assert [spec.name for spec in config.sources] == ["generated"]


def test_qae_repro_example_lists_wandb_for_both_runs():
    loader = OmegaConfigLoader(
        conf_source=str(REPO_ROOT / "conf"),
        base_env="base",
        default_run_env="base",
        env="qae_repro",
    )
    metrics = loader["parameters"]["metrics"]
    prompt_file = Path(loader["catalog"]["raw_prompts"]["filepath"]).name
    for run in ("dapo_with_clip", "dapo_without_clip"):
        config = pass1_sources.parse_run_config(metrics, run)
        assert config.figure_source == "wandb"
        key = config.wandb_source.options["metric_key"]
        assert key == "val-core/aime24/acc/mean@32"
        # the metric's benchmark (verl's val-core/<data_source>/...) is the prompt file's
        assert prompt_file == f"{key.split('/')[1]}.jsonl"


def test_catalog_resolves_the_metrics_datasets():
    loader = OmegaConfigLoader(
        conf_source=str(REPO_ROOT / "conf"), base_env="base", default_run_env="base"
    )
    catalog = DataCatalog.from_config(loader["catalog"])
    export = catalog.get("dapo_with_clip.metrics_export")
    assert isinstance(export, CSVDataset)
    assert str(export._filepath).endswith("data/01_raw/metrics/dapo_with_clip.csv")
    for name in ("pass1", "pass1_for_figures"):
        assert str(catalog.get(name)._filepath).endswith(f"data/04_feature/{name}.csv")
        assert catalog.get(name)._version is not None  # versioned


class _Context:
    """What the hook reads of a ``KedroContext``."""

    def __init__(self, credentials, env=None, project_path=REPO_ROOT):
        self.params = {"runs": {}}
        self.env = env
        self.project_path = project_path
        self._credentials = credentials
        self.runtime_params = {}

    @property
    def config_loader(self):
        return self

    def __getitem__(self, key):
        if key == "parameters":
            return self.params
        if key in ("globals", "catalog"):  # the hook also checks the catalog's keys
            return {}
        assert key == "credentials"
        if self._credentials is None:
            raise MissingConfigException("no credentials")
        return self._credentials


def test_hook_exports_the_credentials_key(monkeypatch, tmp_path):
    monkeypatch.setattr(session, "_session", session.active_session())  # restored afterwards
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    ProjectHooks().after_context_created(_Context(None, project_path=tmp_path))  # none: fine
    assert "WANDB_API_KEY" not in os.environ
    ProjectHooks().after_context_created(_Context({"wandb": {"api_key": "secret"}}))
    assert os.environ["WANDB_API_KEY"] == "secret"


def test_hook_reads_conf_local_credentials_for_another_env(monkeypatch, tmp_path):
    monkeypatch.setattr(session, "_session", session.active_session())
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "conf" / "local").mkdir(parents=True)
    (tmp_path / "conf" / "qae_repro").mkdir()
    (tmp_path / "conf" / "local" / "credentials.yml").write_text("wandb:\n  api_key: from-local\n")

    ProjectHooks().after_context_created(_Context(None, env="qae_repro", project_path=tmp_path))

    assert os.environ["WANDB_API_KEY"] == "from-local"


def test_the_nodes_give_the_same_tables_from_the_parsed_section_and_the_raw_dict(
    tmp_path, monkeypatch
):
    from hed.pass1.config import MetricsParams, metrics_params

    params = _params(
        {
            "dapo_with_clip": {"sources": WANDB_SOURCE},
            "smollm2_demo": {"sources": {"generated": {}}},
        }
    )
    raw = _run(params, tmp_path / "raw", monkeypatch)
    parsed = metrics_params(params["metrics"])
    assert isinstance(parsed, MetricsParams) and MetricsParams.of(parsed) is parsed
    typed = _run(
        params, tmp_path / "typed", monkeypatch, **{"params:metrics": MemoryDataset(parsed)}
    )
    for name in ("pass1", "pass1_for_figures"):
        assert (tmp_path / "raw" / f"{name}.csv").read_bytes() == (
            tmp_path / "typed" / f"{name}.csv"
        ).read_bytes()
    assert len(typed.load("pass1")) == len(raw.load("pass1")) == 4
