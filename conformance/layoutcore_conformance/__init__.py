"""layoutcore's driver conformance suite (pytest).

Run it against the active driver with ``layoutcore conformance`` (or
``LAYOUTCORE_DRIVER=name pytest --pyargs layoutcore_conformance``).
"""

from .adapter import ConformanceAdapter, load_adapter

__all__ = ["ConformanceAdapter", "load_adapter"]
