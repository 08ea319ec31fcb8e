"""The catalogue of bad inputs: every case gives one actionable line and leaves nothing behind.

Each case below builds a small real bad input in ``tmp_path`` (a broken prompt file, a
checkpoint folder without weights, a parameters mapping with a wrong value, a CSV without its
column...), calls the real public function, node or dataset that meets it, and says which
HED error type it expects and which path, field or value the message must name. One test
runs them all and checks, for each:

* the error is a :class:`hed.errors.HEDError` of the expected type, or Kedro's one-line
  ``DatasetError`` wrapper (``<dataset>: <message>``) whose cause is one;
* its message is one line, names the offending thing and holds no traceback text;
* nothing was left behind: a target file does not exist (or keeps its bytes) and its folder
  holds no new entry (no temporary file).

The case ids fill the *case* column of ``docs/errors.md``; a test checks they line up.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from kedro.config import OmegaConfigLoader
from kedro.io import DataCatalog
from kedro.io.core import DatasetError, Version
from kedro.pipeline import Node

from hed.config.layout import layout_from_params
from hed.config.params import GenerationParams
from hed.core.command_line import update_command
from hed.core.entropy import NonFiniteLogitsError, token_distribution_stats
from hed.core.lexicon import parse_lexicon
from hed.decode.hf import load_model_and_tokenizer, resolve_dtype
from hed.errors import (
    CheckpointError,
    ConfigError,
    CredentialsError,
    HEDError,
    InputDataError,
    OutputWriteError,
)
from hed.io.datasets import (
    ArrowParquetDataset,
    PromptFileDataset,
    PublishedArtifactsDataset,
    write_parquet_atomically,
)
from hed.io.freshness import Freshness, StaleInputError
from hed.mini_rl.config import training_specs
from hed.mini_rl.manifest import clear_run_outputs
from hed.pass1.sources import parse_run_config
from hed.pipelines.aggregation.nodes import (
    check_sequences,
    check_token_records,
    compute_entropy_threshold,
    read_lexicon,
)
from hed.pipelines.generation.nodes import (
    build_prompt_set,
    generate_shard,
    resolve_checkpoints,
)
from hed.pipelines.metrics.nodes import collect_run_pass1, fetch_wandb_history, read_csv_pass1
from hed.pipelines.metrics.pipeline import create_pipeline as create_metrics_pipeline
from hed.pipelines.mini_rl.nodes import generate_task_sets
from hed.pipelines.publish.nodes import plan_publication
from hed.pipelines.reporting.nodes import plan_figures
from hed.records.atomic_io import install_atomic_local_writes
from hed.records.schema import SEQUENCE_SCHEMA, TOKEN_RECORD_SCHEMA
from hed.records.shard_metadata import GENERATION_METADATA_KEY
from hed.runners.slots import resolve_slots

REPO = Path(__file__).resolve().parents[1]
ERRORS_DOC = REPO / "docs" / "errors.md"
TRACEBACK_MARKERS = ("Traceback", 'File "')


# ------------------------------------------------------------------ the case machinery


@dataclass
class Ctx:
    """What a case gets: its own folder, pytest's monkeypatch and lazy fixtures."""

    tmp: Path
    monkeypatch: pytest.MonkeyPatch
    request: pytest.FixtureRequest

    def fixture(self, name: str) -> Any:
        return self.request.getfixturevalue(name)


@dataclass
class Expect:
    """A prepared bad input.

    Attributes:
        call: runs the real function / node / dataset on the bad input.
        error: the HED error type it must raise (directly or as the cause of Kedro's wrapper).
        names: substrings the message must contain (the offending path, field or value).
        outputs: files the call would write: each must keep its state (absent, or its bytes)
            and its folder must not gain an entry (a temporary file).
    """

    call: Callable[[], Any]
    error: type[HEDError]
    names: tuple[str, ...]
    outputs: tuple[Path, ...] = field(default=())


CASES: dict[str, Callable[[Ctx], Expect]] = {}


def case(case_id: str) -> Callable[[Callable[[Ctx], Expect]], Callable[[Ctx], Expect]]:
    """Register a case function under ``case_id`` (an id of docs/errors.md)."""

    def register(fn: Callable[[Ctx], Expect]) -> Callable[[Ctx], Expect]:
        assert case_id not in CASES, case_id
        CASES[case_id] = fn
        return fn

    return register


def _existing_folder(path: Path) -> Path:
    folder = path.parent
    while not folder.is_dir():
        folder = folder.parent
    return folder


def _state(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


# ------------------------------------------------------------------ small real inputs


def write_text(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


PROMPT_PARAMS = {
    "prompt_columns": ["problem", "question"],
    "answer_column": "answer",
    "num_prompts": None,
    "seed": 0,
}


def prompt_node_run(path: Path, params: dict[str, Any]) -> Callable[[], Any]:
    """Load a prompt file through the catalog and run the real ``build_prompt_set`` node."""
    catalog = DataCatalog({"raw_prompts": PromptFileDataset(filepath=str(path))})
    node = Node(build_prompt_set, ["raw_prompts", "params:prompts"], "prompts")

    def call() -> Any:
        raw = catalog.load("raw_prompts")
        return node.run({"raw_prompts": raw, "params:prompts": params})

    return call


def load_prompts(path: Path) -> Callable[[], Any]:
    """Load a prompt file through Kedro's catalog (as `kedro run` does)."""
    catalog = DataCatalog({"raw_prompts": PromptFileDataset(filepath=str(path))})
    return lambda: catalog.load("raw_prompts")


def hf_folder(path: Path, *, config: bool = True, weights: bool = True) -> Path:
    """A HuggingFace-looking model folder: config.json and/or a weights file."""
    path.mkdir(parents=True, exist_ok=True)
    if config:
        (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    if weights:
        (path / "model.safetensors").write_bytes(b"\0" * 16)
    return path


def runs_params(root: Path, **run: Any) -> dict[str, Any]:
    return {
        "runs": {"dapo": {"role": "single", "checkpoint_root": str(root), "steps": [20], **run}},
        "generation": {"num_shards": 1},
    }


def resolve(root: Path, steps: Any = (20,)) -> Callable[[], Any]:
    """The generation pipeline's ``resolve_checkpoints`` node on one run."""
    runs = {"dapo": {"role": "single", "checkpoint_root": str(root), "steps": list(steps)}}
    return lambda: resolve_checkpoints(runs, {"num_shards": 1})


GENERATION = {"num_shards": 1, "samples_per_prompt": 2, "max_new_tokens": 8, "top_p": 1.0}


def sampling_params_from(params: dict[str, Any]) -> Any:
    return GenerationParams.of(params).sampling


def sampling(**overrides: Any) -> Callable[[], Any]:
    return lambda: sampling_params_from({**GENERATION, **overrides})


def token_records(entropy: list[float], *, run: str = "dapo", step: int = 20) -> pa.Table:
    """A one-response shard of token records (TOKEN_RECORD_SCHEMA)."""
    n = len(entropy)
    columns = {
        "run": pa.array([run] * n).dictionary_encode(),
        "step": [step] * n,
        "shard": [0] * n,
        "prompt_index": [0] * n,
        "sample_index": [0] * n,
        "position": list(range(n)),
        "token_id": list(range(10, 10 + n)),
        "token_text": [" wait"] * n,
        "entropy": entropy,
        "logprob": [-1.0] * n,
        "prob": [float(np.exp(-1.0))] * n,
        "topk_token_ids": [[10]] * n,
        "topk_probs": [[0.4]] * n,
        "is_special": [False] * n,
        "anthropomorphic_mass": [None] * n,  # not recorded
        "reasoning_mass": [None] * n,
    }
    return pa.Table.from_pydict(columns).cast(TOKEN_RECORD_SCHEMA)


def parquet_dataset(path: Path, table: pa.Table) -> Any:
    """Write ``table`` to ``path`` and load it as the catalog does (a lazy Arrow dataset)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return ArrowParquetDataset(filepath=str(path)).load()


def metrics_params(sources: dict[str, Any], **run: Any) -> dict[str, Any]:
    return {"runs": {"dapo": {"sources": sources, **run}}}


REPORT_RUNS = {
    "dapo_with_clip": {"role": "with_clip", "steps": [20, 80]},
    "dapo_without_clip": {"role": "without_clip", "steps": [20, 80]},
}


def reporting_inputs(runs: dict[str, Any] = REPORT_RUNS) -> dict[str, pd.DataFrame]:
    """summary_by_step, token_probability_mass_high_entropy and pass1_for_figures of ``runs``."""
    keys = [(run, step) for run, cfg in runs.items() for step in cfg["steps"]]
    summary = pd.DataFrame(
        {
            "run": [r for r, _ in keys],
            "step": [s for _, s in keys],
            "n_tokens": 100,
            "n_high_entropy": 20,
            "n_high_entropy_anthropomorphic": 3,
        }
    )
    mass = pd.DataFrame(
        {
            "run": [r for r, _ in keys for _ in range(2)],
            "step": [s for _, s in keys for _ in range(2)],
            "word": ["wait", "so"] * len(keys),
            "category": ["anthropomorphic", "reasoning"] * len(keys),
            "count": [3, 2] * len(keys),
        }
    )
    pass1 = pd.DataFrame(
        {
            "run": [r for r, _ in keys],
            "step": [s for _, s in keys],
            "pass1": 0.4,
            "pass1_source": "csv",
        }
    )
    return {"summary": summary, "mass": mass, "pass1": pass1}


def plan(
    reporting: dict[str, Any], runs: dict[str, Any] = REPORT_RUNS, **frames: pd.DataFrame
) -> Callable[[], Any]:
    """The reporting pipeline's ``plan_figures`` node (it checks before anything is drawn)."""
    inputs = {**reporting_inputs(runs), **frames}
    return lambda: plan_figures(inputs["summary"], inputs["mass"], inputs["pass1"], runs, reporting)


STRICT = {"strict": True, "top_n_words": 20, "fig3": {"steps": [20, 80]}}


def resolved_config(env: str | None, artifacts: dict[str, Any]) -> dict[str, Any]:
    return {"env": env, "run_id": "2026-01-02T03.04.05.678Z", "artifacts": artifacts}


def mini_rl_params(**overrides: Any) -> dict[str, Any]:
    return {
        "runs": {"dapo_with_clip": {}},
        "base_model": {"model_dir": "data/01_raw/checkpoints/base/actor_hf"},
        "training": {"max_steps": 4, "save_every": 2},
        **overrides,
    }


# ------------------------------------------------------------------ prompts


@case("prompts-file-missing")
def _(t: Ctx) -> Expect:
    path = t.tmp / "data" / "01_raw" / "prompts" / "aime.jsonl"
    return Expect(load_prompts(path), InputDataError, (str(path), "does not exist", "raw_prompts"))


@case("prompts-file-is-folder")
def _(t: Ctx) -> Expect:
    path = t.tmp / "prompts.jsonl"
    path.mkdir()
    return Expect(load_prompts(path), InputDataError, (str(path), "is a folder"))


@case("prompts-file-empty")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "prompts.jsonl", "")
    return Expect(load_prompts(path), InputDataError, (str(path), "is empty"))


@case("prompts-no-rows")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "prompts.jsonl", "\n\n\n")
    return Expect(load_prompts(path), InputDataError, (str(path), "has no rows"))


@case("prompts-bad-jsonl")
def _(t: Ctx) -> Expect:
    path = write_text(
        t.tmp / "prompts.jsonl", '{"problem": "1+1", "answer": "2"}\n{"problem": "2+\n'
    )
    return Expect(
        load_prompts(path), InputDataError, (str(path), "line 2, column 13", "Unterminated string")
    )


@case("prompts-not-utf8")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "prompts.jsonl", '{"problem": "caf\xe9"}\n'.encode("latin-1"))
    return Expect(load_prompts(path), InputDataError, (str(path), "not UTF-8", "byte 16"))


