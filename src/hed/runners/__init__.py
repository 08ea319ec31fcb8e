"""HED's Kedro runners, by the names users type: ``--runner hed.runners.GPURunner`` and
``--runner hed.runners.RayRunner`` (imported on first use: Ray is an extra and slow to import).
"""

from typing import Any

from hed.runners.gpu import FailedNodesError, GPURunner

__all__ = ["FailedNodesError", "GPURunner", "RayRunner"]


def __getattr__(name: str) -> Any:
    if name == "RayRunner":
        from hed.runners.ray import RayRunner

        return RayRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
