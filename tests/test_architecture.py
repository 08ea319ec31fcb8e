"""The shape of the source tree (docs/architecture.md): layers, no circles, small modules.

* imports point down the layers only: ``hed.errors`` < ``core`` < ``records`` < ``decode``,
  ``analysis`` < ``pass1``, ``report`` < ``config`` < ``io``, ``runners`` < ``mini_rl`` <
  ``pipelines`` < ``hooks`` < Kedro's files (``settings``, ``pipeline_registry``, ``cli``, ...),
  which may import anything; imports inside functions and under ``TYPE_CHECKING`` count too;
* no import circle anywhere in ``src/hed`` (a module-level graph, function-level imports
  included);
* no module in ``src/hed`` is over 500 lines;
* every module is named in docs/architecture.md;
* nothing in ``src/hed`` outside ``pipelines/`` imports ``hed.pipelines``;
* no pipeline package imports another (``hed.pipelines.binding`` is shared glue, not a
  pipeline);
* no module takes a private name (``_x``) from another HED module;
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
MAX_MODULE_LINES = 500

#: The layers, bottom first; a module may import its own layer and those below it.
LAYERS: list[set[str]] = [
    {"hed", "hed.errors"},  # the package root (its version) and the errors every layer raises
    # the parameter models' base and their messages depend on pydantic and errors only: every
    # layer's settings (report options, pass@1 sources) subclass them
    {"hed.core", "hed.config.model", "hed.config.messages"},
    {"hed.records"},
    {"hed.decode", "hed.analysis"},
    {"hed.pass1", "hed.report"},
    {"hed.config"},
    {"hed.io", "hed.runners"},
    {"hed.mini_rl"},
    {"hed.pipelines"},
    {"hed.hooks"},  # Kedro's hooks: the session around the pipelines
]
#: Kedro's face (settings, pipeline_registry, cli): on top, may import anything.
TOP = len(LAYERS)

#: Upward imports that are known and being removed (empty: none). Each entry: (importer,
#: imported layer) with the reason. Remove an entry once its import is gone.
_SECTION_BASE = "the pydantic Section base sits in config until it moves below pass1 (core)"
KNOWN_UPWARD: dict[tuple[str, str], str] = {
    ("hed.pass1.config", "hed.config.model"): _SECTION_BASE,
    ("hed.pass1.config", "hed.config.messages"): _SECTION_BASE,
}

#: Import circles known and being removed, each with the reason (sorted module names).
KNOWN_CIRCLES: dict[tuple[str, ...], str] = {}


def modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def module_name(path: Path, root: Path = SRC) -> str:
    """``src/hed/core/entropy.py`` → ``hed.core.entropy``; an ``__init__.py`` → its package."""
    name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


def imported(path: Path, source: str | None = None, name: str | None = None) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved).

    ``source`` and ``name`` stand in for the file's text and module name (planted sources).
    """
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    text = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(text)):
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
    assert pipeline_of("hed.pipelines.generation.nodes.generate_shard") == "generation"
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


def too_long(sources: dict[str, str]) -> dict[str, int]:
    """Modules of ``sources`` (name → text) over :data:`MAX_MODULE_LINES` lines → their count."""
    counts = {name: len(text.splitlines()) for name, text in sources.items()}
    return {name: n for name, n in counts.items() if n > MAX_MODULE_LINES}


def test_no_module_is_over_500_lines():
    assert too_long({module_name(p): p.read_text() for p in modules()}) == {}


def test_the_line_limit_catches_a_planted_long_module():
    assert too_long({"hed.core.planted": "x = 1\n" * 501, "hed.core.ok": "x = 1\n" * 500}) == {
        "hed.core.planted": 501
    }


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


def test_no_module_makes_files_with_mkstemp():
    """``mkstemp`` files are 0600 whatever the umask: renamed onto an output they hide it from
    the study's group (atomic_io.new_temporary creates its temporaries as open() does)."""
    assert {str(p.relative_to(SRC)) for p in modules() if calls(p, "tempfile.mkstemp")} == set()


def undescribed(paths: list[str], doc: str) -> list[str]:
    """Paths under ``src/hed`` (``core/entropy.py``; a package as ``core/``) that ``doc`` does
    not name between backticks. A pipeline's files are described by its folder's row."""
    missing = []
    for path in paths:
        parts = path.split("/")
        if parts[0] == "pipelines" and len(parts) > 2:
            continue  # pipelines/<name>/nodes.py: the `pipelines/<name>/` row (below)
        shown = path.removesuffix("__init__.py") if parts[-1] == "__init__.py" else path
        if shown and f"`{shown}`" not in doc:
            missing.append(shown)
    return missing


def test_every_module_and_pipeline_is_described_in_docs_architecture_md():
    doc = (REPO_ROOT / "docs" / "architecture.md").read_text()
    missing = undescribed([str(p.relative_to(SRC)) for p in modules()], doc)
    missing += [
        f"pipelines/{p.name}/"
        for p in sorted(PIPELINES.iterdir())
        if p.is_dir() and not p.name.startswith("_") and f"`pipelines/{p.name}/`" not in doc
    ]
    assert not missing, f"docs/architecture.md does not describe {missing}"


