"""The layer table, enforced: every import in the package and its plug-ins points down, and none forms a cycle.

Every import statement counts: module level, deferred (inside functions, ``try`` blocks, classes) and
``if TYPE_CHECKING:`` ones alike, since each is a dependency the reader must follow. A module's layer
comes from the table below by its dotted name (the longest matching prefix wins), so a new module
gets its layer from its package without editing this file. ``docs/internals.md`` describes the same
table for maintainers; :func:`test_internals_page_matches_the_table` keeps them together.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Where the scanned packages live: (directory holding the package, package name).
PACKAGES: tuple[tuple[Path, str], ...] = (
    (ROOT, "layoutcore"),
    *(
        (ROOT / "drivers", p.name)
        for p in sorted((ROOT / "drivers").glob("layoutcore_*"))
        if (p / "__init__.py").exists()
    ),
    (ROOT / "conformance", "layoutcore_conformance"),
)

#: The layers, lowest first. A module may import modules of its own layer or of a lower one.
LAYERS: tuple[str, ...] = (
    "leaf helpers",
    "values",
    "planning",
    "driver SPI",
    "user API",
    "reference driver and integrations",
    "command line and framework drivers",
    "conformance",
)

#: Dotted-name prefix -> layer; the longest prefix that matches a module wins. A regex (``re:``) is
#: matched against the whole dotted name and wins over prefixes.
TABLE: dict[str, str] = {
    "layoutcore._checks": "leaf helpers",
    "layoutcore._errors": "leaf helpers",
    "layoutcore._config": "leaf helpers",
    "layoutcore._capabilities": "leaf helpers",
    "layoutcore._devices": "leaf helpers",
    "layoutcore._crc": "leaf helpers",
    "layoutcore._mesh": "values",
    "layoutcore._layout": "values",
    "layoutcore._layout_map": "values",
    "layoutcore._patterns": "values",
    "layoutcore._dtypes": "values",
    "layoutcore._tensor_spec": "values",
    "layoutcore.geometry": "values",
    "layoutcore.propagation": "values",
    "layoutcore._paths": "planning",
    "layoutcore._plan": "planning",
    "layoutcore._relayout_plan": "planning",
    "layoutcore._relayout_schedule": "planning",
    "layoutcore.driver": "driver SPI",
    "layoutcore._api": "user API",
    "layoutcore._trees": "user API",
    "layoutcore._variable": "user API",
    "re:layoutcore": "user API",  # the package's __init__ only: what `import layoutcore` gives
    "layoutcore.numpy": "reference driver and integrations",
    "layoutcore.checkpoint": "reference driver and integrations",
    "layoutcore.transfer": "reference driver and integrations",
    "layoutcore.keras": "reference driver and integrations",
    "layoutcore.cli": "command line and framework drivers",
    "layoutcore_jax": "command line and framework drivers",
    "layoutcore_tensorflow": "command line and framework drivers",
    "layoutcore_torch": "command line and framework drivers",
    "layoutcore_conformance": "conformance",
    # A driver package's conformance adapter is the suite's side of the driver.
    r"re:layoutcore_\w+\._conformance": "conformance",
}

#: Third-party packages only some layers may import (anywhere in the module, deferred included).
# layoutcore.checkpoint._progress imports rich inside its TTY progress bar only (never at import).
ONLY_IN: dict[str, tuple[str, ...]] = {"rich": ("layoutcore.cli", "layoutcore.checkpoint._progress")}
#: Frameworks: never imported at module level by the core package (``import layoutcore`` stays framework-free).
FRAMEWORKS = ("jax", "jaxlib", "tensorflow", "torch", "keras", "tf_keras", "flax")


@dataclass(frozen=True, slots=True)
class Edge:
    """One import: ``source`` imports ``target`` (both dotted module names) at ``line``."""

    source: str
    target: str
    line: int
    module_level: bool


def module_files() -> dict[str, Path]:
    """Every module of the scanned packages: dotted name -> file (``pkg.__init__`` is ``pkg``)."""
    found: dict[str, Path] = {}
    for base, package in PACKAGES:
        for path in sorted((base / package).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if "__pycache__" in parts:
                continue
            found[".".join(parts)] = path
    return found


def layer_of(module: str) -> str | None:
    """The layer of ``module`` by :data:`TABLE` (``None`` for a module outside the scanned packages)."""
    for key, layer in TABLE.items():
        if key.startswith("re:") and re.fullmatch(key[3:], module):
            return layer
    best = max(
        (k for k in TABLE if not k.startswith("re:") and (module == k or module.startswith(k + "."))),
        key=len,
        default=None,
    )
    return None if best is None else TABLE[best]


def _is_package(module: str, modules: dict[str, Path]) -> bool:
    return modules[module].name == "__init__.py"


def imports_of(module: str, modules: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """``(target, line, module_level)`` for every import statement of ``module``, resolved to dotted names.

    ``from pkg import name`` targets ``pkg.name`` where that is a module, else ``pkg``. Imports inside
    functions, ``try`` blocks and ``if TYPE_CHECKING:`` bodies all count.
    """
    path = modules[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if _is_package(module, modules) else module.rpartition(".")[0]
    out: list[tuple[str, int, bool]] = []
    top_level = {id(node) for node in _module_level(tree.body)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno, id(node) in top_level) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub if sub in modules else base, node.lineno, id(node) in top_level))
    return out


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The import statements that run when the module is imported (TYPE_CHECKING bodies do not)."""
    found: list[ast.stmt] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                found.extend(_module_level(node.body))
            found.extend(_module_level(node.orelse))
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                found.extend(_module_level(block))
    return found


