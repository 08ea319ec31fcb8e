"""Throwaway copies of the project for end-to-end tests, and ways to run Kedro in them.

A copy holds what a fresh clone has (``conf``, the demo prompts, ``pyproject.toml``, ``src``)
with the embedded SmolLM2 linked from the test cache (``tests/conftest.py::smollm2_dir``), so
``kedro run`` in it needs no network and writes only under the copy's ``data/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kedro.framework.project import configure_project, pipelines
from kedro.framework.session import KedroSession

REPO_ROOT = Path(__file__).resolve().parents[1]

#: The run of the embedded default (conf/base/parameters.yml).
RUN = "smollm2_demo"


#: A run small enough to generate in seconds on one CPU thread.
TINY = {
    "prompts": {"num_prompts": 2},
    "generation": {
        "num_shards": 1,
        "samples_per_prompt": 1,
        "max_new_tokens": 4,
        "batch_size": 2,
        "torch_threads": 1,
    },
}


def _tracked_conf_envs() -> set[str] | None:
    """The environment folders of ``conf/`` that git tracks (None outside a git checkout)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "conf"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return {Path(path).parts[1] for path in listed if len(Path(path).parts) > 2}


def _untracked_conf(folder: str, names: list[str]) -> set[str]:
    """What a fresh clone's ``conf/`` lacks: credentials, and a user's own study folders
    (``conf/my_study/`` made by following the README must not leak into test projects)."""
    skipped = {name for name in names if name.startswith("credentials")}
    tracked = _tracked_conf_envs()
    if Path(folder) == REPO_ROOT / "conf" and tracked is not None:
        skipped |= {n for n in names if (Path(folder) / n).is_dir() and n not in tracked}
    return skipped


def copy_project(dest: Path, smollm2_dir: Path) -> Path:
    """Copy what a fresh clone has (conf, demo prompts, pyproject) and link the cached model.

    Args:
        dest: an empty (or new) folder.
        smollm2_dir: the converted SmolLM2 folder (``smollm2_dir`` fixture).

    Returns:
        ``dest``, a Kedro project whose run ``smollm2_demo`` step 0 is the linked model.
    """
    ignore = shutil.ignore_patterns
    shutil.copytree(REPO_ROOT / "conf", dest / "conf", ignore=_untracked_conf)
    (dest / "data" / "01_raw" / "prompts").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "data/01_raw/prompts/demo_math.jsonl", dest / "data/01_raw/prompts/")
    shutil.copy(REPO_ROOT / "pyproject.toml", dest / "pyproject.toml")
    shutil.copy(REPO_ROOT / ".telemetry", dest / ".telemetry")
    # Kedro's CLI and IPython extension need the source folder inside the project
    shutil.copytree(REPO_ROOT / "src", dest / "src", ignore=ignore("__pycache__", "*.egg-info"))
    step_dir = dest / "data/01_raw/checkpoints" / RUN / "global_step_0"
    step_dir.mkdir(parents=True)
    (step_dir / "actor_hf").symlink_to(smollm2_dir, target_is_directory=True)
    return dest


def set_parameters(project: Path, overrides: dict[str, dict[str, Any]]) -> None:
    """Change ``prompts`` / ``generation`` values in ``conf/base/parameters_generation.yml``.

    Unlike ``--params``, the change holds for every later command in the copy (a resume, an
    aggregation-only run), as a user's edit of the file would.

    Args:
        project: a copy made by :func:`copy_project`.
        overrides: ``{"generation": {"max_new_tokens": 16}, "prompts": {...}}``.
    """
    path = project / "conf/base/parameters_generation.yml"
    params = yaml.safe_load(path.read_text())
    for section, values in overrides.items():
        params[section].update(values)
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def run_kedro(
    project: Path,
    pipeline: str | None = None,
    env: str | None = None,
    params: dict | None = None,
    *,
    only_missing_outputs: bool = False,
) -> None:
    """Run a pipeline of the project at ``project`` in this process with SequentialRunner.

    ``only_missing_outputs`` is ``kedro run --only-missing-outputs``.
    """
    configure_project("hed")
    pipelines.configure("hed.pipeline_registry")  # rebuild: the layout depends on env and params
    # in the project folder, as `kedro run` is: parameters such as a run's checkpoint_root are
    # relative paths (a repository's own data/ must not stand in for the copy's)
    with (
        contextlib.chdir(project),
        KedroSession.create(project_path=project, env=env, runtime_params=params or {}) as session,
    ):
        session.run(
            pipeline_names=[pipeline] if pipeline else None,
            only_missing_outputs=only_missing_outputs,
        )


