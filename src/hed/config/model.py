"""The base of every parameter section: one pydantic model per section, declared once.

A section (``generation``, ``aggregation``, ...) is a subclass of :class:`Section`: each field is
typed, carries its default and an attribute docstring right under it (the JSON Schema, the
editor's completion and docs/parameters.md are generated from these), and ranges are declared
with ``Field(gt=..)``/``Annotated`` next to the field. The model refuses a key it does not
declare (``extra="forbid"``), a bool where a number is asked (``Strict`` numbers below) and is
frozen (hashable, safe to hand to a node in another process).

:meth:`Section.of` is the one entry point: it parses a raw mapping (a node given a dict by a
test or a notebook, the pre-run check given the merged parameters) and turns pydantic's
``ValidationError`` into HED's one-line :class:`hed.errors.ConfigError` with
:func:`hed.config.messages.config_error` (file, dotted key, value, nearest valid key, the
``or set ...`` hint).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    model_validator,
)

#: an integer, never a bool (``true`` is refused where a count is asked)
Int = Annotated[int, Strict()]
#: an integer > 0
PositiveInt = Annotated[int, Strict(), Field(gt=0)]
#: an integer >= 0
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
#: a real number (an int is accepted, a bool is not)
Number = Annotated[float, Strict()]
#: a real number > 0
PositiveNumber = Annotated[float, Strict(), Field(gt=0)]
#: a fraction in (0, 1]
Fraction = Annotated[float, Strict(), Field(gt=0, le=1)]
#: true or false, never 0/1 or a string
Bool = Annotated[bool, Strict()]


def null_is(default: Any) -> BeforeValidator:
    """``Annotated`` metadata: ``null`` means ``default``."""
    return BeforeValidator(lambda value: default if value is None else value)


def empty_is(default: Any) -> BeforeValidator:
    """``Annotated`` metadata: an empty value (``null``, ``""``, ``[]``) means ``default``."""
    return BeforeValidator(lambda value: value or default)


class Section(BaseModel):
    """A parameter section: typed fields with defaults; unknown keys refused; frozen.

    Subclasses set :attr:`section` to their dotted name in the parameters (``"generation"``,
    ``"reporting.explorer"``); error messages use it as the prefix of every key.
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        validate_default=True,
    )

    #: dotted name of the section in the parameters files (``generation``)
    section: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _empty_is_default(cls, value: Any) -> Any:
        """An empty YAML section (``explorer:`` with nothing under it) is ``None``: defaults."""
        return {} if value is None else value

    @classmethod
    def of(
        cls,
        raw: Mapping[str, Any] | Self | None,
        *,
        section: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> Self:
        """Parse ``raw`` (a section's mapping, ``None`` for all defaults, or an instance).

        Args:
            raw: the section as the parameters hold it.
            section: dotted name for messages, when not :attr:`section` (a run's
                ``runs.<run>``).
            context: pydantic's validation context (what a validator needs besides the
                section, e.g. the study's run names).

        Raises:
            ConfigError: one line naming the dotted key, the value, what is allowed and,
                for an unknown key, the nearest valid one (a validator's own
                :class:`~hed.errors.HEDError` as it is).
        """
        if isinstance(raw, cls):
            return raw
        from hed.config.messages import config_error

        try:
            data = dict(raw) if isinstance(raw, Mapping) else raw
            return cls.model_validate(data, context=dict(context) if context else None)
        except ValidationError as exc:
            raise config_error(exc, cls, section or cls.section) from None
