"""Shared fixtures: the embedded SmolLM2 (converted once per machine) and a tiny random model.

The converted SmolLM2 folder is cached under ``.pytest_cache/hed_models`` (ignored by git) so
only the first test session pays the ~20 s conversion.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from . import vllm_gate
from .vllm_gate import pytest_sessionfinish, pytest_terminal_summary, pytest_testnodedown  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Session fixtures built once per session whatever the number of xdist workers.
SHARED_RUNS = {"uninterrupted_small_step", "resumed_small_step"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The vLLM gate (tests/vllm_gate.py), then every file holding a ``slow`` test first.

    ``make test`` hands whole files to its xdist workers in this order (``--dist loadfile``):
    the long end-to-end files start first and the short ones fill in at the end, instead of
    one long file running alone after the rest. The ``ray`` files, which run one at a time
    (:func:`_one_ray_cluster_at_a_time`), are spread over the slow ones so that a worker
    rarely waits for the other's cluster. A slow file whose every test only reads a run built
    once per session (:data:`SHARED_RUNS`, :func:`built_once_per_session`) comes last of the
    slow files: started together with the file that builds it, its worker would wait idle for
    the build.
    """
    vllm_gate.pytest_collection_modifyitems(config, items)
    files = list(dict.fromkeys(item.path for item in items))
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    ray = [f for f in files if f in {i.path for i in items if i.get_closest_marker("ray")}]
    readers = {
        f
        for f in slow
        if all(SHARED_RUNS & set(getattr(i, "fixturenames", ())) for i in items if i.path == f)
    }
    order = [f for f in files if f in slow and f not in ray and f not in readers]
    for k, file in enumerate(ray):
        order.insert(k * (len(order) + k) // max(1, len(ray)), file)
    order += [f for f in files if f in readers]
    order += [f for f in files if f not in order]
    rank = {file: i for i, file in enumerate(order)}
    items.sort(key=lambda item: rank[item.path])  # stable: a file's tests keep their order


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``make test`` runs one worker per CPU), pin each worker to one CPU.

    Each worker is then a one-CPU process, as HED sees it (``hed.core.cpus.allowed_cpus``
    reads the affinity; the ``kedro run`` subprocesses a test starts inherit it), so two
    workers' torch thread pools never spin against each other on the same cores.
    """
    import os

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[int(worker[2:]) % len(cpus)]})
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def field_defaults(model: type) -> dict:
    """``{field: default}`` of a pydantic section model (``...``: required, no default)."""
    return {
        name: ... if info.is_required() else info.get_default(call_default_factory=True)
        for name, info in model.model_fields.items()
    }


SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
MODEL_CACHE = REPO_ROOT / ".pytest_cache" / "hed_models"


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """HuggingFace folder of the embedded SmolLM2-135M-Instruct (a ``global_step_0/actor_hf``).

    Converted by one xdist worker while the others wait on the lock (a second conversion would
    replace the folder another worker is reading)."""
    from filelock import FileLock

    from hed.decode.embedded import ensure_embedded_checkpoint

    MODEL_CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(MODEL_CACHE / "smollm2.lock"):
        return ensure_embedded_checkpoint(MODEL_CACHE / "smollm2" / "global_step_0" / "actor_hf")


@pytest.fixture(scope="session")
def tokenizer(smollm2_dir):
    """The real SmolLM2 tokenizer (byte-level BPE, 49,152 tokens, chat template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def build_tiny_model(
    dest: Path, tokenizer, seed: int = 0, scale: float = 1.0, head_dim: int | None = None
) -> Path:
    """Write a tiny random-weight Llama with the real SmolLM2 tokenizer into ``dest``.

    Args:
        dest: model folder to create (config.json, model.safetensors, tokenizer files).
        tokenizer: the tokenizer to save alongside (its vocab size sets the model's).
        seed: torch seed for the random weights; different seeds give different "checkpoints".
        scale: multiplier of the output embedding; larger values give sharper (lower-entropy)
            next-token distributions.
        head_dim: attention head size (None: hidden 32 / 4 heads = 8; vLLM's CPU attention
            kernels need a supported size such as 64).

    Returns:
        ``dest``.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id],
        pad_token_id=tokenizer.pad_token_id,
    )
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """A tiny random Llama (hidden 32, 2 layers) with the real tokenizer.

    Saved at ``<tmp>/global_step_0/actor_hf``.
    """
    root = tmp_path_factory.mktemp("tiny_run")
    return build_tiny_model(root / "global_step_0" / "actor_hf", tokenizer)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (real benchmark files); tests using it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} not present (real benchmark files live only in ../shared/data)")
    return SHARED_DATA


def built_once_per_session(tmp_path_factory, name: str, build):
    """``build(folder)``'s result, built once per test session however many xdist workers need
    it: the first worker to ask builds it into ``folder`` (in the session's temporary root,
    which all its workers share) under a file lock and pickles the result; the others wait on
    the lock and read that. Without xdist the folder is in this process's own temporary root.

    What a test reads there is shared: a test that changes a project built here works on its
    own copy (``shutil.copytree(..., symlinks=True)``).
    """
    import os
    import pickle
    import shutil

    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # <session basetemp>/popen-gwN: the parent is the session's
    folder, result = root / f"shared_{name}", root / f"shared_{name}.pickle"
    with FileLock(str(root / f"shared_{name}.lock")):
        if result.exists():
            return pickle.loads(result.read_bytes())
        if folder.exists():  # a build that failed half-way, in another worker
            shutil.rmtree(folder)
        built = build(folder)
        result.write_bytes(pickle.dumps(built))
        return built


@pytest.fixture(scope="session")
def uninterrupted_small_step(tmp_path_factory, smollm2_dir):
    """A small step generated and aggregated in one sequential ``kedro run`` (subprocess),
    once per session (:func:`built_once_per_session`: do not change its project).

    Returns:
        (project, snapshot): see :func:`tests.project_copy.uninterrupted_run`.
    """
    from .project_copy import uninterrupted_run

    return built_once_per_session(
        tmp_path_factory, "uninterrupted", lambda folder: uninterrupted_run(folder, smollm2_dir)
    )


@pytest.fixture(scope="session")
def resumed_small_step(tmp_path_factory, smollm2_dir):
    """The same step on ``GPURunner`` with two CPU workers, SIGKILLed, resumed, aggregated,
    once per session (:func:`built_once_per_session`: a test that changes its project copies
    it first).

    Returns:
        :class:`tests.project_copy.ResumedRun`.
    """
    from .project_copy import kill_resume_aggregate

    return built_once_per_session(
        tmp_path_factory, "killed", lambda folder: kill_resume_aggregate(folder, smollm2_dir)
    )


@pytest.fixture(scope="session")
def demo_study(tmp_path_factory, tokenizer, smollm2_dir) -> Path:
    """A small real study, reported once (tests/study_demo.py): the project folder."""
    from hed.io import provenance

    from .study_demo import report_demo_study

    root = tmp_path_factory.mktemp("demo_study")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(provenance, "git_state", lambda path: {"commit": "c" * 40, "dirty": False})
        report_demo_study(root, tokenizer, smollm2_dir)
    return root


@pytest.fixture
def read_only_folder(tmp_path):
    """Factory: ``make(path, files={name: text})`` fills a new folder ``path`` with ``files``
    and makes it unwritable; returns the reason a write there gives.

    As root (who writes through permission bits) the folder is a tmpfs remounted read-only,
    a real ``Read-only file system`` as on a read-only bind mount; otherwise it is chmod 0555
    (``Permission denied``). Unmounted / restored at teardown.
    """
    import os
    import subprocess

    made: list[tuple[Path, bool]] = []

    def make(path: Path, files: dict[str, str] | None = None) -> str:
        path.mkdir(parents=True)
        root = os.geteuid() == 0
        if root:
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], check=True
            )
        made.append((path, root))
        for name, text in (files or {}).items():
            (path / name).write_text(text)
        if root:
            subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
            return "Read-only file system"
        path.chmod(0o555)
        return "Permission denied"

    yield make
    for path, root in reversed(made):
        if root:
            subprocess.run(["umount", str(path)], check=False)
        else:
            path.chmod(0o755)


@pytest.fixture(autouse=True, scope="module")
def _one_ray_cluster_at_a_time(request):
    """A module marked ``ray`` holds a file lock while it runs, so xdist workers never run two
    Ray clusters at once: ``ray.cluster_utils.Cluster`` records its address on the machine,
    and a plain ``ray.init()`` (a ``kedro run --runner hed.runners.RayRunner``) in another
    worker would join that cluster instead of starting its own."""
    if request.node.get_closest_marker("ray") is None:
        yield
        return
    from filelock import FileLock

    MODEL_CACHE.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(MODEL_CACHE.parent / "ray_cluster.lock"):
        yield


@pytest.fixture(autouse=True)
def _no_wandb_run_left_open():
    """A test that opens a W&B run and stops half-way (a publish 'killed' on purpose) must not
    leave it as the process's current run: the next ``wandb.init`` (a mini_rl training's)
    would finish it and TRL's callback would then update a closed run's config."""
    yield
    setup = sys.modules.get("wandb.sdk.wandb_setup")
    singleton = getattr(setup, "singleton", None) if setup else None
    if singleton is not None:  # every run still active, not only the module's wandb.run
        singleton().finish_all_active_runs()
