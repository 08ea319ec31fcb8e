"""The token report: responses drawn token by token, coloured by entropy, as one HTML file.

One self-contained page (inline CSS and JavaScript, no network) for every run and step of a
study: a run selector, the steps shown side by side for the same (prompt_index,
sample_index), filters by prompt and by correctness, a legend in nats, and a tooltip per token
(entropy, probability, the top-k alternatives with their probabilities, word, category,
position). docs/token_report.md describes the page for users.

Size is bounded: per (run, step) at most ``responses_per_step`` responses, the same
(prompt_index, sample_index) keys at every step of a run, chosen by a seeded shuffle
(:func:`choose_keys`), and at most ``max_tokens_per_response`` tokens of each; the page says
what it left out. Only the chosen responses' rows are read from the merged records
(:func:`read_response_records`: a pyarrow filter on prompt_index, sample_index, position).

Text of the alternatives. A record holds the top-k *ids*; their text is decoded with the
tokenizer of the step's checkpoint (``model_dir`` in ``checkpoints``; only the tokenizer files
are read, no weights), one id at a time with HED's decode settings. Where no tokenizer can be
loaded (``kedro run --pipelines reporting`` on a machine without the checkpoints), ids that
were sampled somewhere in the shown responses take their recorded ``token_text`` and the others
show as ``#<id>``; the page says which source it used (:func:`vocabulary_texts`).

Escaping. Every text from the data (responses, prompts, words, alternatives) travels in one
JSON blob inside ``<script type="application/json">`` with ``<``, ``>``, ``&``, U+2028 and
U+2029 written as ``\\uXXXX`` (:func:`script_json`), and the page builds its DOM with
``textContent`` only, so a response containing ``<script>`` or ``</span>`` shows as text and
never runs.
"""

from __future__ import annotations

import html
import itertools
import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from hed.config.params import non_negative_int, positive_int
from hed.errors import ConfigError

logger = logging.getLogger(__name__)

FORMAT = "hed.report.token_report/1"
#: Columns of the merged records the page reads (docs/datasets.md; the last three are merged-only).
RECORD_COLUMNS = [
    "prompt_index",
    "sample_index",
    "position",
    "token_id",
    "token_text",
    "entropy",
    "prob",
    "topk_token_ids",
    "topk_probs",
    "is_special",
    "word",
    "category",
    "is_high_entropy",
]
SEQUENCE_COLUMNS = [
    "prompt_index",
    "prompt_id",
    "sample_index",
    "n_tokens",
    "finish_reason",
    "extracted_answer",
    "correct",
]
#: Category codes in the page's data (``cat`` arrays).
CATEGORY_CODES = {"other": 0, "anthropomorphic": 1, "reasoning": 2}
#: Entropies below this (nats) get the lightest colour; the log scale starts here.
ENTROPY_FLOOR = 1e-3
#: Characters of a prompt shown above its responses (the whole prompt is in a fold-out).
PROMPT_PREVIEW_CHARS = 240


@dataclass(frozen=True)
class TokenReportOptions:
    """``reporting.token_report`` (parameters_reporting.yml).

    Attributes:
        responses_per_step: responses shown per (run, step), ≥ 1.
        max_tokens_per_response: tokens shown per response, ≥ 1 (the rest is cut, and said so).
        steps: steps to show, or None for every step of every run.
        seed: seed of the shuffle that chooses the responses.
        enabled: draw the report (``false`` leaves the node out of the reporting pipeline).
    """

    responses_per_step: int = 8
    max_tokens_per_response: int = 2000
    steps: tuple[int, ...] | None = None
    seed: int = 0
    enabled: bool = True


