"""``params:publish``, checked: where a study's results are published (docs/publishing.md).

Three destinations, each optional but the first:

* ``results/final_artifacts/<env>/`` in the project (git; PNGs through Git LFS),
* a Weights & Biases run in the user's project (``publish.wandb``),
* a Hugging Face Hub dataset repo, in one commit (``publish.hub``).

Each section is one pydantic model declared once (types, defaults, what each key requires);
the pre-run check parses it (:meth:`PublishParams.of`, alias :func:`publish_params`) and hands
:class:`PublishParams` to the nodes.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from hed.config.model import Bool, Section, null_is
from hed.errors import ConfigError

#: a non-empty string (surrounding blanks dropped) or null
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] | None

# a Hub repo id: `<owner>/<name>`, names of letters, digits, `-`, `_`, `.` (Hub rules)
_REPO_ID = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$"


class WandbPublishParams(Section):
    """``publish.wandb``: the W&B run a study is logged to."""

    section: ClassVar[str] = "publish.wandb"

    enabled: Bool = False
    """Log the study to W&B when ``kedro run --pipelines publish`` runs."""
    project: Text = None
    """W&B project (required when enabled)."""
    entity: Text = None
    """W&B entity (user or team); null: the API key's default entity."""
    name: Text = None
    """Display name of the run; null: ``hed-<study>``."""
    mode: Literal["online", "offline"] | None = None
    """``online``, ``offline`` or null (``WANDB_MODE`` when set, else online)."""
    dir: Text = None
    """Folder that receives ``wandb/<run folder>``; null: wandb's default (``WANDB_DIR``, else
    the current folder)."""
    tags: Annotated[tuple[Annotated[str, Field(min_length=1)], ...], null_is(())] = ()
    """Tags of the run."""

    @model_validator(mode="after")
    def _project_when_enabled(self) -> WandbPublishParams:
        if self.enabled and self.project is None:
            raise ConfigError(
                "publish.wandb.project is not set (parameters_publish.yml): name the W&B "
                "project to log the study to, or set publish.wandb.enabled: false"
            )
        return self


class HubPublishParams(Section):
    """``publish.hub``: the Hugging Face dataset repo a study is committed to."""

    section: ClassVar[str] = "publish.hub"

    enabled: Bool = False
    """Commit the study when ``kedro run --pipelines publish`` runs."""
    repo_id: Text = None
    """``<owner>/<name>`` of the dataset repo (required when enabled)."""
    revision: Text = None
    """Branch to commit to; null: the repo's default branch (``main``)."""
    path_in_repo: Text = None
    """Folder in the repo (relative, without ``..``); null: ``hed/<study>``."""
    private: Bool = True
    """Create the repo private when it does not exist yet."""
    create_repo: Bool = True
    """Create the repo when it does not exist (else that is an error)."""

    @field_validator("repo_id", mode="before")
    @classmethod
    def _repo_id(cls, value: Any) -> Any:
        import re

        if isinstance(value, str) and value.strip() and not re.match(_REPO_ID, value.strip()):
            raise ConfigError(
                f"publish.hub.repo_id {value.strip()!r} is not a Hub repo id: write <owner>/<name>"
            )
        return value

    @field_validator("path_in_repo")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = value.strip("/").split("/")
        if value.startswith("/") or ".." in parts:
            raise ConfigError(
                f"publish.hub.path_in_repo {value!r} must be a folder inside the repo "
                "(relative, without '..')"
            )
        return "/".join(parts)

    @model_validator(mode="after")
    def _repo_when_enabled(self) -> HubPublishParams:
        if self.enabled and self.repo_id is None:
            raise ConfigError(
                "publish.hub.repo_id is not set (parameters_publish.yml): name the dataset repo "
                "<owner>/<name>, or set publish.hub.enabled: false"
            )
        return self


class PublishParams(Section):
    """``params:publish``: the study's results, where they are published."""

    section: ClassVar[str] = "publish"

    env_name: str | None = None
    """Folder under ``results/final_artifacts/``; null: the ``--env``."""
    git_lfs: Bool = True
    """Write ``.gitattributes`` (``*.png`` through Git LFS) in the published folder."""
    include_records: Bool = True
    """The W&B artifact and the Hub commit hold every step's merged records and responses
    (``<run>.step_<step>.token_records`` / ``.sequences``)."""
    wandb: WandbPublishParams = WandbPublishParams()
    """The W&B destination."""
    hub: HubPublishParams = HubPublishParams()
    """The Hugging Face Hub destination."""


#: ``publish_params(raw)``: :meth:`PublishParams.of` (the pre-run check's name for it).
publish_params = PublishParams.of
