"""``params:mini_rl`` (and ``params:mini_rl.task``), checked: the tiny GRPO training of the
``mini_dapo`` environment (docs/mini_dapo.md).

The pre-run check parses the section once (:func:`mini_rl_params`, :func:`task_params`) and
hands the frozen dataclasses to the nodes; a node given a raw dict (a test, a notebook) parses
it with the same functions (``MiniRLParams.of``, ``TaskParams.of``). The defaults are the
field defaults here and nowhere else: :data:`hed.config.sections.SECTIONS` takes ``mini_rl``'s
from them.

What needs the training libraries or the ``runs`` section (GRPOConfig field names, the
checkpoint schedule against ``runs.<run>.steps``, the reward grader's name) is checked by
:func:`hed.mini_rl.config.training_specs`, which turns this section into one training
specification per run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hed.core.validators import integer, positive_int
from hed.errors import ConfigError

#: ``mini_rl.validation.metric_key`` unless set: the W&B key of held-out pass@1.
DEFAULT_METRIC_KEY = "val-core/mini_arith/acc/mean@1"


@dataclass(frozen=True, kw_only=True)
class TaskParams:
    """``mini_rl.task``: the arithmetic task sets.

    Attributes:
        num_train: training problems, ≥ 1.
        num_validation: held-out problems, ≥ 1 (drawn first).
        seed: seed of the problem stream.
        kinds: problem kinds to draw from (None: every kind of
            :data:`hed.mini_rl.tasks.KINDS`).
    """

    num_train: int
    num_validation: int
    seed: int = 0
    kinds: tuple[str, ...] | None = None

    @classmethod
    def of(cls, value: Any) -> TaskParams:
        """``value`` if already parsed, else :func:`task_params` of it (a raw dict)."""
        return value if isinstance(value, cls) else task_params(value)


@dataclass(frozen=True, kw_only=True)
class BaseModelParams:
    """``mini_rl.base_model``: the initial policy.

    Attributes:
        model_dir: its HuggingFace folder.
        embedded: materialise the embedded SmolLM2 there when it is missing.
    """

    model_dir: str
    embedded: bool = False


@dataclass(frozen=True, kw_only=True)
class TrainingWandbParams:
    """``mini_rl.wandb``: where the training's offline W&B runs go.

    Attributes:
        dir: folder of the runs' W&B folders (None: ``<data_root>/01_raw/wandb``).
        project: W&B project written into the offline runs.
    """

    dir: str | None = None
    project: str = "hed-mini-rl"


#: Where ``mini_rl.wandb.dir`` left out puts the offline runs, under the data root.
WANDB_SUBDIR = "01_raw/wandb"


@dataclass(frozen=True, kw_only=True)
class ValidationParams:
    """``mini_rl.validation``: the greedy held-out pass@1 logged at every checkpoint.

    Attributes:
        metric_key: its W&B key.
        max_new_tokens: response length limit, ≥ 1.
        batch_size: prompts per ``generate`` call, ≥ 1.
    """

    metric_key: str = DEFAULT_METRIC_KEY
    max_new_tokens: int = 32
    batch_size: int = 16


@dataclass(frozen=True, kw_only=True)
class MiniRLParams:
    """``params:mini_rl``, checked.

    Attributes:
        base_model: the initial policy.
        runs: ``{run: {GRPOConfig fields that differ}}``, in training order.
        training: GRPOConfig fields shared by the runs, and ``save_every``.
        task: the task sets (None when the section has no ``task``).
        wandb: the offline W&B runs' folder and project.
        validation: the held-out pass@1.
        reward: the grader of the reward and the validation (``hed.mini_rl.reward.GRADERS``).
        torch_threads: CPU threads for training (None: the cores other processes leave free).
        raw: the section as given (the training fingerprint hashes ``task`` as written).
    """

    base_model: BaseModelParams
    runs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    training: Mapping[str, Any] = field(default_factory=dict)
    task: TaskParams | None = None
    wandb: TrainingWandbParams = TrainingWandbParams()
    validation: ValidationParams = ValidationParams()
    reward: str = "integer_match"
    torch_threads: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, value: Any) -> MiniRLParams:
        """``value`` if already parsed, else :func:`mini_rl_params` of it (a raw dict)."""
        return value if isinstance(value, cls) else mini_rl_params(value)


def mapping(value: Any, where: str) -> dict[str, Any]:
    """A sub-section as a dict (``None``: empty).

    Raises:
        ConfigError: ``<where> must be a mapping, got <value>``.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {value!r}")
    return dict(value)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} must be a non-empty string, got {value!r}")
    return value


