"""The style of a figure (panel size, dpi), its one set of defaults and its check.

No matplotlib here: the pre-run check (:mod:`hed.config`) parses ``reporting.figure2``,
``reporting.figure3``, ``dynamics.figures`` and ``analyses.dpi`` with :func:`figure_style` and
:func:`check_dpi` before the first node, and the figure functions
(:mod:`hed.report.figures`, :mod:`hed.report.dynamics_figures`) take these defaults as their
argument defaults, so each default is written once, here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class FigureStyle:
    """The style of one figure.

    Attributes:
        panel_size: (width, height) in inches of one panel, both > 0.
        dpi: dots per inch of the saved PNG, an integer ≥ :data:`MIN_DPI`.
    """

    panel_size: tuple[float, float]
    dpi: int = DPI

    def as_params(self) -> dict[str, Any]:
        """The style as YAML writes it: ``{"panel_size": [w, h], "dpi": dpi}``."""
        return {"panel_size": list(self.panel_size), "dpi": self.dpi}


#: Figure 2's style unless ``reporting.figure2`` sets it.
FIGURE2_STYLE = FigureStyle((3.5, 2.8))
#: Figure 3's style unless ``reporting.figure3`` sets it.
FIGURE3_STYLE = FigureStyle((2.6, 3.6))
#: The dynamics figures' style unless ``dynamics.figures`` sets it.
DYNAMICS_STYLE = FigureStyle((3.2, 2.2))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


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

    Args:
        value: the mapping (``None``: ``default``).
        key: its dotted name, e.g. ``reporting.figure2``.
        default: the figure's default style.

    Returns:
        The :class:`FigureStyle`.

    Raises:
        ConfigError: not a mapping (``<key> must be a mapping``), a ``panel_size`` that is not
            two numbers > 0 (``<key>.panel_size must be [width, height] in inches, both > 0``)
            or a bad dpi (:func:`check_dpi`).
    """
    if value is None:
        return default
    if isinstance(value, FigureStyle):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a mapping (panel_size, dpi), got {value!r}")
    size = value.get("panel_size", default.panel_size)
    if (
        not isinstance(size, list | tuple)
        or len(size) != 2
        or not all(_number(v) and 0 < v <= MAX_PANEL_INCHES for v in size)
    ):
        raise ConfigError(
            f"{key}.panel_size must be [width, height] in inches, both > 0 and at most "
            f"{MAX_PANEL_INCHES:g}, got {size!r}"
        )
    dpi = check_dpi(value.get("dpi", default.dpi), f"{key}.dpi")
    return FigureStyle((float(size[0]), float(size[1])), dpi)


__all__ = [
    "DPI",
    "DYNAMICS_STYLE",
    "FIGURE2_STYLE",
    "FIGURE3_STYLE",
    "MIN_DPI",
    "FigureStyle",
    "check_dpi",
    "figure_style",
]
