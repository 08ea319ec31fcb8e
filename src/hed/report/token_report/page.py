"""The token report's page: ``page.html`` with ``page.css``, ``page.js`` and the data inlined.

The three files are package data of :mod:`hed.report.token_report` (read with
:mod:`importlib.resources`, the helpers shared with the study explorer inlined:
:mod:`hed.report.page_common`); :func:`render_html` puts the title, the CSS, the JavaScript and the
report's JSON (:func:`script_json`) into the HTML template, so the result is one self-contained
file with no external reference.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

from hed.report.page_common import fill, page_asset


def page_file(name: str) -> str:
    """The text of ``name`` (``page.html``, ``page.css``, ``page.js``) shipped with the package,
    the shared helpers inlined (:func:`hed.report.page_common.page_asset`)."""
    return page_asset("hed.report.token_report", name)


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` become ``\\u003c``, ``\\u003e``, ``\\u0026`` (so no ``</script>``
    or ``<!--`` can end or alter the element), U+2028/U+2029 become ``\\u2028``/``\\u2029``;
    ``JSON.parse`` reads back exactly the same strings.
    """
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for char, escaped in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


def render_html(report: Mapping[str, Any]) -> str:
    """The self-contained HTML page for ``report`` (from :func:`build_report`).

    Returns:
        A complete ``<!DOCTYPE html>`` document with inline CSS and JavaScript and no external
        reference; when rendered it sets ``document.body.dataset.ready = "1"`` and
        ``window.hedRenderMs`` (milliseconds from script start to the last token drawn).
    """
    parts = {
        "TITLE": html.escape(str(report.get("title", "HED token report"))),
        "CSS": page_file("page.css"),
        "JS": page_file("page.js"),
        "DATA": script_json(report),
    }
    return fill(page_file("page.html"), parts)  # one pass: a title's "__DATA__" stays text


def notebook_view(page: str, height: int = 720) -> str:
    """``page`` wrapped in an ``<iframe srcdoc>`` for ``IPython.display.HTML``.

    The iframe keeps the page's CSS and element ids apart from the notebook's; ``srcdoc`` is
    attribute-escaped (``html.escape(quote=True)``), so the page arrives unchanged.
    """
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" '
        f'style="width:100%;height:{int(height)}px;border:1px solid #ddd" '
        'sandbox="allow-scripts"></iframe>'
    )
