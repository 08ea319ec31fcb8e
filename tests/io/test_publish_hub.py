"""Publishing a study to a Hugging Face dataset repo (hed.io.hub_publish), at the boundary.

No network here. Two boundaries: (1) ``HfApi``'s network methods replaced on huggingface_hub's
own class, so ``create_commit`` receives huggingface_hub's own ``CommitOperationAdd`` objects
(which compute each file's sha256 and size when built); (2) the real ``HfApi`` talking HTTP to
a stand-in Hub on 127.0.0.1 (tests/hub_server.py), which records a commit only when its whole
body arrived. The demo study is the one of :mod:`tests.study_demo`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from huggingface_hub import CommitOperationAdd, HfApi

from hed.config.publish import HubPublishParams, publish_params
from hed.errors import ConfigError, CredentialsError, HEDError, InputDataError, OutputWriteError
from hed.io.hub_publish import MANIFEST_NAME, publish_to_hub
from hed.io.study_bundle import plan_bundle

from ..hub_server import stand_in_hub
from ..pipelines.test_reporting import _no_git  # noqa: F401 - autouse: no git in tests
from ..study_demo import ENV, PASS1_RUN, REPORT_VERSION, RUN, publish_demo_study
from .test_publish_wandb import _latest


@pytest.fixture(autouse=True)
def _hub_reachable(monkeypatch):
    """The Makefile exports HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1 (no model hub here), and
    huggingface_hub reads them once at import: these tests talk to a stand-in Hub on 127.0.0.1."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


REPO = "hed-lab/dapo-results"
FOLDER = f"hed/{ENV}"


def _one_line(info: pytest.ExceptionInfo) -> str:
    assert isinstance(info.value, HEDError)
    assert "\n" not in str(info.value)
    return str(info.value)


class StandInHub:
    """The Hub's side of HfApi: whoami, repo_info, create_repo and create_commit.

    ``create_commit`` reads every operation's bytes (as the real upload does) and records the
    commit only once all of them were read: a failure part-way records nothing.
    """

    def __init__(self, monkeypatch, *, repo_exists=True, fail_after=None):
        self.commits: list[dict] = []
        self.created: list[dict] = []
        self.calls: list[str] = []
        self.repo_exists = repo_exists
        self.fail_after = fail_after  # callable(op_index) run after reading each operation
        for name in ("whoami", "repo_info", "create_repo", "create_branch", "create_commit"):
            method = getattr(self, f"_{name}")
            monkeypatch.setattr(HfApi, name, lambda api, *a, _m=method, **k: _m(api, *a, **k))

    def _whoami(self, api, *args, **kwargs):
        self.calls.append("whoami")
        return {"name": "hed-lab", "type": "user"}

    def _repo_info(self, api, repo_id, **kwargs):
        self.calls.append("repo_info")
        if self.repo_exists:
            return SimpleNamespace(id=repo_id)
        import httpx2
        from huggingface_hub.errors import RepositoryNotFoundError

        url = f"https://huggingface.co/api/datasets/{repo_id}"
        response = httpx2.Response(404, request=httpx2.Request("GET", url))
        raise RepositoryNotFoundError("Repository Not Found", response=response)

    def _create_repo(self, api, repo_id, **kwargs):
        self.calls.append("create_repo")
        self.created.append({"repo_id": repo_id, **kwargs})

    def _create_branch(self, api, repo_id, **kwargs):
        self.calls.append("create_branch")

    def _create_commit(self, api, repo_id, operations, **kwargs):
        self.calls.append("create_commit")
        operations = list(operations)
        received = {}
        for index, op in enumerate(operations):
            with op.as_file() as handle:
                received[op.path_in_repo] = handle.read()
            if self.fail_after:
                self.fail_after(index)
        self.commits.append(
            {"repo_id": repo_id, "operations": operations, "received": received, **kwargs}
        )
        return SimpleNamespace(commit_url=f"https://huggingface.co/datasets/{repo_id}/commit/1",
                               oid="1" * 40)  # fmt: skip


