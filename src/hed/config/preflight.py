"""Checks before the first node of a run: parameters, and shards a run would reuse.

Called by :class:`hed.hooks.ProjectHooks` in ``before_pipeline_run``. A node checks its own
inputs, but at real scale a bad reporting parameter or a stale shard must be caught before
hours of generation, not after.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from hed.analysis.rescoring import RescoringParams
from hed.config import layout, params
from hed.config.analysis_params import analyses_params, dynamics_params
from hed.config.layout import RUN_DEFAULTS
from hed.config.mini_rl import mini_rl_params, task_params
from hed.config.prompt_params import PromptsParams
from hed.config.publish import publish_params
from hed.decode.checkpoints import checkpoint_fingerprint
from hed.errors import CheckpointError, ConfigError
from hed.pass1.config import EXPORT_DIR, metrics_params
from hed.records.shard_metadata import (
    GENERATION_METADATA_KEY,
    StaleField,
    stale_field,
)

#: Dataset names of shard files (docs/datasets.md): ``<run>.step_<step>.shard_<k>.sequences``.
_SHARD_SEQUENCES = re.compile(r"^(?P<step>.+\.step_\d+)\.shard_\d+\.sequences$")


def check_reused_shards(pipeline: Any, catalog: Any) -> int:
    """Refuse an ``--only-missing-outputs`` run that would reuse shards of other parameters.

    ``--only-missing-outputs`` skips every generation node whose shard file exists, whatever
    parameters made it, and then every aggregation node whose outputs exist: after a change
    of ``generation.temperature`` such a run would finish at once and keep the old records.
    Each shard's ``sequences`` file records its generation parameters (``hed.generation``);
    they are compared here with the current ``params:generation`` and ``params:prompts``
    (sampling parameters, dtype, prompt rendering) and with the checkpoint's content
    fingerprint as it is now (:func:`hed.decode.checkpoints.checkpoint_fingerprint`: a step
    retrained
    at the same path), before anything runs.

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
    prompt_params = (
        PromptsParams.of(catalog.load("params:prompts")).rendering.as_params()
        if "params:prompts" in catalog
        else None
    )
    checked = 0
    fingerprints: dict[str, dict[str, str] | None] = {}
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
        stale = recorded and stale_field(
            recorded,
            generation=generation,
            prompt_params=prompt_params,
            checkpoint=_current_checkpoint(recorded, fingerprints),
            prompt_ids=None,
        )
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


def _current_checkpoint(
    recorded: dict[str, Any], fingerprints: dict[str, dict[str, str] | None]
) -> dict[str, str] | None:
    """The content fingerprint of the checkpoint a shard was generated from, as it is now.

    ``--only-missing-outputs`` also skips ``resolve_checkpoints`` (its ``checkpoints`` file
    exists), so a checkpoint retrained in place would go unnoticed: the folder recorded in the
    shard is fingerprinted again here (once per folder). ``None`` when it is gone.
    """
    model_dir = (recorded.get("checkpoint") or {}).get("model_dir")
    if not model_dir:
        return None
    if model_dir not in fingerprints:
        try:
            fingerprints[model_dir] = checkpoint_fingerprint(model_dir)
        except (CheckpointError, OSError):
            fingerprints[model_dir] = None
    return fingerprints[model_dir]


def _versions_folder(path: str) -> str:
    """The folder of all versions of a file: ``<file>/<version>/<file>`` → ``<file>``."""
    file = PurePosixPath(path)
    return str(file.parent.parent) if file.parent.parent.name == file.name else path


def check_parameters(pipeline: Any, catalog: Any) -> list[str]:
    """The sections :func:`parsed_sections` checks, e.g. ``["generation", "aggregation"]``.

    Raises:
        ConfigError: the first invalid value, in one line.
    """
    return list(parsed_sections(pipeline, catalog))


#: Each section a node may read and its model's parser (a raw mapping or ``None`` -> the
#: typed section; :data:`hed.config.sections.FILES` lists the same models per file).
PARSERS: dict[str, Any] = {
    "prompts": PromptsParams.of,
    "generation": params.GenerationParams.of,
    "aggregation": params.AggregationParams.of,
    "reporting": params.ReportingParams.of,
    "rescoring": RescoringParams.of,
    "publish": publish_params,
    "dynamics": dynamics_params,
    "analyses": analyses_params,
    "mini_rl.task": task_params,
}


