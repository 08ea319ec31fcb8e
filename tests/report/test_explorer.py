"""The study explorer (hed.report.explorer): data, escaping, and the page in a real browser.

The demo of the token report (tests/token_report_demo.py: real SmolLM2 token ids and texts,
HED's word rule and lexicon) with two more responses per step, one holding
``<img src=x onerror=...>`` and one the page's own placeholder ``__DATA__``, and an
``anthropomorphic_mass`` column, is opened from disk in Debian's headless ``chromium``
(Playwright, offline, fresh profile). What a reader sees is checked against values computed
here from the records, independently of the builder.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from playwright.sync_api import expect

from hed.analysis.advantage_shaping import AdvantageShapingParams
from hed.config.sections import check_unknown_keys
from hed.core.advantage_shaping import SCHEMES, group_token_advantages
from hed.errors import ConfigError
from hed.pipelines.reporting import create_pipeline
from hed.report import token_report as tr
from hed.report.explorer import (
    ExplorerOptions,
    build_explorer,
    explorer_options,
    render_explorer,
)

from ..browser import READY, open_page
from ..token_report_demo import RESPONSES, RUN, STEPS, demo_prompts, demo_step

IMG = 'Look: <img src=x onerror="window.__img=1;alert(2)"> so 3 + 4 = 7. The answer is 7.'
PLACEHOLDER = "I count 2, 3, 5, 7. Hmm, maybe __DATA__ or __JS__? The answer is 4."
DEMO = {**RESPONSES, (0, 2): IMG, (2, 2): PLACEHOLDER}
EPS = 1e-6
#: ``analyses.advantage_shaping`` of the demo page: every scheme, the papers' constants.
SHAPING = AdvantageShapingParams()
#: ``params:analyses`` of the node test: two schemes tabulated, so two in the tooltip.
ANALYSES = {"advantage_shaping": {"schemes": ["grpo", "gtpo"], "alpha": 0.5}}
#: ``params:aggregation`` of the node tests (its lexicon is compared with the records' mass).
LEXICON = {"lexicon": {"anthropomorphic": ["hmm"], "reasoning": ["so"]}}


def with_mass(records: pa.Table, step: int) -> pa.Table:
    rng = np.random.default_rng(100 + step)
    mass = rng.uniform(0, 0.2, records.num_rows).astype(np.float32)
    column = pa.array(mass)
    if "anthropomorphic_mass" in records.column_names:  # the records schema has the column
        index = records.column_names.index("anthropomorphic_mass")
        return records.set_column(index, "anthropomorphic_mass", column)
    return records.append_column("anthropomorphic_mass", column)


@pytest.fixture(scope="module")
def demo(tokenizer):
    """{step: (records, sequences)} and the explorer's data (every response embedded)."""
    tables = {}
    for step in STEPS:
        records, seqs = demo_step(tokenizer, step, responses=DEMO)
        tables[step] = (with_mass(records, step), seqs)
    steps = [
        tr.StepInput(RUN, "single", step, seqs, records, threshold=seqs.attrs["threshold"])
        for step, (records, seqs) in tables.items()
    ]
    data = build_explorer(
        steps,
        ExplorerOptions(responses_per_step=16),
        prompts=demo_prompts(),
        tokenizers={RUN: tokenizer},
        shaping=SHAPING,
    )
    return tables, data


@pytest.fixture(scope="module")
def page(demo, tmp_path_factory):
    _, data = demo
    root = tmp_path_factory.mktemp("explorer")
    path = root / "study_explorer.html"
    path.write_text(render_explorer(data), encoding="utf-8")
    with open_page(path, root / "profile") as tab:
        tab.path = path
        yield tab


