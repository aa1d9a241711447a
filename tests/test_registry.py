"""Driver discovery and selection (contract §2), and LAYOUTCORE_CPU_DEVICES."""

from __future__ import annotations

import importlib.metadata
import os
import threading
import warnings

import numpy as np
import pytest

import layoutcore
from layoutcore import (
    ConfigurationError,
    DriverNotFoundError,
    DriverUnavailableError,
    LayoutcoreError,
    active_driver_name,
    available_drivers,
    get_driver,
    list_devices,
    set_driver,
    use_driver,
)
from layoutcore.driver import _registry, driver_infos, register_driver
from layoutcore.numpy import NumpyDriver, ShardedArray


def _numpy_with(n: int) -> type[NumpyDriver]:
    """A NumPy driver class exposing ``n`` devices, to tell drivers apart by list_devices()."""

    class Sized(NumpyDriver):
        def __init__(self) -> None:
            super().__init__(n)

    return Sized


@pytest.fixture
def three_drivers() -> None:
    register_driver("two", _numpy_with(2))
    register_driver("three", _numpy_with(3))
    register_driver("four", _numpy_with(4))


def _count() -> int:
    return len(list_devices())


# -- selection order --------------------------------------------------------------------------------
def test_default_is_numpy() -> None:
    assert active_driver_name() == "numpy"
    assert get_driver().name == "numpy" and isinstance(get_driver(), NumpyDriver)


@pytest.mark.usefixtures("three_drivers")
def test_selection_order(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _count() == 8  # numpy, LAYOUTCORE_CPU_DEVICES unset
    monkeypatch.setenv("LAYOUTCORE_DRIVER", " two ")
    assert active_driver_name() == "two" and _count() == 2
    set_driver("three")
    assert _count() == 3  # set_driver beats the environment
    with use_driver("four") as driver:
        assert driver is get_driver("four")
        assert _count() == 4  # use_driver beats set_driver
        assert len(list_devices(driver="two")) == 2  # driver= beats everything
        assert len(list_devices(driver=get_driver("numpy"))) == 8  # a Driver instance works too
    assert _count() == 3
    set_driver(None)
    assert _count() == 2
    monkeypatch.delenv("LAYOUTCORE_DRIVER")
    assert _count() == 8


@pytest.mark.usefixtures("three_drivers")
def test_use_driver_nests_and_restores_on_error() -> None:
    with use_driver("two"):
        with use_driver("three"):
            assert _count() == 3
        assert _count() == 2
        with pytest.raises(RuntimeError), use_driver("four"):
            raise RuntimeError
        assert _count() == 2
    assert active_driver_name() == "numpy"


@pytest.mark.usefixtures("three_drivers")
def test_use_driver_is_per_thread() -> None:
    seen: dict[str, int] = {}
    inside = threading.Event()
    done = threading.Event()

    def other() -> None:
        inside.wait(5)
        seen["other, while main is in use_driver"] = _count()
        with use_driver("four"):
            seen["other, own use_driver"] = _count()
            done.set()
            inside.wait(5)

    set_driver("two")
    thread = threading.Thread(target=other)
    thread.start()
    with use_driver("three"):
        inside.set()
        done.wait(5)
        seen["main"] = _count()
    thread.join(5)
    assert seen == {"other, while main is in use_driver": 2, "other, own use_driver": 4, "main": 3}


def test_nothing_is_resolved_when_choosing_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYOUTCORE_DRIVER", "no_such_driver")
    assert active_driver_name() == "no_such_driver"  # no error until used
    with pytest.raises(DriverNotFoundError):
        list_devices()


# -- errors ---------------------------------------------------------------------------------------
def test_unknown_name_lists_the_installed_drivers() -> None:
    with pytest.raises(DriverNotFoundError) as info:
        get_driver("nopedriver")
    err = info.value
    assert isinstance(err, LookupError) and isinstance(err, LayoutcoreError)
    assert err.name == "nopedriver" and "numpy" in err.installed
    assert "'nopedriver'" in str(err) and "'numpy'" in str(err)


def test_a_driver_instance_is_used_as_given_and_anything_else_is_refused() -> None:
    """get_driver and driver_for hand back a Driver instance as given (also on later calls, which pass a
    remembered type check); an object of another type is still looked up as a name and refused."""
    mine = NumpyDriver(num_devices=2)
    for _ in range(2):
        assert get_driver(mine) is mine and _registry.driver_for(np.ones(2), mine) is mine
    for bad in (123, 2.5, object()):
        with pytest.raises(DriverNotFoundError):
            get_driver(bad)  # type: ignore[arg-type]
        with pytest.raises(DriverNotFoundError):
            _registry.driver_for(np.ones(2), bad)  # type: ignore[arg-type]


def test_environ_setting_reads_what_os_environ_get_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """environ_setting reads os.environ's own table; os.environ.get is its oracle, through set, change, unset."""
    from layoutcore.driver import DRIVER_ENV, environ_setting

    name = "LAYOUTCORE_TEST_SETTING"
    for value in ("jax", "", " numpy ", "caf\u00e9", "x" * 300, "jax"):
        monkeypatch.setenv(name, value)
        assert environ_setting(name) == os.environ.get(name) == value
    monkeypatch.delenv(name)
    assert environ_setting(name) is None and os.environ.get(name) is None
    monkeypatch.setenv(DRIVER_ENV, " numpy ")
    assert active_driver_name() == "numpy"
    monkeypatch.delenv(DRIVER_ENV)
    assert active_driver_name() == "numpy"  # the default


def test_set_driver_and_use_driver_check_the_name_first() -> None:
    with pytest.raises(DriverNotFoundError):
        set_driver("nopedriver")
    assert active_driver_name() == "numpy"
    with pytest.raises(DriverNotFoundError), use_driver("nopedriver"):
        pass
    assert active_driver_name() == "numpy"


def test_known_driver_without_entry_point_says_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_registry.KNOWN_DRIVERS, "fakefw", "pip install 'layoutcore[fakefw]'")
    with pytest.raises(DriverUnavailableError) as info:
        get_driver("fakefw")
    assert isinstance(info.value, ImportError)
    assert info.value.install == "pip install 'layoutcore[fakefw]'"
    assert "pip install 'layoutcore[fakefw]'" in str(info.value)


