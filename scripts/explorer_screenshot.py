"""Draw docs/explorer.png: the study explorer of a small synthetic study in headless Chromium.

Usage: ``python scripts/explorer_screenshot.py [out.png]`` (Debian's /usr/bin/chromium,
offline). The page is built from bench/explorer.py's synthetic records (2 steps x 16
responses x 300 tokens), sorted by advantage, with one token's tooltip open; the PNG is
reduced to a 128-colour palette to stay small.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from explorer import CHROMIUM, CHROMIUM_ARGS, synthetic_step  # noqa: E402

from hed.report import token_report as tr  # noqa: E402
from hed.report.explorer import ExplorerOptions, build_explorer, render_explorer  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs/explorer.png"
    steps = []
    for step in (0, 10, 20):
        records, seqs = synthetic_step("demo", step, 16, 300)
        steps.append(tr.StepInput("demo", "single", step, seqs, records, threshold=0.62))
    page = render_explorer(build_explorer(steps, ExplorerOptions(responses_per_step=8)))
    from PIL import Image
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        path = Path(tmp) / "study_explorer.html"
        path.write_text(page, encoding="utf-8")
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        tab = browser.new_context(offline=True, viewport={"width": 1280, "height": 760}).new_page()
        tab.goto(path.as_uri())
        tab.wait_for_selector("body[data-ready='1']")
        tab.select_option("#sort", "adv")
        tab.locator("#list span.t.he").nth(3).hover()
        tab.wait_for_selector("#tip:not([hidden])")
        shot = Path(tmp) / "shot.png"
        tab.screenshot(path=str(shot))
        browser.close()
        image = Image.open(shot).convert("RGB").quantize(colors=128)
        image.save(out, optimize=True)
    print(f"{out}: {out.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
