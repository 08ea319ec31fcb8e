"""The study explorer's data: every chosen response of every step, with per-response measures.

:func:`build_explorer` turns the merged records and sequences of each (run, step) into the
page's data; :func:`render_explorer` writes the page (``page.html``, ``page.css`` and
``page.js`` of this package with the helpers shared with the token report inlined:
:mod:`hed.report.page_common`). docs/explorer.md describes the page for users.

What is embedded is bounded (:class:`ExplorerOptions`): per run, ``responses_per_step``
(prompt_index, sample_index) keys chosen by a seeded shuffle
(:func:`hed.report.token_report.choose_keys`), the same keys at every step (so a row of the
compare view holds one response at each step), each cut after ``max_tokens_per_response``
tokens. The page lists what was left out.

Measures. Per response, over *all* its non-special tokens (also where the page cuts it):
``len`` (n_tokens of the sequence), ``ent`` (mean entropy, nats), ``nhe`` (high-entropy
tokens), ``anthro`` (high-entropy tokens whose word is anthropomorphic: Figure 2's count,
per response), and where the records hold the columns, ``amass`` (mean
``anthropomorphic_mass``), ``dlp`` (mean |Δlog p|, ``delta_logprob``). Reward and advantage
come from :func:`hed.core.advantage.response_advantages` (reward = correct, GRPO or Dr. GRPO
estimator). The Cov(log π, A) term of a token is verl's centred product
cov_i = (A_i − Ā)(log π_i − mean log π), Ā and mean log π being token means over the step's
non-special tokens of graded responses (as :mod:`hed.analysis.covariance`); a response's
``cov`` is the mean of its tokens' terms, (A − Ā)(mean log π of the response − mean log π).

Escaping: every block of data is :func:`hed.report.token_report.script_json` inside
``<script type="application/json">`` and the page builds its DOM with ``textContent`` only.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from hed.analysis.advantage_shaping import AdvantageShapingParams
from hed.core.advantage import response_advantages
from hed.errors import ConfigError
from hed.report import token_report as tr
from hed.report.explorer.advantages import attach, index_entry
from hed.report.explorer.options import ExplorerOptions
from hed.report.page_common import fill, page_asset
from hed.report.token_report import inputs as tri
from hed.report.token_report import payload as trp

FORMAT = "hed.report.explorer/1"
#: Optional per-token columns of the merged records: record column → the page's array name.
OPTIONAL_TOKEN_COLUMNS = {
    "anthropomorphic_mass": "amass",
    "reasoning_mass": "rmass",
    "delta_logprob": "dlp",
}
#: Columns read for every response of a step (the measures and the Cov means).
STAT_COLUMNS = [
    "prompt_index",
    "sample_index",
    "is_special",
    "logprob",
    "entropy",
    "is_high_entropy",
    "category",
]
#: Batch size (rows) of the pass over a step's records.
BATCH_ROWS = 262_144


# ------------------------------------------------------------------ per-response measures


def recorded_columns(records: Any) -> set[str]:
    """The column names of a step's merged records (``pyarrow.Table`` or ``Dataset``), less
    the optional token columns that are null throughout (records written before the column
    existed): the page then says they are missing instead of showing zeros."""
    names = set(records.schema.names)
    for column in OPTIONAL_TOKEN_COLUMNS:
        if column in names and not any(
            batch.column(0).null_count < batch.num_rows
            for batch in records.to_batches(columns=[column], batch_size=BATCH_ROWS)
        ):
            names.discard(column)
    return names


def response_stats(records: ds.Dataset) -> pd.DataFrame:
    """Sums over every response of a step, from one batched pass over its records.

    Memory: one batch of :data:`STAT_COLUMNS` (plus the optional columns) at a time and one
    row per response.

    Args:
        records: a step's merged records (lazy dataset).

    Returns:
        One row per (prompt_index, sample_index) (int64): ``n`` (non-special tokens),
        ``lp`` (Σ logprob, nats), ``ent`` (Σ entropy, nats), ``nhe`` (high-entropy tokens),
        ``anthro`` (high-entropy anthropomorphic tokens), and per optional column present
        ``amass`` (Σ anthropomorphic_mass), ``rmass``, ``dlp`` (Σ |delta_logprob|).
    """
    have = recorded_columns(records)
    optional = {c: n for c, n in OPTIONAL_TOKEN_COLUMNS.items() if c in have}
    parts = []
    for batch in records.to_batches(columns=STAT_COLUMNS + list(optional), batch_size=BATCH_ROWS):
        keep = pc.invert(pc.fill_null(batch.column("is_special"), False))
        table = pa.Table.from_batches([batch]).filter(keep)
        he = pc.fill_null(table["is_high_entropy"], False)
        anthro = pc.and_(he, pc.equal(pc.fill_null(table["category"], ""), "anthropomorphic"))
        cols = {
            "prompt_index": table["prompt_index"].cast(pa.int64()),
            "sample_index": table["sample_index"].cast(pa.int64()),
            "one": pa.array(np.ones(table.num_rows, np.int64)),
            "lp": table["logprob"].cast(pa.float64()),
            "ent": table["entropy"].cast(pa.float64()),
            "nhe": he.cast(pa.int64()),
            "anthro": anthro.cast(pa.int64()),
        }
        for column, name in optional.items():
            values = table[column].cast(pa.float64())
            cols[name] = pc.abs(values) if name == "dlp" else values
        parts.append(pa.table(cols))
    names = ["one", "lp", "ent", "nhe", "anthro", *optional.values()]
    if not parts:
        return pd.DataFrame(columns=["prompt_index", "sample_index", "n", *names[1:]])
    grouped = pa.concat_tables(parts).group_by(["prompt_index", "sample_index"])
    frame = grouped.aggregate([(n, "sum") for n in names]).to_pandas()
    frame.columns = [c.removesuffix("_sum") for c in frame.columns]
    return frame.rename(columns={"one": "n"})


def step_measures(
    sequences: pd.DataFrame, stats: pd.DataFrame, estimator: str
) -> tuple[pd.DataFrame, float | None, float | None]:
    """Per-response reward, advantage and measures of a step, and the step's Cov means.

    Args:
        sequences: the step's responses (prompt_index, sample_index, correct, n_tokens).
        stats: :func:`response_stats` of the step's records.
        estimator: ``grpo`` or ``dr_grpo``.

    Returns:
        (frame, mean_a, mean_lp): one row per response of ``sequences`` with reward, adv
        (NaN when ungraded), ent (mean entropy, nats), nhe, anthro, cov (mean Cov term),
        and the optional means; Ā and mean log π over the graded responses' tokens (None
        when no response is graded).
    """
    keys = sequences[["prompt_index", "sample_index"]].astype("int64")
    frame = keys.merge(stats, on=["prompt_index", "sample_index"], how="left")
    adv = response_advantages(sequences, estimators=(estimator,))
    frame = frame.merge(
        adv[["prompt_index", "sample_index", "reward", f"advantage_{estimator}"]],
        on=["prompt_index", "sample_index"],
        how="left",
    ).rename(columns={f"advantage_{estimator}": "adv"})
    n = frame["n"].fillna(0).to_numpy(np.float64)
    graded = frame["adv"].notna().to_numpy() & (n > 0)
    mean_a = mean_lp = None
    if graded.any():
        total = n[graded].sum()
        mean_a = float((frame["adv"].to_numpy()[graded] * n[graded]).sum() / total)
        mean_lp = float(frame["lp"].to_numpy()[graded].sum() / total)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_token = {
            c: frame[c] / frame["n"] for c in ("ent", "amass", "rmass", "dlp", "lp") if c in frame
        }
        frame = frame.assign(**per_token)
        if mean_a is None:
            frame["cov"] = np.nan
        else:
            frame["cov"] = (frame["adv"] - mean_a) * (frame["lp"] - mean_lp)
    return frame, mean_a, mean_lp


# ------------------------------------------------------------------ building the page data


def _num(value: Any, digits: int = 4) -> float | int | None:
    value = trp.nullable(value)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return trp.significant([value], digits)[0]


def _token_arrays(
    table: pa.Table, words: dict[str, int], advantage: np.ndarray, means: tuple
) -> dict[str, Any]:
    """The token report's per-token arrays plus ``lp`` (log π), ``cov`` and optional columns."""
    columns = trp.table_columns(table, words)
    lp = np.asarray(table["logprob"], dtype=np.float64)
    columns["lp"] = trp.significant(lp, 4)
    mean_a, mean_lp = means
    special = np.asarray(columns["sp"], dtype=bool)
    if mean_a is not None:
        cov = (advantage - mean_a) * (lp - mean_lp)
        valid = ~special & np.isfinite(cov)
        values = trp.significant(np.where(valid, cov, 0.0), 4)
        columns["cov"] = [v if ok else None for v, ok in zip(values, valid.tolist(), strict=True)]
    for column, name in OPTIONAL_TOKEN_COLUMNS.items():
        if column in table.column_names:
            values = np.asarray(pc.fill_null(table[column], np.nan), dtype=np.float64)
            columns[name] = [None if np.isnan(v) else v for v in trp.significant(values, 4)]
    return columns


