"""Each default lives in one place in code, conf/base writes the same values, and the pre-run
check hands the parsed sections to the nodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Node, Pipeline

from hed.analysis.rescoring import RESCORING_DEFAULTS, RescoringParams, rescoring_section
from hed.config.params import AggregationParams, GenerationParams, ReportingParams, VLLMParams
from hed.config.prompt_params import PromptsParams
from hed.decode.types import SamplingParams, VLLMSettings
from hed.hooks.parameters import hand_to_nodes, parsed_sections
from hed.pass1 import config as pass1_config

BASE = Path(__file__).resolve().parents[2] / "conf" / "base"


def _conf(name: str) -> dict:
    return yaml.safe_load((BASE / f"parameters_{name}.yml").read_text(encoding="utf-8"))


def _defaults(model) -> dict:
    return (
        model().model_dump(mode="json")
        if model is not GenerationParams
        else {name: info.default for name, info in model.model_fields.items() if name != "vllm"}
    )


def test_section_defaults_come_from_the_typed_sections():
    sampling = {f.name: f.default for f in dataclasses.fields(SamplingParams)}
    del sampling["max_new_tokens"]  # required: no default anywhere
    assert {k: _defaults(GenerationParams)[k] for k in sampling} == sampling
    assert VLLMParams().model_dump() == {
        f.name: f.default for f in dataclasses.fields(VLLMSettings)
    }
    assert RESCORING_DEFAULTS["reference"] == {"source": "generated", "run": None, "step": None}
    assert AggregationParams.model_fields["top_entropy_frac"].default == 0.2
    assert RescoringParams().consistency_tolerance == 1.0e-4


def test_conf_base_writes_the_code_defaults():
    generation = _conf("generation")["generation"]
    for key in ("temperature", "top_p", "top_k", "batch_size", "seed", "top_prob_k", "dtype",
                "torch_threads", "log_every_s", "backend", "stats_kernel"):  # fmt: skip
        assert generation[key] == _defaults(GenerationParams)[key], key
    assert generation["vllm"] == VLLMParams().model_dump()
    assert _conf("rescoring")["rescoring"] == RESCORING_DEFAULTS
    prompts, defaults = _conf("generation")["prompts"], _defaults(PromptsParams)
    # a study's choices, not defaults: the answers' column and the instruction suffix
    assert (prompts["answer_column"], defaults["answer_column"]) == ("answer", None)
    assert prompts["instruction_suffix"].startswith("\nPut your final answer within")
    for key in defaults.keys() - {"answer_column", "instruction_suffix", "duplicates"}:
        assert prompts[key] == defaults[key], key
    reporting = _conf("reporting")["reporting"]
    assert {**reporting, "fig3": {"steps": None}} == _defaults(ReportingParams)
    assert rescoring_section(None) == RescoringParams() == rescoring_section(RESCORING_DEFAULTS)


GENERATION = {"num_shards": 2, "samples_per_prompt": 3, "max_new_tokens": 8, "top_k": 0}


def test_generation_is_parsed_once_into_typed_parts():
    parsed = GenerationParams.of({**GENERATION, "backend": "vllm", "vllm": {"max_num_seqs": 4}})
    assert parsed.sampling == SamplingParams(max_new_tokens=8, top_k=None)
    assert parsed.backend_args("m")["vllm"] == VLLMSettings(max_num_seqs=4)
    assert (parsed.num_shards, parsed.samples_per_prompt, parsed.dtype) == (2, 3, "by_device")
    assert GenerationParams.of(parsed) is parsed
    assert GenerationParams.of(GENERATION).backend_args("m")["vllm"] is None  # hf: not needed
    # as configured, for the comparison with a shard's recorded parameters (top_k 0 is off)
    assert GenerationParams.of(GENERATION).raw == {**GENERATION, "top_k": None}


def test_the_pre_run_check_hands_parsed_sections_to_the_nodes():
    seen = {}

    def node(generation, rescoring):
        seen.update(generation=generation, rescoring=rescoring)
        return 1

    pipeline = Pipeline(
        [Node(node, ["params:generation", "params:rescoring"], "out", name="reads_params")]
    )
    catalog = DataCatalog(
        {
            "params:generation": MemoryDataset(GENERATION),
            "params:rescoring": MemoryDataset({"dtype": "bfloat16"}),
        }
    )
    parsed = parsed_sections(pipeline, catalog)
    assert list(parsed) == ["generation", "rescoring"]
    assert hand_to_nodes(catalog, parsed) == ["params:generation", "params:rescoring"]
    generation, rescoring = catalog.load("params:generation"), catalog.load("params:rescoring")
    assert isinstance(generation, GenerationParams) and generation.sampling.max_new_tokens == 8
    assert isinstance(rescoring, RescoringParams) and rescoring.dtype == "bfloat16"
    assert rescoring.batch_size == 4


def test_the_sampling_defaults_have_one_source():
    """records/ cannot import decode/, so SamplingParams reads its defaults from the records'
    table (records.shard_metadata.SAMPLING_DEFAULTS): no default literal is written twice."""
    import ast
    import inspect

    from hed.decode import types
    from hed.records.shard_metadata import SAMPLING_DEFAULTS

    body = ast.parse(inspect.getsource(types.SamplingParams)).body[0].body
    written = {
        stmt.target.id: ast.unparse(stmt.value)
        for stmt in body
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
    }
    compared = [k for k in SAMPLING_DEFAULTS if k != "max_new_tokens"]
    assert {k: written[k] for k in compared} == {k: f"SAMPLING_DEFAULTS[{k!r}]" for k in compared}
    assert "max_new_tokens" not in written  # required: no default anywhere in code
    fields = {f.name: f.default for f in dataclasses.fields(SamplingParams)}
    assert {k: fields[k] for k in compared} == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": None,
        "seed": 0,
        "top_prob_k": 5,
    }


def test_reporting_is_handed_parsed_with_the_figure_style_defaults_filled_in():
    from hed.report.explorer.options import ExplorerOptions
    from hed.report.style import Figure2Style, Figure3Style
    from hed.report.token_report.options import TokenReportOptions

    parsed = ReportingParams.of({"top_n_words": 5, "figure2": {"dpi": 100}})
    assert (parsed.top_n_words, parsed.fig2_measure, parsed.strict) == (5, "count", False)
    assert parsed.figure2 == Figure2Style(panel_size=(3.5, 2.8), dpi=100)
    assert parsed.figure3 == Figure3Style(panel_size=(2.6, 3.6), dpi=200)
    assert parsed.figure3.as_params() == {"panel_size": [2.6, 3.6], "dpi": 200}
    assert parsed.token_report == TokenReportOptions(
        responses_per_step=8, max_tokens_per_response=2000, steps=None, seed=0, enabled=True
    )
    assert parsed.explorer == ExplorerOptions(responses_per_step=16, estimator="grpo")
    assert ReportingParams.of(parsed) is parsed
    # an empty YAML section (None) is every default, as an absent one
    assert ReportingParams.of({"explorer": None, "fig3": None}) == ReportingParams()


def test_the_backend_and_dtype_defaults_have_one_source():
    """generation.backend and generation.dtype: the shard-reuse comparison and the typed
    section read records.shard_metadata.DECODING_DEFAULTS."""
    import ast
    import inspect

    from hed.config import params as params_module
    from hed.records import shard_metadata

    assert shard_metadata.DECODING_DEFAULTS == {"backend": "hf", "dtype": "by_device"}
    fields = GenerationParams.model_fields
    assert (fields["backend"].default, fields["dtype"].default) == ("hf", "by_device")
    for module, times in ((shard_metadata, 1), (params_module, 0)):  # 1: the table itself
        literals = [
            node.value
            for node in ast.walk(ast.parse(inspect.getsource(module)))
            if isinstance(node, ast.Constant) and node.value in ("hf", "by_device")
        ]
        assert sorted(literals) == sorted(["hf", "by_device"] * times), module.__name__


def test_the_figure_style_report_page_and_batch_defaults_have_one_source():
    """Each of these defaults is written once, in the layer that uses it; the typed sections
    and the lower functions' argument defaults read it."""
    import inspect

    from hed.analysis import correctness, covariance
    from hed.pass1 import wandb_online
    from hed.records import arrow_stream
    from hed.report import dynamics_figures, figures, style

    # the values, once
    assert style.FIGURE2_STYLE.as_params() == {"panel_size": [3.5, 2.8], "dpi": 200}
    assert style.FIGURE3_STYLE.as_params() == {"panel_size": [2.6, 3.6], "dpi": 200}
    assert style.DYNAMICS_STYLE.as_params() == {"panel_size": [3.2, 2.2], "dpi": 200}
    assert AggregationParams.model_fields["chunk_records"].default == arrow_stream.DEFAULT_CHUNK
    assert arrow_stream.DEFAULT_CHUNK == 524_288 and covariance.BATCH_RECORDS == 65_536
    assert ReportingParams.model_fields["fig2_measure"].default == "count"
    assert pass1_config.WandbOptions().timeout == wandb_online.TIMEOUT_S == 20
    # the argument defaults are the same objects, not copies of the literals
    defaults = {
        (fn.__name__, name): p.default
        for fn in (
            figures.plot_figure2,
            figures.plot_figure3,
            dynamics_figures.plot_advantage_covariance,
            dynamics_figures.plot_entropy_by_correctness,
            correctness.entropy_by_correctness,
            wandb_online.read_wandb_history,
        )
        for name, p in inspect.signature(fn).parameters.items()
        if name in ("panel_size", "dpi", "batch_records", "timeout")
    }
    assert defaults[("plot_figure2", "panel_size")] is style.FIGURE2_STYLE.panel_size
    assert defaults[("plot_figure3", "panel_size")] is style.FIGURE3_STYLE.panel_size
    for fn in ("plot_advantage_covariance", "plot_entropy_by_correctness"):
        assert defaults[(fn, "panel_size")] is style.DYNAMICS_STYLE.panel_size
    assert {v for (_, k), v in defaults.items() if k == "dpi"} == {style.DPI}
    assert defaults[("entropy_by_correctness", "batch_records")] == covariance.BATCH_RECORDS
    assert defaults[("read_wandb_history", "timeout")] == wandb_online.TIMEOUT_S


def test_an_unknown_key_without_a_near_one_lists_the_valid_keys_as_a_sentence():
    import pytest

    from hed.config.sections import check_unknown_keys
    from hed.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        check_unknown_keys({"aggregation": {"zzz": 1}}, lambda key: "--params")
    assert str(refused.value) == (
        "unknown parameter aggregation.zzz (set in --params): valid keys here: chunk_records, "
        "lexicon, top_entropy_frac. HED does not read it, so it would be ignored"
    )
