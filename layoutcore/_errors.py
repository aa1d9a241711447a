"""Exception hierarchy.

Every error layoutcore raises derives from :class:`LayoutcoreError` and also from the
builtin a user would naturally catch (``ValueError`` for bad values, ``NotImplementedError``
for valid layouts a driver cannot express, ...). Each error keeps the offending value on
``.value`` as well as naming it in the message.
"""

from __future__ import annotations

import pickle
from typing import Any

from ._capabilities import Capability, Feature, Limitation

__all__ = [
    "AmbiguousLayoutError",
    "CheckpointError",
    "DriverNotFoundError",
    "DriverUnavailableError",
    "LayoutError",
    "LayoutMismatchError",
    "LayoutcoreError",
    "NotDistributedError",
    "UnmatchedPathError",
    "UnmatchedPathWarning",
    "UnsupportedLayoutError",
]

_NO_VALUE: Any = object()


class _PicklesByState:
    """Mixin: an exception that pickles as its class, its ``args`` and its attributes.

    ``BaseException.__reduce__`` rebuilds an exception as ``cls(*args)``, which fails for any
    subclass with keyword-only constructor arguments (``CheckpointError(msg, path=...)``): the
    unpickling ``TypeError`` then replaces the real error in ``multiprocessing``,
    ``concurrent.futures`` and torch DCP's exception gathering. Here the copy is rebuilt without
    calling ``__init__``: the class's ``__new__``, then ``args`` and ``__dict__`` restored as
    they were, so every subclass (present or future) keeps its type, message and attributes.
    An attribute that cannot be pickled (a framework object holding a lock, say) arrives as its
    ``repr`` rather than failing the whole error.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        state = {name: _Portable(item) for name, item in vars(self).items()}
        return (_rebuild, (type(self), self.args, state))  # type: ignore[attr-defined]


class _Portable:
    """One attribute of a pickled error: pickled on its own, so one bad attribute degrades alone."""

    def __init__(self, item: Any) -> None:
        self.item = item

    def __reduce__(self) -> tuple[Any, ...]:
        try:
            return (pickle.loads, (pickle.dumps(self.item, protocol=pickle.HIGHEST_PROTOCOL),))
        except Exception:  # any pickling failure: the attribute travels as text
            return (str, (f"<unpicklable {type(self.item).__qualname__}: {_short_repr(self.item)}>",))


def _short_repr(item: Any) -> str:
    try:
        text = repr(item)
    except Exception:  # a repr that raises: say so rather than fail the error
        return "(repr failed)"
    return text if len(text) <= 200 else text[:200] + "..."


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    """The unpickled error: ``cls`` with ``args`` and attributes ``state``; ``__init__`` is not called."""
    error = cls.__new__(cls, *args)
    # the first builtin class's own __init__ (ImportError keeps ``msg``, the others ``args`` only)
    builtin = next(base for base in cls.__mro__ if base.__module__ == "builtins")
    builtin.__init__(error, *args)  # type: ignore[misc]  # the builtin base, not a subclass override
    # copy.copy passes the wrappers themselves (only pickling reduces them to their items)
    error.__dict__.update({name: item.item if isinstance(item, _Portable) else item for name, item in state.items()})
    return error


class LayoutcoreError(_PicklesByState, Exception):
    """Base class of every error raised by layoutcore.

    Every subclass pickles (``pickle``, ``multiprocessing``, ``concurrent.futures``, torch DCP's
    error gathering) to the same type, message and attributes, whatever its constructor takes.

    Attributes:
        value: the offending value, when there is one (else ``None``).
    """

    def __init__(self, message: str, *, value: Any = _NO_VALUE) -> None:
        super().__init__(message)
        self.value = None if value is _NO_VALUE else value


class LayoutError(LayoutcoreError, ValueError):
    """An invalid mesh, layout, layout map, or a value that does not fit its layout."""


class AmbiguousLayoutError(LayoutError):
    """A path matched more than one LayoutMap pattern.

    Attributes:
        path: the looked-up path.
        patterns: every matching pattern, in insertion order.
    """

    def __init__(self, message: str, *, path: str, patterns: tuple[str, ...]) -> None:
        super().__init__(message, value=path)
        self.path = path
        self.patterns = patterns


class LayoutMismatchError(LayoutError):
    """A value's layout differs from the one required (e.g. ``Variable.assign``).

    Attributes:
        expected: the required layout.
        actual: the value's layout.
    """

    def __init__(self, message: str, *, expected: Any, actual: Any) -> None:
        super().__init__(message, value=actual)
        self.expected = expected
        self.actual = actual


class UnsupportedLayoutError(LayoutcoreError, NotImplementedError):
    """A valid layout (or operation) that a driver cannot express.

    Attributes:
        driver: the driver's name.
        feature: what is missing: a :class:`~layoutcore.driver.Capability` the driver does not declare
            (``Capability.UNEVEN``), or a :class:`~layoutcore.driver.Limitation` no capability lifts
            (``Limitation.DTYPE``). Both are ``StrEnum`` members, equal to their string values
            (``err.feature == "uneven"``); ``docs/errors.md`` lists them all.

    Raises:
        TypeError: ``feature`` is neither a member nor the value of one (at construction).
    """

    def __init__(self, message: str, *, driver: str, feature: Feature, value: Any = _NO_VALUE) -> None:
        super().__init__(message, value=value)
        self.driver = driver
        self.feature: Feature = _feature(feature)


def _feature(feature: object) -> Feature:
    if isinstance(feature, (Capability, Limitation)):
        return feature
    for kind in (Capability, Limitation):
        if isinstance(feature, str) and feature in kind._value2member_map_:
            return kind(feature)
    raise TypeError(
        f"UnsupportedLayoutError(feature=...) takes a Capability or a Limitation member (layoutcore.driver); "
        f"received {feature!r}. Add a Limitation member for a new kind of refusal."
    )


class NotDistributedError(LayoutcoreError, TypeError):
    """A function that needs a distributed tensor of the driver received something else."""


class DriverNotFoundError(LayoutcoreError, LookupError):
    """No driver of that name is installed.

    Attributes:
        name: the requested name.
        installed: the names that are installed.
    """

    def __init__(self, message: str, *, name: str, installed: tuple[str, ...]) -> None:
        super().__init__(message, value=name)
        self.name = name
        self.installed = installed


class DriverUnavailableError(LayoutcoreError, ImportError):
    """A known driver whose framework is not installed (or cannot start).

    Attributes:
        driver: the driver's name.
        install: the command that installs what it needs.
    """

    def __init__(self, message: str, *, driver: str, install: str) -> None:
        super().__init__(message, value=driver)
        self.driver = driver
        self.install = install


class UnmatchedPathError(LayoutError):
    """No LayoutMap pattern matches a path and the map says ``on_missing="error"``.

    Attributes:
        paths: the unmatched paths.
        near_misses: for each of the first paths (the ten the message names), the closest patterns.
    """

    def __init__(self, message: str, *, paths: tuple[str, ...], near_misses: tuple[tuple[str, ...], ...]) -> None:
        super().__init__(message, value=paths[0] if len(paths) == 1 else paths)
        self.paths = paths
        self.near_misses = near_misses


class UnmatchedPathWarning(_PicklesByState, UserWarning):
    """No LayoutMap pattern matches a path and the map says ``on_missing="warn"``; it is replicated.

    Attributes:
        paths: the unmatched paths.
        near_misses: for each of the first paths (the ten the message names), the closest patterns.
    """

    def __init__(
        self, message: str, *, paths: tuple[str, ...] = (), near_misses: tuple[tuple[str, ...], ...] = ()
    ) -> None:
        super().__init__(message)
        self.paths = paths
        self.near_misses = near_misses


class CheckpointError(LayoutcoreError):
    """A missing, incomplete, corrupt (checksum mismatch, truncated, missing shard) or unknown checkpoint.

    Attributes:
        path: the checkpoint directory.
        file: the offending file inside it (or ``None`` when the whole checkpoint is at fault).
        tensor: the tensor path in the saved tree (or ``None``).
    """

    def __init__(self, message: str, *, path: Any, file: Any = None, tensor: str | None = None) -> None:
        super().__init__(message, value=file if file is not None else path)
        self.path = path
        self.file = file
        self.tensor = tensor