def build_explorer(
    steps: Sequence[tr.StepInput],
    options: ExplorerOptions,
    *,
    prompts: pd.DataFrame | None = None,
    figure2: pd.DataFrame | None = None,
    title: str = "HED study explorer",
    tokenizers: Mapping[str, Any] | None = None,
    shaping: AdvantageShapingParams | None = None,
) -> dict[str, Any]:
    """The explorer's data: an index (runs, steps, Figure 2 rows, notes) and one block per step.

    Args:
        steps: one :class:`hed.report.token_report.StepInput` per (run, step), any order.
        options: :class:`ExplorerOptions`.
        prompts: the ``prompts`` table (prompt_index, prompt_id, prompt); None: no prompt text.
        figure2: the Figure 2 table (run, step, n_high_entropy, anthropomorphic_count, pass1,
            pass1_source); None: the rows are computed from the records (pass@1 = share of
            correct responses of the step).
        title: page title.
        tokenizers: ``{run: tokenizer}`` naming the alternatives (else ``model_dir``'s).
        shaping: ``analyses.advantage_shaping`` (``AdvantageShapingParams``): each graded
            response gets ``A``, its advantage under each scheme (:mod:`.advantages`); None: none.

    Returns:
        ``{"index": {...}, "blocks": [...]}``: the index (``format`` :data:`FORMAT`, options,
        runs with their steps, prompts, words, vocabulary and Figure 2 rows, notes) and per
        (run, step) a block ``{"responses": [...]}`` (header fields, measures and per-token
        arrays of each embedded response), referenced by the step's ``block`` number.

    Raises:
        ConfigError: ``options.steps`` names no step that exists.
    """
    by_run: dict[str, list[tr.StepInput]] = {}
    for item in sorted(steps, key=lambda i: (i.run, i.step)):
        if options.steps is None or item.step in options.steps:
            by_run.setdefault(item.run, []).append(item)
    notes: list[str] = []
    available = sorted({i.step for i in steps})
    if options.steps is not None:
        if not by_run:
            raise ConfigError(
                f"reporting.explorer.steps {list(options.steps)} matches no step of the runs "
                f"(steps available: {available}); set it to null or to existing steps"
            )
        left = [s for s in available if s not in options.steps]
        if left:
            notes.append(f"steps {left} left out (reporting.explorer.steps)")
    prompt_text: dict[int, str] = {}
    if prompts is not None and "prompt" in prompts.columns:
        prompt_text = dict(
            zip(prompts["prompt_index"].astype(int), prompts["prompt"].astype(str), strict=True)
        )
    runs, blocks, max_entropy = [], [], 0.0
    optional: set[str] = set()
    for run, items in by_run.items():
        payload, run_blocks, run_max = _run_payload(
            run,
            items,
            options,
            prompt_text,
            tokenizer=(tokenizers or {}).get(run),
            first_block=len(blocks),
            shaping=shaping,
        )
        notes.extend(payload.pop("notes"))
        optional.update(payload.pop("optional"))
        payload["fig2"] = _figure2_rows(run, payload, figure2)
        blocks.extend(run_blocks)
        runs.append(payload)
        max_entropy = max(max_entropy, run_max)
    missing = [c for c, n in OPTIONAL_TOKEN_COLUMNS.items() if n not in optional]
    if missing:
        notes.append(f"the records have no column(s) {missing}: those measures are not shown")
    index = {
        "format": FORMAT,
        "title": title,
        "options": {
            "responses_per_step": options.responses_per_step,
            "max_tokens_per_response": options.max_tokens_per_response,
            "steps": None if options.steps is None else list(options.steps),
            "seed": options.seed,
            "estimator": options.estimator,
        },
        "measures": sorted(optional),
        "shaping": index_entry(shaping),
        "scale": {"min": tr.ENTROPY_FLOOR, "max": trp.nice_ceiling(max(max_entropy, 0.01))},
        "runs": runs,
        "notes": notes,
    }
    return {"index": index, "blocks": blocks}


