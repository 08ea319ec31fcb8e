"""``params:publish``, checked: where a study's results are published (docs/publishing.md).

Three destinations, each optional but the first:

* ``results/final_artifacts/<env>/`` in the project (git; PNGs through Git LFS),
* a Weights & Biases run in the user's project (``publish.wandb``),
* a Hugging Face Hub dataset repo, in one commit (``publish.hub``).

The defaults are the field defaults of the dataclasses here, and nowhere else:
:data:`hed.config.sections.SECTIONS` (the keys, for the unknown-key check before the first
node) takes ``publish``'s from them. The pre-run check parses the section once
(:func:`publish_params`) and hands :class:`PublishParams` to the nodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hed.core.validators import boolean, section
from hed.errors import ConfigError

#: ``publish.wandb.mode`` values (``null``: ``WANDB_MODE`` when set, else online).
WANDB_MODES = ("online", "offline")

# a Hub repo id: `<owner>/<name>`, names of letters, digits, `-`, `_`, `.` (Hub rules)
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class WandbPublishParams:
    """``publish.wandb``: the W&B run a study is logged to.

    Attributes:
        enabled: log the study to W&B when ``kedro run --pipelines publish`` runs.
        project: W&B project (required when enabled).
        entity: W&B entity (user or team); ``None`` = the key's default entity.
        name: display name of the run; ``None`` = ``hed-<study>``.
        mode: ``online``, ``offline`` or ``None`` (``WANDB_MODE``, else online).
        dir: folder that receives ``wandb/<run folder>``; ``None`` = wandb's default
            (``WANDB_DIR``, else the current folder).
        tags: tags of the run.
    """

    enabled: bool = False
    project: str | None = None
    entity: str | None = None
    name: str | None = None
    mode: str | None = None
    dir: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class HubPublishParams:
    """``publish.hub``: the Hugging Face dataset repo a study is committed to.

    Attributes:
        enabled: commit the study when ``kedro run --pipelines publish`` runs.
        repo_id: ``<owner>/<name>`` of the dataset repo (required when enabled).
        revision: branch to commit to; ``None`` = the repo's default branch (``main``).
        path_in_repo: folder in the repo; ``None`` = ``hed/<study>``.
        private: create the repo private when it does not exist yet.
        create_repo: create the repo when it does not exist (else that is an error).
    """

    enabled: bool = False
    repo_id: str | None = None
    revision: str | None = None
    path_in_repo: str | None = None
    private: bool = True
    create_repo: bool = True


@dataclass(frozen=True)
class PublishParams:
    """``params:publish``, checked.

    Attributes:
        env_name: folder under ``results/final_artifacts/`` (``None`` = the ``--env``).
        git_lfs: write ``.gitattributes`` (``*.png`` through Git LFS) in the published folder.
        include_records: the W&B artifact and the Hub commit hold every step's merged records
            and responses (``<run>.step_<step>.token_records`` / ``.sequences``).
        wandb: the W&B destination.
        hub: the Hugging Face Hub destination.
    """

    env_name: str | None = None
    git_lfs: bool = True
    include_records: bool = True
    wandb: WandbPublishParams = WandbPublishParams()
    hub: HubPublishParams = HubPublishParams()

    @classmethod
    def of(cls, value: Any) -> PublishParams:
        """``value`` if already parsed, else :func:`publish_params` of it (a raw dict)."""
        return value if isinstance(value, cls) else publish_params(value)


_WANDB = WandbPublishParams()
_HUB = HubPublishParams()
_PUBLISH = PublishParams()


def _optional_str(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} must be a non-empty string or null, got {value!r}")
    return value.strip()


def wandb_publish_params(raw: Any) -> WandbPublishParams:
    """Check ``publish.wandb`` (see :class:`WandbPublishParams`).

    Raises:
        ConfigError: not a mapping; ``enabled`` not a bool; no ``project`` while enabled;
            ``mode`` not online/offline/null; ``tags`` not a list of strings.
    """
    raw = section(raw, "publish.wandb", "parameters_publish.yml")
    enabled = boolean(raw.get("enabled", _WANDB.enabled), "publish.wandb.enabled")
    project = _optional_str(raw.get("project"), "publish.wandb.project")
    if enabled and project is None:
        raise ConfigError(
            "publish.wandb.project is not set (parameters_publish.yml): name the W&B project "
            "to log the study to, or set publish.wandb.enabled: false"
        )
    mode = raw.get("mode")
    if mode is not None and mode not in WANDB_MODES:
        raise ConfigError(f"publish.wandb.mode must be online, offline or null, got {mode!r}")
    tags = raw.get("tags") or list(_WANDB.tags)
    if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
        raise ConfigError(f"publish.wandb.tags must be a list of strings, got {tags!r}")
    return WandbPublishParams(
        enabled=enabled,
        project=project,
        entity=_optional_str(raw.get("entity"), "publish.wandb.entity"),
        name=_optional_str(raw.get("name"), "publish.wandb.name"),
        mode=mode,
        dir=_optional_str(raw.get("dir"), "publish.wandb.dir"),
        tags=tuple(tags),
    )


def hub_publish_params(raw: Any) -> HubPublishParams:
    """Check ``publish.hub`` (see :class:`HubPublishParams`).

    Raises:
        ConfigError: not a mapping; a flag not a bool; ``repo_id`` missing while enabled or
            not ``<owner>/<name>``; ``path_in_repo`` absolute or with ``..``.
    """
    raw = section(raw, "publish.hub", "parameters_publish.yml")
    enabled = boolean(raw.get("enabled", _HUB.enabled), "publish.hub.enabled")
    repo_id = _optional_str(raw.get("repo_id"), "publish.hub.repo_id")
    if enabled and repo_id is None:
        raise ConfigError(
            "publish.hub.repo_id is not set (parameters_publish.yml): name the dataset repo "
            "<owner>/<name>, or set publish.hub.enabled: false"
        )
    if repo_id is not None and not _REPO_ID_RE.match(repo_id):
        raise ConfigError(
            f"publish.hub.repo_id {repo_id!r} is not a Hub repo id: write <owner>/<name>"
        )
    path_in_repo = _optional_str(raw.get("path_in_repo"), "publish.hub.path_in_repo")
    if path_in_repo is not None:
        parts = path_in_repo.strip("/").split("/")
        if path_in_repo.startswith("/") or ".." in parts:
            raise ConfigError(
                f"publish.hub.path_in_repo {path_in_repo!r} must be a folder inside the repo "
                "(relative, without '..')"
            )
        path_in_repo = "/".join(parts)
    return HubPublishParams(
        enabled=enabled,
        repo_id=repo_id,
        revision=_optional_str(raw.get("revision"), "publish.hub.revision"),
        path_in_repo=path_in_repo,
        private=boolean(raw.get("private", _HUB.private), "publish.hub.private"),
        create_repo=boolean(raw.get("create_repo", _HUB.create_repo), "publish.hub.create_repo"),
    )


def publish_params(raw: Mapping[str, Any] | None) -> PublishParams:
    """Check ``params:publish`` as a whole (see :class:`PublishParams`).

    Raises:
        ConfigError: a value of the wrong type, or a destination enabled without its target
            (the message names the dotted key and ``parameters_publish.yml``).
    """
    raw = section(raw, "publish", "parameters_publish.yml")
    return PublishParams(
        env_name=raw.get("env_name"),
        git_lfs=boolean(raw.get("git_lfs", _PUBLISH.git_lfs), "publish.git_lfs"),
        include_records=boolean(
            raw.get("include_records", _PUBLISH.include_records), "publish.include_records"
        ),
        wandb=wandb_publish_params(raw.get("wandb")),
        hub=hub_publish_params(raw.get("hub")),
    )