@case("prompts-unsupported-format")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "prompts.csv", "problem,answer\n1+1,2\n")
    return Expect(load_prompts(path), InputDataError, (str(path), "'.csv'", ".jsonl or .parquet"))


@case("prompts-not-parquet")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "prompts.parquet", b"PAR1 this is not a parquet file")
    return Expect(load_prompts(path), InputDataError, (str(path), "cannot be read", "Parquet"))


@case("prompts-no-prompt-column")
def _(t: Ctx) -> Expect:
    path = t.tmp / "prompts.parquet"
    pd.DataFrame({"statement": ["1+1"], "answer": ["2"]}).to_parquet(path)
    return Expect(
        prompt_node_run(path, PROMPT_PARAMS),
        InputDataError,
        (str(path), "['problem', 'question']", "statement", "prompts.prompt_columns"),
    )


@case("prompts-empty-prompt")
def _(t: Ctx) -> Expect:
    path = write_text(
        t.tmp / "prompts.jsonl",
        '{"problem": "1+1", "answer": "2"}\n\n{"problem": "   ", "answer": "4"}\n',
    )  # the empty prompt is row 1 (0-based) on line 3 (editors' numbering; a blank line 2)
    return Expect(
        prompt_node_run(path, PROMPT_PARAMS), InputDataError, (str(path), "'problem'", "line 3")
    )


@case("prompts-num-prompts-too-large")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "prompts.jsonl", '{"problem": "1+1"}\n{"problem": "2+2"}\n')
    return Expect(
        prompt_node_run(path, {**PROMPT_PARAMS, "num_prompts": 64}),
        ConfigError,
        ("prompts.num_prompts is 64", str(path), "only 2 rows"),
    )


@case("prompts-num-prompts-not-integer")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "prompts.jsonl", '{"problem": "1+1"}\n')
    return Expect(
        prompt_node_run(path, {**PROMPT_PARAMS, "num_prompts": "all"}),
        ConfigError,
        ("prompts.num_prompts", "'all'"),
    )


@case("prompts-prompt-columns-missing")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "prompts.jsonl", '{"problem": "1+1"}\n')
    params = {**PROMPT_PARAMS, "prompt_columns": None}  # left out: the default columns
    return Expect(prompt_node_run(path, params), ConfigError, ("prompts.prompt_columns", "None"))


@case("prompts-seed-not-integer")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "prompts.jsonl", '{"problem": "1+1"}\n')
    return Expect(
        prompt_node_run(path, {**PROMPT_PARAMS, "seed": "abc"}),
        ConfigError,
        ("prompts.seed", "'abc'"),
    )


# ------------------------------------------------------------------ checkpoints


@case("checkpoints-root-missing")
def _(t: Ctx) -> Expect:
    root = t.tmp / "ckpt" / "dapo_with_clip"
    params = runs_params(root, steps="all")
    return Expect(lambda: layout_from_params(params), ConfigError, ("runs.dapo.steps", str(root)))


@case("checkpoints-root-without-steps")
def _(t: Ctx) -> Expect:
    root = t.tmp / "ckpt"
    (root / "step_20").mkdir(parents=True)  # not global_step_<N>
    params = runs_params(root, steps="all")
    return Expect(
        lambda: layout_from_params(params), ConfigError, (str(root), "no global_step_<N> folder")
    )


@case("checkpoints-step-missing")
def _(t: Ctx) -> Expect:
    root = t.tmp / "ckpt"
    hf_folder(root / "global_step_20" / "actor_hf")
    return Expect(
        resolve(root, steps=[20, 40]),
        CheckpointError,
        ("step 40", str(root / "global_step_40"), "`steps`"),
    )


@case("checkpoints-no-model-folder")
def _(t: Ctx) -> Expect:
    root = t.tmp / "ckpt"
    (root / "global_step_20" / "critic").mkdir(parents=True)
    return Expect(
        resolve(root),
        CheckpointError,
        ("step 20", str(root / "global_step_20" / "actor_hf"), "actor/huggingface"),
    )


@case("checkpoints-actor-needs-merging")
def _(t: Ctx) -> Expect:
    root = t.tmp / "ckpt"
    actor = root / "global_step_20" / "actor"
    write_text(actor / "model_world_size_2_rank_0.pt", b"\0")
    write_text(actor / "model_world_size_2_rank_1.pt", b"\0")
    return Expect(
        resolve(root),
        CheckpointError,
        (str(actor), "needs merging", str(actor.parent / "actor_hf")),
    )


@case("checkpoints-config-only")
def _(t: Ctx) -> Expect:
    root = t.tmp / "ckpt"
    folder = hf_folder(root / "global_step_20" / "actor" / "huggingface", weights=False)
    write_text(folder / "tokenizer.json", "{}")
    return Expect(resolve(root), CheckpointError, (str(folder), "no weights", "verl model_merger"))


@case("checkpoints-lora-only")
def _(t: Ctx) -> Expect:
    root = t.tmp / "ckpt"
    folder = root / "global_step_20" / "actor_hf"
    write_text(folder / "adapter_config.json", json.dumps({"peft_type": "LORA", "r": 8}))
    write_text(folder / "adapter_model.safetensors", b"\0" * 16)
    return Expect(resolve(root), CheckpointError, (str(folder), "LoRA adapter", "merge_and_unload"))


@case("checkpoints-no-config")
def _(t: Ctx) -> Expect:
    root = t.tmp / "ckpt"
    folder = hf_folder(root / "global_step_20" / "actor_hf", config=False)
    return Expect(resolve(root), CheckpointError, (str(folder), "no config.json"))


@case("checkpoints-no-tokenizer")
def _(t: Ctx) -> Expect:
    folder = hf_folder(t.tmp / "ckpt" / "global_step_20" / "actor_hf")
    return Expect(
        lambda: load_model_and_tokenizer(folder, "float32", "cpu"),
        CheckpointError,
        (str(folder), "tokenizer", "tokenizer.json"),
    )


@case("checkpoints-corrupt-weights")
def _(t: Ctx) -> Expect:
    smollm2 = t.fixture("smollm2_dir")
    folder = t.tmp / "ckpt" / "global_step_20" / "actor_hf"
    folder.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(smollm2 / name, folder / name)
    (folder / "model.safetensors").write_bytes(b"truncated by a full disk")
    prompts = pd.DataFrame(
        {"prompt_index": [0], "prompt_id": ["p0"], "prompt": ["1+1?"], "answer": ["2"]}
    )
    checkpoints = {"dapo": {"steps": {"20": {"model_dir": str(folder)}}}}
    params = {**GENERATION, "dtype": "float32", "torch_threads": 1}
    return Expect(
        lambda: generate_shard(prompts, checkpoints, {}, params, run="dapo", step=20, shard=0),
        CheckpointError,
        (str(folder), "cannot be loaded", "weights"),
    )


# ------------------------------------------------------------------ parameters


@case("params-runs-missing")
def _(t: Ctx) -> Expect:
    return Expect(
        lambda: layout_from_params({"runs": None, "generation": {"num_shards": 1}}),
        ConfigError,
        ("`runs`", "parameters.yml"),
    )


@case("params-run-name")
def _(t: Ctx) -> Expect:
    params = {"runs": {"dapo clip": {"checkpoint_root": str(t.tmp), "steps": [0]}}}
    return Expect(lambda: layout_from_params(params), ConfigError, ("'dapo clip'",))


@case("params-role-unknown")
def _(t: Ctx) -> Expect:
    params = runs_params(t.tmp, role="clip_higher")
    return Expect(
        lambda: layout_from_params(params), ConfigError, ("runs.dapo.role", "'clip_higher'")
    )


@case("params-checkpoint-root-missing")
def _(t: Ctx) -> Expect:
    params = runs_params(t.tmp, checkpoint_root="")
    return Expect(lambda: layout_from_params(params), ConfigError, ("runs.dapo.checkpoint_root",))


@case("params-steps-not-a-list")
def _(t: Ctx) -> Expect:
    params = runs_params(t.tmp, steps="20, 80, 200")
    return Expect(
        lambda: layout_from_params(params), ConfigError, ("runs.dapo.steps", "'20, 80, 200'")
    )


@case("params-steps-negative")
def _(t: Ctx) -> Expect:
    params = runs_params(t.tmp, steps=[20, -80])
    return Expect(lambda: layout_from_params(params), ConfigError, ("runs.dapo.steps", "-80"))


@case("params-steps-repeated")
def _(t: Ctx) -> Expect:
    params = runs_params(t.tmp, steps=[20, 80, 20])
    return Expect(
        lambda: layout_from_params(params), ConfigError, ("runs.dapo.steps", "[20, 80, 20]")
    )


@case("params-num-shards-zero")
def _(t: Ctx) -> Expect:
    params = {**runs_params(t.tmp), "generation": {"num_shards": 0}}
    return Expect(lambda: layout_from_params(params), ConfigError, ("generation.num_shards", "0"))


@case("params-generation-not-mapping")
def _(t: Ctx) -> Expect:
    params = {**runs_params(t.tmp), "generation": ["num_shards", 8]}
    return Expect(
        lambda: layout_from_params(params), ConfigError, ("`generation`", "['num_shards', 8]")
    )


@case("params-unknown-run")
def _(t: Ctx) -> Expect:
    layout = layout_from_params(runs_params(t.tmp))
    return Expect(lambda: layout.run("dapo_v2"), ConfigError, ("'dapo_v2'", "dapo"))


@case("params-temperature")
def _(t: Ctx) -> Expect:
    return Expect(sampling(temperature=0), ConfigError, ("temperature", "0"))


@case("params-top-p")
def _(t: Ctx) -> Expect:
    return Expect(sampling(top_p=1.5), ConfigError, ("top_p", "1.5", "(0, 1]"))


@case("params-top-k")
def _(t: Ctx) -> Expect:
    return Expect(sampling(top_k="ten"), ConfigError, ("top_k", "'ten'"))


@case("params-samples-per-prompt")
def _(t: Ctx) -> Expect:
    return Expect(
        sampling(samples_per_prompt=0), ConfigError, ("generation.samples_per_prompt", "0")
    )


@case("params-stats-kernel")
def _(t: Ctx) -> Expect:
    return Expect(sampling(stats_kernel="fast"), ConfigError, ("generation.stats_kernel", "'fast'"))


@case("params-temperature-not-a-number")
def _(t: Ctx) -> Expect:
    return Expect(sampling(temperature="hot"), ConfigError, ("generation.temperature", "'hot'"))


@case("params-max-new-tokens-missing")
def _(t: Ctx) -> Expect:
    params = {k: v for k, v in GENERATION.items() if k != "max_new_tokens"}
    return Expect(
        lambda: sampling_params_from(params), ConfigError, ("generation.max_new_tokens", "missing")
    )


@case("params-aggregation-not-mapping")
def _(t: Ctx) -> Expect:
    report = pd.DataFrame({"n_records": [3]})
    return Expect(
        lambda: compute_entropy_threshold(report, ["top_entropy_frac"], run="dapo", step=20),
        ConfigError,
        ("parameter `aggregation`", "parameters_aggregation.yml", "['top_entropy_frac']"),
    )


