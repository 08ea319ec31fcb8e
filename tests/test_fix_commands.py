"""Every printed fix command brings the study to a clean state when run as printed.

A property of the whole project, walked for each kind of change HED fingerprints (a sampling
key, ρ, the lexicon, the pass@1 source and its file, the prompts, a checkpoint's contents):
on a finished tiny study, after the change, the researcher's run is refused (or runs); the
command the refusal prints is run exactly as printed; at most two printed commands later the
researcher's run is not refused. (The lexicon used to loop: the first command omitted
generation and failed, the second named one of the stale step folders, ``--only-missing-
outputs`` then aggregated nothing, and the next run was refused with the first again.)

Cost: one tiny study (2 prompts × 1 sample × 4 tokens) made once, copied per case.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from kedro.framework.project import configure_project, pipelines
from kedro.framework.session import KedroSession

from hed.errors import short_message

from .project_copy import RUN, TINY, copy_project, run_kedro, set_parameters

CSV = "data/01_raw/metrics/pass1_by_hand.csv"
#: What a researcher runs after a change: the figures and the analyses.
RESEARCHER_RUN = "kedro run --pipelines reporting,analyses"
#: The most printed commands a change may take before the researcher's run is clean.
MAX_COMMANDS = 2


def _edit(project: Path, name: str, change: Callable[[dict], None]) -> None:
    path = project / "conf/base" / name
    params = yaml.safe_load(path.read_text())
    change(params)
    path.write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.fixture(scope="module")
def finished(tmp_path_factory, smollm2_dir) -> Path:
    """A tiny study run to the end once (pass@1 from a CSV file; no token report)."""
    project = copy_project(tmp_path_factory.mktemp("fix_commands") / "project", smollm2_dir)
    set_parameters(project, TINY)
    (project / CSV).parent.mkdir(parents=True, exist_ok=True)
    (project / CSV).write_text("step,pass1\n0,0.25\n")

    def csv_source(params: dict) -> None:
        params["metrics"]["runs"][RUN] = {"sources": {"csv": {"path": CSV}}}

    def no_token_report(params: dict) -> None:
        params["reporting"]["token_report"]["enabled"] = False

    _edit(project, "parameters_metrics.yml", csv_source)
    _edit(project, "parameters_reporting.yml", no_token_report)
    run_kedro(project)
    return project


def _sampling_key(project: Path) -> None:
    set_parameters(project, {"generation": {"temperature": 0.7}})


def _rho(project: Path) -> None:
    _edit(project, "parameters_aggregation.yml", _set("aggregation", "top_entropy_frac", 0.3))


def _lexicon(project: Path) -> None:
    def add_word(params: dict) -> None:
        params["aggregation"]["lexicon"]["anthropomorphic"].append("well")

    _edit(project, "parameters_aggregation.yml", add_word)


def _pass1_source(project: Path) -> None:
    def generated(params: dict) -> None:
        params["metrics"]["runs"][RUN] = {"sources": {"generated": {}}}

    _edit(project, "parameters_metrics.yml", generated)


def _pass1_file(project: Path) -> None:
    (project / CSV).write_text("step,pass1\n0,0.5\n")


def _prompts(project: Path) -> None:
    set_parameters(project, {"prompts": {"num_prompts": 3}})


def _checkpoint_contents(project: Path) -> None:
    """Step 0's checkpoint replaced by one whose config differs (the weights linked)."""
    link = project / "data/01_raw/checkpoints" / RUN / "global_step_0" / "actor_hf"
    model = link.resolve()
    link.unlink()
    link.mkdir()
    for file in model.iterdir():
        (link / file.name).symlink_to(file)
    (link / "config.json").unlink()
    config = yaml.safe_load((model / "config.json").read_text())  # JSON is YAML
    config["hed_test_retrained"] = True
    (link / "config.json").write_text(yaml.safe_dump(config))


def _set(section: str, key: str, value: object) -> Callable[[dict], None]:
    def change(params: dict) -> None:
        params[section][key] = value

    return change


CHANGES = {
    "sampling_key": _sampling_key,
    "rho": _rho,
    "lexicon": _lexicon,
    "pass1_source": _pass1_source,
    "pass1_file": _pass1_file,
    "prompts": _prompts,
    "checkpoint_contents": _checkpoint_contents,
}


def run_as_printed(project: Path, command: str) -> str | None:
    """Run a ``kedro run`` command line in ``project`` (in this process, as the CLI would).

    Returns:
        None when it ran; the one-line message when it was refused or failed.
    """
    argv = shlex.split(command)
    assert argv[:2] == ["kedro", "run"], command
    options = {"--pipelines": None, "--env": None}
    only_missing = False
    args = iter(argv[2:])
    for arg in args:
        if arg == "--only-missing-outputs":
            only_missing = True
        elif arg in options:
            options[arg] = next(args)
        else:  # a fix command of this test's study needs no other option
            raise AssertionError(f"unexpected option {arg!r} in {command!r}")
    names = options["--pipelines"].split(",") if options["--pipelines"] else None
    configure_project("hed")
    pipelines.configure("hed.pipeline_registry")
    try:
        with (
            contextlib.chdir(project),
            KedroSession.create(project_path=project, env=options["--env"]) as session,
        ):
            session.run(pipeline_names=names, only_missing_outputs=only_missing)
    except Exception as exc:  # every HED refusal is one line with its fix
        message = short_message(exc)
        assert message is not None, f"{command}: not a one-line refusal: {exc!r}"
        return message
    return None


def printed_command(message: str) -> str:
    """The ``kedro run`` a refusal tells the user to type."""
    found = re.search(r"`(kedro run[^`]*)`", message) or re.search(r"\((kedro run[^)]*)\)", message)
    assert found, f"the refusal prints no command: {message}"
    return found.group(1)


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_the_printed_commands_bring_the_study_to_a_clean_state(finished, tmp_path, change):
    project = Path(shutil.copytree(finished, tmp_path / "project", symlinks=True))
    CHANGES[change](project)
    history: list[str] = []
    refusal = run_as_printed(project, RESEARCHER_RUN)
    while refusal is not None:
        assert len(history) < MAX_COMMANDS, f"{change}: still refused after {history}: {refusal}"
        command = printed_command(refusal)
        history.append(command)
        failure = run_as_printed(project, command)
        assert failure is None, f"{change}: `{command}` failed as printed: {failure}"
        refusal = run_as_printed(project, RESEARCHER_RUN)
    print("HISTORY", change, history)
