"""``params:mini_rl`` (and ``params:mini_rl.task``), checked: the tiny GRPO training of the
``mini_dapo`` environment (docs/mini_dapo.md).

Each section is one pydantic model declared once (types, ranges, defaults, what each key
requires). The pre-run check parses them (:func:`mini_rl_params`, :func:`task_params`) and
hands the frozen models to the nodes; a node given a raw dict (a test, a notebook) parses it
with ``MiniRLParams.of`` / ``TaskParams.of``.

What needs the training libraries or the ``runs`` section (GRPOConfig field names, the
checkpoint schedule against ``runs.<run>.steps``, the reward grader's name) is checked by
:func:`hed.mini_rl.config.training_specs`, which turns this section into one training
specification per run.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field

from hed.config.model import Bool, Int, PositiveInt, Section, empty_is, null_is
from hed.errors import ConfigError

#: ``mini_rl.validation.metric_key`` unless set: the W&B key of held-out pass@1.
DEFAULT_METRIC_KEY = "val-core/mini_arith/acc/mean@1"
#: ``mini_rl.reward`` unless set: the grader of :data:`hed.mini_rl.reward.GRADERS`.
DEFAULT_REWARD = "integer_match"
#: Where ``mini_rl.wandb.dir`` left out puts the offline runs, under the data root.
WANDB_SUBDIR = "01_raw/wandb"

#: a non-empty string
Text = Annotated[str, Field(min_length=1)]


def _some_runs(runs: dict[str, Any]) -> dict[str, Any]:
    if not runs:
        raise ConfigError("mini_rl.runs is empty: name the runs to train (keys of `runs`)")
    return runs


#: ``mini_rl.runs``: ``{run: {GRPOConfig overrides}}`` (null overrides: none), at least one run
TrainingRuns = Annotated[
    dict[str, Annotated[dict[str, Any], null_is({})]], AfterValidator(_some_runs)
]


class TaskParams(Section):
    """``mini_rl.task``: the arithmetic task sets."""

    section: ClassVar[str] = "mini_rl.task"

    num_train: PositiveInt
    """Training problems."""
    num_validation: PositiveInt
    """Held-out problems (drawn first)."""
    seed: Int = 0
    """Seed of the problem stream."""
    kinds: Annotated[tuple[str, ...] | None, empty_is(None)] = None
    """Problem kinds to draw from (null or empty: every kind of :data:`hed.mini_rl.tasks.KINDS`)."""


class BaseModelParams(Section):
    """``mini_rl.base_model``: the initial policy."""

    section: ClassVar[str] = "mini_rl.base_model"

    model_dir: Text
    """Its HuggingFace folder."""
    embedded: Bool = False
    """Materialise the embedded SmolLM2 there when it is missing."""


class TrainingWandbParams(Section):
    """``mini_rl.wandb``: where the training's offline W&B runs go."""

    section: ClassVar[str] = "mini_rl.wandb"

    dir: str | None = None
    """Folder of the runs' W&B folders (null: ``<data_root>/01_raw/wandb``)."""
    project: Text = "hed-mini-rl"
    """W&B project written into the offline runs."""


class ValidationParams(Section):
    """``mini_rl.validation``: the greedy held-out pass@1 logged at every checkpoint."""

    section: ClassVar[str] = "mini_rl.validation"

    metric_key: Annotated[Text, empty_is(DEFAULT_METRIC_KEY)] = DEFAULT_METRIC_KEY
    """Its W&B key (null or empty: the default)."""
    max_new_tokens: PositiveInt = 32
    """Response length limit, in tokens."""
    batch_size: PositiveInt = 16
    """Prompts per ``generate`` call."""


class MiniRLParams(Section):
    """``params:mini_rl`` (``conf/mini_dapo/parameters_mini_rl.yml``)."""

    section: ClassVar[str] = "mini_rl"

    base_model: BaseModelParams = Field(default_factory=dict)  # type: ignore[arg-type]
    """The initial policy (``model_dir`` is required)."""
    runs: TrainingRuns = Field(default_factory=dict)
    """``{run: {GRPOConfig fields that differ}}``, in training order (at least one run)."""
    training: Annotated[dict[str, Any], null_is({})] = Field(default_factory=dict)
    """GRPOConfig fields shared by the runs, and ``save_every`` (steps between checkpoints)."""
    task: TaskParams | None = None
    """The task sets."""
    wandb: TrainingWandbParams = TrainingWandbParams()
    """The offline W&B runs' folder and project."""
    validation: ValidationParams = ValidationParams()
    """The held-out pass@1."""
    reward: Annotated[Text, empty_is(DEFAULT_REWARD)] = DEFAULT_REWARD
    """The grader of the reward and the validation (:data:`hed.mini_rl.reward.GRADERS`)."""
    torch_threads: PositiveInt | None = None
    """CPU threads for training (null: the cores other processes leave free)."""


def mini_rl_params(value: Any, data_root: str | None = None) -> MiniRLParams:
    """:meth:`MiniRLParams.of` ``value``, with ``mini_rl.wandb.dir`` left out resolved.

    Args:
        value: the section as configured.
        data_root: the run's data root; ``mini_rl.wandb.dir`` left out becomes
            ``<data_root>/01_raw/wandb`` (None: left None, resolved where it is used).

    Raises:
        ConfigError: one line naming the dotted key (``mini_rl.runs`` empty,
            ``base_model.model_dir`` missing, a count not a positive integer, ...).
    """
    params = MiniRLParams.of(value)
    if params.wandb.dir or not data_root:
        return params
    wandb = params.wandb.model_copy(update={"dir": f"{data_root}/{WANDB_SUBDIR}"})
    return params.model_copy(update={"wandb": wandb})


#: ``task_params(raw)``: :meth:`TaskParams.of` (the pre-run check's name for it).
task_params = TaskParams.of
