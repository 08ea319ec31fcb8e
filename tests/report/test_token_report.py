"""The token report (hed.report.token_report): data, escaping, and the page in a real browser.

The browser tests open the demo report (tests/token_report_demo.py: real SmolLM2 token ids
and texts, HED's word rule and lexicon) from disk in Debian's headless ``chromium`` driven by
Playwright, offline and with a fresh profile, and check what a reader sees against the
records: one span per record shown, each response's spans joined give its exact text, the
tooltip shows the record's values, the filters and the step selector, and a response holding
``<script>`` shows as text and runs nothing. CI installs chromium (.ci/run) and playwright
(pyproject's dev extra); these tests are not skipped.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from hed.core.token_text import DECODE_KWARGS
from hed.errors import ConfigError
from hed.report import token_report as tr
from hed.report.token_report import payload

from ..browser import READY, open_page
from ..token_report_demo import RESPONSES, RUN, STEPS, demo_prompts, demo_step

SCRIPT_KEY = (1, 0)  # the response with <script>alert(1)</script> and </span>
PWNED_KEY = (1, 1)  # the response with <script>window.__pwned=1</script> and <b>


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def demo(tokenizer):
    """{step: (records, sequences)} of the demo, and its report with 4 responses per step."""
    tables = {step: demo_step(tokenizer, step) for step in STEPS}
    steps = [
        tr.StepInput(
            run=RUN,
            role="single",
            step=step,
            sequences=seqs,
            records=records,
            threshold=seqs.attrs["threshold"],
            top_entropy_frac=0.2,
        )
        for step, (records, seqs) in tables.items()
    ]
    report = tr.build_report(
        steps,
        tr.TokenReportOptions(responses_per_step=4, seed=0),
        prompts=demo_prompts(),
        tokenizers={RUN: tokenizer},
    )
    return tables, report


@pytest.fixture(scope="module")
def page(demo, tmp_path_factory):
    """The demo report open in headless chromium (offline, fresh profile), ready to read."""
    _, report = demo
    root = tmp_path_factory.mktemp("token_report")
    path = root / "token_report.html"
    path.write_text(tr.render_html(report), encoding="utf-8")
    with open_page(path, root / "profile") as tab:
        tab.path = path
        yield tab


def cell(tab, step: int, key: tuple[int, int]):
    return tab.locator(f'.resp[data-key="{step}:{key[0]}:{key[1]}"]')


# ------------------------------------------------------------------ in the browser


def test_page_loads_offline_and_is_not_blank(page, tmp_path):
    assert page.events["errors"] == [] and page.events["console"] == []
    # nothing but the file itself was requested: no CDN, no font, no network at all
    assert page.events["requests"] == [page.path.as_uri()]
    shot = tmp_path / "shot.png"
    page.screenshot(path=str(shot))
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=float)
    assert pixels.std() > 20  # a blank page has std 0
    colours = {tuple(c) for c in pixels[::4, ::4].reshape(-1, 3).astype(int)}
    assert len(colours) > 200  # text, the entropy colours, the legend


def test_one_span_per_record_shown_and_exact_text(page, demo):
    tables, report = demo
    keys = [tuple(k) for k in report["runs"][0]["keys"]]
    assert len(keys) == 4 and SCRIPT_KEY in keys and PWNED_KEY in keys
    shown = [
        c.split(":") for c in page.eval_on_selector_all(".resp", "c => c.map(e => e.dataset.key)")
    ]
    assert sorted((int(s), int(p), int(q)) for s, p, q in shown) == sorted(
        (s, p, q) for s in STEPS for p, q in keys
    )
    expected = 0
    for records, _ in tables.values():
        frame = records.select(["prompt_index", "sample_index"]).to_pandas()
        expected += int(frame.apply(tuple, axis=1).isin(keys).sum())
    assert page.locator("#grid span.t").count() == expected
    for step, (_, seqs) in tables.items():
        for p, s in keys:
            text = (
                cell(page, step, (p, s))
                .locator(".body")
                .evaluate("b => [...b.querySelectorAll('span.t')].map(x => x.textContent).join('')")
            )
            row = seqs[(seqs["prompt_index"] == p) & (seqs["sample_index"] == s)].iloc[0]
            assert text == row["response_text"]


def test_script_in_a_response_shows_as_text_and_never_runs(page):
    text = cell(page, 0, SCRIPT_KEY).locator(".body").inner_text()
    assert "<script>alert(1)</script>" in text and "</span>" in text
    assert "<script>window.__pwned=1</script>" in cell(page, 0, PWNED_KEY).inner_text()
    assert page.events["dialogs"] == []
    assert page.evaluate("window.__pwned") is None
    # the page's own two scripts are the only ones; a response body holds token spans (and a
    # "more tokens" note) only, and no token span holds an element
    assert page.locator("script").count() == 2
    assert page.locator(".body > :not(span.t):not(.more), .body span.t *").count() == 0


def test_hover_shows_the_records_values(page, demo, tokenizer):
    tables, _ = demo
    records = tables[0][0].to_pandas()
    rows = records[
        (records["prompt_index"] == SCRIPT_KEY[0]) & (records["sample_index"] == SCRIPT_KEY[1])
    ].reset_index(drop=True)
    # the highest-entropy word token of the response that has a category
    pick = rows[(rows["word"] != "") & (rows["entropy"] > 0.01)].sort_values("entropy").iloc[-1]
    span = cell(page, 0, SCRIPT_KEY).locator("span.t").nth(int(pick["position"]))
    assert span.text_content() == pick["token_text"]
    span.hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()

    def shown(value: float, sig: int) -> str:
        """The page's number: ``sig`` significant digits in the data, then 4 decimals, or
        JavaScript's ``toExponential(1)`` below 0.001."""
        value = float(f"{value:.{sig}g}")
        if value != 0 and abs(value) < 1e-3:
            return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{value:.1e}")
        return f"{value:.4f}"

    assert f"entropy\t{shown(pick['entropy'], 4)} nats" in text
    assert f"prob\t{shown(pick['prob'], 4)}" in text
    assert f"word\t{pick['word']}" in text
    assert f"category\t{pick['category']}" in text
    assert f"position\t{int(pick['position'])} of {len(rows)}" in text
    assert ("(high-entropy)" in text) == bool(pick["is_high_entropy"])
    alternatives = tip.locator("tr.alt-row").all_inner_texts()
    assert len(alternatives) == len(pick["topk_token_ids"])
    for line, tid, prob in zip(
        alternatives, pick["topk_token_ids"], pick["topk_probs"], strict=True
    ):
        name = tokenizer.decode([int(tid)], **DECODE_KWARGS)
        visible = name.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5")
        assert line.split("\t")[0] == (visible or "\u2205")
        assert line.split("\t")[1] == shown(prob, 3)
        assert ("sampled" in line) == (int(tid) == int(pick["token_id"]))
    page.mouse.move(1, 1)
    tip.wait_for(state="hidden")


