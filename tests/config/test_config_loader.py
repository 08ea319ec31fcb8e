"""Parameters merge key by key (:mod:`hed.config.loader`): an environment's files and
``--params`` change only the keys they name; user-named mappings (runs, lexicon) are whole."""

from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import pytest
from kedro.framework.project import configure_project, settings
from kedro.framework.session import KedroSession

from hed.config.loader import HEDConfigLoader, merge_parameters
from hed.config.params import AggregationParams

REPO = Path(__file__).resolve().parents[2]


def test_merge_parameters_key_by_key_and_names_whole() -> None:
    base = {
        "runs": {"demo": {"role": "single", "steps": [0]}},
        "aggregation": {"top_entropy_frac": 0.2, "chunk_records": 8, "lexicon": {"a": ["x"]}},
        "generation": {"vllm": {"max_num_seqs": 256, "enforce_eager": None}, "seed": 0},
        "reporting": {"fig3": {"steps": [0, 1]}},
    }
    env = {
        "runs": {"dapo": {"role": "with_clip", "steps": [20]}},
        "aggregation": {"lexicon": {"b": ["y"]}},
        "generation": {"vllm": {"max_num_seqs": 8}},
        "reporting": {"fig3": {"steps": [20]}},
    }
    assert merge_parameters(base, env) == {
        "runs": {"dapo": {"role": "with_clip", "steps": [20]}},  # the demo run does not join
        "aggregation": {"top_entropy_frac": 0.2, "chunk_records": 8, "lexicon": {"b": ["y"]}},
        "generation": {"vllm": {"max_num_seqs": 8, "enforce_eager": None}, "seed": 0},
        "reporting": {"fig3": {"steps": [20]}},  # lists replaced, not appended to
    }
    assert base["aggregation"]["lexicon"] == {"a": ["x"]}  # inputs untouched


@pytest.fixture
def copied_study(tmp_path: Path) -> Path:
    """A project whose conf/my_study is a copy of conf/qae_repro (no parameters_aggregation.yml)."""
    shutil.copytree(REPO / "conf" / "base", tmp_path / "conf" / "base")
    shutil.copytree(REPO / "conf" / "qae_repro", tmp_path / "conf" / "my_study")
    (tmp_path / "conf" / "local").mkdir()
    assert not (tmp_path / "conf/my_study/parameters_aggregation.yml").exists()
    return tmp_path


def _parameters(project: Path, env: str | None, runtime: dict | None = None) -> dict:
    loader = HEDConfigLoader(
        str(project / "conf"), base_env="base", default_run_env="local", env=env,
        runtime_params=runtime or {},
    )  # fmt: skip
    return loader["parameters"]


def test_rho_on_the_command_line_of_a_copied_study_changes_rho_only(copied_study: Path) -> None:
    before = _parameters(copied_study, "my_study")
    after = _parameters(copied_study, "my_study", {"aggregation": {"top_entropy_frac": 0.3}})
    base_aggregation = _parameters(copied_study, None)["aggregation"]
    assert after["aggregation"] == {**base_aggregation, "top_entropy_frac": 0.3}
    assert {k: v for k, v in after.items() if k != "aggregation"} == {
        k: v for k, v in before.items() if k != "aggregation"
    }
    checked = AggregationParams.of(after["aggregation"])
    assert checked.top_entropy_frac == Fraction(3, 10)
    assert checked.lexicon == base_aggregation["lexicon"]
    assert sorted(after["runs"]) == ["dapo_with_clip", "dapo_without_clip"]


def test_params_change_one_key_inside_a_study_run(copied_study: Path) -> None:
    after = _parameters(copied_study, "my_study", {"runs": {"dapo_with_clip": {"steps": [20]}}})
    assert after["runs"]["dapo_with_clip"]["steps"] == [20]
    assert after["runs"]["dapo_with_clip"]["role"] == "with_clip"
    assert after["runs"]["dapo_without_clip"]["steps"] == [20, 40, 60, 80, 100, 150, 200]
    assert sorted(after["runs"]) == ["dapo_with_clip", "dapo_without_clip"]


def test_an_environment_file_keeps_base_keys_it_does_not_name(copied_study: Path) -> None:
    (copied_study / "conf/my_study/parameters_generation.yml").write_text(
        "prompts:\n  num_prompts: 64\ngeneration:\n  samples_per_prompt: 4\n  max_new_tokens: 32\n"
    )
    params = _parameters(copied_study, "my_study")
    base = _parameters(copied_study, None)
    assert params["prompts"] == {**base["prompts"], "num_prompts": 64}
    assert params["generation"] == {**base["generation"], "samples_per_prompt": 4,
                                    "max_new_tokens": 32}  # fmt: skip


def test_the_session_uses_the_key_by_key_loader(copied_study: Path) -> None:
    shutil.copy(REPO / "pyproject.toml", copied_study / "pyproject.toml")
    configure_project("hed")
    assert settings.CONFIG_LOADER_CLASS is HEDConfigLoader
    with KedroSession.create(
        project_path=copied_study, env="my_study",
        runtime_params={"aggregation": {"top_entropy_frac": 0.3}},
    ) as session:  # fmt: skip
        parameters = session.load_context().config_loader["parameters"]
    assert AggregationParams.of(parameters["aggregation"]).top_entropy_frac == Fraction(3, 10)
    assert parameters["aggregation"]["lexicon"]["reasoning"][:3] == ["so", "let", "thus"]


def test_a_key_set_in_two_files_of_an_environment_is_one_line(tmp_path, monkeypatch):
    """Kedro refuses it with a ValueError (26 frames from `kedro run`): one line naming both."""
    from hed.errors import ConfigError

    (tmp_path / "conf/base").mkdir(parents=True)
    (tmp_path / "conf/s1").mkdir()
    (tmp_path / "conf/s1/parameters_generation.yml").write_text("generation:\n  top_k: 5\n")
    (tmp_path / "conf/s1/parameters_reporting.yml").write_text(
        "reporting:\n  top_n_words: 5\ngeneration:\n  top_k: -5\n"
    )
    monkeypatch.chdir(tmp_path)
    loader = HEDConfigLoader(conf_source="conf", base_env="base", default_run_env="local", env="s1")
    with pytest.raises(ConfigError) as caught:
        loader["parameters"]
    assert str(caught.value) == (
        "generation.top_k is set in both conf/s1/parameters_generation.yml and "
        "conf/s1/parameters_reporting.yml; keep it in one of them (Kedro refuses a key set "
        "twice in one environment)"
    )
