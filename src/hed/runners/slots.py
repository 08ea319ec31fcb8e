"""Where ``gpu`` nodes run: slots (a GPU, or a CPU worker) from the runner's ``gpus`` parameter.

:func:`resolve_slots` turns ``--runner-params gpus=...`` as users type it (``4:5:6:7``, ``4-7``,
``[3]``, ``2``, ``cpu``) into :class:`Slot` s; :func:`dispatch_key` orders queued nodes so that
early steps finish first. Used by :class:`hed.runners.gpu.GPURunner` and
:class:`hed.runners.ray.RayRunner`.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from hed.core.validators import is_integer
from hed.errors import (
    ConfigError,
)

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class Slot:
    """A place where one ``gpu`` node runs at a time: a GPU, or a CPU worker without one.

    Attributes:
        label: shown in logs, e.g. ``GPU 3`` or ``CPU worker 0``.
        cuda_visible_devices: the child's ``CUDA_VISIBLE_DEVICES`` (``""``: no GPU).
    """

    label: str
    cuda_visible_devices: str


def dispatch_key(node_name: str) -> tuple[str | int, ...]:
    """Natural sort key: ``r.step_2.shard_0.x`` sorts before ``r.step_10.shard_0.x``.

    Digit runs compare as numbers, everything else as text, so names of the form
    ``<run>.step_<step>.shard_<k>.<name>`` sort by (run, step, shard) and any other names
    sort by name.
    """
    parts = _DIGITS.split(node_name)  # text, digits, text, ...: same types at the same places
    return tuple(int(part) if i % 2 else part for i, part in enumerate(parts))


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as ``CUDA_VISIBLE_DEVICES`` entries.

    The entries of ``CUDA_VISIBLE_DEVICES`` when it is set, else ``0 .. n-1``; cut to the
    number of devices torch can see (none without CUDA).
    """
    try:
        import torch

        count = torch.cuda.device_count()
    except ImportError:
        count = 0
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [i.strip() for i in env.split(",")] if env is not None else [str(i) for i in range(count)]
    return ids[:count]


GpuSpec = str | int | Sequence[str | int] | None

#: How ``gpus`` may be written, for error messages.
GPU_SPELLINGS = "gpus=4:5:6:7, gpus=4-7, gpus=[3] (one GPU), gpus=2 (the first two), gpus=cpu"
_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")
_LIST = re.compile(r"^\[(.*)\]$")


def gpu_ids_from_text(text: str) -> list[str]:
    """Parse GPU ids as users type them: ``4:5:6:7``, ``4,5,6,7``, ``4-7``, ``[4,5,6,7]``.

    Items are separated by ``:`` or ``,``; an item ``a-b`` (a ≤ b, whole numbers) stands for
    ``a, a+1, ..., b``; one pair of brackets around the list is allowed. Any other item (a
    device UUID such as ``GPU-5f1c...``) is kept verbatim for ``CUDA_VISIBLE_DEVICES``.

    Returns:
        The ids in order, e.g. ``["4", "5", "6", "7"]``.

    Raises:
        ConfigError: an empty list or item, a reversed range (``7-4``) or a repeated id.
    """
    body = text.strip()
    if match := _LIST.match(body):
        body = match.group(1)
    ids: list[str] = []
    for item in (part.strip().strip("'\"") for part in re.split(r"[:,]", body)):
        span = _RANGE.match(item)
        if span and int(span.group(1)) <= int(span.group(2)):
            ids += [str(i) for i in range(int(span.group(1)), int(span.group(2)) + 1)]
        elif item and not span and not re.fullmatch(r"[\d\s-]*-[\d\s-]*", item):
            ids.append(item)
        else:
            ids = []
            break
    if not ids or len(set(ids)) != len(ids):
        raise ConfigError(
            f"GPURunner: gpus={text!r} is not a list of GPU ids; write one of {GPU_SPELLINGS}"
        )
    return ids