def test_the_docs_check_catches_a_module_missing_from_the_table():
    doc = "| `core/` | numbers |\n| `core/entropy.py` | H |\n| `pipelines/metrics/` | pass@1 |"
    paths = ["core/__init__.py", "core/entropy.py", "core/planted.py", "records/__init__.py"]
    paths += ["pipelines/metrics/nodes.py"]
    assert undescribed(paths, doc) == ["core/planted.py", "records/"]


# ------------------------------------------------------------------ layers and circles


def layer_of(name: str) -> int:
    """The layer index of module ``name`` (:data:`LAYERS`; :data:`TOP` for Kedro's files)."""
    for i, layer in enumerate(LAYERS):
        if any(name == top or name.startswith(top + ".") for top in layer if top != "hed"):
            return i
    return 0 if name == "hed" else TOP


def hed_modules(names: set[str], known: set[str]) -> set[str]:
    """The HED modules behind imported names (``hed.core.entropy.entropy`` → the module)."""
    found = set()
    for imported_name in names:
        name = imported_name
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def import_graph(sources: dict[str, tuple[Path, str]]) -> dict[str, set[str]]:
    """Module → the HED modules it imports (module level, in functions, under TYPE_CHECKING)."""
    known = set(sources)
    return {
        name: hed_modules(imported(path, text, name), known) - {name}
        for name, (path, text) in sources.items()
    }


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import that points to a higher layer."""
    return sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(name) and (name, target) not in KNOWN_UPWARD
    )


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (strongly connected components of more than one
    module, Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def source_tree() -> dict[str, tuple[Path, str]]:
    return {module_name(p): (p, p.read_text()) for p in modules()}


def test_imports_point_down_the_layers():
    assert upward_imports(import_graph(source_tree())) == []


def test_no_import_circle_in_src_hed():
    found = circles(import_graph(source_tree()))
    assert [c for c in found if tuple(c) not in KNOWN_CIRCLES] == []
    assert [list(c) for c in KNOWN_CIRCLES if list(c) not in found] == [], "remove it from KNOWN"


def test_every_package_has_a_layer():
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    placed = {top.split(".")[1] for layer in LAYERS for top in layer if "." in top}
    assert packages - placed == set(), "add the new package to LAYERS and docs/architecture.md"


def test_a_planted_upward_import_fails(tmp_path):
    """A core module importing config (at module level) and a records module importing a
    pipeline inside a function are both caught; Kedro's files may import anything."""
    planted = {
        "hed.core.planted": "from hed.config.session import data_root\n",
        "hed.records.planted": "def f():\n    from hed.pipelines.generation import nodes\n",
        "hed.records.fine": "from hed.core import entropy\nfrom hed.errors import HEDError\n",
        "hed.hooks": "from hed.pipelines.generation import nodes\n",
    }
    tree = source_tree()
    for name, text in planted.items():
        path = tmp_path / (name.replace(".", "/") + ".py")
        tree[name] = (path, text)
    assert upward_imports(import_graph(tree)) == [
        "hed.core.planted -> hed.config.session",
        "hed.records.planted -> hed.pipelines.generation",
        "hed.records.planted -> hed.pipelines.generation.nodes",
    ]


def test_a_planted_circle_is_found(tmp_path):
    tree = {
        "hed.core.a": (tmp_path / "a.py", "from hed.core import b\n"),
        "hed.core.b": (tmp_path / "b.py", "def f():\n    from hed.core.c import x\n"),
        "hed.core.c": (tmp_path / "c.py", "from .a import y\n"),
        "hed.core.d": (tmp_path / "d.py", "from hed.core import a\n"),
    }
    assert circles(import_graph(tree)) == [["hed.core.a", "hed.core.b", "hed.core.c"]]


# ------------------------------------------------------------------ private names


def private_imports(name: str, path: Path, source: str) -> list[str]:
    """``module: name`` for each private name (``_x``, not ``__x__``) that module ``name``
    takes from another HED module: ``from hed.a import _x`` (relative too), or
    ``import hed.a as m`` / ``from hed import a`` followed by ``m._x`` / ``a._x``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def private(attribute: str) -> bool:
        return attribute.startswith("_") and not attribute.endswith("__")

    found, aliases = [], {}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if (module != "hed" and not module.startswith("hed.")) or module == name:
                continue
            for alias in node.names:
                if private(alias.name):
                    found.append(f"{name}: {module}.{alias.name}")
                else:  # maybe a module (`from hed.core import entropy`)
                    aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("hed.") and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and private(node.attr)
            and aliases[node.value.id] != name
        ):
            found.append(f"{name}: {aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


def test_no_module_takes_a_private_name_from_another():
    tree = source_tree()
    assert [line for n, (p, text) in tree.items() for line in private_imports(n, p, text)] == []


def test_a_planted_private_import_fails(tmp_path):
    planted = (
        "from hed.records.shard_keys import _EXAMPLES, examples\n"
        "from .schema import _hidden\n"
        "from hed.core import entropy\n"
        "import hed.core.words as words\n"
        "x = entropy._log(1) + words._table + entropy.__name__ + _own\n"
        "_own = 1\n"
    )
    assert private_imports("hed.records.planted", tmp_path / "planted.py", planted) == [
        "hed.records.planted: hed.core.entropy._log",
        "hed.records.planted: hed.core.words._table",
        "hed.records.planted: hed.records.schema._hidden",
        "hed.records.planted: hed.records.shard_keys._EXAMPLES",
    ]
