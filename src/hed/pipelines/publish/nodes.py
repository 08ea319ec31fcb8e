"""Nodes of the publish pipeline: which files of the latest reporting run go where.

``plan_publication`` → ``results/final_artifacts/<env>/``; ``plan_study_bundle`` → the study
as one bundle, which ``log_study_to_wandb`` and ``commit_study_to_hub`` hand to their catalog
datasets (a W&B run, one Hugging Face commit).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from hed.config.publish import PublishParams
from hed.errors import ConfigError
from hed.io.publishing import check_env_name, environment_label, rerun_reporting
from hed.io.study_bundle import StudyBundle, plan_bundle


def plan_publication(
    resolved_config: dict[str, Any],
    run_context: dict[str, Any],
    publish: PublishParams | dict[str, Any],
) -> dict[str, Any]:
    """Choose the files to publish: those the latest ``resolved_config`` names as its run's outputs.

    Publishing the files of one reporting run (rather than the latest version of each dataset
    separately) keeps tables, figures and config consistent with each other. The destination
    folder is ``publish.env_name``, or the name of the environment of this ``kedro run``
    (``--env``; ``base`` without one).

    Args:
        resolved_config: the latest ``resolved_config`` (its ``artifacts``: name → path, version).
        run_context: from :class:`hed.hooks.ProvenanceHooks` (``env`` of this run).
        publish: ``params:publish``, parsed (:class:`~hed.config.publish.PublishParams`) or raw
            (``env_name``: folder name override; ``git_lfs``).

    Returns:
        The plan :class:`hed.io.datasets.PublishedArtifactsDataset` saves (``final_artifacts``).

    Raises:
        ConfigError: the latest ``resolved_config`` comes from another environment, or does not
            name its output files (reporting ran without ``ProvenanceHooks``).
    """
    env = _check_same_env(resolved_config, run_context)
    params = PublishParams.of(publish)
    run_id = resolved_config.get("run_id")
    rerun = f"`{rerun_reporting(env)}`"
    artifacts = resolved_config.get("artifacts") or {}
    unnamed = sorted(name for name, info in artifacts.items() if not (info or {}).get("path"))
    if not artifacts or unnamed:
        raise ConfigError(
            f"resolved_config of run {run_id} does not name the file of "
            f"{', '.join(unnamed) or 'any output'}: register hed.hooks.ProvenanceHooks "
            f"in settings.py and run {rerun}"
        )
    files = {
        PurePosixPath(str(info["filepath"])).name: {
            "dataset": name,
            "path": str(info["path"]),
            "version": info.get("version"),
        }
        for name, info in artifacts.items()
    }
    return {
        "env": check_env_name(params.env_name or env),
        "git_lfs": params.git_lfs,
        "project_path": resolved_config.get("project_path"),
        "source": {"env": resolved_config.get("env"), "run_id": run_id},
        "files": files,
    }


def _check_same_env(resolved_config: dict[str, Any], run_context: dict[str, Any]) -> str:
    """The label of this run's environment, once checked to be that of ``resolved_config``.

    Raises:
        ConfigError: the latest ``resolved_config`` comes from another environment.
    """
    env = environment_label((run_context or {}).get("env"))
    source_env = environment_label(resolved_config.get("env"))
    if source_env != env:
        raise ConfigError(
            f"the latest resolved_config was written by environment {source_env!r} (run "
            f"{resolved_config.get('run_id')}), not {env!r}: run `{rerun_reporting(env)}` first "
            "(or give each environment its own data folder)"
        )
    return env


def plan_study_bundle(
    resolved_config: dict[str, Any],
    run_context: dict[str, Any],
    publish: PublishParams | dict[str, Any],
    *records: Any,
) -> StudyBundle:
    """The study as one bundle: the latest reporting run's files, tables and pages, and (with
    ``publish.include_records``) every step's merged records and responses.

    Args:
        resolved_config: the latest ``resolved_config``.
        run_context: from :class:`hed.hooks.ProvenanceHooks`; its ``inputs`` name the exact
            file of each records dataset this node takes.
        publish: ``params:publish``, parsed or raw.
        records: the ``<run>.step_<step>.token_records`` / ``.sequences`` datasets (lazy;
            only their recorded paths are used).

    Returns:
        The :class:`hed.io.study_bundle.StudyBundle` (study = ``publish.env_name`` or the env).

    Raises:
        ConfigError: ``resolved_config`` of another environment, or naming no figure file.
    """
    env = _check_same_env(resolved_config, run_context)
    params = PublishParams.of(publish)
    return plan_bundle(
        resolved_config,
        (run_context or {}).get("inputs"),
        study=check_env_name(params.env_name or env),
        include_records=params.include_records,
    )


def log_study_to_wandb(
    study_bundle: StudyBundle, publish: PublishParams | dict[str, Any]
) -> dict[str, Any]:
    """What ``wandb_publication`` logs: the bundle and ``publish.wandb`` (checked)."""
    return {"bundle": study_bundle, "settings": PublishParams.of(publish).wandb}


def commit_study_to_hub(
    study_bundle: StudyBundle, publish: PublishParams | dict[str, Any]
) -> dict[str, Any]:
    """What ``hub_publication`` commits: the bundle and ``publish.hub`` (checked)."""
    return {"bundle": study_bundle, "settings": PublishParams.of(publish).hub}