def expected(tables, step: int) -> pd.DataFrame:
    """Per response of ``step``, computed here from the records: mean entropy, advantage
    (GRPO: (r − mean)/(unbiased std + ε) per prompt), and the Cov means Ā, mean log π."""
    records, seqs = tables[step]
    frame = records.to_pandas()
    body = frame[~frame["is_special"]]
    per = body.groupby(["prompt_index", "sample_index"]).agg(
        ent=("entropy", "mean"), n=("entropy", "size"), lp=("logprob", "sum")
    )
    seq = seqs.set_index(["prompt_index", "sample_index"])
    per["reward"] = seq["correct"].astype(float)
    group = per.groupby(level="prompt_index")["reward"]
    per["adv"] = (per["reward"] - group.transform("mean")) / (group.transform("std") + EPS)
    mean_a = (per["adv"] * per["n"]).sum() / per["n"].sum()
    mean_lp = per["lp"].sum() / per["n"].sum()
    per.attrs.update(mean_a=mean_a, mean_lp=mean_lp)
    return per


def keys_shown(tab) -> list[str]:
    return tab.eval_on_selector_all("#list .resp", "c => c.map(e => e.dataset.key)")


def reset(tab) -> None:
    tab.select_option("#mode", "list")
    tab.select_option("#step", "0")
    for sel in ("#prompt", "#sample", "#correct"):
        tab.select_option(sel, "all")
    tab.select_option("#sort", "order")
    tab.fill("#search", "")
    tab.wait_for_timeout(250)


def shown(value: float, decimals: int = 4, sig: int = 4) -> str:
    """The page's number: ``sig`` significant digits in the data, then ``decimals`` decimals,
    or JavaScript's ``toExponential(1)`` below 0.001."""
    value = float(f"{value:.{sig}g}")
    if value != 0 and abs(value) < 1e-3:
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{value:.1e}")
    return f"{value:.{decimals}f}"


# ------------------------------------------------------------------ in the browser


def test_loads_offline_and_is_not_blank(page, tmp_path):
    assert page.events["errors"] == [] and page.events["console"] == []
    assert page.events["requests"] == [page.path.as_uri()]
    shot = tmp_path / "shot.png"
    page.screenshot(path=str(shot))
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=float)
    assert pixels.std() > 20
    assert len({tuple(c) for c in pixels[::4, ::4].reshape(-1, 3).astype(int)}) > 200


def test_sorting_follows_the_records(page, demo):
    tables, _ = demo
    reset(page)
    want = expected(tables, 0)
    page.select_option("#sort", "ent")  # direction switches to high → low
    assert page.input_value("#dir") == "desc"
    order = sorted(want.index, key=lambda k: (-want.loc[k, "ent"], k))
    assert keys_shown(page) == [f"0:{p}:{s}" for p, s in order]
    page.select_option("#sort", "adv")
    page.select_option("#dir", "asc")
    order = sorted(want.index, key=lambda k: (round(want.loc[k, "adv"], 12), k))
    assert keys_shown(page) == [f"0:{p}:{s}" for p, s in order]
    assert want["adv"].nunique() == 3  # −1, 0, +1 (up to ε): the sort has something to do


def test_filters_show_the_right_count(page, demo):
    tables, _ = demo
    reset(page)
    seqs = tables[0][1]
    page.select_option("#correct", "false")
    wrong = int((seqs["correct"] == False).sum())  # noqa: E712
    assert wrong == 1
    assert page.get_attribute("#count", "data-n") == str(wrong)
    bad = seqs[seqs["correct"] == False]  # noqa: E712
    assert keys_shown(page) == [
        f"0:{p}:{s}" for p, s in zip(bad["prompt_index"], bad["sample_index"], strict=True)
    ]
    page.select_option("#correct", "all")
    page.fill("#search", "ANSWER IS")
    expect(page.locator("#count")).to_have_attribute("data-n", "6")  # after the 150 ms debounce
    assert int(seqs["response_text"].str.lower().str.contains("answer is").sum()) == 6
    page.fill("#search", "")
    page.select_option("#sample", "2")
    assert page.get_attribute("#count", "data-n") == "2"


