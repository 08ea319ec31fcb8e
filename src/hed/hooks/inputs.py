"""``InputHooks``: the one check of a run's parameters and inputs before its first node (bad
values, never written, stale, an empty or cut-short table, shards ``--only-missing-outputs``
would reuse), what each saved dataset was computed from, and a warning when a notebook's catalog
loads a stale one (:mod:`hed.hooks.parameters`, :mod:`hed.io.freshness`,
:mod:`hed.io.missing_inputs`, :mod:`hed.io.table_files`, :mod:`hed.io.reused_shards`).
"""

from __future__ import annotations

import logging
from typing import Any

from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl

from hed.config import session
from hed.config.messages import naming_files
from hed.core.command_line import update_command
from hed.hooks.parameters import hand_to_nodes, parsed_sections
from hed.hooks.project import key_origins, session_data_root
from hed.io.freshness import Freshness, StaleInputError
from hed.io.mass_refresh import check_mass_lexicon
from hed.io.missing_inputs import (
    check_inputs_exist,
    outputs_of,
    pipelines_to_update,
    producers_of,
    project_pipelines,
    with_downstream,
)
from hed.io.reused_shards import check_reused_shards
from hed.io.table_files import check_input_tables

logger = logging.getLogger("hed.hooks")


class InputHooks:
    """Check a run's inputs before its first node, and record ``computed_from``: what each
    saved dataset was computed from (:mod:`hed.io.freshness`).

    Registered last in ``settings.HOOKS`` so that its ``before_pipeline_run`` runs first
    (pluggy calls the last registered first): a refusal comes before the run lock is taken.
    ``gpu`` nodes (shards, with their own metadata) are not recorded.
    """

    def __init__(self) -> None:
        self._fresh: Freshness | None = None
        self._catalog: Any = None
        self._parameters: dict[str, Any] = {}
        self._context: KedroContext | None = None

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        self._context = context

    @hook_impl
    def after_catalog_created(self, catalog: Any, parameters: dict[str, Any]) -> None:
        """A catalog outside a run (a notebook's ``catalog``) warns when it loads a stale
        dataset (:func:`warn_on_stale_loads`); a run's catalog is unwrapped before its run."""
        root = session_data_root(self._context) if self._context is not None else None
        if root is not None:
            context = self._context
            run_parameters = (parameters or {}).get("parameters") or {}  # Kedro's feed dict
            runtime = getattr(context.config_loader, "runtime_params", None) or {}
            warn_on_stale_loads(catalog, Freshness(root), run_parameters, context.env, runtime)

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        """Refuse, in this order, a bad parameter value (:func:`parsed_sections`), an input the
        pipeline reads that was never written (:mod:`hed.io.missing_inputs`), that is stale
        (:meth:`Freshness.check`), a table that is empty or cut short
        (:func:`~hed.io.table_files.check_input_tables`), or, with ``--only-missing-outputs``, a
        shard made with other parameters (:func:`check_reused_shards`); each input's refusal
        names the command that brings it and everything computed from it up to date
        (:func:`~hed.io.missing_inputs.pipelines_to_update`,
        :func:`~hed.core.command_line.update_command`), its ``--load-versions`` pins dropped.
        Then the parsed sections replace the raw ones in the catalog (:func:`hand_to_nodes`)."""
        catalog.__dict__.pop("load", None)  # a run checks before its first node, below
        root = (
            session_data_root(self._context) if self._context is not None else session.data_root()
        )
        origin = key_origins(self._context) if self._context is not None else None
        with naming_files(origin):
            parsed = parsed_sections(pipeline, catalog, root)
        check_inputs_exist(pipeline, catalog, run_params)
        self._fresh = Freshness(root)
        self._catalog = catalog
        self._parameters = catalog.load("parameters")
        check_mass_lexicon(pipeline, catalog, self._parameters)  # strict: before staleness
        asked = run_params.get("pipeline_names") or []
        env, runtime = run_params.get("env"), run_params.get("runtime_params")
        built: dict[str, Any] = {}  # the project's pipelines, built once when a check fails

        def pipelines() -> dict[str, Any]:
            if not built:
                built.update(project_pipelines(self._parameters))
            return built

        def stale(dataset: str, changed: list[str]) -> str:
            fix = fix_pipelines(self._fresh, dataset, changed, pipelines(), self._parameters)
            # a bad value in what the fix would run is refused as such, not as stale
            with naming_files(origin):
                parsed_sections(sum((pipelines()[n] for n in fix), pipeline), catalog, root)
            return update_command(fix, asked, env, runtime, outputs_of(pipelines(), fix))

        def damaged(dataset: str) -> str:
            writers = producers_of([dataset], pipelines(), catalog)
            writers = with_downstream(writers, pipelines(), self._parameters)
            return update_command(writers, asked, env, runtime, outputs_of(pipelines(), writers))

        self._fresh.check(
            pipeline.inputs(), self._parameters, stale, lambda name: load_version(catalog, name)
        )
        check_input_tables(pipeline, catalog, damaged)
        if run_params.get("only_missing_outputs"):
            check_reused_shards(pipeline, catalog)
        hand_to_nodes(catalog, parsed)

    @hook_impl
    def after_node_run(self, node: Any) -> None:
        if self._fresh is not None and "gpu" not in node.tags:
            self._fresh.node_ran(node, self._parameters)

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, node: Any) -> None:
        if self._fresh is not None and "gpu" not in node.tags:
            self._fresh.saved(dataset_name, save_version(self._catalog, dataset_name))


