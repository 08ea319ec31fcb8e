"use strict";
(function () {
const t0 = performance.now();
const IDX = JSON.parse(document.getElementById("hed-data").textContent);
const SCALE = IDX.scale;
const MEASURE_NAMES = {amass: "anthropomorphic mass", rmass: "reasoning mass",
  dlp: "|\u0394log p|"};
// page_common.js

// ---------------------------------------------------------------- data, parsed on demand
const parsed = new Map();
function block(n) {
  if (!parsed.has(n)) {
    const b = JSON.parse($("hed-block-" + n).textContent);
    b.responses.forEach((r) => { r._lc = null; });
    parsed.set(n, b);
  }
  return parsed.get(n);
}
function lower(r) { if (r._lc === null) r._lc = r.text.join("").toLowerCase(); return r._lc; }

const SORTS = [["order", "prompt, sample"], ["correct", "correctness"], ["reward", "reward"],
  ["adv", "advantage (" + IDX.options.estimator + ")"], ["len", "length (tokens)"],
  ["ent", "mean entropy"], ["nhe", "high-entropy tokens"],
  ["anthro", "anthropomorphic high-entropy tokens"], ["cov", "mean Cov(log \u03C0, A) term"]]
  .concat(IDX.measures.map((m) => [m, "mean " + MEASURE_NAMES[m]]));
function value(r, key) {
  if (key === "order") return r.p * 65536 + r.s;
  if (key === "correct") return r.correct === null ? null : (r.correct ? 1 : 0);
  if (key === "reward" || key === "adv") return r[key];
  const v = r.m[key];
  return v === undefined ? null : v;
}
function comparer(key, desc) {
  return (a, b) => {
    const x = value(a, key), y = value(b, key);
    if (x === null && y !== null) return 1;
    if (y === null && x !== null) return -1;
    if (x !== y && x !== null) return desc ? y - x : x - y;
    return a.p - b.p || a.s - b.s;
  };
}

// ---------------------------------------------------------------- controls
const runSel = $("run"), modeSel = $("mode"), stepSel = $("step"), promptSel = $("prompt"),
  sampleSel = $("sample"), correctSel = $("correct"), sortSel = $("sort"), dirSel = $("dir"),
  search = $("search"), list = $("list"), tip = $("tip"), count = $("count");
function option(sel, v, label) { const o = el("option", null, label); o.value = String(v);
  sel.appendChild(o); return o; }
IDX.runs.forEach((r, i) => option(runSel, i, r.run + " (" + r.role + ")"));
SORTS.forEach(([k, label]) => option(sortSel, k, label));
function run() { return IDX.runs[Number(runSel.value) || 0]; }
function stepRow(step) { return run().steps.find((s) => s.step === Number(step)); }

function pass(r) {
  if (promptSel.value !== "all" && Number(promptSel.value) !== r.p) return false;
  if (sampleSel.value !== "all" && Number(sampleSel.value) !== r.s) return false;
  if (correctSel.value !== "all" && String(r.correct) !== correctSel.value) return false;
  const q = search.value.trim().toLowerCase();
  return !q || lower(r).indexOf(q) >= 0;
}

function selectRun() {
  const r = run();
  stepSel.textContent = "";
  r.steps.forEach((s) => option(stepSel, s.step, "step " + s.step + " \u00B7 " + s.n_shown +
    " of " + s.n_responses + " embedded \u00B7 " + s.n_correct + "/" + s.n_graded + " correct"));
  const cmp = $("cmp"); cmp.textContent = "";
  const steps = r.steps.map((s) => s.step);
  const pick = steps.length <= 2 ? steps : [steps[0], steps[steps.length - 1]];
  steps.forEach((s) => {
    const lab = el("label"), cb = el("input");
    cb.type = "checkbox"; cb.value = String(s); cb.checked = pick.includes(s);
    cb.addEventListener("change", draw);
    lab.append(cb, document.createTextNode(" " + s)); cmp.appendChild(lab);
  });
  promptSel.textContent = ""; sampleSel.textContent = "";
  option(promptSel, "all", "all");
  Object.keys(r.prompts).map(Number).sort((a, b) => a - b).forEach((p) =>
    option(promptSel, p, "#" + p + "  " + (r.prompts[p].text || r.prompts[p].id).slice(0, 50)));
  option(sampleSel, "all", "all");
  [...new Set(r.keys.map((k) => k[1]))].sort((a, b) => a - b).forEach((s) =>
    option(sampleSel, s, String(s)));
  $("summary").textContent = "run " + r.run + " (" + r.role + ") \u00B7 " + r.steps.length +
    " step(s) \u00B7 the same " + r.keys.length + " (prompt, sample) responses embedded at " +
    "every step (seed " + IDX.options.seed + "), up to " + IDX.options.max_tokens_per_response +
    " tokens each \u00B7 advantage: " + IDX.options.estimator;
  figure2();
  draw();
}

function figure2() {
  const box = $("fig2"), r = run(); box.textContent = "";
  box.appendChild(el("h2", null, "Figure 2 \u00B7 " + r.run));
  box.appendChild(el("div", null, "anthropomorphic high-entropy tokens and pass@1 per step; " +
    "choose a row to see that step's responses"));
  const t = el("table"), head = el("tr");
  ["step", "high-ent.", "anthropomorphic", "pass@1"].forEach((h) => head.appendChild(el("th",
    null, h)));
  t.appendChild(head);
  const top = Math.max(1, ...r.fig2.map((x) => x.anthro || 0));
  r.fig2.forEach((row) => {
    const tr = el("tr", "f2"), embedded = stepRow(row.step) !== undefined;
    tr.dataset.step = String(row.step);
    const bar = el("div", "abar"); bar.style.width = (100 * (row.anthro || 0) / top) + "%";
    const cell = el("td"); cell.append(bar, el("span", null, row.anthro));
    tr.append(el("td", null, row.step), el("td", null, row.n_high_entropy), cell,
      el("td", null, row.pass1 === null ? "\u2013" : fmt(row.pass1, 3)));
    if (embedded) {
      tr.tabIndex = 0;
      tr.setAttribute("role", "button");
      tr.setAttribute("aria-label", "show the responses of step " + row.step);
      tr.addEventListener("click", () => jump(row.step));
      tr.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); jump(row.step); }
      });
    } else {
      tr.classList.add("absent");
      tr.title = "no responses of this step are embedded";
    }
    t.appendChild(tr);
  });
  box.appendChild(t);
}
function jump(step) {
  modeSel.value = "list"; stepSel.value = String(step);
  draw();
  $("view").focus({preventScroll: true});
  window.scrollTo(0, 0);
}
function markFig2() {
  document.querySelectorAll("#fig2 tr.f2").forEach((tr) => tr.classList.toggle("current",
    modeSel.value === "list" && tr.dataset.step === stepSel.value));
}

