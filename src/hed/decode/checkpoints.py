"""Checkpoint discovery for RL runs laid out like verl's, TRL's or the HF Trainer's.

A run's ``checkpoint_root`` holds one folder per saved step, in one of two layouts:

* verl: ``global_step_<N>/``; the model of the step is the HuggingFace folder
  ``global_step_<N>/actor_hf`` (HED's and many merged-verl layouts) or
  ``global_step_<N>/actor/huggingface`` (what verl writes next to its FSDP shards);
* TRL / HF Trainer (``Trainer.save_model`` at ``save_steps``): ``checkpoint-<N>/``, which is
  itself the HuggingFace folder (config.json and weights beside the optimizer state).

A root holding both is refused (which one is the run?). The step number comes from the
``global_step_<N>`` or ``checkpoint-<N>`` path component *nearest* the model folder:
``/x/global_step_900/archive/global_step_12/actor_hf`` is step 12.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hed.errors import CheckpointError
from hed.records.atomic_io import atomic_folder

logger = logging.getLogger(__name__)

#: Model folders inside ``global_step_<N>``, in the order they are tried.
MODEL_SUBDIRS = ("actor_hf", "actor/huggingface")

_STEP_RE = re.compile(r"^global_step_(\d+)$")
#: TRL / HF Trainer step folders (``transformers.trainer_utils.PREFIX_CHECKPOINT_DIR``).
_TRAINER_STEP_RE = re.compile(r"^checkpoint-(\d+)$")
VERL_LAYOUT = "verl (global_step_<N>/actor_hf)"
TRAINER_LAYOUT = "TRL / HF Trainer (checkpoint-<N>/)"
_WEIGHT_PATTERNS = (
    "model.safetensors",
    "model-*.safetensors",
    "pytorch_model.bin",
    "pytorch_model-*.bin",
)
_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def step_from_path(path: str | Path) -> int:
    """Return the RL step of a checkpoint path: the ``global_step_<N>`` or ``checkpoint-<N>``
    component nearest the end.

    Raises:
        CheckpointError: no path component is ``global_step_<N>`` or ``checkpoint-<N>``.
    """
    for part in reversed(Path(path).parts):
        match = _STEP_RE.match(part) or _TRAINER_STEP_RE.match(part)
        if match:
            return int(match.group(1))
    raise CheckpointError(
        f"{path}: no 'global_step_<N>' or 'checkpoint-<N>' folder in the path; cannot tell the step"
    )


def _step_folders(root: Path) -> tuple[dict[int, Path], dict[int, Path]]:
    """The verl and the TRL / HF Trainer step folders of ``root``: ``({step: folder}, ...)``."""
    verl: dict[int, Path] = {}
    trainer: dict[int, Path] = {}
    for child in root.iterdir():
        if not child.is_dir():
            continue
        if match := _STEP_RE.match(child.name):
            verl[int(match.group(1))] = child
        elif match := _TRAINER_STEP_RE.match(child.name):
            trainer[int(match.group(1))] = child
    return verl, trainer


def _refuse_mixed(root: Path, verl: dict[int, Path], trainer: dict[int, Path]) -> None:
    if verl and trainer:
        raise CheckpointError(
            f"checkpoint_root {root} mixes two layouts, {VERL_LAYOUT} "
            f"({verl[min(verl)].name}, ...) and {TRAINER_LAYOUT} ({trainer[min(trainer)].name}, "
            "...): point each run's `checkpoint_root` at a folder of one layout"
        )


def discover_steps(checkpoint_root: str | Path) -> list[int]:
    """List the steps under ``checkpoint_root``, ascending.

    The steps are the ``N`` of its ``global_step_<N>`` children (verl) or of its
    ``checkpoint-<N>`` children (TRL / HF Trainer).

    Raises:
        CheckpointError: the root does not exist, holds no step folder, or holds both layouts.
    """
    root = Path(checkpoint_root)
    if not root.is_dir():
        raise CheckpointError(
            f"checkpoint_root {root} does not exist: fix the run's `checkpoint_root` "
            "(parameters.yml, `runs`)"
        )
    verl, trainer = _step_folders(root)
    _refuse_mixed(root, verl, trainer)
    steps = sorted(verl or trainer)
    if not steps:
        raise CheckpointError(
            f"checkpoint_root {root} holds no global_step_<N> folder (verl) and no "
            "checkpoint-<N> folder (TRL / HF Trainer)"
        )
    return steps


def model_dir_for_step(checkpoint_root: str | Path, step: int) -> Path:
    """Return the HuggingFace model folder of ``step`` under ``checkpoint_root``, validated.

    ``global_step_<step>/actor_hf`` (or ``actor/huggingface``) in a verl root,
    ``checkpoint-<step>`` in a TRL / HF Trainer root.

    Raises:
        CheckpointError: the step folder or its model folder is missing; the model folder has a
            config.json but no weights ("needs merging (verl model_merger)"); only LoRA
            adapter weights; or the root holds both layouts.
    """
    root = Path(checkpoint_root)
    step_dir = root / f"global_step_{step}"
    trainer_dir = root / f"checkpoint-{step}"
    if root.is_dir():
        _refuse_mixed(root, *_step_folders(root))
    if trainer_dir.is_dir() and not step_dir.is_dir():
        validate_model_dir(trainer_dir)
        return trainer_dir
    if not step_dir.is_dir():
        raise CheckpointError(
            f"step {step} not found: neither {step_dir} nor {trainer_dir} exists "
            "(check `steps` and `checkpoint_root`)"
        )
    for sub in MODEL_SUBDIRS:
        candidate = step_dir / sub
        if candidate.is_dir():
            validate_model_dir(candidate)
            return candidate
    looked = ", ".join(str(step_dir / sub) for sub in MODEL_SUBDIRS)
    if (step_dir / "actor").is_dir():
        raise CheckpointError(
            f"{step_dir / 'actor'} holds no HuggingFace folder: needs merging "
            f"(verl model_merger) into {step_dir / 'actor_hf'}"
        )
    raise CheckpointError(f"no model folder for step {step}: looked in {looked}")


def validate_model_dir(model_dir: str | Path) -> None:
    """Check that ``model_dir`` is a loadable full-weight HuggingFace folder.

    Raises:
        CheckpointError: config.json missing; LoRA-adapter-only; or no weight files.
    """
    model_dir = Path(model_dir)
    has_weights = any(any(model_dir.glob(p)) for p in _WEIGHT_PATTERNS)
    if (model_dir / "adapter_config.json").is_file() and not has_weights:
        raise CheckpointError(
            f"{model_dir} holds only LoRA adapter weights: merge the adapter into the base model "
            "(peft merge_and_unload) and save a full model there"
        )
    if not (model_dir / "config.json").is_file():
        raise CheckpointError(f"{model_dir} has no config.json: not a HuggingFace model folder")
    if not has_weights:
        raise CheckpointError(
            f"{model_dir} has config.json but no weights: needs merging (verl model_merger) into a "
            "HuggingFace folder"
        )


#: Bytes read per call when digesting a weight file.
_DIGEST_CHUNK = 16 << 20


def _file_digest(path: Path) -> str:
    """xxh3_128 of a file's bytes, read in 16 MiB chunks (hex, 32 digits)."""
    import xxhash

    digest = xxhash.xxh3_128()
    buffer = bytearray(_DIGEST_CHUNK)
    view = memoryview(buffer)
    with path.open("rb") as file:
        while n := file.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