@pytest.fixture
def hf_token(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")


def expected_sources(root: Path, folder: str) -> dict[str, str]:
    """``{path in repo: source file}`` of the demo study's publication (manifest aside)."""
    resolved = json.loads(_latest(root, "08_reporting/metadata/resolved_config.json").read_text())
    bundle = plan_bundle(resolved, None, study=ENV, include_records=False)
    expected = {f"{folder}/{f.path}": f.source for f in bundle.files}
    for step in (0, 20):
        for table, name in (
            ("token_records", f"step_{step}"),
            ("sequences", f"step_{step}.sequences"),
        ):
            base = root / f"data/03_primary/token_records/{RUN}/{name}.parquet"
            (version,) = [p.name for p in base.iterdir()]
            expected[f"{folder}/records/{RUN}/step_{step}.{table}.parquet"] = str(
                base / version / f"{name}.parquet"
            )
    return expected


def test_demo_study_is_exactly_one_commit_of_exactly_its_files(demo_study, hf_token, monkeypatch):
    root = demo_study
    hub = StandInHub(monkeypatch)
    catalog = publish_demo_study(root, {"hub": {"enabled": True, "repo_id": REPO}})

    assert hub.calls.count("create_commit") == 1 and "create_repo" not in hub.calls
    assert hub.calls.index("whoami") < hub.calls.index("create_commit")
    (commit,) = hub.commits
    assert commit["repo_id"] == REPO and commit["repo_type"] == "dataset"
    assert commit["revision"] is None
    operations = commit["operations"]
    assert all(isinstance(op, CommitOperationAdd) for op in operations)
    expected = expected_sources(root, FOLDER)
    assert sorted(op.path_in_repo for op in operations) == sorted(
        [*expected, f"{FOLDER}/{MANIFEST_NAME}"]
    )
    assert len(operations) == 16  # 2 PNGs, 6 tables, 2 configs, 1 page, 4 records, manifest
    for op in operations:
        if op.path_in_repo.endswith(MANIFEST_NAME):
            continue
        data = Path(expected[op.path_in_repo]).read_bytes()
        assert op.path_or_fileobj == expected[op.path_in_repo]
        assert op.upload_info.sha256.hex() == hashlib.sha256(data).hexdigest()
        assert op.upload_info.size == len(data)
        assert commit["received"][op.path_in_repo] == data
    manifest = json.loads(commit["received"][f"{FOLDER}/{MANIFEST_NAME}"])
    assert manifest["run_id"] == REPORT_VERSION and manifest["git_commit"] == "c" * 40
    assert manifest["pass1_runs"][0]["path"] == PASS1_RUN
    message = commit["commit_message"]
    assert message == (
        f"HED study {ENV}: reporting run {REPORT_VERSION}, code {'c' * 12}, pass@1 from {PASS1_RUN}"
    )
    assert "https://wandb.ai/hed-lab/dapo-study/runs/run42" in commit["commit_description"]
    receipt = catalog.load("hub_publication")
    assert receipt["files"] == 16 and receipt["folder"] == FOLDER and receipt["oid"] == "1" * 40


def _bundle(root: Path):
    resolved = json.loads(_latest(root, "08_reporting/metadata/resolved_config.json").read_text())
    return plan_bundle(resolved, None, study=ENV, include_records=False)


def test_a_missing_repo_is_created_private_then_committed_once(demo_study, hf_token, monkeypatch):
    hub = StandInHub(monkeypatch, repo_exists=False)
    settings = HubPublishParams(enabled=True, repo_id=REPO, path_in_repo="results/v1")
    result = publish_to_hub(_bundle(demo_study), settings)
    assert hub.calls == ["whoami", "repo_info", "create_repo", "create_commit"]
    assert hub.created == [
        {"repo_id": REPO, "repo_type": "dataset", "private": True, "exist_ok": True}
    ]
    assert result["folder"] == "results/v1"
    assert all(op.path_in_repo.startswith("results/v1/") for op in hub.commits[0]["operations"])


def test_a_failure_mid_upload_leaves_no_commit(demo_study, hf_token, monkeypatch, tmp_path):
    bundle = _bundle(demo_study)
    last = bundle.files[-1]
    moved = tmp_path / "moved"

    def vanish(index):  # the last file disappears while the first ones are being uploaded
        if index == 0:
            Path(last.source).rename(moved)

    hub = StandInHub(monkeypatch, fail_after=vanish)
    try:
        with pytest.raises(OutputWriteError) as info:
            publish_to_hub(bundle, HubPublishParams(enabled=True, repo_id=REPO))
    finally:
        moved.rename(last.source)
    message = _one_line(info)
    assert f"committing study {ENV} to {REPO} failed" in message
    assert "the repo holds no commit of it" in message
    assert hub.commits == []


def test_missing_file_stops_before_the_hub_is_contacted(
    demo_study, hf_token, monkeypatch, tmp_path
):
    bundle = _bundle(demo_study)
    gone = bundle.files[0]
    hub = StandInHub(monkeypatch)
    Path(gone.source).rename(tmp_path / "moved")
    try:
        with pytest.raises(InputDataError) as info:
            publish_to_hub(bundle, HubPublishParams(enabled=True, repo_id=REPO))
    finally:
        (tmp_path / "moved").rename(gone.source)
    assert "do not exist; nothing was uploaded" in _one_line(info)
    assert hub.calls == []


def test_no_token_is_one_line_naming_the_login(demo_study, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))  # no stored login
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    with pytest.raises(CredentialsError) as info:
        publish_to_hub(_bundle(demo_study), HubPublishParams(enabled=True, repo_id=REPO))
    assert "hf auth login" in _one_line(info) and "HF_TOKEN" in str(info.value)


def test_no_network_stops_at_whoami_before_anything_is_uploaded(demo_study, monkeypatch):
    committed = []
    monkeypatch.setattr(HfApi, "create_commit", lambda *a, **k: committed.append(a))
    api = HfApi(endpoint="http://127.0.0.1:9", token="hf_test_token")  # nothing listens there
    with pytest.raises(InputDataError) as info:
        publish_to_hub(_bundle(demo_study), HubPublishParams(enabled=True, repo_id=REPO), api=api)
    message = _one_line(info)
    assert "whoami failed (" in message and "Connection refused" in message
    assert "nothing was uploaded" in message and committed == []