def token_report_options(section: Any) -> TokenReportOptions:
    """Parse ``reporting.token_report``.

    Args:
        section: the mapping from parameters_reporting.yml (``None`` = every default).

    Returns:
        The options.

    Raises:
        ConfigError: not a mapping, an unknown key, or a value of the wrong type/range.
    """
    if section is None:
        return TokenReportOptions()
    if not isinstance(section, Mapping):
        raise ConfigError(
            f"reporting.token_report must be a mapping (parameters_reporting.yml), got {section!r}"
        )
    known = {"enabled", "responses_per_step", "max_tokens_per_response", "steps", "seed"}
    unknown = sorted(set(section) - known)
    if unknown:
        raise ConfigError(f"reporting.token_report: unknown key(s) {unknown}; use {sorted(known)}")
    defaults = TokenReportOptions()
    values: dict[str, Any] = {}
    for key in ("responses_per_step", "max_tokens_per_response"):
        values[key] = positive_int(
            section.get(key, getattr(defaults, key)), f"reporting.token_report.{key}"
        )
    enabled = section.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(
            f"reporting.token_report.enabled must be true or false (unquoted), got {enabled!r}"
        )
    seed = non_negative_int(section.get("seed", defaults.seed), "reporting.token_report.seed")
    steps = section.get("steps")
    if isinstance(steps, int) and not isinstance(steps, bool):
        steps = [steps]
    if steps is not None and (
        not isinstance(steps, list | tuple)
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in steps)
    ):
        raise ConfigError(
            "reporting.token_report.steps must be null (every step) or a list of "
            f"non-negative integer steps, got {steps!r}"
        )
    return TokenReportOptions(
        steps=None if steps is None else tuple(sorted(set(steps))),
        seed=seed,
        enabled=enabled,
        **values,
    )


# ------------------------------------------------------------------ choosing and reading


def choose_keys(keys: Iterable[tuple[int, int]], n: int, seed: int) -> list[tuple[int, int]]:
    """The responses a run shows: ``n`` (prompt_index, sample_index) keys, reproducibly.

    The distinct keys are sorted, shuffled with ``numpy.random.default_rng(seed)`` and the first
    ``n`` kept, then sorted again for display. The same keys are used at every step of a run so
    that a row of the page compares one (prompt, sample) across steps.

    Args:
        keys: (prompt_index, sample_index) pairs, typically the union over the run's steps.
        n: how many to keep (all when there are fewer).
        seed: shuffle seed.

    Returns:
        Sorted list of at most ``n`` keys.
    """
    distinct = sorted({(int(p), int(s)) for p, s in keys})
    if len(distinct) <= n:
        return distinct
    order = np.random.default_rng(seed).permutation(len(distinct))[:n]
    return sorted(distinct[i] for i in order)


def read_response_table(
    records: ds.Dataset,
    keys: Sequence[tuple[int, int]],
    max_tokens: int,
    columns: Sequence[str] = RECORD_COLUMNS,
) -> pa.Table:
    """The merged records of the responses ``keys``, their first ``max_tokens`` positions only.

    Memory-bounded: a pyarrow filter (prompt_index in the keys' prompts, sample_index in their
    samples, position < ``max_tokens``) skips row groups by their statistics and keeps only
    matching rows; the exact (prompt_index, sample_index) pairs are then selected.

    Args:
        records: one step's merged token records (lazy, ``ArrowParquetDataset.load()``).
        keys: (prompt_index, sample_index) pairs.
        max_tokens: positions kept per response.
        columns: record columns to read (must hold prompt_index, sample_index, position).

    Returns:
        An Arrow table of ``columns`` (default :data:`RECORD_COLUMNS`), sorted by
        (prompt_index, sample_index, position).
    """
    prompts = sorted({int(p) for p, _ in keys})
    samples = sorted({int(s) for _, s in keys})
    expr = (
        pc.field("prompt_index").isin(pa.array(prompts, pa.int32()))
        & pc.field("sample_index").isin(pa.array(samples, pa.int16()))
        & (pc.field("position") < max_tokens)
    )
    table = records.to_table(columns=list(columns), filter=expr)
    pair = np.asarray(table["prompt_index"]).astype(np.int64) << 16 | np.asarray(
        table["sample_index"]
    ).astype(np.int64)
    wanted = np.array([int(p) << 16 | int(s) for p, s in keys], dtype=np.int64)
    table = table.filter(pa.array(np.isin(pair, wanted)))
    return table.sort_by(
        [("prompt_index", "ascending"), ("sample_index", "ascending"), ("position", "ascending")]
    )


