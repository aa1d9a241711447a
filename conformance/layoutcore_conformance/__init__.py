"""layoutcore's driver conformance suite (pytest).

Run it against a driver with ``layoutcore conformance --driver NAME``, equivalently
``LAYOUTCORE_DRIVER=NAME python -m pytest --pyargs layoutcore_conformance`` or
``python -m layoutcore_conformance --driver NAME``. A driver package registers its raw-data adapter
(a :class:`ConformanceAdapter` subclass) under the driver's name in the ``layoutcore.conformance_adapters``
entry-point group (:data:`ADAPTER_GROUP`), or with :func:`register_adapter`.
"""

from ._runner import run
from .adapter import ADAPTER_GROUP, ConformanceAdapter, load_adapter, register_adapter

__all__ = ["ADAPTER_GROUP", "ConformanceAdapter", "load_adapter", "register_adapter", "run"]