def test_side_by_side_shows_one_prompt_at_two_steps(page, demo):
    tables, _ = demo
    reset(page)
    page.select_option("#mode", "compare")
    page.select_option("#prompt", "1")
    rows = page.eval_on_selector_all("#list .row", "r => r.map(e => e.dataset.key)")
    assert rows == ["1:0", "1:1"]
    for key in rows:
        cells = page.locator(f'#list .row[data-key="{key}"] .resp')
        assert cells.evaluate_all("c => c.map(e => e.dataset.key)") == [
            f"{step}:{key.replace(':', ':', 1)}" for step in STEPS
        ]
        p, s = map(int, key.split(":"))
        for j, step in enumerate(STEPS):
            body = cells.nth(j).locator(".body")
            body.scroll_into_view_if_needed()
            body.locator("span.t").first.wait_for()
            seqs = tables[step][1]
            text = seqs[(seqs["prompt_index"] == p) & (seqs["sample_index"] == s)].iloc[0]
            assert (
                body.evaluate(
                    "b => [...b.querySelectorAll('span.t')].map(x => x.textContent).join('')"
                )
                == text["response_text"]
            )
    # the two steps' entropies differ: each column draws its own step's records
    first = page.locator('#list .resp[data-key="0:1:0"] span.t').first.get_attribute("class")
    assert first is not None


def test_hovered_token_shows_the_records_values(page, demo, tokenizer):
    tables, _ = demo
    reset(page)
    step, key = 0, (2, 1)  # an incorrect response: A ≠ 0, so its Cov terms are not all 0
    want = expected(tables, step)
    records = tables[step][0].to_pandas()
    rows = records[(records["prompt_index"] == key[0]) & (records["sample_index"] == key[1])]
    rows = rows.reset_index(drop=True)
    pick = rows[(rows["word"] != "") & ~rows["is_special"]].sort_values("entropy").iloc[-1]
    body = page.locator(f'#list .resp[data-key="{step}:{key[0]}:{key[1]}"] .body')
    body.scroll_into_view_if_needed()
    span = body.locator("span.t").nth(int(pick["position"]))
    assert span.text_content() == pick["token_text"]
    span.hover()
    tip = page.locator("#tip")
    tip.wait_for(state="visible")
    values = dict(
        page.eval_on_selector_all(
            "#tip tr[data-k]", "r => r.map(e => [e.dataset.k, e.querySelector('.v').textContent])"
        )
    )
    adv = want.loc[key, "adv"]
    cov = (adv - want.attrs["mean_a"]) * (float(pick["logprob"]) - want.attrs["mean_lp"])
    assert values["entropy"] == f"{shown(pick['entropy'])} nats"
    assert values["high-entropy"].startswith(
        ("yes" if pick["is_high_entropy"] else "no") + f" at step {step}"
    )
    assert values["log p"] == shown(pick["logprob"])
    assert values["prob"] == shown(pick["prob"])
    assert values["word"] == pick["word"] and values["category"] == pick["category"]
    assert values["position"] == f"{int(pick['position'])} of {len(rows)}"
    assert values["advantage"] == shown(adv, sig=4)
    assert abs(adv) > 0.5
    assert values["Cov term"] == shown(cov)
    assert values["anthropomorphic mass"] == shown(pick["anthropomorphic_mass"])
    alternatives = tip.locator("tr.alt-row").all_inner_texts()
    assert len(alternatives) == len(pick["topk_token_ids"])
    for line, tid, prob in zip(
        alternatives, pick["topk_token_ids"], pick["topk_probs"], strict=True
    ):
        assert line.split("\t")[1] == shown(prob, sig=3)
        assert ("sampled" in line) == (int(tid) == int(pick["token_id"]))
    page.mouse.move(1, 1)
    tip.wait_for(state="hidden")


def scheme_values(tables, step: int) -> dict[tuple[int, int], list[np.ndarray]]:
    """Per graded response of ``step``, computed here from the records: each scheme's
    advantages over its non-special tokens (group = the prompt's responses, τ_ρ the step's)."""
    records, seqs = tables[step]
    body = (
        records.to_pandas()
        .query("~is_special")
        .sort_values(["prompt_index", "sample_index", "position"])
    )
    out = {}
    for prompt, group in seqs.groupby("prompt_index"):
        samples = group["sample_index"].tolist()
        entropies = [
            body[(body["prompt_index"] == prompt) & (body["sample_index"] == s)][
                "entropy"
            ].to_numpy(np.float64)
            for s in samples
        ]
        rewards = group["correct"].astype(float).to_numpy()
        per = [
            group_token_advantages(entropies, rewards, scheme, tau=seqs.attrs["threshold"])
            for scheme in SCHEMES
        ]
        for j, s in enumerate(samples):
            out[(int(prompt), int(s))] = [values[j] for values in per]
    return out


