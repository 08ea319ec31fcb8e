"""The typed ``prompts`` parameter section (parameters_generation.yml).

:class:`PromptsParams` is parsed once before the run and handed to the nodes of generation,
aggregation, rescoring and mini_rl, which read attributes; a node given a raw dict (a test, a
notebook) parses it with the same ``PromptsParams.of``. The rendering keys
(``apply_chat_template``, ``enable_thinking``, ``system_prompt``) become the decoding layer's
:class:`hed.decode.prompts.PromptRendering` (:attr:`PromptsParams.rendering`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator

from hed.config.model import Bool, Int, PositiveInt, Section
from hed.decode.prompts import DUPLICATE_POLICIES, PromptRendering, check_duplicate_policy


def _columns(columns: Any) -> Any:
    if isinstance(columns, str):
        return [columns]  # `prompt_columns: problem` means one column, not its letters
    if not isinstance(columns, list | tuple) or not columns:
        raise ValueError("a list of column names (e.g. [problem, question])")
    return columns


class PromptsParams(Section):
    """``prompts``: which column holds the prompt and the answer, the sample, the rendering."""

    section: ClassVar[str] = "prompts"

    prompt_columns: Annotated[tuple[str, ...], BeforeValidator(_columns), Field(min_length=1)] = (
        "prompt", "question", "problem")  # fmt: skip
    """The first of these columns present in the file holds the prompt."""
    answer_column: str | None = None
    """The reference answer's column, or a struct field as ``<column>.<field>`` (verl's
    ``reward_model.ground_truth``); null: no grading."""
    num_prompts: PositiveInt | None = None
    """Sample this many prompts without replacement (null = all); more than the file has is an
    error."""
    seed: Int = 0
    """Seed of that sample (``numpy.random.default_rng``)."""
    apply_chat_template: Bool = True
    """Wrap each prompt in the tokenizer's chat template, when it has one."""
    enable_thinking: Bool | None = None
    """Passed to the chat template where it accepts it (Qwen3); null: omitted."""
    system_prompt: str | None = None
    """A system message before the user's (null: none)."""
    instruction_suffix: str | None = ""
    """Appended to every problem text (part of the prompt and its id)."""
    duplicates: Annotated[
        Literal[DUPLICATE_POLICIES], BeforeValidator(check_duplicate_policy)  # type: ignore[valid-type]
    ] = DUPLICATE_POLICIES[0]
    """Rows whose prompt (with the suffix) is an earlier row's (the same prompt_id): drop keeps
    the first of each, keep keeps them all; either way a warning gives the count."""

    @field_validator("instruction_suffix")
    @classmethod
    def _no_suffix(cls, suffix: str | None) -> str:
        return suffix or ""

    @property
    def rendering(self) -> PromptRendering:
        """How a prompt becomes the model's input (the three rendering keys)."""
        return PromptRendering(self.apply_chat_template, self.enable_thinking, self.system_prompt)

    def rendering_keys(self) -> dict[str, Any]:
        """What the policy is trained on besides the problems (mini_rl):
        ``{"apply_chat_template", "enable_thinking", "system_prompt", "instruction_suffix"}``."""
        return {**self.rendering.as_params(), "instruction_suffix": self.instruction_suffix}


#: ``params:prompts`` parsed (``None``: every default); one-line ConfigError otherwise.
prompts_params = PromptsParams.of

__all__ = ["PromptsParams", "prompts_params"]
