"""Commit a study to a Hugging Face Hub dataset repo: one ``HfApi.create_commit`` per publish.

Why one commit: writing a data root straight to ``hf://`` through fsspec makes every file a
commit of its own (huggingface_hub issue 1733), and Kedro's versioned paths multiply files,
which runs into the Hub's commit-rate limits. :func:`publish_to_hub` sends every file of a
:class:`~hed.io.study_bundle.StudyBundle` (``<path_in_repo>/<bundle path>``, plus
``<path_in_repo>/hed_publication.json``: study, provenance, sha256 of every file) as
``CommitOperationAdd`` operations of a single commit whose message names the study and its
provenance.

Before anything is uploaded: the token is found with huggingface_hub's own
:func:`huggingface_hub.get_token` (``HF_TOKEN``, else what ``hf auth login`` /
``huggingface-cli login`` stored), checked with ``HfApi.whoami`` (no network or a refused
token end here, in one line) and the repo and revision with ``HfApi.repo_info``; every file
must exist. ``create_commit`` itself is atomic on the Hub: if it fails (network lost while
uploading, a file vanished) no commit is made, so the repo shows all of the study or none.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from hed.config.publish import HubPublishParams
from hed.errors import (
    CredentialsError,
    HEDError,
    InputDataError,
    OutputWriteError,
    one_line,
)
from hed.io.study_bundle import StudyBundle, bundle_manifest, check_bundle_files

logger = logging.getLogger(__name__)

REPO_TYPE = "dataset"
MANIFEST_NAME = "hed_publication.json"


def hub_token() -> str:
    """The Hugging Face token, as huggingface_hub finds it (``HF_TOKEN``, then the stored login).

    Raises:
        CredentialsError: no token anywhere (the message says how to log in).
    """
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise CredentialsError(
            "no Hugging Face token for publish.hub: run `hf auth login` (or `huggingface-cli "
            "login`) or set HF_TOKEN; nothing was uploaded"
        )
    return token


def folder_in_repo(bundle: StudyBundle, settings: HubPublishParams) -> str:
    """``publish.hub.path_in_repo``, or ``hed/<study>`` when unset (no trailing slash)."""
    return (settings.path_in_repo or f"hed/{bundle.study}").strip("/")


def commit_message(bundle: StudyBundle) -> str:
    """The commit's title: ``HED study <s>: reporting run <id>, code <commit>, pass@1 from ...``."""
    return bundle.provenance()


def commit_operations(bundle: StudyBundle, folder: str) -> list[Any]:
    """``CommitOperationAdd`` of every bundle file and of ``hed_publication.json``.

    Returns:
        Operations sorted by ``path_in_repo``; each file is read from its local source when
        the commit uploads it (huggingface_hub checks now that it exists).

    Raises:
        InputDataError: a file is missing (nothing is uploaded).
    """
    from huggingface_hub import CommitOperationAdd

    check_bundle_files(bundle)
    manifest = json.dumps(bundle_manifest(bundle), indent=2) + "\n"
    operations = [
        CommitOperationAdd(path_in_repo=f"{folder}/{f.path}", path_or_fileobj=f.source)
        for f in bundle.files
    ]
    operations.append(
        CommitOperationAdd(
            path_in_repo=f"{folder}/{MANIFEST_NAME}", path_or_fileobj=manifest.encode("utf-8")
        )
    )
    return sorted(operations, key=lambda op: op.path_in_repo)