def test_hovered_token_shows_its_advantage_under_each_scheme(page, demo):
    tables, data = demo
    reset(page)
    step, key = 0, (2, 1)  # an incorrect response of a mixed group: A ≠ 0
    records = tables[step][0].to_pandas()
    rows = records[(records["prompt_index"] == key[0]) & (records["sample_index"] == key[1])]
    rows = rows.sort_values("position").reset_index(drop=True)
    pick = rows[~rows["is_special"]].sort_values("entropy").iloc[-1]
    t = int((~rows["is_special"]).iloc[: int(pick["position"])].sum())  # its non-special rank
    want = scheme_values(tables, step)[key]
    labels = data["index"]["shaping"]["labels"]
    assert labels == ["grpo", "Dr. GRPO", "80/20", "entropy-adv", "GTPO", "GRPO-S"]
    parts = []
    for label, values in zip(labels, want, strict=True):
        v = float(f"{values[t]:.3g}")
        parts.append(f"{label}\u00a0{'+' if v > 0 else ''}{v:g}")  # wraps at the dots only
    body = page.locator(f'#list .resp[data-key="{step}:{key[0]}:{key[1]}"] .body')
    body.scroll_into_view_if_needed()
    body.locator("span.t").nth(int(pick["position"])).hover()
    row = page.locator('#tip tr[data-k="A by scheme"] .v')
    row.wait_for(state="visible")
    assert row.text_content() == " \u00b7 ".join(parts)
    # the high-entropy token keeps its A under the 80/20 mask; GTPO differs from GRPO there
    value = {p.split("\u00a0")[0]: p.split("\u00a0")[1] for p in parts}
    assert pick["is_high_entropy"] and value["80/20"] == value["grpo"] != "0"
    assert value["GTPO"] != value["grpo"]
    page.mouse.move(1, 1)
    page.locator("#tip").wait_for(state="hidden")


def test_keyboard_moves_between_tokens(page, demo):
    tables, _ = demo
    reset(page)
    records = tables[0][0].to_pandas()
    rows = records[(records["prompt_index"] == 0) & (records["sample_index"] == 0)]
    body = page.locator('#list .resp[data-key="0:0:0"] .body')
    body.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert "position\t2 of" in page.locator("#tip").inner_text()
    page.keyboard.press("h")
    high = rows["position"][rows["is_high_entropy"].to_numpy() & (rows["position"] > 2)].min()
    assert f"position\t{int(high)} of" in page.locator("#tip").inner_text()
    assert "high-entropy\tyes at step 0" in page.locator("#tip").inner_text()


def test_figure2_row_jumps_to_its_step(page, demo):
    tables, _ = demo
    reset(page)
    row = page.locator('#fig2 tr.f2[data-step="20"]')
    row.focus()
    page.keyboard.press("Enter")
    assert page.input_value("#step") == "20" and page.input_value("#mode") == "list"
    keys = keys_shown(page)
    assert keys and all(k.startswith("20:") for k in keys) and len(keys) == len(tables[20][1])
    assert page.eval_on_selector_all("#fig2 tr.current", "r => r.map(e => e.dataset.step)") == [
        "20"
    ]
    # the row's numbers are the step's: anthropomorphic high-entropy tokens of the records
    frame = tables[20][0].to_pandas()
    anthro = int((frame["is_high_entropy"] & (frame["category"] == "anthropomorphic")).sum())
    assert row.locator("td").nth(2).inner_text().strip() == str(anthro)
    page.locator('#fig2 tr.f2[data-step="0"]').click()
    assert all(k.startswith("0:") for k in keys_shown(page))


