"""Every public layoutcore error pickles to the same type, message and attributes, in this process
and across a process pool (torch DCP, multiprocessing and concurrent.futures pickle errors).

The errors are found by walking ``LayoutcoreError.__subclasses__()`` after importing the core, the
checkpoint package and every importable driver package, so a new subclass is covered without
listing it here. Each is built from its constructor's signature: every keyword argument gets a
distinctive value (a parameter name this test has not seen gets a string), so an attribute that is
dropped or swapped on the way back fails the comparison.
"""

from __future__ import annotations

import concurrent.futures
import copy
import importlib
import inspect
import multiprocessing
import pickle
from pathlib import Path
from typing import Any

import pytest

import layoutcore as lc
import layoutcore.checkpoint
from layoutcore.driver import Capability, Limitation

#: Packages that may define public errors, imported before the walk where they import (layoutcore.transfer
#: once it exists; the driver packages import their framework lazily, so they import without it).
_DRIVER_PACKAGES = ("layoutcore.transfer", "layoutcore_jax", "layoutcore_tensorflow", "layoutcore_torch")

#: A value for each keyword parameter name the public errors take; the walk falls back to a string.
_REPRESENTATIVE: dict[str, Any] = {
    "value": (3, 0),
    "path": "/ckpt/run-7",
    "file": "/ckpt/run-7/shards/w.bin",
    "tensor": "params/dense/kernel",
    "patterns": ("dense/*", "*/kernel"),
    "expected": lc.Layout(("x", None), lc.Mesh((2, 2), ("x", "y"))),
    "actual": lc.Layout((None, "y"), lc.Mesh((2, 2), ("x", "y"))),
    "driver": "jax",
    "feature": Limitation.DTYPE,
    "name": "no-such-driver",
    "installed": ("numpy", "torch"),
    "install": "pip install 'layoutcore[jax]'",
    "paths": ("a/b", "c/d"),
    "near_misses": (("a/*",), ()),
}


def _import_drivers() -> list[str]:
    imported = []
    for name in _DRIVER_PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            # a core module that is not there (yet) is skipped, one that fails to import is an error; a driver
            # package may fail to import where its framework cannot
            if name.startswith("layoutcore.") and exc.name != name:
                raise
            continue
        imported.append(name)
    return imported


def _all_subclasses(cls: type) -> list[type]:
    found: list[type] = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(c for c in _all_subclasses(sub) if c not in found)
    return found


def _public_errors() -> list[type[BaseException]]:
    _import_drivers()
    errors = [lc.LayoutcoreError, *_all_subclasses(lc.LayoutcoreError), lc.UnmatchedPathWarning]
    return [e for e in errors if e.__module__.split(".")[0].startswith("layoutcore")]


def _build(cls: type[BaseException]) -> BaseException:
    """``cls`` with a message and every keyword parameter of its constructor set."""
    kwargs = {}
    for param in inspect.signature(cls.__init__).parameters.values():
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[param.name] = _REPRESENTATIVE.get(param.name, f"<{param.name} of {cls.__name__}>")
    return cls(f"{cls.__name__} went wrong: Received: 42", **kwargs)


def _assert_same(before: BaseException, after: BaseException) -> None:
    assert type(after) is type(before)
    assert str(after) == str(before) and after.args == before.args
    assert vars(after) == vars(before)
    assert vars(after)  # every public error carries at least .value (or .paths)


def test_the_walk_finds_the_errors() -> None:
    """The walk sees the core's errors, ConfigurationError and the importable drivers' errors."""
    names = {e.__name__ for e in _public_errors()}
    core = {"CheckpointError", "LayoutMismatchError", "UnsupportedLayoutError", "DriverNotFoundError"}
    assert core | {"ConfigurationError", "UnmatchedPathWarning"} <= names
    drivers = _import_drivers()
    if "layoutcore_jax" in drivers:
        assert "DistributedInitError" in names
    if "layoutcore_tensorflow" in drivers:
        assert {"MeshLimitError", "MultiClientInitError"} <= names


@pytest.mark.parametrize("cls", _public_errors(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_every_error_pickles(cls: type[BaseException], protocol: int) -> None:
    error = _build(cls)
    _assert_same(error, pickle.loads(pickle.dumps(error, protocol=protocol)))


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
def test_every_error_copies(duplicate: Any) -> None:
    """copy.copy and copy.deepcopy go through the same reduction as pickle."""
    for cls in _public_errors():
        error = _build(cls)
        _assert_same(error, duplicate(error))


def test_defaulted_keywords_and_capability_features_pickle() -> None:
    """A keyword left at its default and a Capability feature come back as they were."""
    for error in (
        lc.CheckpointError("no checkpoint", path=Path("/ckpt")),
        lc.UnsupportedLayoutError("uneven", driver="tensorflow", feature="uneven", value=7),
        lc.LayoutError("plain"),
    ):
        after = pickle.loads(pickle.dumps(error))
        _assert_same(error, after)
    assert after.value is None
    uneven = pickle.loads(pickle.dumps(lc.UnsupportedLayoutError("u", driver="t", feature="uneven")))
    assert uneven.feature is Capability.UNEVEN


def test_unpicklable_attribute_degrades_to_text() -> None:
    """An attribute that cannot pickle (a lock) arrives as text; the type and message survive."""
    import threading

    error = lc.LayoutError("cannot use it. Received: a lock", value=threading.Lock())
    after = pickle.loads(pickle.dumps(error))
    assert type(after) is lc.LayoutError and str(after) == str(error)
    assert isinstance(after.value, str) and "lock" in after.value


def test_errors_cross_a_process_pool(tmp_path: Path) -> None:
    """Errors raised by layoutcore's own code in a worker process arrive as the same type with their
    attributes (concurrent.futures pickles the exception in the worker, unpickles it here)."""
    missing = str(tmp_path / "no-checkpoint")
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing inherited
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        load = pool.submit(layoutcore.checkpoint.load, missing)
        driver = pool.submit(lc.get_driver, "no-such-driver")
        with pytest.raises(lc.CheckpointError) as checkpoint_error:
            load.result(timeout=300)
        with pytest.raises(lc.DriverNotFoundError) as driver_error:
            driver.result(timeout=300)
    assert checkpoint_error.value.path == missing and checkpoint_error.value.file is None
    assert missing in str(checkpoint_error.value)
    assert driver_error.value.name == "no-such-driver" and "numpy" in driver_error.value.installed


def test_the_errors_page_names_every_public_error() -> None:
    """docs/errors.md lists every error the walk finds (a new subclass needs its row) and the warnings."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text(encoding="utf-8")
    named = [*_public_errors(), layoutcore.checkpoint.SlowChecksumWarning]
    missing = [cls.__name__ for cls in named if f"`{cls.__name__}`" not in page and f".{cls.__name__}`" not in page]
    assert not missing, f"docs/errors.md does not name {missing}: add each to the tree and the table"