def save_version(catalog: Any, name: str) -> str | None:
    """The version ``name`` is saved under in this run (None: unversioned or unknown)."""
    dataset = _versioned(catalog, name)
    return None if dataset is None else dataset.resolve_save_version()


def load_version(catalog: Any, name: str) -> str | None:
    """The version of ``name`` this run would load (None: unversioned, none, or unknown)."""
    dataset = _versioned(catalog, name)
    try:
        return None if dataset is None else dataset.resolve_load_version()
    except Exception:  # no version yet: the missing-input check words that
        return None


def _versioned(catalog: Any, name: str) -> Any:
    try:
        dataset = catalog.get(name) if catalog is not None else None
    except Exception:
        return None
    return dataset if getattr(dataset, "_version", None) is not None else None


def warn_on_stale_loads(
    catalog: Any,
    fresh: Freshness,
    parameters: dict[str, Any],
    env: str | None = None,
    runtime_params: dict[str, Any] | None = None,
) -> None:
    """Make ``catalog.load(name)`` log a warning when ``name`` is stale (a notebook).

    The data is returned all the same (a notebook may look at an earlier result on purpose);
    the warning is the refusal a run would give: what changed and the command that brings it
    up to date. ``prompts`` and ``checkpoints`` are checked too (a run reuses them by design:
    the shards' own checks decide). Only ``catalog.load`` of this catalog instance is wrapped.
    """
    original = catalog.load

    def command(dataset: str, changed: list[str]) -> str:
        built = project_pipelines(parameters)
        fix = fix_pipelines(fresh, dataset, changed, built, parameters)
        return update_command(fix, [], env, runtime_params)

    def load(name: str, *args: Any, **kwargs: Any) -> Any:
        data = original(name, *args, **kwargs)
        try:
            fresh.check([name], parameters, command, lambda n: load_version(catalog, n), skip=())
        except StaleInputError as exc:
            logger.warning("%s (loaded all the same: this is an earlier result)", exc)
        except Exception:  # the warning is a courtesy: never fail a load over it
            logger.debug("freshness of %s not checked", name, exc_info=True)
        return data

    catalog.load = load


def fix_pipelines(
    fresh: Freshness, dataset: str, changed: list[str], built: dict, parameters: dict
) -> list[str]:
    """:func:`~hed.io.missing_inputs.pipelines_to_update`, with ``generation`` only when the
    shards are not known to be current: when a changed generation/prompts key also differs
    in the newest record of some step's merged records (aggregation refuses stale shards, so
    merged records that agree with the current parameters were made from current shards)."""
    keys = [k for k in changed if k.startswith(("generation.", "prompts."))]
    aggregation = built.get("aggregation")
    merged = (
        []
        if aggregation is None
        else sorted(n for n in aggregation.all_outputs() if n.endswith(".token_records"))
    )
    resample = not (keys and merged and fresh.agree(merged, keys, parameters))
    return pipelines_to_update(dataset, changed, built, parameters, resample)
