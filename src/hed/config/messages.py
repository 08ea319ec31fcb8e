"""PLACEHOLDER (params-edges): the smallest ``config_error`` so the sections' tests run.

params-core writes the real module (file, dotted key, value, nearest valid key, the
``or set ...`` hint); this one is replaced by it on merge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from hed.errors import ConfigError, HEDError


def config_error(
    exc: ValidationError, model: type, section: str, sources: Mapping[str, str] | None = None
) -> ConfigError:
    """The first error of ``exc`` as one line ``<section>.<key>: <pydantic's message>``.

    A :class:`hed.errors.HEDError` raised by a validator is returned as it is (its wording is
    the section's own).
    """
    del model, sources
    error: dict[str, Any] = exc.errors()[0]
    raised = (error.get("ctx") or {}).get("error")
    if isinstance(raised, HEDError):
        return raised  # type: ignore[return-value]
    key = ".".join([section, *map(str, error["loc"])]).strip(".")
    return ConfigError(f"{key}: {error['msg']}, got {error.get('input')!r}")