def parsed_sections(pipeline: Any, catalog: Any, data_root: str | None = None) -> dict[str, Any]:
    """Parse every parameter section the pipeline reads, once, before the first node runs.

    A bad ``aggregation.top_entropy_frac`` or ``reporting.top_n_words`` would otherwise
    surface only after hours of generation. Each section is parsed by its model
    (:data:`PARSERS`; ``runs`` into the :class:`~hed.config.layout.StudyLayout`, ``metrics``
    and ``mini_rl`` with the runs and the data root they read), then the rules across sections
    that need no data: ``reporting.strict`` (:func:`check_strict_completeness`), the pages'
    steps (:func:`check_token_report_steps`), ``analyses.reference_run``. Unknown keys are
    refused earlier, when the session starts (:func:`hed.config.sections.check_unknown_keys`).

    Args:
        pipeline: the pipeline about to run.
        catalog: the run's catalog (holds ``params:<section>``).
        data_root: the run's data root (None: :func:`hed.config.layout.data_root`): the W&B
            export folder and mini_rl's default W&B folder lie under it.

    Returns:
        ``{section: parsed}`` for the sections the pipeline reads, ``runs`` first.

    Raises:
        ConfigError: the first invalid value, in one line.
    """
    datasets = pipeline.datasets()
    root = layout.data_root() if data_root is None else data_root

    def load(name: str) -> Any:
        return catalog.load(f"params:{name}") if f"params:{name}" in catalog else None

    runs = load("runs")
    parsed: dict[str, Any] = {}
    if "params:runs" in datasets:
        parsed["runs"] = layout.layout_from_params({"runs": runs, "generation": load("generation")})
    for name, parse in PARSERS.items():
        if f"params:{name}" in datasets:
            parsed[name] = parse(load(name))
    if "aggregation" in parsed:
        parsed["aggregation"].parsed_lexicon  # noqa: B018 - a missing lexicon, refused now
    if "reporting" in parsed:
        if parsed["reporting"].strict:
            check_strict_completeness(parsed["reporting"], runs or {}, load("metrics"))
        check_token_report_steps(parsed["reporting"], runs or {}, parsed.get("runs"))
    if "analyses" in parsed:
        check_reference_run(parsed["analyses"].reference_run, runs)
    if "params:metrics" in datasets:
        names = list(runs) if isinstance(runs, Mapping) else None
        parsed["metrics"] = metrics_params(
            load("metrics"), runs=names, export_dir=f"{root}/{EXPORT_DIR}"
        )
    if "params:mini_rl" in datasets:
        parsed["mini_rl"] = mini_rl_params(load("mini_rl"), root)
    return parsed


def check_reference_run(reference_run: str | None, runs: Any) -> None:
    """Refuse an ``analyses.reference_run`` that is not a run of ``runs`` before generation
    (the runs comparison is the chain's last node).

    Raises:
        ConfigError: one line naming the value and the runs.
    """
    if reference_run is None or not isinstance(runs, Mapping) or reference_run in runs:
        return
    raise ConfigError(
        f"analyses.reference_run {reference_run!r} is not a run of `runs` "
        f"(runs: {', '.join(map(str, runs))}); set it to one of them or null"
    )


#: Sections the pre-run check hands to the nodes parsed (each node's ``<Model>.of`` takes the
#: parsed object as it is).
TYPED_SECTIONS = ("runs", *PARSERS, "metrics", "mini_rl")


def hand_to_nodes(catalog: Any, parsed: Mapping[str, Any]) -> list[str]:
    """Put the parsed sections of :data:`TYPED_SECTIONS` into the run's catalog, in place of
    the raw dicts: the nodes read attributes, nothing is parsed again (``params:runs`` holds the
    :class:`~hed.config.layout.StudyLayout`, ``steps: all`` resolved on disk once). A pass@1
    source's ``options`` stay a checked dict per source. The whole ``parameters`` dataset (what
    ``resolved_config`` records) is left as configured.

    Returns:
        The ``params:<section>`` names replaced.
    """
    handed = []
    for name in TYPED_SECTIONS:
        if name in parsed and f"params:{name}" in catalog:
            catalog.save(f"params:{name}", parsed[name])
            handed.append(f"params:{name}")
    return handed


