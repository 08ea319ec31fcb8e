"""The session's hand-off to pipeline construction (:mod:`hed.config.session`), as a hook.

Kedro 1.7 builds a project's pipelines by calling ``register_pipelines()`` with no arguments and
caches them process-wide, while HED's nodes (one per run × step × shard) depend on the
session's environment and runtime ``--params``. :class:`LayoutHooks` hands those to the session
when the session's context is created, has Kedro rebuild its cached pipelines from them, and
takes them back as soon as the run starts (the pipeline is built by then): a run never reads
them, and a run refused before its first node leaves nothing behind. docs/architecture.md,
"Process state".
"""

from __future__ import annotations

from kedro.framework import project as kedro_project
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl

from hed.config import session
from hed.hooks.project import key_origins, session_data_root


class LayoutHooks:
    """Hand the session's parameters and data root to :mod:`hed.config.session` for as long as
    Kedro builds the session's pipelines."""

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        """Activate the context's parameters (runtime ``--params`` included) and data root.

        Registered before ``ProjectHooks`` in ``settings.HOOKS``, so it runs after that hook's
        checks (pluggy calls the last registered first): an unknown environment or key
        activates nothing.
        """
        # config_loader["parameters"] already holds runtime --params; `context.params` would
        # build (and cache) every pipeline to validate them, before the layout is known.
        parameters = context.config_loader["parameters"]
        session.activate(parameters, session_data_root(context), key_origins(context))
        rebuild_pipelines_on_next_use()

    @hook_impl(tryfirst=True)
    def before_pipeline_run(self) -> None:
        """The pipeline is built: forget the session's configuration before any check or node
        (:func:`hed.config.session.deactivate`)."""
        session.deactivate()


def rebuild_pipelines_on_next_use() -> None:
    """Make Kedro build its pipelines again, from the session just created, on their next use.

    Kedro caches ``register_pipelines()``'s result process-wide and rebuilds it only when the
    requested pipeline names change, so a second session in one process (a notebook re-run
    with other ``--params`` or ``--env``) would run the first one's nodes (its shard count, its
    steps). ``configure`` is Kedro's own reset; the requested names are kept.
    """
    registry = kedro_project.pipelines
    module = getattr(registry, "_pipelines_module", None)
    if module is None:  # no project configured (a bare context in a test)
        return
    requested = getattr(registry, "_requested_pipelines", None)
    registry.configure(module)
    registry.set_requested(requested)
