"""An offline Weights & Biases run that never reaches a server.

:func:`offline_wandb_run` starts ``wandb.init(mode="offline")`` in ``<root>/wandb/offline-run-*``
with every feature that could touch the network or the machine off (git and code capture,
system metrics, machine info, the viewer query, error reporting to Sentry) and with wandb's
config, cache and data folders in a private temporary folder, so nothing is read from or
written to ``~/.config/wandb``. The W&B environment variables it sets are restored when the
run ends, and the wandb service process is stopped (``wandb.teardown``).

The transformers ``WandbCallback`` of a trainer created inside the ``with`` block logs into
this run (it re-uses ``wandb.run``). HED reads the run back with
:func:`hed.pass1.wandb_offline.read_wandb_offline_history` (``wandb leet inspect --json``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: W&B environment while the run is open (offline, silent, nothing uploaded or reported).
_OFFLINE_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_ERROR_REPORTING": "false",
    "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true",
    "WANDB_LOG_MODEL": "false",  # transformers' WandbCallback: no model artifacts
    "WANDB_WATCH": "false",
}


@contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def offline_wandb_run(
    root: str | os.PathLike, *, project: str, name: str, config: Mapping[str, Any] | None = None
) -> Iterator[Any]:
    """Open an offline W&B run under ``root`` and yield it (``wandb.sdk.wandb_run.Run``).

    Args:
        root: folder that receives ``wandb/offline-run-<time>-<id>/`` (created).
        project: W&B project name stored in the run.
        name: display name of the run.
        config: the run's config (hyper-parameters).

    Yields:
        The run; it is finished (flushed to ``run-<id>.wandb``) when the block exits.
    """
    import wandb

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hed-wandb-") as private:
        env = {
            **_OFFLINE_ENV,
            "WANDB_DIR": str(root),
            "WANDB_PROJECT": project,  # transformers' WandbCallback reads it
            "WANDB_CONFIG_DIR": str(Path(private) / "config"),
            "WANDB_CACHE_DIR": str(Path(private) / "cache"),
            "WANDB_DATA_DIR": str(Path(private) / "data"),
        }
        with _environment(env):
            api_key = os.environ.pop("WANDB_API_KEY", None)  # never needed offline
            try:
                run = wandb.init(
                    mode="offline",
                    dir=str(root),
                    project=project,
                    name=name,
                    config=dict(config or {}),
                    settings=wandb.Settings(
                        console="off",
                        save_code=False,
                        disable_git=True,
                        disable_code=True,
                        disable_job_creation=True,
                        x_disable_stats=True,
                        x_disable_meta=True,
                        x_disable_machine_info=True,
                        x_disable_viewer=True,
                    ),
                )
                try:
                    yield run
                finally:
                    run.finish()
                    wandb.teardown()
            finally:
                if api_key is not None:
                    os.environ["WANDB_API_KEY"] = api_key


def offline_run_folder(root: str | os.PathLike) -> Path:
    """The ``offline-run-*`` folder under ``<root>/wandb`` (the newest when there are several).

    Raises:
        FileNotFoundError: there is none.
    """
    found = sorted((Path(root) / "wandb").glob("offline-run-*"))
    if not found:
        raise FileNotFoundError(f"no W&B offline run under {Path(root) / 'wandb'}")
    return found[-1]