def read_response_records(
    records: ds.Dataset, keys: Sequence[tuple[int, int]], max_tokens: int
) -> pd.DataFrame:
    """:func:`read_response_table` as a pandas DataFrame (notebooks)."""
    return read_response_table(records, keys, max_tokens).to_pandas()


def load_tokenizer(model_dir: str | Path | None) -> Any | None:
    """The tokenizer saved in ``model_dir`` (local files only), or None when it cannot load."""
    if not model_dir or not Path(model_dir).is_dir():
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as exc:  # any failure means: fall back to the records' own texts
        logger.warning("token report: no tokenizer in %s (%s)", model_dir, exc)
        return None


def vocabulary_texts(
    token_ids: Iterable[int], tokenizer: Any | None, known: Mapping[int, str]
) -> dict[int, str]:
    """Text of each token id, for the tooltip's alternatives.

    Args:
        token_ids: ids to name (sampled tokens and top-k alternatives).
        tokenizer: a transformers tokenizer, or None.
        known: ``{token_id: token_text}`` from the records (used without a tokenizer).

    Returns:
        ``{id: text}``: ``tokenizer.decode([id])`` (special tokens kept, no clean-up; a lone
        byte of a multi-byte character decodes to U+FFFD), else the recorded text, else
        ``#<id>``.
    """
    ids = sorted({int(i) for i in token_ids})
    if tokenizer is not None:
        from hed.core.token_text import DECODE_KWARGS

        texts = tokenizer.batch_decode([[i] for i in ids], **DECODE_KWARGS)
        return dict(zip(ids, texts, strict=True))
    return {i: known.get(i, f"#{i}") for i in ids}


# ------------------------------------------------------------------ building the page data


@dataclass
class StepInput:
    """What the report reads for one (run, step).

    Attributes:
        run, role, step: identify the step.
        sequences: the step's merged responses (docs/datasets.md), a DataFrame or lazy dataset.
        records: the step's merged token records (lazy dataset or table).
        model_dir: checkpoint folder whose tokenizer names the alternatives (None: no tokenizer).
        threshold: the step's high-entropy threshold in nats (None: unknown).
        top_entropy_frac: ρ of the step (None: unknown).
    """

    run: str
    role: str
    step: int
    sequences: Any
    records: Any
    model_dir: str | None = None
    threshold: float | None = None
    top_entropy_frac: float | None = None


def _as_frame(data: Any, columns: Sequence[str]) -> pd.DataFrame:
    if isinstance(data, pd.DataFrame):
        return data[[c for c in columns if c in data.columns]].copy()
    if isinstance(data, ds.Dataset):
        have = set(data.schema.names)
        return data.to_table(columns=[c for c in columns if c in have]).to_pandas()
    if isinstance(data, pa.Table):
        return data.select([c for c in columns if c in data.column_names]).to_pandas()
    raise TypeError(f"expected a DataFrame, pyarrow Table or Dataset, got {type(data).__name__}")


def _as_dataset(data: Any) -> ds.Dataset:
    if isinstance(data, ds.Dataset):
        return data
    if isinstance(data, pd.DataFrame):
        data = pa.Table.from_pandas(data, preserve_index=False)
    return ds.dataset(data)


def _sig(values: Any, digits: int) -> list[float]:
    """Values rounded to ``digits`` significant digits, as Python floats (JSON stays short).

    Vectorised: x → round(x·10^k)/10^k with k = digits − 1 − ⌊log10 |x|⌋; IEEE division is
    correctly rounded, so the result is the float nearest the decimal (``repr`` is short).
    """
    x = np.asarray(values, dtype=np.float64)
    out = np.zeros_like(x)
    nonzero = np.isfinite(x) & (x != 0)
    v = x[nonzero]
    k = digits - 1 - np.floor(np.log10(np.abs(v)))
    scale = 10.0 ** np.abs(k)
    out[nonzero] = np.where(k >= 0, np.round(v * scale) / scale, np.round(v / scale) * scale)
    return out.tolist()


