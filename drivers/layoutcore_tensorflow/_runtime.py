"""Starting TensorFlow for layoutcore: logical CPU devices, device names, multi-client set-up.

TensorFlow is imported here, lazily (``import layoutcore_tensorflow`` does not import it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from layoutcore import ConfigurationError, LayoutcoreError
from layoutcore.driver import CPU_DEVICES_ENV, canonical_devices, cpu_device_count

__all__ = ["MultiClientInitError", "initialize_multi_client"]

_lock = threading.Lock()
_configured = False
_warned_initialised = False


def tf_modules() -> tuple[ModuleType, ModuleType]:
    """``(tensorflow, tensorflow.experimental.dtensor)``, imported on first use.

    TF's C++ start-up chatter is silenced unless the user chose a log level.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    return tf, dtensor


def leave_layoutcore_to_python() -> None:
    """Tell autograph (``tf.function``'s default) not to rewrite layoutcore's own code.

    Called inside a ``tf.function``, layoutcore's functions are plain Python that runs once while
    TF traces; autograph would otherwise convert them, and every helper they call, and warn where
    it cannot. ``DoNotConvert`` is how TF itself exempts numpy and its own modules.
    """
    try:
        from tensorflow.python.autograph.core import config
    except ImportError:  # pragma: no cover - TF moved it; autograph then converts (and may warn)
        return
    ours = tuple(config.DoNotConvert(name) for name in ("layoutcore", "layoutcore_tensorflow"))
    if not any(rule.matches("layoutcore") for rule in config.CONVERSION_RULES):
        config.CONVERSION_RULES = ours + tuple(config.CONVERSION_RULES)


def accelerator_system_initialized() -> bool:
    """Whether ``dtensor.initialize_accelerator_system`` ran in this process (multi-client set-up)."""
    tf_modules()
    try:
        from tensorflow.dtensor.python import accelerator_util
    except ImportError:  # pragma: no cover - TF moved it; then only the public API is known
        return False
    return bool(accelerator_util.is_initialized())


def configure_cpu_devices() -> None:
    """Apply ``LAYOUTCORE_CPU_DEVICES`` as TF logical CPU devices, once, before TF starts.

    Where TF's runtime already started (someone ran an op, or listed logical devices), its
    devices stand: a :class:`RuntimeWarning` says so once per process, naming the count. After
    :func:`initialize_multi_client` the accelerator system owns the devices and nothing is said.

    Raises:
        ConfigurationError: ``LAYOUTCORE_CPU_DEVICES`` is not a positive integer.
    """
    global _configured, _warned_initialised
    with _lock:
        if _configured:
            return
        wanted = cpu_device_count()
        tf, _ = tf_modules()
        if accelerator_system_initialized():
            _configured = True
            return
        cpu = tf.config.list_physical_devices("CPU")
        try:
            tf.config.set_logical_device_configuration(cpu[0], [tf.config.LogicalDeviceConfiguration()] * wanted)
        except RuntimeError:
            # "Virtual devices cannot be modified after being initialized": TF already runs.
            have = len(tf.config.list_logical_devices("CPU"))
            if have != wanted and not _warned_initialised:
                _warned_initialised = True
                warnings.warn(
                    f"TensorFlow was initialised before layoutcore could apply {CPU_DEVICES_ENV}={wanted}; "
                    f"its {have} logical CPU device(s) stand. Import layoutcore's tensorflow driver (or call "
                    "layoutcore.get_driver('tensorflow')) before running any TensorFlow op to get "
                    f"{wanted}.",
                    RuntimeWarning,
                    stacklevel=4,
                )
        _configured = True


def canonical_names(names: Sequence[Any]) -> tuple[str, ...]:
    """layoutcore's canonical device names for TF device names or ``DeviceSpec`` objects."""
    return canonical_devices(list(names))  # the one naming rule of every driver


def full_name(device: str) -> str:
    """A TF full device name (``/job:…/replica:…/task:…/device:CPU:i``) for a canonical name."""
    return device if device.startswith("/") else f"/job:localhost/replica:0/task:0/device:{device}"


def global_device_names() -> tuple[tuple[str, ...], frozenset[str]]:
    """``(every device of the DTensor cluster in global-id order, this client's devices)``.

    Single client: the local logical devices. Multi-client: the devices of every client,
    task by task, as ``dtensor.create_distributed_mesh`` numbers them (each client has the
    same number of local devices).
    """
    tf, dtensor = tf_modules()
    local = [d.name for d in tf.config.list_logical_devices()]
    if dtensor.num_clients() <= 1 or not accelerator_system_initialized():
        names = canonical_names(local)
        return names, frozenset(names)
    by_type: dict[str, int] = {}
    for spec in dtensor.local_devices("CPU"):
        by_type[spec.device_type] = by_type.get(spec.device_type, 0) + 1
    job = dtensor.job_name()
    everything = [
        f"/job:{job}/replica:0/task:{task}/device:{dtype}:{i}"
        for dtype, count in by_type.items()
        for task in range(dtensor.num_clients())
        for i in range(count)
    ]
    mine = [
        f"/job:{job}/replica:0/task:{dtensor.client_id()}/device:{t}:{i}" for t, c in by_type.items() for i in range(c)
    ]
    return canonical_names(everything), frozenset(canonical_names(mine))


