
"use strict";
(function () {
const t0 = performance.now();
const DATA = JSON.parse(document.getElementById("hed-data").textContent);
const SCALE = DATA.scale;
// page_common.js

const runSel = $("run"), promptSel = $("prompt"), correctSel = $("correct");
const grid = $("grid"), tip = $("tip");
DATA.runs.forEach((r, i) => runSel.appendChild(el("option", null, r.run + " (" + r.role + ")"))
  .setAttribute("value", String(i)));

function legend() {
  const box = $("legend");
  const scale = el("span", "scale"), bar = el("div", "bar"), ticks = el("div", "ticks");
  const parts = [];
  for (let i = 0; i <= 20; i++) parts.push(colour(i / 20) + " " + (i * 5) + "%");
  bar.style.background = "linear-gradient(to right," + parts.join(",") + ")";
  for (let e = Math.ceil(lo); e <= Math.floor(hi); e++) {
    const v = Math.pow(10, e), s = el("span", null, v >= 1 ? String(v) : v.toString());
    s.style.left = (100 * (e - lo) / (hi - lo)) + "%";
    ticks.appendChild(s);
  }
  scale.append(el("span", null, "entropy (nats, log scale; \u2264 " + DATA.scale.min +
    " white)"), bar, ticks);
  const key = (cls, label) => { const k = el("span", "key"); k.append(el("span", "t " + cls,
    "tok"), el("span", null, label)); return k; };
  box.append(scale, key("he c30", "high-entropy (top \u03C1 of the step)"),
    key("a", "anthropomorphic word"), key("r", "reasoning word"),
    el("span", null, "hover a token for its alternatives"));
}

function stepBoxes(run) {
  const box = $("steps"); box.textContent = ""; box.appendChild(el("span", null, "steps"));
  const steps = run.steps.map((s) => s.step);
  const pick = steps.length <= 3 ? steps : [steps[0], steps[(steps.length - 1) >> 1],
    steps[steps.length - 1]];
  steps.forEach((s) => {
    const lab = el("label"), cb = el("input");
    cb.type = "checkbox"; cb.value = String(s); cb.checked = pick.includes(s);
    cb.addEventListener("change", draw);
    lab.append(cb, document.createTextNode(" " + s)); box.appendChild(lab);
  });
}
function prompts(run) {
  promptSel.textContent = "";
  promptSel.appendChild(el("option", null, "all")).setAttribute("value", "all");
  Object.keys(run.prompts).map(Number).sort((a, b) => a - b).forEach((p) => {
    const o = el("option", null, "#" + p + "  " + (run.prompts[p].text || run.prompts[p].id)
      .slice(0, 60));
    o.value = String(p); promptSel.appendChild(o);
  });
}
function summary(run) {
  const n = run.steps.reduce((a, s) => a + s.n_shown, 0);
  $("summary").textContent = "run " + run.run + " (" + run.role + ") \u00B7 " +
    run.steps.length + " step(s) \u00B7 the same " + run.keys.length +
    " (prompt, sample) responses at every step, chosen with seed " + DATA.options.seed +
    " \u00B7 " + n + " responses in the page, up to " + DATA.options.max_tokens_per_response +
    " tokens each";
  const box = $("stepinfo"); box.textContent = "";
  run.steps.forEach((st) => {
    const parts = ["step " + st.step];
    if (st.threshold !== null) parts.push("high-entropy \u2265 " + fmt(st.threshold, 3) +
      " nats" + (st.top_entropy_frac !== null ? " (top " + Math.round(100 *
      st.top_entropy_frac) + "%)" : ""));
    if (st.n_correct !== null) parts.push(st.n_correct + "/" + st.n_responses + " correct");
    parts.push(st.n_shown + " shown");
    box.appendChild(el("span", null, parts.join(" \u00B7 ")));
  });
}
function notes() {
  const box = $("notes"); box.textContent = "";
  if (!DATA.notes.length) return;
  box.appendChild(el("div", null, "Left out of this page:"));
  const ul = el("ul"); DATA.notes.forEach((n) => ul.appendChild(el("li", null, n)));
  box.appendChild(ul);
}

let current = null;
function drawCell(run, step, r) {
  const cell = el("section", "resp");
  cell.dataset.key = step.step + ":" + r.p + ":" + r.s;
  cell.dataset.correct = String(r.correct);
  cell._r = r; cell._run = run; cell._step = step;
  const head = el("div", "resphead"), v = verdict(r.correct);
  head.append(el("span", "step", "step " + step.step), el("span", v[1], v[0]));
  if (r.answer !== null) head.appendChild(el("span", null, "answer " + r.answer));
  head.appendChild(el("span", null, r.n_tokens + " tokens, " + (r.finish || "?")));
  let nHe = 0, nA = 0;
  for (let i = 0; i < r.he.length; i++) { nHe += r.he[i]; if (r.he[i] && r.cat[i] === 1) nA++; }
  head.appendChild(el("span", null, nHe + " high-entropy (" + nA + " anthropomorphic)"));

  const body = el("div", "body"), frag = document.createDocumentFragment();
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
  body.appendChild(frag);
  if (r.n_tokens > r.text.length) body.appendChild(el("div", "more", "\u2026 " +
    (r.n_tokens - r.text.length) + " more tokens not shown"));
  cell.append(head, body);
  return cell;
}
function draw() {
  const run = current, chosen = [...$("steps").querySelectorAll("input:checked")]
    .map((c) => Number(c.value));
  const steps = run.steps.filter((s) => chosen.includes(s.step));
  const pSel = promptSel.value, cSel = correctSel.value;
  grid.textContent = "";
  let rows = 0;
  run.keys.forEach(([p, s]) => {
    if (pSel !== "all" && Number(pSel) !== p) return;
    const row = el("article", "row"), head = el("div", "rowhead");
    const pr = run.prompts[p] || {id: "", text: ""};
    head.append(el("b", null, "prompt " + p + " \u00B7 sample " + s + " "),
      el("span", "pid", pr.id));
    if (pr.text) {
      const d = el("details"), sum = el("summary", null, pr.text.slice(0, 240));
      d.append(sum, el("div", "ptext", pr.text)); head.appendChild(d);
    }
    const cells = el("div", "cells");
    let shown = 0;
    steps.forEach((st) => {
      const r = (run.responses[String(st.step)] || []).find((x) => x.p === p && x.s === s);
      if (!r) {
        const c = el("section", "resp");
        c.append(el("div", "resphead", "step " + st.step + ": no such response"));
        cells.appendChild(c);
        return;
      }
      const cell = drawCell(run, st, r);
      if (cSel !== "all" && String(r.correct) !== cSel) cell.classList.add("filtered");
      else shown++;
      cells.appendChild(cell);
    });
    if (!shown) return;
    row.append(head, cells); grid.appendChild(row); rows++;
  });
  if (!rows) grid.appendChild(el("div", "empty-grid", "No response matches the filters."));
}
function selectRun() {
  current = DATA.runs[Number(runSel.value) || 0];
  stepBoxes(current); prompts(current); summary(current); draw();
}

function tipRow(table, k, v) {
  const tr = el("tr"); tr.append(el("td", "k", k), el("td", null, v)); table.appendChild(tr);
}
function showTip(span, ev) {
  const cell = span.closest(".resp"), r = cell._r, run = cell._run, i = span._i;
  tip.textContent = "";
  const top = el("div");
  top.append(el("span", "tok", visible(r.text[i])));
  tip.appendChild(top);
  const t = el("table");
  tipRow(t, "entropy", fmt(r.ent[i]) + " nats" + (r.he[i] ? "  (high-entropy)" : ""));
  tipRow(t, "prob", fmt(r.prob[i]));
  tipRow(t, "word", run.words[r.w[i]] || "\u2013");
  tipRow(t, "category", CATS[r.cat[i]]);
  tipRow(t, "position", String(i) + " of " + r.n_tokens);
  tipRow(t, "token id", String(r.id[i]) + (r.sp[i] ? " (special)" : ""));
  tip.appendChild(t);
  const ids = [], ps = [];
  for (let j = i * r.k; j < (i + 1) * r.k; j++) {
    if (r.kid[j] >= 0) { ids.push(r.kid[j]); ps.push(r.kp[j]); }
  }
  if (ids.length) {
    tip.appendChild(el("h4", null, "top-" + ids.length + " alternatives"));
    const alt = el("table");
    ids.forEach((id, j) => {
      const tr = el("tr", id === r.id[i] ? "sampled alt-row" : "alt-row");
      const bar = el("div", "pbar"); bar.style.width = Math.max(1, Math.round(80 * ps[j])) + "px";
      const txt = run.vocab[String(id)];
      const b = el("td"); b.appendChild(bar);
      tr.append(el("td", "alt", visible(txt === undefined ? "#" + id : txt)),
        el("td", "k", fmt(ps[j], 4)), b, el("td", "k", id === r.id[i] ? "sampled" : ""));
      alt.appendChild(tr);
    });
    tip.appendChild(alt);
  }
  tip.hidden = false;
  const w = tip.offsetWidth, h = tip.offsetHeight;
  let x = ev.clientX + 14, y = ev.clientY + 16;
  if (x + w > window.innerWidth - 4) x = Math.max(4, ev.clientX - w - 10);
  if (y + h > window.innerHeight - 4) y = Math.max(4, ev.clientY - h - 12);
  tip.style.left = x + "px"; tip.style.top = y + "px";
}
grid.addEventListener("mouseover", (ev) => {
  const sp = ev.target.closest ? ev.target.closest("span.t") : null;
  if (sp && sp._i !== undefined) showTip(sp, ev);
});
grid.addEventListener("mouseout", (ev) => {
  if (ev.target.closest && ev.target.closest("span.t")) tip.hidden = true;
});
runSel.addEventListener("change", selectRun);
promptSel.addEventListener("change", draw);
correctSel.addEventListener("change", draw);

legend(); notes();
if (DATA.runs.length) selectRun();
else grid.appendChild(el("div", "empty-grid", "This report holds no responses."));
window.hedRenderMs = performance.now() - t0;
document.body.dataset.ready = "1";
})();