def import_graph() -> tuple[dict[str, Path], list[Edge], list[tuple[str, str, int, bool]]]:
    """The scanned modules, the edges between them, and every import of something outside them."""
    modules = module_files()
    edges: list[Edge] = []
    outside: list[tuple[str, str, int, bool]] = []
    for module in modules:
        for target, line, top in imports_of(module, modules):
            if target in modules:
                if target != module:
                    edges.append(Edge(module, target, line, top))
            else:
                outside.append((module, target, line, top))
    return modules, edges, outside


def layer_violations(edges: list[Edge]) -> list[str]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    problems = []
    for edge in edges:
        source, target = layer_of(edge.source), layer_of(edge.target)
        if source is None or target is None:
            continue
        if rank[target] > rank[source]:
            problems.append(f"{edge.source}:{edge.line} ({source}) imports {edge.target} ({target}), a higher layer")
    return problems


def find_cycle(edges: list[Edge]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``) among the edges, or ``None``."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def _without_package_edges(edges: list[Edge]) -> list[Edge]:
    # A subpackage's __init__ re-exports its modules, and a module of the subpackage that imports a
    # sibling through the package (``from . import _spmd``) resolves to the sibling already; an edge from
    # a module to its own subpackage's __init__ (never layoutcore's) is Python's import order, no cycle.
    return [e for e in edges if not (e.source.startswith(e.target + ".") and e.target != "layoutcore")]


# -- the tests ----------------------------------------------------------------------------------------
def test_every_module_has_a_layer() -> None:
    modules = module_files()
    assert "layoutcore.driver._frontend" in modules and "layoutcore.numpy._driver" in modules
    missing = sorted(m for m in modules if layer_of(m) is None)
    assert not missing, f"add these modules' package to TABLE: {missing}"


def test_imports_point_down_the_layers() -> None:
    _, edges, _ = import_graph()
    assert layer_violations(_without_package_edges(edges)) == []


def test_no_import_cycle_anywhere() -> None:
    _, edges, _ = import_graph()
    cycle = find_cycle(_without_package_edges(edges))
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_rich_only_in_the_command_line_and_no_framework_at_module_level_in_the_core() -> None:
    _, _, outside = import_graph()
    problems = []
    for module, target, line, top in outside:
        root = target.split(".")[0]
        if root in ONLY_IN and not any(module == p or module.startswith(p + ".") for p in ONLY_IN[root]):
            problems.append(f"{module}:{line} imports {target}")
        if module.split(".")[0] == "layoutcore" and root in FRAMEWORKS and top:
            problems.append(f"{module}:{line} imports {target} at module level")
    assert problems == []


def test_the_checker_sees_deferred_and_type_checking_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "layoutcore"
    (package / "driver").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import _mesh\n")
    (package / "_mesh.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .driver._frontend import Driver\n"  # upward, though never run
        "def f():\n    from ._plan import plan  # deferred: still an edge\n"
    )
    (package / "_plan.py").write_text("from ._mesh import Mesh\n")
    (package / "driver" / "__init__.py").write_text("")
    (package / "driver" / "_frontend.py").write_text("from .. import _mesh\nimport rich\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGES", ((tmp_path, "layoutcore"),))
    modules, edges, outside = import_graph()
    assert set(modules) == {
        "layoutcore",
        "layoutcore._mesh",
        "layoutcore._plan",
        "layoutcore.driver",
        "layoutcore.driver._frontend",
    }
    assert layer_violations(edges) == [
        "layoutcore._mesh:3 (values) imports layoutcore.driver._frontend (driver SPI), a higher layer",
        "layoutcore._mesh:5 (values) imports layoutcore._plan (planning), a higher layer",
    ]
    assert find_cycle(edges) == ["layoutcore._mesh", "layoutcore._plan", "layoutcore._mesh"]
    assert ("layoutcore.driver._frontend", "rich", 2, True) in outside


def test_a_new_module_gets_its_layer_from_its_package() -> None:
    assert layer_of("layoutcore.driver._new_helper") == "driver SPI"
    assert layer_of("layoutcore.checkpoint._foreign._dcp") == "reference driver and integrations"
    assert layer_of("layoutcore_torch._interchange") == "command line and framework drivers"
    assert layer_of("layoutcore_torch._conformance") == "conformance"
    assert layer_of("layoutcore") == "user API" and layer_of("layoutcore._mesh") == "values"


def import_time_plugs(modules: dict[str, Path]) -> list[str]:
    """Module-level assignments to an attribute of an imported module (``_api.FOREIGN = _foreign``):
    a dependency wired at import time, which the import graph does not see."""
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = set()
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                imported.update((a.asname or a.name).split(".")[0] for a in node.names)
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign | ast.AugAssign)
                else []
            )
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in imported:
                    found.append(f"{name}:{node.lineno} sets {t.value.id}.{t.attr}")
    return found


def test_no_import_time_plugs() -> None:
    assert import_time_plugs(module_files()) == []


def test_an_import_time_plug_is_found(tmp_path: Path) -> None:
    plug = tmp_path / "plug.py"
    plug.write_text("from . import _api, _foreign\n_api.FOREIGN = _foreign\n")
    assert import_time_plugs({"pkg.plug": plug}) == ["pkg.plug:2 sets _api.FOREIGN"]