class MultiClientInitError(LayoutcoreError, RuntimeError):
    """Multi-client DTensor set-up was asked for with bad arguments, or too late."""


_WATCHDOG = r"""
import os, select, signal, sys
pid, timeout, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ready, _, _ = select.select([sys.stdin], [], [], timeout)
if not ready:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


def initialize_multi_client(
    client_id: int,
    jobs: Sequence[str],
    *,
    num_cpu_devices: int | None = None,
    job_name: str = "worker",
    timeout: float = 60.0,
) -> tuple[str, ...]:
    """Join a multi-client DTensor cluster on CPU, waiting at most ``timeout`` seconds.

    Sets ``DTENSOR_CLIENT_ID``, ``DTENSOR_JOB_NAME``, ``DTENSOR_JOBS`` and
    ``DTENSOR_NUM_CLIENTS`` and runs ``dtensor.initialize_accelerator_system("CPU",
    num_logical_cpu_devices=...)``. Call it first, before any TF op and before the driver is
    used. Afterwards ``layoutcore.list_devices(driver="tensorflow")`` lists every client's
    devices (full names such as ``"/job:worker/replica:0/task:1/device:CPU:0"``), an abstract
    mesh binds to them all, and ``unpack``/``pack`` hold this client's components only.

    TF waits for every client inside one C++ call that holds the GIL and ignores SIGTERM, so
    a missing client would hang this process forever. A watchdog process bounds the wait: if
    the rendezvous has not finished after ``timeout`` seconds it writes a message naming the
    clients to stderr and ends this process with SIGKILL (exit status ``-9``).

    Args:
        client_id: this client's index in ``jobs``.
        jobs: ``"host:port"`` of every client, the same list in every client.
        num_cpu_devices: logical CPUs per client (default ``LAYOUTCORE_CPU_DEVICES``).
        job_name: the TF job name of the cluster.
        timeout: seconds to wait for all clients before the process is ended.

    Returns:
        The canonical names of every device of the cluster, in global-id order.

    Raises:
        MultiClientInitError: bad arguments, or TF's accelerator system already initialised.
    """
    jobs = list(jobs)
    if len(jobs) < 1 or any(not isinstance(j, str) or ":" not in j or "," in j for j in jobs):
        raise MultiClientInitError(f"jobs must be 'host:port' strings, one per client. Received: {jobs!r}", value=jobs)
    if isinstance(client_id, bool) or not isinstance(client_id, int) or not 0 <= client_id < len(jobs):
        raise MultiClientInitError(
            f"client_id must be an int in 0..{len(jobs) - 1} for {len(jobs)} jobs. Received: {client_id!r}",
            value=client_id,
        )
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise MultiClientInitError(
            f"timeout must be a positive number of seconds. Received: {timeout!r}", value=timeout
        )
    count = cpu_device_count() if num_cpu_devices is None else num_cpu_devices
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        raise ConfigurationError(f"num_cpu_devices must be a positive int. Received: {count!r}", value=count)
    os.environ.update(
        DTENSOR_CLIENT_ID=str(client_id),
        DTENSOR_JOB_NAME=job_name,
        DTENSOR_JOBS=",".join(jobs),
        DTENSOR_NUM_CLIENTS=str(len(jobs)),
    )
    _, dtensor = tf_modules()
    if accelerator_system_initialized():
        raise MultiClientInitError(
            "DTensor's accelerator system is already initialised in this process; initialize_multi_client must "
            "run once, before any TensorFlow op.",
            value=client_id,
        )
    message = (
        f"layoutcore_tensorflow: DTensor multi-client initialisation of client {client_id} of {len(jobs)} "
        f"(jobs {jobs}) did not finish within {timeout:g} s: not every client joined. TensorFlow waits "
        "forever and ignores SIGTERM there, so the watchdog ended this process with SIGKILL."
    )
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), repr(float(timeout)), message],
        stdin=subprocess.PIPE,
    )
    try:
        dtensor.initialize_accelerator_system("CPU", num_logical_cpu_devices=count)
    finally:
        # Closing the pipe (or this process dying) releases the watchdog.
        assert watchdog.stdin is not None
        watchdog.stdin.close()
        watchdog.wait()
    global _configured
    with _lock:
        _configured = True
    return global_device_names()[0]