def test_driver_whose_framework_is_missing_says_the_install_hint() -> None:
    class NeedsFramework(NumpyDriver):
        name = "needy"
        requires = ("layoutcore_no_such_framework_xyz",)
        install_hint = "pip install needy-framework"

    register_driver("needy", NeedsFramework)
    with pytest.raises(DriverUnavailableError, match="pip install needy-framework") as info:
        get_driver("needy")
    assert "layoutcore_no_such_framework_xyz" in str(info.value)
    assert "needy" not in available_drivers()
    (info_row,) = [i for i in driver_infos() if i.name == "needy"]
    assert not info_row.installed and info_row.install_hint == "pip install needy-framework"
    assert "layoutcore_no_such_framework_xyz" in info_row.problem


@pytest.mark.parametrize(
    "target",
    [
        "layoutcore_no_such_module_xyz:Driver",  # ImportError
        "layoutcore:NoSuchDriverClass",  # AttributeError
    ],
)
def test_broken_plugin_is_warned_about_and_skipped(target: str) -> None:
    broken = importlib.metadata.EntryPoint(name="broken", value=target, group=_registry.ENTRY_POINT_GROUP)
    with _registry._lock:
        _registry._discover()["broken"] = broken
    with pytest.warns(RuntimeWarning, match="broken"):
        infos = driver_infos()
    (row,) = [i for i in infos if i.name == "broken"]
    assert not row.installed and target in row.problem
    assert any(i.name == "numpy" and i.installed for i in infos)  # the others are still listed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert "broken" not in available_drivers() and "numpy" in available_drivers()
    with pytest.raises(DriverUnavailableError, match="broken"):
        get_driver("broken")