def test_script_and_img_in_responses_show_as_text_and_run_nothing(page):
    reset(page)
    for key, needle in (
        ("0:1:0", "<script>alert(1)</script>"),
        ("0:0:2", IMG),
        ("0:2:2", PLACEHOLDER),
    ):
        body = page.locator(f'#list .resp[data-key="{key}"] .body')
        body.scroll_into_view_if_needed()
        body.locator("span.t").first.wait_for()
        assert needle in body.inner_text()
    assert page.events["dialogs"] == []
    assert page.evaluate("window.__img") is None and page.evaluate("window.__pwned") is None
    assert page.locator("#list img, #list script, #list b").count() == 0
    assert page.locator("script").count() == 2 + len(STEPS)  # data, one block per step, code


def test_no_request_leaves_the_page(page):
    """After every test above (sorting, filters, compare, hover, keys, jumps): only the file
    itself was requested; and the page's Content-Security-Policy refuses what a script would
    fetch (a violation each, reported by the browser)."""
    assert page.events["requests"] == [page.path.as_uri()]
    blocked = page.evaluate(
        """async () => { const seen = [];
        document.addEventListener('securitypolicyviolation',
          (e) => seen.push(e.effectiveDirective + ' ' + e.blockedURI));
        try { await fetch('https://example.org/x'); } catch (e) { }
        const img = new Image(); img.src = 'https://example.org/p.png';
        document.body.appendChild(img);
        await new Promise(r => setTimeout(r, 300)); img.remove(); return seen.sort(); }"""
    )
    assert blocked == ["connect-src https://example.org/x", "img-src https://example.org/p.png"]


LONG_PROMPT = (
    "Let $x_1, x_2, \\ldots, x_{100}$ be real numbers such that the sum of every ten "
    "consecutive terms is at most one and "
    + "x" * 120  # a long unbroken run, as LaTeX often has
    + " holds for every index; find the largest possible value of the sum of all terms. " * 3
)


@pytest.mark.parametrize("mode", ["list", "compare"])
def test_cards_fit_a_1280_px_window(page, demo, tokenizer, tmp_path, mode):
    """At 1,280 px (a laptop) no response card is wider than the window or than itself:
    a long prompt and the full stats line (every measure, a long answer) stay inside."""
    tables, _ = demo
    steps = [
        tr.StepInput(RUN, "single", step, seqs, records, threshold=seqs.attrs["threshold"])
        for step, (records, seqs) in tables.items()
    ]
    prompts = demo_prompts().assign(prompt=LONG_PROMPT, answer="\\frac{" + "9" * 60 + "}{7}")
    data = build_explorer(
        steps, ExplorerOptions(responses_per_step=16), prompts=prompts, tokenizers={RUN: tokenizer}
    )
    path = tmp_path / "study_explorer.html"
    path.write_text(render_explorer(data), encoding="utf-8")
    tab = page.context.new_page()  # the browser of `page` (one Playwright per process)
    try:
        tab.set_viewport_size({"width": 1280, "height": 800})
        tab.goto(path.as_uri())
        tab.wait_for_function(READY, timeout=20_000)
        tab.select_option("#mode", mode)
        tab.wait_for_timeout(250)
        boxes = tab.eval_on_selector_all(
            "#list .resp",
            """cards => cards.map(c => { const r = c.getBoundingClientRect();
              const head = c.querySelector('.resphead');
              const last = head.lastElementChild.getBoundingClientRect();
              const box = c.closest('.cells') || c;
              return {right: r.right, scroll: box.scrollWidth, client: box.clientWidth,
                      headScroll: head.scrollWidth, headClient: head.clientWidth,
                      lastRight: last.right, headRight: head.getBoundingClientRect().right,
                      stats: head.children.length}; })""",
        )
        width = tab.evaluate("document.documentElement.clientWidth")
        page_scroll = tab.evaluate("document.documentElement.scrollWidth")
    finally:
        tab.close()
    assert len(boxes) >= 4 and width <= 1280
    assert page_scroll <= width  # no horizontal scrollbar on the page
    for box in boxes:
        assert box["stats"] >= 9  # key, verdict, reward, A, tokens, mean H, ...
        assert box["headScroll"] <= box["headClient"] and box["lastRight"] <= box["headRight"]
        if mode == "list":
            assert box["right"] <= width and box["scroll"] <= box["client"]


