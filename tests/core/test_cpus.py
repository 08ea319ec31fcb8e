"""The CPUs a process may use (affinity, cgroup v2 quota), and their split between processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hed.core import cpus
from hed.core.cpus import allowed_cpus, cgroup_cpu_quota, openmp_environment, thread_shares
from hed.runners.process import child_thread_environment


def fake_cgroup(tmp_path: Path, limits: dict[str, str], own: str = "/user.slice/job") -> tuple:
    """A cgroup v2 tree under ``tmp_path``: ``limits`` = {cgroup path: cpu.max text}."""
    root = tmp_path / "cgroup"
    (root / own.strip("/")).mkdir(parents=True)
    for path, text in limits.items():
        folder = root / path.strip("/")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpu.max").write_text(text + "\n")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(f"0::{own}\n")
    return root, proc


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"/user.slice/job": "150000 100000"}, 1.5),  # 1.5 CPUs of time
        ({"/user.slice/job": "max 100000"}, None),  # no limit
        ({}, None),  # no cpu.max at all (the cpu controller is off)
        # the parent's limit binds: the smallest counts
        ({"/user.slice": "50000 100000", "/user.slice/job": "400000 100000"}, 0.5),
        ({"/user.slice": "max 100000", "/user.slice/job": "200000 50000"}, 4.0),
        ({"/": "300000 100000"}, 3.0),  # the root's own file counts too
    ],
)
def test_cgroup_quota_is_the_smallest_limit_up_the_tree(tmp_path, limits, expected):
    root, proc = fake_cgroup(tmp_path, limits)
    assert cgroup_cpu_quota(root, proc) == expected


def test_cgroup_v1_or_no_proc_file_means_no_quota(tmp_path):
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("4:memory:/job\n1:cpu:/\n")  # cgroup v1 only: no "0::" line
    assert cgroup_cpu_quota(tmp_path, proc) is None
    assert cgroup_cpu_quota(tmp_path, tmp_path / "absent") is None


@pytest.mark.parametrize(
    ("affinity", "quota", "expected"),
    [
        (8, None, 8),  # no quota: the affinity mask
        (8, 2.5, 2),  # a thread beyond the quota would be throttled: rounded down
        (2, 6.0, 2),  # taskset to 2 CPUs in a 6-CPU container
        (4, 0.5, 1),  # half a CPU: still one thread
        (4, 3.0, 3),
    ],
)
def test_allowed_cpus_is_the_smaller_of_affinity_and_quota(affinity, quota, expected):
    assert allowed_cpus(affinity=affinity, quota=quota) == expected


def test_allowed_cpus_reads_affinity_and_the_cgroup(tmp_path, monkeypatch):
    root, proc = fake_cgroup(tmp_path, {"/user.slice/job": "100000 100000"})
    monkeypatch.setattr(cpus, "CGROUP_ROOT", root)
    monkeypatch.setattr(cpus, "PROC_SELF_CGROUP", proc)
    monkeypatch.setattr(cpus.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(cpus, "cgroup_cpu_quota", lambda: cgroup_cpu_quota(root, proc))
    assert cpus.affinity_cpus() == 4
    assert allowed_cpus() == 1


@pytest.mark.parametrize(
    ("cpus_", "processes", "shares"),
    [(8, 3, [3, 3, 2]), (2, 2, [1, 1]), (2, 3, [1, 1, 1]), (16, 4, [4, 4, 4, 4]), (5, 1, [5])],
)
def test_thread_shares_split_the_cpus_between_processes(cpus_, processes, shares):
    assert thread_shares(cpus_, processes) == shares
    assert sum(shares) == max(cpus_, processes)


def test_openmp_threads_sleep_when_idle():
    assert openmp_environment() == {
        "OMP_WAIT_POLICY": "PASSIVE",
        "KMP_BLOCKTIME": "0",
        "GOMP_SPINCOUNT": "0",
    }
    assert openmp_environment(3)["OMP_NUM_THREADS"] == "3"


@pytest.mark.parametrize(
    ("environ", "share", "expected"),
    [
        ({}, 3, {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "OMP_WAIT_POLICY": "PASSIVE"}),
        # a smaller count the user set stays; a larger one is cut to the share
        ({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "64"}, 3,
         {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "3", "OMP_WAIT_POLICY": "PASSIVE"}),
        # the user's wait policy stays (not overwritten)
        ({"OMP_WAIT_POLICY": "ACTIVE"}, 2, {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}),
    ],
)  # fmt: skip
def test_a_node_process_gets_its_share_and_passive_threads(environ, share, expected):
    env = child_thread_environment(share, environ)
    assert {k: env[k] for k in expected} == expected
    assert ("OMP_WAIT_POLICY" in env) == ("OMP_WAIT_POLICY" not in environ)
    assert env["GOMP_SPINCOUNT"] == "0" and env["KMP_BLOCKTIME"] == "0"


def test_torch_threads_are_lowered_never_raised(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert cpus.cap_torch_threads(1) == 1 and torch.get_num_threads() == 1
        assert cpus.cap_torch_threads(4) == 1 and torch.get_num_threads() == 1
        torch.set_num_threads(2)
        monkeypatch.setattr(cpus, "allowed_cpus", lambda: 1)
        assert cpus.cap_torch_threads() == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_a_kedro_session_sets_passive_openmp_before_torch_loads(given, expected):
    """``hed.settings`` (loaded first by ``kedro run``) sets the variables, loads no torch
    (OpenMP reads them once, when torch loads it), and keeps a value the user set."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in cpus.PASSIVE_OPENMP}
    if given:
        env["OMP_WAIT_POLICY"] = given
    code = (
        "import os, sys, hed.settings; "
        "print(os.environ['OMP_WAIT_POLICY'], os.environ['KMP_BLOCKTIME'], "
        "os.environ['GOMP_SPINCOUNT'], 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.splitlines()[-1].split() == [expected, "0", "0", "False"]
