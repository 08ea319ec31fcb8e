"""Project hooks: cross-cutting concerns that do not belong in nodes."""

from __future__ import annotations

from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl

from hed import layout


class ProjectHooks:
    """HED's project hooks."""

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        """Hand the environment's parameters to :mod:`hed.layout` before pipelines are built.

        The generation and aggregation pipelines have one node per (run, step[, shard]), so
        ``register_pipelines`` needs the active environment's ``runs`` and ``num_shards``
        (runtime ``--params`` included).
        """
        layout.activate(context.params)