def kedro_command(*args: str) -> list[str]:
    """``python -m kedro <args>`` with this interpreter (the project's virtualenv)."""
    return [sys.executable, "-m", "kedro", *args]


def kedro_environment() -> dict[str, str]:
    """This process's environment with Kedro's telemetry off (for ``kedro`` subprocesses)."""
    return {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true"}


def run_kedro_cli(
    project: Path,
    *args: str,
    timeout: float = 300,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run ``kedro <args>`` in ``project`` as a subprocess.

    Args:
        project: the project folder (the working directory).
        args: the ``kedro`` arguments, e.g. ``"viz", "build"``.
        timeout: seconds before the subprocess is killed.
        check: assert a zero exit status (and show the output tail when not).
        env: extra environment variables, over :func:`kedro_environment`.
    """
    result = subprocess.run(
        kedro_command(*args),
        check=False,
        cwd=project,
        env={**kedro_environment(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = (result.stdout + result.stderr)[-4000:]
    assert not check or result.returncode == 0, f"kedro {' '.join(args)} failed:\n{output}"
    return result


def latest(path: Path) -> Path:
    """The newest version of a versioned dataset file."""
    versions = sorted(p for p in path.iterdir() if (p / path.name).exists())
    assert versions, f"no version of {path}"
    return versions[-1] / path.name


def versions(path: Path) -> list[Path]:
    """Every complete version of a versioned dataset file, oldest first (``[]`` when none)."""
    if not path.is_dir():
        return []
    return [p / path.name for p in sorted(path.iterdir()) if (p / path.name).is_file()]


def temporary_files(folder: Path) -> list[Path]:
    """Temporary files of HED's atomic writes (``.<name>.….tmp``) anywhere under ``folder``."""
    return sorted(p for p in folder.rglob("*.tmp"))


# ------------------------------------------------------------------ one small step, four shards

#: A step small enough for CI: 8 prompts × 2 samples × ≤8 tokens, 4 shards, 1 thread each.
SMALL_STEP = {
    "prompts": {"num_prompts": 8},
    "generation": {
        "num_shards": 4,
        "samples_per_prompt": 2,
        "max_new_tokens": 8,
        "batch_size": 4,
        "torch_threads": 1,
        # float32 whatever the CPU (by_device would pick bfloat16 on AMX machines): the
        # records, and so every byte-for-byte comparison, do not depend on the machine
        "dtype": "float32",
    },
}
NUM_SHARDS = SMALL_STEP["generation"]["num_shards"]
#: ``kedro run`` arguments of the generation on two CPU worker processes (docs/running.md).
GPU_RUNNER_GENERATION = (
    "run",
    "--pipelines",
    "generation",
    "--runner",
    "hed.runners.GPURunner",
    "--runner-params",
    "gpus=cpu,cpu_workers=2",
)
SHARD_FOLDER = f"data/02_intermediate/token_records/{RUN}/step_0"
MERGED_FOLDER = f"data/03_primary/token_records/{RUN}"


def small_step_project(dest: Path, smollm2_dir: Path) -> Path:
    """A project copy configured for :data:`SMALL_STEP` (in its ``conf/base``)."""
    project = copy_project(dest, smollm2_dir)
    set_parameters(project, SMALL_STEP)
    return project


def shard_paths(project: Path, shard: int) -> tuple[Path, Path]:
    """The versioned dataset paths of a shard: (token_records, sequences)."""
    folder = project / SHARD_FOLDER
    return folder / f"shard_{shard}.parquet", folder / f"shard_{shard}.sequences.parquet"


def complete_shards(project: Path) -> list[int]:
    """Shards of the small step whose two files both have a complete version."""
    return [k for k in range(NUM_SHARDS) if all(versions(p) for p in shard_paths(project, k))]


def step_files(project: Path) -> dict[str, list[Path]]:
    """Every version (oldest first) of the step's shard files and merged files, by file name."""
    paths = [p for k in range(NUM_SHARDS) for p in shard_paths(project, k)]
    merged = project / MERGED_FOLDER
    paths += [merged / "step_0.parquet", merged / "step_0.sequences.parquet"]
    return {p.name: versions(p) for p in paths}


@dataclass(frozen=True)
class FileState:
    """A file as it was: path, mtime (ns), sha256 and content."""

    path: Path
    mtime_ns: int
    sha256: str
    content: bytes

    @classmethod
    def of(cls, path: Path) -> FileState:
        """Read ``path`` now."""
        content = path.read_bytes()
        return cls(path, path.stat().st_mtime_ns, hashlib.sha256(content).hexdigest(), content)


def snapshot(project: Path) -> dict[str, list[FileState]]:
    """:func:`step_files` with each version's state, so later runs cannot change what is checked."""
    return {name: [FileState.of(p) for p in paths] for name, paths in step_files(project).items()}


def processes_in(folder: Path, command_part: str = "") -> list[int]:
    """Live (non-zombie) processes working in ``folder`` (or below).

    Only those whose command line contains ``command_part``: ``"spawn_main"`` picks the
    processes ``GPURunner`` started for nodes. Linux only (reads ``/proc``).
    """
    folder = folder.resolve()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        inside = cwd == folder or folder in cwd.parents
        if state != "Z" and inside and command_part in command:
            found.append(int(entry.name))
    return found


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something true or ``timeout`` seconds pass; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


@dataclass(frozen=True)
class Interruption:
    """What a SIGKILLed ``kedro run`` left.

    Attributes:
        finished: shards complete (both files) when the process group was killed.
        node_processes_at_kill: node processes (spawned by ``GPURunner``) just before the kill.
        at_kill: the state of every file of those shards right after the kill.
        partial: files of unfinished shards right after the kill (a shard's records saved,
            its sequences not yet).
        left_running: processes still working in the project 15 s after the kill.
        written_after_kill: files of the unfinished shards that appeared after the kill (an
            orphaned node process kept working).
        temporaries: temporary files of interrupted writes right after the kill.
        log: the killed run's output.
    """

    finished: list[int]
    node_processes_at_kill: list[int]
    at_kill: dict[Path, FileState]
    partial: list[Path]
    left_running: list[int]
    written_after_kill: list[Path]
    temporaries: list[Path]
    log: str


def run_and_kill(project: Path, args: tuple[str, ...], timeout: float = 240) -> Interruption:
    """Start ``kedro <args>`` in its own process group and SIGKILL the group mid-generation.

    The kill comes once a shard is complete *and* a node process has started generating
    another shard (its ``Running node: generate_shard`` log line is out), so that it hits a
    node process at work, not one still starting.

    Raises:
        AssertionError: that moment did not come within ``timeout`` seconds (with the output).
    """
    log_path = project / "killed_run.log"

    def generating(shard: int) -> bool:
        lines = log_path.read_text(errors="replace").splitlines()
        target = f"{RUN}.step_0.shard_{shard}.token_records"
        return any("Running node: generate_shard" in line and target in line for line in lines)

    def mid_generation() -> bool:
        finished = complete_shards(project)
        return bool(finished) and any(generating(k) for k in range(NUM_SHARDS) if k not in finished)

    with log_path.open("w") as log:
        process = subprocess.Popen(
            kedro_command(*args),
            cwd=project,
            env=kedro_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the kill reaches all of it
        )
        nodes: list[int] = []
        try:
            wait_for(lambda: mid_generation() or process.poll() is not None, timeout)
            nodes = processes_in(project, "spawn_main")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    # node processes die with their parent within milliseconds; one caught renaming its file
    # may finish that, no more: what exists half a second later is what the kill left
    time.sleep(0.5)
    finished = complete_shards(project)
    output = log_path.read_text()
    assert finished, f"no shard completed in {timeout} s:\n{output[-4000:]}"

    def unfinished_files() -> list[Path]:
        return [
            p
            for k in range(NUM_SHARDS)
            if k not in finished
            for base in shard_paths(project, k)
            for p in versions(base)
        ]

    at_kill = {
        p: FileState.of(p)
        for k in finished
        for base in shard_paths(project, k)
        for p in versions(base)
    }
    partial = unfinished_files()  # a node killed between saving its two files
    temporaries = temporary_files(project / "data")
    wait_for(lambda: not processes_in(project), 15)  # node processes go when their parent dies
    left_running = processes_in(project)
    written_after_kill = [p for p in unfinished_files() if p not in partial]
    return Interruption(
        finished, nodes, at_kill, partial, left_running, written_after_kill, temporaries, output
    )


@dataclass(frozen=True)
class ResumedRun:
    """A generation killed and resumed with ``--only-missing-outputs``, then aggregated.

    Attributes:
        project: the project copy (later tests may change it: use the other attributes).
        interruption: what the kill left.
        resume_command: the ``kedro`` arguments of the resume.
        resume_log: the resume's output.
        files: :func:`snapshot` after the resume and the aggregation.
        temporaries: temporary files left anywhere under ``data/`` after them.
        input_versions: number of versions of ``prompts`` and ``checkpoints`` after them.
    """

    project: Path
    interruption: Interruption
    resume_command: tuple[str, ...]
    resume_log: str
    files: dict[str, list[FileState]]
    temporaries: list[Path]
    input_versions: dict[str, int]


def kill_resume_aggregate(dest: Path, smollm2_dir: Path) -> ResumedRun:
    """:data:`SMALL_STEP` on ``GPURunner`` (two CPU workers): kill, resume, aggregate.

    The resume is the killed command plus ``--only-missing-outputs``, as docs/running.md and
    ``GPURunner.resume_command`` give it; the aggregation runs in this process.
    """
    project = small_step_project(dest, smollm2_dir)
    interruption = run_and_kill(project, GPU_RUNNER_GENERATION)
    resume_command = (*GPU_RUNNER_GENERATION, "--only-missing-outputs")
    resumed = run_kedro_cli(project, *resume_command)
    run_kedro(project, "aggregation")
    intermediate = project / "data/02_intermediate"
    return ResumedRun(
        project=project,
        interruption=interruption,
        resume_command=resume_command,
        resume_log=resumed.stdout + resumed.stderr,
        files=snapshot(project),
        temporaries=temporary_files(project / "data"),
        input_versions={
            name: len(versions(intermediate / name))
            for name in ("prompts.parquet", "checkpoints.json")
        },
    )


def uninterrupted_run(dest: Path, smollm2_dir: Path) -> tuple[Path, dict[str, list[FileState]]]:
    """:data:`SMALL_STEP` in one `kedro run --pipelines generation,aggregation` (sequential).

    Returns:
        The project and its :func:`snapshot`.
    """
    project = small_step_project(dest, smollm2_dir)
    run_kedro_cli(project, "run", "--pipelines", "generation,aggregation")
    return project, snapshot(project)


@contextlib.contextmanager
def sigint_not_ignored():
    """Start children with SIGINT's default action, as a terminal's shell does.

    An ignored SIGINT is inherited across exec, and Python then installs no KeyboardInterrupt
    handler: under ``cmd &`` in a shell without job control (a CI script, ``nohup``) the whole
    test session, and so every ``kedro run`` it starts, ignores Ctrl-C. A Python handler is
    reset to the default at exec, so setting one here is enough.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
