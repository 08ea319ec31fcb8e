"""Crash-safe shards: finished sequences survive a SIGKILL and a rerun generates only the rest.

Unit tests of :mod:`hed.records.shard_parts` (exact round trip, binding, discard of stale parts, the
cleanup hook), then the kill test: ``kedro run --pipeline generation`` of one shard of
4 batches (demo SmolLM2, CPU) is SIGKILLed once at least one batch is in the partial area,
rerun with the same command, and its records are compared with an uninterrupted run's, value
for value; the same under ``GPURunner`` (``gpus=cpu``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from hed.decode.hf import PromptInput, SamplingParams, generate_sequences, load_model_and_tokenizer
from hed.hooks import ShardPartsHooks
from hed.io.datasets import ShardPartsDataset
from hed.records.shard_parts import ShardParts, keep_and_generate

from ..project_copy import (
    RUN,
    copy_project,
    kedro_command,
    kedro_environment,
    latest,
    run_kedro_cli,
    set_parameters,
    wait_for,
)

ARRAYS = ("token_ids", "entropy", "logprob", "topk_token_ids", "topk_probs")
BINDING = {"sampling": {"seed": 0, "temperature": 1.0}, "checkpoint": {"config_sha256": "a"}}


@pytest.fixture(scope="module")
def sequences(tiny_model_dir, tokenizer):
    torch.set_num_threads(1)
    model, tok = load_model_and_tokenizer(tiny_model_dir, "float32", "cpu")
    prompts = [
        PromptInput(prompt_index=i, prompt_id=f"q{i}", text=f"What is {i} + {i}?") for i in range(3)
    ]
    params = SamplingParams(max_new_tokens=7, batch_size=2, top_prob_k=3)
    return list(generate_sequences(model, tok, prompts, 2, params, eos_token_ids=[2]))


def assert_same(got, want):
    assert [(s.prompt_index, s.sample_index) for s in got] == [
        (s.prompt_index, s.sample_index) for s in want
    ]
    for a, b in zip(got, want, strict=True):
        for name in ARRAYS:
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), name
        for name in ("prompt_id", "token_texts", "response_text", "finish_reason"):
            assert getattr(a, name) == getattr(b, name), name


def test_parts_round_trip_value_for_value(tmp_path, sequences):
    parts = ShardParts(tmp_path / ".partial" / "shard_0")
    assert parts.open(BINDING) == []
    written = list(parts.write_through(iter(sequences), every=4))
    assert written == sequences
    assert sorted(p.name for p in parts.folder.glob("part_*")) == [
        "part_000000.parquet",
        "part_000001.parquet",
    ]
    assert_same(ShardParts(parts.folder).open(BINDING), sequences)


def test_a_rerun_keeps_the_parts_and_generates_only_the_missing_pairs(tmp_path, sequences, caplog):
    parts = ShardParts(tmp_path / "area")
    parts.open(BINDING)
    parts.write(sequences[:2])
    asked = []

    def generate(kept):
        asked.append(set(kept))
        return iter([s for s in sequences if (s.prompt_index, s.sample_index) not in kept])

    with caplog.at_level(logging.INFO, logger="hed.records.shard_parts"):
        result, n_kept = keep_and_generate(
            ShardParts(parts.folder), BINDING, generate, every=2, label="r.step_0.shard_0"
        )
    assert asked == [{(0, 0), (0, 1)}] and n_kept == 2
    assert_same(result, sequences)
    assert "r.step_0.shard_0: 2 (prompt, sample) pair(s) kept, 4 generated" in caplog.text
    assert len(list(parts.folder.glob("part_*.parquet"))) == 3  # the kept one and two new


def test_parts_of_other_parameters_are_discarded_with_a_log_line(tmp_path, sequences, caplog):
    parts = ShardParts(tmp_path / "area")
    parts.open(BINDING)
    parts.write(sequences)
    other = {**BINDING, "checkpoint": {"config_sha256": "b"}}
    with caplog.at_level(logging.WARNING, logger="hed.records.shard_parts"):
        assert ShardParts(parts.folder).open(other, "r.step_0.shard_0") == []
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("r.step_0.shard_0: discarding 1 partial part file(s)")
    assert "checkpoint.config_sha256 was 'a', now 'b'" in line
    assert list(parts.folder.glob("part_*")) == []


def test_an_unreadable_part_is_removed_and_regenerated(tmp_path, sequences, caplog):
    parts = ShardParts(tmp_path / "area")
    parts.open(BINDING)
    parts.write(sequences[:2])
    (parts.folder / "part_000001.parquet").write_bytes(b"PAR1 not really")
    with caplog.at_level(logging.WARNING, logger="hed.records.shard_parts"):
        kept = ShardParts(parts.folder).open(BINDING)
    assert_same(kept, sequences[:2])
    assert "removing unreadable part" in caplog.text
    assert not (parts.folder / "part_000001.parquet").exists()


def test_the_dataset_gives_a_store_and_the_hook_removes_it_after_both_saves(tmp_path, sequences):
    folder = tmp_path / "step_0" / ".partial" / "shard_0"
    dataset = ShardPartsDataset(filepath=str(folder))
    assert dataset.exists()
    parts = dataset.load()
    parts.open(BINDING)
    parts.write(sequences)

    class FakeNode:
        name = "r.step_0.shard_0.generate_shard"
        outputs = ("r.step_0.shard_0.token_records", "r.step_0.shard_0.sequences")

    hooks = ShardPartsHooks()
    hooks.before_node_run(node=FakeNode(), inputs={"x": 1, "r.step_0.shard_0.partial": parts})
    hooks.after_dataset_saved(dataset_name=FakeNode.outputs[0], node=FakeNode())
    assert folder.is_dir()  # one output saved: a crash now must still keep the parts
    hooks.after_dataset_saved(dataset_name=FakeNode.outputs[1], node=FakeNode())
    assert not folder.exists() and not folder.parent.exists()


# ------------------------------------------------------------------ SIGKILL and rerun

#: One shard of 4 prompts x 4 samples = 16 pairs, 4 batches of 4, up to 12 tokens each (a
#: batch takes about a second on one CPU: the kill, 20 ms after the first part, finds the
#: shard unfinished).
CRASH_STEP = {
    "prompts": {"num_prompts": 4},
    "generation": {
        "num_shards": 1,
        "samples_per_prompt": 4,
        "max_new_tokens": 12,
        "batch_size": 4,
        "torch_threads": 1,
    },
}
PAIRS = 16
SHARD_DIR = f"data/02_intermediate/token_records/{RUN}/step_0"
PARTIAL = f"{SHARD_DIR}/.partial/shard_0"
SEQUENTIAL = ("run", "--pipeline", "generation")
GPU_RUNNER = (*SEQUENTIAL, "--runner", "hed.runners.GPURunner", "--runner-params", "gpus=cpu")


def crash_project(dest: Path, smollm2_dir: Path) -> Path:
    project = copy_project(dest, smollm2_dir)
    set_parameters(project, CRASH_STEP)
    return project


def kill_after_first_part(project: Path, args: tuple[str, ...], timeout: float = 300) -> int:
    """Start ``kedro <args>``, SIGKILL its process group once a part file exists.

    Returns:
        The number of part files the kill left.
    """
    partial = project / PARTIAL
    log_path = project / "killed.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            kedro_command(*args),
            cwd=project,
            env=kedro_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(
                lambda: any(partial.glob("part_*.parquet")) or process.poll() is not None,
                timeout,
                interval=0.02,
            )
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    time.sleep(1.0)  # a node process orphaned by the kill dies with its parent
    assert not (project / SHARD_DIR / "shard_0.parquet").exists(), log_path.read_text()[-3000:]
    return len(list(partial.glob("part_*.parquet")))


def shard_tables(project: Path):
    folder = project / SHARD_DIR
    return (
        pq.read_table(latest(folder / "shard_0.parquet")),
        pq.read_table(latest(folder / "shard_0.sequences.parquet")),
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, smollm2_dir):
    project = crash_project(tmp_path_factory.mktemp("crash_reference"), smollm2_dir)
    result = run_kedro_cli(project, *SEQUENTIAL)
    return shard_tables(project), result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args", [SEQUENTIAL, GPU_RUNNER], ids=["sequential", "GPURunner"])
def test_a_killed_shard_resumes_to_the_records_of_an_uninterrupted_run(
    tmp_path, smollm2_dir, uninterrupted, args
):
    project = crash_project(tmp_path, smollm2_dir)
    n_parts = kill_after_first_part(project, args)
    kept = 4 * n_parts
    assert 0 < kept < PAIRS, f"the kill left {n_parts} part(s) of {PAIRS // 4}"
    rerun = run_kedro_cli(project, *args)
    log = rerun.stdout + rerun.stderr
    assert f"{RUN}.step_0.shard_0: {kept} (prompt, sample) pair(s) kept, " in log
    assert f"{kept} (prompt, sample) pair(s) kept, {PAIRS - kept} generated" in log
    assert re.search(rf"generated {PAIRS - kept} sequence\(s\), \d+ tokens in", log)
    (records, seqs), _ = uninterrupted
    got_records, got_seqs = shard_tables(project)
    assert got_records.num_rows == records.num_rows > 0
    assert got_records.equals(records, check_metadata=True)
    assert got_seqs.equals(seqs, check_metadata=True)
    assert not (project / PARTIAL).exists()  # removed once the shard files were saved


@pytest.mark.slow
def test_an_uninterrupted_run_logs_progress_and_a_summary(uninterrupted):
    _, log = uninterrupted
    assert f"{RUN}.step_0.shard_0: 0 (prompt, sample) pair(s) kept, {PAIRS} generated" in log
    summary = re.search(
        rf"{RUN}\.step_0\.shard_0: generated {PAIRS} sequence\(s\), (\d+) tokens in [\d.]+ s "
        r"\(([\d.]+) tokens/s\); finish reasons: (.*)",
        log,
    )
    assert summary, log[-3000:]
    (records, seqs), _ = uninterrupted
    assert int(summary.group(1)) == records.num_rows
    counts = dict(
        (name, int(n)) for name, n in (part.split() for part in summary.group(3).split(", "))
    )
    assert sum(counts.values()) == PAIRS
    assert counts == dict(
        zip(
            *np.unique(
                seqs.column("finish_reason").to_numpy(zero_copy_only=False), return_counts=True
            ),
            strict=True,
        )
    )


def test_mass_columns_round_trip_and_old_parts_read_as_none(tmp_path):
    from hed.records.sequence import MASS_COLUMNS, GeneratedSequence
    from hed.records.shard_parts import PART_SCHEMA, sequences_to_table, table_to_sequences

    def sequence(index: int, mass: bool) -> GeneratedSequence:
        n = 3 + index
        masses = {
            name: np.linspace(0.1 * (j + 1), 0.5, n).astype(np.float32)
            for j, name in enumerate(MASS_COLUMNS)
        }
        return GeneratedSequence(
            prompt_index=index, prompt_id=f"q{index}", sample_index=0,
            token_ids=np.arange(n, dtype=np.int32), entropy=np.ones(n, np.float32),
            logprob=-np.ones(n, np.float32), topk_token_ids=np.zeros((n, 2), np.int32),
            topk_probs=np.full((n, 2), 0.5, np.float32), token_texts=["a"] * n,
            response_text="a" * n, finish_reason="length", **(masses if mass else {}),
        )  # fmt: skip

    written = [sequence(0, True), sequence(1, False)]
    back = table_to_sequences(sequences_to_table(written))
    for name in MASS_COLUMNS:
        got = getattr(back[0], name)
        assert got.dtype == np.float32 and np.array_equal(got, getattr(written[0], name))
        assert getattr(back[1], name) is None
    old = sequences_to_table(written).drop_columns(list(MASS_COLUMNS))  # a part of before
    pq.write_table(old, tmp_path / "part.parquet")
    (read,) = [table_to_sequences(pq.read_table(tmp_path / "part.parquet", schema=PART_SCHEMA))]
    assert [s.anthropomorphic_mass for s in read] == [None, None]
    assert np.array_equal(read[0].entropy, written[0].entropy)
