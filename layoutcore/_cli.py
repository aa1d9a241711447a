"""The ``layoutcore`` command: ``tour``, ``show``, ``drivers`` and ``conformance``.

``rich`` (for the pictures and tables) and the conformance runner are imported inside the
commands, so importing this module, like ``import layoutcore``, loads neither.

Exit status: 0 on success, 1 when the tour finds a driver giving wrong data, 2 for bad
arguments (a one-line ``layoutcore <command>: error: ...`` on stderr, no traceback); the
``conformance`` command returns pytest's status.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

import layoutcore as lc

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["UsageError", "main", "parse_layout", "parse_mesh", "parse_shape"]

#: Spellings of a replicated tensor axis in ``--layout`` (compared case-insensitively).
REPLICATED_TOKENS = frozenset({"none", "unsharded", "-"})

#: Where the tour finds each first-party framework's ``ones``/``zeros`` (imported only when
#: that driver is the one running, so the framework is already loaded); NumPy otherwise.
_FRAMEWORK_MODULES = {"jax": "jax.numpy", "tensorflow": "tensorflow", "torch": "torch"}

#: The tour's device count, as in the TF DTensor guide (``DEVICES = ['CPU:0', ..., 'CPU:5']``).
TOUR_DEVICES = 6


class UsageError(Exception):
    """A bad command-line value; ``main`` prints it on one line and exits with status 2."""


# ==============================================================================================
# Argument parsing (pure; used by ``show`` and tested directly)
# ==============================================================================================
def parse_mesh(text: str, devices: str | None = None) -> lc.Mesh:
    """``"x=3,y=2"`` (or a TF DTensor mesh string, recognised by its ``|``) as a :class:`Mesh`.

    Args:
        text: comma-separated ``name=size`` pairs, major to minor.
        devices: optional comma-separated device names, one per mesh position, row-major.

    Raises:
        UsageError: a malformed pair, a non-integer size, or any invalid mesh (naming it).
    """
    try:
        if "|" in text:
            mesh = lc.Mesh.from_string(text)
        else:
            pairs: list[tuple[str, int]] = []
            for part in text.split(","):
                name, eq, size = part.partition("=")
                if not eq or not size.strip().isdigit():
                    raise UsageError(f"--mesh {text!r}: {part.strip()!r} is not 'name=size' (e.g. --mesh x=3,y=2)")
                pairs.append((name.strip(), int(size)))
            mesh = lc.create_mesh(pairs)
    except lc.LayoutcoreError as exc:
        raise UsageError(f"--mesh {text!r}: {exc}") from None
    if devices is None:
        return mesh
    try:
        return mesh.with_devices([d.strip() for d in devices.split(",")])
    except lc.LayoutcoreError as exc:
        raise UsageError(f"--devices {devices!r}: {exc}") from None


def parse_layout(text: str) -> list[lc.AxisSpec]:
    """``--layout`` text as one layout entry per tensor axis.

    Entries are comma-separated. ``none``, ``None``, ``unsharded`` or ``-`` is a replicated
    axis; a mesh axis name shards it; several mesh axes on one tensor axis are written
    ``x+y`` or ``(x,y)`` (major to minor, like ``PartitionSpec(("x", "y"))``). The empty
    string is a rank-0 layout.

    Raises:
        UsageError: an empty entry, unbalanced parentheses, or an empty group.
    """
    entries: list[str] = []
    depth, current = 0, ""
    for char in text:
        if char == "(":
            depth += 1
            if depth > 1:
                raise UsageError(f"--layout {text!r}: nested parentheses")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise UsageError(f"--layout {text!r}: ')' without '('")
        if char == "," and depth == 0:
            entries.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise UsageError(f"--layout {text!r}: '(' without ')'")
    entries.append(current)
    if len(entries) == 1 and not entries[0].strip():
        return []
    axes: list[lc.AxisSpec] = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            raise UsageError(f"--layout {text!r}: empty entry; write 'none' for a replicated tensor axis")
        if entry.lower() in REPLICATED_TOKENS:
            axes.append(None)
            continue
        grouped = entry.startswith("(") and entry.endswith(")")
        names = [n.strip() for n in (entry[1:-1].split(",") if grouped else entry.split("+"))]
        if not all(names) or any(n.lower() in REPLICATED_TOKENS for n in names):
            raise UsageError(f"--layout {text!r}: {entry!r} must list mesh axis names, e.g. x+y or (x,y)")
        axes.append(names[0] if len(names) == 1 else tuple(names))
    return axes


def parse_shape(text: str) -> tuple[int, ...]:
    """``"6,4"`` as ``(6, 4)``; the empty string is a scalar's shape ``()``.

    Raises:
        UsageError: an entry that is not a non-negative integer.
    """
    if not text.strip():
        return ()
    shape = []
    for part in text.split(","):
        if not part.strip().isdigit():
            raise UsageError(f"--shape {text!r}: {part.strip()!r} is not a non-negative integer (e.g. --shape 6,4)")
        shape.append(int(part))
    return tuple(shape)


# ==============================================================================================
# Commands
# ==============================================================================================
def _console() -> Console:
    from rich.console import Console

    # markup off: layouts print as "Layout[x, unsharded]", which rich would take for a tag.
    return Console(highlight=False, markup=False, emoji=False)


def _cmd_show(args: argparse.Namespace, extra: list[str]) -> int:
    from ._render import device_table, layout_summary, render_layout

    if args.layout.strip().startswith("sharding_specs:"):
        if args.mesh is not None:
            raise UsageError("--mesh: a TF layout string already names its mesh; drop --mesh")
        try:
            layout = lc.Layout.from_string(args.layout.strip())
        except lc.LayoutcoreError as exc:
            raise UsageError(f"--layout {args.layout!r}: {exc}") from None
        if args.devices is not None:
            layout = layout.with_mesh(parse_mesh(layout.mesh.to_string(), args.devices))  # type: ignore[union-attr]
    else:
        if args.mesh is None:
            raise UsageError("--mesh is required (e.g. --mesh x=3,y=2) unless --layout is a TF layout string")
        mesh = parse_mesh(args.mesh, args.devices)
        try:
            layout = lc.Layout(parse_layout(args.layout), mesh)
        except lc.LayoutcoreError as exc:
            raise UsageError(f"--layout {args.layout!r}: {exc}") from None
    shape = parse_shape(args.shape)
    if len(shape) != layout.rank:
        raise UsageError(
            f"--shape {args.shape!r}: rank {len(shape)}, but --layout {args.layout!r} has {layout.rank} "
            "entries (one per tensor axis)"
        )
    console = _console()
    console.print(layout_summary(layout, shape), soft_wrap=True)
    console.print(render_layout(layout, shape, width=console.width))
    if args.per_device:
        console.print(device_table(layout, shape))
    return 0


def _cmd_drivers(args: argparse.Namespace, extra: list[str]) -> int:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title="layoutcore drivers")
    table.add_column("driver", no_wrap=True)
    table.add_column("status", no_wrap=True)
    # Wide enough for the longest capability name, so that names wrap between, never inside.
    table.add_column("capabilities", min_width=max(len(str(c)) for c in lc.Capability))
    table.add_column("install", min_width=len("'layoutcore[tensorflow]'"), overflow="fold")
    active = lc.active_driver_name()
    # A registered plug-in that fails to import is warned about by driver_infos; list it here instead.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        infos = lc.driver_infos()
    for info in infos:
        name = info.name + (" *" if info.name == active else "")
        status = "installed" if info.installed else "not installed"
        capabilities = "\n".join(sorted(str(c) for c in info.capabilities)) or "-"
        if not info.installed and not info.capabilities:
            capabilities = "(known once installed)"
        table.add_row(name, status, capabilities, info.install_hint if not info.installed else "")
    console = _console()
    console.print(table)
    for warning in caught:
        console.print(f"warning: {warning.message}", soft_wrap=True)
    console.print(
        f"* active driver: {active!r} (chosen by driver=, use_driver, set_driver, ${lc.DRIVER_ENV}, else 'numpy'). "
        "Every driver supports even layouts with one mesh axis per tensor axis; the capabilities are what it "
        "supports beyond that.",
        soft_wrap=True,
    )
    return 0


def _cmd_conformance(args: argparse.Namespace, extra: list[str]) -> int:
    _check_driver_name(args.driver)  # a bad name is one line here, not one error per collected test
    try:
        runner = importlib.import_module("layoutcore_conformance._runner")
    except ImportError as exc:
        raise UsageError(
            f"cannot load the conformance runner ({exc}); install layoutcore with its test extra: "
            "pip install 'layoutcore[test]'"
        ) from None
    pytest_args = extra[1:] if extra[:1] == ["--"] else extra
    return int(runner.run(list(pytest_args), driver=args.driver))


def _load_driver(name: str) -> lc.Driver:
    try:
        return lc.get_driver(name)
    except (lc.DriverNotFoundError, lc.DriverUnavailableError, lc.ConfigurationError) as exc:
        raise UsageError(f"--driver {name!r}: {exc}") from None


def _check_driver_name(name: str | None) -> None:
    """Refuse an unknown or uninstalled driver without creating it: the conformance suite
    configures the framework (device count) itself, before the driver's first use."""
    name = name or lc.active_driver_name()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a broken plug-in is reported by its own info below
        infos = {info.name: info for info in lc.driver_infos()}
    if name not in infos:
        raise UsageError(f"--driver {name!r}: no such driver; installed drivers: {sorted(infos)}")
    if not infos[name].installed:
        raise UsageError(f"--driver {name!r}: {infos[name].problem or 'not installed'} ({infos[name].install_hint})")