def _nullable(value: Any) -> Any:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


def _fixed_width(column: pa.ChunkedArray, fill: float) -> np.ndarray:
    """A list<...> column as a (rows, k) array, k = the longest list; shorter rows padded."""
    array = column.combine_chunks()
    lengths = np.asarray(pc.fill_null(pc.list_value_length(array), 0), dtype=np.int64)
    k = int(lengths.max()) if len(lengths) else 0
    flat = np.asarray(array.flatten())
    if (lengths == k).all():
        return flat.reshape(len(lengths), k)
    out = np.full((len(lengths), k), fill, dtype=np.float64)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    cols = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[rows, cols] = flat
    return out


def _table_columns(table: pa.Table, words: dict[str, int]) -> dict[str, list[Any]]:
    """The page's per-token arrays of a whole table, computed at once.

    One entry per row, except ``kid``/``kp`` (top-k ids and probabilities, row-major, ``k``
    per row; rows with fewer alternatives padded with id −1) and the scalar ``k``.
    """
    word = pc.fill_null(table["word"], "").combine_chunks().dictionary_encode()
    codes = np.array([words.setdefault(str(w), len(words)) for w in word.dictionary.to_pylist()])
    category = pc.fill_null(table["category"], "other").to_pylist()
    topk_ids = _fixed_width(table["topk_token_ids"], -1)
    topk_probs = _fixed_width(table["topk_probs"], 0.0)
    return {
        "k": topk_ids.shape[1],
        "text": pc.fill_null(table["token_text"], "").to_pylist(),
        "id": np.asarray(table["token_id"]).astype(int).tolist(),
        "ent": _sig(np.asarray(table["entropy"]), 4),
        "prob": _sig(np.asarray(table["prob"]), 4),
        "kid": topk_ids.astype(np.int64).ravel().tolist(),
        "kp": _sig(topk_probs.ravel(), 3),
        "w": codes[np.asarray(word.indices)].tolist() if len(codes) else [],
        "cat": [CATEGORY_CODES.get(c, 0) for c in category],
        "he": np.asarray(pc.fill_null(table["is_high_entropy"], False)).astype(int).tolist(),
        "sp": np.asarray(pc.fill_null(table["is_special"], False)).astype(int).tolist(),
    }


def _response_payload(
    columns: Mapping[str, list[Any]], start: int, stop: int, seq: Mapping[str, Any]
) -> dict[str, Any]:
    """One response: its header fields and rows ``start:stop`` of the table's arrays."""
    n_tokens = _nullable(seq.get("n_tokens"))
    return {
        "p": int(seq["prompt_index"]),
        "s": int(seq["sample_index"]),
        "correct": _nullable(seq.get("correct")),
        "answer": _nullable(seq.get("extracted_answer")),
        "finish": _nullable(seq.get("finish_reason")),
        "n_tokens": int(n_tokens) if n_tokens is not None else stop - start,
        "k": columns["k"],
        **{
            name: values[start:stop]
            for name, values in columns.items()
            if name not in ("k", "kid", "kp")
        },
        "kid": columns["kid"][start * columns["k"] : stop * columns["k"]],
        "kp": columns["kp"][start * columns["k"] : stop * columns["k"]],
    }