# ------------------------------------------------------------------ data and escaping


def test_render_escapes_every_block(demo):
    _, data = demo
    html = render_explorer(data)
    assert "<script>alert" not in html and "<img" not in html
    assert html.count("<script") == html.count("</script>") == 2 + len(STEPS)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    for i, blk in enumerate(data["blocks"]):
        start = f'<script type="application/json" id="hed-block-{i}">'
        text = html.split(start)[1].split("</script>")[0]
        assert json.loads(text) == json.loads(json.dumps(blk))
    texts = ["".join(r["text"]) for b in data["blocks"] for r in b["responses"]]
    # a response's "__DATA__" is never replaced by the page's data
    assert sum(t.startswith(PLACEHOLDER) for t in texts) == len(STEPS)


def test_embedded_advantages_are_the_schemes_values(demo):
    """Each embedded response's ``A`` equals group_token_advantages over its prompt's whole
    group, rounded to 3 significant digits: one number where a scheme is constant over the
    response, else one per token (None on special tokens)."""
    tables, data = demo
    n_per_token = 0
    for blk in data["blocks"]:
        want = scheme_values(tables, blk["step"])
        for r in blk["responses"]:
            per_scheme = want[(r["p"], r["s"])]
            assert len(r["A"]) == len(SCHEMES)
            for scheme, got, values in zip(SCHEMES, r["A"], per_scheme, strict=True):
                rounded = [float(f"{v:.3g}") for v in values]
                if not isinstance(got, list):
                    assert set(rounded) == {got} and np.ptp(values) == 0, scheme
                    continue
                n_per_token += 1
                assert scheme in ("top_rho_mask", "entropy_advantage", "gtpo")
                rank = np.cumsum(~np.asarray(r["sp"], dtype=bool)) - 1
                assert got == [
                    None if sp else rounded[k] for sp, k in zip(r["sp"], rank, strict=True)
                ]
            # grpo's one number is the card's advantage (same estimator; that one has 4 digits)
            assert r["A"][0] == pytest.approx(r["adv"], rel=5e-3)
    assert n_per_token > 0


def test_advantages_cost_little_and_only_when_asked(demo):
    """The advantages add at most 12 bytes per embedded token (6 on this demo; a study's page
    holds ~92 per token, docs/explorer.md) and at most a quarter of the page; with
    analyses.advantage_shaping null or disabled the page is the same as before, with no ``A``."""
    tables, _ = demo
    steps = [
        tr.StepInput(RUN, "single", s, seqs, records, threshold=seqs.attrs["threshold"])
        for s, (records, seqs) in tables.items()
    ]
    options = ExplorerOptions(responses_per_step=16)
    plain = render_explorer(build_explorer(steps, options, prompts=demo_prompts()))
    off = build_explorer(
        steps, options, prompts=demo_prompts(), shaping=AdvantageShapingParams(enabled=False)
    )
    assert render_explorer(off) == plain and '"A":' not in plain
    on = build_explorer(steps, options, prompts=demo_prompts(), shaping=SHAPING)
    n_tokens = sum(len(r["text"]) for blk in on["blocks"] for r in blk["responses"])
    added = len(render_explorer(on).encode()) - len(plain.encode())
    assert 0 < added <= 12 * n_tokens and added <= 0.25 * len(plain.encode())


