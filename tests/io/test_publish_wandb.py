"""Publishing a study to W&B (hed.io.wandb_publish): the demo study logged offline and read back
with wandb's own reader (``wandb leet inspect --json`` of the run's transaction log)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from hed.config.publish import WandbPublishParams
from hed.errors import CredentialsError, HEDError, InputDataError
from hed.io import wandb_publish
from hed.io.study_bundle import check_bundle_files, plan_bundle
from hed.io.wandb_publish import ARTIFACT_TYPE, MANIFEST_NAME, log_study

from ..pipelines.test_reporting import _no_git  # noqa: F401 - autouse: no git in tests
from ..study_demo import (
    ENV,
    PASS1_RUN,
    REPORT_VERSION,
    RUN,
    publish_demo_study,
)

PROJECT = "hed-publish-test"


def _one_line(info: pytest.ExceptionInfo) -> str:
    assert isinstance(info.value, HEDError)
    assert "\n" not in str(info.value)
    return str(info.value)


def read_offline_run(run_dir: Path) -> dict[str, list[dict]]:
    """Records of an offline run by type (run, history, artifact, ...), read by wandb itself."""
    (log,) = run_dir.glob("run-*.wandb")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(log)],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    records: dict[str, list[dict]] = {}
    for line in out.stdout.splitlines():
        record = json.loads(line)
        records.setdefault(record["type"], []).append(record[record["type"]])
    return records


@pytest.fixture
def offline_env(tmp_path, monkeypatch):
    """W&B offline, its folders in ``tmp_path``; no key, nothing read from ~/.config/wandb."""
    for name, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb_config"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb_cache"),
        "WANDB_DATA_DIR": str(tmp_path / "wandb_data"),
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return tmp_path


def _latest(root: Path, relative: str) -> Path:
    """The file the reporting run wrote for a versioned dataset's ``relative`` path."""
    return root / "data" / relative / REPORT_VERSION / Path(relative).name


def test_demo_study_logged_offline_reads_back_with_wandb_own_reader(demo_study, offline_env):
    root = demo_study
    wandb_dir = offline_env / "runs"
    catalog = publish_demo_study(
        root, {"wandb": {"enabled": True, "project": PROJECT, "mode": "offline",
                         "dir": str(wandb_dir), "tags": ["demo"]}},
    )  # fmt: skip
    receipt = catalog.load("wandb_publication")
    run_dir = Path(receipt["run_dir"])
    assert receipt["mode"] == "offline" and receipt["url"] is None
    assert run_dir.parent == wandb_dir / "wandb" and run_dir.name.startswith("offline-run-")
    records = read_offline_run(run_dir)

    resolved = json.loads(_latest(root, "08_reporting/metadata/resolved_config.json").read_text())
    assert resolved["run_id"] == REPORT_VERSION and resolved["env"] == ENV
    (run,) = records["run"][-1:]
    config = {k: v for k, v in run["config"]["update"].items() if k != "_wandb"}
    assert config == resolved  # the run's config is HED's resolved configuration, exactly
    assert run["project"] == PROJECT and run["display_name"] == f"hed-{ENV}"
    assert f"[{PASS1_RUN}](https://wandb.ai/hed-lab/dapo-study/runs/run42)" in run["notes"]
    assert REPORT_VERSION in run["notes"] and "c" * 12 in run["notes"]

    # one history row: both figures as images, CSV tables as tables, the token report as HTML
    (row,) = [h["item"] for h in records["history"]]
    for stem in (
        "figure2_anthropomorphic_high_entropy_vs_pass1",
        "figure3_high_entropy_token_probability",
    ):
        source = _latest(root, f"08_reporting/figures/{stem}.png").read_bytes()
        assert row[f"figures/{stem}._type"] == "image-file"
        assert row[f"figures/{stem}.sha256"] == hashlib.sha256(source).hexdigest()
        assert (run_dir / "files" / row[f"figures/{stem}.path"]).read_bytes() == source
    table_csv = _latest(root, "08_reporting/tables/figure3_high_entropy_token_probability.csv")
    key = "tables/figure3_high_entropy_token_probability"
    assert row[f"{key}._type"] == "table-file"
    logged = json.loads((run_dir / "files" / row[f"{key}.path"]).read_text())
    expected = pd.read_csv(table_csv)
    assert logged["columns"] == list(expected.columns)
    assert len(logged["data"]) == len(expected) > 0
    assert [r[logged["columns"].index("word")] for r in logged["data"]] == expected["word"].tolist()
    assert row["tables/summary_by_step._type"] == "table-file"  # an input table too
    page = _latest(root, "08_reporting/token_report/token_report.html").read_bytes()
    assert row["pages/token_report._type"] == "html-file"
    assert (run_dir / "files" / row["pages/token_report.path"]).read_bytes() == page

    # the artifact: every file at its bundle path, digests of the files as they are on disk
    (artifact,) = [a for a in records["artifact"] if a["type"] == ARTIFACT_TYPE]
    assert artifact["name"] == f"hed-{ENV}" and artifact["finalize"] is True
    contents = {entry["path"]: entry for entry in artifact["manifest"]["contents"]}
    bundle_paths = {
        "figures/figure2_anthropomorphic_high_entropy_vs_pass1.png",
        "figures/figure3_high_entropy_token_probability.png",
        "tables/figure2_single_run_diagnostic.csv",
        "tables/figure3_high_entropy_token_probability.csv",
        "tables/summary_by_step.csv",
        "tables/token_probability_mass_high_entropy.csv",
        "tables/pass1_for_figures.csv",
        "tables/entropy_thresholds.csv",
        "config/resolved_config.json",
        "config/checkpoints.json",
        "pages/token_report.html",
        *(f"records/{RUN}/step_{s}.{t}.parquet" for s in (0, 20)
          for t in ("token_records", "sequences")),
        MANIFEST_NAME,
    }  # fmt: skip
    assert set(contents) == bundle_paths
    manifest = json.loads(Path(contents[MANIFEST_NAME]["local_path"]).read_text())
    assert manifest["run_id"] == REPORT_VERSION and manifest["study"] == ENV
    assert manifest["pass1_runs"] == [
        {"run": RUN, "source": "wandb", "path": PASS1_RUN,
         "url": "https://wandb.ai/hed-lab/dapo-study/runs/run42"}
    ]  # fmt: skip
    for path, entry in contents.items():
        if path == MANIFEST_NAME:
            continue
        data = Path(entry["local_path"]).read_bytes()  # staged copy (or the file itself)
        assert hashlib.sha256(data).hexdigest() == manifest["files"][path]["sha256"], path
        md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
        assert entry["digest"] == md5 and int(entry["size"]) == len(data), path
    # records are referenced in place (GBs in a real study), not copied to the staging area
    records_path = f"records/{RUN}/step_20.token_records.parquet"
    version = manifest["files"][records_path]["version"]
    assert version == "2025-03-01T00.00.00.000Z"
    assert contents[records_path]["local_path"] == str(
        root / f"data/03_primary/token_records/{RUN}/step_20.parquet/{version}/step_20.parquet"
    )
    assert json.loads(artifact["metadata"])["git_commit"] == "c" * 40
    assert "latest" in artifact["aliases"] and f"run-{REPORT_VERSION}" in artifact["aliases"]
    # and the local publication beside it
    assert (root / "results/final_artifacts" / ENV / "MANIFEST.json").is_file()


