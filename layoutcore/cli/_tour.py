"""``layoutcore tour``: the TF DTensor guide (tensorflow.org/guide/dtensor_overview), step by step.

The steps are data (:data:`STEPS`: a title, an introduction and the method that shows and checks
the step); :class:`Tour` runs them on any driver with the guide's six devices. Every distributed
value shown is also checked against the NumPy shard math (each device's component equals its
oracle slice), so the tour doubles as a smoke test of the driver.

Nothing here names a framework: tensors are made by the driver (``distribute_tensor``, its own
conversion of a NumPy value, ``prepare_input``), and the SPMD step computes with the ``@``
operator of the driver's native tensors. ``rich`` is imported by the CLI, which imports this
module lazily.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

import layoutcore as lc
import layoutcore.driver as lcd

from .. import propagation

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["STEPS", "TOUR_DEVICES", "Step", "Tour", "abbreviate_mesh_string"]

#: The tour's device count, as in the TF DTensor guide (``DEVICES = ['CPU:0', ..., 'CPU:5']``).
TOUR_DEVICES = 6


def abbreviate_mesh_string(text: str) -> str:
    """A TF mesh or layout string with its full device names cut to the first one and a count.

    ``"|x=6|0,...|0,...|/job:localhost/replica:0/task:0/device:CPU:0,...,CPU:5"`` (330 characters
    for six devices) becomes ``"|x=6|0,...|0,...|/job:localhost/replica:0/task:0/device:CPU:0,… (6 devices)"``.
    """
    head, sep, names = text.rpartition("|")
    devices = names.split(",")
    if not sep or len(devices) < 3:
        return text
    return f"{head}|{devices[0]},… ({len(devices)} devices)"


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the tour: its title, the prose before it, and the method that shows and checks it."""

    title: str
    intro: str
    show: Callable[[Tour], None]


class Tour:
    """Runs :data:`STEPS` on ``driver`` with the guide's six devices, counting the checks."""

    def __init__(self, console: Console, driver: lcd.Driver, available: list[str]) -> None:
        self.console = console
        self.driver = driver
        self.available = available
        self.devices = available[:TOUR_DEVICES]
        self.passed = 0
        self.failed: list[str] = []
        # The driver's own conversion of a NumPy value gives its framework's tensor: no module names.
        self.ones: Callable[..., Any] = lambda shape: driver.prepare_input(np.ones(shape, dtype=np.float32))
        self.zeros: Callable[..., Any] = lambda shape: driver.prepare_input(np.zeros(shape, dtype=np.float32))
        self.ones_name = "ones"
        self.zeros_name = "zeros"
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
            f"Devices: {self.devices} ({len(self.available)} available; {lcd.CPU_DEVICES_ENV}="
            f"{os.environ.get(lcd.CPU_DEVICES_ENV)}). Pick another driver with --driver NAME or ${lcd.DRIVER_ENV}."
        )
        for number, step in enumerate(STEPS, start=1):
            self.section(f"{number}. {step.title}")
            if step.intro:
                self.say(step.intro)
            # A driver that raises where it should not is a failed check, and the other steps still run.
            try:
                step.show(self)
            except Exception as exc:
                self.check(f"{step.show.__name__} raised {type(exc).__name__}: {exc}", False)
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
        self.code(
            f"DEVICES = {self.devices!r}\n"
            'mesh_1d = lc.create_mesh([("x", 6)], devices=DEVICES)\n'
            'mesh_2d = lc.create_mesh([("x", 3), ("y", 2)], devices=DEVICES)'
        )
        for name, mesh in (("mesh_1d", self.mesh_1d), ("mesh_2d", self.mesh_2d)):
            self.say(f"{name}: {mesh}")
            self.say(f"{name}.to_string(): {abbreviate_mesh_string(mesh.to_string())}")

    def layouts(self) -> None:
        mesh_2d = self.mesh_2d
        examples = {
            "fully sharded": lc.Layout(["x", "y"], mesh_2d),
            "fully replicated": lc.Layout([lc.UNSHARDED, lc.UNSHARDED], mesh_2d),
            "hybrid": lc.Layout(["x", lc.UNSHARDED], mesh_2d),
        }
        for title, layout in examples.items():
            self.say(f"{title}: {layout.axes}  ->  {abbreviate_mesh_string(layout.to_string())}")
        from ._render import render_layout

        self.say("Which device holds which block of a (3, 2) tensor under the hybrid layout (layoutcore show):")
        self.console.print(render_layout(examples["hybrid"], (3, 2), width=self.console.width))

    def replicated_1d(self) -> None:
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
        layout = lc.Layout(["x", lc.UNSHARDED], self.mesh_2d)
        self.code("packed = lc.pack(lc.unpack(hybrid), lc.fetch_layout(hybrid))")
        hybrid = self.dtensor_from_array(self.value, layout)
        packed = lc.pack(lc.unpack(hybrid), lc.fetch_layout(hybrid))
        self.check(
            f"pack(unpack(hybrid)) has layout {layout} and the global value", self._same(packed, layout, self.value)
        )

    def relayout(self) -> None:
        self.code('column_sharded = lc.relayout(sharded, lc.Layout([lc.UNSHARDED, "y"], mesh_2d))')
        source = lc.Layout(["x", "y"], self.mesh_2d)
        sharded = self.dtensor_from_array(self.value, source)
        moved = lc.relayout(sharded, lc.Layout([lc.UNSHARDED, "y"], self.mesh_2d))
        self.components_table(self.value, {"[unsharded, 'y']": moved})
        back = lc.relayout(moved, source)
        self.check("relayout there and back gives the original layout and value", self._same(back, source, self.value))

    def call_with_layout(self) -> None:
        mesh_2d = self.mesh_2d
        layout = lc.Layout(["x", "y"], mesh_2d)
        self.code(f'lc.call_with_layout({self.ones_name}, lc.Layout(["x", "y"], mesh_2d), (6, 4))')
        t = lc.call_with_layout(self.ones, layout, (6, 4))
        self.components_table(np.ones((6, 4)), {"ones (6, 4)": t})
        self.check("call_with_layout returns the requested layout", lc.fetch_layout(t) == layout)

    def variable(self) -> None:
        mesh_1d, mesh_2d = self.mesh_1d, self.mesh_2d
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

    def spmd(self) -> None:
        a = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
        b = np.array([[6, 5], [4, 3], [2, 1]], dtype=np.int32)
        self.code(
            "a_value = np.array([[1, 2, 3], [4, 5, 6]])   # the guide's operands\n"
            "b_value = np.array([[6, 5], [4, 3], [2, 1]])\n"
            "c = dtensor_from_array(a_value, layout_a) @ dtensor_from_array(b_value, layout_b)\n"
            "print('Sharding spec:', lc.fetch_layout(c).sharding_specs)"
        )
        examples = (
            ("replicated a and b on mesh_1d: six identical matmuls", self.mesh_1d, [None, None], [None, None]),
            (
                "a [unsharded, x], b [x, unsharded]: the contracting axis is sharded",
                self.mesh_2d,
                [None, "x"],
                ["x", None],
            ),
            ("a [y, x], b [x, unsharded]: rows stay sharded over y", self.mesh_2d, ["y", "x"], ["x", None]),
        )
        for title, mesh, specs_a, specs_b in examples:
            layout_a, layout_b = lc.Layout(specs_a, mesh), lc.Layout(specs_b, mesh)
            expected = propagation.matmul(layout_a, layout_b)
            self.say(f"{title}: layout_a = {layout_a.sharding_specs}, layout_b = {layout_b.sharding_specs}")
            c = self.dtensor_from_array(a, layout_a) @ self.dtensor_from_array(b, layout_b)
            try:
                layout = lc.fetch_layout(c)
            except lc.UnsupportedLayoutError as exc:  # torch: the sum over x is still pending (Partial)
                self.say(
                    f"  the result holds pending sums ({exc}); lc.relayout(c, {expected.sharding_specs}) reduces them"
                )
                c = lc.relayout(c, expected)
                layout = lc.fetch_layout(c)
            self.say(f"  Sharding spec: {layout.sharding_specs}")
            self.check(
                f"the result's layout is propagation.matmul's (TF DTensor's) {expected.sharding_specs}",
                layout == expected,
            )
            self.components_table(a @ b, {"c = a @ b": c})


