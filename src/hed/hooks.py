"""Project hooks: cross-cutting concerns that do not belong in nodes."""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any

from kedro.config import MissingConfigException, OmegaConfigLoader
from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.framework.project import settings

from hed import layout
from hed.errors import ConfigError
from hed.pass1_sources import export_wandb_api_key
from hed.pipelines.generation.shard_metadata import (
    GENERATION_METADATA_KEY,
    StaleField,
    stale_reused_shard,
)


def _credentials(context: KedroContext) -> dict[str, Any]:
    """Credentials of the run's environment, over those of ``conf/local``.

    Kedro reads ``conf/local`` only when it is the run environment, but secrets live there
    (DESIGN.md §3) also for ``kedro run --env qae_repro``; an entry of the run environment wins.
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


#: Dataset names of shard files (DESIGN.md §4): ``<run>.step_<step>.shard_<k>.sequences``.
_SHARD_SEQUENCES = re.compile(r"^(?P<step>.+\.step_\d+)\.shard_\d+\.sequences$")


def check_reused_shards(pipeline: Any, catalog: Any) -> int:
    """Refuse an ``--only-missing-outputs`` run that would reuse shards of other parameters.

    ``--only-missing-outputs`` skips every generation node whose shard file exists, whatever
    parameters made it, and then every aggregation node whose outputs exist: after a change
    of ``generation.temperature`` such a run would finish at once and keep the old records.
    Each shard's ``sequences`` file records its generation parameters (``hed.generation``);
    they are compared here with the current ``params:generation`` and ``params:prompts``
    (sampling parameters, dtype, prompt rendering) before anything runs.

    Args:
        pipeline: the pipeline about to run.
        catalog: the run's catalog (``params:generation``, ``params:prompts``, the shards).

    Returns:
        The number of existing shard files checked.

    Raises:
        ConfigError: an existing shard is stale; the message names the file, the parameter,
            both values and the two ways out.
    """
    # only where the run writes shards: an aggregation-only run checks them at the merge
    names = sorted(n for n in pipeline.all_outputs() if _SHARD_SEQUENCES.match(n))
    if not names or "params:generation" not in pipeline.datasets():
        return 0
    generation = catalog.load("params:generation") or {}
    prompt_params = catalog.load("params:prompts") if "params:prompts" in catalog else None
    checked = 0
    for name in names:
        dataset = catalog.get(name)
        if dataset is None or not dataset.exists():
            continue
        records = dataset.load()
        files = getattr(records, "files", None) or [name]
        raw = (records.schema.metadata or {}).get(GENERATION_METADATA_KEY)
        checked += 1
        try:
            recorded = json.loads(raw) if raw else None
        except ValueError:
            recorded = None
        stale = recorded and stale_reused_shard(recorded, generation, prompt_params)
        shards = recorded and recorded.get("num_shards")
        if not stale and shards and shards != generation.get("num_shards", shards):
            stale = StaleField(
                "generation.num_shards",
                str(shards),
                str(generation.get("num_shards")),
                f"set generation.num_shards: {shards}",
            )
        if stale:
            raise ConfigError(
                f"{files[0]}: stale shard: {stale.field} was {stale.recorded} when it was "
                f"generated but is {stale.current} now, and --only-missing-outputs would reuse "
                f"it; delete {_versions_folder(files[0])} and its token_records next to "
                f"it to regenerate this shard only, run without --only-missing-outputs to "
                f"regenerate every shard, or {stale.restore}"
            )
    return checked


def _versions_folder(path: str) -> str:
    """The folder of all versions of a file: ``<file>/<version>/<file>`` → ``<file>``."""
    file = PurePosixPath(path)
    return str(file.parent.parent) if file.parent.parent.name == file.name else path


def check_parameters(pipeline: Any, catalog: Any) -> list[str]:
    """Check the parameters every node of the run will read, before the first node runs.

    Nodes check their own parameters, but a bad ``aggregation.top_entropy_frac`` or
    ``reporting.top_n_words`` would otherwise surface only after hours of generation. Checked
    here, for the sections the pipeline reads: ``runs`` (names, roles, steps:
    :func:`hed.layout.layout_from_params`), ``generation`` (sampling parameters, dtype),
    ``aggregation`` (``top_entropy_frac``, the lexicon) and ``reporting`` (section shape,
    ``top_n_words``, ``fig3.steps``). The checks are the nodes' own functions.

    Args:
        pipeline: the pipeline about to run.
        catalog: the run's catalog (holds ``params:<section>``).

    Returns:
        The sections checked, e.g. ``["generation", "aggregation"]``.

    Raises:
        ConfigError: the first invalid value, in the nodes' own one-line wording.
    """
    datasets = pipeline.datasets()
    checked = []
    if "params:runs" in datasets:
        generation = catalog.load("params:generation") if "params:generation" in catalog else {}
        layout.layout_from_params(
            {"runs": catalog.load("params:runs"), "generation": generation or {}}
        )
        checked.append("runs")
    if "params:generation" in datasets:
        from hed.pipelines.generation.nodes import sampling_params_from
        from hed.recording import resolve_dtype

        generation = catalog.load("params:generation") or {}
        if not isinstance(generation, dict):
            raise ConfigError(f"parameter `generation` must be a mapping, got {generation!r}")
        sampling_params_from(generation)
        resolve_dtype(generation.get("dtype", "auto"), "cpu")
        checked.append("generation")
    if "params:aggregation" in datasets:
        from hed.lexicon import parse_lexicon
        from hed.pipelines.aggregation.nodes import parameter_section
        from hed.thresholds import validate_top_entropy_frac

        aggregation = parameter_section(catalog.load("params:aggregation"), "aggregation")
        validate_top_entropy_frac(aggregation.get("top_entropy_frac", 0.2))
        parse_lexicon(aggregation.get("lexicon"))
        checked.append("aggregation")
    if "params:reporting" in datasets:
        from hed.pipelines.reporting.nodes import (
            fig3_steps_param,
            reporting_section,
            top_n_words_param,
        )

        reporting = reporting_section(catalog.load("params:reporting"))
        top_n_words_param(reporting)
        fig3_steps_param(reporting)
        checked.append("reporting")
    return checked


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
