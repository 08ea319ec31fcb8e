"""The study layout: which (run, step, shard) nodes the pipelines have.

Kedro builds pipelines before it runs them, so the number of generation and aggregation nodes
(one per run × step × shard, one per run × step) must be known when ``register_pipelines`` is
called. The layout is read from the parameters of the active configuration environment:

* ``runs`` (``parameters.yml``): ``{<run>: {role, checkpoint_root, steps, embedded}}``;
  ``steps`` is a list or ``all`` (every ``global_step_<N>`` under ``checkpoint_root``).
* ``generation.num_shards`` (``parameters_generation.yml``).

The session hands its parameters to pipeline construction through :mod:`hed.config.session`.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, ValidationInfo, WithJsonSchema

from hed.config.model import Bool, Section
from hed.config.params import GenerationParams
from hed.config.responses_params import ResponsesParams
from hed.core.validators import is_integer, positive_int
from hed.decode.checkpoints import discover_steps
from hed.errors import CheckpointError, ConfigError, InputDataError
from hed.records.verl_dump import dump_steps

logger = logging.getLogger(__name__)

ROLES = ("with_clip", "without_clip", "single")
#: The order of the runs in the figures' panels, by role (Figures 2 and 3, the dynamics figures).
PANEL_ORDER = ("without_clip", "with_clip", "single")
_RUN_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")


def _run_steps(steps: Any, info: ValidationInfo) -> Any:
    """``all``, or the listed steps as a sorted tuple (one step is a list of one).

    Raises:
        ConfigError: a step listed twice (``runs.<run>.steps lists a step twice: [1, 1]``) or
            not a non-negative integer (the run's name from the validation context).
        ValueError: neither ``all`` nor a non-empty list.
    """
    if steps == "all":
        return steps
    listed = [steps] if is_integer(steps) else steps
    if not isinstance(listed, list | tuple) or not listed:
        raise ValueError("a non-empty list of integers or 'all'")
    key = f"{(info.context or {}).get('section', RunParams.section)}.steps"
    bad = next((step for step in listed if not is_integer(step) or step < 0), None)
    if bad is not None:
        raise ConfigError(
            f"{key}: {bad!r} is not a non-negative integer step; list steps as integers >= 0 "
            "(verl's global_step_<N>), or write all"
        )
    if len(set(listed)) != len(listed):
        raise ConfigError(f"{key} lists a step twice: {list(listed)}; list each step once")
    return tuple(sorted(listed))


class RunParams(Section):
    """``runs.<run>`` (parameters.yml): one RL training run; the run name (letters, digits, ``_``,
    ``-``) becomes part of dataset names."""

    section: ClassVar[str] = "runs.<run>"

    role: Literal[ROLES] = "single"  # type: ignore[valid-type]
    """with_clip, without_clip (Figure 2's pair) or single (docs/configuration.md)."""
    checkpoint_root: str | None = None
    """Folder holding ``global_step_<N>/`` (verl) or ``checkpoint-<N>/`` (TRL / HF Trainer);
    needed."""
    steps: Annotated[
        Any,
        BeforeValidator(_run_steps),
        WithJsonSchema(
            {
                "anyOf": [
                    {"const": "all"},
                    {"type": "integer", "minimum": 0},
                    {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
                ]
            }
        ),
    ] = "all"
    """List of steps, or all (every step folder found when the pipelines are built)."""
    embedded: Bool = False
    """Materialise the embedded SmolLM2 into checkpoint_root/global_step_0/actor_hf if missing."""
    responses: ResponsesParams = ResponsesParams()
    """Where the run's responses come from: sampled from each checkpoint (default), or the
    trainer's own rollouts from a verl dump scored teacher-forced (docs/rollouts.md)."""

    @property
    def listed_steps(self) -> tuple[int, ...]:
        """The steps listed, ascending; none for ``steps: all`` (known only on disk)."""
        return () if self.steps == "all" else self.steps


#: The defaults of a run's keys (``runs.<run>``), from :class:`RunParams`.
RUN_DEFAULTS: dict[str, Any] = RunParams().model_dump(exclude={"checkpoint_root", "responses"})


def run_params(runs: Mapping[str, Any] | None) -> dict[str, RunParams]:
    """``{run: RunParams}`` of a raw ``runs`` mapping, checked but not resolved on disk.

    Raises:
        ConfigError: ``runs`` missing or empty, a bad run name, a run not a mapping, or a bad key
            of a run (one line naming ``runs.<run>.<key>``).
    """
    if not isinstance(runs, Mapping) or not runs:
        raise ConfigError(
            "parameter `runs` is missing or empty: define at least one run in parameters.yml"
        )
    parsed = {}
    for name, cfg in runs.items():
        if not _RUN_NAME_RE.match(str(name)):
            raise ConfigError(
                f"run name {name!r}: use letters, digits, '_' or '-' "
                "(it becomes part of dataset names)"
            )
        if not isinstance(cfg, Mapping | RunParams):
            raise ConfigError(f"runs.{name} must be a mapping with checkpoint_root, steps and role")
        key = f"runs.{name}"
        parsed[str(name)] = RunParams.of(cfg, section=key, context={"section": key})
    return parsed


@dataclass(frozen=True)
class RunSpec:
    """One RL training run.

    Attributes:
        name: run name, used in dataset names (``<run>.step_<step>...``).
        role: ``with_clip``, ``without_clip`` or ``single`` (docs/configuration.md).
        checkpoint_root: folder holding ``global_step_<N>`` folders.
        steps: selected steps, ascending.
        embedded: materialise the embedded SmolLM2 into ``checkpoint_root`` when missing.
        steps_found: ``steps: all``: the steps were found on disk when the layout was read,
            not listed in the parameters.
        responses: where its responses come from (``runs.<run>.responses``,
            :class:`hed.config.responses_params.ResponsesParams`; default: sampling).
    """

    name: str
    role: str
    checkpoint_root: str
    steps: tuple[int, ...]
    embedded: bool = RUN_DEFAULTS["embedded"]
    steps_found: bool = False
    responses: ResponsesParams = field(default_factory=ResponsesParams)

    @property
    def configured_steps(self) -> tuple[int, ...]:
        """The steps the parameters list (none for ``steps: all``: known only on disk)."""
        return () if self.steps_found else self.steps


@dataclass(frozen=True)
class StudyLayout:
    """All runs of an environment and the shard count."""

    runs: tuple[RunSpec, ...]
    num_shards: int

    def run(self, name: str) -> RunSpec:
        """Return the run called ``name``.

        Raises:
            ConfigError: no such run.
        """
        for spec in self.runs:
            if spec.name == name:
                return spec
        known = ", ".join(r.name for r in self.runs)
        raise ConfigError(f"unknown run {name!r}: known runs are {known}")

    def run_steps(self) -> list[tuple[RunSpec, int]]:
        """Every (run, step) pair in (run, step) order."""
        return [(run, step) for run in self.runs for step in run.steps]

    def roles(self) -> dict[str, str]:
        """``{run: role}`` in configuration order."""
        return {run.name: run.role for run in self.runs}

    @classmethod
    def of(cls, runs: Any, generation: Any = None) -> StudyLayout:
        """``runs`` if already parsed (``params:runs`` as the pre-run check hands it), else the
        layout of the raw ``runs`` mapping (:func:`layout_from_params`; ``generation`` for
        ``num_shards``, default 1).

        Raises:
            ConfigError: as :func:`layout_from_params`.
        """
        if isinstance(runs, cls):
            return runs
        return layout_from_params({"runs": runs, "generation": generation})


def run_roles(runs: StudyLayout | Mapping[str, Any]) -> dict[str, str]:
    """``{run: role}`` of ``params:runs``, parsed or raw; nothing is read from disk, so it serves
    when the pipelines are built too."""
    if isinstance(runs, StudyLayout):
        return runs.roles()
    return {name: run.role for name, run in run_params(runs).items()}


def panel_runs(runs: StudyLayout | Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(run, role)`` of ``params:runs`` (parsed or raw) in panel order: without_clip,
    with_clip, single (:data:`PANEL_ORDER`); configuration order within a role."""
    rank = {role: i for i, role in enumerate(PANEL_ORDER)}
    return sorted(run_roles(runs).items(), key=lambda pair: rank.get(pair[1], len(PANEL_ORDER)))


def configured_steps(runs: StudyLayout | Mapping[str, Any], run: str) -> tuple[int, ...]:
    """The steps ``params:runs`` lists for ``run``, ascending; none for ``steps: all`` or a
    run it does not have. Parsed or raw; nothing is read from disk."""
    if isinstance(runs, StudyLayout):
        spec = next((spec for spec in runs.runs if spec.name == run), None)
        return spec.configured_steps if spec is not None else ()
    return run_params(runs)[run].listed_steps if run in runs else ()


def _found_steps(
    name: str, run: RunParams, written_by: Callable[[str], str | None] | None = None
) -> tuple[int, ...]:
    """``steps: all`` resolved on disk: every step folder under ``checkpoint_root`` (step 0 of
    an embedded run not materialised yet); for a run scoring a verl dump, its dump steps whose
    generating checkpoint is on disk (:func:`hed.decode.rollouts.generating_step`; verl saves
    every ``save_freq`` steps, so most dump steps have none).

    Raises:
        ConfigError: no step folder, no dump folder, or no dump step with its checkpoint.
    """
    from hed.decode.rollouts import generating_step

    root, responses = str(run.checkpoint_root), run.responses
    if run.embedded and not responses.from_dump and not Path(root).is_dir():
        return (0,)
    try:
        steps = dump_steps(str(responses.path)) if responses.from_dump else []
        saved = discover_steps(root)
    except (InputDataError, CheckpointError) as exc:
        folder = str(responses.path if responses.from_dump else root)
        command = written_by(folder) if written_by and not Path(folder).is_dir() else None
        reason = str(exc).replace("runs.<run>.", f"runs.{name}.") if command is None else (
            f"{folder} does not exist yet: it lies in another environment's data root; run "
            f"`{command}` first (it writes it)")  # fmt: skip
        raise ConfigError(f"runs.{name}.steps is 'all' but {reason}") from None
    if not responses.from_dump:
        return tuple(saved)
    first = 1 if responses.kind == "rollout" else 0
    kept = [s for s in steps if s >= first and generating_step(s, responses.kind) in saved]
    if not kept:
        raise ConfigError(
            f"runs.{name}.steps is 'all' but no dump step of {responses.path} (steps "
            f"{steps[0]}…{steps[-1]}) has its generating checkpoint in {root} (saved: "
            f"{sorted(saved)}); a {responses.kind} dump step s needs "
            f"global_step_<{'s-1' if responses.kind == 'rollout' else 's'}>"
        )
    return tuple(kept)


def layout_from_params(
    params: Mapping[str, Any], written_by: Callable[[str], str | None] | None = None
) -> StudyLayout:
    """Build the layout from a Kedro parameters dictionary (``runs`` and ``generation``).

    ``written_by(folder)``: the ``kedro run`` of another environment that writes a missing
    folder (a ``checkpoint_root`` or dump of ``steps: all``), named in the refusal
    (:func:`hed.config.session.env_writing`).

    Raises:
        ConfigError: ``runs`` missing or malformed (:func:`run_params`), a run without
            ``checkpoint_root``, ``steps: all`` with nothing on disk, or
            ``generation.num_shards`` not a positive integer.
    """
    runs = []
    for name, run in run_params(params.get("runs")).items():
        if not run.checkpoint_root:
            others = [
                n for n in params["runs"] if n != name and isinstance(params["runs"][n], dict)
            ]
            near = difflib.get_close_matches(name, others, n=1, cutoff=0.6)
            hint = f"; a new run needs one (did you mean run {near[0]}?)" if near else ""
            raise ConfigError(f"runs.{name}.checkpoint_root is missing{hint}")
        found = run.steps == "all"
        steps = _found_steps(name, run, written_by) if found else run.steps
        runs.append(RunSpec(name, run.role, run.checkpoint_root, steps, run.embedded, found,
                            run.responses))  # fmt: skip
    generation = params.get("generation")
    if isinstance(generation, GenerationParams):  # parsed before the run: already checked
        return StudyLayout(tuple(runs), generation.num_shards)
    if generation is not None and not isinstance(generation, Mapping):
        raise ConfigError(
            "parameter `generation` must be a mapping (parameters_generation.yml), "
            f"got {generation!r}"
        )
    default = GenerationParams.model_fields["num_shards"].default
    shards = positive_int((generation or {}).get("num_shards", default), "generation.num_shards")
    return StudyLayout(tuple(runs), shards)
