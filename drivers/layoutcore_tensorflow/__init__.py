"""layoutcore's TensorFlow driver: :class:`~layoutcore.Mesh` and :class:`~layoutcore.Layout` on ``tf.experimental.dtensor``.

Select it with ``LAYOUTCORE_DRIVER=tensorflow``, ``layoutcore.set_driver("tensorflow")`` or
``driver="tensorflow"``. Importing this package does not import TensorFlow; the driver imports it
on first use, after applying ``LAYOUTCORE_CPU_DEVICES`` as TF logical CPU devices.

Public conversions (round-trip tested): :func:`to_tensorflow_mesh` / :func:`from_tensorflow_mesh`,
:func:`to_tensorflow_layout` / :func:`from_tensorflow_layout`, and the seed ``Layout`` API's binary
forms :func:`as_proto`, :func:`serialized_string`, :func:`mesh_proto`, :func:`from_str`,
:func:`from_proto`. Multi-client runs start with :func:`initialize_multi_client`.

With tf-keras installed, ``layoutcore.layout_map_scope`` gives tf-keras models' variables their
mapped layouts; inside ``tf.function`` the data functions work on symbolic tensors
(``Capability.TRACED``). At most :data:`MAX_NATIVE_MESHES` distinct meshes per process
(:class:`MeshLimitError`): TF keeps OS threads for every mesh it used.
"""

from __future__ import annotations

from ._convert import (
    MAX_NATIVE_MESHES,
    MeshLimitError,
    as_proto,
    from_proto,
    from_str,
    from_tensorflow_layout,
    from_tensorflow_mesh,
    mesh_proto,
    serialized_string,
    to_tensorflow_layout,
    to_tensorflow_mesh,
)
from ._driver import TensorFlowDriver
from ._runtime import MultiClientInitError, initialize_multi_client

__all__ = [
    "MAX_NATIVE_MESHES",
    "MeshLimitError",
    "MultiClientInitError",
    "TensorFlowDriver",
    "as_proto",
    "from_proto",
    "from_str",
    "from_tensorflow_layout",
    "from_tensorflow_mesh",
    "initialize_multi_client",
    "mesh_proto",
    "serialized_string",
    "to_tensorflow_layout",
    "to_tensorflow_mesh",
]