@case("params-dtype")
def _(t: Ctx) -> Expect:
    return Expect(lambda: resolve_dtype("fp8", "cpu"), ConfigError, ("dtype", "'fp8'", "bfloat16"))


@case("params-top-entropy-frac")
def _(t: Ctx) -> Expect:
    report = pd.DataFrame({"n_records": [3]})
    return Expect(
        lambda: compute_entropy_threshold(report, {"top_entropy_frac": 20}, run="dapo", step=20),
        ConfigError,
        ("aggregation.top_entropy_frac", "20", "(0, 1]"),
    )


# ------------------------------------------------------------------ generation


@case("generation-nan-logits")
def _(t: Ctx) -> Expect:
    logits = torch.randn(4, 300, generator=torch.Generator().manual_seed(0))
    logits[2, 17] = float("nan")
    assert issubclass(NonFiniteLogitsError, InputDataError)
    return Expect(
        lambda: token_distribution_stats(logits),
        NonFiniteLogitsError,
        ("NaN logits", "row 2", "1 of 4 rows", "dtype float32"),
    )


@case("generation-checkpoint-not-resolved")
def _(t: Ctx) -> Expect:
    prompts = pd.DataFrame(
        {"prompt_index": [0], "prompt_id": ["p0"], "prompt": ["x"], "answer": [None]}
    )
    checkpoints = {"dapo": {"steps": {"20": {"model_dir": str(t.tmp)}}}}
    return Expect(
        lambda: generate_shard(prompts, checkpoints, {}, GENERATION, run="dapo", step=40, shard=0),
        ConfigError,
        ("'dapo'", "step 40", "--nodes resolve_checkpoints`, then run your command again"),
    )


def vllm_shard(t: Ctx, vllm: dict[str, Any] | None = None, architecture: str | None = None):
    """``generate_shard`` with ``backend: vllm`` on a tiny model (64-wide heads), prepared."""
    from .conftest import build_tiny_model

    folder = build_tiny_model(
        t.tmp / "ckpt" / "global_step_20" / "actor_hf", t.fixture("tokenizer"), head_dim=64
    )
    if architecture is not None:
        config = json.loads((folder / "config.json").read_text())
        config["architectures"] = [architecture]
        (folder / "config.json").write_text(json.dumps(config))
    prompts = pd.DataFrame(
        {"prompt_index": [0], "prompt_id": ["p0"], "prompt": ["What is 1+1?"], "answer": ["2"]}
    )
    checkpoints = {"dapo": {"steps": {"20": {"model_dir": str(folder)}}}}
    params = {
        **GENERATION,
        "dtype": "float32",
        "backend": "vllm",
        "vllm": {"kv_cache_memory_bytes": 64 << 20, **(vllm or {})},
    }
    return folder, lambda: generate_shard(
        prompts, checkpoints, {}, params, run="dapo", step=20, shard=0
    )


@case("generation-vllm-not-installed")
def _(t: Ctx) -> Expect:
    _, call = vllm_shard(t)
    t.monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    return Expect(call, ConfigError, ("generation.backend is 'vllm'", "hed[vllm]", "backend: hf"))


@case("params-vllm-tensor-parallel")
def _(t: Ctx) -> Expect:
    from hed.decode.vllm import VLLMSettings

    return Expect(
        lambda: VLLMSettings(tensor_parallel_size=2),
        ConfigError,
        ("generation.vllm.tensor_parallel_size: 2", "one engine per GPU"),
    )


@case("vllm-port")
def _(t: Ctx) -> Expect:
    from hed.decode.vllm import slot_port

    t.monkeypatch.setenv("VLLM_PORT", "http")
    return Expect(slot_port, ConfigError, ("VLLM_PORT='http'", "1..65535"))


@case("generation-vllm-architecture")
def _(t: Ctx) -> Expect:
    folder, call = vllm_shard(t, architecture="NotARealModelForCausalLM")
    return Expect(
        call,
        CheckpointError,
        (str(folder), "NotARealModelForCausalLM", "not supported by vLLM", "backend: hf"),
    )


@case("generation-vllm-prompt-too-long")
def _(t: Ctx) -> Expect:
    _, call = vllm_shard(t, vllm={"max_model_len": 16})
    return Expect(
        call,
        ConfigError,
        ("prompt_index 0", "max_new_tokens = 8", "generation.vllm.max_model_len >=", "got 16"),
    )


@case("generation-vllm-kv-cache")
def _(t: Ctx) -> Expect:
    _, call = vllm_shard(t, vllm={"kv_cache_memory_bytes": 1 << 20, "max_model_len": 1024})
    return Expect(
        call,
        ConfigError,
        ("KV cache", "max_model_len = 1024", "kv_cache_memory_bytes = 1048576"),
    )


# ------------------------------------------------------------------ aggregation / shard records


@case("records-file-missing")
def _(t: Ctx) -> Expect:
    path = t.tmp / "token_records" / "dapo" / "step_20" / "shard_0.parquet"
    catalog = DataCatalog(
        {"dapo.step_20.shard_0.token_records": ArrowParquetDataset(filepath=str(path))}
    )
    return Expect(
        lambda: catalog.load("dapo.step_20.shard_0.token_records"),
        InputDataError,
        ("dapo.step_20.shard_0.token_records", str(path), "does not exist"),
    )


@case("records-no-version")
def _(t: Ctx) -> Expect:
    path = t.tmp / "token_records" / "dapo" / "step_20" / "shard_1.parquet"
    path.mkdir(parents=True)  # the versions folder is there, no version in it (deleted)
    name = "dapo.step_20.shard_1.token_records"
    catalog = DataCatalog(
        {name: ArrowParquetDataset(filepath=str(path), version=Version(None, None))}
    )
    return Expect(
        lambda: catalog.load(name), InputDataError, (name, str(path), "has no version", "kedro run")
    )


@case("records-not-parquet")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "shard_0.parquet", b"PAR1\0\0 killed while writing")
    return Expect(
        lambda: ArrowParquetDataset(filepath=str(path)).load(),
        InputDataError,
        (str(path), "not a readable Parquet file", "delete it"),
    )


@case("records-missing-column")
def _(t: Ctx) -> Expect:
    path = t.tmp / "shard_0.parquet"
    dataset = parquet_dataset(path, token_records([0.5, 0.1]).drop_columns(["entropy"]))
    sequences = pd.DataFrame(
        {"shard": [0], "prompt_index": [0], "sample_index": [0], "n_tokens": [2]}
    )
    prompts = pd.DataFrame({"prompt_index": [0], "prompt_id": ["p0"]})
    generation = {**GENERATION, "samples_per_prompt": 1}
    return Expect(
        lambda: check_token_records(
            sequences, prompts, generation, {}, {}, dataset, run="dapo", step=20
        ),
        InputDataError,
        (str(path), "missing column(s) entropy"),
    )


@case("records-missing-shard")
def _(t: Ctx) -> Expect:
    dataset = parquet_dataset(t.tmp / "shard_0.parquet", SEQUENCE_SCHEMA.empty_table())
    prompts = pd.DataFrame({"prompt_index": [0, 1], "prompt_id": ["p0", "p1"]})
    generation = {**GENERATION, "num_shards": 2, "samples_per_prompt": 1}
    return Expect(
        lambda: check_sequences(prompts, generation, {}, {}, dataset, run="dapo", step=20),
        InputDataError,
        ("dapo.step_20.shard_1.sequences", "generation.num_shards is 2"),
    )


@case("records-stale-shard")
def _(t: Ctx) -> Expect:
    path = t.tmp / "token_records" / "dapo" / "step_20" / "shard_0.sequences.parquet"
    recorded = {
        "run": "dapo",
        "step": 20,
        "shard": 0,
        "num_shards": 1,
        "sampling": {**GENERATION, "samples_per_prompt": 1, "temperature": 1.0},
    }
    table = SEQUENCE_SCHEMA.empty_table().replace_schema_metadata(
        {GENERATION_METADATA_KEY: json.dumps(recorded)}
    )
    dataset = parquet_dataset(path, table)
    prompts = pd.DataFrame({"prompt_index": [0], "prompt_id": ["p0"]})
    generation = {**GENERATION, "samples_per_prompt": 1, "temperature": 0.7}
    return Expect(
        lambda: check_sequences(prompts, generation, {}, {}, dataset, run="dapo", step=20),
        InputDataError,
        (str(path), "stale shard", "generation.temperature was 1.0", "is 0.7", "delete"),
    )


@case("records-nan-entropy")
def _(t: Ctx) -> Expect:
    path = t.tmp / "shard_0.parquet"
    dataset = parquet_dataset(path, token_records([0.5, float("nan"), 0.1]))
    report = pd.DataFrame({"n_records": [3]})
    return Expect(
        lambda: compute_entropy_threshold(
            report, {"top_entropy_frac": 0.2}, dataset, run="dapo", step=20
        ),
        InputDataError,
        (str(path), "column entropy is nan", "(0, 0, 1)"),
    )


# ------------------------------------------------------------------ lexicon


def lexicon_from_yaml(ctx: Ctx, yaml_text: str) -> Callable[[], Any]:
    """Load ``parameters_aggregation.yml`` with Kedro's config loader and run the merge node."""
    write_text(ctx.tmp / "conf" / "base" / "parameters_aggregation.yml", yaml_text)
    (ctx.tmp / "conf" / "local").mkdir(parents=True)
    loader = OmegaConfigLoader(
        conf_source=str(ctx.tmp / "conf"), base_env="base", default_run_env="local"
    )
    aggregation = loader["parameters"]["aggregation"]
    return lambda: read_lexicon(pd.DataFrame(), aggregation)


@case("lexicon-entry-not-string")
def _(t: Ctx) -> Expect:
    call = lexicon_from_yaml(
        t, "aggregation:\n  lexicon:\n    anthropomorphic: [wait, hmm, yes]\n    reasoning: [so]\n"
    )
    return Expect(call, ConfigError, ("aggregation.lexicon.anthropomorphic[2]", "True", "quote it"))


@case("lexicon-entry-number")
def _(t: Ctx) -> Expect:
    config = {"anthropomorphic": ["wait"], "reasoning": ["so", 1]}
    return Expect(
        lambda: parse_lexicon(config), ConfigError, ("aggregation.lexicon.reasoning[1]", "1", "int")
    )


@case("lexicon-entry-not-a-word")
def _(t: Ctx) -> Expect:
    config = {"reasoning": ["so", "let us"]}
    return Expect(
        lambda: parse_lexicon(config),
        ConfigError,
        ("aggregation.lexicon.reasoning[1]", "'let us'", "docs/aggregation.md"),
    )


@case("lexicon-category-name")
def _(t: Ctx) -> Expect:
    config = {"anthropomorphic": ["wait"], "other": ["the"]}
    return Expect(lambda: parse_lexicon(config), ConfigError, ("category 'other'",))


@case("lexicon-words-not-a-list")
def _(t: Ctx) -> Expect:
    config = {"anthropomorphic": "wait, hmm"}
    return Expect(
        lambda: parse_lexicon(config),
        ConfigError,
        ("aggregation.lexicon.anthropomorphic", "'wait, hmm'", "list of words"),
    )


@case("lexicon-not-a-mapping")
def _(t: Ctx) -> Expect:
    call = lexicon_from_yaml(t, "aggregation:\n  lexicon:\n    - wait\n    - so\n")
    return Expect(call, ConfigError, ("aggregation.lexicon", "['wait', 'so']"))