def check_strict_completeness(
    reporting: params.ReportingParams, runs: Mapping[str, Any], metrics: Any
) -> None:
    """With ``reporting.strict: true``, refuse a study whose figures cannot be complete.

    The rules that need no data, checked before generation instead of after it (the
    reporting node checks the data-dependent rest): a ``with_clip`` and a ``without_clip``
    run (Figure 2's pair); ``reporting.fig3.steps`` set and every one of them among the
    ``steps`` of every run; a pass@1 source (``metrics.runs.<run>.sources``) for every run.
    A run with ``steps: all`` is taken to have every step (they are known only on disk).

    Args:
        reporting: the checked ``params:reporting``.
        runs: ``params:runs``.
        metrics: ``params:metrics``.

    Raises:
        ConfigError: one line listing every gap, numbered, and the way out.
    """
    gaps = []
    roles = layout.run_roles(runs)
    if not {"with_clip", "without_clip"} <= set(roles.values()):
        have = ", ".join(f"{name} ({role})" for name, role in roles.items())
        gaps.append(f"runs needs a with_clip and a without_clip run, has {have or 'none'}")
    if reporting.fig3_steps is None:
        gaps.append("reporting.fig3.steps is not set (the paper used [20, 80, 200])")
    else:
        for name, cfg in runs.items():
            steps = (cfg or {}).get("steps", RUN_DEFAULTS["steps"])
            if steps == "all":
                continue
            missing = sorted(
                set(reporting.fig3_steps) - set(params.step_list(steps, f"runs.{name}.steps") or [])
            )
            if missing:
                gaps.append(f"reporting.fig3.steps {missing} are not in runs.{name}.steps")
    metric_runs = (
        (params.section(metrics, "metrics").get("runs") or {}) if metrics is not None else {}
    )
    for name in runs:
        if not ((metric_runs.get(name) or {}).get("sources") or {}):
            gaps.append(f"metrics.runs.{name}.sources is empty: no pass@1 for run {name}")
        else:
            gaps += _csv_pass1_gaps(
                metrics, name, (runs[name] or {}).get("steps", RUN_DEFAULTS["steps"])
            )
    if gaps:
        raise ConfigError(
            "reporting.strict is true but the figures cannot be complete: "
            + "; ".join(f"({i}) {gap}" for i, gap in enumerate(gaps, 1))
            + "; fix these before generating, or set reporting.strict: false to draw what exists"
        )


def check_token_report_steps(
    reporting: params.ReportingParams,
    runs: Mapping[str, Any],
    study: layout.StudyLayout | None = None,
) -> None:
    """Refuse ``reporting.token_report.steps`` or ``reporting.explorer.steps`` that match no
    step of any run, before generation.

    ``build_token_report`` and the explorer's node raise the same errors, but only after every
    shard has been generated. ``steps: all`` is resolved by ``study`` (the layout of a run
    that reads ``params:runs``, found on disk); without it (a re-plot) such a run's steps are
    unknown and nothing is checked.

    Args:
        reporting: the checked ``params:reporting``.
        runs: ``params:runs``.
        study: the parsed layout of ``params:runs``, when the pipeline reads it.

    Raises:
        ConfigError: the wording of :func:`hed.report.token_report.payload.build_report` and
            :mod:`hed.report.explorer.builder`.
    """
    pages = {"token_report": reporting.token_report, "explorer": reporting.explorer}
    available: set[int] = set()
    if study is not None:
        available = {step for _, step in study.run_steps()}
    else:
        for name, cfg in runs.items():
            steps = (cfg or {}).get("steps", RUN_DEFAULTS["steps"])
            if steps == "all":
                return
            available |= set(params.step_list(steps, f"runs.{name}.steps") or [])
    for key, options in pages.items():
        if runs and options.enabled and options.steps is not None:
            if not available & set(options.steps):
                raise ConfigError(
                    f"reporting.{key}.steps {list(options.steps)} matches no step of the "
                    f"runs (steps available: {sorted(available)}); set it to null or to "
                    "existing steps"
                )


def _csv_pass1_gaps(metrics: Any, run: str, steps: Any) -> list[str]:
    """The configured steps of ``run`` its ``csv`` figure source has no pass@1 for.

    Only a local CSV that is the run's figure source and an explicit step list are checked
    here (W&B sources and ``steps: all`` are known only when the metrics pipeline reads
    them; the reporting node checks those). A CSV that cannot be read raises its own
    one-line :class:`~hed.errors.InputDataError`.
    """
    from hed.pass1.sources import parse_run_config, read_pass1_csv

    config = parse_run_config(metrics, run)
    spec = config.source("csv")
    if spec is None or config.figure_source != "csv" or steps == "all":
        return []
    options = spec.options
    table = read_pass1_csv(
        options["path"],
        step_column=options["step_column"],
        pass1_column=options["pass1_column"],
        scale=options["scale"],
    )
    absent = sorted(set(params.step_list(steps, f"runs.{run}.steps") or []) - set(table["step"]))
    if not absent:
        return []
    return [f"pass@1 CSV {options['path']} has no value for run {run} at step(s) {absent}"]
