"""Project hooks: cross-cutting concerns that do not belong in nodes.

:class:`ProjectHooks` checks the environment and its keys, exports credentials and takes the
run lock (after :class:`hed.hooks.inputs.InputHooks` has checked the run's parameters and
inputs); :class:`ProvenanceHooks`
fills ``run_context`` with what only the session knows (:mod:`hed.io.provenance`) and ends a
run with its summary; :class:`AtomicWritesHooks`, :class:`ShardPartsHooks` and
:class:`ResumeHooks` are described where they are defined. ``settings.py`` registers them.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kedro.config import MissingConfigException, OmegaConfigLoader
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.framework.project import settings
from kedro.io.core import VERSION_FORMAT

from hed.config import sections, session
from hed.errors import ConfigError
from hed.io import run_lock
from hed.io.catalog_keys import check_catalog_keys
from hed.io.provenance import RUN_CONTEXT, build_run_context, describe_dataset, is_dataset_input
from hed.io.publishing import published_by_run
from hed.pass1.credentials import export_wandb_api_key
from hed.records.object_store import make_dataset_writes_atomic
from hed.records.rollout_flags import dump_flag_shares, flag_share_lines
from hed.records.shard_metadata import GENERATION_METADATA_KEY
from hed.runners.executor import RunInterruptedError
from hed.runners.resume import interrupted_error, resume_command, resume_nodes

logger = logging.getLogger("hed.hooks")


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
    # a new OmegaConfigLoader takes over OmegaConf's process-wide `globals` resolver: give it
    # back to the run's loader, whose catalog reads `${globals:data_root}`
    restore = getattr(context.config_loader, "_register_globals_resolver", None)
    if len(loaders) > 1 and callable(restore):
        restore()
    return credentials


class ProjectHooks:
    """HED's project hooks."""

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        """Check the environment exists and no parameter or catalog key is unknown (before
        :class:`hed.hooks.layout.LayoutHooks` hands the parameters to the layout); keep the
        session's data root for the run lock.

        Also exports ``wandb.api_key`` of the credentials (see :func:`_credentials`) as
        ``WANDB_API_KEY`` (when that variable is not already set) for the metrics pipeline's
        ``wandb`` source; no credentials file or no ``wandb`` entry is fine (W&B is optional).
        """
        check_env_exists(context)
        parameters = context.config_loader["parameters"]
        conf_source = context.project_path / settings.CONF_SOURCE
        sections.check_unknown_keys(parameters, key_origins(context))
        check_catalog_keys(context.config_loader["catalog"], conf_source, context.env)
        self._data_root = session_data_root(context)
        self._conf = (conf_source, Path(context.project_path))
        export_wandb_api_key(_credentials(context))

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        """Take the data root's run lock (:mod:`hed.io.run_lock`), after the data root is
        checked to be this environment's."""
        env = env_label(run_params.get("env"))
        if getattr(self, "_conf", None):
            run_lock.check_declared_root(self._data_root, env, *self._conf)
        run_lock.claim_root(self._data_root, env)
        run_lock.acquire(self._data_root, env)

    @hook_impl
    def after_pipeline_run(self) -> None:
        """Release the data root's run lock (:mod:`hed.io.run_lock`)."""
        run_lock.release(self._data_root)

    @hook_impl
    def on_pipeline_error(self) -> None:
        """Release the data root's run lock when the run fails or is interrupted."""
        run_lock.release(self._data_root)


def key_origins(context: KedroContext) -> Callable[[str], str]:
    """``dotted key -> the file (or --params) that set it`` in this session
    (:func:`hed.config.sections.key_origin`), for messages."""
    conf_source = context.project_path / settings.CONF_SOURCE
    runtime = getattr(context.config_loader, "runtime_params", None)
    return lambda key: sections.key_origin(key, conf_source, context.env, runtime)


def env_label(env: str | None) -> str:
    """The environment's name for the data root: ``base`` for the default (``local``)."""
    return env if env not in (None, "", "local", "base") else "base"