# ------------------------------------------------------------------ metrics sources


@case("metrics-wandb-no-key")
def _(t: Ctx) -> Expect:
    t.monkeypatch.delenv("WANDB_API_KEY", raising=False)
    t.monkeypatch.setenv("NETRC", str(t.tmp / "no-netrc"))  # nor a key from `wandb login`
    params = metrics_params({"wandb": {"entity": "team", "project": "grpo", "run_id": "9x8y7z"}})
    return Expect(
        lambda: fetch_wandb_history(params, run="dapo"),
        ConfigError,
        ("W&B API key", "conf/local/credentials.yml", "WANDB_API_KEY"),
    )


@case("metrics-wandb-unreachable")
def _(t: Ctx) -> Expect:
    import socket

    probe = socket.create_server(("127.0.0.1", 0))  # a port nobody listens on
    port = probe.getsockname()[1]
    probe.close()
    t.monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    source = {"run": "team/grpo/9x8y7z", "base_url": f"http://127.0.0.1:{port}"}
    return Expect(
        lambda: fetch_wandb_history(metrics_params({"wandb": source}), run="dapo"),
        InputDataError,
        (f"cannot reach W&B at 127.0.0.1:{port}", "wandb_offline"),
    )


@case("metrics-wandb-proxy-unreachable")
def _(t: Ctx) -> Expect:
    import socket

    probe = socket.create_server(("127.0.0.1", 0))  # a port nobody listens on
    port = probe.getsockname()[1]
    probe.close()
    t.monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    for name in ("NO_PROXY", "no_proxy", "https_proxy"):
        t.monkeypatch.delenv(name, raising=False)
    t.monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    source = {"run": "team/grpo/9x8y7z", "base_url": "https://wandb.invalid"}
    return Expect(
        lambda: fetch_wandb_history(metrics_params({"wandb": source}), run="dapo"),
        InputDataError,
        (f"cannot reach the proxy 127.0.0.1:{port} (HTTPS_PROXY) for W&B", "wandb_offline"),
    )


@case("metrics-wandb-run-path")
def _(t: Ctx) -> Expect:
    params = metrics_params({"wandb": {"run": "team/9x8y7z"}})
    return Expect(
        lambda: parse_run_config(params, "dapo"),
        ConfigError,
        ("metrics.runs.dapo.sources.wandb.run", "'team/9x8y7z'", "entity/project/run_id"),
    )


@case("metrics-wandb-project-page")
def _(t: Ctx) -> Expect:
    url = "https://wandb.ai/team/grpo/workspace?nw=nwuserme"
    params = metrics_params({"wandb": {"run": url}})
    return Expect(
        lambda: parse_run_config(params, "dapo"),
        ConfigError,
        ("metrics.runs.dapo.sources.wandb.run", f"'{url}'", "project page", "/runs/<run_id>"),
    )


@case("metrics-wandb-no-run")
def _(t: Ctx) -> Expect:
    params = metrics_params({"wandb": {"entity": "team", "project": "grpo"}})
    return Expect(
        lambda: parse_run_config(params, "dapo"),
        ConfigError,
        ("metrics.runs.dapo.sources.wandb names no run", "run_id", "name"),
    )


@case("metrics-offline-folder-missing")
def _(t: Ctx) -> Expect:
    folder = t.tmp / "wandb" / "offline-run-20260101_000000-abc123"
    params = metrics_params({"wandb_offline": {"path": str(folder)}})
    return Expect(
        lambda: fetch_wandb_history(params, run="dapo"),
        InputDataError,
        (str(folder), "does not exist", "wandb_offline"),
    )


@case("metrics-offline-no-log")
def _(t: Ctx) -> Expect:
    folder = t.tmp / "wandb" / "offline-run-20260101_000000-abc123"
    write_text(folder / "files" / "config.yaml", "lr: 1e-6\n")
    params = metrics_params({"wandb_offline": {"path": str(folder)}})
    return Expect(
        lambda: fetch_wandb_history(params, run="dapo"),
        InputDataError,
        (str(folder), "no run-*.wandb"),
    )


@case("metrics-offline-several-runs")
def _(t: Ctx) -> Expect:
    folder = t.tmp / "wandb"
    for name in ("offline-run-1-aaa", "offline-run-2-bbb"):
        write_text(folder / name / f"run-{name[-3:]}.wandb", b"\0")
    params = metrics_params({"wandb_offline": {"path": str(folder)}})
    return Expect(
        lambda: fetch_wandb_history(params, run="dapo"),
        InputDataError,
        (str(folder), "offline-run-1-aaa", "offline-run-2-bbb"),
    )


@case("metrics-offline-log-empty")
def _(t: Ctx) -> Expect:
    import wandb  # noqa: F401 - a declared dependency: the case needs its offline writer

    log = write_text(t.tmp / "wandb" / "offline-run-1-abc" / "run-abc.wandb", b"")
    params = metrics_params({"wandb_offline": {"path": str(log.parent)}})
    return Expect(
        lambda: fetch_wandb_history(params, run="dapo"),
        InputDataError,
        (str(log), "no history rows", "the log is empty"),
    )


@case("metrics-offline-log-corrupt")
def _(t: Ctx) -> Expect:
    import wandb  # noqa: F401 - a declared dependency: the case needs its offline writer

    log = write_text(t.tmp / "wandb" / "offline-run-1-abc" / "run-abc.wandb", b"not a log")
    params = metrics_params({"wandb_offline": {"path": str(log.parent)}})
    return Expect(
        lambda: fetch_wandb_history(params, run="dapo"),
        InputDataError,
        ("cannot read W&B offline run", str(log)),
    )


@case("metrics-csv-missing")
def _(t: Ctx) -> Expect:
    path = t.tmp / "metrics" / "dapo.csv"
    params = metrics_params({"csv": {"path": str(path)}})
    return Expect(
        lambda: read_csv_pass1(params, run="dapo"), InputDataError, (str(path), "does not exist")
    )


@case("metrics-csv-empty")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "dapo.csv", "")
    params = metrics_params({"csv": {"path": str(path)}})
    return Expect(
        lambda: read_csv_pass1(params, run="dapo"), InputDataError, (str(path), "cannot be read")
    )


@case("metrics-csv-no-pass1-column")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "dapo.csv", "step,acc\n20,0.31\n80,0.42\n")
    params = metrics_params({"csv": {"path": str(path)}})
    return Expect(
        lambda: read_csv_pass1(params, run="dapo"),
        InputDataError,
        (str(path), "no column 'pass1'", "pass1_column", "step, acc"),
    )


@case("metrics-csv-no-step-column")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "dapo.csv", "global_step,pass1\n20,0.31\n")
    params = metrics_params({"csv": {"path": str(path)}})
    return Expect(
        lambda: read_csv_pass1(params, run="dapo"),
        InputDataError,
        (str(path), "no column 'step'", "step_column", "global_step"),
    )


@case("metrics-csv-not-a-number")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "dapo.csv", "step,pass1\n20,0.31\n80,n/a%\n")
    params = metrics_params({"csv": {"path": str(path)}})
    return Expect(
        lambda: read_csv_pass1(params, run="dapo"),
        InputDataError,
        (str(path), "column pass1", "'n/a%'"),
    )


@case("metrics-csv-step-not-integer")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "dapo.csv", "step,pass1\n20,0.31\n80.5,0.42\n")
    params = metrics_params({"csv": {"path": str(path)}})
    return Expect(
        lambda: read_csv_pass1(params, run="dapo"),
        InputDataError,
        (str(path), "column step", "80.5", "not an integer"),
    )


@case("metrics-source-unknown")
def _(t: Ctx) -> Expect:
    params = {**runs_params(t.tmp), "metrics": metrics_params({"tensorboard": {"path": "tb"}})}
    layout = layout_from_params(params)
    return Expect(
        lambda: create_metrics_pipeline(layout, params),
        ConfigError,
        ("metrics.runs.dapo.sources", "'tensorboard'", "wandb_offline"),
    )


@case("metrics-source-option-missing")
def _(t: Ctx) -> Expect:
    params = metrics_params({"csv": {"step_column": "step"}})
    return Expect(
        lambda: parse_run_config(params, "dapo"),
        ConfigError,
        ("metrics.runs.dapo.sources.csv.path",),
    )


@case("metrics-source-option-unknown")
def _(t: Ctx) -> Expect:
    params = metrics_params({"csv": {"path": "x.csv", "pass1": "acc"}})
    return Expect(
        lambda: parse_run_config(params, "dapo"),
        ConfigError,
        ("metrics.runs.dapo.sources.csv", "option(s) pass1", "pass1_column"),
    )


@case("metrics-two-wandb-sources")
def _(t: Ctx) -> Expect:
    params = metrics_params(
        {"wandb": {"entity": "e", "project": "p", "run_id": "r"}, "wandb_offline": {"path": "w"}}
    )
    return Expect(
        lambda: parse_run_config(params, "dapo"),
        ConfigError,
        ("metrics.runs.dapo.sources", "both wandb and wandb_offline"),
    )


@case("metrics-figure-source-not-listed")
def _(t: Ctx) -> Expect:
    params = metrics_params({"generated": {}}, figure_source="wandb")
    return Expect(
        lambda: parse_run_config(params, "dapo"),
        ConfigError,
        ("metrics.runs.dapo.figure_source", "'wandb'", "generated"),
    )


@case("metrics-generated-no-column")
def _(t: Ctx) -> Expect:
    summary = pd.DataFrame({"run": ["dapo"], "step": [20], "n_tokens": [100]})
    params = metrics_params({"generated": {}})
    return Expect(
        lambda: collect_run_pass1(
            params, summary_by_step=summary, run="dapo", checkpoint_steps=[20]
        ),
        InputDataError,
        ("summary_by_step", "pass1_generated", "aggregation"),
    )


# ------------------------------------------------------------------ reporting (strict mode)


@case("reporting-strict-fig3-steps-missing")
def _(t: Ctx) -> Expect:
    return Expect(
        plan({**STRICT, "fig3": {"steps": None}}),
        ConfigError,
        ("reporting.strict", "reporting.fig3.steps is not set", "[20, 80, 200]"),
    )


@case("reporting-strict-role-pair-missing")
def _(t: Ctx) -> Expect:
    runs = {"dapo_with_clip": REPORT_RUNS["dapo_with_clip"]}
    return Expect(
        plan(STRICT, runs=runs),
        ConfigError,
        ("role pair", "without_clip", "dapo_with_clip=with_clip", "reporting.strict: false"),
    )


@case("reporting-strict-fig3-step-without-records")
def _(t: Ctx) -> Expect:
    return Expect(
        plan({**STRICT, "fig3": {"steps": [20, 200]}}),
        ConfigError,
        ("run dapo_with_clip", "run dapo_without_clip", "[200]", "token_probability_mass"),
    )


@case("reporting-strict-run-without-pass1")
def _(t: Ctx) -> Expect:
    pass1 = reporting_inputs()["pass1"]
    pass1.loc[pass1["run"] == "dapo_without_clip", "pass1"] = np.nan
    return Expect(
        plan(STRICT, pass1=pass1),
        ConfigError,
        ("run dapo_without_clip", "no pass@1 at any of its steps", "figure source: csv"),
    )


