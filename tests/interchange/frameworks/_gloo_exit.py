"""How the gloo workers of this directory leave once their work is reported."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_after_gloo(code: int = 0) -> NoReturn:
    """Flush and leave at once, without C++ static destructors.

    Call it after the worker printed its result and destroyed its process group. Under load, gloo's
    teardown at interpreter exit aborted the process after a clean ``destroy_process_group``
    ("terminate called without an active exception", SIGABRT). That failed a test whose worker had
    done and reported its work: ``test_dcp_storage_reader_fills_dtensors`` in a fresh-clone CI run,
    and ``mp_torch_dtypes_worker`` earlier, which leaves the same way.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
