"""TensorSpec <-> TF DTensor layouts and layout strings.

TF's layout string (``sharding_specs:x,unsharded, mesh:<mesh string>``) carries one mesh axis
per tensor axis and a concrete mesh. Refused (typed): a tensor axis over several mesh axes
(TF has no such layout, ``feature="multi_axis"``); coming in, TF's single-device, parted and
``match`` layouts. An uneven layout converts (TF states none of its own, and the TF driver's
chunk rule is layoutcore's), and abstract meshes bind to this process's first CPU devices.
"""

from __future__ import annotations

from typing import Any

from layoutcore import Layout, LayoutError, TensorSpec, UnsupportedLayoutError
from layoutcore.driver import Capability

from ._convert import from_tensorflow_layout, to_tensorflow_layout

__all__ = ["spec_from_layout_string", "spec_from_tf", "to_layout_string", "to_tf_layout"]


def to_tf_layout(spec: TensorSpec | Layout) -> Any:
    """The ``tf.experimental.dtensor.Layout`` of a TensorSpec's (or a bound Layout's) layout.

    Raises:
        UnsupportedLayoutError: a tensor axis over several mesh axes (``feature="multi_axis"``).
    """
    layout = spec.layout if isinstance(spec, TensorSpec) else spec
    for dim, names in enumerate(layout.axes):
        if isinstance(names, tuple) and len(names) > 1:
            raise UnsupportedLayoutError(
                f"TF DTensor cannot express {layout}: tensor axis {dim} is split over mesh axes {names}; TF layouts "
                "name one mesh axis per tensor axis.",
                driver="tensorflow",
                feature=Capability.MULTI_AXIS,
                value=layout,
            )
    return to_tensorflow_layout(layout)


def to_layout_string(spec: TensorSpec | Layout) -> str:
    """TF's layout string of ``spec`` (what ``dtensor.Layout.to_string()`` prints)."""
    return str(to_tf_layout(spec).to_string())


def spec_from_layout_string(text: str, shape: tuple[int, ...], dtype: Any) -> TensorSpec:
    """The :class:`TensorSpec` of a TF layout string with the tensor's shape and dtype.

    Raises:
        LayoutError: a string TF does not parse, or a layout that is not static and sharded.
    """
    from ._runtime import tf_modules

    _, dtensor = tf_modules()
    try:
        native = dtensor.Layout.from_string(text)
    except Exception as err:  # TF raises ValueError or its own errors for malformed strings
        raise LayoutError(f"TF cannot parse layout string {text!r}: {err}", value=text) from None
    return TensorSpec(shape, dtype, from_tensorflow_layout(native))


def spec_from_tf(tensor: Any) -> TensorSpec:
    """The :class:`TensorSpec` of a TF DTensor (``dtensor.fetch_layout``, shape and dtype)."""
    from ._runtime import tf_modules

    _, dtensor = tf_modules()
    layout: Layout = from_tensorflow_layout(dtensor.fetch_layout(tensor))
    return TensorSpec(tuple(int(s) for s in tensor.shape), tensor.dtype.name, layout)
