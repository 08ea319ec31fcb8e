"""The active session's configuration, as pipeline construction reads it.

Why a session hands its configuration over (the one piece of process state HED keeps):
Kedro 1.7 builds pipelines by calling ``register_pipelines()`` with no arguments, from its own
process-wide registry (``kedro.framework.project.pipelines``), while the nodes HED builds depend
on the session's environment and runtime ``--params``, and Kedro offers no other way in. So
``LayoutHooks.after_context_created`` (:mod:`hed.hooks.layout`) hands the context's parameters
and data root to :func:`activate` (and has Kedro rebuild its cached pipelines from them: a
second session in the same process, e.g. a notebook re-run with other ``--params``, gets its
own nodes); ``LayoutHooks.before_pipeline_run`` :func:`deactivate` s them once the pipeline is
built, so nothing outlives the run's start. Nodes and hooks never read it (they get
parameters from the catalog and the data root from the context); only pipeline construction
does. Outside a session (``python -c``, tests, ``hed doctor``) :func:`active_layout` loads
``conf/`` itself with the environment named by ``KEDRO_ENV`` (default ``local`` over
``base``); :func:`session_config` sets one for a ``with`` block.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hed.config.layout import StudyLayout, layout_from_params
from hed.config.messages import naming_files

#: The data root of the base environment (``conf/base/globals.yml``).
DEFAULT_DATA_ROOT = "data"


@dataclass(frozen=True)
class SessionConfig:
    """What a Kedro session hands to pipeline construction.

    Attributes:
        params: the session's parameters (``conf/<env>`` with runtime ``--params`` applied).
        data_root: ``globals.data_root`` of the session's environment, or None (then
            :func:`data_root` reads ``conf/``).
        origin: dotted key -> the file (or ``--params``) that set it, for messages
            (:func:`hed.config.sections.key_origin` of the session), or None.
    """

    params: Mapping[str, Any]
    data_root: str | None = None
    origin: Callable[[str], str] | None = None


#: The session's configuration while one is active (see the module docstring).
_session: SessionConfig | None = None


def activate(
    params: Mapping[str, Any] | None,
    data_root: str | None = None,
    origin: Callable[[str], str] | None = None,
) -> None:
    """Make ``params`` (and ``data_root``) the source of :func:`active_layout`,
    :func:`active_params` and :func:`data_root` until :func:`deactivate`; ``origin`` names the
    file of a key in :func:`active_layout`'s refusals.

    Called by ``LayoutHooks.after_context_created``; ``params=None`` is :func:`deactivate`.
    """
    global _session  # noqa: PLW0603 - the one hand-off from a session to register_pipelines
    _session = None if params is None else SessionConfig(params, data_root, origin)


def deactivate() -> None:
    """Forget the session's configuration: :func:`active_params` reads ``conf/`` again."""
    activate(None)


def active_session() -> SessionConfig | None:
    """The active session's :class:`SessionConfig`, None outside a session."""
    return _session


@contextmanager
def session_config(params: Mapping[str, Any], data_root: str | None = None) -> Iterator[None]:
    """Build pipelines from ``params`` inside a ``with`` block (tests, notebooks), then restore
    what was active before."""
    global _session  # noqa: PLW0603 - restored exactly on leaving the block
    before = _session
    activate(params, data_root)
    try:
        yield
    finally:
        _session = before


def data_root() -> str:
    """The folder every dataset of the active environment lies under.

    ``data_root`` of ``conf/<env>/globals.yml`` (over ``conf/base/globals.yml``): the session's
    when one is active, else that of ``conf/`` for ``KEDRO_ENV``; ``data`` when none is set.
    Paths HED builds itself (the W&B export folder, mini_rl's defaults) start here.
    """
    session = _session
    if session is not None and session.data_root is not None:
        return session.data_root
    import yaml

    # the globals files themselves, not an OmegaConfigLoader: creating one re-registers
    # OmegaConf's process-wide `globals` resolver and would break the session's own loader
    conf = Path(os.environ.get("HED_CONF_SOURCE", "conf"))
    root = DEFAULT_DATA_ROOT
    for env in ("base", os.environ.get("KEDRO_ENV") or "local"):
        path = conf / env / "globals.yml"
        try:
            root = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("data_root", root)
        except (OSError, yaml.YAMLError, AttributeError):
            continue
    return str(root)