def session_data_root(context: KedroContext) -> str:
    """``globals.data_root`` of the context's environment (``data`` when unset), under the
    project folder when relative (as Kedro resolves the catalog's relative file paths)."""
    try:
        root = context.config_loader["globals"].get("data_root")
    except MissingConfigException:
        root = None
    root = str(root or session.DEFAULT_DATA_ROOT)
    if root.startswith("hf://"):
        raise ConfigError(
            f"globals.data_root {root}: a data root on the Hub makes every file "
            "a commit of its own (rate limits); keep data_root local or on s3:// / gs:// and "
            "publish to the Hub with `kedro run --pipelines publish` (publish.hub, "
            "docs/publishing.md)"
        )
    if "://" in root:  # an object store (s3://, gs://): a URL, not a project folder
        return root
    return str(Path(context.project_path) / root)


def check_env_exists(context: KedroContext) -> None:
    """Refuse ``--env <name>`` when ``conf/<name>`` does not exist, listing the valid names.

    Raises:
        ConfigError: one line: the unknown name, the nearest valid one and every valid one.
    """
    message = session.unknown_env(context.project_path / settings.CONF_SOURCE, context.env)
    if message:
        raise ConfigError(message)


#: Outputs whose file the end of a run names in the log (the figures and what they are drawn from).
_ANNOUNCED = {
    "figure2_png",
    "figure3_png",
    "figure2_paper_reproduction",
    "figure2_single_run_diagnostic",
    "figure3_table",
    "resolved_config",
}