def _cmd_tour(args: argparse.Namespace, extra: list[str]) -> int:
    # Before the driver is first created, so that every framework starts with the guide's 6 devices.
    os.environ.setdefault(lc.CPU_DEVICES_ENV, str(TOUR_DEVICES))
    name = args.driver or lc.active_driver_name()
    driver = _load_driver(name)
    available = driver.list_devices()
    if len(available) < TOUR_DEVICES:
        raise UsageError(
            f"the tour needs {TOUR_DEVICES} devices but the {driver.name!r} driver has {len(available)} "
            f"({available}); set {lc.CPU_DEVICES_ENV}={TOUR_DEVICES} before the framework starts"
        )
    with lc.use_driver(name):  # the registered name, which a plug-in's class may spell differently
        return _Tour(_console(), driver, available).run()


class _Tour:
    """The TF DTensor guide (tensorflow.org/guide/dtensor_overview), step by step, on any driver.

    Every distributed value shown is also checked against the NumPy shard math (each device's
    component equals its oracle slice), so the tour doubles as a smoke test of the driver.
    """

    def __init__(self, console: Console, driver: lc.Driver, available: list[str]) -> None:
        self.console = console
        self.driver = driver
        self.available = available
        self.devices = available[:TOUR_DEVICES]
        self.passed = 0
        self.failed: list[str] = []
        module = importlib.import_module(_FRAMEWORK_MODULES.get(driver.name, "numpy"))
        self.ones: Callable[..., Any] = getattr(module, "ones", np.ones)
        self.zeros: Callable[..., Any] = getattr(module, "zeros", np.zeros)
        self.ones_name = f"{module.__name__}.ones"
        self.zeros_name = f"{module.__name__}.zeros"
        self.mesh_1d = lc.create_mesh([("x", 6)], devices=self.devices)
        self.mesh_2d = lc.create_mesh([("x", 3), ("y", 2)], devices=self.devices)
        # The guide's 3x2 example value, and a helper building it under any layout as the guide does.
        self.value = np.arange(6).reshape(3, 2)

    # -- output helpers ----------------------------------------------------------------------
    def section(self, title: str) -> None:
        self.console.print()
        self.console.rule(title)

    def say(self, text: str) -> None:
        self.console.print(text, soft_wrap=True)

    def code(self, text: str) -> None:
        from rich.syntax import Syntax

        self.console.print(Syntax(text, "python", theme="ansi_dark", background_color="default", word_wrap=True))

    def check(self, what: str, ok: bool) -> None:
        if ok:
            self.passed += 1
            self.say(f"  ok: {what}")
        else:
            self.failed.append(what)
            self.say(f"  FAILED: {what}")

    def component(self, component: Any) -> np.ndarray:
        # The driver's own conversion: torch components may be LocalTensors, TF ones EagerTensors.
        return np.asarray(self.driver.component_to_numpy(component))

    def components_table(self, value: np.ndarray, tensors: dict[str, Any]) -> None:
        """One row per device: its mesh coordinate and its component under each layout shown;
        checks every component against the oracle slice of ``value``."""
        from rich import box
        from rich.table import Table

        mesh = lc.fetch_layout(next(iter(tensors.values()))).mesh
        assert mesh is not None
        table = Table("device", "(" + ", ".join(mesh.axis_names) + ")", box=box.SIMPLE_HEAD)
        for title in tensors:
            table.add_column(title, overflow="fold")
        columns: list[list[str]] = []
        for title, tensor in tensors.items():
            layout = lc.fetch_layout(tensor)
            got = [self.component(c) for c in lc.unpack(tensor)]
            oracle = [value[s] for s in layout.device_slices(value.shape)]
            self.check(
                f"{title.replace(chr(10), ' ')}: every device holds its slice of the global value",
                len(got) == len(oracle) and all(np.array_equal(g, o) for g, o in zip(got, oracle, strict=False)),
            )
            columns.append([str(g.tolist()) for g in got])
        for position, device in enumerate(self.devices[: mesh.size]):
            coordinate = lc.geometry.mesh_coordinate(mesh.shape, position)
            where = "(" + ", ".join(str(c) for c in coordinate) + ")"
            table.add_row(device, where, *(column[position] for column in columns))
        self.console.print(table)

    # -- the guide -----------------------------------------------------------------------------
    def run(self) -> int:
        drv = self.driver
        self.say(
            f"layoutcore {lc.__version__} tour of the TF DTensor guide's concepts on the {drv.name!r} driver "
            f"({type(drv).__module__}.{type(drv).__qualname__})."
        )
        self.say(
            f"Devices: {self.devices} ({len(self.available)} available; {lc.CPU_DEVICES_ENV}="
            f"{os.environ.get(lc.CPU_DEVICES_ENV)}). Pick another driver with --driver NAME or ${lc.DRIVER_ENV}."
        )
        steps = (
            self.meshes,
            self.layouts,
            self.replicated_1d,
            self.layouts_2d,
            self.pack,
            self.relayout,
            self.call_with_layout,
            self.variable,
            self.layout_map,
        )
        for step in steps:
            # A driver that raises where it should not is a failed check, and the other steps still run.
            try:
                step()
            except Exception as exc:
                self.check(f"{step.__name__} raised {type(exc).__name__}: {exc}", False)
        self.section("Summary")
        if self.failed:
            self.say(
                f"{len(self.failed)} of {self.passed + len(self.failed)} checks FAILED on the {drv.name!r} driver:"
            )
            for what in self.failed:
                self.say(f"  - {what}")
            return 1
        self.say(f"All {self.passed} checks passed on the {drv.name!r} driver.")
        self.say("Next: `layoutcore show --help` to draw any layout; `layoutcore drivers`; the README and docs/.")
        return 0

    def dtensor_from_array(self, arr: np.ndarray, layout: lc.Layout) -> Any:
        """The guide's helper: copy to the mesh replicated, then relayout."""
        assert layout.mesh is not None
        return lc.relayout(lc.copy_to_mesh(arr, lc.Layout.replicated(layout.mesh, rank=layout.rank)), layout)

    def meshes(self) -> None:
        self.section("1. Meshes")
        self.say("A mesh is a named grid of devices. Its TF DTensor string is name|dims|global ids|local ids|devices.")
        self.code(
            f"DEVICES = {self.devices!r}\n"
            'mesh_1d = lc.create_mesh([("x", 6)], devices=DEVICES)\n'
            'mesh_2d = lc.create_mesh([("x", 3), ("y", 2)], devices=DEVICES)'
        )
        for name, mesh in (("mesh_1d", self.mesh_1d), ("mesh_2d", self.mesh_2d)):
            self.say(f"{name}: {mesh}")
            self.say(f"{name}.to_string(): {mesh.to_string()}")

    def layouts(self) -> None:
        mesh_2d = self.mesh_2d
        self.section("2. Layouts")
        self.say(
            "A layout gives each tensor axis a mesh axis to be sharded over, or UNSHARDED ('unsharded', None) "
            "to be replicated. A device holds the same data as every device that differs from it only on "
            "mesh axes the layout does not use."
        )
        examples = {
            "fully sharded": lc.Layout(["x", "y"], mesh_2d),
            "fully replicated": lc.Layout([lc.UNSHARDED, lc.UNSHARDED], mesh_2d),
            "hybrid": lc.Layout(["x", lc.UNSHARDED], mesh_2d),
        }
        for title, layout in examples.items():
            self.say(f"{title}: {layout.axes}  ->  {layout.to_string()}")
        from ._render import render_layout

        self.say("Which device holds which block of a (3, 2) tensor under the hybrid layout (layoutcore show):")
        self.console.print(render_layout(examples["hybrid"], (3, 2), width=self.console.width))

    def replicated_1d(self) -> None:
        self.section("3. A replicated tensor on the 1-D mesh, and pack")
        layout = lc.Layout([lc.UNSHARDED], self.mesh_1d)
        self.code(
            "layout = lc.Layout([lc.UNSHARDED], mesh_1d)\nt = lc.copy_to_mesh(np.array([0, 1]), layout)\nlc.unpack(t)"
        )
        value = np.array([0, 1])
        t = lc.copy_to_mesh(value, layout)
        self.components_table(value, {"copy_to_mesh([0, 1])": t})
        self.code("packed = lc.pack(lc.unpack(t), layout)   # six [0, 1] components back into one tensor")
        packed = lc.pack(lc.unpack(t), layout)
        self.check("pack of the six components has the layout and the value", self._same(packed, layout, value))
        self.say("Replicas must agree: pack refuses components that claim to be replicas but differ.")
        other = lc.unpack(lc.copy_to_mesh(np.array([7, 7]), layout))
        components = lc.unpack(t)
        components[3] = other[3]
        self.code("components[3] = <a [7, 7] component>\nlc.pack(components, layout)")
        try:
            lc.pack(components, layout)
        except lc.LayoutError as exc:
            self.say(f"  -> {type(exc).__name__}: {exc}")
            self.check("pack refuses replicas that differ, naming the device", self.devices[3] in str(exc))
        else:
            self.check("pack refuses replicas that differ, naming the device", False)

    def layouts_2d(self) -> None:
        self.section("4. Sharded, replicated and hybrid layouts on the 2-D mesh")
        self.code(
            "def dtensor_from_array(arr, layout):   # the guide's helper\n"
            "    replicated = lc.Layout.replicated(layout.mesh, rank=layout.rank)\n"
            "    return lc.relayout(lc.copy_to_mesh(arr, replicated), layout)\n\n"
            "value = np.arange(6).reshape(3, 2)\n"
            'sharded = dtensor_from_array(value, lc.Layout(["x", "y"], mesh_2d))\n'
            "replicated = dtensor_from_array(value, lc.Layout([lc.UNSHARDED, lc.UNSHARDED], mesh_2d))\n"
            'hybrid = dtensor_from_array(value, lc.Layout(["x", lc.UNSHARDED], mesh_2d))'
        )
        layouts = {
            "sharded\n['x', 'y']": lc.Layout(["x", "y"], self.mesh_2d),
            "replicated\n[unsharded, unsharded]": lc.Layout([lc.UNSHARDED, lc.UNSHARDED], self.mesh_2d),
            "hybrid\n['x', unsharded]": lc.Layout(["x", lc.UNSHARDED], self.mesh_2d),
        }
        self.components_table(
            self.value, {title: self.dtensor_from_array(self.value, layout) for title, layout in layouts.items()}
        )

    def pack(self) -> None:
        self.section("5. unpack and pack")
        layout = lc.Layout(["x", lc.UNSHARDED], self.mesh_2d)
        self.code("packed = lc.pack(lc.unpack(hybrid), lc.fetch_layout(hybrid))")
        hybrid = self.dtensor_from_array(self.value, layout)
        packed = lc.pack(lc.unpack(hybrid), lc.fetch_layout(hybrid))
        self.check(
            f"pack(unpack(hybrid)) has layout {layout} and the global value", self._same(packed, layout, self.value)
        )

    def relayout(self) -> None:
        self.section("6. relayout")
        self.say("relayout changes where the data lives, not the value.")
        self.code('column_sharded = lc.relayout(sharded, lc.Layout([lc.UNSHARDED, "y"], mesh_2d))')
        source = lc.Layout(["x", "y"], self.mesh_2d)
        sharded = self.dtensor_from_array(self.value, source)
        moved = lc.relayout(sharded, lc.Layout([lc.UNSHARDED, "y"], self.mesh_2d))
        self.components_table(self.value, {"[unsharded, 'y']": moved})
        back = lc.relayout(moved, source)
        self.check("relayout there and back gives the original layout and value", self._same(back, source, self.value))

    def call_with_layout(self) -> None:
        mesh_2d = self.mesh_2d
        self.section("7. call_with_layout")
        self.say(
            "Create a tensor directly with a layout; where the framework can, the full value never exists on "
            f"one device. Here with {self.ones_name}."
        )
        layout = lc.Layout(["x", "y"], mesh_2d)
        self.code(f'lc.call_with_layout({self.ones_name}, lc.Layout(["x", "y"], mesh_2d), (6, 4))')
        t = lc.call_with_layout(self.ones, layout, (6, 4))
        self.components_table(np.ones((6, 4)), {"ones (6, 4)": t})
        self.check("call_with_layout returns the requested layout", lc.fetch_layout(t) == layout)

    def variable(self) -> None:
        mesh_1d, mesh_2d = self.mesh_1d, self.mesh_2d
        self.section("8. Variable")
        self.say("A Variable keeps its layout for life: it takes values with its layout, and refuses others.")
        layout = lc.Layout([lc.UNSHARDED, lc.UNSHARDED], mesh_1d)
        self.code(
            "layout = lc.Layout([lc.UNSHARDED, lc.UNSHARDED], mesh_1d)\n"
            f"v = lc.Variable(lc.call_with_layout({self.zeros_name}, layout, (64, 32)))\n"
            f"v.assign(lc.call_with_layout({self.ones_name}, layout, (64, 32)))   # same layout: fine"
        )
        v = lc.Variable(lc.call_with_layout(self.zeros, layout, (64, 32)))
        self.check("the Variable takes its initial value's layout", v.layout == layout)
        v.assign(lc.call_with_layout(self.ones, layout, (64, 32)))
        self.check("assign of a same-layout value updates the value", bool(np.all(lc.to_numpy(v.value) == 1)))
        self.say(repr(v))
        other = lc.Layout([lc.UNSHARDED, lc.UNSHARDED], mesh_2d)
        self.code(
            f"v.assign(lc.call_with_layout({self.ones_name}, lc.Layout([lc.UNSHARDED, lc.UNSHARDED], mesh_2d), (64, 32)))"
        )
        try:
            v.assign(lc.call_with_layout(self.ones, other, (64, 32)))
        except lc.LayoutMismatchError as exc:
            self.say(f"  -> LayoutMismatchError: {exc}")
            self.check("a value laid out on the 3x2 mesh is refused with LayoutMismatchError", v.layout == layout)
        else:
            self.check("a value laid out on the 3x2 mesh is refused with LayoutMismatchError", False)

    def layout_map(self) -> None:
        self.section("9. LayoutMap (the keras.distribution examples)")
        self.say(
            "A LayoutMap maps variable paths to layouts by regex (re.search by default, as keras 3.6 and its docs). "
            "Both keras variants: a mesh with tuple values, and no mesh with TensorLayout values."
        )
        self.code(
            'mesh = lc.DeviceMesh((3, 2), ("batch", "model"), devices=DEVICES)\n'
            "layout_map = lc.LayoutMap(mesh)\n"
            "layout_map['dense.*kernel'] = (None, 'model')\n"
            "layout_map['dense.*bias'] = ('model',)\n"
            "layout_map['conv2d.*kernel'] = (None, None, None, 'model')\n"
            "layout_map['conv2d.*bias'] = ('model',)\n\n"
            "unbound = lc.LayoutMap(device_mesh=None)\n"
            "unbound['dense.*kernel'] = lc.TensorLayout([None, 'model'])   # ... and so on"
        )
        mesh = lc.DeviceMesh((3, 2), ("batch", "model"), devices=self.devices)
        rules: dict[str, tuple[str | None, ...]] = {
            "dense.*kernel": (None, "model"),
            "dense.*bias": ("model",),
            "conv2d.*kernel": (None, None, None, "model"),
            "conv2d.*bias": ("model",),
        }
        bound = lc.LayoutMap(mesh)
        unbound = lc.LayoutMap(device_mesh=None)
        for pattern, axes in rules.items():
            bound[pattern] = axes
            unbound[pattern] = lc.TensorLayout(list(axes))
        # What the keras docs print for each path.
        documented: dict[str, tuple[str | None, ...] | None] = {
            "dense_1.kernel": (None, "model"),
            "dense_2.kernel": (None, "model"),
            "dense_1.bias": ("model",),
            "dense_2.bias": ("model",),
            "my_model/conv2d_123/kernel": (None, None, None, "model"),
            "my_model/conv2d_123/bias": ("model",),
            "my_model/conv3d_1/kernel": None,
            "my_model/conv3d_1/bias": None,
        }
        from rich import box
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD)
        table.add_column("path", no_wrap=True)
        table.add_column("LayoutMap(mesh)", overflow="fold")
        table.add_column("LayoutMap(device_mesh=None)", overflow="fold")
        ok = True
        for path, want in documented.items():
            got = [m[path] for m in (bound, unbound)]
            found = [None if g is None else g.axes for g in got]
            ok &= found == [want, want] and (got[0] is None or got[0].mesh == mesh)
            table.add_row(path, *(str(a) for a in found))
        self.console.print(table)
        self.check("both LayoutMap variants give the keras docs' layouts (bound to the mesh when it has one)", ok)
        self.say("Inside layout_map_scope, a Variable created with a path takes its layout from the map:")
        self.code(
            "with lc.layout_map_scope(layout_map):\n"
            '    kernel = lc.Variable(np.zeros((4, 6)), path="my_model/dense_1/kernel")'
        )
        with lc.layout_map_scope(bound):
            kernel = lc.Variable(np.zeros((4, 6)), path="my_model/dense_1/kernel")
        self.say(repr(kernel))
        self.check("the Variable took layout (None, 'model') from the map", kernel.layout == bound["dense_1.kernel"])

    def _same(self, tensor: Any, layout: lc.Layout, value: np.ndarray) -> bool:
        return lc.fetch_layout(tensor) == layout and np.array_equal(lc.to_numpy(tensor), value)