// ---------------------------------------------------------------- lazy token bodies
const observer = new IntersectionObserver((entries) => {
  entries.forEach((e) => { if (e.isIntersecting) fill(e.target); else empty(e.target); });
}, {rootMargin: "600px 0px"});
function fill(body) {
  if (body._filled) return;
  const r = body._r, frag = document.createDocumentFragment();
  for (let i = 0; i < r.text.length; i++) {
    const txt = r.text[i], sp = document.createElement("span");
    let cls = "t c" + bin(r.ent[i]);
    if (r.he[i]) cls += " he";
    if (r.cat[i] === 1) cls += " a"; else if (r.cat[i] === 2) cls += " r";
    if (r.sp[i]) cls += " sp";
    if (txt === "") cls += " empty"; else if (txt.indexOf("\n") >= 0) cls += " nl";
    sp.className = cls; sp.textContent = txt; sp._i = i;
    frag.appendChild(sp);
  }
  if (r.n_tokens > r.text.length) frag.appendChild(el("div", "more", "\u2026 " +
    (r.n_tokens - r.text.length) + " more tokens not embedded"));
  body.textContent = ""; body.appendChild(frag);
  body.classList.remove("pending"); body.style.minHeight = "";
  body._filled = true;
}
function empty(body) {
  if (!body._filled || document.activeElement === body) return;
  body.style.minHeight = body.offsetHeight + "px";
  body.textContent = "tokens drawn when on screen";
  body.classList.add("pending"); body._filled = false;
}