def _bundle(root: Path):
    resolved = json.loads(_latest(root, "08_reporting/metadata/resolved_config.json").read_text())
    return plan_bundle(resolved, {}, study=ENV, include_records=False)


def test_online_without_a_key_stops_before_a_run_opens(demo_study, offline_env, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("NETRC", str(offline_env / "no_netrc"))
    settings = WandbPublishParams(enabled=True, project=PROJECT, dir=str(offline_env / "runs"))
    with pytest.raises(CredentialsError) as info:
        log_study(_bundle(demo_study), settings)
    assert "no W&B API key to publish" in _one_line(info) and "wandb login" in str(info.value)
    assert not (offline_env / "runs").exists()


def test_online_without_network_stops_in_one_line_before_a_run_opens(
    demo_study, offline_env, monkeypatch
):
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens on port 9
    settings = WandbPublishParams(
        enabled=True, project=PROJECT, mode="online", dir=str(offline_env / "runs")
    )
    with pytest.raises(InputDataError) as info:
        log_study(_bundle(demo_study), settings)
    message = _one_line(info)
    assert "cannot reach W&B at 127.0.0.1:9" in message and "wandb sync" in message
    assert not (offline_env / "runs").exists()


def test_a_refused_key_stops_before_a_run_opens(demo_study, offline_env, monkeypatch):
    import wandb

    def refuse(**kwargs):
        raise wandb.errors.AuthenticationError("API key must be 40 characters long, yours was 3")

    monkeypatch.setenv("WANDB_API_KEY", "bad")
    monkeypatch.setattr("hed.pass1.credentials.check_reachable", lambda url: None)
    monkeypatch.setattr(wandb, "login", refuse)
    settings = WandbPublishParams(enabled=True, project=PROJECT, mode="online",
                                  dir=str(offline_env / "runs"))  # fmt: skip
    with pytest.raises(CredentialsError) as info:
        log_study(_bundle(demo_study), settings)
    assert "refused the API key (API key must be 40 characters" in _one_line(info)
    assert not (offline_env / "runs").exists()


def test_a_missing_file_stops_before_a_run_opens(demo_study, offline_env, tmp_path):
    bundle = _bundle(demo_study)
    gone = bundle.files[0]
    moved = tmp_path / "moved"
    Path(gone.source).rename(moved)
    try:
        settings = WandbPublishParams(enabled=True, project=PROJECT, mode="offline",
                                      dir=str(offline_env / "runs"))  # fmt: skip
        with pytest.raises(InputDataError) as info:
            log_study(bundle, settings)
        assert f"{gone.dataset} ({gone.source}) do not exist; nothing was uploaded" in _one_line(
            info
        )
        assert not (offline_env / "runs").exists()
    finally:
        moved.rename(gone.source)
    check_bundle_files(bundle)


def test_a_failure_while_logging_leaves_no_artifact(demo_study, offline_env, monkeypatch):
    def broken(bundle, manifest_file, wandb):
        raise OSError("disk full")

    monkeypatch.setattr(wandb_publish, "_artifact", broken)
    settings = WandbPublishParams(enabled=True, project=PROJECT, mode="offline",
                                  dir=str(offline_env / "runs"))  # fmt: skip
    with pytest.raises(HEDError) as info:
        log_study(_bundle(demo_study), settings)
    assert "holds no artifact" in _one_line(info) and "disk full" in str(info.value)
    (run_dir,) = (offline_env / "runs" / "wandb").glob("offline-run-*")
    records = read_offline_run(run_dir)
    assert not [a for a in records.get("artifact", []) if a["type"] == ARTIFACT_TYPE]
    assert records["exit"][-1]["exit_code"] == 1  # the run is marked failed


def _publish_now(root: Path, publish: dict) -> tuple[Any, Any, str]:
    """Run the publish pipeline as a session would, run id = now (Kedro's session id)."""
    from kedro.io.core import generate_timestamp

    from hed.pipelines.publish import create_pipeline

    from ..pipelines.test_reporting import run_pipeline
    from ..study_demo import project_catalog, study_params

    version = generate_timestamp()
    params = study_params(publish)
    catalog = project_catalog(root, params, version)
    pipeline = create_pipeline(params=params)
    run_pipeline(pipeline, catalog, env=ENV, run_id=version, project=root)
    return catalog, pipeline, version


def test_a_publish_rerun_lists_what_it_wrote_and_removes_the_killed_attempt(
    demo_study, offline_env, monkeypatch, caplog
):
    import wandb

    from hed.hooks import ProvenanceHooks

    wandb_dir = offline_env / "runs"
    publish = {"wandb": {"enabled": True, "project": PROJECT, "mode": "offline",
                         "dir": str(wandb_dir)}}  # fmt: skip

    def killed(*args, **kwargs):  # the process is stopped while the run is open
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(wandb_publish, "_media", killed)
        with pytest.raises(KeyboardInterrupt):
            _publish_now(demo_study, publish)
    wandb.finish(exit_code=255)
    (leftover,) = (wandb_dir / "wandb").glob("offline-run-*")

    catalog, pipeline, version = _publish_now(demo_study, publish)
    with caplog.at_level("INFO", logger="hed.hooks"):
        ProvenanceHooks().after_pipeline_run(
            run_params={"run_id": version}, pipeline=pipeline, catalog=catalog
        )
    (run_dir,) = (wandb_dir / "wandb").glob("offline-run-*")
    assert run_dir != leftover and not leftover.exists()
    receipt_file = demo_study / "data/08_reporting/publications/wandb.json"
    receipt = json.loads(receipt_file.read_text())
    assert receipt["run_dir"] == str(run_dir) and receipt["removed_attempts"] == [str(leftover)]
    assert not receipt_file.with_name("wandb.attempt.json").exists()
    artifacts = demo_study / "results/final_artifacts" / ENV
    n_files = len(json.loads((artifacts / "MANIFEST.json").read_text())["files"])
    (summary,) = [r.getMessage() for r in caplog.records if "Run summary" in r.getMessage()]
    assert summary.splitlines() == [
        "Run summary: published",
        f"  artifacts folder {artifacts} ({n_files} file(s) + MANIFEST.json)",
        f"  W&B offline run folder {run_dir} (upload it with `wandb sync {run_dir}`)",
        f"  removed {leftover} (the W&B run folder of a publish that was killed)",
        f"  receipt {receipt_file}",
    ]
    assert n_files >= 5


def test_the_summary_names_the_hub_commit(tmp_path):
    from kedro.io import DataCatalog
    from kedro.io.core import generate_timestamp

    from hed.io.publication_datasets import HubCommitDataset
    from hed.io.publishing import published_by_run

    version = generate_timestamp()
    receipt = tmp_path / "hub.json"
    url = "https://huggingface.co/datasets/lab/study/commit/abc123"
    receipt.write_text(json.dumps({"study": "s", "commit_url": url}))
    catalog = DataCatalog({"hub_publication": HubCommitDataset(filepath=str(receipt))})
    assert published_by_run(catalog, {"hub_publication"}, version) == [
        f"Hub commit {url}",
        f"receipt {receipt}",
    ]
    # a receipt of an earlier run is not listed
    os.utime(receipt, (0, 0))
    assert published_by_run(catalog, {"hub_publication"}, version) == []
