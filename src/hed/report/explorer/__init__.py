"""The study explorer: one self-contained offline page per study (docs/explorer.md).

:func:`build_explorer` gathers the data (bounded by :class:`ExplorerOptions`),
:func:`render_explorer` writes the page from ``page.html``, ``page.css`` and ``page.js``
(package data of this package).
"""

from .builder import (
    FORMAT,
    OPTIONAL_TOKEN_COLUMNS,
    build_explorer,
    render_explorer,
    response_stats,
    step_measures,
)
from .options import ExplorerOptions, explorer_options

__all__ = [
    "FORMAT",
    "OPTIONAL_TOKEN_COLUMNS",
    "ExplorerOptions",
    "build_explorer",
    "explorer_options",
    "render_explorer",
    "response_stats",
    "step_measures",
]
