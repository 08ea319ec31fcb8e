"""The token report's page data: one JSON-able mapping for every run, step and shown response.

:func:`build_report` is the entry point; the page (:mod:`hed.report.token_report.page`) draws
whatever it holds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from hed.errors import ConfigError
from hed.report.token_report.inputs import (
    SEQUENCE_COLUMNS,
    StepInput,
    as_dataset,
    as_frame,
    load_tokenizer,
    read_response_table,
    vocabulary_texts,
)
from hed.report.token_report.options import TokenReportOptions

FORMAT = "hed.report.token_report/1"
#: Category codes in the page's data (``cat`` arrays).
CATEGORY_CODES = {"other": 0, "anthropomorphic": 1, "reasoning": 2}
#: Entropies below this (nats) get the lightest colour; the log scale starts here.
ENTROPY_FLOOR = 1e-3
#: Characters of a prompt shown above its responses (the whole prompt is in a fold-out).
PROMPT_PREVIEW_CHARS = 240


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


def significant(values: Any, digits: int) -> list[float]:
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


def nullable(value: Any) -> Any:
    """``value`` as JSON can hold it: ``None`` for a missing value (None, pd.NA, NaN), a
    Python scalar for a NumPy one."""
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


def table_columns(table: pa.Table, words: dict[str, int]) -> dict[str, list[Any]]:
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
        "ent": significant(np.asarray(table["entropy"]), 4),
        "prob": significant(np.asarray(table["prob"]), 4),
        "kid": topk_ids.astype(np.int64).ravel().tolist(),
        "kp": significant(topk_probs.ravel(), 3),
        "w": codes[np.asarray(word.indices)].tolist() if len(codes) else [],
        "cat": [CATEGORY_CODES.get(c, 0) for c in category],
        "he": np.asarray(pc.fill_null(table["is_high_entropy"], False)).astype(int).tolist(),
        "sp": np.asarray(pc.fill_null(table["is_special"], False)).astype(int).tolist(),
    }


def response_payload(
    columns: Mapping[str, list[Any]], start: int, stop: int, seq: Mapping[str, Any]
) -> dict[str, Any]:
    """One response: its header fields and rows ``start:stop`` of the table's arrays."""
    n_tokens = nullable(seq.get("n_tokens"))
    return {
        "p": int(seq["prompt_index"]),
        "s": int(seq["sample_index"]),
        "correct": nullable(seq.get("correct")),
        "answer": nullable(seq.get("extracted_answer")),
        "finish": nullable(seq.get("finish_reason")),
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
        "scale": {"min": ENTROPY_FLOOR, "max": nice_ceiling(max(max_entropy, 0.01))},
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
    sequences = {i.step: as_frame(i.sequences, SEQUENCE_COLUMNS) for i in items}
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
            as_dataset(item.records), present, options.max_tokens_per_response
        )
        columns = table_columns(table, words)
        pair = np.stack([np.asarray(table["prompt_index"]), np.asarray(table["sample_index"])])
        starts = np.flatnonzero(np.r_[True, (pair[:, 1:] != pair[:, :-1]).any(axis=0)])
        bounds = np.r_[starts, table.num_rows].tolist() if table.num_rows else [0]
        shown = []
        for start, stop in itertools.pairwise(bounds):
            key = (int(pair[0, start]), int(pair[1, start]))
            response = response_payload(columns, start, stop, seq_by_key[key])
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
                "threshold": nullable(item.threshold),
                "top_entropy_frac": nullable(item.top_entropy_frac),
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


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 5 × 10^k that is ≥ ``value``."""
    exponent = math.floor(math.log10(value))
    for mantissa in (1, 2, 5, 10):
        ceiling = mantissa * 10.0**exponent
        if ceiling >= value * (1 - 1e-12):
            return float(f"{ceiling:.6g}")
    return float(10.0 ** (exponent + 1))