def task_params(value: Any) -> TaskParams:
    """Check ``mini_rl.task`` (see :class:`TaskParams`).

    Raises:
        ConfigError: not a mapping; ``num_train`` / ``num_validation`` missing or not a
            positive integer; ``seed`` not an integer; ``kinds`` not a list of names.
    """
    raw = mapping(value, "mini_rl.task")
    kinds = raw.get("kinds") or None
    if kinds is not None and (
        not isinstance(kinds, list | tuple) or not all(isinstance(k, str) for k in kinds)
    ):
        raise ConfigError(f"mini_rl.task.kinds must be a list of problem kinds, got {kinds!r}")
    return TaskParams(
        num_train=positive_int(raw.get("num_train"), "mini_rl.task.num_train"),
        num_validation=positive_int(raw.get("num_validation"), "mini_rl.task.num_validation"),
        seed=integer(raw.get("seed", TaskParams.seed), "mini_rl.task.seed"),
        kinds=tuple(kinds) if kinds is not None else None,
    )


def _validation(value: Any) -> ValidationParams:
    raw = mapping(value, "mini_rl.validation")
    given = ValidationParams()  # the defaults
    key = raw.get("metric_key")
    return ValidationParams(
        metric_key=given.metric_key if not key else _text(key, "mini_rl.validation.metric_key"),
        max_new_tokens=positive_int(
            raw.get("max_new_tokens", given.max_new_tokens), "mini_rl.validation.max_new_tokens"
        ),
        batch_size=positive_int(
            raw.get("batch_size", given.batch_size), "mini_rl.validation.batch_size"
        ),
    )


def _wandb(value: Any, data_root: str | None) -> TrainingWandbParams:
    raw = mapping(value, "mini_rl.wandb")
    folder = raw.get("dir") or (f"{data_root}/{WANDB_SUBDIR}" if data_root else None)
    return TrainingWandbParams(
        dir=None if not folder else str(folder),
        project=_text(raw.get("project", TrainingWandbParams.project), "mini_rl.wandb.project"),
    )


def mini_rl_params(value: Any, data_root: str | None = None) -> MiniRLParams:
    """Check ``params:mini_rl`` (see :class:`MiniRLParams`).

    Args:
        value: the section as configured.
        data_root: the run's data root; ``mini_rl.wandb.dir`` left out becomes
            ``<data_root>/01_raw/wandb`` (None: left None, resolved where it is used).

    Raises:
        ConfigError: the section or a sub-section not a mapping; ``mini_rl.runs`` empty;
            ``base_model.model_dir`` missing; a count not a positive integer; ``task`` invalid
            (:func:`task_params`); ``reward`` not a name. Each message names the dotted key.
    """
    raw = mapping(value, "mini_rl")
    runs = mapping(raw.get("runs"), "mini_rl.runs")
    if not runs:
        raise ConfigError("mini_rl.runs is empty: name the runs to train (keys of `runs`)")
    base = mapping(raw.get("base_model"), "mini_rl.base_model")
    if not base.get("model_dir"):
        raise ConfigError(
            "mini_rl.base_model.model_dir is missing: the initial policy's HuggingFace folder"
        )
    return MiniRLParams(
        base_model=BaseModelParams(
            model_dir=str(base["model_dir"]),
            embedded=bool(base.get("embedded", BaseModelParams.embedded)),
        ),
        runs={name: mapping(cfg, f"mini_rl.runs.{name}") for name, cfg in runs.items()},
        training=mapping(raw.get("training"), "mini_rl.training"),
        task=task_params(raw["task"]) if raw.get("task") is not None else None,
        wandb=_wandb(raw.get("wandb"), data_root),
        validation=_validation(raw.get("validation")),
        reward=_text(raw.get("reward") or MiniRLParams.reward, "mini_rl.reward"),
        torch_threads=positive_int(
            raw.get("torch_threads"), "mini_rl.torch_threads", allow_none=True
        ),
        raw=raw,
    )