function card(st, r) {
  const c = el("section", "resp");
  c.dataset.key = st.step + ":" + r.p + ":" + r.s;
  c.dataset.correct = String(r.correct);
  const head = el("div", "resphead"), v = verdict(r.correct);
  head.append(el("span", "key", "step " + st.step + " \u00B7 prompt " + r.p + " \u00B7 sample " +
    r.s), el("span", v[1], v[0]));
  const m = r.m, bits = [["reward", r.reward === null ? null : fmt(r.reward, 0)],
    ["A", r.adv === null ? null : fmt(r.adv, 3)], ["tokens", m.len],
    ["mean H", fmt(m.ent, 3)], ["high-ent.", m.nhe], ["anthrop.", m.anthro],
    ["cov", m.cov === null ? null : fmt(m.cov, 4)]];
  IDX.measures.forEach((k) => bits.push([MEASURE_NAMES[k], fmt(m[k], 4)]));
  if (r.answer !== null) bits.push(["answer", r.answer]);
  bits.forEach(([k, x]) => { if (x !== null) { const s = el("span", "m", k + " " + x);
    s.dataset.m = k; head.appendChild(s); } });
  c.appendChild(head);
  const body = el("div", "body pending", "tokens drawn when on screen");
  body.tabIndex = 0;
  body.setAttribute("aria-label", "response of prompt " + r.p + ", sample " + r.s + " at step " +
    st.step + ": arrow keys move between tokens, h to the next high-entropy token");
  body.style.minHeight = Math.min(420, 30 + 26 * Math.ceil(r.text.length / 14)) + "px";
  body._r = r; body._st = st;
  c.appendChild(body);
  observer.observe(body);
  return c;
}
function promptLine(p) {
  const pr = run().prompts[String(p)] || {id: "", text: ""};
  const d = el("div", "prompt", "prompt " + p + ": " + (pr.text || pr.id));
  d.title = pr.text;
  return d;
}

function draw() {
  observer.disconnect();
  list.textContent = ""; tip.hidden = true;
  const compare = modeSel.value === "compare";
  $("cmp").classList.toggle("hidden", !compare);
  $("step-label").classList.toggle("hidden", compare);
  markFig2();
  const cmp = comparer(sortSel.value, dirSel.value === "desc");
  if (!compare) {
    const st = stepRow(stepSel.value), all = block(st.block).responses;
    const rs = all.filter(pass).sort(cmp);
    count.dataset.n = String(rs.length);
    count.textContent = rs.length + " of " + all.length + " embedded responses of step " +
      st.step + " match (" + st.n_responses + " responses in the step)";
    rs.forEach((r) => { const c = card(st, r); c.insertBefore(promptLine(r.p), c.children[1]);
      list.appendChild(c); });
  } else {
    const steps = [...$("cmp").querySelectorAll("input:checked")].map((c) => stepRow(c.value));
    const maps = steps.map((st) => new Map(block(st.block).responses.map((r) =>
      [r.p + ":" + r.s, r])));
    let rows = run().keys.map(([p, s]) => maps.map((m) => m.get(p + ":" + s) || null))
      .filter((rs) => rs.some((r) => r !== null && pass(r)));
    const first = (rs) => rs.find((r) => r !== null);
    rows = rows.sort((a, b) => cmp(first(a), first(b)));
    count.dataset.n = String(rows.length);
    count.textContent = rows.length + " (prompt, sample) row(s) \u00D7 " + steps.length +
      " step(s): " + steps.map((s) => s.step).join(", ");
    rows.forEach((rs) => {
      const r0 = first(rs), row = el("article", "row"), head = el("div", "rowhead");
      row.dataset.key = r0.p + ":" + r0.s;
      head.append(el("b", null, "prompt " + r0.p + " \u00B7 sample " + r0.s + "  "),
        promptLine(r0.p));
      const cells = el("div", "cells");
      rs.forEach((r, j) => {
        if (r === null) { const c = el("section", "resp"); c.appendChild(el("div", "resphead",
          "step " + steps[j].step + ": no such response")); cells.appendChild(c); return; }
        const c = card(steps[j], r);
        if (!pass(r)) c.classList.add("nomatch");
        cells.appendChild(c);
      });
      row.append(head, cells); list.appendChild(row);
    });
    if (!steps.length) list.appendChild(el("div", "none", "Tick the steps to compare."));
  }
  if (!list.children.length) list.appendChild(el("div", "none", "No response matches."));
}

