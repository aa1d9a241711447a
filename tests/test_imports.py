"""``import layoutcore`` imports no framework, and plug-ins import only layoutcore's public API.

Checked in fresh subprocesses (``sys.modules`` after the fact), since this process may
already hold a framework that another test imported.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import layoutcore

FRAMEWORKS = ("jax", "jaxlib", "tensorflow", "torch", "keras")
ROOT = Path(__file__).resolve().parent.parent
PLUGIN_PACKAGES = [
    *sorted(p for p in (ROOT / "drivers").glob("layoutcore_*") if (p / "__init__.py").exists()),
    ROOT / "conformance" / "layoutcore_conformance",
]


def _run(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it must print a JSON dict as its last line."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


FRAMEWORKS_LOADED = f"sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r})"


def test_import_layoutcore_imports_no_framework_and_resolves_no_driver() -> None:
    result = _run(
        "import json, sys\n"
        "import layoutcore\n"
        "from layoutcore.driver import _registry\n"
        f"print(json.dumps({{'frameworks': {FRAMEWORKS_LOADED}, 'discovered': _registry._factories is not None,"
        " 'instances': sorted(_registry._instances)}))"
    )
    assert result == {"frameworks": [], "discovered": False, "instances": []}


def test_numpy_driver_functions_import_no_framework() -> None:
    result = _run(
        "import json, sys\n"
        "import numpy as np\n"
        "import layoutcore as lc\n"
        "mesh = lc.Mesh((3, 2), ('x', 'y'))\n"
        "t = lc.distribute_tensor(np.arange(12).reshape(6, 2), lc.Layout(['x', None], mesh))\n"
        "t = lc.relayout(t, lc.Layout([None, 'y'], mesh))\n"
        "assert lc.to_numpy(t).sum() == 66\n"
        "v = lc.Variable(np.zeros(4), path='w')\n"
        f"print(json.dumps({{'frameworks': {FRAMEWORKS_LOADED}, 'driver': lc.get_driver().name}}))"
    )
    assert result == {"frameworks": [], "driver": "numpy"}


def test_listing_drivers_imports_no_framework() -> None:
    # `layoutcore drivers` and driver_infos() must list every driver without starting any framework.
    result = _run(
        "import contextlib, io, json, sys, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "import layoutcore\n"
        "from layoutcore.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    rc = main(['drivers'])\n"
        "infos = [i.name for i in layoutcore.driver.driver_infos()]\n"
        f"print(json.dumps({{'rc': rc, 'out': out.getvalue(), 'infos': infos, 'frameworks': {FRAMEWORKS_LOADED}}}))"
    )
    assert result["rc"] == 0 and result["frameworks"] == []
    for name in ("numpy", "jax", "tensorflow", "torch"):
        assert name in result["infos"] and name in result["out"]


def _module_level_imports(tree: ast.Module) -> list[tuple[int, str, tuple[str, ...]]]:
    """``(line, module, names)`` for imports that run at import time (not in functions or TYPE_CHECKING)."""
    found: list[tuple[int, str, tuple[str, ...]]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend((node.lineno, alias.name, ()) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                found.append((node.lineno, module, tuple(a.name for a in node.names)))
            elif isinstance(node, ast.If):
                test = ast.unparse(node.test)
                if "TYPE_CHECKING" not in test:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, (ast.ClassDef, ast.With)):
                visit(node.body)

    visit(tree.body)
    return found


def _violations(package: Path) -> list[str]:
    # layoutcore_conformance is the suite's public side (a driver's adapter subclasses ConformanceAdapter).
    allowed_top = set(sys.stdlib_module_names) | {"numpy", "layoutcore", "layoutcore_conformance", package.name}
    allowed_top |= {"pytest", "hypothesis"}  # the conformance suite is a pytest plug-in
    import importlib

    # The public modules a plug-in may import, each with its public names.
    public_modules = (
        "layoutcore",
        "layoutcore.geometry",
        "layoutcore.propagation",
        "layoutcore.driver",
        "layoutcore.numpy",
        "layoutcore.checkpoint",
    )
    public = {m: set(getattr(importlib.import_module(m), "__all__", ())) for m in public_modules}
    problems = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(ROOT)
        for line, module, names in _module_level_imports(tree):
            top = module.split(".")[0]
            if module.startswith("."):
                continue  # the package's own modules
            if top not in allowed_top:
                problems.append(f"{where}:{line} imports {module} at module level")
            elif top == "layoutcore_conformance" and any(part.startswith("_") for part in module.split(".")):
                problems.append(f"{where}:{line} imports private {module}")
            elif top == "layoutcore":
                if module not in public:
                    problems.append(f"{where}:{line} imports private {module}")
                private = [n for n in names if module in public and n not in public[module]]
                if private:
                    problems.append(f"{where}:{line} imports non-public layoutcore names {private}")
    return problems


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=[p.name for p in PLUGIN_PACKAGES])
def test_plugin_packages_import_only_public_api_at_module_level(package: Path) -> None:
    assert _violations(package) == []


def test_the_import_checker_catches_violations(tmp_path: Path) -> None:
    package = tmp_path / "layoutcore_fake"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import jax\n"
        "from layoutcore.driver._hooks import DriverHooks\n"
        "from layoutcore import _registry, Mesh\n"
        "if TYPE_CHECKING:\n"
        "    import torch\n"
        "def f():\n"
        "    import tensorflow\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        problems = _violations(package)
    finally:
        ROOT = saved
    assert len(problems) == 3
    assert "jax" in problems[0] and "layoutcore.driver._hooks" in problems[1] and "_registry" in problems[2]


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=[p.name for p in PLUGIN_PACKAGES])
def test_importing_a_plugin_package_imports_no_framework(package: Path) -> None:
    result = _run(
        f"import json, sys\nsys.path.insert(0, {str(package.parent)!r})\nimport {package.name}\n"
        f"print(json.dumps({{'frameworks': {FRAMEWORKS_LOADED}}}))"
    )
    assert result == {"frameworks": []}


# The layer table and the no-cycle rule over every module: tests/test_layers.py.


def test_moved_driver_author_names_warn_and_point_to_their_new_module() -> None:
    import importlib
    import warnings

    assert layoutcore._MOVED and not set(layoutcore._MOVED) & set(layoutcore.__all__)
    for name, where in layoutcore._MOVED.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            old = getattr(layoutcore, name)
        assert old is getattr(importlib.import_module(where), name), name
        assert [w.category for w in caught] == [DeprecationWarning], name
        assert f"{where}.{name}" in str(caught[0].message), name
    with pytest.raises(AttributeError):
        layoutcore.no_such_name  # noqa: B018


def test_the_top_level_exports_only_the_user_api() -> None:
    import importlib

    driver_side = set(importlib.import_module("layoutcore.driver").__all__) | {"NumpyDriver", "ShardedArray"}
    assert not driver_side & set(layoutcore.__all__)
    assert 45 <= len(layoutcore.__all__) <= 60
