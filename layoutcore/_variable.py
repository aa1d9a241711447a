"""``Variable``: a distributed value whose layout is fixed for life."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._dtypes import numpy_dtype
from ._errors import LayoutError, LayoutMismatchError, UnsupportedLayoutError
from ._layout import Layout
from ._layout_map import current_layout_map
from ._mesh import Mesh
from .driver._frontend import Driver, HoldsValue, dtype_name, known_dtype_name
from .driver._registry import driver_for

__all__ = ["DVariable", "Variable"]

#: Mesh axis of the default mesh a Variable without any layout is replicated on (keras' DataParallel name).
DEFAULT_AXIS = "batch"


class Variable(HoldsValue):
    """A mutable distributed value with a fixed layout (TF DTensor's ``DVariable``).

    Args:
        initial_value: a global value, or a distributed tensor of the driver.
        layout: the layout. With ``None``: a distributed initial value keeps its own;
            else, inside :func:`layout_map_scope`, the map's entry for ``path`` (fully
            replicated on the map's mesh where nothing matches); else fully replicated on a
            1-D mesh over all the driver's devices.
        path: the variable's name in the model, e.g. ``"dense/kernel"``.
        driver: a driver name or instance (default: the active driver).

    Raises:
        LayoutError: the layout does not fit the value (rank), or a LayoutMap without a
            mesh has no entry for ``path``.
        UnsupportedLayoutError: the driver cannot express the layout.
    """

    __slots__ = ("_driver", "_handle", "_layout", "_shape", "path")

    def __init__(
        self,
        initial_value: Any,
        layout: Layout | None = None,
        *,
        path: str | None = None,
        driver: str | Driver | None = None,
    ) -> None:
        if _is_keras_variable(initial_value):
            initial_value, path = _from_keras(initial_value, layout, path)
        drv = driver_for(initial_value, driver)
        if isinstance(initial_value, Variable):
            initial_value = initial_value.value
        if layout is None:
            layout = _default_layout(drv, initial_value, path)
        value = drv.distribute_tensor(initial_value, layout)
        self._driver = drv
        self._layout = layout
        self._shape = drv.shape_of(value)
        self._handle = drv.make_variable_state(value, layout)
        self.path = path

    @property
    def layout(self) -> Layout:
        """The layout, fixed at creation."""
        return self._layout

    @property
    def value(self) -> Any:
        """The current value, as the driver's native distributed tensor."""
        return self._driver.read_variable_state(self._handle, self._layout)

    @property
    def shape(self) -> tuple[int, ...]:
        """The global shape."""
        return self._shape

    @property
    def handle(self) -> Any:
        """The driver's variable state: TF's ``dtensor.DVariable``, torch's DTensor ``nn.Parameter``,
        or a :class:`VariableHandle` box for drivers without native variables."""
        return self._handle

    @property
    def dtype(self) -> Any:
        """The value's dtype (the framework's dtype object)."""
        return self.value.dtype

    @property
    def driver(self) -> Driver:
        """The driver holding the value."""
        return self._driver

    def assign(self, value: Any) -> Variable:
        """Replace the value; returns ``self``.

        A distributed ``value`` must already have this variable's layout, or the same axes on an
        equal mesh over the same devices under another name or abstractness (a framework op's output
        is read back on the first mesh bound to its devices; such a value is relaid out, moving
        nothing); a plain global value is distributed with it.

        The variable keeps its dtype (docs/design.md#data-functions-made-precise): a value of another dtype is cast to it where
        NumPy's ``same_kind`` rule allows (``int64`` into ``float32``, ``float64`` into
        ``float32``; integers into a narrower integer only where each fits), else refused.

        Raises:
            LayoutMismatchError: ``value`` is distributed with another layout, or has a dtype that
                ``same_kind`` does not cast to the variable's (``float32`` into ``int32``), or an
                integer that does not fit the variable's integer dtype (``2**40`` into ``int32``).
            LayoutError: ``value`` has another global shape, or is no array.
        """
        if isinstance(value, Variable):
            value = value.value
        drv = self._driver
        if drv.is_distributed(value):
            try:
                actual = drv.fetch_layout(value)
            except UnsupportedLayoutError as err:
                if err.feature != "partial":
                    raise
                # Pending sums (torch's Partial) have no Layout: reduce them into the variable's (docs/design.md#trees-and-model-code).
                value = drv.relayout(value, self._layout)
                actual = self._layout
            if actual != self._layout and actual.axes == self._layout.axes and drv._agrees(self._layout, actual):
                # The same blocks on the same devices, read back on an equal mesh under another name or
                # abstractness (a framework op's output is reported on the first mesh bound to its
                # devices): relaid out, it moves nothing and carries this variable's mesh.
                value = drv.relayout(value, self._layout)
            elif actual != self._layout:
                raise LayoutMismatchError(
                    f"Cannot assign a value laid out as {actual!r} to {self._name()} with layout "
                    f"{self._layout!r}; relayout it first.",
                    expected=self._layout,
                    actual=actual,
                )
        else:
            value = drv._global_value(value, "Variable.assign")
        shape = drv.shape_of(value)
        if shape != self._shape:
            raise LayoutError(
                f"Cannot assign a value of shape {shape} to {self._name()} of shape {self._shape}.",
                value=shape,
            )
        value = self._cast(value)
        if not drv.is_distributed(value):
            value = drv.distribute_tensor(value, self._layout)
        drv.assign_variable_state(self._handle, value)
        return self

    def _cast(self, value: Any) -> Any:
        """``value`` in the variable's dtype (through the host where it differs), or raise."""
        mine, theirs = _numpy_dtype(self.dtype), _numpy_dtype(getattr(value, "dtype", None))
        if mine is None or theirs is None or mine == theirs:
            return value  # the same dtype, or one NumPy cannot name (the driver's assign decides)
        if not np.can_cast(theirs, mine, "same_kind"):
            raise LayoutMismatchError(
                f"Cannot assign a value of dtype {theirs} to {self._name()} of dtype {mine}: NumPy's same_kind "
                "rule does not cast it. Cast it first.",
                expected=mine,
                actual=theirs,
            )
        drv = self._driver
        host = drv.to_numpy(value) if drv.is_distributed(value) else np.asarray(value)
        if mine.kind in "iu" and theirs.kind in "iu" and host.size:
            # same_kind lets int64 into int32, where NumPy wraps what does not fit: a changed value, refused
            info = np.iinfo(mine)
            outside = (host < info.min) | (host > info.max)
            if outside.any():
                first = tuple(int(i) for i in np.argwhere(outside)[0])
                raise LayoutMismatchError(
                    f"Cannot assign to {self._name()} of dtype {mine}: element {first} is {host[first].item()!r}, "
                    f"outside {mine}'s range [{info.min}, {info.max}]. Cast it first.",
                    expected=mine,
                    actual=theirs,
                )
        return host.astype(mine)

    def _name(self) -> str:
        return f"variable {self.path!r}" if self.path else "a variable"

    def numpy(self) -> Any:
        """The global value as a NumPy array."""
        return self._driver.to_numpy(self.value)

    def __repr__(self) -> str:
        path = f"path={self.path!r}, " if self.path is not None else ""
        return f"Variable({path}shape={self._shape}, dtype={self.dtype}, layout={self._layout}, driver={self._driver.name!r})"


#: Where keras 3 defines its Variable base class (matched by name: keras is never imported here).
_KERAS_VARIABLE = "keras.src.backend.common.variables.Variable"


def _is_keras_variable(value: Any) -> bool:
    return any(f"{t.__module__}.{t.__qualname__}" == _KERAS_VARIABLE for t in type(value).__mro__)


def _from_keras(variable: Any, layout: Layout | None, path: str | None) -> tuple[Any, str | None]:
    """A keras variable's current (distributed) value and path, keeping its sharding.

    Raises:
        LayoutError: the keras variable carries a keras layout but its value is no distributed
            tensor (its sharding would be lost); pass ``layout=`` or distribute it first.
    """
    value = variable.value
    keras_layout = getattr(variable, "_layout", None)
    name = path if path is not None else getattr(variable, "path", None)
    if layout is None and keras_layout is not None:
        drv = driver_for(value)
        if not drv.is_distributed(value):
            raise LayoutError(
                f"keras variable {name!r} has keras layout {keras_layout!r}, but its value "
                f"({type(value).__module__}.{type(value).__qualname__}) is no distributed tensor of the "
                f"{drv.name} driver, so that sharding would be lost; pass layout= explicitly.",
                value=variable,
            )
    return value, name


def _numpy_dtype(dtype: Any) -> np.dtype[Any] | None:
    if dtype is None:
        return None
    known = known_dtype_name(dtype)
    if known is not None:  # one of the 18: ml_dtypes' bfloat16/float8 included
        return numpy_dtype(known)
    try:
        return np.dtype(dtype_name(dtype))
    except TypeError:
        return None


def _default_layout(drv: Driver, initial_value: Any, path: str | None) -> Layout:
    if drv.is_distributed(initial_value):
        return drv.fetch_layout(initial_value)
    shape = drv.shape_of(drv.prepare_input(initial_value))
    layout_map = current_layout_map()
    if layout_map is not None and path is not None:
        return layout_map.layout_for(path, shape)
    return Layout.replicated(Mesh((len(drv.list_devices()),), (DEFAULT_AXIS,)), len(shape))


#: TF DTensor's name for :class:`Variable`.
DVariable = Variable