# ==============================================================================================
# Entry point
# ==============================================================================================
_SHOW_EPILOG = """\
layout syntax (--layout), one comma-separated entry per tensor axis:
  x             shard the tensor axis over mesh axis x
  none, None, unsharded, -
                replicate it
  x+y or (x,y)  shard it over mesh axes x and y together, x major (PartitionSpec(("x", "y")));
                quote the (x,y) form in a shell: --layout '(x,y),none'
  sharding_specs:...
                a TF DTensor layout string (then --mesh is taken from it)
  (empty)       a rank-0 layout, with --shape ''

Uneven dimensions follow the chunk rule (blocks of ceil(d/n); trailing blocks may be empty,
drawn as 'empty'). Rank > 2 draws one grid over the last two axes per block of the others.
Computed from the Layout alone: no driver or framework is used.

examples:
  layoutcore show --mesh x=3,y=2 --layout x,unsharded --shape 6,4
  layoutcore show --mesh x=3,y=2 --layout x+y,none --shape 6,4 --per-device
  layoutcore show --mesh x=2,y=2 --layout none,x,y --shape 2,4,5
  layoutcore show --mesh x=4 --layout x --shape 5 --devices cpu:3,cpu:2,cpu:1,cpu:0
"""

_CONFORMANCE_EPILOG = """\
Everything after the options goes to pytest (use -- first for pytest options that collide
with these, e.g. `layoutcore conformance --driver jax -- --help`).

examples:
  layoutcore conformance                      # the active driver (default numpy)
  layoutcore conformance --driver mydriver -x -q
  tox -e jax                                   # first-party drivers, each in its own env
"""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors, like the commands' own (usage is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="layoutcore",
        description=(
            "layoutcore: one Mesh / Layout / LayoutMap vocabulary for distributed arrays on NumPy, JAX, "
            "TF DTensor and torch DTensor."
        ),
        epilog="Run `layoutcore COMMAND --help` for each command's options.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"layoutcore {lc.__version__}")
    driver_help = f"driver to use (default: ${lc.DRIVER_ENV}, else 'numpy'); see `layoutcore drivers`"
    parser.add_argument("--driver", metavar="NAME", help=driver_help)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, run: Callable[[argparse.Namespace, list[str]], int], **kw: Any) -> Any:
        sub = commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            allow_abbrev=False,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            **kw,
        )
        sub.set_defaults(run=run)
        return sub

    tour = command(
        "tour",
        "Walk through the TF DTensor guide's concepts (meshes, layouts, pack, relayout, call_with_layout, "
        f"Variable, LayoutMap) on the active driver with {TOUR_DEVICES} CPU devices, checking every result "
        "against the NumPy shard math.",
        _cmd_tour,
        epilog=f"Sets {lc.CPU_DEVICES_ENV}={TOUR_DEVICES} unless it is already set. Exit status 1 if a check fails.",
    )
    # SUPPRESS: without it the subcommand's default None would overwrite `layoutcore --driver X tour`.
    tour.add_argument("--driver", metavar="NAME", default=argparse.SUPPRESS, help=driver_help)

    show = command(
        "show",
        "Draw which device holds which block of an array, like jax.debug.visualize_array_sharding.",
        _cmd_show,
        epilog=_SHOW_EPILOG,
    )
    show.add_argument(
        "--mesh", metavar="AXES", help="mesh axes as name=size, major first, e.g. x=3,y=2 (or a TF mesh string)"
    )
    show.add_argument("--layout", metavar="ENTRIES", required=True, help="one entry per tensor axis, e.g. x,unsharded")
    show.add_argument("--shape", metavar="DIMS", required=True, help="global shape, e.g. 6,4")
    show.add_argument(
        "--devices", metavar="NAMES", help="device names in row-major mesh order, e.g. CPU:0,CPU:1 (default CPU:0..N-1)"
    )
    show.add_argument("--per-device", action="store_true", help="also list each device's coordinate, block and slice")

    command(
        "drivers",
        "List the drivers: installed or not (with the install command), and declared capabilities.",
        _cmd_drivers,
    )

    conformance = command(
        "conformance",
        "Run the shared conformance suite (pytest) against one driver, e.g. a third-party driver registered "
        "under the 'layoutcore.drivers' entry point.",
        _cmd_conformance,
        epilog=_CONFORMANCE_EPILOG,
        usage="layoutcore conformance [-h] [--driver NAME] [PYTEST_ARGS ...]",
    )
    conformance.add_argument("--driver", metavar="NAME", default=argparse.SUPPRESS, help=driver_help)

    from ._render_plan import add_commands  # `plan` and `relayout-plan` (rendering lives there)

    add_commands(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``layoutcore`` command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = _build_parser()
    args, extra = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if extra and args.command != "conformance":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.run(args, extra))
    except UsageError as exc:
        print(f"layoutcore {args.command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
