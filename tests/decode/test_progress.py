"""The per-shard progress: a tqdm bar on a terminal, periodic log lines otherwise, a summary."""

from __future__ import annotations

import io
import logging

from hed.decode import progress as progress_module
from hed.decode.progress import ShardProgress


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_it_logs_every_period_with_an_eta(monkeypatch, caplog):
    clock = _Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    bar = ShardProgress("r.step_0.shard_1", total=10, every_s=30, stream=io.StringIO())
    with caplog.at_level(logging.INFO, logger="hed.decode.progress"):
        clock.now = 110.0
        bar(0, 40)  # within the period: no line
        clock.now = 130.0
        bar(2, 100)
        clock.now = 140.0
        bar(2, 140)
        line = bar.finish(["eos", "length", "eos"], kept=4)
    messages = [r.getMessage() for r in caplog.records]
    # 2 of 10 sequences in 30 s -> 8 more at 15 s each = 120 s
    assert messages[0] == "r.step_0.shard_1: 2/10 sequences, 100 tokens, 3.3 tokens/s, ETA 120 s"
    assert (
        messages[-1]
        == line
        == (
            "r.step_0.shard_1: generated 2 sequence(s), 140 tokens in 40.0 s (3.5 tokens/s); "
            "finish reasons: eos 2, length 1; 4 kept from the partial shard"
        )
    )
    assert len(messages) == 2


def test_on_a_terminal_it_draws_a_bar_of_sequences_with_tokens_per_second():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    bar = ShardProgress("r.step_0.shard_0", total=8, stream=stream)
    bar(0, 12)
    bar(4, 40)
    bar(8, 80)
    bar.finish(["eos"] * 8)
    text = stream.getvalue()
    assert "r.step_0.shard_0" in text and "8/8" in text and "80 tokens" in text
    assert "tokens/s" in text


def test_each_gpurunner_slot_draws_its_bar_on_its_own_line(monkeypatch):
    """A node process of slot k (HED_SLOT_INDEX=k, hed.runners.process) draws on line k: tqdm
    counts only its own process's bars, so every child would otherwise take line 0."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    outputs = {}
    for slot in ("0", "2"):
        monkeypatch.setenv(progress_module.SLOT_INDEX_ENV, slot)
        stream = Terminal()
        bar = ShardProgress(f"r.step_0.shard_{slot}", total=4, stream=stream)
        assert abs(bar._bar.pos) == int(slot)  # tqdm keeps a fixed position negated
        bar(2, 10)
        bar._bar.refresh()
        bar.finish(["eos"] * 2)
        outputs[slot] = stream.getvalue()
    assert "\x1b[A" not in outputs["0"] and "2/4" in outputs["0"]
    # slot 2: every drawing (first, update, clearing at the end) moves two lines down, draws,
    # and moves back up: nothing is drawn on the lines of slots 0 and 1
    drawings = [d for d in outputs["2"].split("\x1b[A\x1b[A") if d]
    assert len(drawings) == 3 and all(d.startswith("\n\n\r") for d in drawings)
    assert "r.step_0.shard_2:  50%" in drawings[1] and drawings[2].strip() == ""


def test_the_bar_position_is_the_slot_index_or_zero():
    assert progress_module.bar_position({}) == 0
    assert progress_module.bar_position({"HED_SLOT_INDEX": "3"}) == 3
    assert progress_module.bar_position({"HED_SLOT_INDEX": "x"}) == 0
