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
import hashlib
import json
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from kedro.framework.project import configure_project, pipelines
from kedro.framework.session import KedroSession

from hed.errors import short_message

from .project_copy import RUN, TINY, copy_project, run_kedro, run_kedro_cli, set_parameters

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


def _finished_study(project: Path, smollm2_dir: Path, two_runs: bool) -> Path:
    """A tiny study run to the end once (pass@1 from a CSV file; no token report); with
    ``two_runs``, a second run ``b`` (its step 0 the same model) so that strict mode applies."""
    copy_project(project, smollm2_dir)
    set_parameters(project, TINY)
    (project / CSV).parent.mkdir(parents=True, exist_ok=True)
    (project / CSV).write_text("step,pass1\n0,0.25\n")
    runs = [RUN, "b"] if two_runs else [RUN]

    def csv_source(params: dict) -> None:
        params["metrics"]["runs"] = {run: {"sources": {"csv": {"path": CSV}}} for run in runs}

    def no_token_report(params: dict) -> None:
        params["reporting"]["token_report"]["enabled"] = False

    def second_run(params: dict) -> None:
        step = project / "data/01_raw/checkpoints/b/global_step_0"
        step.mkdir(parents=True)
        (step / "actor_hf").symlink_to(smollm2_dir, target_is_directory=True)
        params["runs"][RUN]["role"] = "with_clip"
        params["runs"]["b"] = {**params["runs"][RUN], "role": "without_clip"}
        params["runs"]["b"]["checkpoint_root"] = "data/01_raw/checkpoints/b"
        params["runs"]["b"]["embedded"] = False

    _edit(project, "parameters_metrics.yml", csv_source)
    _edit(project, "parameters_reporting.yml", no_token_report)
    if two_runs:
        _edit(project, "parameters.yml", second_run)
    run_kedro(project)
    return project


@pytest.fixture(scope="module")
def finished(tmp_path_factory, smollm2_dir) -> Path:
    """A finished tiny study of one run."""
    return _finished_study(tmp_path_factory.mktemp("fix_commands") / "project", smollm2_dir, False)


@pytest.fixture(scope="module")
def finished_two_runs(tmp_path_factory, smollm2_dir) -> Path:
    """A finished tiny study of two runs (with_clip, without_clip): strict mode's figures."""
    return _finished_study(tmp_path_factory.mktemp("fix_commands2") / "project", smollm2_dir, True)


def _sampling_key(project: Path) -> None:
    set_parameters(project, {"generation": {"temperature": 0.7}})


def _rho(project: Path) -> None:
    _edit(project, "parameters_aggregation.yml", _set("aggregation", "top_entropy_frac", 0.3))


def _lexicon(project: Path) -> None:
    def add_word(params: dict) -> None:
        params["aggregation"]["lexicon"]["anthropomorphic"].append("well")

    _edit(project, "parameters_aggregation.yml", add_word)


def _lexicon_strict(project: Path) -> None:
    _lexicon(project)
    _edit(project, "parameters_reporting.yml", _set("reporting", "strict", True))


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
    config = json.loads((model / "config.json").read_text())
    config["hed_test_retrained"] = True
    (link / "config.json").write_text(json.dumps(config))


def _set(section: str, key: str, value: object) -> Callable[[dict], None]:
    def change(params: dict) -> None:
        params[section][key] = value

    return change


def _shard_hashes(project: Path) -> dict[str, str]:
    """sha256 of every shard file version (02_intermediate)."""
    folder = project / "data/02_intermediate"
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*.parquet"))
        if p.is_file()
    }


def _recorded(project: Path, dataset: str) -> dict:
    path = project / "data/.hed_computed_from" / f"{dataset}.json"
    return json.loads(path.read_text())["computed_from"]


GENERATE_ALL = "kedro run --pipelines generation,aggregation,dynamics,reporting,analyses"
AGGREGATE_ALL = "kedro run --pipelines aggregation,dynamics,reporting,analyses"
METRICS_ALL = "kedro run --pipelines metrics,reporting,analyses"


@dataclass(frozen=True)
class Case:
    """One kind of change: how it is made, what the researcher runs, the commands expected
    to be printed (in order), and a check that the study now reflects the change."""

    change: Callable[[Path], None]
    expected: list[str]
    reflected: Callable[[Path, dict[str, str]], None]
    researcher_run: str = RESEARCHER_RUN
    study: str = "finished"


def _sampled_at_07(project: Path, before: dict[str, str]) -> None:
    assert _recorded(project, "summary_by_step")["generation.temperature"] == 0.7
    assert _shard_hashes(project) != before  # re-sampled


def _rho_03(project: Path, before: dict[str, str]) -> None:
    assert _recorded(project, "summary_by_step")["aggregation.top_entropy_frac"] == 0.3
    assert _shard_hashes(project) == before


def _propensity_rows(project: Path) -> list[dict]:
    table = sorted((project / "data/04_feature").rglob("hedging_propensity_by_step.csv"))[-1]
    return pd.read_csv(table).to_dict("records")


