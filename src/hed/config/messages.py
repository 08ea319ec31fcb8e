"""pydantic's ``ValidationError`` as HED's one-line :class:`~hed.errors.ConfigError`.

One message per error, naming the dotted key, the file (or ``--params``) that set it, the value
and what is allowed: ``generation.temperature (set in conf/s1/parameters_generation.yml) must
be a number > 0, got -1.0``; an unknown key names the nearest valid one
(``unknown parameter generation.temprature (set in ...): did you mean generation.temperature?
HED does not read it, so it would be ignored``). A validator's own ``ValueError`` text is the
rule (``must be <text>``); a model validator's (a cross-field check) is the whole sentence.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import annotated_types as at
from pydantic import BaseModel, ValidationError

from hed.errors import ConfigError, HEDError

#: Sections not in ``parameters_<section>.yml`` (:data:`hed.config.sections.FILES`).
_FILES = {"runs": "parameters.yml", "prompts": "parameters_generation.yml"}


#: Which file set a dotted key, while a session's parameters are checked (:func:`naming_files`).
_ORIGIN: ContextVar[Callable[[str], str] | None] = ContextVar("hed_key_origin", default=None)


@contextmanager
def naming_files(origin: Callable[[str], str] | None) -> Iterator[None]:
    """Inside the block, every message of :func:`config_error` names the file (or ``--params``)
    that set the key, from ``origin`` (:func:`hed.config.sections.key_origin` of the session)."""
    token = _ORIGIN.set(origin)
    try:
        yield
    finally:
        _ORIGIN.reset(token)


def config_error(
    exc: ValidationError, model: type, section: str, origin: Callable[[str], str] | None = None
) -> HEDError:
    """The first error of ``exc`` (raised validating ``model``) as one line.

    Args:
        exc: pydantic's error.
        model: the :class:`pydantic.BaseModel` validated.
        section: its dotted name in the parameters (``generation``; ``""`` at the top).
        origin: dotted key -> the file that set it, ``conf/<env>/parameters_<x>.yml`` or
            ``--params`` (:func:`hed.config.sections.key_origin`); None: the one of the
            enclosing :func:`naming_files` block, else no file named.

    Returns:
        The :class:`ConfigError` to raise (a validator's own :class:`~hed.errors.HEDError`, at
        any depth of nesting, as it wrote it, with the file inserted after the key it starts
        with).
    """
    errors = exc.errors(include_url=False)
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    error = unknown[0] if unknown else errors[0]
    loc = [str(part) for part in error["loc"]]
    key = ".".join(p for p in (section, *loc) if p)
    origin = origin or _ORIGIN.get()
    found = origin(key) if origin is not None else None
    where = f" (set in {found})" if found else ""
    raised = error.get("ctx", {}).get("error")
    if isinstance(raised, HEDError):
        text = str(raised)
        if where and loc and text.startswith(key) and text[len(key) : len(key) + 1] in " :":
            raised.args = (f"{key}{where}{text[len(key) :]}", *raised.args[1:])
        return raised  # type: ignore[return-value]
    if error["type"] == "extra_forbidden":
        return ConfigError(_unknown(model, loc, key, where, len(unknown) - 1))
    value, kind = error.get("input"), error["type"]
    if kind == "missing":
        text = f"{key}{where} is missing; set it in the parameters"
    elif kind == "value_error" and not loc:  # a model validator's sentence
        text = f"{error['ctx']['error']}{where}"
    elif kind in {"model_type", "model_attributes_type", "dict_type"} and "." not in key:
        text = f"parameter `{key}` must be a mapping ({found or _FILES.get(key, f'parameters_{key}.yml')}), got {value!r}"  # noqa: E501
    elif kind in {"model_type", "model_attributes_type", "dict_type"}:
        text = f"{key}{where} must be a mapping (`{key.rsplit('.')[-1]}: {{...}}`), got {value!r}"
    else:
        rule = error["ctx"]["error"] if kind == "value_error" else _rule(model, loc)
        text = f"{key}{where} must be {rule or error['msg'].removeprefix('Input should be ')}, got {value!r}"  # noqa: E501
    return ConfigError(text)


def _unknown(model: type, loc: list[str], key: str, where: str, more: int) -> str:
    parent = key.rsplit(".", 1)[0] + "." if "." in key else ""
    valid = sorted(_fields_at(model, loc[:-1]))
    near = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.6)
    hint = f"did you mean {parent}{near[0]}?" if near else (
        f"valid keys here: {', '.join(valid) or 'none'}.")  # fmt: skip
    tail = f"; {more} more unknown key(s)" if more else ""
    return (
        f"unknown parameter {key}{where}: {hint} HED does not read it, so it would be ignored{tail}"
    )


def _fields(model: Any) -> dict[str, Any]:
    is_model = isinstance(model, type) and issubclass(model, BaseModel)
    return model.__pydantic_fields__ if is_model else {}


def _inner(annotation: Any) -> Any:
    """The model inside ``annotation`` (``X``, ``X | None``, ``dict[str, X]``), else None."""
    for arg in (annotation, *typing.get_args(annotation)):
        for inner in (arg, *typing.get_args(arg)):
            if _fields(inner):
                return inner
    return None


def _field(model: Any, loc: list[str]) -> Any:
    """The :class:`~pydantic.fields.FieldInfo` at ``loc`` (names of free mappings skipped)."""
    info = None
    for part in loc:
        fields = _fields(model)
        if part in fields:
            info, model = fields[part], _inner(fields[part].annotation)
        elif not fields:  # an item of a list, a key of a free mapping
            return None
    return info


def _fields_at(model: Any, loc: list[str]) -> set[str]:
    """Valid keys of the model at ``loc`` (``[]``: ``model``'s own)."""
    for part in loc:
        fields = _fields(model)
        model = _inner(fields[part].annotation) if part in fields else model
    return set(_fields(model))


def _rule(model: type, loc: list[str]) -> str | None:
    """What a field allows, in words: ``a positive integer``, ``a number in (0, 1]``, ``one of
    hf, vllm``, ``true or false (unquoted)``, each ``or null`` when ``None`` is allowed."""
    info = _field(model, loc)
    if info is None:
        return None
    annotation, metadata = info.annotation, list(info.metadata)
    optional = False
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in {typing.Union, types.UnionType}:
        arms = [a for a in args if a is not type(None)]
        optional = len(arms) < len(args)
        if len(arms) != 1:
            return None
        annotation = arms[0]
    if typing.get_origin(annotation) is typing.Annotated:
        annotation, *extra = typing.get_args(annotation)
        metadata += [m for e in extra for m in getattr(e, "metadata", [e])]
    bounds = {type(m).__name__: getattr(m, next(iter(m.__dataclass_fields__)))
              for m in metadata if isinstance(m, at.Gt | at.Ge | at.Lt | at.Le)}  # fmt: skip
    if annotation is str and any(getattr(m, "min_length", None) or getattr(m, "pattern", None)
                                 for m in metadata):  # fmt: skip
        bounds["MinLen"] = 1
    rule = _words(annotation, bounds)
    return f"{rule} or null" if rule and optional and annotation is not bool else rule


def _words(annotation: Any, bounds: dict[str, Any]) -> str | None:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, typing.get_args(annotation)))
    if origin is tuple:
        items = typing.get_args(annotation)
        return "a list of strings" if items == (str, ...) else "a list"
    if annotation is int:
        ints = {(0, None): "a positive integer", (None, 0): "a non-negative integer"}
        rule = ints.get((bounds.get("Gt"), bounds.get("Ge")), "an integer")
        if "Ge" in bounds and "Le" in bounds:
            rule = f"an integer from {bounds['Ge']} to {bounds['Le']}"
        return rule
    if annotation is float:
        signs = {"Gt": ">", "Ge": ">=", "Lt": "<", "Le": "<="}
        ranged = " and ".join(f"{signs[b]} {v:g}" for b, v in bounds.items())
        return (
            "a number in (0, 1]" if bounds == {"Gt": 0, "Le": 1} else f"a number {ranged}".strip()
        )
    words = {bool: "true or false (unquoted)",
             str: "a non-empty string" if bounds.get("MinLen") else "a string"}  # fmt: skip
    return words.get(annotation)


__all__ = ["config_error", "naming_files"]