def raw_runner_param(name: str, argv: Sequence[str] | None = None) -> str | None:
    """The text of ``name=...`` in ``kedro run``'s ``--runner-params``, as typed.

    Kedro reads ``--runner-params`` with OmegaConf's dotlist parser, whose YAML 1.1 rules turn
    ``4:5:6:7`` into the base-60 integer 882367 (and ``4:5`` into 245) before the runner sees
    it; the command line still holds what the user typed. Only ``kedro run`` is read (a
    ``click`` context whose command is ``run``).

    Args:
        name: the parameter, e.g. ``"gpus"``.
        argv: the command line (default ``sys.argv``).

    Returns:
        The value as typed, or None when not under ``kedro run`` or not given there.
    """
    if argv is None:
        ctx = click.get_current_context(silent=True)
        if ctx is None or ctx.command.name != "run":
            return None
        argv = sys.argv
    value = None
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--runner-params" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--runner-params="):
            value = arg.partition("=")[2]
    if value is None:
        return None
    found = None
    for item in value.split(","):  # as Kedro splits it
        key, equals, text = item.partition("=")
        if equals and key.strip() == name:
            found = text.strip()
    return found


def resolve_slots(gpus: GpuSpec = None, cpu_workers: int = 1) -> list[Slot]:
    """Turn the runner's ``gpus`` / ``cpu_workers`` parameters into slots.

    Args:
        gpus: ids as text (``"4:5:6:7"``, ``"4-7"``, ``"[4,5,6,7]"``, see
            :func:`gpu_ids_from_text`) or a list (``[3]``): device ids, written verbatim into
            ``CUDA_VISIBLE_DEVICES`` (a UUID works too); an int ``n``: the first ``n`` visible
            devices; ``"cpu"``: no GPU; ``None``: every visible device, or no GPU when none is.
        cpu_workers: without a GPU, how many ``gpu`` nodes run at once (each on CPU).

    Returns:
        One slot per device, or ``cpu_workers`` CPU slots.

    Raises:
        ConfigError: a malformed, empty or impossible ``gpus``, or ``cpu_workers`` < 1.
    """
    if isinstance(gpus, bool):
        raise ConfigError(
            f"GPURunner: gpus={gpus!r} is not a GPU count or a list of GPU ids; "
            f"write one of {GPU_SPELLINGS}"
        )
    if gpus is None:
        ids = visible_gpus()
    elif isinstance(gpus, int):
        visible = visible_gpus()
        if not 0 < gpus <= len(visible):
            raise ConfigError(
                f"GPURunner: gpus={gpus} asks for {gpus} GPU(s) but {len(visible)} are visible; "
                f"write one of {GPU_SPELLINGS}"
            )
        ids = visible[:gpus]
    elif isinstance(gpus, str) and gpus.strip().lower() == "cpu":
        ids = []
    elif isinstance(gpus, str):
        ids = gpu_ids_from_text(gpus)
    else:
        ids = [str(item).strip() for item in gpus]
        if not ids or "" in ids or len(set(ids)) != len(ids):
            raise ConfigError(
                f"GPURunner: gpus={gpus!r} is not a list of GPU ids; write one of {GPU_SPELLINGS}"
            )
    if ids and visible_gpus():
        # CUDA_VISIBLE_DEVICES=abc hides every GPU: the node would silently run on CPU
        for item in ids:
            if not re.fullmatch(r"\d+|(GPU|MIG)-[0-9A-Za-z/-]+", item):
                raise ConfigError(
                    f"GPURunner: gpus={gpus} names {item!r}, which is neither a GPU index nor a "
                    f"UUID (GPU-..., MIG-...): CUDA would hide every GPU from the node; write "
                    f"one of {GPU_SPELLINGS}"
                )
    if ids:
        if not isinstance(gpus, int) and gpus is not None and not visible_gpus():
            logger.warning(
                "GPURunner: gpus=%s names GPUs but torch sees no CUDA device here: the gpu "
                "nodes run on CPU, one per named id (use gpus=cpu,cpu_workers=N to say so)",
                gpus if isinstance(gpus, str) else ":".join(map(str, gpus)),
            )
        return [Slot(f"GPU {i}", i) for i in ids]
    if not is_integer(cpu_workers) or cpu_workers < 1:
        raise ConfigError(f"GPURunner: cpu_workers={cpu_workers!r} must be a whole number ≥ 1")
    return [Slot(f"CPU worker {k}", "") for k in range(cpu_workers)]