def _new_lexicon(project: Path, before: dict[str, str]) -> None:
    """Words and categories re-run at once; no shard rewritten (a lexicon change is post-hoc);
    the mass columns, summed over the old lexicon, are marked."""
    recorded = _recorded(project, f"{RUN}.step_0.token_records")
    assert "well" in recorded["aggregation.lexicon.anthropomorphic"]
    assert _shard_hashes(project) == before
    [row] = _propensity_rows(project)
    assert not row["mass_lexicon_current"] and np.isnan(row["mean_anthropomorphic_mass"])


def _mass_refreshed(project: Path, before: dict[str, str]) -> None:
    """Strict: the shards' mass columns refreshed (a new version; the earlier ones unchanged)."""
    after = _shard_hashes(project)
    assert all(after[name] == digest for name, digest in before.items())
    added = sorted(set(after) - set(before))
    assert len(added) == 2, added  # the token records of each run's shard, not the sequences
    assert all(name.endswith("shard_0.parquet") for name in added), added
    for row in _propensity_rows(project):
        assert row["mass_lexicon_current"] and 0 < row["mean_anthropomorphic_mass"] < 1


def _pass1(value: float) -> Callable[[Path, dict[str, str]], None]:
    def check(project: Path, before: dict[str, str]) -> None:
        table = sorted((project / "data/04_feature").rglob("pass1_for_figures.csv"))[-1]
        assert f",{value}," in table.read_text() or f",{value}\n" in table.read_text()
        assert _shard_hashes(project) == before

    return check


def _three_prompts(project: Path, before: dict[str, str]) -> None:
    assert _recorded(project, "summary_by_step")["prompts.num_prompts"] == 3
    assert _shard_hashes(project) != before


def _retrained(project: Path, before: dict[str, str]) -> None:
    """The shards were generated from the new checkpoint (its config's fingerprint)."""
    import pyarrow.parquet as pq

    config = project / "data/01_raw/checkpoints" / RUN / "global_step_0/actor_hf/config.json"
    expected = hashlib.sha256(config.read_bytes()).hexdigest()
    shards = sorted((project / "data/02_intermediate/token_records").rglob("shard_0.parquet"))
    newest = [p for p in shards if p.is_file()][-1]
    meta = json.loads(pq.read_schema(newest).metadata[b"hed.generation"])
    assert meta["checkpoint"]["config_sha256"] == expected


CASES = {
    "sampling_key": Case(_sampling_key, [GENERATE_ALL], _sampled_at_07),
    # the researcher re-aggregates at once: aggregation's shard check refuses the old shards
    "sampling_key_aggregated": Case(
        _sampling_key, ["kedro run --pipelines generation"], _sampled_at_07, AGGREGATE_ALL
    ),
    "rho": Case(_rho, [AGGREGATE_ALL], _rho_03),
    "lexicon": Case(_lexicon, [AGGREGATE_ALL], _new_lexicon),
    "lexicon_strict": Case(
        _lexicon_strict, ["kedro hed refresh-mass"], _mass_refreshed, study="finished_two_runs"
    ),
    "pass1_source": Case(_pass1_source, [METRICS_ALL], _pass1(0.0)),
    "pass1_file": Case(_pass1_file, [METRICS_ALL], _pass1(0.5)),
    "prompts": Case(_prompts, [GENERATE_ALL], _three_prompts),
    # a checkpoint is fingerprinted when generation resolves it: a researcher who retrained
    # one runs the whole chain (reporting alone does not read the checkpoints)
    "checkpoint_contents": Case(_checkpoint_contents, [], _retrained, "kedro run"),
}


def run_as_printed(project: Path, command: str) -> str | None:
    """Run a ``kedro run`` command line in ``project`` (in this process, as the CLI would).

    Returns:
        None when it ran; the one-line message when it was refused or failed.
    """
    argv = shlex.split(command)
    if argv[:3] == ["kedro", "hed", "refresh-mass"]:
        result = run_kedro_cli(project, *argv[1:], check=False, env={"HED_TRACEBACK": ""})
        lines = (result.stdout + result.stderr).strip().splitlines()
        return None if result.returncode == 0 else lines[-1]
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
    found = re.search(r"`(kedro (?:run|hed)[^`]*)`", message) or re.search(
        r"\((kedro run[^)]*)\)", message
    )
    assert found, f"the refusal prints no command: {message}"
    return found.group(1)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_the_printed_commands_bring_the_study_to_a_clean_state(request, tmp_path, name):
    case = CASES[name]
    study = request.getfixturevalue(case.study)
    project = Path(shutil.copytree(study, tmp_path / "project", symlinks=True))
    before = _shard_hashes(project)
    case.change(project)
    history: list[str] = []
    refusal = run_as_printed(project, case.researcher_run)
    while refusal is not None:
        assert len(history) < MAX_COMMANDS, f"{name}: still refused after {history}: {refusal}"
        command = printed_command(refusal)
        history.append(command)
        failure = run_as_printed(project, command)
        assert failure is None, f"{name}: `{command}` failed as printed: {failure}"
        refusal = run_as_printed(project, case.researcher_run)
    assert history == case.expected
    case.reflected(project, before)
