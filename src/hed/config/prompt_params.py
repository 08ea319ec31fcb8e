"""The typed ``prompts`` parameter section, parsed once.

:class:`PromptsParams` (``params:prompts``: which column holds the prompt and which the
reference answer, how many prompts are sampled, duplicates, the instruction suffix and the
rendering) is built by :func:`prompts_params` in the pre-run check
(:func:`hed.config.preflight.parsed_sections`) and handed to the nodes of generation,
aggregation, rescoring and mini_rl, which read attributes. A node given a raw dict (a test, a
notebook) parses it with the same function (``PromptsParams.of``).

The rendering keys (``apply_chat_template``, ``enable_thinking``, ``system_prompt``) are parsed
into the decoding layer's own type, :class:`hed.decode.prompts.PromptRendering`, which
:func:`hed.decode.prompts.render_prompt` applies. Each default is written once, in these two
classes; :data:`hed.config.sections.SECTIONS` lists the same defaults, taken from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hed.core.validators import boolean, integer, positive_int, section
from hed.decode.prompts import DUPLICATE_POLICIES, PromptRendering, check_duplicate_policy
from hed.errors import ConfigError


@dataclass(frozen=True)
class PromptsParams:
    """``params:prompts``, checked (see ``conf/base/parameters_generation.yml``).

    Attributes:
        prompt_columns: candidate names of the prompt column, the first present is used (a
            single name is a list of one).
        answer_column: the reference answer's column, or a struct field as
            ``<column>.<field>`` (verl's ``reward_model.ground_truth``); None: no grading.
        num_prompts: prompts sampled from the file (None: every row), ≥ 1.
        seed: seed of that sample.
        rendering: how a prompt becomes the model's input
            (:class:`hed.decode.prompts.PromptRendering`; the section's flat keys
            ``apply_chat_template``, ``enable_thinking``, ``system_prompt``).
        instruction_suffix: appended to every problem text (part of the prompt and its id).
        duplicates: repeated prompts: ``drop`` all but the first, or ``keep`` them.
    """

    prompt_columns: tuple[str, ...] = ("prompt", "question", "problem")
    answer_column: str | None = None
    num_prompts: int | None = None
    seed: int = 0
    rendering: PromptRendering = field(default_factory=PromptRendering)
    instruction_suffix: str = ""
    duplicates: str = DUPLICATE_POLICIES[0]

    @classmethod
    def of(cls, value: Any) -> PromptsParams:
        """``value`` if already parsed, else :func:`prompts_params` of it."""
        return value if isinstance(value, cls) else prompts_params(value)

    def rendering_keys(self) -> dict[str, Any]:
        """What the policy is trained on besides the problems (mini_rl):
        ``{"apply_chat_template", "enable_thinking", "system_prompt", "instruction_suffix"}``."""
        return {**self.rendering.as_params(), "instruction_suffix": self.instruction_suffix}


def prompts_params(value: Any) -> PromptsParams:
    """Check ``params:prompts`` (``None``, an empty YAML section: every default).

    Raises:
        ConfigError: the section is not a mapping; ``prompt_columns`` null, empty or not a list;
            ``answer_column``, ``system_prompt`` not a string or null; ``instruction_suffix``
            not a string; ``num_prompts`` not a positive integer or null; ``seed`` not an
            integer; ``apply_chat_template`` not true/false; ``enable_thinking`` not
            true/false/null; ``duplicates`` not drop/keep. Each message names
            ``prompts.<key>``.
    """
    raw = section(value, "prompts", "parameters_generation.yml")
    defaults = PromptsParams()
    columns = raw.get("prompt_columns", defaults.prompt_columns)
    if isinstance(columns, str):
        columns = [columns]  # `prompt_columns: problem` means one column, not its letters
    if not isinstance(columns, list | tuple) or not columns:
        raise ConfigError(
            f"prompts.prompt_columns must be a list of column names (e.g. [problem, question]), "
            f"got {columns!r}"
        )
    return PromptsParams(
        prompt_columns=tuple(columns),
        answer_column=_text(raw.get("answer_column", defaults.answer_column), "answer_column"),
        num_prompts=positive_int(raw.get("num_prompts"), "prompts.num_prompts", allow_none=True),
        seed=integer(raw.get("seed", defaults.seed), "prompts.seed"),
        rendering=_rendering(raw),
        instruction_suffix=_text(raw.get("instruction_suffix"), "instruction_suffix") or "",
        duplicates=check_duplicate_policy(raw.get("duplicates", defaults.duplicates)),
    )


def _rendering(raw: dict[str, Any]) -> PromptRendering:
    rendering = PromptRendering.of(raw)
    boolean(rendering.apply_chat_template, "prompts.apply_chat_template")
    if rendering.enable_thinking is not None:
        boolean(rendering.enable_thinking, "prompts.enable_thinking")
    _text(rendering.system_prompt, "system_prompt")
    return rendering


def _text(value: Any, key: str) -> str | None:
    """A string parameter of ``prompts`` (null allowed).

    Raises:
        ConfigError: ``prompts.<key> must be a string or null, got <value>``.
    """
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"prompts.{key} must be a string or null, got {value!r}")
    return value


__all__ = ["PromptsParams", "prompts_params"]