def test_embedding_is_bounded_and_said(demo):
    tables, _ = demo
    steps = [
        tr.StepInput(RUN, "single", step, seqs, records) for step, (records, seqs) in tables.items()
    ]
    data = build_explorer(
        steps, ExplorerOptions(responses_per_step=3, max_tokens_per_response=4, seed=5)
    )
    keys = tr.choose_keys([(p, s) for p, s in DEMO], 3, seed=5)
    for blk in data["blocks"]:
        assert [(r["p"], r["s"]) for r in blk["responses"]] == keys
        assert all(len(r["text"]) == 4 for r in blk["responses"])
        # the measures cover the whole response, not the 4 embedded tokens
        assert all(r["m"]["len"] == r["n_tokens"] > 4 for r in blk["responses"])
    notes = " ".join(data["index"]["notes"])
    assert "3 of 8 responses" in notes and "responses_per_step = 3, seed 5" in notes
    assert "cut after 4 tokens" in notes
    assert "['reasoning_mass', 'delta_logprob']" in notes
    assert [s["n_responses"] for s in data["index"]["runs"][0]["steps"]] == [8, 8]


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ([1], "reporting.explorer must be a mapping"),
        (
            {"responses_per_stp": 3},
            "unknown parameter reporting.explorer.responses_per_stp: "
            "did you mean reporting.explorer.responses_per_step?",
        ),
        ({"responses_per_step": 0}, "responses_per_step must be a positive integer, got 0"),
        ({"steps": ["20"]}, "steps must be a list of non-negative integer steps"),
        ({"estimator": "ppo"}, "estimator must be one of grpo, dr_grpo, got 'ppo'"),
        ({"enabled": "false"}, "enabled must be true or false (unquoted)"),
        ({"seed": -1}, "seed must be a non-negative integer"),
    ],
)
def test_bad_options_are_one_line_errors(section, needle):
    with pytest.raises(ConfigError) as info:
        explorer_options(section)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_parameter_schema_refuses_unknown_explorer_keys():
    check_unknown_keys({"reporting": {"explorer": {"responses_per_step": 4, "seed": 1}}})
    with pytest.raises(
        ConfigError,
        match=r"unknown parameter reporting\.explorer\.sed: did you "
        r"mean reporting\.explorer\.seed\?",
    ):
        check_unknown_keys({"reporting": {"explorer": {"sed": 1}}})
    assert explorer_options(None) == ExplorerOptions()


def test_steps_that_match_nothing_are_an_error(demo):
    tables, _ = demo
    records, seqs = tables[0]
    with pytest.raises(ConfigError, match=r"explorer.steps \[5\] matches no step .*\[0\]"):
        build_explorer([tr.StepInput(RUN, "single", 0, seqs, records)], ExplorerOptions(steps=(5,)))


def test_node_is_in_the_reporting_pipeline_when_configured():
    runs = {RUN: {"role": "single", "checkpoint_root": "/ckpt/demo", "steps": list(STEPS)}}
    on = create_pipeline(params={"runs": runs, "reporting": {"explorer": {}}})
    node = {n.name: n for n in on.nodes}["build_study_explorer"]
    assert node.outputs == ["study_explorer_html"]
    assert node.inputs[:7] == [
        "params:reporting",
        "params:aggregation",
        "params:analyses",
        "checkpoints",
        "entropy_thresholds",
        "prompts",
        "figure2_single_run_diagnostic",
    ]
    assert node.inputs[7:] == [
        f"{RUN}.step_{s}.{name}" for s in STEPS for name in ("sequences", "token_records")
    ]
    off = create_pipeline(params={"runs": runs, "reporting": {"explorer": {"enabled": False}}})
    assert "build_study_explorer" not in {n.name for n in off.nodes}


