"""A small real study to publish: one run (``demo_run``, steps 0 and 20) reported end to end.

The reporting pipeline runs through the project's own catalog (conf/base/catalog.yml, every
path moved under a temporary project folder) with ``hed.hooks.ProvenanceHooks``: Figure 2 and
3 (tables and PNGs), ``resolved_config`` and the token report of the demo responses (real
SmolLM2 token ids, :mod:`tests.token_report_demo`). The merged records and responses of both
steps are saved as ``demo_run.step_<step>.token_records`` / ``.sequences``; pass@1 is said to
come from the W&B run ``hed-lab/dapo-study/run42`` (a parameter only: no network).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from kedro.io import DataCatalog

from hed.pipelines.publish import create_pipeline as create_publish
from hed.pipelines.reporting import create_pipeline as create_reporting

from .conftest import REPO_ROOT
from .pipelines.test_reporting import (
    make_records,
    pass1_for_figures,
    run_pipeline,
    summary_from,
    token_mass_from,
)
from .token_report_demo import RUN, STEPS, demo_prompts, demo_step

ENV = "demo_study"
INPUT_VERSION = "2025-03-01T00.00.00.000Z"
REPORT_VERSION = "2025-03-02T00.00.00.000Z"
PUBLISH_VERSION = "2025-03-03T00.00.00.000Z"
PASS1_RUN = "hed-lab/dapo-study/run42"
RUNS = {RUN: {"role": "single", "checkpoint_root": "/ckpt/demo", "steps": list(STEPS)}}


def study_params(publish: dict[str, Any] | None = None) -> dict[str, Any]:
    """The study's parameters (the reporting and publish sections it reads)."""
    return {
        "runs": RUNS,
        "reporting": {
            "strict": False,
            "top_n_words": 5,
            "fig3": {"steps": list(STEPS)},
            "figure2": {"panel_size": [3.5, 2.8], "dpi": 40},
            "figure3": {"panel_size": [2.6, 3.6], "dpi": 40},
            "token_report": {"enabled": True, "responses_per_step": 2},
        },
        "metrics": {"runs": {RUN: {"sources": {"wandb": {"run": PASS1_RUN}}}}},
        "publish": publish or {},
    }


def project_catalog(root: Path, params: dict[str, Any], save_version: str) -> DataCatalog:
    """conf/base/catalog.yml with every file under ``root`` and the parameters registered."""
    config = yaml.safe_load((REPO_ROOT / "conf/base/catalog.yml").read_text())
    for entry in config.values():
        if isinstance(entry, dict) and "filepath" in entry:
            path = entry["filepath"].replace("${globals:data_root}", "data")
            entry["filepath"] = str(root / path)
    catalog = DataCatalog.from_config(config, save_version=save_version)
    catalog["parameters"] = params
    for key, value in params.items():
        catalog[f"params:{key}"] = value
    return catalog


def report_demo_study(root: Path, tokenizer: Any, smollm2_dir: Path) -> None:
    """Write the study's inputs, then run the reporting pipeline once (``REPORT_VERSION``)."""
    params = study_params()
    inputs = project_catalog(root, params, INPUT_VERSION)
    thresholds = []
    for step in STEPS:
        records, sequences = demo_step(tokenizer, step)
        inputs.save(f"{RUN}.step_{step}.token_records", records)
        inputs.save(f"{RUN}.step_{step}.sequences", sequences)
        thresholds.append(
            {
                "run": RUN,
                "step": step,
                "top_entropy_frac": 0.2,
                "n_tokens": records.num_rows,
                "n_high_entropy": int(sum(records.column("is_high_entropy").to_pylist())),
                "threshold": sequences.attrs["threshold"],
            }
        )
    words = make_records(runs=RUNS, seed=3, n_tokens=200)
    inputs.save("entropy_thresholds", pd.DataFrame(thresholds))
    inputs.save("summary_by_step", summary_from(words))
    inputs.save("token_probability_mass_high_entropy", token_mass_from(words))
    inputs.save("pass1_for_figures", pass1_for_figures(runs=RUNS))
    inputs.save("prompts", demo_prompts())
    inputs.save(
        "checkpoints",
        {
            RUN: {
                "role": "single",
                "checkpoint_root": "/ckpt/demo",
                "steps": {str(s): {"model_dir": str(smollm2_dir)} for s in STEPS},
            }
        },
    )
    catalog = project_catalog(root, params, REPORT_VERSION)
    pipeline = create_reporting(params=params)
    run_pipeline(pipeline, catalog, env=ENV, run_id=REPORT_VERSION, project=root)


def publish_demo_study(root: Path, publish: dict[str, Any]) -> DataCatalog:
    """Run the publish pipeline of the study with ``publish`` as ``params:publish``."""
    params = study_params(publish)
    catalog = project_catalog(root, params, PUBLISH_VERSION)
    pipeline = create_publish(params=params)
    run_pipeline(pipeline, catalog, env=ENV, run_id=PUBLISH_VERSION, project=root)
    return catalog