def test_factory_returning_a_non_driver_is_refused() -> None:
    register_driver("bogus", lambda: object())  # type: ignore[arg-type, return-value]
    with pytest.raises(DriverUnavailableError, match="not a layoutcore Driver"):
        get_driver("bogus")


# -- registration and caching ------------------------------------------------------------------------
def test_register_driver_refuses_a_taken_name_unless_replace() -> None:
    with pytest.raises(ConfigurationError, match="'numpy'") as info:
        register_driver("numpy", _numpy_with(2))
    assert isinstance(info.value, ValueError)
    register_driver("mine", _numpy_with(2))
    first = get_driver("mine")
    assert get_driver("mine") is first  # one instance per process
    register_driver("mine", _numpy_with(3), replace=True)
    assert len(get_driver("mine").list_devices()) == 3  # the old instance is dropped


def test_driver_infos_lists_every_known_driver_and_capabilities() -> None:
    infos = {i.name: i for i in driver_infos()}
    assert {"numpy", "jax", "tensorflow", "torch"} <= set(infos)
    assert infos["numpy"].installed and infos["numpy"].capabilities == frozenset(layoutcore.driver.Capability)
    for name in ("jax", "tensorflow", "torch"):
        assert infos[name].install_hint  # installed or not, it says how to get it
    assert "numpy" in available_drivers()


def test_numpy_is_found_through_its_entry_point() -> None:
    names = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=layoutcore.driver.ENTRY_POINT_GROUP)}
    assert names.get("numpy") == "layoutcore.numpy:NumpyDriver"


# -- LAYOUTCORE_CPU_DEVICES ----------------------------------------------------------------------------
def test_cpu_devices_default_is_8() -> None:
    assert layoutcore.driver.cpu_device_count() == 8
    assert NumpyDriver().list_devices() == [f"CPU:{i}" for i in range(8)]


def test_cpu_devices_sets_the_numpy_device_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYOUTCORE_CPU_DEVICES", " 3 ")
    assert layoutcore.driver.cpu_device_count() == 3
    assert NumpyDriver().list_devices() == ["CPU:0", "CPU:1", "CPU:2"]
    assert NumpyDriver().list_devices("cpu") == ["CPU:0", "CPU:1", "CPU:2"]
    assert NumpyDriver().list_devices("GPU") == []