def _steps() -> tuple[Step, ...]:
    return (
        Step(
            "Meshes",
            "A mesh is a named grid of devices. Its TF DTensor string is name|dims|global ids|local ids|devices "
            "(device names abbreviated here).",
            Tour.meshes,
        ),
        Step(
            "Layouts",
            "A layout gives each tensor axis a mesh axis to be sharded over, or UNSHARDED ('unsharded', None) "
            "to be replicated. A device holds the same data as every device that differs from it only on "
            "mesh axes the layout does not use.",
            Tour.layouts,
        ),
        Step("A replicated tensor on the 1-D mesh, and pack", "", Tour.replicated_1d),
        Step("Sharded, replicated and hybrid layouts on the 2-D mesh", "", Tour.layouts_2d),
        Step("unpack and pack", "", Tour.pack),
        Step("relayout", "relayout changes where the data lives, not the value.", Tour.relayout),
        Step(
            "call_with_layout",
            "Create a tensor directly with a layout; where the framework can, the full value never exists on "
            "one device. Here with ones(shape): NumPy's ones in the driver's own tensor type (driver.prepare_input).",
            Tour.call_with_layout,
        ),
        Step(
            "Variable",
            "A Variable keeps its layout for life: it takes values with its layout, and refuses others.",
            Tour.variable,
        ),
        Step(
            "LayoutMap (the keras.distribution examples)",
            "A LayoutMap maps variable paths to layouts by regex (re.search by default, as keras 3.6 and its docs). "
            "Both keras variants: a mesh with tuple values, and no mesh with TensorLayout values.",
            Tour.layout_map,
        ),
        Step(
            "SPMD: matmul on distributed tensors (the guide's 'SPMD expansion')",
            "The framework's own @ runs on each device's components; a sharded contracting axis is summed across "
            "its mesh axis, and the result is replicated over it (layoutcore.propagation states the rule).",
            Tour.spmd,
        ),
    )


#: The tour, in order.
STEPS: tuple[Step, ...] = _steps()
