"""conf/logging.yml: what `kedro run` prints before the first node."""

from __future__ import annotations

import logging
import logging.config
from pathlib import Path

import yaml
from kedro.pipeline import Node, Pipeline
from kedro.validation.type_extractor import TypeExtractor

from hed.pipelines.generation.nodes import resolve_checkpoints

LOGGING_YML = Path(__file__).resolve().parents[2] / "conf" / "logging.yml"


def test_no_kedro_validation_warning_about_hed_typed_parameter_unions(caplog):
    """Nodes take ``GenerationParams | dict`` on purpose (the pre-run check hands them the
    parsed object; tests and notebooks pass a dict). Kedro 1.7's parameter validation, which
    HED does not use, warned once per such type at the start of every `kedro run`:
    "Union type hint (GenerationParams | dict) is not supported for validation"."""
    loggers = ["", "kedro", "hed", "kedro.validation"]
    saved = {name: logging.getLogger(name).level for name in loggers}
    root_handlers = logging.getLogger().handlers[:]
    try:
        logging.config.dictConfig(yaml.safe_load(LOGGING_YML.read_text()))
        logging.getLogger().addHandler(caplog.handler)
        node = Node(resolve_checkpoints, ["params:runs", "params:generation"], "checkpoints")
        TypeExtractor({"__default__": Pipeline([node])}).extract_types_from_pipelines()
    finally:
        logging.getLogger().handlers[:] = root_handlers
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("kedro.validation")] == []