def unknown_env(conf: Path, env: str | None) -> str | None:
    """``kedro run``'s one-line refusal of ``--env <env>`` when ``conf/<env>`` does not exist
    (the nearest and every valid name); None when it exists or no environment is named."""
    import difflib

    if not env or (conf / env).is_dir():
        return None
    folders = conf.iterdir() if conf.is_dir() else ()
    valid = sorted(
        p.name for p in folders if p.is_dir() and p.name[0] != "." and p.name != "schema"
    )
    near = difflib.get_close_matches(env, valid, n=1, cutoff=0.5)
    hint = f"did you mean --env {near[0]}? " if near else ""
    return (
        f"--env {env}: there is no {conf.name}/{env} folder; {hint}environments: "
        f"{', '.join(valid)} (create conf/{env}/ for a new study)"
    )


def active_layout() -> StudyLayout:
    """Return the layout of the active session, or of ``conf/`` for ``KEDRO_ENV`` (a missing
    folder in another environment's data root named with that environment: :func:`env_writing`).
    """
    with naming_files(_session.origin if _session is not None else None):
        return layout_from_params(active_params(), env_writing)


def declared_roots(conf: Path) -> dict[str, str]:
    """``{environment: data_root}`` as each ``conf/<env>/globals.yml`` writes it (environments
    without one, or without ``data_root``, left out), in folder-name order."""
    import yaml

    roots = {}
    for globals_file in sorted(conf.glob("*/globals.yml")):
        try:
            declared = yaml.safe_load(globals_file.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(declared, dict) and declared.get("data_root"):
            roots[globals_file.parent.name] = str(declared["data_root"])
    return roots


def env_writing(folder: str) -> str | None:
    """The ``kedro run`` of another environment that writes ``folder``: the environment of
    ``conf/`` whose data root (its ``globals.yml``; the nearest such root) holds ``folder``, when
    that is not the active data root; ``--pipelines mini_rl`` when that environment trains
    (``data/mini_dapo/01_raw/checkpoints/...`` → ``kedro run --env mini_dapo --pipelines
    mini_rl``, whose training ``conf/mini_rollouts`` analyses). None otherwise."""
    conf = Path(os.environ.get("HED_CONF_SOURCE", "conf"))
    target, holders = Path(folder).resolve(), {}
    for env, root in declared_roots(conf).items():
        if target.is_relative_to(Path(root).resolve()):
            holders[Path(root).resolve()] = conf / env
    nearest = max(holders, key=lambda root: len(root.parts), default=None)
    if nearest is None or nearest == Path(data_root()).resolve():
        return None
    env = holders[nearest]
    trains = (env / "parameters_mini_rl.yml").is_file()
    return f"kedro run --env {env.name}" + (" --pipelines mini_rl" if trains else "")


def active_params() -> Mapping[str, Any]:
    """Parameters of the active session, or those of ``conf/`` for ``KEDRO_ENV`` outside one."""
    if _session is not None:
        return _session.params
    from hed.config.loader import HEDConfigLoader

    conf_source = Path(os.environ.get("HED_CONF_SOURCE", "conf"))
    loader = HEDConfigLoader(
        conf_source=str(conf_source),
        base_env="base",
        default_run_env="local",
        env=os.environ.get("KEDRO_ENV"),
    )
    return loader["parameters"]


#: The dataset that says mini_rl's training is done (``conf/mini_dapo``); nodes that read the
#: checkpoints or W&B runs it writes take it as an input.
TRAINING_MANIFEST = "mini_rl_manifest"


def training_inputs(params: dict[str, Any] | None = None) -> dict[str, str]:
    """Extra node inputs that make a node wait for mini_rl's training, where there is one.

    Args:
        params: the environment's parameters (default: :func:`active_params`).

    Returns:
        ``{"training_manifest": "mini_rl_manifest"}`` when the parameters have a ``mini_rl``
        section, else ``{}``. The generation pipeline's ``resolve_checkpoints`` and the metrics
        pipeline's ``fetch_wandb_history`` read what the training writes, so they take it.
    """
    params = active_params() if params is None else params
    return {"training_manifest": TRAINING_MANIFEST} if params.get("mini_rl") else {}
