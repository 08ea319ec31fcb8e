// Shared by the token report and the study explorer (hed.report.page_common): inlined into
// each page's script where it says page_common.js, after the page has set SCALE ({min, max}:
// the entropy range of the colour scale, nats).
// white → pale yellow → orange → salmon → rose: light enough for black text at every level
const STOPS = [[255,255,255],[255,248,222],[255,234,166],[255,210,122],[255,178,102],
  [249,143,114],[238,112,142]];
const NBINS = 48;
const CATS = ["other", "anthropomorphic", "reasoning"];
const lo = Math.log10(SCALE.min), hi = Math.log10(SCALE.max);
const $ = (id) => document.getElementById(id);
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function colour(f) {
  const x = Math.max(0, Math.min(1, f)) * (STOPS.length - 1), i = Math.min(STOPS.length - 2,
    Math.floor(x)), u = x - i, a = STOPS[i], b = STOPS[i + 1];
  return "rgb(" + a.map((v, j) => Math.round(v + (b[j] - v) * u)).join(",") + ")";
}
function frac(h) { return h <= SCALE.min ? 0 : (Math.log10(h) - lo) / (hi - lo); }
function bin(h) { return Math.max(0, Math.min(NBINS - 1, Math.floor(frac(h) * NBINS))); }
(function () {
  let css = "";
  for (let i = 0; i < NBINS; i++) {
    css += ".c" + i + "{background:" + colour((i + 0.5) / NBINS) + "}";
  }
  document.head.appendChild(el("style", null, css));
})();
function fmt(x, d) {
  if (x === null || x === undefined) return "\u2013";
  if (x !== 0 && Math.abs(x) < 1e-3) return x.toExponential(1);
  return x.toFixed(d === undefined ? 4 : d);
}
function visible(s) {
  return s.replace(/ /g, "\u2423").replace(/\n/g, "\u21B5").replace(/\t/g, "\u21E5") || "\u2205";
}
function verdict(c) {
  return c === true ? ["correct", "ok"] : c === false ? ["incorrect", "bad"] : ["not graded", "na"];
}
