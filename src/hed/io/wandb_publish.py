"""Log a study to a Weights & Biases run: figures, tables, pages, config and one artifact.

:func:`log_study` opens one run (``job_type="hed-publish"``) in the user's project with

* the run's config = the reporting run's ``resolved_config`` (exactly that dict),
* the run's notes = the study's provenance and the training runs pass@1 was read from
  (``entity/project/run_id`` and the run's URL), also in the artifact's metadata,
* one history row with every figure as ``wandb.Image`` (``figures/<name>``), every CSV
  table as ``wandb.Table`` (``tables/<name>``), every page as ``wandb.Html``
  (``pages/<name>``, the file as it is: no stylesheet injected),
* one artifact ``hed-<study>`` of type ``hed-study`` holding every file of the bundle at its
  bundle path plus ``hed_publication.json``; W&B versions it (``v0``, ``v1``, ... per study)
  and it is aliased ``latest`` and ``run-<reporting run id>``.

Online the key is found as for pass@1 (:func:`hed.pass1.credentials.resolve_wandb_api_key`:
``WANDB_API_KEY``, ``conf/local/credentials.yml``, ``wandb login``), the server is checked
to answer and the key verified (``wandb.login(verify=True)``) before the run opens. Offline
(``mode: offline`` or ``WANDB_MODE=offline``) nothing leaves the machine; ``wandb sync
<run folder>`` uploads it later. Every file is checked to exist before the run opens, and the
artifact is logged last, once every file has been added: a failure leaves no artifact.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from hed.config.publish import WandbPublishParams
from hed.errors import (
    ConfigError,
    CredentialsError,
    HEDError,
    InputDataError,
    OutputWriteError,
    one_line,
)
from hed.io.study_bundle import StudyBundle, bundle_manifest, check_bundle_files

logger = logging.getLogger(__name__)

ARTIFACT_TYPE = "hed-study"
JOB_TYPE = "hed-publish"
MANIFEST_NAME = "hed_publication.json"

_KEY_RE = re.compile(r"[^A-Za-z0-9_.\-]+")


def artifact_name(study: str) -> str:
    """``hed-<study>`` with characters W&B refuses in artifact names replaced by ``-``."""
    return "hed-" + _KEY_RE.sub("-", study)


def run_mode(settings: WandbPublishParams) -> str:
    """``online`` or ``offline``: ``publish.wandb.mode``, else ``WANDB_MODE``, else online.

    Raises:
        InputDataError: ``WANDB_MODE`` holds another value (``disabled`` would publish nothing).
    """
    mode = settings.mode or os.environ.get("WANDB_MODE") or "online"
    if mode == "dryrun":  # wandb's old spelling of offline
        mode = "offline"
    if mode not in ("online", "offline"):
        raise InputDataError(
            f"WANDB_MODE={mode!r}: publishing to W&B needs online or offline "
            "(or set publish.wandb.mode)"
        )
    return mode


def check_wandb_login(base_url: str | None = None) -> str:
    """Find the W&B key as for pass@1, check the server answers and that it accepts the key.

    Returns:
        The server's URL.

    Raises:
        CredentialsError: no key anywhere (the message says where to put one), or the server
            refuses it.
        InputDataError: the server cannot be reached.
    """
    import wandb

    from hed.pass1.credentials import check_reachable, resolve_wandb_api_key, wandb_base_url

    server = (base_url or wandb_base_url()).rstrip("/")
    try:
        key = resolve_wandb_api_key(base_url=server)
    except ConfigError as exc:  # found as for pass@1; raised from a dataset's save here
        raise CredentialsError(str(exc).replace("for the wandb source", "to publish")) from None
    try:
        check_reachable(server)
    except InputDataError as exc:  # its hint names the pass@1 sources; say how to publish
        reason = str(exc).split(": no network?")[0]
        raise InputDataError(
            f"{reason}: no network? publish offline (publish.wandb.mode: offline) and upload "
            "later with `wandb sync`; nothing was uploaded"
        ) from None
    try:
        ok = wandb.login(key=key, host=server, verify=True, relogin=True, prompt=False)
    except Exception as exc:  # wandb raises AuthenticationError, UsageError, CommError...
        raise CredentialsError(
            f"W&B at {server} refused the API key ({one_line(exc, limit=200)}): run `wandb "
            "login --relogin` or fix WANDB_API_KEY; nothing was uploaded"
        ) from None
    if ok is False:
        raise CredentialsError(f"W&B at {server} refused the API key: run `wandb login --relogin`")
    return server


def run_notes(bundle: StudyBundle) -> str:
    """The run's notes (Markdown): provenance, then one line per training run pass@1 came from."""
    lines = [bundle.provenance(), "", "pass@1 read from:"]
    for link in bundle.pass1_runs:
        where = f"[{link['path']}]({link['url']})" if link.get("url") else f"`{link['path']}`"
        lines.append(f"- {link['run']}: {link['source']} {where}")
    if not bundle.pass1_runs:
        lines.append("- no training run (pass@1 graded by HED or absent)")
    return "\n".join(lines)


