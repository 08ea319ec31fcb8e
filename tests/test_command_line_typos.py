"""A misspelt catalog key or ``--runner`` ends a real ``kedro run`` in one line naming the
file or option and the nearest valid name (were Kedro tracebacks of 74 and 32 lines)."""

from __future__ import annotations

import pytest
import yaml

from .project_copy import copy_project, run_kedro_cli

SUFFIX = " [HED_TRACEBACK=1 shows the traceback]"
RUNNERS = (
    "runners: hed.runners.GPURunner, hed.runners.RayRunner, SequentialRunner, ParallelRunner, "
    "ThreadRunner"
)


@pytest.fixture
def project(tmp_path, smollm2_dir):
    project = copy_project(tmp_path / "project", smollm2_dir)
    (project / "conf/local").mkdir(exist_ok=True)
    return project


def last_line(project, *args: str) -> str:
    result = run_kedro_cli(project, "run", *args, check=False, env={"HED_TRACEBACK": ""})
    assert result.returncode != 0
    assert "Traceback" not in result.stdout + result.stderr
    assert not (project / "data/02_intermediate").exists()  # refused before any node
    return result.stderr.strip().splitlines()[-1]


def test_a_misspelt_catalog_key_names_the_file_and_the_nearest_key(project):
    # an environment's own entry, as a study's conf/<study>/catalog.yml sets raw_prompts
    entry = {
        "type": "hed.io.datasets.PromptFileDataset",
        "filepth": "data/01_raw/prompts/demo_math.jsonl",
    }
    (project / "conf/local/catalog.yml").write_text(yaml.safe_dump({"raw_prompts": entry}))
    assert last_line(project, "--pipelines", "generation") == (
        "ConfigError: unknown key raw_prompts.filepth (set in conf/local/catalog.yml): did you "
        "mean raw_prompts.filepath? PromptFileDataset does not take it; fix the key there" + SUFFIX
    )


@pytest.mark.parametrize(
    ("runner", "line"),
    [
        (
            "hed.runners.GPURunnr",
            "ConfigError: --runner hed.runners.GPURunnr: no such runner (module 'hed.runners' "
            "has no attribute 'GPURunnr'); did you mean hed.runners.GPURunner? " + RUNNERS,
        ),
        (
            "SequentalRunner",
            "ConfigError: --runner SequentalRunner: no such runner (module 'kedro.runner' has "
            "no attribute 'SequentalRunner'); did you mean SequentialRunner? " + RUNNERS,
        ),
    ],
)
def test_a_misspelt_runner_names_the_closest_runner(project, runner, line):
    assert last_line(project, "--pipelines", "generation", "--runner", runner) == line + SUFFIX


@pytest.mark.parametrize(
    ("args", "listing", "lister"),
    [
        (
            ("--env", "qae_repro", "--from-nodes", "summarise_step"),
            "list them with `KEDRO_ENV=qae_repro kedro registry describe` (",
            (("registry", "describe"), {"KEDRO_ENV": "qae_repro"}),
        ),
        (
            ("--env", "qae_repro", "--pipelines", "reporting", "--from-inputs", "summary_by_stp"),
            "list them with `kedro catalog describe-datasets -p reporting --env qae_repro` (",
            (("catalog", "describe-datasets", "-p", "reporting", "--env", "qae_repro"), {}),
        ),
    ],
    ids=["nodes", "datasets"],
)
@pytest.mark.slow
def test_the_listing_command_of_a_study_carries_its_environment(project, args, listing, lister):
    line = last_line(project, *args)
    assert listing in line, line
    # the command as printed lists the study's names (base's demo run has none of them)
    command, env = lister
    listed = run_kedro_cli(project, *command, env=env).stdout
    assert "dapo_with_clip" in listed and "smollm2_demo" not in listed


def test_a_misspelt_pipeline_of_registry_describe_is_worded_for_that_command(project):
    result = run_kedro_cli(
        project, "registry", "describe", "reportng", check=False, env={"HED_TRACEBACK": ""}
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ConfigError: kedro registry describe reportng: no such pipeline; did you mean reporting? "
    ), last


def test_load_versions_without_a_version_says_what_form_it_takes(project):
    """Kedro's own parser raises a ``KedroCliError`` in a click callback, which click printed
    as ``NoneType: None``; ``kedro run``'s message now shows."""
    assert last_line(project, "--pipelines", "aggregation", "--load-versions", "checkpoints") == (
        "Error: Invalid value for '--load-versions' / '-lv': Expected the form of "
        "'load_versions' to be 'dataset_name:YYYY-MM-DDThh.mm.ss.sssZ',found checkpoints instead"
    )