class ProvenanceHooks:
    """Fill ``run_context`` for the nodes that take it (:mod:`hed.io.provenance` says what it
    holds).

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
        """End the run with a summary: the current file of every figure and table it wrote.

        Versioned outputs sit in timestamped folders (``<file>/<version>/<file>``); the summary
        names the version each one loads now, so nothing has to be looked up. Only files this
        run wrote are listed (:func:`written_by_run`): a run whose nodes were all skipped
        (``--only-missing-outputs`` with every output present) says "nothing written". A
        publish run lists what it published (:func:`hed.io.publishing.published_by_run`).
        A run that scored shards from a verl dump adds the share of flagged dump rows per
        (run, step), from the metadata of the shards it wrote (:func:`dump_flag_summary`).
        """
        announced = [
            name
            for name in sorted(pipeline.all_outputs())
            if is_dataset_input(name)
            and (
                name in _ANNOUNCED
                or str(describe_dataset(catalog, name)["type"]).endswith(_TABLE_TYPES)
            )
        ]
        written = [
            path
            for name in announced
            if (path := written_by_run(catalog, name, run_params.get("run_id")))
        ]
        published = published_by_run(catalog, pipeline.all_outputs(), run_params.get("run_id"))
        if published:
            logger.info("Run summary: published\n  %s", "\n  ".join(published))
        if written:
            logger.info(
                "Run summary: %d figure(s) and table(s) written; current files:\n  %s",
                len(written),
                "\n  ".join(written),
            )
        elif announced and not published:
            logger.info(
                "Run summary: nothing written (no figure or table of this pipeline was "
                "(re)computed; the current files are those of an earlier run)"
            )
        elif not published:  # a pipeline without tables or figures (generation): its records
            _summarise_records(pipeline, catalog, run_params.get("run_id"))
        for line in mismatched_figures(catalog, set(announced)):
            logger.warning("Run summary: %s", line)
        flags = dump_flag_summary(pipeline, catalog, run_params.get("run_id"))
        if flags:
            logger.info(
                "Run summary: verl dump rows:%s",
                f" {flags[0]}" if len(flags) == 1 else "\n  " + "\n  ".join(flags),
            )


#: A shard's ``sequences`` output (its ``hed.generation`` metadata holds the dump flags).
_SHARD_SEQUENCES = re.compile(r"^.+\.step_\d+\.shard_\d+\.sequences$")


def dump_flag_summary(pipeline: Any, catalog: Any, run_id: str | None) -> list[str]:
    """The flag shares of the dump rows scored by this run, one line per (run, step) and a
    total (:func:`hed.records.rollout_flags.flag_share_lines`); empty when the run wrote no
    shard scored from a dump. Reads only the metadata of the shard files this run wrote."""
    metadata = []
    for name in sorted(n for n in pipeline.all_outputs() if _SHARD_SEQUENCES.match(n)):
        if not written_by_run(catalog, name, run_id):
            continue
        raw = (catalog.get(name).load().schema.metadata or {}).get(GENERATION_METADATA_KEY)
        try:
            metadata.append(json.loads(raw) if raw else {})
        except ValueError:
            continue  # a shard without readable metadata: aggregation refuses it
    return flag_share_lines(dump_flag_shares(metadata))


def _summarise_records(pipeline: Any, catalog: Any, run_id: str | None) -> None:
    """The run summary of a pipeline that writes records, not tables (generation)."""
    outputs = [n for n in sorted(pipeline.all_outputs()) if is_dataset_input(n)]
    written = [path for n in outputs if (path := written_by_run(catalog, n, run_id))]
    if written:
        logger.info(
            "Run summary: %d of %d output file(s) written (records; this pipeline draws no "
            "figure or table), e.g.\n  %s",
            len(written),
            len(outputs),
            "\n  ".join(written[:3]),
        )
    elif outputs:
        logger.info(
            "Run summary: nothing written (every output of this pipeline was already there: "
            "the current files are those of an earlier run)"
        )


#: A figure and the tables it is drawn from: their current versions must be of one run.
FIGURE_TABLES = {
    "figure2_png": ("figure2_paper_reproduction", "figure2_single_run_diagnostic"),
    "figure3_png": ("figure3_table",),
}


def mismatched_figures(catalog: Any, names: set[str]) -> list[str]:
    """One line per figure whose current version is not of the same run as its table's.

    A run killed between saving a table and its figure (Kedro saves a run's outputs one by
    one) leaves the newest table of that run next to the figure of an earlier one; a later
    run that skips both (``--only-missing-outputs``) would keep them. Versions are Kedro's
    save versions, one per run (its session id).

    Args:
        catalog: the run's catalog. names: the outputs of the pipeline that ran.

    Returns:
        ``<figure> is of run <v1> but <table> of run <v2> (...)``, empty when they agree.
    """
    lines = []
    for figure, tables in FIGURE_TABLES.items():
        table = next((t for t in tables if t in names), None)
        if figure not in names or table is None:
            continue
        versions = []
        for name in (figure, table):
            dataset = catalog.get(name)
            if hasattr(dataset, "_clear_version_cache"):
                dataset._clear_version_cache()
            versions.append(describe_dataset(catalog, name, "load").get("version"))
        if None not in versions and versions[0] != versions[1]:
            lines.append(
                f"{figure} is of run {versions[0]} but {table} of run {versions[1]} (a run "
                "was interrupted between them): redraw both with `kedro run --pipelines "
                "reporting` (without --only-missing-outputs)"
            )
    return lines


def written_by_run(catalog: Any, name: str, run_id: str | None) -> str | None:
    """The file of ``name`` this run wrote, or None when it wrote none.

    A versioned dataset counts when the version it loads now is the run's save version
    (Kedro saves every versioned output of a run under the session id); an unversioned one
    when its file was modified after the run started (the session id is its start time).
    """
    dataset = catalog.get(name) if name in catalog else None
    if hasattr(dataset, "_clear_version_cache"):
        dataset._clear_version_cache()  # a runner's subprocess may have saved it: look again
    info = describe_dataset(catalog, name, "load")
    if not info.get("path") or not run_id:
        return None
    if info.get("version") is not None:
        return info["path"] if info["version"] == run_id else None
    try:
        started = datetime.strptime(run_id, VERSION_FORMAT).replace(tzinfo=UTC).timestamp()
        modified = os.path.getmtime(info["path"])
    except (ValueError, OSError):
        return None
    return info["path"] if modified >= started else None


#: Dataset types whose outputs the run summary lists (tables and figures).
_TABLE_TYPES = ("CSVDataset", "MatplotlibDataset", "TextDataset")


class AtomicWritesHooks:
    """Atomic writes for the datasets of the run (:mod:`hed.records.atomic_io`,
    :mod:`hed.records.object_store`).

    Before the first node, every dataset the pipeline reads or writes is materialised (as the
    runner would, patterns included) and its filesystem replaced by an atomic instance: a local
    one by an :class:`~hed.records.atomic_io.AtomicLocalFileSystem`, an object store's (s3fs,
    gcsfs) by its subclass whose writes abort on an exception; a ``gpu`` node's process receives
    the datasets with it. fsspec's registry (``file``, ``s3``, ``gs``) stays fsspec's own.
    """

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        """Give each of the pipeline's datasets atomic writes (local files and object stores)."""
        for name in sorted(pipeline.datasets()):
            dataset = catalog.get(name, fallback_to_runtime_pattern=True)
            if dataset is not None:
                make_dataset_writes_atomic(dataset)


