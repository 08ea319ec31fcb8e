"""The JSON Schema of every parameters file: generated from the models, current, pointed at by
every shipped file, and every shipped environment validates against it; the refusals a
researcher meets most are one line each."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from jsonschema.exceptions import best_match

from hed.config.params import AggregationParams, GenerationParams
from hed.config.schema import SCHEMA_DIR, file_schema, header, parameters_doc, schema_name
from hed.config.sections import FILES, check_unknown_keys
from hed.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
SHIPPED = sorted(p for p in CONF.glob("*/parameters*.yml") if p.parent.name != SCHEMA_DIR)


def test_every_shipped_file_has_a_schema_and_points_at_it():
    assert {p.name for p in SHIPPED} <= set(FILES)
    assert len(SHIPPED) == 30  # base 9, mini_dapo 7, qae_repro 5, mini_entropy 6, mini_rollouts 3
    for path in SHIPPED:
        first = path.read_text(encoding="utf-8").split("\n", 1)[0]
        assert first == header(path, CONF), path
        assert first == f"# yaml-language-server: $schema=../schema/{schema_name(path.name)}"
        assert (path.parent / first.split("=", 1)[1]).resolve().is_file()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_environment_validates_against_the_schema(path):
    schema = json.loads((CONF / SCHEMA_DIR / schema_name(path.name)).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load(path.read_text(encoding="utf-8")), schema)


def test_the_schema_refuses_what_hed_refuses():
    schema = file_schema("parameters_generation.yml")

    def refused(params: dict, schema: dict = schema) -> str | None:
        error = best_match(jsonschema.Draft202012Validator(schema).iter_errors(params))
        return None if error is None else error.message

    assert refused({"generation": {"temperature": 0.7}}) is None  # one key: an override
    assert refused({"generation": {"temprature": 0.7}}) == (
        "Additional properties are not allowed ('temprature' was unexpected)"
    )
    assert (
        refused({"generation": {"temperature": -1}})
        == "-1 is less than or equal to the minimum of 0"
    )
    assert refused({"generation": {"temperature": True}}) == "True is not of type 'number'"
    assert refused({"generation": {"backend": "tgi"}}) == "'tgi' is not one of ['hf', 'vllm']"
    rho = file_schema("parameters_aggregation.yml")
    assert refused({"aggregation": {"top_entropy_frac": 1.5}}, rho) == (
        "1.5 is greater than the maximum of 1"
    )


def test_the_committed_schemas_and_reference_are_current():
    """Run `make schema` (python -m hed schema) after changing a section's model."""
    for file in FILES:
        committed = json.loads((CONF / SCHEMA_DIR / schema_name(file)).read_text())
        assert committed == file_schema(file), f"{file}: run make schema"
    assert (ROOT / "docs" / "parameters.md").read_text() == parameters_doc(), "run make schema"


GENERATION = {"samples_per_prompt": 2, "max_new_tokens": 8}


def named(origin: str, parse):
    """``parse()`` while a session's parameters are checked with ``origin`` as every key's file."""
    from hed.config.messages import naming_files

    with naming_files(lambda key: origin):
        return parse()


LEXICON = {"anthropomorphic": ["I"], "reasoning": ["so"]}


@pytest.mark.parametrize(
    ("parse", "message"),
    [
        (
            lambda: check_unknown_keys(
                {"generation": {**GENERATION, "temprature": 0.7}},
                lambda key: "conf/s1/parameters_generation.yml",
            ),
            "unknown parameter generation.temprature (set in conf/s1/parameters_generation.yml): "
            "did you mean generation.temperature? HED does not read it, so it would be ignored",
        ),
        (
            lambda: GenerationParams.of({**GENERATION, "batch_size": True}),
            "generation.batch_size must be a positive integer, got True",
        ),
        (
            lambda: AggregationParams.of({"top_entropy_frac": 1.5, "lexicon": LEXICON}),
            "aggregation.top_entropy_frac = 1.5 is outside (0, 1]; set the high-entropy "
            "fraction, e.g. 0.2 (the top 20% of a step's tokens)",
        ),
        (
            lambda: named(
                "--params", lambda: GenerationParams.of({**GENERATION, "temperature": -0.5})
            ),
            "generation.temperature (set in --params) must be a number > 0, got -0.5",
        ),
    ],
    ids=["misspelt-key", "bool-for-a-number", "rho-1.5", "negative-temperature"],
)
def test_the_common_mistakes_are_refused_in_one_line(parse, message):
    with pytest.raises(ConfigError) as refused:
        parse()
    assert str(refused.value) == message
