"""The parameter check before the first node of a run: every section the pipeline reads,
parsed once, the rules across sections, and the parsed sections handed to the nodes.

Called by :class:`hed.hooks.InputHooks` first thing in ``before_pipeline_run``. A node checks
its own parameters, but at real scale a bad reporting parameter must be caught before hours of
generation, not after.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from hed.analysis.rescoring import RescoringParams
from hed.config import layout, params, session
from hed.config.analysis_params import AnalysesParams, DynamicsParams
from hed.config.layout import RunParams
from hed.config.mini_rl import TaskParams, mini_rl_params
from hed.config.prompt_params import PromptsParams
from hed.config.publish import PublishParams
from hed.errors import ConfigError
from hed.pass1.config import EXPORT_DIR, MetricsParams, RunPass1Config, metrics_params


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
    "publish": PublishParams.of,
    "dynamics": DynamicsParams.of,
    "analyses": AnalysesParams.of,
    "mini_rl.task": TaskParams.of,
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
    A run that resolves checkpoints also has every listed dump step checked on disk
    (:func:`check_dump_steps`).

    Args:
        pipeline: the pipeline about to run.
        catalog: the run's catalog (holds ``params:<section>``).
        data_root: the run's data root (None: :func:`hed.config.session.data_root`): the W&B
            export folder and mini_rl's default W&B folder lie under it.

    Returns:
        ``{section: parsed}`` for the sections the pipeline reads, ``runs`` first.

    Raises:
        ConfigError: the first invalid value, in one line.
    """
    datasets = pipeline.datasets()
    root = session.data_root() if data_root is None else data_root

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
    if "runs" in parsed and "checkpoints" in pipeline.all_outputs():
        check_dump_steps(parsed["runs"])
    listed = layout.run_params(runs) if isinstance(runs, Mapping) and runs else {}

    @functools.cache  # parsed once, for the strict check and for the nodes
    def metrics() -> MetricsParams:
        export_dir = f"{root}/{EXPORT_DIR}"
        return metrics_params(load("metrics"), runs=list(listed) or None, export_dir=export_dir)

    if "reporting" in parsed:
        if parsed["reporting"].strict:
            check_strict_completeness(parsed["reporting"], listed, metrics())
        check_token_report_steps(parsed["reporting"], listed, parsed.get("runs"))
    if "analyses" in parsed:
        check_reference_run(parsed["analyses"].reference_run, listed)
    if "params:metrics" in datasets:
        parsed["metrics"] = metrics()
    if "params:mini_rl" in datasets:
        parsed["mini_rl"] = mini_rl_params(load("mini_rl"), root)
    return parsed


def check_dump_steps(study: layout.StudyLayout) -> None:
    """Refuse, before any node writes (the prompt set is the first), a listed step of a run
    scoring a verl dump whose ``<step>.jsonl`` or generating checkpoint is not there.

    Raises:
        InputDataError: the dump folder or a step's file is missing.
        CheckpointError: the checkpoint that generated a dump step is not on disk.
    """
    from hed.decode.rollouts import run_dump_model_dir

    for run, step in study.run_steps():
        if run.responses.from_dump:
            run_dump_model_dir(run, step)


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
    reporting: params.ReportingParams, runs: Mapping[str, RunParams], metrics: MetricsParams
) -> None:
    """With ``reporting.strict: true``, refuse a study whose figures cannot be complete.

    The rules that need no data, checked before generation instead of after it (the
    reporting node checks the data-dependent rest): a ``with_clip`` and a ``without_clip``
    run (Figure 2's pair); ``reporting.fig3.steps`` set and every one of them among the
    ``steps`` of every run; a pass@1 source (``metrics.runs.<run>.sources``) for every run,
    and a run's ``csv`` figure source holding every listed step. A run with ``steps: all`` is
    taken to have every step (they are known only on disk).

    Args:
        reporting: the checked ``params:reporting``.
        runs: ``params:runs`` checked (:func:`hed.config.layout.run_params`).
        metrics: the checked ``params:metrics``.

    Raises:
        ConfigError: one line listing every gap, numbered, and the way out.
        InputDataError: a ``csv`` figure source that cannot be read (its own one line).
    """
    gaps = []
    roles = {name: run.role for name, run in runs.items()}
    if not {"with_clip", "without_clip"} <= set(roles.values()):
        have = ", ".join(f"{name} ({role})" for name, role in roles.items())
        gaps.append(f"runs needs a with_clip and a without_clip run, has {have or 'none'}")
    if reporting.fig3_steps is None:
        gaps.append("reporting.fig3.steps is not set (the paper used [20, 80, 200])")
    else:
        for name, run in runs.items():
            missing = sorted(set(reporting.fig3_steps) - set(run.listed_steps))
            if missing and run.steps != "all":
                gaps.append(f"reporting.fig3.steps {missing} are not in runs.{name}.steps")
    for name, run in runs.items():
        if not metrics.run(name).sources:
            gaps.append(f"metrics.runs.{name}.sources is empty: no pass@1 for run {name}")
        else:
            gaps += _csv_pass1_gaps(metrics.run(name), run.listed_steps)
    if gaps:
        raise ConfigError(
            "reporting.strict is true but the figures cannot be complete: "
            + "; ".join(f"({i}) {gap}" for i, gap in enumerate(gaps, 1))
            + "; fix these before generating, or set reporting.strict: false to draw what exists"
        )


def check_token_report_steps(
    reporting: params.ReportingParams,
    runs: Mapping[str, RunParams],
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
        runs: ``params:runs`` checked (:func:`hed.config.layout.run_params`).
        study: the parsed layout of ``params:runs``, when the pipeline reads it.

    Raises:
        ConfigError: the wording of :func:`hed.report.token_report.payload.build_report` and
            :mod:`hed.report.explorer.builder`.
    """
    if study is not None:
        available = {step for _, step in study.run_steps()}
    elif any(run.steps == "all" for run in runs.values()):
        return
    else:
        available = {step for run in runs.values() for step in run.listed_steps}
    for key in ("token_report", "explorer"):
        options = getattr(reporting, key)
        if runs and options.enabled and options.steps is not None:
            if not available & set(options.steps):
                raise ConfigError(
                    f"reporting.{key}.steps {list(options.steps)} matches no step of the "
                    f"runs (steps available: {sorted(available)}); set it to null or to "
                    "existing steps"
                )


def _csv_pass1_gaps(config: RunPass1Config, steps: tuple[int, ...]) -> list[str]:
    """The listed ``steps`` of a run its ``csv`` figure source has no pass@1 for.

    Only a local CSV that is the run's figure source and an explicit step list are checked
    here (W&B sources and ``steps: all`` are known only when the metrics pipeline reads
    them; the reporting node checks those). A CSV that cannot be read raises its own
    one-line :class:`~hed.errors.InputDataError`.
    """
    from hed.pass1.sources import read_pass1_csv

    spec = config.source("csv")
    if spec is None or config.figure_source != "csv" or not steps:
        return []
    options = spec.options
    table = read_pass1_csv(
        options["path"],
        step_column=options["step_column"],
        pass1_column=options["pass1_column"],
        scale=options["scale"],
    )
    absent = sorted(set(steps) - set(table["step"]))
    if not absent:
        return []
    return [f"pass@1 CSV {options['path']} has no value for run {config.run} at step(s) {absent}"]