@case("reporting-fig3-steps-malformed")
def _(t: Ctx) -> Expect:
    return Expect(
        plan({**STRICT, "fig3": {"steps": "20, 80, 200"}}),
        ConfigError,
        ("reporting.fig3.steps", "'20, 80, 200'"),
    )


@case("reporting-top-n-words")
def _(t: Ctx) -> Expect:
    return Expect(plan({**STRICT, "top_n_words": 0}), ConfigError, ("reporting.top_n_words", "0"))


@case("reporting-section-malformed")
def _(t: Ctx) -> Expect:
    return Expect(plan({**STRICT, "fig3": [20, 80]}), ConfigError, ("reporting.fig3", "[20, 80]"))


@case("reporting-strict-not-boolean")
def _(t: Ctx) -> Expect:
    return Expect(plan({**STRICT, "strict": "false"}), ConfigError, ("reporting.strict", "'false'"))


@case("reporting-figure-style")
def _(t: Ctx) -> Expect:
    return Expect(
        plan({**STRICT, "figure2": {"dpi": 0}}), ConfigError, ("reporting.figure2.dpi", "got 0")
    )


# ------------------------------------------------------------------ publish


@case("publish-other-environment")
def _(t: Ctx) -> Expect:
    config = resolved_config("qae_repro", {"figure2_png": {"path": "a.png", "filepath": "a.png"}})
    return Expect(
        lambda: plan_publication(config, {"env": "local"}, {"env_name": None}),
        ConfigError,
        ("'qae_repro'", "kedro run --pipelines reporting"),
    )


@case("publish-no-artifact-paths")
def _(t: Ctx) -> Expect:
    config = resolved_config(None, {"figure2_png": {"filepath": "a.png"}})
    return Expect(
        lambda: plan_publication(config, {"env": None}, {}),
        ConfigError,
        ("figure2_png", "ProvenanceHooks"),
    )


@case("publish-env-name")
def _(t: Ctx) -> Expect:
    config = resolved_config(None, {"figure2_png": {"path": "a.png", "filepath": "a.png"}})
    return Expect(
        lambda: plan_publication(config, {"env": None}, {"env_name": "../qae"}),
        ConfigError,
        ("publish.env_name", "'../qae'"),
    )


@case("publish-source-missing")
def _(t: Ctx) -> Expect:
    root = t.tmp / "results" / "final_artifacts"
    catalog = DataCatalog({"final_artifacts": PublishedArtifactsDataset(filepath=str(root))})
    source = t.tmp / "data" / "08_reporting" / "figure2.png"
    plan_ = {
        "env": "base",
        "project_path": str(t.tmp),
        "files": {"figure2.png": {"path": str(source)}},
    }
    return Expect(
        lambda: catalog.save("final_artifacts", plan_),
        InputDataError,
        ("final_artifacts", str(source), "do not exist"),
        outputs=(root / "base" / "figure2.png", root / "base" / "MANIFEST.json"),
    )


@case("publish-destination-blocked")
def _(t: Ctx) -> Expect:
    results = write_text(t.tmp / "results", "not a folder")
    source = write_text(t.tmp / "figure2.png", b"\x89PNG")
    dataset = PublishedArtifactsDataset(filepath=str(results / "final_artifacts"))
    plan_ = {
        "env": "base",
        "project_path": str(t.tmp),
        "files": {"figure2.png": {"path": str(source)}},
    }
    return Expect(
        lambda: dataset.save(plan_),
        OutputWriteError,
        (str(results), "is a file, not a folder"),
        outputs=(results,),
    )


def _tiny_bundle(t: Ctx):
    from hed.io.study_bundle import BundleFile, StudyBundle

    png = write_text(t.tmp / "data" / "figure2.png", b"\x89PNG")
    return StudyBundle(
        study="study", run_id="r1", git_commit=None, config={"run_id": "r1"},
        files=(BundleFile("figures/figure2.png", str(png), "figure", "figure2_png"),),
    )  # fmt: skip


@case("publish-wandb-no-key")
def _(t: Ctx) -> Expect:
    from hed.config.publish import WandbPublishParams
    from hed.io.publication_datasets import WandbRunDataset

    t.monkeypatch.delenv("WANDB_API_KEY", raising=False)
    t.monkeypatch.setenv("NETRC", str(t.tmp / "no_netrc"))
    t.monkeypatch.setenv("WANDB_CONFIG_DIR", str(t.tmp / "wandb_config"))
    receipt = t.tmp / "publications" / "wandb.json"
    dataset = WandbRunDataset(filepath=str(receipt))
    bundle = _tiny_bundle(t)
    settings = WandbPublishParams(enabled=True, project="p", mode="online", dir=str(t.tmp / "w"))
    return Expect(
        lambda: dataset.save({"bundle": bundle, "settings": settings}),
        CredentialsError,
        ("no W&B API key to publish", "wandb login", "WANDB_API_KEY"),
        outputs=(receipt, t.tmp / "w"),
    )


@case("publish-hub-no-token")
def _(t: Ctx) -> Expect:
    from hed.config.publish import HubPublishParams
    from hed.io.publication_datasets import HubCommitDataset

    t.monkeypatch.delenv("HF_TOKEN", raising=False)
    t.monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    t.monkeypatch.setenv("HF_HOME", str(t.tmp / "hf_home"))
    receipt = t.tmp / "publications" / "hub.json"
    dataset = HubCommitDataset(filepath=str(receipt))
    bundle = _tiny_bundle(t)
    settings = HubPublishParams(enabled=True, repo_id="me/study")
    return Expect(
        lambda: dataset.save({"bundle": bundle, "settings": settings}),
        CredentialsError,
        ("Hugging Face token", "hf auth login", "HF_TOKEN"),
        outputs=(receipt,),
    )


@case("publish-destination-target-missing")
def _(t: Ctx) -> Expect:
    from hed.config.publish import publish_params

    return Expect(
        lambda: publish_params({"hub": {"enabled": True}}),
        ConfigError,
        ("publish.hub.repo_id is not set", "parameters_publish.yml"),
    )


@case("publish-hf-data-root")
def _(t: Ctx) -> Expect:
    from types import SimpleNamespace

    from hed.hooks import session_data_root

    context = SimpleNamespace(
        config_loader={"globals": {"data_root": "hf://datasets/me/study"}}, project_path=t.tmp
    )
    return Expect(
        lambda: session_data_root(context),
        ConfigError,
        ("hf://datasets/me/study", "kedro run --pipelines publish"),
    )


# ------------------------------------------------------------------ outputs (disk)


@case("outputs-folder-is-a-file")
def _(t: Ctx) -> Expect:
    blocker = write_text(t.tmp / "data" / "02_intermediate", "a file where a folder should be")
    target = blocker / "token_records" / "dapo" / "step_20" / "shard_0.parquet"
    dataset = ArrowParquetDataset(filepath=str(target), schema="token_records")
    return Expect(
        lambda: dataset.save(token_records([0.5, 0.1])),
        OutputWriteError,
        (str(target), str(blocker), "is a file, not a folder"),
        outputs=(target, blocker),
    )


@case("outputs-versioned-csv-blocked")
def _(t: Ctx) -> Expect:
    install_atomic_local_writes()  # the filesystem a run's datasets get (AtomicWritesHooks)
    blocker = write_text(t.tmp / "08_reporting", "a file where a folder should be")
    catalog = DataCatalog.from_config(
        {
            "figure3_table": {
                "type": "pandas.CSVDataset",
                "filepath": str(blocker / "tables" / "figure3.csv"),
                "versioned": True,
            }
        }
    )
    return Expect(
        lambda: catalog.save("figure3_table", pd.DataFrame({"word": ["wait"], "count": [3]})),
        OutputWriteError,
        ("figure3_table", str(blocker), "is a file, not a folder"),
        outputs=(blocker,),
    )


@case("outputs-unwritable-folder")
def _(t: Ctx) -> Expect:
    folder = t.tmp / "04_feature"
    reason = t.fixture("read_only_folder")(folder)  # a read-only mount as root, else chmod 555
    target = folder / "high_entropy_positions.parquet"
    remedy = "mounted read-only" if reason == "Read-only file system" else "permissions"
    return Expect(
        lambda: write_parquet_atomically(target, pa.table({"a": [1]})),
        OutputWriteError,
        (str(target), reason, remedy),
        outputs=(target,),
    )


