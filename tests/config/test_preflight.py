"""Checks before the first node runs: parameters of every section the run reads; short errors."""

from __future__ import annotations

import pytest
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Node, Pipeline

from hed.errors import ConfigError
from hed.hooks.parameters import check_parameters

GENERATION = {"num_shards": 1, "samples_per_prompt": 2, "max_new_tokens": 8, "dtype": "auto"}
AGGREGATION = {"top_entropy_frac": 0.2, "lexicon": {"anthropomorphic": ["wait"]}}
REPORTING = {"strict": False, "top_n_words": 20, "fig3": {"steps": [20, 80]}}


def _identity(*args):
    return args[0]


def _run(sections: dict[str, object]) -> list[str]:
    """``check_parameters`` on a pipeline of one node reading ``params:<section>`` of each."""
    names = [f"params:{name}" for name in sections]
    pipeline = Pipeline([Node(_identity, names, "out", name="reads_params")])
    catalog = DataCatalog({f"params:{k}": MemoryDataset(v) for k, v in sections.items()})
    return check_parameters(pipeline, catalog)


def test_valid_parameters_pass_and_only_the_sections_read_are_checked():
    assert _run({"generation": GENERATION, "aggregation": AGGREGATION, "reporting": REPORTING}) == [
        "generation",
        "aggregation",
        "reporting",
    ]
    # a reporting-only run does not look at a broken generation section
    assert _run({"reporting": REPORTING}) == ["reporting"]


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"aggregation": {**AGGREGATION, "top_entropy_frac": 20}}, "top_entropy_frac = 20"),
        ({"aggregation": {**AGGREGATION, "lexicon": {"anthropomorphic": [4]}}}, "lexicon"),
        ({"reporting": {**REPORTING, "top_n_words": 0}}, "reporting.top_n_words"),
        ({"reporting": {**REPORTING, "fig3": {"steps": "20, 80"}}}, "reporting.fig3.steps"),
        ({"reporting": {**REPORTING, "strict": "false"}}, "reporting.strict"),
        ({"generation": {**GENERATION, "temperature": 0}}, "generation.temperature"),
        ({"generation": {**GENERATION, "dtype": "fp8"}}, "generation.dtype"),
        ({"generation": {**GENERATION, "backend": "vlm"}}, "generation.backend"),
        ({"runs": {"r": {"role": "clipped", "checkpoint_root": "x", "steps": [0]}}}, "role"),
        ({"runs": {"r": {"role": "single", "checkpoint_root": "x", "steps": -1}}}, "steps"),
    ],
)
def test_a_bad_value_of_any_section_read_stops_the_run_before_its_first_node(sections, message):
    with pytest.raises(ConfigError) as raised:
        _run({"generation": GENERATION, **sections})
    assert message in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"reporting": {**REPORTING, "figure2": {"dpi": 0}}},
         "reporting.figure2.dpi must be an integer from 10 to 1200, got 0"),
        ({"reporting": {**REPORTING, "figure3": {"dpi": "abc"}}},
         "reporting.figure3.dpi must be an integer from 10 to 1200, got 'abc'"),
        ({"reporting": {**REPORTING, "figure2": {"dpi": 72.5}}},
         "reporting.figure2.dpi must be an integer from 10 to 1200, got 72.5"),
        ({"reporting": {**REPORTING, "figure3": {"panel_size": [-1, 2]}}},
         "reporting.figure3.panel_size must be [width, height] in inches, both > 0 and at "
         "most 20, got [-1, 2]"),
        ({"reporting": {**REPORTING, "figure2": {"panel_size": [3.5]}}},
         "reporting.figure2.panel_size must be [width, height] in inches, both > 0 and at "
         "most 20, got [3.5]"),
        ({"reporting": {**REPORTING, "figure2": {"panel_size": "3.5x2"}}},
         "reporting.figure2.panel_size must be [width, height] in inches, both > 0 and at "
         "most 20, got '3.5x2'"),
        ({"dynamics": {"figures": {"dpi": 0}}},
         "dynamics.figures.dpi must be an integer from 10 to 1200, got 0"),
        ({"reporting": {**REPORTING, "figure2": {"dpi": 100000}}},
         "reporting.figure2.dpi must be an integer from 10 to 1200, got 100000"),
        ({"reporting": {**REPORTING, "figure3": {"panel_size": [float("inf"), 2]}}},
         "reporting.figure3.panel_size must be [width, height] in inches, both > 0 and at "
         "most 20, got [inf, 2]"),
        ({"dynamics": {"figures": {"panel_size": [3, 0]}}},
         "dynamics.figures.panel_size must be [width, height] in inches, both > 0 and at "
         "most 20, got [3, 0]"),
    ],
)  # fmt: skip
def test_a_bad_figure_style_is_refused_before_the_first_node_in_one_line(sections, message):
    """reporting.figure2/figure3 and dynamics.figures are parsed by the pre-run check (a dpi
    of 0 used to end in matplotlib's traceback after 7 nodes, 'abc' in int()'s ValueError)."""
    with pytest.raises(ConfigError) as raised:
        _run(sections)
    assert str(raised.value) == message


