"""The model-based test: random sequences of data functions, checked against a NumPy model after every step.

A hypothesis :class:`~hypothesis.stateful.RuleBasedStateMachine` (after zarr-python's
``zarr/testing/stateful.py``) holds a growing set of distributed tensors and Variables, each with the
NumPy array it must equal. Its rules are the data functions users chain: ``distribute_tensor`` (of NumPy
and of framework tensors), ``copy_to_mesh``, ``relayout`` on the same mesh and across meshes,
``unpack`` then ``pack``, ``Variable`` and ``assign``, in-place updates through the framework's own
operation (``adapter.add_inplace``: torch ``add_``, TF ``assign_add``, JAX ``.at[...].add`` then
``assign``) and ``to_numpy``, over random meshes, layouts, shapes and every dtype the driver declares.
After every step, every object made so far is read back through the adapter (the framework's own calls)
and compared bit for bit with its model: a step must not change any earlier tensor, an in-place update
must reach every replica exactly once, and nothing may narrow a dtype.

Sequences per run: 100 under the ``ci`` profile, 2 000 under ``fuzz`` (see :data:`SEQUENCES`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

import layoutcore as lc
from layoutcore.driver import Capability, Driver, Limitation

from ._oracle import Case, assert_refused, missing_capabilities, needs_cross_mesh
from ._strategies import MeshParts, device_budget, layout_specs, shapes_for
from ._values import ALL_DTYPES, assert_bits_equal, assert_device_bits, declared_dtypes, dtype_values
from .adapter import ConformanceAdapter

#: Operation sequences per hypothesis profile (an unknown profile gets its ``max_examples``, at least 100).
SEQUENCES = {"ci": 100, "dev": 100, "smoke": 40, "thorough": 1000, "fuzz": 2000}
#: Steps per sequence: long enough to chain relayouts, packs and in-place updates of one value.
STEPS = 12
#: Tensor rank of a sequence's values: small values keep a step cheap; the property tests cover rank 3.
MAX_RANK = 2


def mesh_pool() -> list[MeshParts]:
    """The meshes sequences draw from: a fixed pool, abstract and concrete, named and not, of rank 1 to 3.

    Fixed, not random as in the property tests: a framework may keep resources per distinct mesh for the
    life of the process (TF DTensor keeps a pool of threads per mesh and layoutcore's TF driver caps them
    at 256), and a few meshes make the relayouts between them frequent.
    """
    n = device_budget()
    devices = tuple(lc.list_devices())[:n]
    half = max(1, n // 2)
    pool: list[MeshParts] = [
        ((n,), ("x",), None, ""),
        ((n,), ("x",), devices[:n], ""),
        ((half,), ("z",), None, ""),
        ((2, half), ("x", "y"), None, ""),
        ((2, half), ("x", "y"), devices[: 2 * half], "mesh1"),
        ((half, 2), ("batch", "model"), None, ""),
        ((1,), ("y",), devices[:1], ""),
    ]
    if n >= 8:
        pool.append(((2, 2, 2), ("x", "y", "z"), None, ""))
    return [parts for parts in pool if int(np.prod(parts[0])) <= n]


@st.composite
def pooled_cases(
    draw: st.DrawFn, dtypes: list[str], mesh: MeshParts | None = None, shape: tuple[int, ...] | None = None
) -> Case:
    """A mesh from :func:`mesh_pool` (or ``mesh``), a random layout on it, a shape (or ``shape``) and a dtype."""
    shape_m, names, devices, mesh_name = mesh if mesh is not None else draw(st.sampled_from(mesh_pool()))
    rank = draw(st.integers(0, MAX_RANK)) if shape is None else len(shape)
    spec = draw(layout_specs(names, rank))
    dtype = draw(st.sampled_from(dtypes))
    case = Case(shape_m, names, spec, (), dtype, devices, mesh_name)
    if shape is None:
        shape = draw(shapes_for([int(np.prod([shape_m[a] for a in axes])) for axes in case.dim_axes]))
    return Case(shape_m, names, spec, shape, dtype, devices, mesh_name)


@dataclass(eq=False)
class Held:
    """One object of the sequence: a distributed tensor or a Variable, the case it was made with, and the NumPy
    array it must hold."""

    number: int
    obj: Any
    case: Case
    expected: np.ndarray
    how: str
    variable: bool = False
    history: list[str] = field(default_factory=list)

    def tensor(self) -> Any:
        """The distributed tensor to read: the object, or a Variable's current value."""
        return self.obj.value if self.variable else self.obj

    def __repr__(self) -> str:
        kind = "Variable" if self.variable else "tensor"
        return f"<{kind} #{self.number} {self.how}: {self.case}>"


