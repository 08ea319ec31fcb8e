"""Project hooks: cross-cutting concerns that do not belong in nodes.

:class:`ProjectHooks` activates the environment's layout, exports credentials and runs the
pre-run checks (:mod:`hed.preflight`); :class:`ProvenanceHooks` fills ``run_context`` with
what only the session knows (:mod:`hed.provenance`). ``settings.py`` registers both.
"""

from __future__ import annotations

import logging
from typing import Any

from kedro.config import MissingConfigException, OmegaConfigLoader
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.framework.project import settings

from hed import layout
from hed.pass1_sources import export_wandb_api_key
from hed.preflight import check_parameters, check_reused_shards
from hed.provenance import RUN_CONTEXT, build_run_context, describe_dataset, is_dataset_input

logger = logging.getLogger(__name__)


def _credentials(context: KedroContext) -> dict[str, Any]:
    """Credentials of the run's environment, over those of ``conf/local``.

    Kedro reads ``conf/local`` only when it is the run environment, but secrets live there
    (docs/metrics.md) also for ``kedro run --env qae_repro``; an entry of the run environment wins.
    """
    loaders = [context.config_loader]
    if context.env not in (None, "local"):
        conf_source = str(context.project_path / settings.CONF_SOURCE)
        loaders.append(
            OmegaConfigLoader(conf_source=conf_source, base_env="local", default_run_env="local")
        )
    credentials: dict[str, Any] = {}
    for loader in reversed(loaders):
        try:
            credentials.update(loader["credentials"])
        except MissingConfigException:
            pass
    return credentials


class ProjectHooks:
    """HED's project hooks."""

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        """Hand the environment's parameters to :mod:`hed.layout` before pipelines are built.

        The generation and aggregation pipelines have one node per (run, step[, shard]), so
        ``register_pipelines`` needs the active environment's ``runs`` and ``num_shards``
        (runtime ``--params`` included).

        Also exports ``wandb.api_key`` of the credentials (see :func:`_credentials`) as
        ``WANDB_API_KEY`` (when that variable is not already set) for the metrics pipeline's
        ``wandb`` source; no credentials file or no ``wandb`` entry is fine (W&B is optional).
        """
        # config_loader["parameters"] already holds runtime --params; `context.params` would
        # build (and cache) every pipeline to validate them, before the layout is known.
        layout.activate(context.config_loader["parameters"])
        export_wandb_api_key(_credentials(context))

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        """Check parameters up front (:func:`check_parameters`); with
        ``--only-missing-outputs``, refuse stale shards (:func:`check_reused_shards`)."""
        check_parameters(pipeline, catalog)
        if run_params.get("only_missing_outputs"):
            check_reused_shards(pipeline, catalog)


#: Outputs whose file the end of a run names in the log (the figures and what they are drawn from).
_ANNOUNCED = {
    "figure2_png",
    "figure3_png",
    "figure2_paper_reproduction",
    "figure2_single_run_diagnostic",
    "figure3_table",
    "resolved_config",
    "final_artifacts",
}


class ProvenanceHooks:
    """Fill ``run_context`` for the nodes that take it (:mod:`hed.provenance` says what it holds).

    Stateless: what it records goes into the run's catalog, never onto the instance.
    """

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        """Register ``run_context`` in the catalog when the pipeline reads it."""
        if RUN_CONTEXT in pipeline.inputs():
            catalog[RUN_CONTEXT] = build_run_context(run_params, catalog, pipeline)

    @hook_impl
    def before_node_run(
        self, node: Any, catalog: Any, inputs: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Add the node's resolved inputs (path, load version) to its ``run_context``."""
        if RUN_CONTEXT not in node.inputs:
            return None
        recorded = {
            name: describe_dataset(catalog, name, "load")
            for name in node.inputs
            if is_dataset_input(name)
        }
        return {RUN_CONTEXT: {**(inputs.get(RUN_CONTEXT) or {}), "inputs": recorded}}

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        """Log where the run's figures, figure tables and resolved config were written."""
        written = [
            describe_dataset(catalog, name, "load").get("path")
            for name in sorted(pipeline.all_outputs())
            if name in _ANNOUNCED
        ]
        for path in filter(None, written):
            logger.info("Wrote %s", path)


class ShardPartsHooks:
    """Remove a shard's partial area once every output of its node is saved.

    The generation node takes the area (:class:`hed.shard_parts.ShardParts`, loaded from a
    ``<run>.step_<step>.shard_<k>.partial`` dataset) as an input; Kedro saves the node's
    outputs after ``after_node_run``, so the area is removed from ``after_dataset_saved`` of
    the node's last output, and a crash before then keeps it. Works in ``GPURunner``'s node
    processes too (they build their hooks from ``settings.HOOKS``).
    """

    def __init__(self) -> None:
        self._areas: dict[str, tuple[list[Any], set[str]]] = {}

    @hook_impl
    def before_node_run(self, node: Any, inputs: dict[str, Any]) -> None:
        from hed.shard_parts import ShardParts

        areas = [value for value in inputs.values() if isinstance(value, ShardParts)]
        if areas:
            self._areas[node.name] = (areas, set(node.outputs))

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, node: Any) -> None:
        entry = self._areas.get(node.name)
        if entry is None:
            return
        areas, waiting = entry
        waiting.discard(dataset_name)
        if not waiting:
            del self._areas[node.name]
            for area in areas:
                area.clear()