// ---------------------------------------------------------------- the token tooltip
function tipRow(t, k, v) { const tr = el("tr"); tr.dataset.k = k;
  tr.append(el("td", "k", k), el("td", "v", v)); t.appendChild(tr); }
// each scheme's advantage of token i, as embedded (3 significant digits, computed at build)
function schemes(A, i) {
  return IDX.shaping.labels.map((label, k) => {
    const v = Array.isArray(A[k]) ? A[k][i] : A[k];
    return label + "\u00A0" + (v === null || v === undefined ? "\u2013" : (v > 0 ? "+" : "") + v);
  }).join(" \u00B7 ");
}
function showTip(body, i, x, y) {
  const r = body._r, st = body._st, R = run();
  tip.textContent = "";
  const top = el("div"); top.append(el("span", "tok", visible(r.text[i]))); tip.appendChild(top);
  const t = el("table");
  tipRow(t, "entropy", fmt(r.ent[i]) + " nats");
  tipRow(t, "high-entropy", (r.he[i] ? "yes" : "no") + " at step " + st.step +
    (st.threshold !== null ? " (threshold " + fmt(st.threshold, 4) + " nats)" : ""));
  tipRow(t, "log p", fmt(r.lp[i]));
  tipRow(t, "prob", fmt(r.prob[i]));
  tipRow(t, "word", R.words[r.w[i]] || "\u2013");
  tipRow(t, "category", CATS[r.cat[i]]);
  tipRow(t, "position", i + " of " + r.n_tokens);
  tipRow(t, "token id", r.id[i] + (r.sp[i] ? " (special)" : ""));
  if (r.adv !== null) tipRow(t, "advantage", fmt(r.adv));
  if (IDX.shaping && r.A) tipRow(t, "A by scheme", schemes(r.A, i));
  if (r.cov) tipRow(t, "Cov term", r.cov[i] === null ? "\u2013" : fmt(r.cov[i]));
  if (r.dlp) tipRow(t, "\u0394log p", fmt(r.dlp[i]));
  if (r.amass) tipRow(t, "anthropomorphic mass", fmt(r.amass[i]));
  if (r.rmass) tipRow(t, "reasoning mass", fmt(r.rmass[i]));
  tip.appendChild(t);
  const alt = el("table"); let n = 0;
  for (let j = i * r.k; j < (i + 1) * r.k; j++) {
    if (r.kid[j] < 0) continue;
    const id = r.kid[j], p = r.kp[j], txt = R.vocab[String(id)];
    const tr = el("tr", id === r.id[i] ? "sampled alt-row" : "alt-row");
    const bar = el("div", "pbar"); bar.style.width = Math.max(1, Math.round(80 * p)) + "px";
    const b = el("td"); b.appendChild(bar);
    tr.append(el("td", "alt", visible(txt === undefined ? "#" + id : txt)),
      el("td", "k", fmt(p, 4)), b, el("td", "k", id === r.id[i] ? "sampled" : ""));
    alt.appendChild(tr); n++;
  }
  if (n) { tip.appendChild(el("h4", null, "top-" + n + " alternatives")); tip.appendChild(alt); }
  tip.hidden = false;
  const w = tip.offsetWidth, h = tip.offsetHeight;
  let px = x + 14, py = y + 16;
  if (px + w > window.innerWidth - 4) px = Math.max(4, x - w - 10);
  if (py + h > window.innerHeight - 4) py = Math.max(4, y - h - 12);
  tip.style.left = px + "px"; tip.style.top = py + "px";
}
list.addEventListener("mouseover", (ev) => {
  const sp = ev.target.closest ? ev.target.closest("span.t") : null;
  if (sp && sp._i !== undefined) showTip(sp.parentNode, sp._i, ev.clientX, ev.clientY);
});
list.addEventListener("mouseout", (ev) => {
  if (ev.target.closest && ev.target.closest("span.t")) tip.hidden = true;
});
function activate(body, i) {
  const spans = body.querySelectorAll("span.t");
  if (!spans.length) return;
  i = Math.max(0, Math.min(spans.length - 1, i));
  if (body._act !== undefined && spans[body._act]) spans[body._act].classList.remove("active");
  body._act = i; const sp = spans[i]; sp.classList.add("active");
  sp.scrollIntoView({block: "nearest"});
  const rect = sp.getBoundingClientRect();
  showTip(body, i, rect.left, rect.bottom);
}
list.addEventListener("focusin", (ev) => {
  const body = ev.target;
  if (!body.classList || !body.classList.contains("body")) return;
  fill(body); activate(body, body._act === undefined ? 0 : body._act);
});
list.addEventListener("focusout", () => { tip.hidden = true; });
list.addEventListener("keydown", (ev) => {
  const body = ev.target;
  if (!body.classList || !body.classList.contains("body") || body._act === undefined) return;
  const r = body._r, moves = {ArrowRight: 1, ArrowLeft: -1, ArrowDown: 10, ArrowUp: -10};
  let i = null;
  if (ev.key in moves) i = body._act + moves[ev.key];
  else if (ev.key === "Home") i = 0;
  else if (ev.key === "End") i = r.text.length - 1;
  else if (ev.key === "h" || ev.key === "H") {
    const d = ev.key === "h" ? 1 : -1;
    for (let j = body._act + d; j >= 0 && j < r.text.length; j += d) if (r.he[j]) { i = j; break; }
  } else if (ev.key === "Escape") { tip.hidden = true; return; }
  if (i === null) return;
  ev.preventDefault(); activate(body, i);
});