class LayoutcoreModel(RuleBasedStateMachine):
    """The driver's data functions against a NumPy model (see the module docstring)."""

    #: Sequences started in this process (hypothesis makes one machine per sequence, shrinking included).
    started = 0

    def __init__(self, driver: Driver, adapter: ConformanceAdapter) -> None:
        super().__init__()
        LayoutcoreModel.started += 1
        self.driver = driver
        self.adapter = adapter
        declared = declared_dtypes(driver)
        self.dtypes = [name for name in ALL_DTYPES if name in declared]
        self.held: list[Held] = []
        self.numbers = itertools.count()

    # -- helpers ---------------------------------------------------------------------------------
    def _hold(self, obj: Any, case: Case, expected: np.ndarray, how: str, *, variable: bool = False) -> Held:
        """Check a new object against its model, then keep it. A framework that hands back the very object it
        was given (a relayout to the same layout) shares its model: an in-place update shows on both."""
        if not variable:
            for held in self.held:
                if held.obj is obj and not held.variable:
                    assert held.case.layout() == case.layout(), f"{how} returned {held!r} itself for {case}"
                    return held
        held = Held(next(self.numbers), obj, case, np.array(expected, copy=True), how, variable)
        assert_device_bits(self.adapter, held.tensor(), held.expected, case, f"#{held.number} {how}")
        assert self.driver.fetch_layout(held.tensor()) == case.layout(), (
            f"#{held.number} {how}: fetch_layout gave {self.driver.fetch_layout(held.tensor())!r}, made with "
            f"{case.layout()!r}"
        )
        self.held.append(held)
        return held

    def _tensors(self) -> list[Held]:
        return [h for h in self.held if not h.variable]

    def _variables(self) -> list[Held]:
        return [h for h in self.held if h.variable]

    def _values(self, case: Case, seed: int) -> np.ndarray:
        return dtype_values(case.shape, case.dtype, seed, arithmetic=True)

    def _refused(self, case: Case, call: Any, what: str) -> bool:
        """Whether ``case`` needs a capability the driver lacks; if so, checks that ``call`` refuses it."""
        missing = missing_capabilities(self.driver, case.layout(), case.shape)
        if missing:
            assert_refused(self.driver, missing, call, f"{what} {case}")
        return bool(missing)

    def _negative_zero_refused(self, case: Case, x: np.ndarray, call: Any, what: str) -> bool:
        """Whether the driver declares ``Limitation.NEGATIVE_ZERO`` and ``x`` is what it refuses (a
        float32 write of all ``-0.0`` into a fully replicated variable); if so, checks the typed refusal."""
        if Limitation.NEGATIVE_ZERO not in self.driver.limitations or np.dtype(x.dtype) != np.float32:
            return False
        if not case.layout().is_fully_replicated() or x.size == 0 or not np.all((x == 0) & np.signbit(x)):
            return False
        with pytest.raises(lc.UnsupportedLayoutError) as caught:
            call()
        assert caught.value.feature is Limitation.NEGATIVE_ZERO, f"{what} {case}: {caught.value!r}"
        return True

    # -- rules -----------------------------------------------------------------------------------
    @rule(data=st.data(), native=st.booleans(), seed=st.integers(0, 2**16))
    def distribute(self, data: st.DataObject, native: bool, seed: int) -> None:
        case = data.draw(pooled_cases(self.dtypes), label="case")
        x = self._values(case, seed)
        value = self.adapter.from_numpy(x) if native else x
        if self._refused(case, lambda: lc.distribute_tensor(value, case.layout()), "distribute_tensor"):
            return
        source = "framework tensor" if native else "NumPy"
        self._hold(lc.distribute_tensor(value, case.layout()), case, x, f"distribute_tensor({source})")

    @rule(data=st.data(), native=st.booleans(), seed=st.integers(0, 2**16))
    def copy_to_mesh(self, data: st.DataObject, native: bool, seed: int) -> None:
        shape_m, names, devices, mesh_name = data.draw(st.sampled_from(mesh_pool()), label="mesh")
        rank = data.draw(st.integers(0, MAX_RANK), label="rank")
        shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=rank, max_size=rank), label="shape"))
        dtype = data.draw(st.sampled_from(self.dtypes), label="dtype")
        case = Case(shape_m, names, (None,) * rank, shape, dtype, devices, mesh_name)
        x = self._values(case, seed)
        value = self.adapter.from_numpy(x) if native else x
        self._hold(lc.copy_to_mesh(value, case.layout()), case, x, "copy_to_mesh")

    @precondition(lambda self: bool(self._tensors()))
    @rule(data=st.data(), other_mesh=st.booleans())
    def relayout(self, data: st.DataObject, other_mesh: bool) -> None:
        source = data.draw(st.sampled_from(self._tensors()), label="source")
        c = source.case
        mesh = None if other_mesh else (c.mesh_shape, c.axis_names, c.devices, c.mesh_name)
        target = data.draw(pooled_cases([c.dtype], mesh, c.shape), label="target")
        missing = missing_capabilities(self.driver, target.layout(), target.shape)
        across = needs_cross_mesh(self.driver, source.case, target)
        if across and Capability.RELAYOUT_ACROSS_MESHES not in self.driver.capabilities:
            missing.add(Capability.RELAYOUT_ACROSS_MESHES.value)
        if missing:
            assert_refused(self.driver, missing, lambda: lc.relayout(source.obj, target.layout()), f"relayout {target}")
            return
        moved = lc.relayout(source.obj, target.layout())
        how = f"relayout(#{source.number}{', another mesh' if across else ''})"
        self._hold(moved, target, source.expected, how)

    @precondition(lambda self: bool(self._tensors()))
    @rule(data=st.data())
    def unpack_pack(self, data: st.DataObject) -> None:
        source = data.draw(st.sampled_from(self._tensors()), label="source")
        case = source.case
        components = lc.unpack(source.obj)
        assert len(components) == case.size, f"unpack(#{source.number}) gave {len(components)} components"
        for position, (component, sl) in enumerate(zip(components, case.slices(), strict=True)):
            got = self.driver.component_to_numpy(component)
            assert_bits_equal(got, np.asarray(source.expected[sl]), f"unpack(#{source.number}) component {position}")
        self._hold(lc.pack(components, case.layout()), case, source.expected, f"pack(unpack(#{source.number}))")

    @rule(data=st.data(), seed=st.integers(0, 2**16), from_tensor=st.booleans())
    def make_variable(self, data: st.DataObject, seed: int, from_tensor: bool) -> None:
        tensors = self._tensors()
        if from_tensor and tensors:
            source = data.draw(st.sampled_from(tensors), label="source")
            if self._negative_zero_refused(source.case, source.expected, lambda: lc.Variable(source.obj), "Variable"):
                return
            variable = lc.Variable(source.obj)  # keeps the tensor's layout; must own its storage
            self._hold(variable, source.case, source.expected, f"Variable(#{source.number})", variable=True)
            return
        case = data.draw(pooled_cases(self.dtypes), label="case")
        x = self._values(case, seed)
        if self._refused(case, lambda: lc.Variable(x, case.layout()), "Variable"):
            return
        if self._negative_zero_refused(case, x, lambda: lc.Variable(x, case.layout()), "Variable"):
            return
        self._hold(lc.Variable(x, case.layout()), case, x, "Variable(NumPy)", variable=True)

    @precondition(lambda self: bool(self._variables()))
    @rule(data=st.data(), seed=st.integers(0, 2**16), kind=st.sampled_from(["numpy", "framework", "distributed"]))
    def assign(self, data: st.DataObject, seed: int, kind: str) -> None:
        target = data.draw(st.sampled_from(self._variables()), label="variable")
        case = target.case
        same = [h for h in self._tensors() if h.case.layout() == case.layout() and h.case.dtype == case.dtype]
        same = [h for h in same if h.case.shape == case.shape]
        if kind == "distributed" and same:
            source = data.draw(st.sampled_from(same), label="source")
            if self._negative_zero_refused(case, source.expected, lambda: target.obj.assign(source.obj), "assign"):
                return
            target.obj.assign(source.obj)
            target.expected = source.expected.copy()
            target.history.append(f"assign(#{source.number})")
        else:
            x = self._values(case, seed)
            value = self.adapter.from_numpy(x) if kind == "framework" else x
            if self._negative_zero_refused(case, x, lambda: target.obj.assign(value), "assign"):
                return
            target.obj.assign(value)
            target.expected = x
            target.history.append(f"assign({kind})")
        assert_device_bits(self.adapter, target.tensor(), target.expected, case, f"#{target.number} after assign")

    @precondition(lambda self: any(h.case.dtype in self.adapter.arithmetic_dtypes for h in self.held))
    @rule(data=st.data())
    def add_inplace(self, data: st.DataObject) -> None:
        candidates = [h for h in self.held if h.case.dtype in self.adapter.arithmetic_dtypes]
        target = data.draw(st.sampled_from(candidates), label="target")
        case = target.case
        dt = target.expected.dtype
        # 1, 2, 3, ...: nonzero, exact in every dtype, so x + delta is the same in every framework's arithmetic,
        # also where it flushes subnormals to zero (TF's kernels do): a subnormal plus 1 rounds to 1 either way.
        # Complex deltas are k + kj, since a real delta would leave a subnormal imaginary part to the flush.
        counts = np.arange(int(np.prod(case.shape)), dtype=np.int64) % 3 + 1
        delta = (counts * (1 + 1j) if dt.kind == "c" else counts).astype(dt).reshape(case.shape)
        delta_tensor = lc.distribute_tensor(delta, case.layout())
        if self.adapter.add_inplace(target.obj, delta_tensor):
            with np.errstate(all="ignore"):
                target.expected = (target.expected + delta).astype(dt)
            target.history.append("+= delta in place")
        assert_device_bits(self.adapter, target.tensor(), target.expected, case, f"#{target.number} after += in place")
        assert_device_bits(self.adapter, delta_tensor, delta, case, "the added tensor itself")

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def to_numpy(self, data: st.DataObject) -> None:
        held = data.draw(st.sampled_from(self.held), label="held")
        got = held.obj.numpy() if held.variable else lc.to_numpy(held.obj)
        assert_bits_equal(got, held.expected, f"to_numpy(#{held.number} {held.how}, then {held.history})")

    # -- after every step ------------------------------------------------------------------------
    @invariant()
    def every_object_holds_its_model(self) -> None:
        for held in self.held:
            assert_device_bits(
                self.adapter,
                held.tensor(),
                held.expected,
                held.case,
                f"#{held.number} ({held.how}, then {held.history or 'nothing'}), read after a later step",
            )


def sequences() -> int:
    """Operation sequences the current hypothesis profile runs."""
    profile = settings.get_current_profile_name()
    return SEQUENCES.get(profile, max(100, settings().max_examples))


def test_operation_sequences_match_numpy_model(driver: Driver, adapter: ConformanceAdapter) -> None:
    """Random sequences of data functions on the driver, checked after every step against a NumPy model."""
    declared_dtypes(driver)  # fail first, and clearly, where the driver declares no dtypes
    before = LayoutcoreModel.started
    wanted = sequences()

    class OnThisDriver(LayoutcoreModel):
        def __init__(self) -> None:
            super().__init__(driver, adapter)

    run_state_machine_as_test(
        OnThisDriver,
        settings=settings(
            settings(),
            max_examples=wanted,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        ),
    )
    ran = LayoutcoreModel.started - before
    print(f"{ran} operation sequences of up to {STEPS} steps on driver {driver.name!r}")
    assert ran >= wanted, f"hypothesis ran {ran} sequences, fewer than the {wanted} this profile asks for"
