"""hed.io.provenance: what a run's ``run_context`` records (datasets, git state, packages,
runner)."""

from __future__ import annotations

from kedro.io import DataCatalog

from hed.io import provenance


def test_describe_dataset_versions_and_missing_versions(tmp_path):
    catalog = DataCatalog.from_config(
        {
            "plain": {"type": "pandas.CSVDataset", "filepath": str(tmp_path / "plain.csv")},
            "versioned": {
                "type": "pandas.CSVDataset",
                "filepath": str(tmp_path / "v.csv"),
                "versioned": True,
            },
        },
        save_version="2025-03-01T00.00.00.000Z",
    )
    plain = provenance.describe_dataset(catalog, "plain")
    assert plain["version"] is None and plain["path"] == str(tmp_path / "plain.csv")
    before = provenance.describe_dataset(catalog, "versioned")
    assert before["path"] is None and "error" in before  # nothing saved yet
    planned = provenance.describe_dataset(catalog, "versioned", "save")
    assert planned["path"] == str(tmp_path / "v.csv" / "2025-03-01T00.00.00.000Z" / "v.csv")
    assert provenance.describe_dataset(catalog, "absent")["type"] is None


def test_git_state_without_git_is_none(monkeypatch, tmp_path):
    monkeypatch.undo()  # drop the autouse stub, then take git away
    monkeypatch.setattr(provenance.shutil, "which", lambda name: None)
    assert provenance.git_state(tmp_path) == {"commit": None, "dirty": None}


def test_package_versions_reads_installed_metadata():
    versions = provenance.package_versions(("kedro", "no-such-package-hed"))
    assert versions["kedro"] and versions["no-such-package-hed"] is None


def test_resolved_config_names_the_runner_class_not_its_repr():
    from hed.io.provenance import _runner_name

    repr_ = "<hed.runners.GPURunner object at 0x7f3a2c1b9d50>"
    assert _runner_name(repr_) == "hed.runners.GPURunner"
    assert _runner_name("SequentialRunner") == "SequentialRunner"
    assert _runner_name(None) is None
