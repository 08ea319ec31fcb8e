"""Publish pipeline: the latest reporting run's files → results/final_artifacts/<env>/."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from hed.errors import ConfigError, InputDataError
from hed.io import provenance
from hed.io.datasets import PublishedArtifactsDataset
from hed.io.provenance import describe_dataset
from hed.io.publishing import GITATTRIBUTES, LFS_PNG_RULE, MANIFEST, ensure_lfs_rule
from hed.pipelines.publish import create_pipeline as create_publish
from hed.pipelines.publish.nodes import plan_publication
from tests.pipelines.test_reporting import (  # noqa: F401 - _no_git is an autouse fixture
    REPO,
    _no_git,
    make_catalog,
    make_records,
    pass1_for_figures,
    run_pipeline,
    run_reporting,
    write_inputs,
)

V1, V2, V3 = "2025-02-01T00.00.00.000Z", "2025-02-02T00.00.00.000Z", "2025-02-03T00.00.00.000Z"
PUBLISHED = {
    "figure2_paper_reproduction.csv",
    "figure3_high_entropy_token_probability.csv",
    "figure2_anthropomorphic_high_entropy_vs_pass1.png",
    "figure3_high_entropy_token_probability.png",
    "resolved_config.json",
}


def two_reporting_runs(root: Path, env: str | None = "qae_repro"):
    """Reporting twice on different records; return the catalogs of both runs."""
    write_inputs(
        root, make_records(seed=0), pass1_for_figures(), version="2025-01-01T00.00.00.000Z"
    )
    first = run_reporting(root, version=V1, env=env)
    write_inputs(
        root, make_records(seed=1), pass1_for_figures(), version="2025-01-02T00.00.00.000Z"
    )
    second = run_reporting(root, version=V2, env=env)
    return first, second


def publish(root: Path, env: str | None = "qae_repro", env_name: str | None = None) -> Path:
    catalog = make_catalog(root, {"publish": {"env_name": env_name}}, save_version=V3)
    run_pipeline(create_publish(), catalog, env=env, run_id=V3, project=root)
    return root / "results" / "final_artifacts"


def written_files(catalog) -> dict[str, Path]:
    """File name → the file the run of ``catalog`` wrote (its save version)."""
    names = (
        "figure2_paper_reproduction",
        "figure3_table",
        "figure2_png",
        "figure3_png",
        "resolved_config",
    )
    described = [describe_dataset(catalog, name, "save") for name in names]
    return {Path(info["filepath"]).name: Path(info["path"]) for info in described}


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """A project folder with two reporting runs of env qae_repro (shared: each test publishes
    into its own folder name)."""
    root = tmp_path_factory.mktemp("reported")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(provenance, "git_state", lambda path: {"commit": "0" * 40, "dirty": False})
        first, second = two_reporting_runs(root)
    return root, first, second


def test_publish_copies_exactly_the_latest_versions(reported):
    root, first, second = reported
    published = publish(root) / "qae_repro"
    assert {p.name for p in published.iterdir()} == PUBLISHED | {MANIFEST, GITATTRIBUTES}
    assert (published / GITATTRIBUTES).read_text() == LFS_PNG_RULE + "\n"
    latest = written_files(second)
    older = written_files(first)
    assert set(latest) == PUBLISHED
    for name, source in latest.items():
        assert V2 in str(source) and V1 in str(older[name])
        assert (published / name).read_bytes() == source.read_bytes(), name
    for name in (
        "figure2_paper_reproduction.csv",
        "figure3_high_entropy_token_probability.csv",
        "resolved_config.json",
    ):
        assert (published / name).read_bytes() != older[name].read_bytes()  # the older run differs
    manifest = json.loads((published / MANIFEST).read_text())
    assert manifest["env"] == "qae_repro" and manifest["published_from"] == {
        "env": "qae_repro",
        "run_id": V2,
    }
    for name, entry in manifest["files"].items():
        assert entry["version"] == V2 and entry["source"].startswith("data/08_reporting/")
        assert entry["sha256"] == hashlib.sha256((published / name).read_bytes()).hexdigest()
    assert json.loads((published / "resolved_config.json").read_text())["run_id"] == V2


@pytest.fixture(scope="module")
def reported_by_default_env(tmp_path_factory):
    """A project folder with one reporting run of the default environment (no --env)."""
    root = tmp_path_factory.mktemp("reported_default")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(provenance, "git_state", lambda path: {"commit": "0" * 40, "dirty": False})
        write_inputs(root, make_records(seed=2), pass1_for_figures())
        run_reporting(root, version=V1, env=None)
    return root


def test_publish_of_the_default_environment_goes_to_base(reported_by_default_env):
    published = publish(reported_by_default_env, env=None) / "base"
    assert (published / "resolved_config.json").is_file()


def test_publish_env_name_overrides_the_folder(reported):
    root = reported[0]
    assert (publish(root, env_name="dapo_study_v2") / "dapo_study_v2" / MANIFEST).is_file()


def test_publish_refuses_the_config_of_another_environment(reported_by_default_env):
    root = reported_by_default_env
    with pytest.raises(
        ConfigError,
        match=r"written by environment 'base'.*kedro run --pipelines reporting --env qae_repro",
    ):
        publish(root, env="qae_repro")
    assert not (root / "results" / "final_artifacts" / "qae_repro").exists()


def test_publish_without_recorded_paths_asks_for_the_hooks():
    resolved = {"env": None, "run_id": "r", "artifacts": {"figure2_png": None}}
    with pytest.raises(ConfigError, match=r"ProvenanceHooks"):
        plan_publication(resolved, {"env": None}, {"env_name": None})


def test_the_nodes_give_the_same_output_from_the_parsed_section_and_the_raw_dict():
    from hed.config.publish import publish_params
    from hed.pipelines.publish.nodes import commit_study_to_hub, log_study_to_wandb

    resolved = {
        "env": "study",
        "run_id": "r1",
        "artifacts": {"x": {"filepath": "a/x.csv", "path": "a/x.csv", "version": "v"}},
    }
    raw = {"env_name": "v2", "git_lfs": False, "wandb": {"enabled": True, "project": "p"}}
    typed = publish_params(raw)
    plan = plan_publication(resolved, {"env": "study"}, raw)
    assert plan == plan_publication(resolved, {"env": "study"}, typed)
    assert (plan["env"], plan["git_lfs"]) == ("v2", False)
    bundle = object()
    assert log_study_to_wandb(bundle, raw) == log_study_to_wandb(bundle, typed)
    assert log_study_to_wandb(bundle, typed)["settings"].project == "p"
    assert commit_study_to_hub(bundle, raw) == commit_study_to_hub(bundle, typed)


def test_publish_rejects_a_bad_folder_name():
    resolved = {
        "env": None,
        "artifacts": {"x": {"filepath": "a/x.csv", "path": "a/x.csv", "version": None}},
    }
    with pytest.raises(ConfigError, match="not a usable folder name"):
        plan_publication(resolved, {"env": None}, {"env_name": "../escape"})


def plan_for(project: Path, files: dict[str, str]) -> dict:
    return {
        "env": "study",
        "project_path": str(project),
        "source": {"env": "study", "run_id": "r1"},
        "files": {
            name: {"dataset": name, "path": path, "version": "v"} for name, path in files.items()
        },
    }


def test_dataset_resolves_relative_paths_and_replaces_only_what_it_published(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text("a\n1\n")
    (tmp_path / "data" / "b.csv").write_text("b\n2\n")
    dataset = PublishedArtifactsDataset(filepath=str(tmp_path / "results"))
    dataset.save(plan_for(tmp_path, {"a.csv": "data/a.csv", "b.csv": "data/b.csv"}))
    folder = tmp_path / "results" / "study"
    (folder / "NOTES.md").write_text("kept\n")
    dataset.save(plan_for(tmp_path, {"a.csv": "data/a.csv"}))
    assert sorted(p.name for p in folder.iterdir()) == [
        GITATTRIBUTES,
        "MANIFEST.json",
        "NOTES.md",
        "a.csv",
    ]
    assert dataset.load()["study"]["files"]["a.csv"]["source"] == "data/a.csv"


def test_dataset_copies_nothing_when_a_file_is_missing(tmp_path):
    (tmp_path / "a.csv").write_text("a\n")
    dataset = PublishedArtifactsDataset(filepath=str(tmp_path / "results"))
    with pytest.raises(InputDataError, match=r"b\.csv .* do not exist"):
        dataset.save(plan_for(tmp_path, {"a.csv": "a.csv", "b.csv": "missing/b.csv"}))
    assert not (tmp_path / "results" / "study").exists()


def test_published_pngs_go_through_git_lfs():
    attributes = (REPO / ".gitattributes").read_text()
    assert "results/final_artifacts/**/*.png filter=lfs diff=lfs merge=lfs -text" in attributes
    assert (REPO / "results" / "final_artifacts" / ".gitkeep").is_file()


def test_the_lfs_rule_is_added_once_keeps_user_lines_and_git_applies_it_to_the_folder(tmp_path):
    import subprocess

    folder = tmp_path / "results" / "final_artifacts" / "study"
    folder.mkdir(parents=True)
    (folder / GITATTRIBUTES).write_text("*.csv text eol=lf")  # the user's, no final newline
    assert ensure_lfs_rule(folder) is True
    assert ensure_lfs_rule(folder) is False  # already there: unchanged
    assert (folder / GITATTRIBUTES).read_text() == f"*.csv text eol=lf\n{LFS_PNG_RULE}\n"
    git = ["git", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    check = [*git, "check-attr", "filter", "--"]
    inside = subprocess.run(
        [*check, "results/final_artifacts/study/figure2.png"],
        capture_output=True,
        text=True,
        check=False,
    )
    outside = subprocess.run(
        [*check, "results/figure2.png"], capture_output=True, text=True, check=False
    )
    assert inside.stdout.strip().endswith("filter: lfs")
    assert outside.stdout.strip().endswith("filter: unspecified")  # scoped to the folder


def test_git_lfs_false_writes_no_gitattributes(tmp_path):
    (tmp_path / "a.png").write_bytes(b"png")
    dataset = PublishedArtifactsDataset(filepath=str(tmp_path / "results"))
    dataset.save({**plan_for(tmp_path, {"a.png": "a.png"}), "git_lfs": False})
    assert not (tmp_path / "results" / "study" / GITATTRIBUTES).exists()