def check_hub_access(api: Any, settings: HubPublishParams) -> dict[str, bool]:
    """Check the token, the repo and the branch before anything is uploaded.

    Returns:
        ``{"repo_exists": ..., "revision_exists": ...}``.

    Raises:
        InputDataError: the Hub cannot be reached or refuses the token; the repo is not
            there and ``create_repo`` is false; the repo is not a dataset repo one can see.
    """
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    repo = settings.repo_id
    try:
        user = api.whoami()
    except Exception as exc:  # no network (ConnectionError...), 401 (HfHubHTTPError)
        raise InputDataError(
            f"cannot publish to the Hugging Face Hub: whoami failed ({one_line(exc, limit=200)})"
            "; no network, or the token is refused (`hf auth login`, HF_TOKEN); nothing was "
            "uploaded"
        ) from None
    try:
        api.repo_info(repo, repo_type=REPO_TYPE, revision=settings.revision)
        return {"repo_exists": True, "revision_exists": True}
    except RevisionNotFoundError:
        return {"repo_exists": True, "revision_exists": False}
    except RepositoryNotFoundError:
        if not settings.create_repo:
            raise InputDataError(
                f"publish.hub.repo_id {repo}: no dataset repo of that name that "
                f"{user.get('name', 'this token')} can see; create it or set "
                "publish.hub.create_repo: true; nothing was uploaded"
            ) from None
        return {"repo_exists": False, "revision_exists": False}
    except Exception as exc:
        raise InputDataError(
            f"cannot read dataset repo {repo} on the Hub ({one_line(exc, limit=200)}); "
            "nothing was uploaded"
        ) from None


def publish_to_hub(
    bundle: StudyBundle, settings: HubPublishParams, api: Any | None = None
) -> dict[str, Any]:
    """Commit ``bundle`` to the dataset repo of ``settings`` in exactly one commit.

    Args:
        bundle: the study (:func:`hed.io.study_bundle.plan_bundle`).
        settings: ``publish.hub`` (``repo_id``, ``revision``, ``path_in_repo``, ``private``,
            ``create_repo``).
        api: an ``HfApi`` (default: ``HfApi(token=hub_token())``).

    Returns:
        ``{"repo_id", "revision", "folder", "commit_url", "oid", "files"}`` (``files``: the
        number of files committed, ``hed_publication.json`` included).

    Raises:
        CredentialsError: no token.
        InputDataError: no network, token refused, repo absent (``create_repo: false``), a
            file missing — all before anything is uploaded.
        OutputWriteError: the commit failed; the Hub then holds no commit of this publish.
    """
    from huggingface_hub import HfApi

    if settings.repo_id is None:
        raise InputDataError("publish.hub.repo_id is not set (parameters_publish.yml)")
    api = api or HfApi(token=hub_token())
    folder = folder_in_repo(bundle, settings)
    operations = commit_operations(bundle, folder)
    state = check_hub_access(api, settings)
    try:
        if not state["repo_exists"]:
            api.create_repo(
                settings.repo_id, repo_type=REPO_TYPE, private=settings.private, exist_ok=True
            )
        if settings.revision and not state["revision_exists"]:
            api.create_branch(
                settings.repo_id, branch=settings.revision, repo_type=REPO_TYPE, exist_ok=True
            )
        info = api.create_commit(
            settings.repo_id,
            operations,
            commit_message=commit_message(bundle),
            commit_description=_description(bundle, folder),
            repo_type=REPO_TYPE,
            revision=settings.revision,
        )
    except HEDError:
        raise
    except Exception as exc:
        raise OutputWriteError(
            f"committing study {bundle.study} to {settings.repo_id} failed "
            f"({one_line(exc, limit=200)}); the repo holds no commit of it: publish again"
        ) from None
    logger.info("study %s committed to %s: %s", bundle.study, settings.repo_id, info.commit_url)
    return {
        "repo_id": settings.repo_id,
        "revision": settings.revision,
        "folder": folder,
        "commit_url": info.commit_url,
        "oid": info.oid,
        "files": len(operations),
    }


def _description(bundle: StudyBundle, folder: str) -> str:
    lines = [f"Files under `{folder}/` ({len(bundle.files)} + {MANIFEST_NAME})."]
    lines += [
        f"- pass@1 of {link['run']}: {link['source']} {link.get('url') or link['path']}"
        for link in bundle.pass1_runs
    ]
    return "\n".join(lines)