@case("outputs-disk-full")
def _(t: Ctx) -> Expect:
    target = t.tmp / "03_primary" / "step_20.parquet"
    dataset = ArrowParquetDataset(filepath=str(target))
    dataset.save(pa.table({"entropy": [0.1, 0.2]}))  # the complete file of an earlier run

    def no_space(self: Any, table: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    t.monkeypatch.setattr(pq.ParquetWriter, "write_table", no_space)
    return Expect(
        lambda: dataset.save(pa.table({"entropy": [0.3, 0.4, 0.5]})),
        OutputWriteError,
        (str(target), "No space left on device", "free disk space"),
        outputs=(target,),
    )


# ------------------------------------------------------------------ runner


@case("runner-too-many-gpus")
def _(t: Ctx) -> Expect:
    return Expect(lambda: resolve_slots(4096), ConfigError, ("gpus=4096", "gpus=cpu"))


@case("runner-cpu-workers")
def _(t: Ctx) -> Expect:
    return Expect(lambda: resolve_slots("cpu", 0), ConfigError, ("cpu_workers=0",))


@case("runner-unknown-param")
def _(t: Ctx) -> Expect:
    from hed.runners.gpu import GPURunner

    return Expect(lambda: GPURunner(gpu="cpu"), ConfigError, ("unknown --runner-params gpu",))


# ------------------------------------------------------------------ mini_rl


@case("mini-rl-task-set-not-written")
def _(t: Ctx) -> Expect:
    from hed.mini_rl.datasets import TaskSetDataset

    path = t.tmp / "prompts" / "mini_arith_validation.jsonl"
    return Expect(
        lambda: TaskSetDataset(filepath=str(path)).load(),
        InputDataError,
        (str(path), "mini_rl pipeline writes it", "kedro run --env mini_dapo"),
    )


@case("mini-rl-run-not-in-runs")
def _(t: Ctx) -> Expect:
    return Expect(
        lambda: training_specs(mini_rl_params(), {"dapo": {}}, check_trainer_args=False),
        ConfigError,
        ("mini_rl.runs.dapo_with_clip", "`runs`"),
    )


@case("mini-rl-steps-not-saved")
def _(t: Ctx) -> Expect:
    runs = {"dapo_with_clip": {"checkpoint_root": str(t.tmp), "steps": [0, 3]}}
    return Expect(
        lambda: training_specs(mini_rl_params(), runs, check_trainer_args=False),
        ConfigError,
        ("runs.dapo_with_clip.steps", "[3]", "[0, 2, 4]"),
    )


@case("mini-rl-reward")
def _(t: Ctx) -> Expect:
    runs = {"dapo_with_clip": {"checkpoint_root": str(t.tmp)}}
    return Expect(
        lambda: training_specs(mini_rl_params(reward="exact"), runs, check_trainer_args=False),
        ConfigError,
        ("mini_rl.reward", "'exact'", "integer_match"),
    )


@case("mini-rl-task-kind")
def _(t: Ctx) -> Expect:
    task = {"num_train": 4, "num_validation": 2, "seed": 0, "kinds": ["add", "calculus"]}
    return Expect(
        lambda: generate_task_sets(task), ConfigError, ("mini_rl.task.kinds", "'calculus'")
    )


@case("mini-rl-foreign-checkpoints")
def _(t: Ctx) -> Expect:
    root = t.tmp / "checkpoints" / "dapo_with_clip"
    weights = hf_folder(root / "global_step_100" / "actor_hf") / "model.safetensors"
    runs = {"dapo_with_clip": {"checkpoint_root": str(root)}}
    (spec,) = training_specs(mini_rl_params(), runs, check_trainer_args=False)
    return Expect(
        lambda: clear_run_outputs(spec),
        ConfigError,
        (str(root), "steps [100]", "runs.dapo_with_clip.checkpoint_root"),
        outputs=(weights,),
    )


# ------------------------------------------------------------------ dynamics (and Figure 2 measure)


@case("reporting-fig2-measure")
def _(t: Ctx) -> Expect:
    return Expect(
        plan({**STRICT, "fig2_measure": "ratio"}),
        ConfigError,
        ("reporting.fig2_measure", "'ratio'"),
    )


def dynamics_step(t: Ctx, correct=None):
    """A hand-made merged step (tests/dynamics_reference.py) under ``t.tmp``."""
    from .dynamics_reference import RESPONSES, random_step, thresholds_row, write_step

    records, sequences = random_step(correct or RESPONSES)
    return records, sequences, thresholds_row(records), *write_step(t.tmp, records, sequences)


@case("dynamics-records-not-of-sequences")
def _(t: Ctx) -> Expect:
    from hed.pipelines.dynamics.nodes import tabulate_advantage_covariance

    from .dynamics_reference import LEXICON, write_step

    records, sequences, thresholds, records_ds, _ = dynamics_step(t)
    _, fewer = write_step(t.tmp / "fewer", records, sequences.iloc[:-1])
    return Expect(
        lambda: tabulate_advantage_covariance(
            thresholds, fewer, records_ds, {"lexicon": LEXICON}, {}
        ),
        InputDataError,
        (str(t.tmp / "step.parquet"), "prompt_index=6, sample_index=2", "rerun the aggregation"),
    )


@case("dynamics-n-tokens-mismatch")
def _(t: Ctx) -> Expect:
    from hed.pipelines.dynamics.nodes import tabulate_entropy_by_correctness

    _, _, thresholds, records_ds, sequences_ds = dynamics_step(t)
    wrong = thresholds.assign(n_tokens=3)
    return Expect(
        lambda: tabulate_entropy_by_correctness(wrong, sequences_ds, records_ds, {}),
        InputDataError,
        (str(t.tmp / "step.parquet"), "entropy_thresholds of r.step_0 says 3"),
    )


@case("dynamics-category-not-in-lexicon")
def _(t: Ctx) -> Expect:
    from hed.pipelines.dynamics.nodes import tabulate_advantage_covariance

    _, _, thresholds, records_ds, sequences_ds = dynamics_step(t)
    lexicon = {"reasoning": ["so"]}  # the records were categorised with anthropomorphic too
    return Expect(
        lambda: tabulate_advantage_covariance(
            thresholds, sequences_ds, records_ds, {"lexicon": lexicon}, {}
        ),
        InputDataError,
        ("category 'anthropomorphic'", "another lexicon"),
    )


@case("dynamics-parameter")
def _(t: Ctx) -> Expect:
    from hed.pipelines.dynamics.nodes import tabulate_advantage_covariance

    _, _, thresholds, records_ds, sequences_ds = dynamics_step(t)
    return Expect(
        lambda: tabulate_advantage_covariance(
            thresholds, sequences_ds, records_ds, {}, {"kl_cov_ratio": 2}
        ),
        ConfigError,
        ("dynamics.kl_cov_ratio", "2"),
    )


@case("dynamics-estimators")
def _(t: Ctx) -> Expect:
    from hed.config.analysis_params import dynamics_params

    return Expect(
        lambda: dynamics_params({"estimators": ["ppo"]}),
        ConfigError,
        ("dynamics.estimators", "ppo"),
    )


# ------------------------------------------------------------------ no silent failures


def conf_with(ctx: Ctx, files: dict[str, str]) -> Path:
    """A ``conf`` folder under ``ctx.tmp`` holding ``files`` (``"base/parameters.yml": text``)."""
    for name, text in files.items():
        write_text(ctx.tmp / "conf" / name, text)
    return ctx.tmp / "conf"


def unknown_key_check(conf: Path, env: str | None, runtime: dict[str, Any]) -> Callable[[], Any]:
    """What the project hook does when the session starts: refuse unknown keys, naming the file."""
    from hed.config.sections import check_unknown_keys, key_origin

    def call() -> Any:
        loader = OmegaConfigLoader(
            str(conf), base_env="base", default_run_env="local", env=env, runtime_params=runtime
        )
        params = loader["parameters"]
        check_unknown_keys(params, lambda key: key_origin(key, conf, env, runtime))

    return call


@case("params-unknown-key-in-file")
def _(t: Ctx) -> Expect:
    conf = conf_with(
        t,
        {
            "base/parameters_generation.yml": "generation:\n  temperature: 1.0\n",
            "my_study/parameters_generation.yml": "generation:\n  temprature: 0.7\n",
        },
    )
    return Expect(
        unknown_key_check(conf, "my_study", {}),
        ConfigError,
        (
            "unknown parameter generation.temprature",
            "conf/my_study/parameters_generation.yml",
            "did you mean generation.temperature?",
        ),
    )


@case("params-unknown-key-in-runtime-params")
def _(t: Ctx) -> Expect:
    conf = conf_with(
        t, {"base/parameters_aggregation.yml": "aggregation:\n  top_entropy_frac: 0.2\n"}
    )
    (conf / "local").mkdir()
    runtime = {"aggregation": {"top_entropy_fraction": 0.05}}
    return Expect(
        unknown_key_check(conf, None, runtime),
        ConfigError,
        (
            "aggregation.top_entropy_fraction",
            "--params",
            "did you mean aggregation.top_entropy_frac?",
        ),
    )


@case("params-unknown-section")
def _(t: Ctx) -> Expect:
    conf = conf_with(t, {"base/parameters_reporting.yml": "reportng:\n  strict: true\n"})
    (conf / "local").mkdir()
    return Expect(
        unknown_key_check(conf, None, {}),
        ConfigError,
        ("unknown parameter reportng", "parameters_reporting.yml", "did you mean reporting?"),
    )


def strict_preflight(runs: dict[str, Any], reporting: dict[str, Any], metrics: dict[str, Any]):
    """``check_parameters`` on a one-node pipeline that reads runs, reporting and metrics."""
    from kedro.io import MemoryDataset
    from kedro.pipeline import Pipeline

    from hed.hooks.parameters import check_parameters

    sections = {"runs": runs, "reporting": reporting, "metrics": metrics}
    pipeline = Pipeline([Node(lambda *a: a[0], [f"params:{k}" for k in sections], "out")])
    catalog = DataCatalog({f"params:{k}": MemoryDataset(v) for k, v in sections.items()})
    return lambda: check_parameters(pipeline, catalog)


@case("params-strict-incomplete")
def _(t: Ctx) -> Expect:
    runs = {"dapo": {"role": "with_clip", "checkpoint_root": str(t.tmp), "steps": [0]}}
    reporting = {"strict": True, "fig3": {"steps": [0, 10]}}
    return Expect(
        strict_preflight(runs, reporting, {"runs": {}}),
        ConfigError,
        (
            "reporting.strict is true",
            "runs needs a with_clip and a without_clip run",
            "reporting.fig3.steps [10] are not in runs.dapo.steps",
            "metrics.runs.dapo.sources is empty",
        ),
    )


@case("prompts-duplicates-bad-policy")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "prompts.jsonl", '{"problem": "1+1"}\n{"problem": "1+1"}\n')
    return Expect(
        prompt_node_run(path, {**PROMPT_PARAMS, "duplicates": "warn"}),
        ConfigError,
        ("prompts.duplicates is 'warn'", "drop", "keep"),
    )


@case("prompts-too-long-for-context")
def _(t: Ctx) -> Expect:
    from hed.decode.prompts import check_context_length

    return Expect(
        lambda: check_context_length({0: 100, 3: 10812, 5: 9000}, 1024, 8192, "/ckpt/actor_hf"),
        ConfigError,
        (
            "prompt_index 3 has 10812 tokens",
            "max_new_tokens 1024",
            "at most 7168 prompt tokens",
            "context of 8192",
            "2 prompt(s)",
        ),
    )


@case("checkpoints-retrained-in-place")
def _(t: Ctx) -> Expect:
    from kedro.io import MemoryDataset
    from kedro.pipeline import Pipeline

    from hed.decode.checkpoints import checkpoint_fingerprint
    from hed.io.reused_shards import check_reused_shards

    model = hf_folder(t.tmp / "ckpt" / "global_step_0" / "actor_hf")
    generation = {"num_shards": 1, "samples_per_prompt": 1, "max_new_tokens": 4}
    meta = {
        "run": "r",
        "step": 0,
        "shard": 0,
        "num_shards": 1,
        "samples_per_prompt": 1,
        "checkpoint": checkpoint_fingerprint(model),
    }
    shard = t.tmp / "shard_0.sequences.parquet"
    table = pa.Table.from_pylist([], schema=SEQUENCE_SCHEMA)
    pq.write_table(
        table.replace_schema_metadata({GENERATION_METADATA_KEY: json.dumps(meta)}), shard
    )
    # a step retrained in place: the same names and sizes, one weight byte differs
    (model / "model.safetensors").write_bytes(b"\0" * 15 + b"\1")
    name = "r.step_0.shard_0.sequences"
    pipeline = Pipeline([Node(lambda g: g, "params:generation", name)])
    catalog = DataCatalog(
        {
            name: ArrowParquetDataset(filepath=str(shard), schema="sequences"),
            "params:generation": MemoryDataset(generation),
        }
    )
    return Expect(
        lambda: check_reused_shards(pipeline, catalog),
        ConfigError,
        (str(shard), "stale shard", "checkpoint weights_xxh3_128", "--only-missing-outputs"),
        outputs=(shard,),
    )


@case("runner-data-root-locked")
def _(t: Ctx) -> Expect:
    import socket

    from filelock import FileLock

    from hed.io.run_lock import FLOCK_NAME, LOCK_NAME, RunLockedError, acquire

    (t.tmp / "data").mkdir(parents=True, exist_ok=True)
    held = FileLock(str(t.tmp / "data" / FLOCK_NAME))  # another run's OS lock
    held.acquire()
    lock = write_text(
        t.tmp / "data" / LOCK_NAME,
        json.dumps(
            {
                "pid": os.getppid(),
                "host": socket.gethostname(),
                "env": "qae_repro",
                "started": 0,
                "command": "kedro run --env qae_repro",
            }
        ),
    )
    return Expect(
        lambda: (held, acquire(t.tmp / "data", "qae_repro")),
        RunLockedError,
        (f"pid {os.getppid()}", "kedro run --env qae_repro", str(lock), "data_root"),
        outputs=(lock,),
    )


@case("runner-data-root-of-another-env")
def _(t: Ctx) -> Expect:
    from hed.io.run_lock import OWNER_NAME, claim_root

    owner = write_text(t.tmp / "data" / "qae_repro" / OWNER_NAME, "qae_repro\n")
    return Expect(
        lambda: claim_root(t.tmp / "data" / "qae_repro", "my_study"),
        ConfigError,
        (
            "belongs to environment qae_repro",
            "data_root: data/my_study",
            "conf/my_study/globals.yml",
        ),
        outputs=(owner,),
    )