def _run_payload(
    run: str,
    items: list[tr.StepInput],
    options: ExplorerOptions,
    prompt_text: Mapping[int, str],
    *,
    tokenizer: Any | None,
    first_block: int,
    shaping: AdvantageShapingParams | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
    sequences = {i.step: tri.as_frame(i.sequences, tr.SEQUENCE_COLUMNS) for i in items}
    all_keys = [
        (p, s)
        for frame in sequences.values()
        for p, s in zip(frame["prompt_index"], frame["sample_index"], strict=True)
    ]
    keys = tr.choose_keys(all_keys, options.responses_per_step, options.seed)
    notes = []
    n_distinct = len(set(all_keys))
    if n_distinct > len(keys):
        notes.append(
            f"run {run}: {len(keys)} of {n_distinct} responses (prompt_index, sample_index) "
            f"embedded per step (reporting.explorer.responses_per_step = "
            f"{options.responses_per_step}, seed {options.seed}); the measures of the "
            "others are in the Figure 2 rows only"
        )
    source = "tokenizer" if tokenizer is not None else None
    if tokenizer is None:
        for item in items:
            tokenizer = tr.load_tokenizer(item.model_dir)
            if tokenizer is not None:
                source = f"the tokenizer of {item.model_dir}"
                break
    words: dict[str, int] = {"": 0}
    known: dict[int, str] = {}
    used_ids: set[int] = set()
    optional: set[str] = set()
    step_rows, blocks, max_entropy, n_cut = [], [], 0.0, 0
    for item in items:
        records = tri.as_dataset(item.records)
        frame = sequences[item.step]
        measures, mean_a, mean_lp = step_measures(frame, response_stats(records), options.estimator)
        by_key = {
            (int(p), int(s)): i
            for i, (p, s) in enumerate(
                zip(measures["prompt_index"], measures["sample_index"], strict=True)
            )
        }
        seq_by_key = {
            (int(r["prompt_index"]), int(r["sample_index"])): r
            for r in frame.to_dict(orient="records")
        }
        present = [k for k in keys if k in seq_by_key]
        have = recorded_columns(records)
        extra = [c for c in OPTIONAL_TOKEN_COLUMNS if c in have]
        table = tr.read_response_table(
            records,
            present,
            options.max_tokens_per_response,
            columns=[*tr.RECORD_COLUMNS, "logprob", *extra],
        )
        pair = np.stack([np.asarray(table["prompt_index"]), np.asarray(table["sample_index"])])
        row_of = np.array([by_key[(int(p), int(s))] for p, s in pair.T], dtype=np.int64)
        advantage = measures["adv"].to_numpy(np.float64)[row_of] if len(row_of) else np.zeros(0)
        columns = _token_arrays(table, words, advantage, (mean_a, mean_lp))
        optional.update(OPTIONAL_TOKEN_COLUMNS[c] for c in extra)
        starts = np.flatnonzero(np.r_[True, (pair[:, 1:] != pair[:, :-1]).any(axis=0)])
        bounds = np.r_[starts, table.num_rows].tolist() if table.num_rows else [0]
        shown = []
        for start, stop in itertools.pairwise(bounds):
            key = (int(pair[0, start]), int(pair[1, start]))
            response = trp.response_payload(columns, start, stop, seq_by_key[key])
            row = measures.iloc[by_key[key]]
            response["reward"] = _num(row.get("reward"))
            response["adv"] = _num(row.get("adv"))
            response["m"] = {
                "len": response["n_tokens"],
                **{name: _num(row.get(name)) for name in ("ent", "cov", *optional)},
                "nhe": int(row["nhe"]) if pd.notna(row.get("nhe")) else 0,
                "anthro": int(row["anthro"]) if pd.notna(row.get("anthro")) else 0,
            }
            n_cut += response["n_tokens"] > stop - start
            shown.append(response)
        attach(shown, records, frame, item.threshold, shaping)
        used_ids.update(columns["id"])
        used_ids.update(i for i in set(columns["kid"]) if i >= 0)
        known.update(zip(columns["id"], columns["text"], strict=True))
        if table.num_rows:
            max_entropy = max(max_entropy, float(pc.max(table["entropy"]).as_py() or 0.0))
        step_rows.append(
            {
                "step": int(item.step),
                "block": first_block + len(blocks),
                "threshold": _num(item.threshold),
                "top_entropy_frac": _num(item.top_entropy_frac),
                "n_responses": len(frame),
                "n_shown": len(shown),
                "n_correct": int(frame["correct"].astype("boolean").fillna(False).sum()),
                "n_graded": int(frame["correct"].notna().sum()),
                "mean_a": _num(mean_a),
                "mean_lp": _num(mean_lp),
                "n_high_entropy": int(measures["nhe"].fillna(0).sum()),
                "anthro": int(measures["anthro"].fillna(0).sum()),
            }
        )
        blocks.append({"run": run, "step": int(item.step), "responses": shown})
    if n_cut:
        notes.append(
            f"run {run}: {n_cut} response(s) cut after {options.max_tokens_per_response} tokens "
            "(reporting.explorer.max_tokens_per_response); their measures cover every token"
        )
    if tokenizer is None:
        source = (
            "the recorded token_text of sampled tokens (no tokenizer found in the checkpoint "
            "folders); alternatives never sampled in the embedded responses show as #id"
        )
        notes.append(f"run {run}: alternatives named from {source}")
    vocab = tr.vocabulary_texts(used_ids, tokenizer, known)
    prompt_ids: dict[int, str] = {}
    for frame in sequences.values():
        prompt_ids.update(
            zip(frame["prompt_index"].astype(int), frame["prompt_id"].astype(str), strict=True)
        )
    payload = {
        "run": run,
        "role": items[0].role,
        "steps": step_rows,
        "keys": [list(k) for k in keys],
        "prompts": {
            str(p): {"id": prompt_ids.get(p, ""), "text": prompt_text.get(p, "")}
            for p in sorted({p for p, _ in keys})
        },
        "words": list(words),
        "vocab": {str(i): t for i, t in vocab.items()},
        "vocab_source": source,
        "notes": notes,
        "optional": optional,
    }
    return payload, blocks, max_entropy


def _figure2_rows(
    run: str, payload: Mapping[str, Any], figure2: pd.DataFrame | None
) -> list[dict[str, Any]]:
    """Figure 2's rows of ``run``: step, n_high_entropy, anthropomorphic_count, pass1."""
    if figure2 is not None and len(figure2) and "run" in figure2:
        rows = figure2[figure2["run"].astype(str) == run].sort_values("step")
        return [
            {
                "step": int(r["step"]),
                "n_high_entropy": _num(r.get("n_high_entropy")),
                "anthro": _num(r.get("anthropomorphic_count")),
                "pass1": _num(r.get("pass1")),
                "pass1_source": trp.nullable(r.get("pass1_source")),
            }
            for r in rows.to_dict(orient="records")
        ]
    return [
        {
            "step": s["step"],
            "n_high_entropy": s["n_high_entropy"],
            "anthro": s["anthro"],
            "pass1": _num(s["n_correct"] / s["n_graded"]) if s["n_graded"] else None,
            "pass1_source": "generated",
        }
        for s in payload["steps"]
    ]


# ------------------------------------------------------------------ rendering


def render_explorer(data: Mapping[str, Any]) -> str:
    """The self-contained page for ``data`` (from :func:`build_explorer`).

    The index and each step's block travel as separate ``<script type="application/json">``
    elements (``hed-data``, ``hed-block-<n>``); the page parses a block only when a view
    needs it, and draws a response's tokens only while it is on screen. When drawn it sets
    ``document.body.dataset.ready = "1"`` and ``window.hedRenderMs``.

    Returns:
        A complete ``<!DOCTYPE html>`` document with inline CSS and JavaScript, a
        Content-Security-Policy that forbids every network request, and no external reference.
    """
    index = data["index"]
    parts = {
        "TITLE": html.escape(str(index.get("title", "HED study explorer"))),
        "CSS": page_asset(__package__, "page.css"),
        "JS": page_asset(__package__, "page.js"),
        "BLOCKS": "\n".join(
            f'<script type="application/json" id="hed-block-{i}">{tr.script_json(b)}</script>'
            for i, b in enumerate(data["blocks"])
        ),
        "DATA": tr.script_json(index),
    }
    # one pass over the template: a response holding "__DATA__" is never substituted
    return fill(page_asset(__package__, "page.html"), parts)
