"""The shape of the source tree (docs/architecture.md): library outside pipelines, small nodes.

* nothing in ``src/hed`` outside ``pipelines/`` imports ``hed.pipelines``;
* no pipeline package imports another (``hed.pipelines.binding`` is shared glue, not a
  pipeline);
* no module under ``src/hed/pipelines`` is over 500 lines;
* one mechanism, one place: temporary-file-and-rename only in ``atomic_io.py``, keyword
  binding of node functions only in ``pipelines/binding.py``.

Imports are read with ``ast`` (function-level imports included), not by running the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

SRC = REPO_ROOT / "src" / "hed"
PIPELINES = SRC / "pipelines"
SHARED = {"hed.pipelines.binding"}  # modules every pipeline may import
MAX_PIPELINE_MODULE_LINES = 500


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    package = ".".join(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def pipeline_of(name: str) -> str | None:
    """``hed.pipelines.<pipeline>...`` → ``<pipeline>``; anything else → None."""
    parts = name.split(".")
    if parts[:2] != ["hed", "pipelines"] or len(parts) < 3 or name in SHARED:
        return None
    return parts[2] if (PIPELINES / parts[2]).is_dir() else None


def test_the_rules_see_imports_inside_functions_and_relative_ones(tmp_path):
    probe = PIPELINES / "aggregation" / "pipeline.py"
    names = imported(probe)
    assert "hed.pipelines.aggregation.nodes" in names  # `from .nodes import ...`
    assert "hed.pipelines.binding.bound" in names
    assert pipeline_of("hed.pipelines.generation.nodes.sampling_params_from") == "generation"
    assert pipeline_of("hed.pipelines.binding.bound") is None


def test_library_modules_do_not_import_pipelines():
    offenders = {
        str(path.relative_to(SRC)): sorted(n for n in imported(path) if pipeline_of(n))
        for path in modules()
        if PIPELINES not in path.parents and path.name != "pipeline_registry.py"
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_pipeline_package_imports_another():
    crossings = {}
    for path in PIPELINES.rglob("*.py"):
        own = path.relative_to(PIPELINES).parts[0]
        others = sorted({p for n in imported(path) if (p := pipeline_of(n)) and p != own})
        if others:
            crossings[str(path.relative_to(SRC))] = others
    assert crossings == {}


@pytest.mark.parametrize(
    "path", sorted(PIPELINES.rglob("*.py")), ids=lambda p: str(p.relative_to(PIPELINES))
)
def test_pipeline_modules_stay_small(path):
    n_lines = len(path.read_text().splitlines())
    assert n_lines <= MAX_PIPELINE_MODULE_LINES, f"{path.relative_to(SRC)}: {n_lines} lines"


def calls(path: Path, dotted: str) -> int:
    """How many calls of ``a.b`` (e.g. ``tempfile.mkstemp``) ``path`` makes."""
    owner, attribute = dotted.split(".")
    return sum(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == attribute
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == owner
        for node in ast.walk(ast.parse(path.read_text()))
    )


@pytest.mark.parametrize(
    ("mechanism", "home"),
    [
        ("tempfile.mkstemp", "records/atomic_io.py"),
        ("os.replace", "records/atomic_io.py"),
        ("tempfile.mkdtemp", "records/atomic_io.py"),
        ("functools.update_wrapper", "pipelines/binding.py"),
    ],
)
def test_one_mechanism_lives_in_one_module(mechanism, home):
    where = {str(p.relative_to(SRC)) for p in modules() if calls(p, mechanism)}
    if mechanism.startswith("functools"):  # imported by name: `update_wrapper(partial(...))`
        where = {str(p.relative_to(SRC)) for p in modules() if "update_wrapper(" in p.read_text()}
    assert where == {home}


def test_every_library_module_and_pipeline_is_in_docs_architecture_md():
    doc = (REPO_ROOT / "docs" / "architecture.md").read_text()
    missing = [p.name for p in sorted(SRC.glob("*.py")) if f"`{p.name}`" not in doc]
    missing += [
        f"pipelines/{p.name}"
        for p in sorted(PIPELINES.iterdir())
        if p.is_dir()
        and not p.name.startswith("_")
        and p.name.upper() not in doc
        and f"`{p.name}`" not in doc
    ]
    assert not missing, f"docs/architecture.md does not name {missing}"
