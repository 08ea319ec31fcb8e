"""The one helper every ``pipeline.py`` shares: binding a node function's keyword arguments."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial, update_wrapper
from typing import Any


def bound(func: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """``func`` with keyword arguments bound (``functools.partial``), keeping its name.

    Kedro names a node and kedro-viz shows its code from ``__name__``/``__wrapped__``, which a
    bare ``partial`` lacks; ``functools.update_wrapper`` copies them from ``func``.

    Args:
        func: a node function.
        **kwargs: values fixed when the pipeline is built (``run``, ``step``, ``shard``...).

    Returns:
        A callable taking the node's remaining (dataset) arguments.
    """
    return update_wrapper(partial(func, **kwargs), func)