def test_filters_and_step_selector(page, demo):
    tables, report = demo
    keys = [tuple(k) for k in report["runs"][0]["keys"]]
    visible = ".resp:not(.filtered)"
    # incorrect only: the cells whose response is graded incorrect
    page.select_option("#correct", "false")
    wrong = [
        (step, p, s)
        for step, (_, seqs) in tables.items()
        for p, s, ok in zip(
            seqs["prompt_index"], seqs["sample_index"], seqs["correct"], strict=True
        )
        if (p, s) in keys and not ok
    ]
    assert wrong, "the demo has incorrect responses"
    got = page.eval_on_selector_all(visible, "c => c.map(e => e.dataset.key)")
    assert sorted(got) == sorted(f"{st}:{p}:{s}" for st, p, s in wrong)
    page.select_option("#correct", "all")
    # one prompt: its rows only
    page.select_option("#prompt", "2")
    got = page.eval_on_selector_all(visible, "c => c.map(e => e.dataset.key)")
    assert got and all(k.split(":")[1] == "2" for k in got)
    assert len(got) == 2 * sum(1 for p, _ in keys if p == 2)
    page.select_option("#prompt", "all")
    # step 20 unchecked: only step 0's spans remain
    page.locator('#steps input[value="20"]').uncheck()
    frame = tables[0][0].select(["prompt_index", "sample_index"]).to_pandas()
    assert page.locator("#grid span.t").count() == int(frame.apply(tuple, axis=1).isin(keys).sum())
    page.locator('#steps input[value="20"]').check()


def test_page_says_what_it_left_out(page):
    notes = page.locator("#notes").inner_text()
    assert "4 of 6 responses" in notes and "responses_per_step = 4" in notes


