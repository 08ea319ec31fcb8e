"""Headless Debian ``chromium`` driven by Playwright, offline, with a fresh profile.

Never ``playwright install``: the browser is the system's ``/usr/bin/chromium`` (apt package
``chromium``, installed by .ci/run); Playwright only drives it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
READY = "document.body.dataset.ready === '1'"


@contextmanager
def open_page(path: Path, profile: Path, viewport=(1400, 900)) -> Iterator[Any]:
    """Open ``path`` (a local HTML file) and wait until the token report says it is ready.

    The page gets ``events``: ``requests`` (every URL the page asked for), ``dialogs``
    (alert/confirm/prompt messages, dismissed), ``errors`` (uncaught exceptions), ``console``.

    Args:
        path: the HTML file.
        profile: a folder that does not exist yet: the fresh ``--user-data-dir``.
        viewport: (width, height) in CSS pixels.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            offline=True,  # network emulation: every http(s) request fails
            viewport={"width": viewport[0], "height": viewport[1]},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            events: dict[str, list[str]] = {
                "requests": [],
                "dialogs": [],
                "errors": [],
                "console": [],
            }
            page.on("request", lambda r: events["requests"].append(r.url))
            page.on("pageerror", lambda e: events["errors"].append(str(e)))
            page.on("console", lambda m: events["console"].append(m.text))

            def on_dialog(dialog) -> None:
                events["dialogs"].append(dialog.message)
                dialog.dismiss()

            page.on("dialog", on_dialog)
            page.goto(Path(path).as_uri())
            page.wait_for_function(READY, timeout=20_000)
            page.events = events
            yield page
        finally:
            context.close()
