"""The style of a figure (panel size, dpi), its one set of defaults and its check.

No matplotlib here: the style sections (``reporting.figure2``, ``reporting.figure3``,
``dynamics.figures``) are :class:`hed.config.model.Section` models parsed before the first node,
and the figure functions (:mod:`hed.report.figures`, :mod:`hed.report.dynamics_figures`) take
these defaults as their argument defaults, so each default is written once, here.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, Strict, WithJsonSchema

from hed.config.model import Section
from hed.errors import ConfigError

#: Dots per inch of every figure unless set.
DPI = 200
#: The smallest dpi accepted (a smaller one draws unreadable text).
MIN_DPI = 10
#: The largest dpi accepted (print quality is 300–600; matplotlib refuses images of 2^16
#: pixels or more a side, which a few panels at a larger dpi reach).
MAX_DPI = 1200
#: The largest panel side accepted, in inches (with :data:`MAX_DPI`, a panel stays far below
#: matplotlib's 2^16-pixel limit).
MAX_PANEL_INCHES = 20.0

#: A figure's dots per inch, an integer in [:data:`MIN_DPI`, :data:`MAX_DPI`].
Dpi = Annotated[int, Strict(), Field(ge=MIN_DPI, le=MAX_DPI)]


def _panel_size(size: Any) -> tuple[float, float]:
    def side(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= MAX_PANEL_INCHES

    if not isinstance(size, list | tuple) or len(size) != 2 or not all(map(side, size)):
        raise ValueError(f"[width, height] in inches, both > 0 and at most {MAX_PANEL_INCHES:g}")
    return float(size[0]), float(size[1])


#: A panel's (width, height) in inches, both in (0, :data:`MAX_PANEL_INCHES`].
PanelSize = Annotated[
    tuple[float, float],
    BeforeValidator(_panel_size),
    WithJsonSchema(
        {
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "items": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_PANEL_INCHES},
        }
    ),
]


class FigureStyle(Section):
    """The style of one figure; a subclass per figure sets the default panel size."""

    panel_size: PanelSize
    """(width, height) in inches of one panel; PNG pixels = size × dpi."""
    dpi: Dpi = DPI
    """Dots per inch of the saved PNG."""

    def as_params(self) -> dict[str, Any]:
        """The style as YAML writes it: ``{"panel_size": [w, h], "dpi": dpi}``."""
        return {"panel_size": list(self.panel_size), "dpi": self.dpi}


class Figure2Style(FigureStyle):
    """``reporting.figure2``: Figure 2's panel size (one panel per run) and dpi."""

    section: ClassVar[str] = "reporting.figure2"
    panel_size: PanelSize = (3.5, 2.8)
    """(width, height) in inches of one run's panel."""


class Figure3Style(FigureStyle):
    """``reporting.figure3``: Figure 3's panel size (one per run and step) and dpi."""

    section: ClassVar[str] = "reporting.figure3"
    panel_size: PanelSize = (2.6, 3.6)
    """(width, height) in inches of one (run, step) panel."""


class DynamicsStyle(FigureStyle):
    """``dynamics.figures``: the dynamics figures' panel size and dpi."""

    section: ClassVar[str] = "dynamics.figures"
    panel_size: PanelSize = (3.2, 2.2)
    """(width, height) in inches of one panel."""


#: Figure 2's bar measures (``reporting.fig2_measure``; their axis labels:
#: :data:`hed.report.figures.FIGURE2_MEASURES`).
FIGURE2_MEASURE_NAMES = ("count", "per_1k_high_entropy", "per_1k_tokens")
#: Figure 2's style unless ``reporting.figure2`` sets it.
FIGURE2_STYLE = Figure2Style()
#: Figure 3's style unless ``reporting.figure3`` sets it.
FIGURE3_STYLE = Figure3Style()
#: The dynamics figures' style unless ``dynamics.figures`` sets it.
DYNAMICS_STYLE = DynamicsStyle()


def check_dpi(value: Any, key: str) -> int:
    """A figure's dpi: an integer in [:data:`MIN_DPI`, :data:`MAX_DPI`].

    Raises:
        ConfigError: ``<key> must be an integer from 10 to 1200, got <value>``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_DPI <= value <= MAX_DPI:
        raise ConfigError(f"{key} must be an integer from {MIN_DPI} to {MAX_DPI}, got {value!r}")
    return value


def figure_style(value: Any, key: str, default: FigureStyle) -> FigureStyle:
    """Parse a figure's style section (``panel_size``, ``dpi``; a key left out: ``default``'s).

    Raises:
        ConfigError: not a mapping, a bad ``panel_size`` or dpi, an unknown key (one line).
    """
    if isinstance(value, FigureStyle):
        return value
    return type(default).of(value, section=key)


__all__ = [
    "DPI",
    "DYNAMICS_STYLE",
    "FIGURE2_MEASURE_NAMES",
    "FIGURE2_STYLE",
    "FIGURE3_STYLE",
    "MIN_DPI",
    "Dpi",
    "DynamicsStyle",
    "Figure2Style",
    "Figure3Style",
    "FigureStyle",
    "PanelSize",
    "check_dpi",
    "figure_style",
]