def test_mass_of_another_lexicon_is_left_out_of_the_page(demo, caplog):
    """Records whose mass columns were summed over another lexicon (their ``hed.word_mass``
    digest) show no anthropomorphic mass, with one warning per step naming the refresh."""
    from hed.core.lexicon import parse_lexicon
    from hed.pipelines.reporting.explorer_nodes import build_study_explorer
    from hed.records.shard_checks import mass_metadata
    from hed.records.shard_metadata import lexicon_sha256

    tables, _ = demo
    thresholds = pd.DataFrame(
        [{"run": RUN, "step": s, "top_entropy_frac": 0.2, "threshold": q.attrs["threshold"]}
         for s, (_, q) in tables.items()]
    )  # fmt: skip
    figure2 = pd.DataFrame({"run": [RUN], "role": ["single"], "step": [STEPS[0]]})

    def measures(digest: str) -> list[str]:
        step_tables = [
            t
            for s in STEPS
            for t in (tables[s][1], tables[s][0].replace_schema_metadata(mass_metadata(digest)))
        ]
        page = build_study_explorer(
            {"explorer": {"responses_per_step": 2}},
            LEXICON,
            {},
            {},
            thresholds,
            demo_prompts(),
            figure2,
            *step_tables,
            run_steps=[(RUN, "single", s) for s in STEPS],
        )
        blob = page.split('<script type="application/json" id="hed-data">')[1].split("</script>")
        return json.loads(blob[0])["measures"]

    current = lexicon_sha256(parse_lexicon(LEXICON["lexicon"]))
    assert "amass" in measures(current)
    caplog.clear()
    assert "amass" not in measures("0" * 64)
    warned = [r.getMessage() for r in caplog.records if "another lexicon" in r.getMessage()]
    assert len(warned) == len(STEPS) and "`kedro hed refresh-mass`" in warned[0]


def test_node_builds_the_page_from_the_catalog_inputs(demo):
    """``build_study_explorer`` with its catalog inputs: thresholds per step, the Figure 2
    table's rows (pass@1 of the figure source, not recomputed), the options of
    ``params:reporting``, every step's tables."""
    from hed.pipelines.reporting.explorer_nodes import build_study_explorer

    tables, _ = demo
    thresholds = pd.DataFrame(
        [
            {"run": RUN, "step": s, "top_entropy_frac": 0.2, "threshold": seqs.attrs["threshold"]}
            for s, (_, seqs) in tables.items()
        ]
    )
    figure2 = pd.DataFrame(
        {
            "run": [RUN, RUN],
            "role": ["single", "single"],
            "step": list(STEPS),
            "n_high_entropy": [11, 12],
            "anthropomorphic_count": [3, 4],
            "pass1": [0.25, 0.75],
            "pass1_source": ["csv", "csv"],
        }
    )
    page = build_study_explorer(
        {"explorer": {"responses_per_step": 2, "seed": 1, "estimator": "dr_grpo"}},
        LEXICON,
        ANALYSES,
        {},
        thresholds,
        demo_prompts(),
        figure2,
        *[t for s in STEPS for t in (tables[s][1], tables[s][0])],
        run_steps=[(RUN, "single", s) for s in STEPS],
    )
    blob = page.split('<script type="application/json" id="hed-data">')[1].split("</script>")[0]
    index = json.loads(blob)
    (run,) = index["runs"]
    assert [s["threshold"] for s in run["steps"]] == [
        float(f"{t:.4g}") for t in thresholds["threshold"]
    ]
    assert [(r["step"], r["anthro"], r["pass1"]) for r in run["fig2"]] == [
        (0, 3, 0.25),
        (20, 4, 0.75),
    ]
    assert index["options"]["estimator"] == "dr_grpo"
    assert index["shaping"] == {"schemes": ["grpo", "gtpo"], "labels": ["grpo", "GTPO"]}
    assert run["keys"] == [list(k) for k in tr.choose_keys(DEMO, 2, seed=1)]
    assert page.count('<script type="application/json" id="hed-block-') == len(STEPS)
    # the pre-run check hands the node a ReportingParams (explorer parsed once): the same page
    from hed.config.analysis_params import AnalysesParams
    from hed.config.params import ReportingParams

    parsed = ReportingParams.of(
        {"explorer": {"responses_per_step": 2, "seed": 1, "estimator": "dr_grpo"}}
    )
    assert parsed.explorer == ExplorerOptions(responses_per_step=2, seed=1, estimator="dr_grpo")
    assert page == build_study_explorer(
        parsed,
        LEXICON,
        AnalysesParams.of(ANALYSES),
        {},
        thresholds,
        demo_prompts(),
        figure2,
        *[t for s in STEPS for t in (tables[s][1], tables[s][0])],
        run_steps=[(RUN, "single", s) for s in STEPS],
    )