@case("runner-data-root-read-only")
def _(t: Ctx) -> Expect:
    from hed.io.run_lock import OWNER_NAME, claim_root

    root = t.tmp / "data" / "ro"
    reason = t.fixture("read_only_folder")(root)
    return Expect(
        lambda: claim_root(root, "ro"),
        OutputWriteError,
        (
            f"data root {root} is not writable",
            OWNER_NAME,
            reason,
            "make it writable",
            "set data_root in conf/ro/globals.yml",
        ),
        outputs=(root / OWNER_NAME,),
    )


@case("runner-data-root-read-only-lock")
def _(t: Ctx) -> Expect:
    # a root written before it was mounted read-only: its owner file is there, the lock is not
    from hed.io.run_lock import LOCK_NAME, OWNER_NAME, acquire, claim_root

    root = t.tmp / "data" / "ro"
    reason = t.fixture("read_only_folder")(root, {OWNER_NAME: "ro\n"})
    claim_root(root, "ro")  # reads the owner: nothing to write
    return Expect(
        lambda: acquire(root, "ro"),
        OutputWriteError,
        (f"data root {root} is not writable", LOCK_NAME, reason, "conf/ro/globals.yml"),
        outputs=(root / LOCK_NAME,),
    )


@case("runner-data-root-declared-by-another-env")
def _(t: Ctx) -> Expect:
    # a copy of conf/qae_repro that kept its data_root, on a clone where qae_repro never ran:
    # nothing owns data/qae_repro yet, but qae_repro declares it
    from hed.io.run_lock import check_declared_root

    conf = t.tmp / "conf"
    for env in ("qae_repro", "my_study"):
        write_text(conf / env / "globals.yml", "data_root: data/qae_repro\n")
    return Expect(
        lambda: check_declared_root(t.tmp / "data" / "qae_repro", "my_study", conf, t.tmp),
        ConfigError,
        ("conf/qae_repro/globals.yml", "data_root: data/my_study", "conf/my_study/globals.yml"),
    )


@case("runner-unknown-pipeline")
def _(t: Ctx) -> Expect:
    from hed.pipeline_registry import check_requested_pipelines

    return Expect(
        lambda: check_requested_pipelines(["generaton"]),
        ConfigError,
        (
            "--pipelines generaton",
            "did you mean generation?",
            "aggregation, analyses, dynamics, generation, metrics",
        ),
    )


@case("runner-unknown-env")
def _(t: Ctx) -> Expect:
    from types import SimpleNamespace

    from hed.hooks import check_env_exists

    (t.tmp / "conf" / "base").mkdir(parents=True)
    (t.tmp / "conf" / "my_study").mkdir()
    context = SimpleNamespace(env="my_stduy", project_path=t.tmp)
    return Expect(
        lambda: check_env_exists(context),
        ConfigError,
        ("--env my_stduy", "did you mean --env my_study?", "base, my_study"),
    )


# ------------------------------------------------------------------ pass@1 values, full disk,
# ------------------------------------------------------------------ vocabularies, node names


@case("metrics-csv-percent")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "dapo.csv", "step,pass1\n0,10\n20,25\n80,40\n")
    params = metrics_params({"csv": {"path": str(path)}})
    return Expect(
        lambda: read_csv_pass1(params, run="dapo"),
        InputDataError,
        (str(path), "column pass1", "pass@1 10 at step 0 is outside [0, 1]", "scale: percent"),
    )


@case("metrics-csv-percent-out-of-range")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "dapo.csv", "step,acc\n0,10\n20,250\n")
    params = metrics_params({"csv": {"path": str(path), "pass1_column": "acc", "scale": "percent"}})
    return Expect(
        lambda: read_csv_pass1(params, run="dapo"),
        InputDataError,
        (str(path), "column acc (scale: percent", "pass@1 2.5 at step 20", "outside [0, 1]"),
    )


@case("metrics-csv-scale-unknown")
def _(t: Ctx) -> Expect:
    params = metrics_params({"csv": {"path": "x.csv", "scale": "percentage"}})
    return Expect(
        lambda: parse_run_config(params, "dapo"),
        ConfigError,
        ("metrics.runs.dapo.sources.csv.scale", "'percentage'", "fraction", "percent"),
    )


@case("metrics-wandb-out-of-range")
def _(t: Ctx) -> Expect:
    from hed.pass1.sources import history_from_rows

    rows = [{"_step": s, "training/global_step": s, "acc": v} for s, v in ((0, 0.1), (5, 12.5))]
    return Expect(
        lambda: history_from_rows(
            rows, metric_key="acc", step_key="training/global_step", where="W&B run team/p/abc"
        ),
        InputDataError,
        ("W&B run team/p/abc, key acc", "pass@1 12.5 at step 5", "outside [0, 1]", "metric_key"),
    )


