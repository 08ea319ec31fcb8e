"""A section whose refusals keep HED's own wording: :class:`Worded`.

Types, defaults and ranges are declared on the fields (:class:`hed.config.model.Section`);
what a key requires *in words* is declared next to them, once, in :attr:`Worded.says`
(``{"epsilon": "must be a positive number"}``). A value failing the field's type or range is
then refused (:meth:`Worded.refused`) as ``<section>.<key> <says>, got <value>``
(``dynamics.epsilon must be a positive number, got True``), the wording the tests and
docs/errors.md fix. A validator that raises a :class:`hed.errors.HEDError` itself (a
cross-field check, a check kept in a lower layer such as
:func:`hed.report.style.figure_style`) is passed on unchanged, from any depth of nesting.
Everything else goes to :func:`hed.config.messages.config_error`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BeforeValidator, ValidationError, model_validator

from hed.config.model import Section
from hed.core.validators import section as as_mapping
from hed.errors import ConfigError, HEDError


class Worded(Section):
    """A :class:`Section` with its requirements in words (:attr:`says`).

    ``None`` (an empty YAML section) means every default; a value that is not a mapping is
    refused as :func:`hed.core.validators.section` words it.
    """

    #: field -> what it requires, in words (``"must be a positive integer"``)
    says: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="wrap")
    @classmethod
    def _in_words(cls, data: Any, handler: Any) -> Any:
        if isinstance(data, cls):
            return data
        data = as_mapping(data, cls.section)
        try:
            return handler(data)
        except ValidationError as exc:
            raise _worded(exc, cls, data) or exc from None

    @classmethod
    def refused(cls, field: str, value: Any) -> ConfigError:
        """The refusal of ``value`` for ``field`` in the words of :attr:`says`.

        A phrase reads ``<section>.<field> <phrase>, got <value>``; a phrase holding
        ``{key}`` (and ``{value}``) is filled in instead (``"{key}: {value} is not one of ..."``).
        """
        key, phrase = f"{cls.section}.{field}", cls.says[field]
        if "{key}" in phrase:
            return ConfigError(phrase.replace("{key}", key).replace("{value}", repr(value)))
        return ConfigError(f"{key} {phrase}, got {value!r}")

    @classmethod
    def of(cls, raw: Any, *, context: Mapping[str, Any] | None = None, **names: Any) -> Self:
        """Parse ``raw`` as :meth:`Section.of` does (``names``: its ``section``, ``sources``);
        a refusal in words is raised as it is.

        ``context`` is pydantic's validation context (what a validator needs besides the
        section, e.g. the study's run names).

        Raises:
            ConfigError: one line naming the dotted key and the value.
        """
        from hed.config.messages import config_error

        try:
            return raw if isinstance(raw, cls) else cls.model_validate(raw, context=context)
        except ValidationError as exc:
            worded = _worded(exc, cls, raw if isinstance(raw, Mapping) else {})
            where = names.get("section") or cls.section
            raise worded or config_error(exc, cls, where, names.get("sources")) from None


def null_is(default: Any) -> BeforeValidator:
    """``Annotated`` metadata: ``null`` means ``default``."""
    return BeforeValidator(lambda value: default if value is None else value)


def empty_is(default: Any) -> BeforeValidator:
    """``Annotated`` metadata: an empty value (``null``, ``""``, ``[]``) means ``default``."""
    return BeforeValidator(lambda value: value or default)


def _worded(exc: ValidationError, cls: type[Worded], data: Mapping[str, Any]) -> HEDError | None:
    """The refusal in words for the first error of ``exc``, or None."""
    error = exc.errors()[0]
    raised = (error.get("ctx") or {}).get("error")
    if isinstance(raised, HEDError):
        return raised
    field = error["loc"][0] if error["loc"] else None
    return cls.refused(str(field), data.get(field)) if field in cls.says else None


__all__ = ["Worded", "empty_is", "null_is"]
