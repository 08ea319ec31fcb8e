"""Exact decode-time token records from inside vLLM's sampler (a V1 logits processor).

vLLM's V1 sampler (``vllm/v1/sample/sampler.py``, ``Sampler.forward``) converts the model's
logits to float32, then calls every custom logits processor that is *not* argmax-invariant
(``apply_logits_processors``), and only then applies penalties, the temperature, top-k /
top-p and draws the token (``sample``). :class:`DecodeRecordingProcessor` declares itself not
argmax-invariant, so it sees exactly the raw float32 logits ``z`` ``(num_reqs, V)`` that the
sampler draws from: the same tensor :class:`hed.decode.hf_processors.DecodeRecorder` sees in
``generate``. Per row it computes, on the logits' device and without a host sync, the
entropy (nats), ``log Z`` and the ``top_prob_k`` most probable ids and probabilities of
``softmax(z / T)`` (:mod:`hed.core.fused_stats`, by the route ``generation.stats_kernel``
picks) and returns the logits unchanged. The sampled token's log-probability is
``z_t / T - log Z``; vLLM returns ``z_t`` itself (``logprobs=0`` with
``logprobs_mode="raw_logits"``), see :mod:`hed.decode.vllm`.

Rows and requests: vLLM keeps a persistent batch whose rows are added, removed, moved and
swapped between steps; the processor follows them through its ``update_state`` batch updates
(with vLLM's own ``process_dict_updates``, as its built-in processors do). A request carries
HED's integer key in ``SamplingParams.extra_args[EXTRA_ARGS_KEY]``; rows of other requests are
not recorded. A row's *position* is the length of the request's running output-token list at
the time of ``apply`` (vLLM passes a live reference to that list; with async scheduling it
holds placeholders, so the length is still right): the logits of a step are those of the
next position. A row seen more than once for one position (a chunked prefill's intermediate
chunk, or a preempted request recomputed from scratch) is overwritten by its latest record,
which is the one the sampler drew from.

Where the records go: the processor writes into the :class:`RecordSink` attached to its
class (``make_processor_class``). The engine runs in the node's own process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, one worker), so the processor instance, the sink and
the node share memory: nothing is serialised. The sink keeps ``2 + 2k`` float32 numbers per
row and step on the device and starts copying them to the host every ``flush_every`` steps,
and whenever a request finishes, without waiting: on CUDA a ``non_blocking`` copy into pinned
host memory followed by a CUDA event; :meth:`RecordSink.poll` files the copies whose event
has completed (``Event.query``, never ``synchronize``). A finished request is assembled once
every step up to its finish is filed, so no engine step waits for the device
(:class:`hed.decode.vllm.RecordingEngine`); only :meth:`RecordSink.flush`, at the end of a
run, waits.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any, ClassVar

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from hed.core.fused_stats import DistributionStats
from hed.core.propensity import category_mass

#: ``SamplingParams.extra_args`` key holding HED's integer request key.
EXTRA_ARGS_KEY = "hed_request"

#: Token ids are carried as float32 in the packed step tensor: exact below 2**24.
_MAX_EXACT_ID = 2**24


class RecordSink:
    """Per-request decode-time statistics collected by :class:`DecodeRecordingProcessor`.

    Each recorded step appends one packed ``(B, 2 + 2k)`` float32 tensor on the logits'
    device (columns: entropy, log Z, k probabilities, k token ids) and, on the host, the
    request key and position of each row (key -1: not HED's). :meth:`start_copy` starts
    moving the staged steps to the host without waiting, :meth:`poll` files the rows of
    every copy that has landed under their request, :meth:`flush` waits for all of them.

    Args:
        temperature: T > 0 of ``softmax(z / T)``.
        top_prob_k: k, the most probable tokens kept per row.
        flush_every: steps staged on the device before a copy starts (bounds device memory
            to ``flush_every · B · (2 + 2k + m) · 4`` bytes).
        stats_kernel: route of the statistics (:class:`hed.core.fused_stats.DistributionStats`).
        mass_ids: {category: int64 word-start ids}; each row then also carries, after the
            top-k ids, one ``<category>_mass`` column per category (m of them):
            Σ softmax(z / T) over the ids (:func:`hed.core.propensity.category_mass`).
    """

    def __init__(
        self,
        temperature: float,
        top_prob_k: int,
        flush_every: int = 16,
        stats_kernel: str = "auto",
        *,
        mass_ids: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.stats = DistributionStats(stats_kernel)
        self.mass_ids = {
            c: torch.as_tensor(np.asarray(i, np.int64)) for c, i in (mass_ids or {}).items()
        }
        self.temperature = float(temperature)
        self.top_prob_k = int(top_prob_k)
        self.flush_every = int(flush_every)
        self.steps_recorded = 0
        #: every step up to this count is filed on the host
        self.steps_filed = 0
        self._staged: list[torch.Tensor] = []
        self._staged_rows: list[tuple[np.ndarray, np.ndarray]] = []
        #: copies started, oldest first: (host values, event or None, keys, positions, steps)
        self._in_flight: deque[tuple[torch.Tensor, Any, np.ndarray, np.ndarray, int]] = deque()
        self._filed: dict[int, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
        self._taken: set[int] = set()

    def record(self, logits: torch.Tensor, keys: np.ndarray, positions: np.ndarray) -> None:
        """Record one step: raw float32 ``logits`` (B, V); ``keys``, ``positions`` (B,) int64."""
        if logits.shape[-1] > _MAX_EXACT_ID:
            raise RuntimeError(f"vocabulary of {logits.shape[-1]} ids exceeds 2**24")
        stats = self.stats(logits, self.temperature, self.top_prob_k)
        packed = torch.cat(
            [
                stats.entropy.unsqueeze(-1),
                stats.log_z.unsqueeze(-1),
                stats.topk_probs,
                stats.topk_ids.to(torch.float32),
                *self._masses(logits, stats.log_z),
            ],
            dim=-1,
        )  # (B, 2 + 2k + m)
        self._staged.append(packed)
        self._staged_rows.append((keys, positions))
        self.steps_recorded += 1
        if len(self._staged) >= self.flush_every:
            self.start_copy()

    def _masses(self, logits: torch.Tensor, log_z: torch.Tensor) -> list[torch.Tensor]:
        """One ``(B, 1)`` float32 mass column per category of ``mass_ids``."""
        columns = []
        for category in self.mass_ids:  # .to() is a no-op once the ids are on the device
            ids = self.mass_ids[category] = self.mass_ids[category].to(logits.device)
            columns.append(category_mass(logits, log_z, ids, self.temperature).unsqueeze(-1))
        return columns

    def start_copy(self) -> None:
        """Start copying the staged steps to the host; returns at once (nothing waits)."""
        if not self._staged:
            return
        packed = torch.cat(self._staged) if len(self._staged) > 1 else self._staged[0]
        keys = np.concatenate([k for k, _ in self._staged_rows])
        positions = np.concatenate([p for _, p in self._staged_rows])
        self._staged.clear()
        self._staged_rows.clear()
        host, event = copy_to_host_async(packed)
        self._in_flight.append((host, event, keys, positions, self.steps_recorded))

    def poll(self) -> int:
        """File the rows of every copy that has landed, oldest first, without waiting.

        Returns:
            :attr:`steps_filed`: every step up to this count is on the host.
        """
        while self._in_flight and (self._in_flight[0][1] is None or self._in_flight[0][1].query()):
            self._file(*self._in_flight.popleft())
        return self.steps_filed

    def flush(self) -> None:
        """Copy every pending step to the host and wait for it (one device sync)."""
        self.start_copy()
        while self._in_flight:
            host, event, keys, positions, steps = self._in_flight.popleft()
            if event is not None:
                event.synchronize()
            self._file(host, None, keys, positions, steps)

    def _file(self, host, _event, keys: np.ndarray, positions: np.ndarray, steps: int) -> None:
        """File one landed copy's rows under their request (rows of taken requests dropped)."""
        values = host.numpy()  # (R, 2 + 2k), on the host already
        self.steps_filed = steps
        mine = np.flatnonzero(keys >= 0)
        order = mine[np.argsort(keys[mine], kind="stable")]  # by request, steps in order
        if not len(order):
            return
        sorted_keys = keys[order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        for rows in np.split(order, starts[1:]):
            key = int(keys[rows[0]])
            if key not in self._taken:  # a step computed after the request ended is discarded
                self._filed[key].append((positions[rows], values[rows]))

    def take(self, key: int, n_tokens: int) -> dict[str, np.ndarray]:
        """Remove and return the records of request ``key``, positions ``0 .. n_tokens-1``.

        Every step up to the request's finish must be filed (:meth:`poll` returned at least
        the :attr:`steps_recorded` seen when it finished, or :meth:`flush`). Where a position
        was recorded more than once, the latest record is kept; rows past ``n_tokens - 1``
        (a step vLLM scheduled ahead, with async scheduling, and discarded) are ignored.

        Returns:
            ``entropy`` (n,), ``log_z`` (n,) float32; ``topk_probs`` (n, k) float32;
            ``topk_token_ids`` (n, k) int32; ``<category>_mass`` (n,) float32 per category
            of ``mass_ids``.

        Raises:
            RuntimeError: the recorded positions are not exactly ``0 .. n_tokens-1``.
        """
        pieces = self._filed.pop(key, [])
        self._taken.add(key)
        k = self.top_prob_k
        if pieces:
            positions = np.concatenate([p for p, _ in pieces])
            values = np.concatenate([v for _, v in pieces])
        else:
            width = 2 + 2 * k + len(self.mass_ids)
            positions, values = np.zeros(0, np.int64), np.zeros((0, width), np.float32)
        keep = positions < n_tokens
        positions, values = positions[keep], values[keep]
        # the last row of each position: unique over the reversed rows gives first = latest
        unique, first_reversed = np.unique(positions[::-1], return_index=True)
        if not np.array_equal(unique, np.arange(n_tokens)):
            raise RuntimeError(
                f"vLLM request {key}: recorded positions {unique[:5].tolist()}... "
                f"({len(unique)}) do not match its {n_tokens} tokens"
            )
        rows = values[len(positions) - 1 - first_reversed]  # (n, 2 + 2k), by position
        return {
            "entropy": rows[:, 0].astype(np.float32),
            "log_z": rows[:, 1].astype(np.float32),
            "topk_probs": rows[:, 2 : 2 + k].astype(np.float32),
            "topk_token_ids": rows[:, 2 + k : 2 + 2 * k].astype(np.int32),
            **{
                f"{category}_mass": rows[:, 2 + 2 * k + j].astype(np.float32)
                for j, category in enumerate(self.mass_ids)
            },
        }


def copy_to_host_async(values: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """Start copying ``values`` to the host; return (host tensor, event or None).

    On CUDA: a ``non_blocking`` copy into pinned host memory (PyTorch's caching host
    allocator reuses the blocks), then a CUDA event recorded on the current stream; the host
    tensor holds the values once ``event.query()`` is true. On CPU: ``values`` itself, no event.
    """
    if values.device.type != "cuda":
        return values, None
    host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
    host.copy_(values, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host, event


class DecodeRecordingProcessor(LogitsProcessor):
    """vLLM V1 logits processor that records O(k) statistics of softmax(z / T) per row.

    Not argmax-invariant on purpose: vLLM then applies it in ``apply_logits_processors``,
    to the raw float32 logits, before penalties, temperature and top-k / top-p. It returns
    the logits unchanged. Use a subclass from :func:`make_processor_class` (its ``sink``).
    """

    sink: ClassVar[RecordSink | None] = None

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        #: batch row -> (HED request key, live list of that request's output token ids)
        self.rows: dict[int, tuple[int, list[int]]] = {}

    def is_argmax_invariant(self) -> bool:
        """False, so that vLLM calls :meth:`apply` on the raw logits (see the class doc)."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the persistent batch's added / removed / moved rows."""
        process_dict_updates(self.rows, batch_update, _hed_row)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Record the rows of HED's requests; return ``logits`` ``(num_reqs, V)`` unchanged."""
        sink = type(self).sink
        if sink is None or not self.rows:
            return logits
        n = logits.shape[0]
        keys = np.full(n, -1, dtype=np.int64)
        positions = np.zeros(n, dtype=np.int64)
        for index, (key, output_ids) in self.rows.items():
            if index < n:
                keys[index] = key
                positions[index] = len(output_ids)
        sink.record(logits, keys, positions)
        return logits


def _hed_row(params, _prompt_ids, output_ids) -> tuple[int, list[int]] | None:
    key = (params.extra_args or {}).get(EXTRA_ARGS_KEY)
    return None if key is None else (int(key), output_ids)


def make_processor_class(sink: RecordSink | None) -> type[DecodeRecordingProcessor]:
    """A :class:`DecodeRecordingProcessor` subclass writing into ``sink`` (one per engine).

    The class object is passed to ``vllm.LLM(logits_processors=[cls])``; it only works with
    the engine in this process (it is not importable by name from another process).
    """
    return type("HEDDecodeRecordingProcessor", (DecodeRecordingProcessor,), {"sink": sink})


__all__ = [
    "EXTRA_ARGS_KEY",
    "DecodeRecordingProcessor",
    "RecordSink",
    "copy_to_host_async",
    "make_processor_class",
]