def checkpoint_fingerprint(model_dir: str | Path) -> dict[str, str]:
    """Content hashes of a checkpoint: its ``config.json``, weight index and every weight byte.

    RL checkpoints of one run have the same file names and sizes at every step, so a
    fingerprint of names and sizes cannot tell a retrained step from the old one; this one
    digests the content of every weight file (``model*.safetensors``, ``pytorch_model*.bin``):
    a change of any weight changes ``weights_xxh3_128``. xxh3_128 (the ``xxhash`` package)
    rather than sha256: it detects change as exactly (a 128-bit digest; nothing here is
    adversarial) at 5.6 GB/s against sha256's 1.15 GB/s on one core of this project's
    2-core CI machine (``bench/checkpoint_fingerprint.py``: a 16 GB checkpoint in ~3 s when
    cached, else as fast as the disk reads). Files are digested on up to 4 threads.

    Returns:
        ``{"model_dir", "config_sha256", "weights_index_sha256", "weights_xxh3_128"}``:
        sha256 of config.json; sha256 of the sharded index file, else of the weight files'
        names and sizes; xxh3_128 over each weight file's name, size and content digest.

    Raises:
        OSError: a file cannot be read.
    """
    from concurrent.futures import ThreadPoolExecutor

    model_dir = Path(model_dir)
    config_hash = hashlib.sha256((model_dir / "config.json").read_bytes()).hexdigest()
    files = sorted({f for p in _WEIGHT_PATTERNS for f in model_dir.glob(p)}, key=lambda f: f.name)
    index = next((model_dir / n for n in _WEIGHT_INDEXES if (model_dir / n).is_file()), None)
    if index is not None:
        weights_hash = hashlib.sha256(index.read_bytes()).hexdigest()
    else:
        listing = [(f.name, f.stat().st_size) for f in files]
        weights_hash = hashlib.sha256(json.dumps(listing).encode()).hexdigest()
    with ThreadPoolExecutor(max_workers=max(1, min(4, len(files)))) as pool:
        digests = list(pool.map(_file_digest, files))
    content = [(f.name, f.stat().st_size, d) for f, d in zip(files, digests, strict=True)]
    import xxhash

    return {
        "model_dir": str(model_dir),
        "config_sha256": config_hash,
        "weights_index_sha256": weights_hash,
        "weights_xxh3_128": xxhash.xxh3_128_hexdigest(json.dumps(content).encode()),
    }


