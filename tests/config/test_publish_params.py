"""``params:publish`` (hed.config.publish): the schema, the shipped file, the pre-run check, and
a data root on the Hugging Face Hub refused in one line pointing to publish."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml
from kedro.pipeline import Pipeline

from hed.config.publish import (
    HubPublishParams,
    PublishParams,
    WandbPublishParams,
    publish_params,
)
from hed.config.sections import check_unknown_keys
from hed.errors import ConfigError
from hed.hooks import session_data_root
from hed.hooks.parameters import check_parameters
from hed.pipelines.publish import create_pipeline

from ..conftest import REPO_ROOT, field_defaults


def test_the_shipped_file_lists_every_key_with_the_schema_defaults():
    raw = yaml.safe_load((REPO_ROOT / "conf/base/parameters_publish.yml").read_text())["publish"]
    check_unknown_keys({"publish": raw})
    assert set(raw) == set(PublishParams.model_fields)
    assert raw["wandb"] == WandbPublishParams().model_dump(mode="json")
    assert raw["hub"] == HubPublishParams().model_dump(mode="json")
    checked = publish_params(raw)
    assert checked.wandb == WandbPublishParams() and checked.hub == HubPublishParams()
    assert checked.git_lfs is True and checked.include_records is True


def test_a_misspelt_key_is_refused_with_the_nearest_one():
    for key, near in [("wandb.projet", "wandb.project"), ("hub.repo", "hub.repo_id"),
                      ("git_lsf", "git_lfs")]:  # fmt: skip
        *parents, leaf = key.split(".")
        section: dict = {leaf: "x"}
        for parent in reversed(parents):
            section = {parent: section}
        with pytest.raises(ConfigError) as refused:
            check_unknown_keys({"publish": section})
        assert str(refused.value) == (
            f"unknown parameter publish.{key}: did you mean publish.{near}? HED does not read "
            "it, so it would be ignored"
        )


def test_the_pre_run_check_reads_the_publish_section():
    pipeline = create_pipeline(params={"publish": {}})
    catalog = {"params:publish": {"wandb": {"enabled": True, "project": None}}}
    with pytest.raises(ConfigError, match=r"publish\.wandb\.project is not set"):
        check_parameters(pipeline, _Catalog(catalog))
    assert check_parameters(pipeline, _Catalog({"params:publish": {}})) == ["publish"]


class _Catalog(dict):
    def load(self, name):
        return self[name]


def test_the_pipeline_has_the_destination_nodes_only_when_enabled():
    runs = {"r": {"role": "single", "checkpoint_root": "/ckpt", "steps": [0, 5]}}
    assert {n.name for n in create_pipeline(params={"runs": runs, "publish": {}}).nodes} == {
        "publish_artifacts"
    }
    both = create_pipeline(
        params={"runs": runs, "publish": {"wandb": {"enabled": True}, "hub": {"enabled": True}}}
    )
    names = {n.name: n for n in both.nodes}
    assert set(names) == {
        "publish_artifacts",
        "plan_study_bundle",
        "log_study_to_wandb",
        "commit_study_to_hub",
    }
    assert set(names["plan_study_bundle"].inputs) >= {
        "r.step_0.token_records",
        "r.step_5.sequences",
    }
    assert isinstance(both, Pipeline)
    no_records = create_pipeline(
        params={"runs": runs, "publish": {"include_records": False, "hub": {"enabled": True}}}
    )
    plan = next(n for n in no_records.nodes if n.name == "plan_study_bundle")
    assert not any("step_" in name for name in plan.inputs)


def test_an_hf_data_root_is_refused_pointing_to_publish(tmp_path):
    context = SimpleNamespace(
        config_loader={"globals": {"data_root": "hf://datasets/me/study"}}, project_path=tmp_path
    )
    with pytest.raises(ConfigError) as info:
        session_data_root(context)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("globals.data_root hf://datasets/me/study: a data root on the Hub")
    assert "kedro run --pipelines publish" in message and "publish.hub" in message


def test_the_defaults_live_in_the_dataclasses_and_the_schema_reads_them():

    parsed = publish_params(None)
    assert parsed == PublishParams() == publish_params({})
    assert (parsed.env_name, parsed.git_lfs, parsed.include_records) == (None, True, True)
    assert parsed.wandb == WandbPublishParams(enabled=False, project=None, tags=())
    assert parsed.hub == HubPublishParams(enabled=False, private=True, create_repo=True)
    assert field_defaults(PublishParams) == {
        "env_name": None, "git_lfs": True, "include_records": True,
        "wandb": WandbPublishParams(), "hub": HubPublishParams(),
    }  # fmt: skip
    assert field_defaults(WandbPublishParams)["tags"] == ()
    assert field_defaults(HubPublishParams)["private"] is True
    assert PublishParams.of(parsed) is parsed
    assert PublishParams.of({"git_lfs": False}) == PublishParams(git_lfs=False)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"git_lfs": "no"}, "publish.git_lfs must be true or false (unquoted), got 'no'"),
        (
            {"hub": {"repo_id": "no-owner"}},
            "publish.hub.repo_id 'no-owner' is not a Hub repo id: write <owner>/<name>",
        ),
        (
            {"wandb": {"mode": "sync"}},
            "publish.wandb.mode must be one of online, offline or null, got 'sync'",
        ),
    ],
)
def test_a_bad_value_is_refused_in_one_line(raw, message):
    with pytest.raises(ConfigError) as caught:
        publish_params(raw)
    assert str(caught.value) == message


def test_the_pre_run_check_hands_publish_params_to_the_nodes():
    from kedro.io import DataCatalog, MemoryDataset

    from hed.config.publish import PublishParams
    from hed.hooks.parameters import hand_to_nodes, parsed_sections

    pipeline = create_pipeline(params={"publish": {}})
    catalog = DataCatalog({"params:publish": MemoryDataset({"git_lfs": False})})
    parsed = parsed_sections(pipeline, catalog)
    assert hand_to_nodes(catalog, parsed) == ["params:publish"]
    assert catalog.load("params:publish") == PublishParams(git_lfs=False)