@pytest.mark.parametrize("raw", ["0", "-2", "abc", "2.5", "8 devices"])
def test_bad_cpu_devices_raise_configuration_error_naming_the_value(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("LAYOUTCORE_CPU_DEVICES", raw)
    with pytest.raises(ConfigurationError) as info:
        layoutcore.driver.cpu_device_count()
    assert isinstance(info.value, ValueError) and isinstance(info.value, LayoutcoreError)
    assert repr(raw) in str(info.value) and "LAYOUTCORE_CPU_DEVICES" in str(info.value)
    assert info.value.value == raw


@pytest.mark.usefixtures("three_drivers")
def test_use_driver_is_per_asyncio_task() -> None:
    import asyncio

    async def task(name: str, started: asyncio.Event, proceed: asyncio.Event) -> int:
        with use_driver(name):
            started.set()
            await proceed.wait()  # the other task enters its own use_driver meanwhile
            return _count()

    async def both() -> list[int]:
        events = [asyncio.Event() for _ in range(4)]
        first = asyncio.create_task(task("two", events[0], events[1]))
        second = asyncio.create_task(task("four", events[2], events[3]))
        await events[0].wait()
        await events[2].wait()
        events[1].set()
        events[3].set()
        return list(await asyncio.gather(first, second))

    assert asyncio.run(both()) == [2, 4]
    assert active_driver_name() == "numpy"


# -- the value chooses the driver (docs/design.md#data-functions-made-precise) -----------------------------
class BoxArray:
    """The native distributed tensor of the "box" driver below: a ShardedArray in a box."""

    def __init__(self, inner: ShardedArray | None) -> None:
        self.inner = inner


class BoxDriver(NumpyDriver):
    """A NumPy driver whose tensors are BoxArrays; an empty box is a plain (non-distributed) value."""

    name = "box"
    native_types = (f"{__name__}.BoxArray",)

    def is_distributed(self, value: object) -> bool:
        return isinstance(value, BoxArray) and value.inner is not None

    def native_distribute(self, value, layout, devices):  # type: ignore[no-untyped-def]
        return BoxArray(super().native_distribute(value, layout, devices))

    def native_unpack(self, tensor):  # type: ignore[no-untyped-def]
        return super().native_unpack(tensor.inner)

    def native_relayout(self, tensor, layout, devices):  # type: ignore[no-untyped-def]
        return BoxArray(super().native_relayout(tensor.inner, layout, devices))

    def native_fetch_layout(self, tensor):  # type: ignore[no-untyped-def]
        return super().native_fetch_layout(tensor.inner)

    def native_to_numpy(self, tensor):  # type: ignore[no-untyped-def]
        return super().native_to_numpy(tensor.inner)

    def shape_of(self, value):  # type: ignore[no-untyped-def]
        return super().shape_of(value.inner if isinstance(value, BoxArray) else value)


@pytest.fixture
def box() -> BoxArray:
    register_driver("box", BoxDriver)
    mesh = layoutcore.Mesh((2,), ("x",))
    return layoutcore.distribute_tensor([1, 2, 3, 4], layoutcore.Layout(["x"], mesh), driver="box")  # type: ignore[no-any-return]


def test_the_value_chooses_its_driver_ahead_of_the_environment(box: BoxArray, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYOUTCORE_DRIVER", "numpy")
    assert layoutcore.to_numpy(box).tolist() == [1, 2, 3, 4]
    assert layoutcore.fetch_layout(box).axes == ("x",)
    assert len(layoutcore.unpack(box)) == 2
    moved = layoutcore.relayout(box, layoutcore.Layout([None], layoutcore.Mesh((2,), ("x",))))
    assert isinstance(moved, BoxArray)
    v = layoutcore.Variable(box)
    assert v.driver.name == "box" and v.layout.axes == ("x",)
    assert _registry.driver_for(v).name == "box"  # a Variable brings its own driver


def test_driver_use_driver_and_set_driver_win_over_the_value(box: BoxArray) -> None:
    with pytest.raises(layoutcore.NotDistributedError):
        layoutcore.to_numpy(box, driver="numpy")
    with use_driver("numpy"), pytest.raises(layoutcore.NotDistributedError):
        layoutcore.to_numpy(box)
    set_driver("numpy")
    with pytest.raises(layoutcore.NotDistributedError):
        layoutcore.to_numpy(box)


def test_a_plain_value_of_a_native_type_is_not_claimed(box: BoxArray) -> None:
    with pytest.raises(layoutcore.NotDistributedError) as info:
        layoutcore.to_numpy(BoxArray(None))  # the box driver's type, but is_distributed says no
    assert "numpy driver" in str(info.value)


def test_the_value_is_matched_by_type_name_importing_nothing(box: BoxArray) -> None:
    assert _registry._native_owners(BoxArray)[0] == "box"
    assert _registry._native_owners(ShardedArray)[0] == "numpy"
    assert _registry._native_owners(int) == ()


def test_unknown_name_does_not_list_a_driver_whose_framework_is_missing() -> None:
    class NeedsFramework(NumpyDriver):
        requires = ("layoutcore_no_such_framework_xyz",)

    register_driver("needy", NeedsFramework)
    with pytest.raises(DriverNotFoundError) as info:
        get_driver("nopedriver")
    assert "needy" not in info.value.installed and "'needy'" not in str(info.value)
    assert "numpy" in info.value.installed