_CONTENT_KEYS = ("config_sha256", "weights_index_sha256", "weights_xxh3_128")


def identical_checkpoints(
    fingerprints: Mapping[str, Mapping[Any, Mapping[str, str]]],
) -> list[list[tuple[str, int]]]:
    """The (run, step) pairs whose checkpoints are byte-identical, grouped.

    Args:
        fingerprints: ``{run: {step: fingerprint}}`` (:func:`checkpoint_fingerprint`; steps as
            int or str, as in the ``checkpoints`` dataset).

    Returns:
        Each group of two or more ``(run, step)`` with equal ``config_sha256``,
        ``weights_index_sha256`` and ``weights_xxh3_128``, in the order given.
    """
    groups: dict[tuple[str, ...], list[tuple[str, int]]] = {}
    for run, steps in fingerprints.items():
        for step, fingerprint in steps.items():
            key = tuple(str(fingerprint.get(k)) for k in _CONTENT_KEYS)
            groups.setdefault(key, []).append((run, int(step)))
    return [group for group in groups.values() if len(group) > 1]


def warn_identical_checkpoints(fingerprints: Mapping[str, Mapping[Any, Mapping[str, str]]]) -> None:
    """One warning naming the runs/steps whose checkpoints are byte-identical.

    Their tables would be identical (the same model sampled twice): a step folder copied or
    linked where another was meant, or a run pointed at another's ``checkpoint_root``. Runs
    that share only their first step (one base model every run starts from: the same step,
    the first of each run) are expected and only logged (info).

    Args:
        fingerprints: as :func:`identical_checkpoints`.
    """
    first = {run: min((int(s) for s in steps), default=None) for run, steps in fingerprints.items()}
    odd, shared_start = [], []
    for group in identical_checkpoints(fingerprints):
        steps = {step for _, step in group}
        runs = [run for run, _ in group]
        start = len(steps) == 1 and len(set(runs)) == len(runs)
        start = start and all(first[run] == step for run, step in group)
        (shared_start if start else odd).append(", ".join(f"{r} step {s}" for r, s in group))
    if shared_start:
        logger.info("runs start from the same checkpoint: %s", "; ".join(shared_start))
    if odd:
        logger.warning(
            "byte-identical checkpoints (same config.json and weights): %s; their tables "
            "would be identical: check checkpoint_root and steps of these runs",
            "; ".join(f"[{text}]" for text in odd),
        )


