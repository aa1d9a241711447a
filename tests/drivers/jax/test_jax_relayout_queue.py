"""Relayouts queued without waiting never take the process down.

XLA's CPU client admits 32 executions per device in flight; a collective program queued deeper
never completes its rendezvous and XLA aborts the process (SIGABRT) after 40 s. A training loop
that never blocks queues that deep in microseconds. The driver bounds its collective programs in
flight (``_relayout._Inflight``); this test queues 10 000 relayouts of every kind of move the JAX
plan runs (and 2 000 of JAX's compiled reshard where that is at the floor), round robin, waits
once at the end and checks every result against NumPy's slices.
It runs in a subprocess, so that an abort fails the test instead of crashing pytest.
"""

from __future__ import annotations

import textwrap

import pytest
from _jax_helpers import run_python

PROGRAM = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, "tests/drivers/jax")
    import jax
    import numpy as np
    import layoutcore as lc
    from test_jax_relayout_floor import CASES, check_shards, values

    total = int(os.environ["QUEUED"])
    # jit_reshard runs only where JAX's move is at the floor; the plan's program everywhere else
    jit = os.environ["LAYOUTCORE_JAX_RELAYOUT"] == "jit_reshard"
    planned = [(case, *CASES[case][:3]) for case in CASES if CASES[case][3] == jit]
    planned.append(("S0 -> S1 bfloat16", *CASES["S0 -> S1"][:3]) if jit else ("(x,y) -> (y,x) bfloat16", *CASES["(x,y) -> (y,x)"][:3]))
    inputs = []
    for case, source, target, shape in planned:
        x = values(shape, "bfloat16" if case.endswith("bfloat16") else "float32")
        inputs.append((x, lc.distribute_tensor(x, source, driver="jax"), target))
    start = time.perf_counter()
    outs = [lc.relayout(inputs[i % len(inputs)][1], inputs[i % len(inputs)][2], driver="jax") for i in range(total)]
    jax.block_until_ready(outs)  # the one wait
    print(f"{total} relayouts of {len(planned)} kinds in {time.perf_counter() - start:.1f} s", flush=True)
    for i, out in enumerate(outs):
        x, _, target = inputs[i % len(inputs)]
        if i < 4 * len(inputs):  # every kind's shards, device by device (the geometry oracle's slices)
            check_shards(out, x, target)
        assert lc.fetch_layout(out, driver="jax") == target, (i, target)
        np.testing.assert_array_equal(np.asarray(out).reshape(-1).view(np.uint8), x.reshape(-1).view(np.uint8))
    print("ok", flush=True)
    """
)


@pytest.mark.parametrize(("move", "queued"), [("collective", 10_000), ("jit_reshard", 2_000)])
def test_queued_relayouts_finish_with_the_right_data(move: str, queued: int) -> None:
    """The plan's programs and JAX's compiled reshard: the moves whose collectives queue (forced: the
    chooser may pick host copies or device_put, which run no collective program)."""
    done = run_python(PROGRAM, env={"LAYOUTCORE_JAX_RELAYOUT": move, "QUEUED": str(queued)}, timeout=900)
    assert done.returncode == 0 and done.stdout.rstrip().endswith("ok"), (
        f"rc={done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    )
    assert "Termination timeout" not in done.stderr