// ---------------------------------------------------------------- legend, notes, start
(function legend() {
  const box = $("legend"), bar = el("span", "bar"), parts = [];
  for (let i = 0; i <= 20; i++) parts.push(colour(i / 20) + " " + (i * 5) + "%");
  bar.style.background = "linear-gradient(to right," + parts.join(",") + ")";
  const key = (cls, label) => { const k = el("span"); k.append(el("span", "t " + cls, "tok"),
    el("span", null, " " + label)); return k; };
  box.append(el("span", null, "entropy " + IDX.scale.min + " \u2192 " + IDX.scale.max +
    " nats (log)"), bar, key("he c30", "high-entropy at its step"),
    key("a", "anthropomorphic word"), key("r", "reasoning word"),
    el("span", null, "hover or focus a token (Tab, then \u2190 \u2192, h) for its values"));
})();
(function notes() {
  const box = $("notes");
  if (!IDX.notes.length) return;
  box.appendChild(el("div", null, "Left out of this page:"));
  const ul = el("ul"); IDX.notes.forEach((n) => ul.appendChild(el("li", null, n)));
  box.appendChild(ul);
})();
runSel.addEventListener("change", selectRun);
[modeSel, stepSel, promptSel, sampleSel, correctSel, dirSel].forEach((s) =>
  s.addEventListener("change", draw));
sortSel.addEventListener("change", () => {
  dirSel.value = sortSel.value === "order" ? "asc" : "desc"; draw(); });
let searchTimer = 0;
search.addEventListener("input", () => { clearTimeout(searchTimer);
  searchTimer = setTimeout(draw, 150); });
if (IDX.runs.length) selectRun();
else list.appendChild(el("div", "none", "This page holds no responses."));
window.hedRenderMs = performance.now() - t0;
document.body.dataset.ready = "1";
})();
