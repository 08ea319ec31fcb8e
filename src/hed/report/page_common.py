"""What the token report's and the study explorer's pages share: ``page_common.js`` and
``page_common.css`` (the entropy colour scale, token spans, the tooltip, number formatting),
inlined into each page's script and style where the page's own file has the marker line
(``// page_common.js``, ``/* page_common.css */``); and the one-pass filling of a page template.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources

#: The line of a page's ``page.js`` / ``page.css`` that the shared file replaces.
MARKERS = {"js": "// page_common.js", "css": "/* page_common.css */"}


@cache
def page_asset(package: str, name: str) -> str:
    """The text of ``name`` (``page.html``, ``page.css``, ``page.js``) of ``package``
    (``hed.report.token_report``, ``hed.report.explorer``), with the shared file of its kind
    in place of its marker line (:data:`MARKERS`); read with :mod:`importlib.resources`."""
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    kind = name.rpartition(".")[2]
    if kind not in MARKERS:
        return text
    shared = resources.files(__package__).joinpath(f"page_common.{kind}").read_text("utf-8")
    return text.replace(MARKERS[kind] + "\n", shared, 1)


def fill(template: str, parts: Mapping[str, str]) -> str:
    """``template`` with each ``__NAME__`` of ``parts`` replaced by ``parts[NAME]``, in one
    pass: a value that itself holds a placeholder (a title with ``__DATA__``) is never
    substituted again."""
    pattern = "__(" + "|".join(re.escape(name) for name in parts) + ")__"
    return re.sub(pattern, lambda match: parts[match.group(1)], template)