# ------------------------------------------------------------------ data and escaping


def test_script_json_escapes_and_round_trips():
    nasty = {"t": ["</script><script>alert(1)</script>", "a & b", "<!--", "\u2028\u2029", "é"]}
    text = tr.script_json(nasty)
    assert not re.search(r"[<>&\u2028\u2029]", text)
    assert json.loads(text) == nasty


def test_render_html_has_no_unescaped_response_text(demo):
    _, report = demo
    page = tr.render_html(report)
    assert "<script>alert(1)</script>" not in page and "</span> closes" not in page
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing external
    blob = page.split('<script type="application/json" id="hed-data">')[1].split("</script>")[0]
    assert json.loads(blob) == json.loads(json.dumps(report))


def test_choose_keys_is_reproducible_and_shared_by_steps():
    keys = [(p, s) for p in range(10) for s in range(4)]
    first = tr.choose_keys(keys, 5, seed=3)
    assert first == tr.choose_keys(list(reversed(keys)), 5, seed=3)  # order of input: no effect
    order = np.random.default_rng(3).permutation(40)[:5]
    assert first == sorted(keys[i] for i in order)
    assert tr.choose_keys(keys, 5, seed=4) != first
    assert tr.choose_keys(keys[:3], 5, seed=3) == keys[:3]


def test_read_response_records_reads_only_the_chosen_rows(tmp_path, demo):
    tables, _ = demo
    records = tables[0][0]
    path = tmp_path / "step.parquet"
    pq.write_table(records, path, row_group_size=16)
    got = tr.read_response_records(ds.dataset(str(path)), [(0, 1), (2, 0)], max_tokens=7)
    frame = records.to_pandas()
    want = frame[
        (
            ((frame["prompt_index"] == 0) & (frame["sample_index"] == 1))
            | ((frame["prompt_index"] == 2) & (frame["sample_index"] == 0))
        )
        & (frame["position"] < 7)
    ]
    assert len(got) == 14
    pd.testing.assert_frame_equal(
        got.reset_index(drop=True), want[tr.RECORD_COLUMNS].reset_index(drop=True)
    )


def test_cut_responses_and_alternatives_without_a_tokenizer(demo):
    tables, _ = demo
    records, seqs = tables[0]
    step = tr.StepInput(run=RUN, role="single", step=0, sequences=seqs, records=records)
    report = tr.build_report(
        [step], tr.TokenReportOptions(responses_per_step=6, max_tokens_per_response=5)
    )
    run = report["runs"][0]
    assert [len(r["text"]) for r in run["responses"]["0"]] == [5] * len(RESPONSES)
    assert any("6 response(s) cut after 5 tokens" in n for n in report["notes"])
    assert any("no tokenizer found" in n for n in report["notes"])
    frame = records.to_pandas()
    shown = frame[frame["position"] < 5]
    for tid, text in zip(shown["token_id"], shown["token_text"], strict=True):
        assert run["vocab"][str(tid)] == text
    never_sampled = {int(i) for ids in shown["topk_token_ids"] for i in ids} - set(
        shown["token_id"]
    )
    assert never_sampled and all(run["vocab"][str(i)] == f"#{i}" for i in never_sampled)


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ([1], "must be a mapping"),
        (
            {"responses_per_stp": 3},
            "unknown parameter reporting.token_report.responses_per_stp: "
            "did you mean reporting.token_report.responses_per_step?",
        ),
        ({"responses_per_step": 0}, "responses_per_step must be a positive integer, got 0"),
        ({"max_tokens_per_response": "9"}, "max_tokens_per_response must be a positive integer"),
        ({"steps": ["20"]}, "steps must be a list of non-negative integer steps, or null"),
        ({"enabled": "false"}, "enabled must be true or false (unquoted)"),
        ({"seed": -1}, "seed must be a non-negative integer"),
    ],
)
def test_bad_options_are_one_line_errors(section, needle):
    with pytest.raises(ConfigError) as info:
        tr.token_report_options(section)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_steps_that_match_nothing_are_an_error(demo):
    tables, _ = demo
    records, seqs = tables[0]
    step = tr.StepInput(run=RUN, role="single", step=0, sequences=seqs, records=records)
    with pytest.raises(ConfigError, match=r"steps \[5\] matches no step .*available: \[0\]"):
        tr.build_report([step], tr.TokenReportOptions(steps=(5,)))


