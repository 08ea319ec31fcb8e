"""HED's Kedro hooks, registered in ``settings.py`` (their order there matters: pluggy calls
the last registered first).

* :mod:`hed.hooks.project`: the environment, its keys and data root, the run lock and
  credentials (``ProjectHooks``); ``run_context`` and the end-of-run summary
  (``ProvenanceHooks``); atomic writes, shard areas, the resume command.
* :mod:`hed.hooks.inputs`: the one check of a run's parameters (:mod:`hed.hooks.parameters`)
  and inputs before its first node (never written, stale, damaged tables, reused shards) and
  what each saved dataset was computed from (``InputHooks``).
* :mod:`hed.hooks.layout`: the session's parameters handed to pipeline construction
  (``LayoutHooks``).

Every hook module logs as ``hed.hooks``.
"""

from hed.hooks.inputs import InputHooks
from hed.hooks.layout import LayoutHooks
from hed.hooks.project import (
    AtomicWritesHooks,
    ProjectHooks,
    ProvenanceHooks,
    ResumeHooks,
    ShardPartsHooks,
    check_env_exists,
    env_label,
    session_data_root,
)

__all__ = [
    "AtomicWritesHooks",
    "InputHooks",
    "LayoutHooks",
    "ProjectHooks",
    "ProvenanceHooks",
    "ResumeHooks",
    "ShardPartsHooks",
    "check_env_exists",
    "env_label",
    "session_data_root",
]