@case("metrics-offline-log-truncated")
def _(t: Ctx) -> Expect:
    import wandb

    from tests.pass1.test_pass1_sources import offline_wandb_run

    with offline_wandb_run(t.tmp, "hed-truncated") as run:
        for step in range(1, 41):
            run.log({"val-core/aime2025/acc/mean@1": step / 100, "training/global_step": step})
        folder = Path(run.dir).parent
        run.finish()
        wandb.teardown()
    log = next(folder.glob("run-*.wandb"))
    data = log.read_bytes()
    log.write_bytes(data[: len(data) // 2])  # a copy cut half-way (a full disk, a killed rsync)
    params = metrics_params({"wandb_offline": {"path": str(folder)}})
    return Expect(
        lambda: fetch_wandb_history(params, run="dapo"),
        InputDataError,
        (str(log), "is truncated or incomplete", "history row(s) readable", "copy the whole"),
    )


@case("reporting-strict-pass1-missing-at-step")
def _(t: Ctx) -> Expect:
    pass1 = reporting_inputs()["pass1"]
    pass1 = pass1[~((pass1["run"] == "dapo_with_clip") & (pass1["step"] == 80))]
    return Expect(
        plan(STRICT, pass1=pass1),
        ConfigError,
        ("reporting.strict is true", "run dapo_with_clip: no pass@1 at step(s) [80]"),
    )


@case("params-strict-csv-step-missing")
def _(t: Ctx) -> Expect:
    path = write_text(t.tmp / "pass1.csv", "step,pass1\n0,0.1\n20,0.2\n")
    runs = {
        "a": {"role": "with_clip", "checkpoint_root": str(t.tmp), "steps": [0, 20, 80]},
        "b": {"role": "without_clip", "checkpoint_root": str(t.tmp), "steps": [0, 20]},
    }
    source = {"sources": {"csv": {"path": str(path)}}}
    reporting = {"strict": True, "fig3": {"steps": [0, 20]}}
    return Expect(
        strict_preflight(runs, reporting, {"runs": {"a": source, "b": source}}),
        ConfigError,
        ("reporting.strict is true", f"pass@1 CSV {path} has no value for run a at step(s) [80]"),
    )


def full_disk(t: Ctx, limit: int = 512) -> None:
    """Every file HED's atomic writer opens fails with ENOSPC after ``limit`` bytes."""

    class FullDiskFile:
        def __init__(self, handle: Any) -> None:
            self._handle, self._written = handle, 0

        def write(self, data: Any) -> int:
            self._written += len(data)
            if self._written > limit:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self._handle.write(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._handle, name)

    install_atomic_local_writes()  # the filesystem a run's datasets get (AtomicWritesHooks)
    t.monkeypatch.setattr(
        "hed.records.atomic_io.open",
        lambda path, mode="r", *a, **k: FullDiskFile(open(path, mode, *a, **k)),
        raising=False,
    )


def disk_full_case(t: Ctx, config: dict[str, Any], data: Any) -> Expect:
    """Save ``data`` through a versioned catalog entry ``out`` on a disk that fills up."""
    reporting = t.tmp / "08_reporting"
    reporting.mkdir()
    target = reporting / Path(config["filepath"]).name
    catalog = DataCatalog.from_config(
        {"out": {**config, "filepath": str(target), "versioned": True}}
    )
    full_disk(t)
    return Expect(
        lambda: catalog.save("out", data),
        OutputWriteError,
        (str(target), "No space left on device", "free disk space"),
        outputs=(target,),  # no file, no temporary, no empty version folder in 08_reporting
    )


def big_figure() -> Any:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(4, 3))
    figure.add_subplot().plot(np.arange(100), np.sin(np.arange(100)))
    return figure


@case("outputs-disk-full-figure")
def _(t: Ctx) -> Expect:
    return disk_full_case(
        t, {"type": "matplotlib.MatplotlibDataset", "filepath": "figure2.png"}, big_figure()
    )


@case("outputs-disk-full-html")
def _(t: Ctx) -> Expect:
    page = "<html><body>" + "<span>wait</span>" * 200 + "</body></html>"
    return disk_full_case(t, {"type": "text.TextDataset", "filepath": "token_report.html"}, page)


@case("outputs-disk-full-json")
def _(t: Ctx) -> Expect:
    data = {"artifacts": {f"figure_{i}": "x" * 40 for i in range(40)}}
    return disk_full_case(t, {"type": "json.JSONDataset", "filepath": "resolved_config.json"}, data)


@case("outputs-disk-full-csv")
def _(t: Ctx) -> Expect:
    table = pd.DataFrame({"word": ["wait"] * 200, "count": range(200)})
    return disk_full_case(t, {"type": "pandas.CSVDataset", "filepath": "figure3.csv"}, table)


@case("outputs-disk-full-parquet")
def _(t: Ctx) -> Expect:
    table = pd.DataFrame({"entropy": np.linspace(0, 1, 2000)})
    return disk_full_case(t, {"type": "pandas.ParquetDataset", "filepath": "table.parquet"}, table)


def vocab_folder(path: Path, vocab_size: int, vocab: dict[str, int] | None = None) -> Path:
    folder = hf_folder(path)
    config = {"model_type": "llama", "vocab_size": vocab_size}
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer = {"model": {"type": "BPE", "vocab": vocab or {"a": 0, "b": 1}}, "added_tokens": []}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder


@case("checkpoints-vocab-size-differs")
def _(t: Ctx) -> Expect:
    vocab_folder(t.tmp / "global_step_0" / "actor_hf", 49152)
    late = vocab_folder(t.tmp / "global_step_20" / "actor_hf", 49216)
    return Expect(
        resolve(t.tmp, steps=(0, 20)),
        CheckpointError,
        ("run dapo", f"step 20 ({late})", "vocabulary size 49,216 vs 49,152 at step 0"),
    )


@case("checkpoints-tokenizer-differs")
def _(t: Ctx) -> Expect:
    vocab_folder(t.tmp / "global_step_0" / "actor_hf", 64)
    vocab_folder(t.tmp / "global_step_20" / "actor_hf", 64, {"a": 1, "b": 0})
    return Expect(
        resolve(t.tmp, steps=(0, 20)),
        CheckpointError,
        ("run dapo", "step 20", "tokenizer a different token vocabulary at step 0"),
    )


def node_filters(**filters: list[str]) -> Callable[[], Any]:
    """:func:`hed.pipeline_registry.check_node_filters` on a two-step aggregation pipeline."""
    from hed.pipeline_registry import check_node_filters
    from hed.pipelines.dynamics.pipeline import step_pipeline

    pipeline = step_pipeline("dapo", 0) + step_pipeline("dapo", 20)
    return lambda: check_node_filters(pipeline, **filters)


@case("runner-nodes-unknown")
def _(t: Ctx) -> Expect:
    return Expect(
        node_filters(node_names=["dapo.step_20.tabulate_advantage_covariance_"]),
        ConfigError,
        ("--nodes dapo.step_20.tabulate_advantage_covariance_", "did you mean"),
    )


@case("runner-from-nodes-without-namespace")
def _(t: Ctx) -> Expect:
    return Expect(
        node_filters(from_nodes=["tabulate_entropy_by_correctness"]),
        ConfigError,
        (
            "--from-nodes tabulate_entropy_by_correctness",
            "dapo.step_0.tabulate_entropy_by_correctness",
            "dapo.step_20.tabulate_entropy_by_correctness",
        ),
    )


@case("runner-to-nodes-unknown")
def _(t: Ctx) -> Expect:
    return Expect(
        node_filters(to_nodes=["no_such_node"]), ConfigError, ("--to-nodes no_such_node",)
    )


@case("runner-tags-unknown")
def _(t: Ctx) -> Expect:
    return Expect(
        node_filters(tags=["step_02"]),
        ConfigError,
        ("--tags step_02", "no such tag", "did you mean step_0"),
    )


@case("runner-from-inputs-unknown")
def _(t: Ctx) -> Expect:
    return Expect(
        node_filters(from_inputs=["dapo.step_20.token_record"]),
        ConfigError,
        ("--from-inputs dapo.step_20.token_record", "no such dataset", "did you mean",
         "dapo.step_20.token_records"),
    )  # fmt: skip


@case("runner-namespaces-unknown")
def _(t: Ctx) -> Expect:
    return Expect(
        node_filters(namespaces=["dapo.step_2"]),
        ConfigError,
        ("--namespaces dapo.step_2: the pipeline has no such namespace",
         "the pipeline's namespaces: dapo, dapo.step_0, dapo.step_20"),
    )  # fmt: skip


@case("runner-load-versions-unknown")
def _(t: Ctx) -> Expect:
    from hed.pipeline_registry import check_load_versions
    from hed.pipelines.dynamics.pipeline import step_pipeline

    pipeline = step_pipeline("dapo", 0) + step_pipeline("dapo", 20)
    pins = {"dapo.step_0.token_record": "2026-12-01T10.00.00.000Z"}
    return Expect(
        lambda: check_load_versions(pipeline, pins),
        ConfigError,
        ("--load-versions dapo.step_0.token_record:2026-12-01T10.00.00.000Z: the pipeline has "
         "no such dataset; did you mean dapo.step_0.token_records",),
    )  # fmt: skip


@case("runner-filters-select-nothing")
def _(t: Ctx) -> Expect:
    return Expect(
        node_filters(namespaces=["dapo.step_0"], tags=["step_20"]),
        ConfigError,
        ("--tags step_20 --namespaces dapo.step_0: together these select no node",),
    )


# ------------------------------------------------------------------ the tests


@pytest.fixture(autouse=True)
def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------ freshness (computed_from)


class _RecordingNode:
    """What :meth:`hed.io.freshness.Freshness.node_ran` reads of a Kedro node."""

    def __init__(self, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> None:
        self.inputs, self.outputs = inputs, outputs


def stale_check(ctx: Ctx, recorded: dict[str, Any], current: dict[str, Any]) -> Callable[[], Any]:
    """A table saved under ``recorded`` parameters, then checked against ``current``."""
    fresh = Freshness(str(ctx.tmp / "data"))
    node = _RecordingNode(tuple(f"params:{k}" for k in recorded), ("entropy_thresholds",))
    fresh.node_ran(node, recorded)
    fresh.saved("entropy_thresholds")
    later = Freshness(str(ctx.tmp / "data"))
    command = update_command(["aggregation"], ["reporting"])
    return lambda: later.check(["entropy_thresholds"], current, lambda *_: command)


@case("freshness-stale-parameter")
def _(t: Ctx) -> Expect:
    call = stale_check(
        t, {"aggregation": {"top_entropy_frac": 0.2}}, {"aggregation": {"top_entropy_frac": 0.1}}
    )
    return Expect(
        call,
        StaleInputError,
        ("entropy_thresholds is stale", "aggregation.top_entropy_frac was 0.2 then, is 0.1 now",
         "kedro run --pipelines aggregation,reporting", "or set aggregation.top_entropy_frac: 0.2"),
    )  # fmt: skip


@case("freshness-stale-pass1-file")
def _(t: Ctx) -> Expect:
    csv = write_text(t.tmp / "pass1.csv", "step,pass1\n0,0.25\n")
    metrics = {"runs": {"dapo": {"sources": {"csv": {"path": str(csv)}}}}}
    call = stale_check(t, {"metrics": metrics}, {"metrics": metrics})
    csv.write_text("step,pass1\n0,0.5\n")
    return Expect(
        call,
        StaleInputError,
        (f"{csv} (metrics.runs.dapo.sources.csv.path) has changed since", "or restore the file"),
    )


@case("run-input-never-written")
def _(t: Ctx) -> Expect:
    from kedro.pipeline import Pipeline
    from kedro_datasets.pandas import CSVDataset

    from hed.io.missing_inputs import MissingInputError, check_inputs_exist

    table = t.tmp / "data/04_feature/entropy_thresholds.csv"
    figure = t.tmp / "data/08_reporting/figure.csv"
    catalog = DataCatalog(
        datasets={
            "entropy_thresholds": CSVDataset(filepath=str(table), version=Version(None, None)),
            "figure": CSVDataset(filepath=str(figure), version=Version(None, None)),
        }
    )
    built = {
        "aggregation": Pipeline([Node(lambda: None, None, "entropy_thresholds", name="agg")]),
        "reporting": Pipeline([Node(lambda x: x, "entropy_thresholds", "figure", name="plot")]),
    }
    return Expect(
        lambda: check_inputs_exist(
            built["reporting"], catalog, {"pipeline_names": ["reporting"]}, lambda: built
        ),
        MissingInputError,
        ("1 input(s) of this run were never written", f"entropy_thresholds ({table})",
         "write them first with `kedro run --pipelines aggregation,reporting`"),
        outputs=(figure,),
    )  # fmt: skip


#: cases that run a vLLM engine (not run where vLLM cannot be installed: tests/vllm_gate.py)
VLLM_CASES = {
    "generation-vllm-architecture",
    "generation-vllm-prompt-too-long",
    "generation-vllm-kv-cache",
}


@pytest.mark.parametrize(
    "case_id",
    [pytest.param(c, marks=pytest.mark.vllm) if c in VLLM_CASES else c for c in CASES],
)
def test_bad_input_gives_one_actionable_line(case_id, tmp_path, monkeypatch, request):
    expect = CASES[case_id](Ctx(tmp=tmp_path, monkeypatch=monkeypatch, request=request))
    before = {path: _state(path) for path in expect.outputs}
    folders = {_existing_folder(path) for path in expect.outputs}
    listings = {folder: sorted(os.listdir(folder)) for folder in folders}

    with pytest.raises(Exception) as info:  # the type is checked below
        expect.call()

    error = info.value
    hed_error = error if isinstance(error, HEDError) else error.__cause__
    assert isinstance(hed_error, expect.error), f"{type(error).__name__}: {error}"
    if error is not hed_error:  # Kedro's catalog wrapper: "<dataset>: <HED message>"
        assert isinstance(error, DatasetError)
        assert str(error).endswith(str(hed_error))
    message = str(error)
    assert message.strip() and "\n" not in message, message
    for marker in TRACEBACK_MARKERS:
        assert marker not in message, message
    for name in expect.names:
        assert name in message, f"{name!r} not in {message!r}"
    for path, state in before.items():
        assert _state(path) == state, f"{path} changed"
        if state is None:
            assert not path.exists(), f"{path} was created"
    for folder, listing in listings.items():
        assert sorted(os.listdir(folder)) == listing, f"{folder} gained an entry"


def test_every_case_is_in_docs_errors_md():
    doc = ERRORS_DOC.read_text(encoding="utf-8")
    missing = [case_id for case_id in CASES if f"`{case_id}`" not in doc]
    assert not missing, f"docs/errors.md does not list {missing}"


def test_the_catalogue_covers_every_area():
    areas = {case_id.split("-", 1)[0] for case_id in CASES}
    assert areas >= {
        "prompts",
        "checkpoints",
        "params",
        "generation",
        "records",
        "lexicon",
        "metrics",
        "reporting",
        "publish",
        "outputs",
        "runner",
        "mini",
    }
    assert len(CASES) >= 25


# ------------------------------------------------------------------ what the cases above refuse,
# ------------------------------------------------------------------ accepted when declared


def test_a_percent_csv_with_scale_percent_reads_as_fractions(tmp_path):
    path = write_text(tmp_path / "dapo.csv", "step,pass1\n0,10\n20,25\n80,40\n")
    params = metrics_params({"csv": {"path": str(path), "scale": "percent"}})
    table = read_csv_pass1(params, run="dapo")
    assert table["step"].tolist() == [0, 20, 80]
    assert table["pass1"].tolist() == [0.10, 0.25, 0.40]


def test_figure_source_wandb_follows_the_switch_to_wandb_offline(tmp_path):
    sources = {"wandb_offline": {"path": str(tmp_path)}, "generated": {}}
    params = metrics_params(sources, figure_source="wandb")
    assert parse_run_config(params, "dapo").figure_source == "wandb_offline"
    with pytest.raises(ConfigError, match="figure_source is 'csv' but the run lists"):
        parse_run_config(metrics_params(sources, figure_source="csv"), "dapo")


def test_one_sample_per_prompt_warns_once_naming_the_parameter(caplog):
    from hed.pipelines.dynamics.nodes import warn_single_sample_groups

    table = pd.DataFrame(
        {
            "run": ["one"] * 3 + ["eight"] * 3 + ["ungraded"],
            "step": [0, 20, 80] * 2 + [0],
            "n_responses": [24] * 3 + [192] * 3 + [0],
            "n_single_sample_responses": [24] * 3 + [0] * 3 + [0],
        }
    )
    with caplog.at_level("WARNING"):
        assert warn_single_sample_groups(table) == ["one"]
    warned = [r.getMessage() for r in caplog.records if "one sample per prompt" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0]
    assert warned[0].startswith("dynamics: run(s) one have one sample per prompt")
    assert "generation.samples_per_prompt: 1" in warned[0]
    assert "Cov(log π, A) = 0 and zero-advantage share 1.0" in warned[0]


def test_a_verl_parquet_gives_the_user_message_and_ground_truth(tmp_path):
    """verl's RL data: ``prompt`` a list of chat messages, the answer in
    ``reward_model.ground_truth`` (docs/configuration.md, "Prompts from verl's parquet")."""
    path = tmp_path / "aime24.parquet"
    pd.DataFrame(
        {
            "data_source": ["aime24", "aime24"],
            "prompt": [
                [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}],
                [{"role": "user", "content": "2+3?"}],
            ],
            "reward_model": [
                {"style": "rule", "ground_truth": "2"},
                {"style": "rule", "ground_truth": "5"},
            ],
        }
    ).to_parquet(path)
    params = {**PROMPT_PARAMS, "prompt_columns": ["prompt"]}
    params["answer_column"] = "reward_model.ground_truth"
    prompts = prompt_node_run(path, params)()["prompts"]
    assert prompts["prompt"].tolist() == ["1+1?", "2+3?"]
    assert prompts["answer"].tolist() == ["2", "5"]
