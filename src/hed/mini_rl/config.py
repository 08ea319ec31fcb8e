"""The ``mini_rl`` parameters: one training specification per run, its checkpoint schedule and hash.

``conf/mini_dapo/parameters_mini_rl.yml`` holds ``mini_rl`` (docs/mini_dapo.md)::

    mini_rl:
      base_model: {embedded: true, model_dir: ...}   # or {embedded: false, model_dir: <HF folder>}
      wandb: {dir: data/01_raw/wandb, project: hed-mini-dapo}
      task: {kinds: [...], num_train: 256, num_validation: 32, seed: 0}
      validation: {metric_key: ..., max_new_tokens: 32, batch_size: 16}
      training: {save_every: 8, max_steps: 24, <GRPOConfig fields>}
      torch_threads: null
      runs: {<run>: {<GRPOConfig fields that differ>}}

A run's checkpoint root is ``runs.<run>.checkpoint_root`` (parameters.yml), so the folder the
training writes is the folder the generation pipeline reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hed.config.layout import StudyLayout, configured_steps, run_roles
from hed.config.mini_rl import DEFAULT_REWARD, WANDB_SUBDIR, MiniRLParams
from hed.config.prompt_params import PromptsParams
from hed.config.session import data_root
from hed.core.validators import positive_int
from hed.errors import ConfigError
from hed.mini_rl.reward import grader
from hed.mini_rl.shaping import SHAPING_KEY, ShapingSpec, shaping_spec

#: Bumped when the layout of what a training run writes changes (forces a retrain).
FORMAT_VERSION = 1

#: Keys of ``mini_rl.training`` that are HED's, not GRPOConfig's.
SCHEDULE_KEYS = ("save_every",)

#: GRPOConfig / TrainingArguments fields HED sets itself (a run cannot override them).
FIXED_TRAINER_ARGS: dict[str, Any] = {
    "save_strategy": "no",  # checkpoints are written by HED as global_step_<N>/actor_hf
    "report_to": ["wandb"],
    "use_cpu": True,
    "logging_steps": 1,
    "log_completions": False,
    "dataloader_num_workers": 0,
    "disable_tqdm": True,
    "remove_unused_columns": False,
    "push_to_hub": False,
}


def cpu_trainer_args(trainer_args: Mapping[str, Any]) -> dict[str, Any]:
    """``trainer_args`` with ``bf16`` set by the CPU's capability unless the run sets it.

    TRL trains on CPU (``use_cpu``); bfloat16 autocast only pays where the processor has
    native bfloat16 (:func:`hed.core.compute_dtype.cpu_has_native_bf16`: AVX512-BF16 or AMX), so
    no environment hard-codes it. An explicit ``bf16`` in ``mini_rl.training`` wins.
    """
    from hed.core.compute_dtype import cpu_has_native_bf16

    args = dict(trainer_args)
    if args.get("bf16") is None:
        args["bf16"] = cpu_has_native_bf16()
    return args


#: Prompt-rendering keys of ``params:prompts`` that change what the policy is trained on.
PROMPT_KEYS = ("apply_chat_template", "enable_thinking", "system_prompt", "instruction_suffix")

#: The trainer's own step key (transformers' WandbCallback logs every row with it).
STEP_KEY = "train/global_step"


@dataclass(frozen=True)
class TrainingSpec:
    """Everything one mini-RL run needs, resolved from the parameters.

    Attributes:
        run: run name (a key of ``runs`` and of ``mini_rl.runs``).
        checkpoint_root: where ``global_step_<N>/actor_hf`` folders go.
        wandb_dir: the run's W&B folder root; the offline run lands in
            ``<wandb_dir>/wandb/offline-run-*``.
        wandb_project: W&B project name written into the offline run.
        base_model_dir: HuggingFace folder of the initial policy.
        embedded: materialise the embedded SmolLM2 into ``base_model_dir`` when missing.
        trainer_args: GRPOConfig keyword arguments (shared ``training`` merged with the run's
            overrides, HED's fixed ones applied; ``output_dir`` and ``run_name`` excluded).
        save_steps: checkpoint steps, ascending, starting at 0 and ending at ``max_steps``.
        metric_key: W&B key of held-out pass@1.
        validation_max_new_tokens: greedy validation length limit.
        validation_batch_size: validation prompts per ``generate`` call.
        torch_threads: CPU threads for training (None: the cores other processes leave free,
            re-measured before every step; :mod:`hed.mini_rl.cpu`).
        prompt_params: the rendering keys of ``params:prompts`` (:data:`PROMPT_KEYS`).
        task: ``mini_rl.task``, the keys as written (the fingerprint hashes them).
        reward: grader of the reward and the validation (:data:`hed.mini_rl.reward.GRADERS`).
        advantage_shaping: the run's per-token advantage shaping (``advantage_shaping`` of
            the run; None: TRL's own advantage; :mod:`hed.mini_rl.shaping`).
    """

    run: str
    checkpoint_root: str
    wandb_dir: str
    wandb_project: str
    base_model_dir: str
    embedded: bool
    trainer_args: Mapping[str, Any]
    save_steps: tuple[int, ...]
    metric_key: str
    validation_max_new_tokens: int
    validation_batch_size: int
    torch_threads: int | None
    prompt_params: Mapping[str, Any]
    task: Mapping[str, Any]
    reward: str = DEFAULT_REWARD
    advantage_shaping: ShapingSpec | None = None

    @property
    def max_steps(self) -> int:
        """The last optimizer step."""
        return int(self.trainer_args["max_steps"])

    def fingerprint(self, data_hash: str, base_model_id: str) -> str:
        """sha256 of what determines the trained weights and the logged metrics.

        Args:
            data_hash: content hash of the training and validation sets
                (:func:`frame_hash`).
            base_model_id: identity of the initial weights (:func:`model_identity`).

        Where the run writes (``checkpoint_root``, ``wandb_dir``) and ``torch_threads`` are
        left out: moving a run or changing the thread count does not retrain it.
        """
        payload = {
            "format": FORMAT_VERSION,
            "trainer_args": dict(self.trainer_args),
            "save_steps": list(self.save_steps),
            "metric_key": self.metric_key,
            "validation": [self.validation_max_new_tokens, self.validation_batch_size],
            "prompt_params": dict(self.prompt_params),
            "task": dict(self.task),
            "reward": self.reward,
            "wandb_project": self.wandb_project,
            "data": data_hash,
            "base_model": base_model_id,
        }
        if self.advantage_shaping is not None:  # absent: the fingerprints of before stay valid
            payload["advantage_shaping"] = self.advantage_shaping.as_dict()
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def checkpoint_schedule(max_steps: int, save_every: int) -> tuple[int, ...]:
    """Steps that get a checkpoint: 0 (the base model), every ``save_every`` steps, and the last.

    >>> checkpoint_schedule(24, 8)
    (0, 8, 16, 24)
    >>> checkpoint_schedule(10, 4)
    (0, 4, 8, 10)

    Raises:
        ConfigError: ``max_steps`` or ``save_every`` is not a positive integer.
    """
    for name, value in (("max_steps", max_steps), ("save_every", save_every)):
        positive_int(value, f"mini_rl.training.{name}")
    return tuple(sorted({*range(0, max_steps + 1, save_every), max_steps}))


def _grpo_fields() -> set[str]:
    from trl import GRPOConfig

    return {f.name for f in dataclasses.fields(GRPOConfig)}


def training_specs(
    mini_rl: MiniRLParams | Mapping[str, Any],
    runs: StudyLayout | Mapping[str, Any],
    prompt_params: PromptsParams | Mapping[str, Any] | None = None,
    *,
    check_trainer_args: bool = True,
) -> list[TrainingSpec]:
    """Resolve ``mini_rl`` into one :class:`TrainingSpec` per run of ``mini_rl.runs``, in order.

    Args:
        mini_rl: ``params:mini_rl``, parsed (:class:`hed.config.mini_rl.MiniRLParams`) or raw.
        runs: ``params:runs``, parsed (:class:`hed.config.layout.StudyLayout`) or raw
            (checkpoint_root and listed steps of every analysed run).
        prompt_params: ``params:prompts`` (the same prompt rendering as the analysis; parsed
            or its dict, :class:`hed.config.prompt_params.PromptsParams`).
        check_trainer_args: check the GRPOConfig field names (imports trl).

    Raises:
        ConfigError: an invalid ``mini_rl`` section (:func:`hed.config.mini_rl.mini_rl_params`);
            a run of ``mini_rl.runs`` missing from ``runs``; an unknown GRPOConfig field; a run
            overriding a field HED fixes; a bad schedule; an unknown reward; or a step listed in
            ``runs.<run>.steps`` that the schedule does not write.
    """
    params = MiniRLParams.of(mini_rl)
    prompt = PromptsParams.of(prompt_params).rendering_keys()  # the keys of PROMPT_KEYS
    known = _grpo_fields() if check_trainer_args else None
    grader(params.reward)  # an unknown name fails here, before any training
    wandb_root = params.wandb.dir or f"{data_root()}/{WANDB_SUBDIR}"  # a dict given: conf/'s
    specs = []
    for name, overrides in params.runs.items():
        where = f"mini_rl.runs.{name}"
        if name not in run_roles(runs):
            raise ConfigError(
                f"{where}: no run {name!r} in `runs` (parameters.yml); "
                "add it there with its checkpoint_root"
            )
        merged = {**params.training, **overrides}
        save_every = merged.pop("save_every", None)
        shaping = shaping_spec(merged.pop(SHAPING_KEY, None), f"{where}.{SHAPING_KEY}")
        _check_trainer_args(where, merged, known)
        schedule = checkpoint_schedule(merged.get("max_steps"), save_every)
        steps = configured_steps(runs, name)  # none for `steps: all`
        if steps:
            unwritten = sorted(set(steps) - set(schedule))
            if unwritten:
                raise ConfigError(
                    f"runs.{name}.steps lists {unwritten} but mini_rl writes checkpoints only "
                    f"at steps {list(schedule)} (max_steps {merged['max_steps']}, "
                    f"save_every {save_every})"
                )
        specs.append(
            TrainingSpec(
                run=str(name),
                checkpoint_root=_checkpoint_root(runs, name),
                wandb_dir=str(Path(wandb_root) / name),
                wandb_project=params.wandb.project,
                base_model_dir=params.base_model.model_dir,
                embedded=params.base_model.embedded,
                trainer_args={**cpu_trainer_args(merged), **FIXED_TRAINER_ARGS},
                save_steps=schedule,
                metric_key=params.validation.metric_key,
                validation_max_new_tokens=params.validation.max_new_tokens,
                validation_batch_size=params.validation.batch_size,
                torch_threads=params.torch_threads,
                prompt_params=prompt,
                task=params.task.model_dump(mode="json", exclude_unset=True) if params.task else {},
                reward=params.reward,
                advantage_shaping=shaping,
            )
        )
    return specs


def _checkpoint_root(runs: StudyLayout | Mapping[str, Any], name: str) -> str:
    if isinstance(runs, StudyLayout):
        return runs.run(name).checkpoint_root
    return str(runs[name]["checkpoint_root"])


def _check_trainer_args(where: str, merged: Mapping[str, Any], known: set[str] | None) -> None:
    """Refuse GRPOConfig fields HED sets itself, and (``known`` given) unknown field names."""
    fixed = sorted(set(merged) & ({*FIXED_TRAINER_ARGS, "output_dir", "run_name"}))
    if fixed:
        raise ConfigError(
            f"{where} / mini_rl.training set {', '.join(fixed)}: HED sets these itself; remove them"
        )
    if known is not None:
        unknown = sorted(set(merged) - known)
        if unknown:
            raise ConfigError(
                f"{where} / mini_rl.training: unknown GRPOConfig field(s) "
                f"{', '.join(unknown)} (use trl GRPOConfig / transformers TrainingArguments "
                "names, e.g. epsilon_high, num_iterations)"
            )


def frame_hash(*frames: Any) -> str:
    """sha256 of the ``problem`` and ``answer`` columns of task-set frames, in order."""
    digest = hashlib.sha256()
    for frame in frames:
        for problem, answer in zip(frame["problem"], frame["answer"], strict=True):
            digest.update(f"{problem}\x1f{answer}\x1e".encode())
        digest.update(b"\x1d")
    return digest.hexdigest()


def model_identity(model_dir: str | os.PathLike) -> str:
    """sha256 of a model folder's config.json and its weight files' names and sizes."""
    model_dir = Path(model_dir)
    listing = sorted((f.name, f.stat().st_size) for f in model_dir.glob("*.safetensors"))
    config = (
        (model_dir / "config.json").read_bytes() if (model_dir / "config.json").is_file() else b""
    )
    return hashlib.sha256(config + json.dumps(listing).encode()).hexdigest()