def build_report(
    steps: Sequence[StepInput],
    options: TokenReportOptions,
    prompts: pd.DataFrame | None = None,
    title: str = "HED token report",
    tokenizers: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The page's data: per run, the chosen responses of every shown step, with their tokens.

    Args:
        steps: one :class:`StepInput` per (run, step), any order.
        options: :class:`TokenReportOptions`.
        prompts: the ``prompts`` table (prompt_index, prompt_id, prompt); None: no prompt text.
        title: page title.
        tokenizers: ``{run: tokenizer}`` to use instead of loading one from ``model_dir``
            (tests, notebooks).

    Returns:
        A JSON-able dict (``format`` :data:`FORMAT`): ``runs`` (run, role, steps with
        threshold/ρ/counts, responses keyed by step, the word table, the vocabulary of ids to
        text and its source), ``scale`` (log-scale bounds in nats), ``options``, ``notes``
        (what was left out).

    Raises:
        ConfigError: ``options.steps`` names no step that exists.
    """
    by_run: dict[str, list[StepInput]] = {}
    for item in sorted(steps, key=lambda i: (i.run, i.step)):
        by_run.setdefault(item.run, []).append(item)
    notes: list[str] = []
    if options.steps is not None:
        available = sorted({i.step for i in steps})
        absent = [s for s in options.steps if s not in available]
        if absent:
            notes.append(f"reporting.token_report.steps lists step(s) {absent} that no run has")
        by_run = {
            run: [i for i in items if i.step in options.steps] for run, items in by_run.items()
        }
        by_run = {run: items for run, items in by_run.items() if items}
        if not by_run:
            raise ConfigError(
                f"reporting.token_report.steps {list(options.steps)} matches no step of the "
                f"runs (steps available: {available}); set it to null or to existing steps"
            )
    prompt_text: dict[int, str] = {}
    if prompts is not None and "prompt" in prompts.columns:
        prompt_text = {
            int(p): str(t) for p, t in zip(prompts["prompt_index"], prompts["prompt"], strict=True)
        }
    runs = []
    max_entropy = 0.0
    for run, items in by_run.items():
        payload, run_max = _run_payload(run, items, options, prompt_text, tokenizers or {})
        notes.extend(payload.pop("notes"))
        max_entropy = max(max_entropy, run_max)
        runs.append(payload)
    return {
        "format": FORMAT,
        "title": title,
        "options": {
            "responses_per_step": options.responses_per_step,
            "max_tokens_per_response": options.max_tokens_per_response,
            "steps": None if options.steps is None else list(options.steps),
            "seed": options.seed,
        },
        "scale": {"min": ENTROPY_FLOOR, "max": _nice_ceiling(max(max_entropy, 0.01))},
        "categories": {str(v): k for k, v in CATEGORY_CODES.items()},
        "runs": runs,
        "notes": notes,
    }


def _run_payload(
    run: str,
    items: list[StepInput],
    options: TokenReportOptions,
    prompt_text: Mapping[int, str],
    tokenizers: Mapping[str, Any],
) -> tuple[dict[str, Any], float]:
    sequences = {i.step: _as_frame(i.sequences, SEQUENCE_COLUMNS) for i in items}
    all_keys = [
        (p, s)
        for frame in sequences.values()
        for p, s in zip(frame["prompt_index"], frame["sample_index"], strict=True)
    ]
    keys = choose_keys(all_keys, options.responses_per_step, options.seed)
    n_distinct = len(set(all_keys))
    notes = []
    if n_distinct > len(keys):
        notes.append(
            f"run {run}: {len(keys)} of {n_distinct} responses (prompt_index, sample_index) "
            f"shown per step (reporting.token_report.responses_per_step = "
            f"{options.responses_per_step}, seed {options.seed})"
        )
    tokenizer = tokenizers.get(run)
    source = "tokenizer" if tokenizer is not None else None
    if tokenizer is None:
        for item in items:
            tokenizer = load_tokenizer(item.model_dir)
            if tokenizer is not None:
                source = f"the tokenizer of {item.model_dir}"
                break
    words: dict[str, int] = {"": 0}
    known: dict[int, str] = {}
    used_ids: set[int] = set()
    step_payloads, responses, max_entropy, n_cut = [], {}, 0.0, 0
    for item in items:
        frame = sequences[item.step]
        seq_by_key = {
            (int(r["prompt_index"]), int(r["sample_index"])): r
            for r in frame.to_dict(orient="records")
        }
        present = [k for k in keys if k in seq_by_key]
        table = read_response_table(
            _as_dataset(item.records), present, options.max_tokens_per_response
        )
        columns = _table_columns(table, words)
        pair = np.stack([np.asarray(table["prompt_index"]), np.asarray(table["sample_index"])])
        starts = np.flatnonzero(np.r_[True, (pair[:, 1:] != pair[:, :-1]).any(axis=0)])
        bounds = np.r_[starts, table.num_rows].tolist() if table.num_rows else [0]
        shown = []
        for start, stop in itertools.pairwise(bounds):
            key = (int(pair[0, start]), int(pair[1, start]))
            response = _response_payload(columns, start, stop, seq_by_key[key])
            n_cut += response["n_tokens"] > stop - start
            shown.append(response)
        used_ids.update(columns["id"])
        used_ids.update(i for i in set(columns["kid"]) if i >= 0)
        known.update(zip(columns["id"], columns["text"], strict=True))
        if table.num_rows:
            max_entropy = max(max_entropy, float(pc.max(table["entropy"]).as_py() or 0.0))
        responses[str(item.step)] = shown
        step_payloads.append(
            {
                "step": int(item.step),
                "threshold": _nullable(item.threshold),
                "top_entropy_frac": _nullable(item.top_entropy_frac),
                "n_responses": len(frame),
                "n_shown": len(shown),
                "n_correct": int(frame["correct"].astype("boolean").fillna(False).sum())
                if "correct" in frame
                else None,
            }
        )
    if n_cut:
        notes.append(
            f"run {run}: {n_cut} response(s) cut after {options.max_tokens_per_response} "
            "tokens (reporting.token_report.max_tokens_per_response)"
        )
    if tokenizer is None:
        source = (
            "the recorded token_text of sampled tokens (no tokenizer found in the checkpoint "
            "folders); alternatives never sampled in the shown responses show as #id"
        )
        notes.append(f"run {run}: alternatives named from {source}")
    vocab = vocabulary_texts(used_ids, tokenizer, known)
    prompt_ids = {}
    for frame in sequences.values():
        prompt_ids.update(
            zip(frame["prompt_index"].astype(int), frame["prompt_id"].astype(str), strict=True)
        )
    chosen_prompts = sorted({p for p, _ in keys})
    return (
        {
            "run": run,
            "role": items[0].role,
            "steps": step_payloads,
            "keys": [list(k) for k in keys],
            "prompts": {
                str(p): {"id": prompt_ids.get(p, ""), "text": prompt_text.get(p, "")}
                for p in chosen_prompts
            },
            "responses": responses,
            "words": list(words),
            "vocab": {str(i): t for i, t in vocab.items()},
            "vocab_source": source,
            "notes": notes,
        },
        max_entropy,
    )


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 5 × 10^k that is ≥ ``value``."""
    exponent = math.floor(math.log10(value))
    for mantissa in (1, 2, 5, 10):
        ceiling = mantissa * 10.0**exponent
        if ceiling >= value * (1 - 1e-12):
            return float(f"{ceiling:.6g}")
    return float(10.0 ** (exponent + 1))


# ------------------------------------------------------------------ rendering


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
    return (
        _PAGE.replace("__TITLE__", html.escape(str(report.get("title", "HED token report"))))
        .replace("__CSS__", _CSS)
        .replace("__JS__", _JS)
        .replace("__DATA__", script_json(report))
    )


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


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; \
style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>__CSS__</style>
</head>
<body>
<header id="top">
  <h1>__TITLE__</h1>
  <div id="summary"></div>
  <div id="stepinfo"></div>
  <div id="controls">
    <label>run <select id="run"></select></label>
    <span id="steps" class="group"></span>
    <label>prompt <select id="prompt"></select></label>
    <label>responses <select id="correct">
      <option value="all">all</option><option value="true">correct</option>
      <option value="false">incorrect</option><option value="null">not graded</option>
    </select></label>
  </div>
  <div id="legend"></div>
</header>
<main id="grid"></main>
<footer id="notes"></footer>
<div id="tip" role="tooltip" hidden></div>
<script type="application/json" id="hed-data">__DATA__</script>
<script>__JS__</script>
</body>
</html>
"""

_CSS = """
:root { --he: #1d3f8f; --anthro: #9b2fae; --reason: #00838f; --muted: #6b7280; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: #1f2328; background: #f6f7f9; }
header { position: sticky; top: 0; z-index: 5; background: #fff; border-bottom: 1px solid #d8dbe0;
  padding: 10px 18px 8px; box-shadow: 0 1px 3px rgba(0,0,0,.05); }
h1 { font-size: 17px; margin: 0 0 2px; font-weight: 650; }
#summary { color: var(--muted); font-size: 12.5px; margin-bottom: 2px; }
#stepinfo { display: flex; flex-wrap: wrap; gap: 2px 22px; color: #374151; font-size: 12.5px;
  margin-bottom: 6px; }
#controls { display: flex; flex-wrap: wrap; gap: 6px 16px; align-items: center; font-size: 13px; }
#controls select { font: inherit; padding: 1px 4px; max-width: 340px; }
.group { display: inline-flex; gap: 8px; align-items: center; flex-wrap: wrap; }
.group label { white-space: nowrap; }
#legend { display: flex; flex-wrap: wrap; gap: 6px 22px; align-items: center; margin-top: 8px;
  font-size: 12px; color: #374151; }
.scale { display: inline-flex; flex-direction: column; }
.bar { width: 300px; height: 12px; border: 1px solid #c9ccd1; border-radius: 2px; }
.ticks { position: relative; width: 300px; height: 14px; font-size: 10.5px; color: var(--muted); }
.ticks span { position: absolute; transform: translateX(-50%); white-space: nowrap; }
.key { display: inline-flex; gap: 6px; align-items: center; }
.key .t { padding: 0 3px; }
main { padding: 12px 18px 24px; }
.row { content-visibility: auto; contain-intrinsic-size: auto 320px;
  background: #fff; border: 1px solid #dfe2e6; border-radius: 6px; margin-bottom: 14px; }
.rowhead { padding: 7px 12px; border-bottom: 1px solid #eceef1; font-size: 13px; }
.rowhead b { font-weight: 600; }
.rowhead .pid { color: var(--muted); font-family: ui-monospace, monospace; font-size: 11.5px; }
.rowhead details { margin-top: 3px; color: #374151; }
.rowhead summary { cursor: pointer; color: #374151; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; }
.rowhead .ptext { white-space: pre-wrap; font-size: 12.5px; margin: 4px 0 2px; }
.cells { display: grid; grid-auto-flow: column; grid-auto-columns: minmax(340px, 1fr);
  overflow-x: auto; }
.resp { border-right: 1px solid #eceef1; min-width: 0; }
.resp:last-child { border-right: 0; }
.resp.filtered { display: none; }
.resphead { padding: 5px 12px; font-size: 12px; color: #374151; background: #fafbfc;
  border-bottom: 1px solid #eceef1; display: flex; gap: 10px; flex-wrap: wrap; }
.resphead .step { font-weight: 650; color: #111827; }
.ok { color: #137333; font-weight: 600; } .bad { color: #b3261e; font-weight: 600; }
.na { color: var(--muted); }
.body { padding: 8px 12px 10px; white-space: pre-wrap; overflow-wrap: anywhere;
  font: 13.5px/1.95 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
.more { color: var(--muted); font: italic 12px system-ui, sans-serif; }
.t { border-radius: 2px; cursor: default; }
.t.he { outline: 1.5px solid var(--he); outline-offset: -1px; }
.t.a { box-shadow: inset 0 -3px 0 var(--anthro); }
.t.r { box-shadow: inset 0 -2px 0 var(--reason); }
.t.sp { color: var(--muted); font-style: italic; }
.t.nl::before { content: "\\21B5"; color: #6b7280; }
.t.empty::before { content: "\\25AF"; color: #c0c4c9; }
.t:hover, .t.pin { outline: 2px solid #111; outline-offset: 0; }
.empty-grid { color: var(--muted); padding: 30px; text-align: center; }
footer { padding: 0 18px 24px; color: var(--muted); font-size: 12px; }
footer li { margin: 2px 0; }
#tip { position: fixed; z-index: 10; max-width: 360px; background: #fff; border: 1px solid #c9ccd1;
  border-radius: 6px; box-shadow: 0 4px 14px rgba(0,0,0,.14); padding: 8px 10px; font-size: 12.5px;
  pointer-events: none; }
#tip .tok { font: 600 13px ui-monospace, monospace; background: #f1f3f5; padding: 0 4px;
  border-radius: 3px; white-space: pre; }
#tip table { border-collapse: collapse; margin-top: 5px; width: 100%; }
#tip td { padding: 1px 4px; vertical-align: middle; }
#tip td.k { color: var(--muted); white-space: nowrap; }
#tip td.alt { font-family: ui-monospace, monospace; white-space: pre; }
#tip .pbar { height: 7px; background: #5b7fd6; border-radius: 2px; }
#tip .sampled td.alt { font-weight: 700; }
#tip h4 { margin: 6px 0 0; font-size: 11.5px; color: var(--muted); font-weight: 600;
  text-transform: uppercase; letter-spacing: .03em; }
"""

_JS = r"""
"use strict";
(function () {
const t0 = performance.now();
const DATA = JSON.parse(document.getElementById("hed-data").textContent);
// white → pale yellow → orange → salmon → rose: light enough for black text at every level
const STOPS = [[255,255,255],[255,248,222],[255,234,166],[255,210,122],[255,178,102],
  [249,143,114],[238,112,142]];
const NBINS = 48;
const CATS = ["other", "anthropomorphic", "reasoning"];
const lo = Math.log10(DATA.scale.min), hi = Math.log10(DATA.scale.max);
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
function frac(h) { return h <= DATA.scale.min ? 0 : (Math.log10(h) - lo) / (hi - lo); }
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
function verdict(c) { return c === true ? ["correct", "ok"] : c === false ? ["incorrect", "bad"]
  : ["not graded", "na"]; }

const $ = (id) => document.getElementById(id);
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
"""


def step_inputs(
    run_steps: Sequence[tuple[str, str, int]],
    checkpoints: Mapping[str, Any],
    entropy_thresholds: pd.DataFrame,
    step_tables: Sequence[Any],
) -> list[StepInput]:
    """One :class:`StepInput` per (run, role, step) of ``run_steps``.

    Args:
        run_steps: ``(run, role, step)`` in the order of ``step_tables``.
        checkpoints: generation's ``checkpoints`` (each step's ``model_dir``: its tokenizer).
        entropy_thresholds: one row per (run, step) with ``threshold`` (nats) and
            ``top_entropy_frac``; a step without a row gets None for both.
        step_tables: per (run, step), its ``sequences`` then its ``token_records``.
    """
    thresholds = {
        (str(r["run"]), int(r["step"])): r for r in entropy_thresholds.to_dict(orient="records")
    }
    steps = []
    for i, (run, role, step) in enumerate(run_steps):
        row = thresholds.get((run, int(step)), {})
        model = ((checkpoints.get(run) or {}).get("steps") or {}).get(str(step)) or {}
        steps.append(
            StepInput(
                run=run,
                role=role,
                step=int(step),
                sequences=step_tables[2 * i],
                records=step_tables[2 * i + 1],
                model_dir=model.get("model_dir"),
                threshold=row.get("threshold"),
                top_entropy_frac=row.get("top_entropy_frac"),
            )
        )
    return steps