def test_the_figure_style_reaches_the_nodes_parsed():
    from hed.hooks.parameters import parsed_sections
    from hed.report.style import FigureStyle

    sections = {"reporting": {**REPORTING, "figure2": {"dpi": 72}}, "dynamics": None}
    pipeline = Pipeline([Node(_identity, [f"params:{k}" for k in sections], "out", name="n")])
    catalog = DataCatalog({f"params:{k}": MemoryDataset(v) for k, v in sections.items()})
    parsed = parsed_sections(pipeline, catalog)
    assert parsed["reporting"].figure2.as_params() == {"panel_size": [3.5, 2.8], "dpi": 72}
    assert parsed["reporting"].figure3.as_params() == {"panel_size": [2.6, 3.6], "dpi": 200}
    assert parsed["dynamics"].figures.as_params() == {"panel_size": [3.2, 2.2], "dpi": 200}
    assert isinstance(parsed["dynamics"].figures, FigureStyle)


def test_short_message_finds_the_hed_error_kedro_wrapped():
    from kedro.io.core import DatasetError

    from hed.errors import InputDataError, short_message
    from hed.runners.executor import FailedNodesError

    cause = InputDataError("/d/shard_0.parquet: column entropy is nan at (0, 0, 1)")
    try:
        try:
            raise cause
        except InputDataError as exc:
            raise DatasetError(f"Failed while loading data from dataset x: {exc}") from exc
    except DatasetError as wrapped:
        assert short_message(wrapped) == f"InputDataError: {wrapped}"
    try:
        try:
            raise cause
        except InputDataError:
            raise RuntimeError("a node failed") from None
    except RuntimeError as unrelated:
        assert short_message(unrelated) is None  # `from None`: the HED error is not the cause
    assert short_message(ValueError("library bug")) is None
    failed = FailedNodesError({"a": "boom"}, {}, "kedro run --from-nodes a")
    assert short_message(failed).startswith("FailedNodesError: 1 node(s) failed:")


RUNS = {
    "a": {"role": "with_clip", "checkpoint_root": "x", "steps": [0, 10]},
    "b": {"role": "without_clip", "checkpoint_root": "y", "steps": [10]},
}


def test_token_report_steps_of_no_run_are_refused_before_generation():
    """A copied study keeping qae_repro's token_report.steps [20, 80, 200] used to fail only in
    build_token_report, after every shard had been generated."""
    reporting = {**REPORTING, "fig3": {"steps": [10]}, "token_report": {"steps": [20, 80, 200]}}
    with pytest.raises(ConfigError) as raised:
        _run({"runs": RUNS, "reporting": reporting})
    assert str(raised.value) == (
        "reporting.token_report.steps [20, 80, 200] matches no step of the runs "
        "(steps available: [0, 10]); set it to null or to existing steps"
    )
    # one shown step that exists is enough (the page notes the others); disabled or null: no check
    assert _run({"runs": RUNS, "reporting": {**reporting, "token_report": {"steps": [10, 20]}}})
    off = {"enabled": False, "steps": [20]}
    assert _run({"runs": RUNS, "reporting": {**reporting, "token_report": off}})
    # the study explorer's steps likewise
    explorer = {**reporting, "token_report": {"steps": [10]}, "explorer": {"steps": [5]}}
    with pytest.raises(ConfigError) as raised:
        _run({"runs": RUNS, "reporting": explorer})
    assert str(raised.value).startswith("reporting.explorer.steps [5] matches no step of the runs")
    # a re-plot (the pipeline reads params:reporting only) is checked against the catalog's runs
    catalog = DataCatalog(
        {"params:runs": MemoryDataset(RUNS), "params:reporting": MemoryDataset(reporting)}
    )
    replot = Pipeline([Node(_identity, "params:reporting", "out", name="reads_reporting")])
    with pytest.raises(ConfigError, match="matches no step of the runs"):
        check_parameters(replot, catalog)
    # steps: all are known only on disk: not checked in a re-plot (the node still is) ...
    catalog.save("params:runs", {**RUNS, "a": {**RUNS["a"], "steps": "all"}})
    assert check_parameters(replot, catalog) == ["reporting"]


def test_token_report_steps_are_checked_against_steps_all_found_on_disk(tmp_path):
    """... but a run that reads params:runs has scanned checkpoint_root for `steps: all`."""
    for step in (0, 10):
        (tmp_path / f"global_step_{step}" / "actor_hf").mkdir(parents=True)
    runs = {"a": {"role": "with_clip", "checkpoint_root": str(tmp_path), "steps": "all"}}
    reporting = {**REPORTING, "fig3": {"steps": [10]}, "token_report": {"steps": [20, 80, 200]}}
    with pytest.raises(ConfigError) as raised:
        _run({"runs": runs, "reporting": reporting})
    assert str(raised.value).startswith(
        "reporting.token_report.steps [20, 80, 200] matches no step of the runs "
        "(steps available: [0, 10])"
    )
