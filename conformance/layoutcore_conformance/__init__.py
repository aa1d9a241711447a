"""layoutcore's driver conformance suite (pytest).

Run it against a driver with ``layoutcore conformance --driver NAME``, equivalently
``LAYOUTCORE_DRIVER=NAME python -m pytest --pyargs layoutcore_conformance`` or
``python -m layoutcore_conformance --driver NAME``. A driver names its raw-data adapter (a
:class:`ConformanceAdapter` subclass) in ``Driver.conformance_adapter``.
"""

from ._runner import run
from .adapter import ConformanceAdapter, load_adapter

__all__ = ["ConformanceAdapter", "load_adapter", "run"]
