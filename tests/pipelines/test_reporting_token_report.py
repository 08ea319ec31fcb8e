"""The reporting pipeline's ``build_token_report`` node → ``token_report_html``.

Run through the project's own catalog entries (conf/base/catalog.yml, paths moved to a
temporary folder): the demo's merged records and sequences saved as versioned
``<run>.step_<step>.token_records`` / ``.sequences``, ``checkpoints`` pointing at the real
SmolLM2 folder (its tokenizer names the alternatives), ``entropy_thresholds`` and ``prompts``.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from kedro.io import DataCatalog
from kedro.runner import SequentialRunner

from hed.core.token_text import DECODE_KWARGS
from hed.pipelines.reporting import create_pipeline

from ..conftest import REPO_ROOT
from ..token_report_demo import RUN, STEPS, demo_prompts, demo_step

VERSION = "2025-01-01T00.00.00.000Z"


def params_for(token_report):
    return {
        "runs": {RUN: {"role": "single", "checkpoint_root": "/ckpt/demo", "steps": list(STEPS)}},
        "reporting": {"strict": False, "token_report": token_report},
    }


def project_catalog(root, save_version=VERSION) -> DataCatalog:
    config = yaml.safe_load((REPO_ROOT / "conf/base/catalog.yml").read_text())
    for entry in config.values():
        if isinstance(entry, dict) and "filepath" in entry:
            entry["filepath"] = str(
                root / entry["filepath"].replace("${globals:data_root}", "data")
            )
    return DataCatalog.from_config(config, save_version=save_version)


@pytest.fixture(scope="module")
def saved_inputs(tmp_path_factory, tokenizer, smollm2_dir):
    root = tmp_path_factory.mktemp("token_report_node")
    catalog = project_catalog(root)
    thresholds = []
    for step in STEPS:
        records, seqs = demo_step(tokenizer, step)
        catalog.save(f"{RUN}.step_{step}.token_records", records)
        catalog.save(f"{RUN}.step_{step}.sequences", seqs)
        thresholds.append(
            {
                "run": RUN,
                "step": step,
                "top_entropy_frac": 0.2,
                "threshold": seqs.attrs["threshold"],
            }
        )
    catalog.save("entropy_thresholds", pd.DataFrame(thresholds))
    catalog.save("prompts", demo_prompts())
    catalog.save(
        "checkpoints",
        {
            RUN: {
                "role": "single",
                "checkpoint_root": "/ckpt/demo",
                "steps": {str(s): {"model_dir": str(smollm2_dir)} for s in STEPS},
            }
        },
    )
    return root, pd.DataFrame(thresholds)


def run_node(root, params) -> str:
    catalog = project_catalog(root, save_version="2025-01-02T00.00.00.000Z")
    catalog["params:reporting"] = params["reporting"]
    pipeline = create_pipeline(params=params).only_nodes("build_token_report")
    SequentialRunner().run(pipeline, catalog)
    return project_catalog(root).load("token_report_html")


def page_data(page: str) -> dict:
    start = '<script type="application/json" id="hed-data">'
    blob = page.split(start, maxsplit=1)[1].split("</script>", maxsplit=1)[0]
    return json.loads(blob)


def test_node_reads_every_step_and_writes_the_versioned_page(saved_inputs, tokenizer, smollm2_dir):
    root, thresholds = saved_inputs
    params = params_for({"responses_per_step": 5, "seed": 3})
    page = run_node(root, params)
    data = page_data(page)
    (run,) = data["runs"]
    files = list((root / "data/08_reporting/token_report/token_report.html").glob("*/*.html"))
    assert [f.parent.name for f in files] == ["2025-01-02T00.00.00.000Z"]
    assert files[0].read_bytes().decode("utf-8") == page
    assert [1, 1] in run["keys"] and "\u00d7" in page  # "×" of response (1, 1): not ASCII
    assert run["run"] == RUN and [s["step"] for s in run["steps"]] == list(STEPS)
    assert [s["threshold"] for s in run["steps"]] == thresholds["threshold"].tolist()
    assert [s["n_shown"] for s in run["steps"]] == [5, 5]
    assert run["vocab_source"] == f"the tokenizer of {smollm2_dir}"
    for tid, text in list(run["vocab"].items())[:50]:
        assert text == tokenizer.decode([int(tid)], **DECODE_KWARGS)
    assert (
        run["prompts"][str(run["keys"][0][0])]["text"]
        == demo_prompts()["prompt"][run["keys"][0][0]]
    )


def test_node_is_in_the_pipeline_only_when_configured():
    nodes = {n.name: n for n in create_pipeline(params=params_for({"enabled": True})).nodes}
    node = nodes["build_token_report"]
    assert node.outputs == ["token_report_html"]
    assert node.inputs[:4] == ["params:reporting", "checkpoints", "entropy_thresholds", "prompts"]
    assert node.inputs[4:] == [
        f"{RUN}.step_{s}.{name}" for s in STEPS for name in ("sequences", "token_records")
    ]
    off = create_pipeline(params=params_for({"enabled": False}))
    assert "build_token_report" not in {n.name for n in off.nodes}
    absent = create_pipeline(params={"runs": params_for(None)["runs"]})
    assert "build_token_report" not in {n.name for n in absent.nodes}


def test_the_node_draws_the_same_page_from_the_raw_dict_and_from_the_parsed_section(
    saved_inputs,
):
    """The pre-run check hands build_token_report a ReportingParams (its token_report parsed
    once); a notebook passes the dict: the page is the same string either way."""
    from hed.config.params import ReportingParams
    from hed.pipelines.reporting.nodes import build_token_report

    root, _ = saved_inputs
    catalog = project_catalog(root)
    reporting = params_for({"responses_per_step": 3, "seed": 1})["reporting"]
    tables = [
        catalog.load(f"{RUN}.step_{s}.{n}") for s in STEPS for n in ("sequences", "token_records")
    ]
    inputs = (
        catalog.load("checkpoints"),
        catalog.load("entropy_thresholds"),
        catalog.load("prompts"),
    )
    run_steps = [(RUN, "single", s) for s in STEPS]
    raw = build_token_report(reporting, *inputs, *tables, run_steps=run_steps)
    parsed = build_token_report(
        ReportingParams.of(reporting), *inputs, *tables, run_steps=run_steps
    )
    assert raw == parsed
    assert page_data(raw)["options"]["responses_per_step"] == 3