def test_repo_absent_and_create_repo_false_is_refused(demo_study, hf_token, monkeypatch):
    hub = StandInHub(monkeypatch, repo_exists=False)
    settings = HubPublishParams(enabled=True, repo_id=REPO, create_repo=False)
    with pytest.raises(InputDataError) as info:
        publish_to_hub(_bundle(demo_study), settings)
    assert "no dataset repo of that name that hed-lab can see" in _one_line(info)
    assert "create_commit" not in hub.calls


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"hub": {"enabled": True}}, r"publish\.hub\.repo_id is not set"),
        ({"hub": {"repo_id": "no-owner"}}, r"publish\.hub\.repo_id 'no-owner' is not a Hub repo"),
        ({"hub": {"path_in_repo": "../up"}}, r"path_in_repo '\.\./up' must be a folder inside"),
        ({"hub": {"private": "yes"}}, r"publish\.hub\.private must be true or false"),
        ({"wandb": {"enabled": True}}, r"publish\.wandb\.project is not set"),
        (
            {"wandb": {"mode": "disabled"}},
            r"publish\.wandb\.mode must be one of online, offline or null",
        ),
    ],
)
def test_bad_publish_parameters_are_one_line(section, message):
    with pytest.raises(ConfigError, match=message):
        publish_params(section)


# ------------------------------------------------------------------ a stand-in Hub on 127.0.0.1


@pytest.fixture
def hub_server(monkeypatch, tmp_path):
    """The stand-in Hub (tests/hub_server.py) as huggingface_hub's endpoint, its token in
    HF_TOKEN; the dataset repo exists."""
    from huggingface_hub import constants

    with stand_in_hub() as (endpoint, state):
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
        monkeypatch.setenv("HF_TOKEN", state.token)
        state.repos.add(REPO)
        yield state


def test_the_stand_in_hub_receives_the_demo_study_as_one_commit(demo_study, hub_server):
    root = demo_study
    catalog = publish_demo_study(
        root, {"hub": {"enabled": True, "repo_id": REPO, "path_in_repo": "studies/demo"}}
    )
    (commit,) = hub_server.commits
    commits = [r for r in hub_server.requests if r[0] == "POST" and "/commit/" in r[1]]
    assert commits == [("POST", f"/api/datasets/{REPO}/commit/main")]
    expected = expected_sources(root, "studies/demo")
    on_disk = {path: Path(source).read_bytes() for path, source in expected.items()}
    manifest = commit["files"].pop(f"studies/demo/{MANIFEST_NAME}")
    assert commit["files"] == on_disk  # exactly the study's files, byte for byte
    assert len(on_disk) == 15
    assert {f"studies/demo/{p}" for p in json.loads(manifest)["files"]} == set(on_disk)
    assert commit["summary"].startswith(f"HED study {ENV}: reporting run {REPORT_VERSION}")
    receipt = catalog.load("hub_publication")
    assert receipt["oid"] == "1".zfill(40) and receipt["commit_url"].endswith("1".zfill(40))


def test_a_file_vanishing_between_preupload_and_commit_leaves_no_commit(
    demo_study, hub_server, tmp_path
):
    bundle = _bundle(demo_study)
    victim = bundle.files[len(bundle.files) // 2]
    moved = tmp_path / "moved"
    hub_server.on_preupload = lambda paths: Path(victim.source).rename(moved)
    try:
        with pytest.raises(OutputWriteError) as info:
            publish_to_hub(bundle, HubPublishParams(enabled=True, repo_id=REPO))
    finally:
        moved.rename(victim.source)
    assert "the repo holds no commit of it" in _one_line(info)
    assert hub_server.commits == []
    assert not [r for r in hub_server.requests if "/commit/" in r[1]]


def test_a_refused_token_stops_before_anything_is_uploaded(demo_study, hub_server, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_token")
    with pytest.raises(InputDataError) as info:
        publish_to_hub(_bundle(demo_study), HubPublishParams(enabled=True, repo_id=REPO))
    assert "whoami failed (" in _one_line(info) and "nothing was uploaded" in str(info.value)
    # behaviour, not huggingface_hub's request sequence (2.4 asks /api/agent-harnesses first):
    # the token was checked, and nothing was uploaded, created or committed
    assert ("GET", "/api/whoami-v2") in hub_server.requests
    assert not [r for r in hub_server.requests if r[0] != "GET"], hub_server.requests
    assert hub_server.commits == []


def test_a_new_repo_is_created_then_committed_once_on_the_stand_in_hub(demo_study, hub_server):
    hub_server.repos.clear()
    result = publish_to_hub(
        _bundle(demo_study), HubPublishParams(enabled=True, repo_id=REPO, path_in_repo="x")
    )
    assert REPO in hub_server.repos and len(hub_server.commits) == 1
    assert result["files"] == len(hub_server.commits[0]["files"]) == 12  # 11 + manifest
