"""Worker threads for checkpoint I/O: a pool, each thread's own descriptors and buffer, bounded memory.

Checkpoint I/O is kernel copies (``preadv``/``writev`` against the page cache), page faults on
fresh memory and CRC-32C checks, all of which run with the GIL released, so worker threads use as
many cores. ``LAYOUTCORE_CHECKPOINT_THREADS`` sets how many (``layoutcore._config``); with one,
every task runs on the calling thread and no pool is started.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

__all__ = ["AHEAD_BYTES", "ThreadWork", "WriteQueue"]

#: Host bytes handed to the workers ahead of the caller (blocks being written, tensors read
#: ahead of the one the caller waits for), at most, beyond the one task the caller waits on.
AHEAD_BYTES = 64 << 20


class ThreadWork:
    """A pool of ``threads`` workers (none for 1) and each worker's state: open descriptors
    (file -> fd) and a one-element list holding a reusable uint8 buffer. A context manager that
    calls :meth:`close` on exit."""

    def __init__(self, threads: int, name: str) -> None:
        self.threads = threads
        self._local = threading.local()
        self._fds: list[dict[str, int]] = []
        self._lock = threading.Lock()
        self._stack = contextlib.ExitStack()
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix=name) if threads > 1 else None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Wait for running tasks, drop queued ones, close every descriptor (idempotent)."""
        try:
            self._stack.close()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
            with self._lock:
                opened, self._fds = self._fds, []
            for fds in opened:
                for fd in fds.values():
                    with contextlib.suppress(OSError):
                        os.close(fd)
                fds.clear()

    def enter(self, cm: Any) -> Any:
        """Enter ``cm`` (e.g. a progress bar) until this object exits."""
        return self._stack.enter_context(cm)

    def state(self) -> tuple[dict[str, int], list[np.ndarray[Any, Any]]]:
        """The calling thread's descriptors and buffer (created on first use)."""
        local = self._local
        if not hasattr(local, "fds"):
            local.fds, local.scratch = {}, [np.empty(0, dtype=np.uint8)]
            with self._lock:
                self._fds.append(local.fds)
        return local.fds, local.scratch


class WriteQueue(ThreadWork):
    """Tasks run on the workers in submission order, at most :data:`AHEAD_BYTES` of them queued.

    ``submit`` blocks while the queued tasks' bytes exceed the bound (their inputs are host
    memory the caller may have made for them, e.g. a device's block copied to host), and
    re-raises the first failed task's error; ``wait`` waits for all and does the same.
    """

    def __init__(self, threads: int, name: str) -> None:
        super().__init__(threads, name)
        self._queued: deque[tuple[Future[Any], int]] = deque()
        self._bytes = 0

    def submit(self, nbytes: int, fn: Callable[..., Any], *args: Any) -> None:
        if self.pool is None:
            fn(*args)
            return
        while self._queued and self._bytes + nbytes > AHEAD_BYTES:
            self._done_oldest()
        self._queued.append((self.pool.submit(fn, *args), nbytes))
        self._bytes += nbytes

    def wait(self) -> None:
        while self._queued:
            self._done_oldest()

    def _done_oldest(self) -> None:
        future, nbytes = self._queued.popleft()
        self._bytes -= nbytes
        future.result()
