"""Each default lives in one place in code, conf/base writes the same values, and the pre-run
check hands the parsed sections to the nodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Node, Pipeline

from hed.analysis.rescoring import RESCORING_DEFAULTS, RescoringParams, rescoring_section
from hed.config.params import GenerationParams, generation_params, shard_config
from hed.config.preflight import hand_to_nodes, parsed_sections
from hed.config.sections import SECTIONS, default
from hed.decode.types import SamplingParams, VLLMSettings

BASE = Path(__file__).resolve().parents[2] / "conf" / "base"


def _conf(name: str) -> dict:
    return yaml.safe_load((BASE / f"parameters_{name}.yml").read_text(encoding="utf-8"))


def test_section_defaults_come_from_the_typed_sections():
    sampling = {f.name: f.default for f in dataclasses.fields(SamplingParams)}
    assert {k: SECTIONS["generation"][k] for k in sampling} == {**sampling, "max_new_tokens": ...}
    assert SECTIONS["generation.vllm"] == {
        f.name: f.default for f in dataclasses.fields(VLLMSettings)
    }
    assert SECTIONS["rescoring"] == {**RESCORING_DEFAULTS, "reference": {}}
    assert SECTIONS["rescoring.reference"] == {"source": "generated", "run": None, "step": None}
    assert default("aggregation", "top_entropy_frac") == 0.2
    assert default("rescoring", "consistency_tolerance") == 1.0e-4


def test_conf_base_writes_the_code_defaults():
    generation = _conf("generation")["generation"]
    for key in ("temperature", "top_p", "top_k", "batch_size", "seed", "top_prob_k", "dtype",
                "torch_threads", "log_every_s", "backend"):  # fmt: skip
        assert generation[key] == SECTIONS["generation"][key], key
    assert generation["vllm"] == SECTIONS["generation.vllm"]
    assert _conf("rescoring")["rescoring"] == RESCORING_DEFAULTS
    prompts = _conf("generation")["prompts"]
    # a study's choices, not defaults: the answers' column and the instruction suffix
    assert (prompts["answer_column"], SECTIONS["prompts"]["answer_column"]) == ("answer", None)
    assert prompts["instruction_suffix"].startswith("\nPut your final answer within")
    for key in SECTIONS["prompts"].keys() - {"answer_column", "instruction_suffix", "duplicates"}:
        assert prompts[key] == SECTIONS["prompts"][key], key
    dynamics = _conf("dynamics")["dynamics"]
    assert {**dynamics, "figures": {}} == SECTIONS["dynamics"]
    assert dynamics["figures"] == SECTIONS["dynamics.figures"]
    analyses = _conf("analyses")["analyses"]
    subsections = ("mismatch", "trainer_entropy", "delta_logprob", "advantage_shaping")
    for key in subsections:
        assert analyses[key] == SECTIONS[f"analyses.{key}"], key
    assert {**analyses, **{key: {} for key in subsections}} == SECTIONS["analyses"]
    assert rescoring_section(None) == RescoringParams() == rescoring_section(RESCORING_DEFAULTS)


GENERATION = {"num_shards": 2, "samples_per_prompt": 3, "max_new_tokens": 8, "top_k": 0}


def test_generation_is_parsed_once_into_typed_parts():
    parsed = generation_params({**GENERATION, "backend": "vllm", "vllm": {"max_num_seqs": 4}})
    assert parsed.sampling == SamplingParams(max_new_tokens=8, top_k=None)
    assert parsed.vllm == VLLMSettings(max_num_seqs=4)
    assert (parsed.num_shards, parsed.samples_per_prompt, parsed.dtype) == (2, 3, "by_device")
    assert GenerationParams.of(parsed) is parsed
    assert shard_config(parsed) == (2, 3) == shard_config(GENERATION)
    assert generation_params(GENERATION).vllm is None  # hf: engine settings not needed


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
    from hed.config.params import ReportingParams, reporting_params, reporting_section
    from hed.report.explorer.options import ExplorerOptions
    from hed.report.style import FigureStyle
    from hed.report.token_report.options import TokenReportOptions

    parsed = reporting_params({"top_n_words": 5, "figure2": {"dpi": 100}})
    assert (parsed.top_n_words, parsed.fig2_measure, parsed.strict) == (5, "count", False)
    assert parsed.figure2 == FigureStyle((3.5, 2.8), 100)
    assert parsed.figure3 == FigureStyle((2.6, 3.6), 200)
    assert parsed.figure3.as_params() == SECTIONS["reporting.figure3"]
    assert parsed.token_report == TokenReportOptions(8, 2000, None, 0, True)
    assert parsed.explorer == ExplorerOptions(16, 2000, None, 0, "grpo", True)
    assert ReportingParams.of(parsed) is parsed
    # a node written for the dict still reads the section as configured
    assert reporting_section(parsed) == {"top_n_words": 5, "figure2": {"dpi": 100}}


def test_the_backend_and_dtype_defaults_have_one_source():
    """generation.backend and generation.dtype: the shard-reuse comparison, the typed section
    and the key list read records.shard_metadata.DECODING_DEFAULTS."""
    import ast
    import inspect

    from hed.config import params as params_module
    from hed.records import shard_metadata

    assert shard_metadata.DECODING_DEFAULTS == {"backend": "hf", "dtype": "by_device"}
    assert SECTIONS["generation"]["backend"] == "hf"
    assert SECTIONS["generation"]["dtype"] == "by_device"
    assert params_module.GenerationParams.backend == "hf"
    for module, times in ((shard_metadata, 1), (params_module, 0)):  # 1: the table itself
        literals = [
            node.value
            for node in ast.walk(ast.parse(inspect.getsource(module)))
            if isinstance(node, ast.Constant) and node.value in ("hf", "by_device")
        ]
        assert sorted(literals) == sorted(["hf", "by_device"] * times), module.__name__


def test_the_figure_style_report_page_and_batch_defaults_have_one_source():
    """Each of these defaults is written once, in the layer that uses it; the key list
    (SECTIONS), the typed sections and the lower functions' argument defaults read it."""
    import ast
    import inspect

    from hed.analysis import correctness, covariance
    from hed.config import sections
    from hed.config.params import ReportingParams
    from hed.pass1 import config as pass1_config
    from hed.pass1 import wandb_online
    from hed.records import arrow_stream
    from hed.report import dynamics_figures, figures, style
    from hed.report.explorer.options import ExplorerOptions
    from hed.report.token_report.options import TokenReportOptions

    # the values, once
    assert style.FIGURE2_STYLE == style.FigureStyle((3.5, 2.8), 200)
    assert style.FIGURE3_STYLE == style.FigureStyle((2.6, 3.6), 200)
    assert style.DYNAMICS_STYLE == style.FigureStyle((3.2, 2.2), 200)
    assert SECTIONS["reporting.figure2"] == {"panel_size": [3.5, 2.8], "dpi": 200}
    assert SECTIONS["reporting.figure3"] == {"panel_size": [2.6, 3.6], "dpi": 200}
    assert SECTIONS["dynamics.figures"] == {"panel_size": [3.2, 2.2], "dpi": 200}
    assert SECTIONS["reporting.token_report"] == dataclasses.asdict(TokenReportOptions())
    assert SECTIONS["reporting.explorer"] == dataclasses.asdict(ExplorerOptions())
    assert SECTIONS["aggregation"]["chunk_records"] == arrow_stream.DEFAULT_CHUNK == 524_288
    assert SECTIONS["dynamics"]["batch_records"] == covariance.BATCH_RECORDS == 65_536
    assert pass1_config._OPTIONS["wandb"][1]["timeout"] == wandb_online.TIMEOUT_S == 20
    assert ReportingParams.fig2_measure == SECTIONS["reporting"]["fig2_measure"] == "count"
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
    # and sections.py writes none of these values as a literal
    tree = ast.parse(inspect.getsource(sections))
    literals = {
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float)
    }
    assert not literals & {"524288", "65536", "200", "3.5", "2.6", "3.2", "2000", "16", "8"}


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
