"""The bad-input table: every invalid input of the contract, and the data-function misuses,
each with its exact layoutcore error type, the builtin a user would catch, and a message that
names the offending value."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import UNSHARDED as U

from ._oracle import values
from .adapter import ConformanceAdapter


@dataclass(frozen=True)
class Env:
    """What a bad-input case may use: the driver, its adapter and an abstract 3x2 mesh."""

    driver: lc.driver.Driver
    adapter: ConformanceAdapter
    mesh: lc.Mesh

    @property
    def layout(self) -> lc.Layout:
        return lc.Layout(["x", None], self.mesh)

    def pieces(self) -> list[Any]:
        x = values((6, 4), "float32")
        return [self.adapter.from_numpy(np.array(x[sl])) for sl in _slices()]

    def device(self, position: int) -> str:
        return self.driver.list_devices()[position]


def _slices() -> list[tuple[slice, ...]]:
    return lc.geometry.device_slices((6, 4), (3, 2), ((0,), ()))


@dataclass(frozen=True)
class Bad:
    """One row: ``call(env)`` raises exactly ``error`` (also a ``base``) naming each of ``names(env)``."""

    id: str
    call: Callable[[Env], Any]
    error: type[lc.LayoutcoreError]
    base: type[Exception]
    names: Callable[[Env], list[str]]


def _bad(value: Any) -> Any:
    """A deliberately ill-typed argument (erases its type for the type checker)."""
    return value


def _lm() -> lc.LayoutMap:
    lm = lc.LayoutMap(lc.Mesh((2,), ("model",)))
    lm["dense.*"] = (None, "model")
    lm[".*kernel"] = ("model", None)
    return lm


def _replace(pieces: list[Any], index: int, piece: Any) -> list[Any]:
    return [piece if i == index else p for i, p in enumerate(pieces)]


def _variable(env: Env) -> lc.Variable:
    return lc.Variable(values((6, 4), "float32"), env.layout)


def _const(*names: str) -> Callable[[Env], list[str]]:
    return lambda env: list(names)


def _mesh_with_axis(name: str) -> Callable[[Env], Any]:
    return lambda env: lc.Mesh((2,), (name,))


def _type_name_of_plain(kind: str) -> Callable[[Env], list[str]]:
    return lambda env: [type(_plain(env, kind)).__name__]


def _not_distributed(name: str, kind: str) -> Callable[[Env], Any]:
    def call(env: Env) -> Any:
        value = _plain(env, kind)
        return lc.relayout(value, env.layout) if name == "relayout" else getattr(lc, name)(value)

    return call


def _plain(env: Env, kind: str) -> Any:
    x = values((6, 4), "float32")
    return x if kind == "numpy" else env.adapter.from_numpy(x)


def _missing_device(env: Env) -> str:
    return f"CPU:{len(env.driver.list_devices('CPU'))}"


def _missing_device_mesh(env: Env) -> lc.Mesh:
    return lc.Mesh((2,), ("x",), devices=["CPU:0", _missing_device(env)])


M32 = lc.Mesh((3, 2), ("x", "y"))

TABLE = [
    # -- Mesh (contract §1 "Invalid") ---------------------------------------------------------------
    Bad("mesh-empty-shape", lambda e: lc.Mesh((), ()), lc.LayoutError, ValueError, _const("()")),
    Bad("mesh-zero-size", lambda e: lc.Mesh((3, 0), ("x", "y")), lc.LayoutError, ValueError, _const("(3, 0)")),
    Bad("mesh-negative-size", lambda e: lc.Mesh((-2,), ("x",)), lc.LayoutError, ValueError, _const("-2")),
    Bad("mesh-float-size", lambda e: lc.Mesh(_bad((2.5,)), ("x",)), lc.LayoutError, ValueError, _const("2.5")),
    Bad("mesh-names-vs-shape", lambda e: lc.Mesh((3, 2), ("x",)), lc.LayoutError, ValueError, _const("('x',)")),
    Bad("mesh-duplicate-names", lambda e: lc.Mesh((3, 2), ("dup", "dup")), lc.LayoutError, ValueError, _const("'dup'")),
    Bad(
        "create_mesh-duplicate-names",
        lambda e: lc.create_mesh([("x", 3), ("x", 2)]),
        lc.LayoutError,
        ValueError,
        _const("'x'"),
    ),
    Bad("mesh-empty-name", lambda e: lc.Mesh((2,), ("",)), lc.LayoutError, ValueError, _const("''")),
    *[
        Bad(f"mesh-name-{label}", _mesh_with_axis(name), lc.LayoutError, ValueError, _const(repr(name)))
        for label, name in [
            ("comma", "a,b"),
            ("pipe", "a|b"),
            ("equals", "a=b"),
            ("space", "a b"),
            ("tab", "a\tb"),
            ("unsharded", "unsharded"),
            ("match", "match"),
        ]
    ],
    Bad(
        "mesh-device-count",
        lambda e: lc.Mesh((3, 2), ("x", "y"), devices=["CPU:0", "CPU:1"]),
        lc.LayoutError,
        ValueError,
        _const("6", "CPU:1"),
    ),
    Bad(
        "mesh-duplicate-devices",
        lambda e: lc.Mesh((2,), ("x",), devices=["CPU:0", "cpu:0"]),
        lc.LayoutError,
        ValueError,
        _const("CPU:0"),
    ),
    Bad(
        "mesh-bad-device",
        lambda e: lc.Mesh((1,), ("x",), devices=["GPU-zero"]),
        lc.LayoutError,
        ValueError,
        _const("'GPU-zero'"),
    ),
    Bad("create_mesh-not-pairs", lambda e: lc.create_mesh(_bad(["x"])), lc.LayoutError, ValueError, _const("['x']")),
    Bad(
        "mesh-from_string",
        lambda e: lc.Mesh.from_string("|x=3,y=2|"),
        lc.LayoutError,
        ValueError,
        _const("'|x=3,y=2|'"),
    ),
    # -- Layout -------------------------------------------------------------------------------------
    Bad("layout-unknown-axis", lambda e: lc.Layout(["z", U], M32), lc.LayoutError, ValueError, _const("'z'")),
    Bad("layout-axis-on-two-dims", lambda e: lc.Layout(["x", "x"], M32), lc.LayoutError, ValueError, _const("'x'")),
    Bad(
        "layout-axis-twice-in-tuple", lambda e: lc.Layout([("x", "x")], M32), lc.LayoutError, ValueError, _const("'x'")
    ),
    Bad(
        "layout-axis-in-tuple-and-dim",
        lambda e: lc.Layout([("x", "y"), "y"], M32),
        lc.LayoutError,
        ValueError,
        _const("'y'"),
    ),
    Bad("layout-bad-entry", lambda e: lc.Layout([3, None], M32), lc.LayoutError, ValueError, _const("3")),
    Bad("layout-string-axes", lambda e: lc.Layout("xy", M32), lc.LayoutError, ValueError, _const("'xy'")),
    Bad("layout-mesh-not-a-mesh", lambda e: lc.Layout(["x"], _bad("x=3")), lc.LayoutError, ValueError, _const("'x=3'")),
    Bad(
        "layout-from_string-no-space",
        lambda e: lc.Layout.from_string("sharding_specs:x,unsharded,mesh:|x=3|0,1,2|0,1,2|CPU:0,CPU:1,CPU:2"),
        lc.LayoutError,
        ValueError,
        _const("sharding_specs:x,unsharded,mesh:"),
    ),
    Bad(
        "distribute-wrong-rank",
        lambda e: lc.distribute_tensor(values((6, 4), "float32"), lc.Layout(["x"], e.mesh)),
        lc.LayoutError,
        ValueError,
        _const("(6, 4)"),
    ),
    Bad(
        "distribute-wrong-rank-framework-input",
        lambda e: lc.distribute_tensor(e.adapter.from_numpy(values((6,), "float32")), lc.Layout(["x", None], e.mesh)),
        lc.LayoutError,
        ValueError,
        _const("(6,)"),
    ),
    Bad(
        "distribute-layout-without-mesh",
        lambda e: lc.distribute_tensor(values((6,), "float32"), lc.Layout(["x"])),
        lc.LayoutError,
        ValueError,
        lambda e: [repr(lc.Layout(["x"]))],
    ),
    Bad(
        "distribute-not-a-layout",
        lambda e: lc.distribute_tensor(values((6,), "float32"), _bad(("x",))),
        lc.LayoutError,
        ValueError,
        _const("('x',)"),
    ),
    # -- LayoutMap ----------------------------------------------------------------------------------
    Bad(
        "layoutmap-bad-regex",
        lambda e: lc.LayoutMap().__setitem__("dense[", ("x",)),
        lc.LayoutError,
        ValueError,
        _const("'dense['"),
    ),
    Bad(
        "layoutmap-reinsert",
        lambda e: _lm().__setitem__("dense.*", ("model",)),
        lc.LayoutError,
        ValueError,
        _const("'dense.*'"),
    ),
    Bad(
        "layoutmap-ambiguous",
        lambda e: _lm()["dense/kernel"],
        lc.AmbiguousLayoutError,
        ValueError,
        _const("'dense/kernel'", "'dense.*'", "'.*kernel'"),
    ),
    Bad(
        "layoutmap-bad-value",
        lambda e: lc.LayoutMap().__setitem__("a", _bad(3)),
        lc.LayoutError,
        ValueError,
        _const("3"),
    ),
    Bad(
        "layoutmap-bad-match",
        lambda e: lc.LayoutMap(match=_bad("regex")),
        lc.LayoutError,
        ValueError,
        _const("'regex'"),
    ),
    Bad(
        "layoutmap-bad-on_multiple",
        lambda e: lc.LayoutMap(on_multiple=_bad("last")),
        lc.LayoutError,
        ValueError,
        _const("'last'"),
    ),
    # -- pack -------------------------------------------------------------------------------------
    Bad("pack-too-few", lambda e: lc.pack(e.pieces()[:5], e.layout), lc.LayoutError, ValueError, _const("6", "5")),
    Bad(
        "pack-too-many",
        lambda e: lc.pack([*e.pieces(), e.pieces()[0]], e.layout),
        lc.LayoutError,
        ValueError,
        _const("6", "7"),
    ),
    Bad(
        "pack-wrong-shape",
        lambda e: lc.pack(
            _replace(e.pieces(), 4, e.adapter.from_numpy(np.zeros((3, 4), np.float32))), e.layout, global_shape=(6, 4)
        ),
        lc.LayoutError,
        ValueError,
        lambda e: [e.device(4), "(3, 4)", "(2, 4)"],
    ),
    Bad(
        "pack-wrong-rank",
        lambda e: lc.pack(_replace(e.pieces(), 2, e.adapter.from_numpy(np.zeros((8,), np.float32))), e.layout),
        lc.LayoutError,
        ValueError,
        lambda e: [e.device(2), "(8,)"],
    ),
    Bad(
        "pack-mixed-dtypes",
        lambda e: lc.pack(_replace(e.pieces(), 1, e.adapter.from_numpy(np.zeros((2, 4), np.int32))), e.layout),
        lc.LayoutError,
        ValueError,
        _const("float32", "int32"),
    ),
    Bad(
        "pack-differing-replicas",
        # Devices 2 and 3 share block 1 of Layout(["x", None]) on the 3x2 mesh; device 3's copy differs.
        lambda e: lc.pack(_replace(e.pieces(), 3, e.adapter.from_numpy(np.full((2, 4), -1, np.float32))), e.layout),
        lc.LayoutError,
        ValueError,
        lambda e: [e.device(3)],
    ),
    # -- not distributed ------------------------------------------------------------------------------
    *[
        Bad(
            f"{name}-of-{kind}",
            _not_distributed(name, kind),
            lc.NotDistributedError,
            TypeError,
            _type_name_of_plain(kind),
        )
        for name in ("unpack", "to_numpy", "fetch_layout")  # relayout: docs/design.md#data-functions-made-precise
        for kind in ("numpy", "framework")
    ],
    # -- devices, copy_to_mesh, call_with_layout, Variable ---------------------------------------------------
    Bad(
        "mesh-device-the-driver-lacks",
        lambda e: lc.distribute_tensor(values((2,), "float32"), lc.Layout(["x"], _missing_device_mesh(e))),
        lc.LayoutError,
        ValueError,
        lambda e: [_missing_device(e), lc.driver.CPU_DEVICES_ENV],
    ),
    Bad(
        "copy_to_mesh-sharded",
        lambda e: lc.copy_to_mesh(values((6, 4), "float32"), e.layout),
        lc.LayoutError,
        ValueError,
        lambda e: [str(e.layout)],
    ),
    Bad(
        "call_with_layout-not-callable",
        lambda e: lc.call_with_layout(_bad("ones"), e.layout, (6, 4)),
        lc.LayoutError,
        ValueError,
        _const("'ones'"),
    ),
    Bad(
        "Variable-assign-other-layout",
        lambda e: _variable(e).assign(lc.distribute_tensor(values((6, 4), "float32"), lc.Layout([None, "y"], e.mesh))),
        lc.LayoutMismatchError,
        ValueError,
        lambda e: [repr(lc.Layout([None, "y"], e.mesh))],
    ),
    Bad(
        "Variable-assign-other-shape",
        lambda e: _variable(e).assign(values((6, 5), "float32")),
        lc.LayoutError,
        ValueError,
        _const("(6, 5)", "(6, 4)"),
    ),
    Bad(
        "driver-unknown",
        lambda e: lc.get_driver("no-such-driver"),
        lc.DriverNotFoundError,
        LookupError,
        lambda e: ["'no-such-driver'", repr(e.driver.name)],
    ),
]


@pytest.fixture(scope="module")
def env(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> Env:
    return Env(driver, adapter, lc.Mesh((3, 2), ("x", "y")))


@pytest.mark.parametrize("bad", TABLE, ids=[b.id for b in TABLE])
def test_bad_input(env: Env, bad: Bad) -> None:
    with pytest.raises(Exception) as info:
        bad.call(env)
    err = info.value
    assert type(err) is bad.error, f"{bad.id}: raised {type(err).__module__}.{type(err).__qualname__}: {err}"
    assert isinstance(err, bad.base), f"{bad.id}: {type(err).__qualname__} is not a {bad.base.__name__}"
    message = str(err)
    for name in bad.names(env):
        assert name in message, f"{bad.id}: the message does not name {name!r}: {message}"


def test_ambiguous_error_attributes() -> None:
    with pytest.raises(lc.AmbiguousLayoutError) as info:
        _lm()["dense/kernel"]
    assert info.value.path == "dense/kernel"
    assert info.value.patterns == ("dense.*", ".*kernel")


def test_mismatch_error_attributes(env: Env) -> None:
    variable = _variable(env)
    other = lc.distribute_tensor(values((6, 4), "float32"), lc.Layout([None, "y"], env.mesh))
    with pytest.raises(lc.LayoutMismatchError) as info:
        variable.assign(other)
    assert info.value.expected == env.layout
    assert info.value.actual == lc.Layout([None, "y"], env.mesh)
