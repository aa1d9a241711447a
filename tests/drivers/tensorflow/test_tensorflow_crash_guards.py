"""TF calls that kill the interpreter on bad input (docs/framework-facts.md#tf-crash-traps) cannot be reached through layoutcore.

Each request runs twice, in fresh interpreters: through layoutcore, where it must raise a clean
layoutcore error and the process must go on; and straight through TF, where TF never raises a
clean error: the process dies by a signal, or, where the crash is undefined behaviour (an
out-of-bounds read, e.g. ``batch_sharded(axis=-1)``), it sometimes survives with a garbage layout,
or, where the crash is C++'s ``std::stoi`` exception, the ``tensorflow`` wheel (which tf-keras
installs over ``tensorflow-cpu``) surfaces it as a bare ``ValueError: stoi`` naming nothing.
That shows the guard guards something real; if TF ever raises a proper error instead, the control
fails and the guard's comment can be revisited.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from _tf_helpers import child_env, run_python

SETUP = (
    "import numpy as np\n"
    "import layoutcore as lc, layoutcore_tensorflow as lctf\n"
    "lc.set_driver('tensorflow')\n"
    "import tensorflow as tf\n"
    "from tensorflow.experimental import dtensor\n"
    "mesh = lc.Mesh((3, 2), ('x', 'y'))\n"
    "devices = [f'/job:localhost/replica:0/task:0/device:CPU:{i}' for i in range(6)]\n"
    "REMOTE = '|x=3,y=2|0,1,2,3,4,5||'\n"
)

#: name -> (the request through layoutcore, the same request straight to TF).
CASES = {
    "batch_sharded axis out of range": (
        "lc.Layout.batch_sharded(mesh, 'x', rank=2, axis=5)",
        "dtensor.Layout.batch_sharded(lctf.to_tensorflow_mesh(mesh), 'x', rank=2, axis=5)",
    ),
    "batch_sharded negative axis": (
        "lc.Layout.batch_sharded(mesh, 'x', rank=2, axis=-1)",
        "dtensor.Layout.batch_sharded(lctf.to_tensorflow_mesh(mesh), 'x', rank=2, axis=-1)",
    ),
    "batch_sharded rank 0": (
        "lc.Layout.batch_sharded(mesh, 'x', rank=0)",
        "dtensor.Layout.batch_sharded(lctf.to_tensorflow_mesh(mesh), 'x', rank=0)",
    ),
    "inner_sharded rank 0": (
        "lc.Layout.inner_sharded(mesh, 'y', rank=0)",
        "dtensor.Layout.inner_sharded(lctf.to_tensorflow_mesh(mesh), 'y', rank=0)",
    ),
    "from_string of a mesh axis named 'a,b'": (
        "lc.Mesh.from_string('|a,b=6|0,1,2,3,4,5|0,1,2,3,4,5|' + ','.join(devices))",
        "dtensor.Mesh.from_string('|a,b=6|0,1,2,3,4,5|0,1,2,3,4,5|' + ','.join(devices))",
    ),
    "a TF mesh with axis 'a,b' (TF's constructor accepts it)": (
        "lctf.from_tensorflow_mesh(dtensor.Mesh(['a,b'], np.arange(6), list(range(6)), devices))",
        "dtensor.Mesh.from_string(dtensor.Mesh(['a,b'], np.arange(6), list(range(6)), devices).to_string())",
    ),
    "a remote mesh": (
        "lctf.from_tensorflow_layout(dtensor.Layout(['x', 'unsharded'], dtensor.Mesh.from_string(REMOTE)))",
        "dtensor.call_with_layout(tf.ones, dtensor.Layout(['x', 'unsharded'], dtensor.Mesh.from_string(REMOTE)), shape=(6, 6))",
    ),
}

#: Requests on which TF gives a wrong or foreign answer rather than a crash: layoutcore raises.
NO_CRASH_BUT_WRONG = {
    "num_shards out of range": "lc.Layout(['x', None], mesh).num_shards(5)",
    "num_shards negative": "lc.Layout(['x', None], mesh).num_shards(-1)",
    "local shape of the wrong rank": "lc.Layout(['x', None], mesh).shard_shape([6])",
    "distribute with the wrong rank": "lc.distribute_tensor(np.zeros(6), lc.Layout(['x', None], mesh))",
    "delete a dim that is not there": "lc.Layout(['x', None], mesh).delete([5])",
}


def test_layoutcore_raises_clean_errors_and_the_process_survives() -> None:
    program = SETUP + "results = []\n"
    for name, request in [*((n, r) for n, (r, _) in CASES.items()), *NO_CRASH_BUT_WRONG.items()]:
        program += (
            f"try:\n    {request}\n    results.append(({name!r}, 'no error'))\n"
            f"except lc.LayoutcoreError as exc:\n    results.append(({name!r}, type(exc).__name__))\n"
        )
    # A layout string over a remote mesh parses to an abstract mesh: it runs on this process's devices.
    program += (
        "t = lc.call_with_layout(tf.ones, lc.Layout.from_string('sharding_specs:x,unsharded, mesh:' + REMOTE), (6, 6))\n"
        "assert [c.shape for c in lc.unpack(t)] == [(2, 6)] * 6 and lc.to_numpy(t).sum() == 36\n"
        "for name, outcome in results: print(name, '->', outcome)\n"
        "print('survived')\n"
    )
    proc = run_python(program, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "survived"
    outcomes = dict(line.split(" -> ") for line in lines[:-1])
    assert set(outcomes) == set(CASES) | set(NO_CRASH_BUT_WRONG)
    for name, outcome in outcomes.items():
        assert outcome == "LayoutError", f"{name}: {outcome}"


def test_the_same_requests_kill_tf() -> None:
    # All controls at once: each is a fresh interpreter importing TF (~3 s).
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", SETUP + raw + "\nprint('TF survived')\n"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for name, (_, raw) in CASES.items()
    }
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            crashed = proc.returncode < 0 and -proc.returncode in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS)
            silently_wrong = proc.returncode == 0 and "TF survived" in out
            cryptic = proc.returncode == 1 and err.strip().splitlines()[-1:] == ["ValueError: stoi"]
            assert crashed or silently_wrong or cryptic, (
                f"{name}: TF neither crashed nor went on silently (rc {proc.returncode}); if it now raises "
                f"a clean error, revisit the guard.\n{err[-2000:]}"
            )
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
