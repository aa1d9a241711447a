"""Driver discovery (``layoutcore.drivers`` entry points) and selection.

Selection, first that applies: an explicit ``driver=`` argument, :func:`use_driver` (per
thread and task), :func:`set_driver`, then, for the functions that take a distributed tensor
(``unpack``, ``relayout``, ``fetch_layout``, ``to_numpy``, ``Variable``), the driver whose native
tensor the value is (:func:`driver_for`), then the ``LAYOUTCORE_DRIVER`` environment variable,
else ``"numpy"``. Nothing is resolved at import time.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .._capabilities import Capability
from .._config import ConfigurationError, environ_setting
from .._errors import DriverNotFoundError, DriverUnavailableError
from ._frontend import Driver, HoldsValue

if TYPE_CHECKING:  # importlib.metadata costs ~30 ms (email, pathlib, ...): loaded on first discovery only
    from importlib.metadata import EntryPoint

__all__ = [
    "DRIVER_ENV",
    "ENTRY_POINT_GROUP",
    "DriverInfo",
    "active_driver_name",
    "available_drivers",
    "driver_for",
    "driver_infos",
    "framework_driver",
    "get_driver",
    "register_driver",
    "set_driver",
    "use_driver",
]

ENTRY_POINT_GROUP = "layoutcore.drivers"
DRIVER_ENV = "LAYOUTCORE_DRIVER"
DEFAULT_DRIVER = "numpy"

#: First-party drivers: how to install each when its entry point or framework is missing.
KNOWN_DRIVERS: dict[str, str] = {
    "numpy": "pip install layoutcore",
    "jax": "pip install 'layoutcore[jax]'",
    "tensorflow": "pip install 'layoutcore[tensorflow]'",
    "torch": "pip install 'layoutcore[torch]'",
}

DriverFactory = Callable[[], Driver]

_lock = threading.RLock()
_factories: dict[str, DriverFactory | EntryPoint] | None = None
_instances: dict[str, Driver] = {}
_global_choice: str | None = None
#: Type of a value -> the registered drivers whose ``native_types`` name it (or a base), by name.
#: Bounded by the number of distinct types passed in; cleared when a driver is registered.
_by_type: dict[type, tuple[str, ...]] = {}
# The Driver subclasses whose instances get_driver was handed: a subclass stays one, so its instances
# pass on a set lookup. Bounded by the classes a program defines.
_driver_types: set[type] = set()
_context_choice: contextvars.ContextVar[str | None] = contextvars.ContextVar("layoutcore_driver", default=None)


def _discover() -> dict[str, DriverFactory | EntryPoint]:
    global _factories
    with _lock:
        if _factories is None:
            import importlib.metadata

            found: dict[str, EntryPoint] = {}
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                if ep.name in found:
                    previous = found[ep.name]
                    if previous.value != ep.value:  # the same dist seen twice on sys.path is no conflict
                        warnings.warn(
                            f"layoutcore driver {ep.name!r} is registered twice ({previous.value} and {ep.value}); "
                            f"using {previous.value}.",
                            RuntimeWarning,
                            stacklevel=3,
                        )
                    continue
                found[ep.name] = ep
            _factories = dict(found)
        return _factories


def register_driver(name: str, factory: DriverFactory, *, replace: bool = False) -> None:
    """Register a driver class (or zero-argument factory) under ``name`` without an entry point.

    Raises:
        ConfigurationError: ``name`` is taken and ``replace`` is false (a ``ValueError``).
    """
    factories = _discover()
    with _lock:
        if name in factories and not replace:
            raise ConfigurationError(
                f"A layoutcore driver named {name!r} is already registered; pass replace=True.", value=name
            )
        factories[name] = factory
        _instances.pop(name, None)
        _by_type.clear()


def _installed_names() -> tuple[str, ...]:
    return tuple(sorted(_discover()))


def _loadable() -> Iterator[tuple[str, DriverFactory]]:
    """``(name, class)`` of every registered driver whose class loads (a broken plug-in is skipped), by name."""
    for name in sorted(_discover()):
        try:
            yield name, _load_class(name)
        except DriverUnavailableError:
            continue


def _usable_names() -> tuple[str, ...]:
    """Registered names whose class loads and whose required modules are present."""
    return tuple(name for name, factory in _loadable() if not _missing_requirements(factory))


def _load_class(name: str) -> DriverFactory:
    factories = _discover()
    if name not in factories:
        if name in KNOWN_DRIVERS:
            raise DriverUnavailableError(
                f"The {name!r} driver is not installed. Install it with: {KNOWN_DRIVERS[name]}",
                driver=name,
                install=KNOWN_DRIVERS[name],
            )
        installed = _usable_names()  # a registered driver whose framework is missing is not "installed"
        raise DriverNotFoundError(
            f"No layoutcore driver named {name!r}. Installed drivers: {list(installed)}. Third-party drivers "
            f"register under the {ENTRY_POINT_GROUP!r} entry-point group.",
            name=name,
            installed=installed,
        )
    entry = factories[name]
    if not callable(entry):  # an entry point (EntryPoint objects are not callable; factories are)
        try:
            loaded = entry.load()
        except Exception as exc:  # a broken plug-in (ImportError, SyntaxError, missing class ...)
            hint = KNOWN_DRIVERS.get(name, f"reinstall the package that provides {entry.value}")
            raise DriverUnavailableError(
                f"The {name!r} driver ({entry.value}) failed to import: {exc}. Install it with: {hint}",
                driver=name,
                install=hint,
            ) from exc
        return cast(DriverFactory, loaded)  # what the entry point names: a Driver class or factory
    return entry


def _missing_requirements(factory: DriverFactory) -> list[str]:
    required = getattr(factory, "requires", ())
    return [module for module in required if importlib.util.find_spec(module) is None]


def _install_hint(name: str, factory: DriverFactory) -> str:
    return getattr(factory, "install_hint", "") or KNOWN_DRIVERS.get(name, "")


def active_driver_name() -> str:
    """The name the selection rules give now (without loading the driver)."""
    return _context_choice.get() or _global_choice or (environ_setting(DRIVER_ENV) or "").strip() or DEFAULT_DRIVER


def get_driver(name: str | Driver | None = None) -> Driver:
    """The driver named ``name``, or the active one; each driver is created once per process.

    Raises:
        DriverNotFoundError: no driver of that name is installed (lists the installed ones).
        DriverUnavailableError: a known driver whose framework is missing (with the install command).
    """
    if type(name) in _driver_types:  # (isinstance with an ABC runs Python code: every call passes here)
        return name  # type: ignore[return-value]  # an instance of a Driver subclass: the set holds only those
    if type(name) is not str and isinstance(name, Driver):
        _driver_types.add(type(name))
        return name
    name = name or active_driver_name()
    found = _instances.get(name)  # junk is looked up as a name too, and refused below
    if found is not None:
        return found
    factory = _load_class(name)
    missing = _missing_requirements(factory)
    if missing:
        hint = _install_hint(name, factory)
        raise DriverUnavailableError(
            f"The {name!r} driver needs {missing}, which is not installed. Install it with: {hint}",
            driver=name,
            install=hint,
        )
    with _lock:
        if name not in _instances:
            driver = factory()
            if not isinstance(driver, Driver):
                raise DriverUnavailableError(
                    f"The {name!r} entry point gave {driver!r}, not a layoutcore Driver.", driver=name, install=""
                )
            _instances[name] = driver
        return _instances[name]


def driver_for(value: Any, driver: str | Driver | None = None) -> Driver:
    """The driver for a function that takes a distributed tensor: "the value chooses the driver".

    ``driver=`` wins, then :func:`use_driver` and :func:`set_driver`; then a Variable's own
    driver, or the registered driver that lists the value's type (or a base class of it) in
    :attr:`~layoutcore.Driver.native_types` and whose ``is_distributed`` accepts the value (a plain
    tensor of the same type, e.g. a TF EagerTensor that is no DTensor, is not claimed); then
    ``LAYOUTCORE_DRIVER``, else NumPy (docs/design.md#data-functions-made-precise). Types are matched by name: no framework is
    imported.

    Raises:
        DriverNotFoundError, DriverUnavailableError: see :func:`get_driver`.
    """
    if type(driver) in _driver_types:  # get_driver's first check, one call fewer: every data function passes here
        return driver  # type: ignore[return-value]  # an instance of a Driver subclass: the set holds only those
    if driver is not None or _context_choice.get() is not None or _global_choice is not None:
        return get_driver(driver)
    if isinstance(value, HoldsValue):
        own = getattr(value, "driver", None)
        if isinstance(own, Driver):
            return own
        value = value.value
    owners = _native_owners(type(value))
    # Several drivers may claim one type (a subclass of a driver keeps its native_types): the one the
    # environment selects wins among them, else the one that declares the type itself.
    selected = active_driver_name()
    name = selected if selected in owners else (owners[0] if owners else None)
    if name is not None:
        try:
            candidate = get_driver(name)
        except (DriverNotFoundError, DriverUnavailableError):
            candidate = None
        if candidate is not None and candidate.is_distributed(value):
            return candidate
    return get_driver(None)


def _native_owners(kind: type) -> tuple[str, ...]:
    """The drivers whose ``native_types`` name ``kind`` or a base class of it, by name (cached per type)."""
    try:
        return _by_type[kind]
    except KeyError:
        pass
    names = {f"{t.__module__}.{t.__qualname__}" for t in kind.__mro__}
    declared: list[str] = []
    inherited: list[str] = []
    for name, factory in _loadable():  # a broken plug-in claims nothing
        if names.intersection(getattr(factory, "native_types", ())):
            # A driver that declares the type itself comes before subclasses that inherit the claim.
            (declared if "native_types" in getattr(factory, "__dict__", {}) else inherited).append(name)
    owners = (*declared, *inherited)
    with _lock:
        if len(_by_type) >= 4096:  # a program that makes types without end: start over
            _by_type.clear()
        _by_type[kind] = owners
    return owners


def framework_driver(value: Any) -> Driver | None:
    """The driver of the framework that made ``value`` (distributed or plain, e.g. a plain torch tensor),
    or ``None``: the usable driver whose :attr:`~layoutcore.Driver.requires` names the top-level package
    of the value's type or of a base class of it (the selected driver first among several). No framework
    is imported: a value of the type exists, so its package is imported already.

    Raises:
        Nothing (a driver that cannot be created claims nothing).
    """
    packages = {t.__module__.partition(".")[0] for t in type(value).__mro__}
    owners = [name for name, factory in _loadable() if packages.intersection(getattr(factory, "requires", ()))]
    selected = active_driver_name()
    for name in sorted(owners, key=lambda n: n != selected):
        try:
            return get_driver(name)
        except (DriverNotFoundError, DriverUnavailableError):
            continue
    return None


def set_driver(name: str | None) -> None:
    """Make ``name`` the process-wide driver (``None`` restores the environment/default choice).

    Raises:
        DriverNotFoundError, DriverUnavailableError: see :func:`get_driver`.
    """
    global _global_choice
    if name is not None:
        get_driver(name)
    _global_choice = name


@contextlib.contextmanager
def use_driver(name: str) -> Iterator[Driver]:
    """Use driver ``name`` inside this context (per thread and asyncio task).

    Raises:
        DriverNotFoundError, DriverUnavailableError: see :func:`get_driver`.
    """
    driver = get_driver(name)
    token = _context_choice.set(name)
    try:
        yield driver
    finally:
        _context_choice.reset(token)


def available_drivers() -> list[str]:
    """Names of the registered drivers whose frameworks are installed."""
    return [info.name for info in driver_infos() if info.installed]


@dataclass(frozen=True, slots=True)
class DriverInfo:
    """What ``layoutcore drivers`` prints for one driver."""

    name: str
    installed: bool
    capabilities: frozenset[Capability]
    install_hint: str
    problem: str = ""


def driver_infos() -> list[DriverInfo]:
    """Every registered or known driver, whether it is usable, and its declared capabilities.

    A plug-in that fails to import is reported (and warned about), never fatal.
    """
    infos = []
    for name in sorted(set(_installed_names()) | set(KNOWN_DRIVERS)):
        try:
            factory = _load_class(name)
        except DriverUnavailableError as exc:
            if name in _discover():  # a registered plug-in that fails to import: say so, don't die
                warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
            infos.append(DriverInfo(name, False, frozenset(), exc.install, str(exc)))
            continue
        missing = _missing_requirements(factory)
        infos.append(
            DriverInfo(
                name,
                not missing,
                frozenset(getattr(factory, "capabilities", frozenset())),
                _install_hint(name, factory),
                f"missing {missing}" if missing else "",
            )
        )
    return infos
