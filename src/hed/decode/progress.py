"""Progress of one shard's generation: a tqdm bar on a terminal, periodic log lines otherwise.

:class:`ShardProgress` is the ``progress`` callback of :func:`hed.decode.hf.generate_sequences`,
which calls it after every decode step (not only at the end of a batch) with the cumulative
(sequences finished, tokens generated) of the shard. On a terminal (``stderr`` is a TTY, as it
is in ``GPURunner``'s children of a ``kedro run`` started from one) it draws a tqdm bar of
sequences with tokens, tokens/s and tqdm's ETA; elsewhere (a batch job's log file) it logs a
line every ``every_s`` seconds. :meth:`ShardProgress.finish` logs one summary line.

Each of ``GPURunner``'s node processes draws its bar on the line of its slot
(:func:`bar_position`): tqdm counts the bars of its own process only, so without it every
child's bar would take line 0 and the bars of shards generated at once would overwrite each
other.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

logger = logging.getLogger(__name__)

#: Set in each node process of ``GPURunner`` to its slot's 0-based index in the runner's slot
#: list (:func:`hed.runners.process.child_main`); read for the bar's line and a vLLM port.
SLOT_INDEX_ENV = "HED_SLOT_INDEX"


def bar_position(environ: Mapping[str, str] = os.environ) -> int:
    """The terminal line (tqdm ``position``) of this process's bar: its slot's index
    (:data:`SLOT_INDEX_ENV`), 0 outside the runner or when the variable is not a number."""
    slot = environ.get(SLOT_INDEX_ENV, "").strip()
    return int(slot) if slot.isdigit() else 0


class ShardProgress:
    """Progress bar or periodic log of one shard.

    Args:
        label: the shard, e.g. ``run.step_10.shard_0``.
        total: sequences this call generates (kept ones excluded).
        every_s: seconds between log lines when there is no terminal (default 30).
        stream: where the bar goes (default ``sys.stderr``); a bar only if it is a TTY.
        bar: force the bar on (True) or off (False); default: whether ``stream`` is a TTY.
    """

    def __init__(
        self,
        label: str,
        total: int,
        every_s: float | None = 30,
        *,
        stream: TextIO | None = None,
        bar: bool | None = None,
    ) -> None:
        self.label, self.total, self.every_s = label, int(total), float(every_s or 30)
        self.started = self.last = time.monotonic()
        self.done = self.tokens = 0
        self.updates = 0
        stream = stream if stream is not None else sys.stderr
        use_bar = bar if bar is not None else bool(getattr(stream, "isatty", lambda: False)())
        self._bar: Any = None
        if use_bar:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=self.total,
                desc=label,
                unit="seq",
                file=stream,
                dynamic_ncols=True,
                position=bar_position(),  # one line per GPURunner slot
                # in a runner's slot the bar is cleared when done (the summary line stays):
                # redrawn at the cursor's line, it would overwrite slot 0's
                leave=SLOT_INDEX_ENV not in os.environ,
            )

    def __call__(self, n_sequences: int, n_tokens: int) -> None:
        """Record the shard's cumulative sequences finished and tokens generated."""
        self.updates += 1
        now = time.monotonic()
        if self._bar is not None:
            self._bar.update(n_sequences - self.done)
            self.done, self.tokens = n_sequences, n_tokens
            rate = n_tokens / max(now - self.started, 1e-9)
            self._bar.set_postfix_str(f"{n_tokens} tokens, {rate:.1f} tokens/s", refresh=False)
            return
        self.done, self.tokens = n_sequences, n_tokens
        if now - self.last >= self.every_s:
            self.last = now
            self._log_line()

    def eta_s(self) -> float | None:
        """Seconds left at the rate so far (sequences per second), or None before the first."""
        if self.done == 0:
            return None
        elapsed = time.monotonic() - self.started
        return elapsed / self.done * (self.total - self.done)

    def _log_line(self) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        eta = self.eta_s()
        logger.info(
            "%s: %d/%d sequences, %d tokens, %.1f tokens/s, ETA %s",
            self.label,
            self.done,
            self.total,
            self.tokens,
            self.tokens / elapsed,
            "unknown" if eta is None else f"{eta:.0f} s",
        )

    def finish(self, finish_reasons: Iterable[str], *, kept: int = 0) -> str:
        """Close the bar and log (and return) the shard's summary line.

        Args:
            finish_reasons: the finish reason of every sequence generated in this call.
            kept: sequences taken from the shard's partial area (not generated again).
        """
        if self._bar is not None:
            self._bar.close()
        elapsed = max(time.monotonic() - self.started, 1e-9)
        reasons = Counter(finish_reasons)
        shown = ", ".join(f"{name} {count}" for name, count in sorted(reasons.items())) or "none"
        line = (
            f"{self.label}: generated {self.done} sequence(s), {self.tokens} tokens in "
            f"{elapsed:.1f} s ({self.tokens / elapsed:.1f} tokens/s); finish reasons: {shown}"
            + (f"; {kept} kept from the partial shard" if kept else "")
        )
        logger.info(line)
        return line


__all__ = ["SLOT_INDEX_ENV", "ShardProgress", "bar_position"]
