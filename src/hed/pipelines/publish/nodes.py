"""Node of the publish pipeline: which files of the latest reporting run go to ``results/``."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from hed.errors import ConfigError
from hed.io.publishing import check_env_name, environment_label, rerun_reporting


def plan_publication(
    resolved_config: dict[str, Any], run_context: dict[str, Any], publish: dict[str, Any]
) -> dict[str, Any]:
    """Choose the files to publish: those the latest ``resolved_config`` names as its run's outputs.

    Publishing the files of one reporting run (rather than the latest version of each dataset
    separately) keeps tables, figures and config consistent with each other. The destination
    folder is ``publish.env_name``, or the name of the environment of this ``kedro run``
    (``--env``; ``base`` without one).

    Args:
        resolved_config: the latest ``resolved_config`` (its ``artifacts``: name → path, version).
        run_context: from :class:`hed.hooks.ProvenanceHooks` (``env`` of this run).
        publish: ``params:publish`` (``env_name``: folder name override, default null).

    Returns:
        The plan :class:`hed.io.datasets.PublishedArtifactsDataset` saves (``final_artifacts``).

    Raises:
        ConfigError: the latest ``resolved_config`` comes from another environment, or does not
            name its output files (reporting ran without ``ProvenanceHooks``).
    """
    env = environment_label((run_context or {}).get("env"))
    source_env = environment_label(resolved_config.get("env"))
    run_id = resolved_config.get("run_id")
    rerun = f"`{rerun_reporting(env)}`"
    if source_env != env:
        raise ConfigError(
            f"the latest resolved_config was written by environment {source_env!r} (run {run_id}), "
            f"not {env!r}: run {rerun} first (or give each environment its own data folder)"
        )
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
        "env": check_env_name(publish.get("env_name") or env),
        "project_path": resolved_config.get("project_path"),
        "source": {"env": resolved_config.get("env"), "run_id": run_id},
        "files": files,
    }
