"""Moving weights between jobs: ``layoutcore.transfer`` (``docs/design.md#moving-weights-between-jobs``, docs/transfer.md).

:func:`plan` says, without data, which rectangle of which sender tensor goes from which process
rank to which, at the physical floor; :class:`Link` runs it over ``torch.distributed``
point-to-point between two groups of processes of any drivers. Importing this module imports no
framework (torch is imported when a ``Link`` is made).
"""

from __future__ import annotations

from .._errors import TransferError
from ._link import Link, TransferReport
from ._plan import Piece, TransferPlan, plan
from ._routes import Route

__all__ = ["Link", "Piece", "Route", "TransferError", "TransferPlan", "TransferReport", "plan"]