def test_notebook_view_keeps_the_page_intact(demo):
    import html

    _, report = demo
    page = tr.render_html(report)
    frame = tr.notebook_view(page, height=500)
    srcdoc = re.match(r'<iframe srcdoc="([^"]*)"', frame).group(1)
    assert html.unescape(srcdoc) == page


def test_entropy_scale_is_a_nice_ceiling(demo):
    tables, report = demo
    top = max(float(pc.max(t[0]["entropy"]).as_py()) for t in tables.values())
    assert report["scale"]["min"] == tr.ENTROPY_FLOOR
    assert top <= report["scale"]["max"] < 2.5 * top
    assert payload.nice_ceiling(0.672) == 1.0 and payload.nice_ceiling(1.2) == 2.0
    assert payload.nice_ceiling(3.1) == 5.0 and payload.nice_ceiling(10.0) == 10.0


def test_significant_digit_rounding_gives_short_exact_decimals():
    got = payload.significant([0.49600001, 1.23456e-5, 12345.6, 0.0, -0.0317549, 0.99996], 3)
    assert got == [0.496, 1.23e-05, 12300.0, 0.0, -0.0318, 1.0]
    assert json.dumps(got) == "[0.496, 1.23e-05, 12300.0, 0.0, -0.0318, 1.0]"


def test_the_page_files_are_package_data_inlined_verbatim(demo):
    """page.html/.css/.js and the helpers they share with the explorer (page_common.js/.css)
    ship with the package (pyproject package-data) and reach the page unchanged: the rendered
    file holds the CSS and the JavaScript byte for byte, the shared file in place of its
    marker line, once."""
    import tomllib
    from importlib import resources

    from ..conftest import REPO_ROOT

    names = ["page.html", "page.css", "page.js"]
    package_data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]
    package_data = package_data["setuptools"]["package-data"]
    assert package_data["hed.report.token_report"] == names
    assert package_data["hed.report"] == ["page_common.js", "page_common.css"]
    files, shared = resources.files("hed.report.token_report"), resources.files("hed.report")
    css, js = (files.joinpath(n).read_text(encoding="utf-8") for n in names[1:])
    common_css, common_js = (
        shared.joinpath(n).read_text(encoding="utf-8")
        for n in ("page_common.css", "page_common.js")
    )
    assert css.count("/* page_common.css */\n") == js.count("// page_common.js\n") == 1
    css = css.replace("/* page_common.css */\n", common_css)
    js = js.replace("// page_common.js\n", common_js)
    _, report = demo
    page = tr.render_html(report)
    assert f"<style>{css}</style>" in page and f"<script>{js}</script>" in page
    assert page.count("function colour(f)") == 1 and page.count("#tip .pbar") == 1
    head = files.joinpath("page.html").read_text(encoding="utf-8").split("<title>")[0]
    assert page.startswith(head) and "__CSS__" not in page and "__DATA__" not in page


def test_placeholders_in_the_title_stay_text_and_the_page_renders(demo, page, tmp_path):
    """render_html fills its template in one pass: a study titled with the template's own
    placeholders shows them as text; the page's JSON, CSS and script land only where they
    belong, and the page still draws in a browser."""
    _, report = demo
    title = "my __DATA__ study __TITLE__ __CSS__ __JS__ <b>"
    html = tr.render_html({**report, "title": title})
    shown = "my __DATA__ study __TITLE__ __CSS__ __JS__ &lt;b&gt;"
    assert f"<title>{shown}</title>" in html and f"<h1>{shown}</h1>" in html
    assert html.count('<script type="application/json" id="hed-data">') == 1
    assert html.count("<style>") == 1 and html.count("function colour(f)") == 1
    data = html.split('id="hed-data">')[1].split("</script>")[0]
    assert json.loads(data)["title"] == title
    path = tmp_path / "titled.html"
    path.write_text(html, encoding="utf-8")
    tab = page.context.new_page()  # a second tab of the demo page's browser
    errors = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    try:
        tab.goto(path.as_uri())
        tab.wait_for_function(READY, timeout=20_000)
        assert tab.title() == title and tab.locator("h1").inner_text() == title
        assert errors == [] and tab.locator("#grid span.t").count() > 0
    finally:
        tab.close()
