"""Every resume command HED prints can start: for a failure in any node of any pipeline, the
``--from-nodes`` it names (:func:`hed.runners.resume.resume_nodes`) reach the failed node and
read only datasets that are on disk or parameters (never one kept in the failed run's memory).
"""

from __future__ import annotations

import click
import pytest
from kedro.framework.project import configure_project
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Node, Pipeline

from hed.config import session
from hed.config.loader import HEDConfigLoader
from hed.pipeline_registry import register_pipelines
from hed.runners.resume import is_persisted, resume_command, resume_nodes

from ..conftest import REPO_ROOT

#: Inputs a hook provides at the start of every run (not a node's output).
HOOK_INPUTS = {"run_context"}


def _pipelines_and_catalog(env: str) -> tuple[dict[str, Pipeline], DataCatalog]:
    loader = HEDConfigLoader(
        str(REPO_ROOT / "conf"), base_env="base", default_run_env="local", env=env
    )
    params = loader["parameters"]
    runs = params["runs"]
    first = next(iter(runs))
    if env == "base":  # two steps, so the all-steps nodes have more than one input
        params = {**params, "runs": {first: {**runs[first], "steps": [0, 10]}}}
    configure_project("hed")
    with session.session_config(params):
        pipelines = register_pipelines()
        pipelines = {name: pipelines[name] for name in pipelines}  # build them while active
    return pipelines, DataCatalog.from_config(loader["catalog"])


@pytest.mark.parametrize("env", ["base", "mini_dapo"])
def test_a_resume_from_any_failed_node_reads_only_persisted_inputs(env):
    pipelines, catalog = _pipelines_and_catalog(env)
    checked = 0
    for name, pipeline in pipelines.items():
        for node in pipeline.nodes:
            starts = resume_nodes(pipeline, [node.name], catalog)
            resumed = pipeline.from_nodes(*starts)
            assert node in resumed.nodes, (name, node.name, starts)
            missing = {
                i for i in resumed.inputs() if i not in HOOK_INPUTS and not is_persisted(catalog, i)
            }
            assert not missing, f"{name}: after {node.name} fails, {starts} need {missing}"
            checked += 1
    assert checked > 60


def test_an_aggregation_failure_resumes_where_the_inputs_are_on_disk():
    pipelines, catalog = _pipelines_and_catalog("base")
    aggregation = pipelines["aggregation"]
    ns = "smollm2_demo.step_0"
    # the threshold reads the shard report, kept in memory: the step starts again
    assert resume_nodes(aggregation, [f"{ns}.compute_entropy_threshold"], catalog) == [
        f"{ns}.check_sequences"
    ]
    assert resume_nodes(aggregation, [f"{ns}.merge_token_records"], catalog) == [
        f"{ns}.check_sequences"
    ]
    # summarise_step reads the lexicon (memory); a node whose inputs are on disk starts itself
    assert resume_nodes(aggregation, [f"{ns}.summarise_step"], catalog) == [f"{ns}.check_sequences"]
    assert resume_nodes(aggregation, ["combine_summaries"], catalog) == ["combine_summaries"]
    # a failure in step 0 and one in step 10: both steps, in natural order
    both = resume_nodes(
        aggregation, [f"{ns}.read_lexicon", "smollm2_demo.step_10.check_token_records"], catalog
    )
    assert both == [f"{ns}.check_sequences", "smollm2_demo.step_10.check_sequences"]


def _identity(x):
    return x


def test_memory_inputs_walk_up_to_the_producer_and_persisted_ones_do_not():
    catalog = DataCatalog(
        datasets={"a": MemoryDataset(), "b": MemoryDataset(), "c": MemoryDataset()}
    )
    catalog.get("b")._EPHEMERAL = True
    pipeline = Pipeline(
        [
            Node(_identity, "raw", "a", name="first"),
            Node(_identity, "a", "b", name="second"),
            Node(_identity, "b", "c", name="third"),
        ]
    )
    assert is_persisted(catalog, "params:x")
    assert not is_persisted(catalog, "a")  # a MemoryDataset
    assert not is_persisted(catalog, "not_in_the_catalog")
    assert resume_nodes(pipeline, ["third"], catalog) == ["first"]
    assert resume_nodes(pipeline, [], catalog) == []


def test_the_command_is_the_kedro_run_line_with_from_nodes(monkeypatch):
    @click.command(name="run")
    def run():
        pass

    monkeypatch.setattr(
        "sys.argv",
        ["kedro", "run", "--env", "s", "--only-missing-outputs", "--nodes", "x", "--from-nodes=y",
         "--pipelines", "aggregation"],
    )  # fmt: skip
    with click.Context(run):
        command = resume_command(["r.step_0.check_sequences", "r.step_2.check_sequences"])
    assert command == (
        "kedro run --env s --pipelines aggregation "
        "--from-nodes r.step_0.check_sequences,r.step_2.check_sequences"
    )
    assert resume_command(["n"], ["run", "--runner", "R"]) == "kedro run --runner R --from-nodes n"