class ShardPartsHooks:
    """Remove a shard's partial area once every output of its node is saved.

    The generation node takes the area (:class:`hed.records.shard_parts.ShardParts`, loaded from a
    ``<run>.step_<step>.shard_<k>.partial`` dataset) as an input; Kedro saves the node's
    outputs after ``after_node_run``, so the area is removed from ``after_dataset_saved`` of
    the node's last output, and a crash before then keeps it. Works in ``GPURunner``'s node
    processes too (they build their hooks from ``settings.HOOKS``).
    """

    def __init__(self) -> None:
        self._areas: dict[str, tuple[list[Any], set[str]]] = {}

    @hook_impl
    def before_node_run(self, node: Any, inputs: dict[str, Any]) -> None:
        from hed.records.shard_parts import ShardParts

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


class ResumeHooks:
    """After a failed run of a runner that stops at the first error (Kedro's
    ``SequentialRunner``, ``ThreadRunner``): log the command that resumes it.

    The command starts at the nearest nodes whose inputs are on disk
    (:func:`hed.runners.resume.resume_nodes`), so it runs even when the failed node read data
    kept only in memory. ``GPURunner`` and ``RayRunner`` name their own command in their
    ``FailedNodesError`` (computed the same way); nothing is logged for those.
    """

    def __init__(self) -> None:
        self._completed: set[str] = set()
        self._running: tuple[Any, Any] | None = None  # (pipeline, catalog) while a run lasts

    @hook_impl
    def before_pipeline_run(self, pipeline: Any, catalog: Any) -> None:
        self._completed = set()
        self._running = (pipeline, catalog)

    @hook_impl
    def after_node_run(self, node: Any) -> None:
        self._completed.add(node.name)

    @hook_impl
    def after_pipeline_run(self) -> None:
        self._running = None

    def interruption(self) -> RunInterruptedError:
        """What ``kedro run`` shows for a Ctrl-C that the runner did not word itself
        (:func:`hed.runners.resume.interrupted_error`)."""
        return interrupted_error(*(self._running or (None, None)), self._completed)

    @hook_impl
    def on_pipeline_error(self, error: Exception, pipeline: Any, catalog: Any) -> None:
        """Log ``Resume with: kedro run ... --from-nodes ...`` (:func:`resume_command`)."""
        from hed.errors import NodeFailuresError

        if isinstance(error, NodeFailuresError | KeyboardInterrupt) or not self._completed:
            return  # the runner's message names the command; no node done: rerun the same
        unfinished = [node.name for node in pipeline.nodes if node.name not in self._completed]
        starts = resume_nodes(pipeline, unfinished, catalog)
        if starts:
            logger.warning(
                "%d node(s) did not complete; resume with:\n  %s",
                len(unfinished),
                resume_command(starts),
            )