def vocabulary_of(model_dir: str | Path) -> dict[str, Any]:
    """What the token ids of a checkpoint mean: its vocabulary size and tokenizer.

    Returns:
        ``{"vocab_size": int | None, "tokenizer_sha256": str | None}``: ``vocab_size`` of
        ``config.json`` (the logits' width: entropies are over this many tokens); sha256 of
        the tokenizer's vocabulary (``tokenizer.json``'s ``model.vocab`` and
        ``added_tokens``, else ``vocab.json``'s bytes, else ``tokenizer.model``'s), None when
        the folder holds none of them. Unreadable JSON counts as None (loading reports it).
    """
    model_dir = Path(model_dir)
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    digest = None
    try:
        if (model_dir / "tokenizer.json").is_file():
            tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
            vocab = [(tok.get("model") or {}).get("vocab"), tok.get("added_tokens")]
            digest = hashlib.sha256(json.dumps(vocab, sort_keys=True).encode()).hexdigest()
        else:
            found = [model_dir / n for n in ("vocab.json", "tokenizer.model")]
            first = next((f for f in found if f.is_file()), None)
            digest = hashlib.sha256(first.read_bytes()).hexdigest() if first else None
    except (OSError, ValueError):
        digest = None
    return {"vocab_size": int(size) if size else None, "tokenizer_sha256": digest}


def check_same_vocabulary(run: str, model_dirs: dict[int, str | Path]) -> None:
    """Refuse a run whose checkpoints do not share one vocabulary and tokenizer.

    Entropies, top-k and token texts of steps over different vocabularies cannot be
    compared (a resized embedding, a tokenizer swapped mid-run). The first step is the
    reference; a size or tokenizer that cannot be read is not compared.

    Args:
        run: the run's name. model_dirs: ``{step: model folder}`` in step order.

    Raises:
        CheckpointError: one line naming both steps, their folders and vocabulary sizes (or
            that their tokenizers differ).
    """
    seen = [(step, Path(d), vocabulary_of(d)) for step, d in model_dirs.items()]
    if not seen:
        return
    step0, dir0, ref = seen[0]
    for step, folder, vocab in seen[1:]:
        for key, what in (("vocab_size", "vocabulary size"), ("tokenizer_sha256", "tokenizer")):
            if None in (ref[key], vocab[key]) or ref[key] == vocab[key]:
                continue
            values = (
                f"{vocab[key]:,} vs {ref[key]:,}"
                if key == "vocab_size"
                else "a different token vocabulary"
            )
            raise CheckpointError(
                f"run {run}: step {step} ({folder}) has {what} {values} at step {step0} "
                f"({dir0}); entropies over different vocabularies cannot be compared: "
                f"use checkpoints of one model or drop step {step} from runs.{run}.steps"
            )


def write_model_folder(model: Any, tokenizer: Any, target: str | Path) -> Path:
    """Write a HuggingFace model folder (weights, config, tokenizer) into place atomically.

    The folder is written under a temporary name next to ``target`` and renamed when complete,
    so a killed process never leaves a folder that :func:`model_dir_for_step` would take for a
    checkpoint. The folder is made world-readable (``0755``; ``mkdtemp`` creates ``0700``):
    checkpoints are shared read-only data.

    Args:
        model: a ``transformers`` ``PreTrainedModel`` (saved with ``save_pretrained``).
        tokenizer: its tokenizer (saved with ``save_pretrained``).
        target: the folder to create, e.g. ``<checkpoint_root>/global_step_<N>/actor_hf``; an
            existing one is replaced.

    Returns:
        ``target`` as a ``Path``.

    Raises:
        OSError: from ``save_pretrained`` or the rename; the temporary folder is removed first.
    """
    target = Path(target)
    with atomic_folder(target, mode=0o755) as temp:
        model.save_pretrained(temp)
        tokenizer.save_pretrained(temp)
    return target