def _media(bundle: StudyBundle, wandb: Any) -> dict[str, Any]:
    """One history row: figures as images, CSV tables as tables, pages as HTML."""
    row: dict[str, Any] = {}
    for f in bundle.of_kind("figure"):
        row[f"figures/{Path(f.path).stem}"] = wandb.Image(f.source, caption=f.dataset)
    for f in bundle.of_kind("table"):
        if f.path.endswith(".csv"):
            row[f"tables/{Path(f.path).stem}"] = wandb.Table(dataframe=pd.read_csv(f.source))
    for f in bundle.of_kind("page"):
        html = Path(f.source).read_text(encoding="utf-8")
        row[f"pages/{Path(f.path).stem}"] = wandb.Html(html, inject=False, data_is_not_path=True)
    return row


def _artifact(bundle: StudyBundle, manifest_file: Path, wandb: Any) -> Any:
    """The complete artifact (every file added; not yet logged)."""
    artifact = wandb.Artifact(
        artifact_name(bundle.study),
        type=ARTIFACT_TYPE,
        description=bundle.provenance(),
        metadata={
            "study": bundle.study,
            "run_id": bundle.run_id,
            "git_commit": bundle.git_commit,
            "pass1_runs": [dict(link) for link in bundle.pass1_runs],
        },
    )
    for f in bundle.files:
        # records can be GBs: referenced in place (their versioned files are never rewritten)
        policy = "immutable" if f.kind == "records" else "mutable"
        artifact.add_file(f.source, name=f.path, policy=policy)
    artifact.add_file(str(manifest_file), name=MANIFEST_NAME)
    return artifact


def log_study(
    bundle: StudyBundle,
    settings: WandbPublishParams,
    *,
    login_check: Callable[[], Any] | None = None,
    on_open: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """Log ``bundle`` to one W&B run (see the module docstring for what goes where).

    Args:
        bundle: the study (:func:`hed.io.study_bundle.plan_bundle`).
        settings: ``publish.wandb``.
        login_check: called before the run opens when online (default
            :func:`check_wandb_login`).
        on_open: called with the run's local folder (``.../wandb/<offline-run|run>-<time>-<id>``)
            as soon as the run is open, before anything is logged (the receipt dataset notes
            it, to clear it away if this attempt is killed).

    Returns:
        ``{"mode", "run_id", "run_path", "url", "run_dir", "artifact"}``; ``url`` is ``None``
        offline, where ``run_dir`` is what ``wandb sync`` takes.

    Raises:
        CredentialsError: no key, or W&B refuses it (before the run opens).
        InputDataError: a ``WANDB_MODE`` other than online/offline, a file of the bundle is
            missing, W&B cannot be reached (all before the run opens).
        OutputWriteError: logging failed half-way (the run is marked failed; no artifact).
    """
    import wandb

    mode = run_mode(settings)
    check_bundle_files(bundle)
    if mode == "online":
        (login_check or check_wandb_login)()
    run_dir_root = Path(settings.dir) if settings.dir else None
    if run_dir_root is not None:
        run_dir_root.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=settings.project,
        entity=settings.entity,
        name=settings.name or f"hed-{bundle.study}",
        job_type=JOB_TYPE,
        group=bundle.study,
        tags=list(settings.tags),
        notes=run_notes(bundle),
        config=dict(bundle.config),
        dir=str(run_dir_root) if run_dir_root else None,
        mode=mode,
        reinit="create_new",
        settings=wandb.Settings(console="off", save_code=False, x_disable_stats=True),
    )
    if on_open is not None:
        on_open(str(Path(run.dir).parent))
    try:
        with tempfile.TemporaryDirectory(prefix="hed-publish-") as scratch:
            manifest_file = Path(scratch) / MANIFEST_NAME
            manifest_file.write_text(json.dumps(bundle_manifest(bundle), indent=2) + "\n")
            run.log(_media(bundle, wandb))
            artifact = _artifact(bundle, manifest_file, wandb)
            aliases = ["latest", f"run-{_KEY_RE.sub('-', str(bundle.run_id))}"]
            run.log_artifact(artifact, aliases=aliases)
            if mode == "online":
                artifact.wait()
        result = {
            "mode": mode,
            "run_id": run.id,
            "run_path": f"{run.entity}/{run.project}/{run.id}" if mode == "online" else None,
            "url": run.url if mode == "online" else None,
            "run_dir": str(Path(run.dir).parent),
            "artifact": f"{artifact.name}",
        }
    except HEDError:
        run.finish(exit_code=1)
        raise
    except Exception as exc:
        run.finish(exit_code=1)
        raise OutputWriteError(
            f"logging study {bundle.study} to W&B failed ({one_line(exc, limit=200)}); the run "
            "is marked failed and holds no artifact: fix the cause and publish again"
        ) from None
    run.finish()
    if mode == "offline":
        logger.info(
            "W&B offline run written to %s: upload it with `wandb sync %s`",
            result["run_dir"],
            result["run_dir"],
        )
    else:
        logger.info("W&B run of study %s: %s", bundle.study, result["url"])
    return result
