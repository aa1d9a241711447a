"""``transfer.Link`` between processes on 127.0.0.1 over gloo (2-4 processes per scenario).

Each worker (_worker.py) counts the bytes of every ``torch.distributed`` point-to-point call and
collective it makes by wrapping torch's functions before the link exists; the test compares that
count with the plan's floor, checks every received shard bit for bit against the NumPy oracle with
its target layout, and checks that bad plans and dead or hung peers raise ``TransferError`` on every
rank. Needs torch (and JAX or TensorFlow for their scenarios): the ``checkpoint`` tox env.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from _support import run_processes

WORKER = Path(__file__).with_name("_worker.py")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="transfer.Link tests need torch (tox -e checkpoint)"
)


def _port() -> int:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
    finally:
        s.close()


def _run(
    scenario: str, world: int, *, expect_dead: int | None = None, extra: dict[str, str] | None = None
) -> dict[int, dict[str, Any]]:
    port = str(_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYOUTCORE_", "JAX_", "XLA_FLAGS"))}
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "drivers"), env.get("PYTHONPATH", "")])
    argvs = [[sys.executable, str(WORKER), scenario, str(r), str(world), port] for r in range(world)]
    outputs = run_processes(argvs, env=env, timeout=240)
    results = {}
    for r, (rc, out, err) in enumerate(outputs):
        if r == expect_dead:
            continue
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        assert rc == 0 and line is not None, f"{scenario} rank {r} (rc {rc}):\n{out[-3000:]}\n{err[-6000:]}"
        results[r] = json.loads(line[len("RESULT ") :])
    return results


def _exact_bytes(case: dict[str, Any], rank: int) -> None:
    """The worker's own count equals the plan: each rank sends and receives its plan share, receivers their floor."""
    assert case["error"] is None, case["error"]
    report = case["report"]
    sent, received = report["per_rank"][str(rank)]
    assert (case["sent"], case["received"]) == (sent, received), (rank, case)
    assert case["received"] == report["floor_share"]  # the floor share, not a byte more
    assert case["metadata"] == report["metadata_bytes"] > 0  # metadata counted apart, and reported
    assert all(case.get("ok", {True: True}).values()), case["ok"]


@pytest.fixture(scope="module")
def torch4() -> dict[int, dict[str, Any]]:
    return _run("torch4", 4)


@pytest.mark.parametrize("case", ["rows_cols", "rows_cols_again", "rows_rows_receivers_changed", "dp_tp", "fsdp_tp"])
def test_two_groups_move_exactly_the_floor_bit_exact(torch4: dict[int, dict[str, Any]], case: str) -> None:
    for rank, result in torch4.items():
        _exact_bytes(result[case], rank)
    floor = torch4[2][case]["report"]["floor_bytes"]
    assert floor > 0 and sum(torch4[r][case]["received"] for r in (2, 3)) == floor
    assert sum(torch4[r][case]["sent"] for r in (0, 1)) == floor
    assert all(torch4[r][case]["ok"] for r in (2, 3))
    if case == "dp_tp":  # replicas spread: each of the two holders sends half
        assert torch4[0][case]["sent"] == torch4[1][case]["sent"] == floor // 2
    if case == "rows_cols_again":
        assert all(torch4[r][case]["report"]["plan_reused"] for r in torch4)
        # nothing changed: a fingerprint instead of the specs (fewer metadata bytes, counted by the worker)
        assert all(torch4[r][case]["metadata"] < torch4[r]["rows_cols"]["metadata"] for r in torch4)
    if case == "rows_rows_receivers_changed":  # the receivers changed: the full exchange again
        assert all(torch4[r][case]["metadata"] > torch4[r]["rows_cols_again"]["metadata"] for r in torch4)


def test_colocated_ranks_copy_locally_and_fill_into_keeping_storage(torch4: dict[int, dict[str, Any]]) -> None:
    for rank in (0, 1):
        case = torch4[rank]["colocated"]
        _exact_bytes(case, rank)
        assert case["report"]["local_bytes"] > 0  # what a rank holds is copied, not sent
        assert case["same_objects"] and case["storage_kept"]


def test_verify_checks_a_crc_per_piece_and_names_path_and_box(torch4: dict[int, dict[str, Any]]) -> None:
    for result in torch4.values():
        case = result["verify"]
        assert case["error"] is None and case["checksum_bytes"] > 0
        assert case["sent"] + case["received"] > case["checksum_bytes"]  # data plus 4 bytes per sub-box
    assert all(torch4[r]["verify"]["ok"] for r in (2, 3))
    errors = [torch4[r]["corrupt"]["error"] for r in torch4]
    assert all(e is not None for e in errors)  # rank 2's mismatch reaches every rank
    assert "CRC-32C mismatch" in torch4[2]["corrupt"]["error"]["message"] and "box" in errors[2]["message"]
    assert torch4[2]["corrupt"]["error"]["paths"][0] in ("w_f32", "w_bf16", "w_i32")


def test_send_on_a_rank_in_both_sets_raises(torch4: dict[int, dict[str, Any]]) -> None:
    for rank in (0, 1):
        case = torch4[rank]["misuse"]
        assert case["error"] is not None and "call link.sync" in case["error"]["message"]
        assert case["sent"] == case["received"] == 0


@pytest.mark.parametrize("case", ["missing", "dtype", "fused_sizes"])
def test_bad_plans_fail_closed_on_every_rank_before_any_byte(torch4: dict[int, dict[str, Any]], case: str) -> None:
    for result in torch4.values():
        got = result[case]
        assert got["error"] is not None, (case, got)
        assert got["sent"] == got["received"] == 0
    paths = {"missing": ["nope"], "dtype": ["w_f32"], "fused_sizes": ["qkv"]}[case]
    assert all(r[case]["error"]["paths"] == paths for r in torch4.values())


def test_torch_to_jax_numpy_and_jax_into() -> None:
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs jax (tox -e checkpoint)")
    results = _run("jax", 3)
    for case in ("to_jax", "to_numpy", "jax_into", "numpy_into"):
        for rank, result in results.items():
            _exact_bytes(result[case], rank)
        assert results[2][case]["received"] == results[2][case]["report"]["floor_bytes"] > 0
    assert results[2]["to_jax"]["jax_arrays"] and results[2]["jax_into"]["same_shardings"]
    assert results[2]["numpy_into"]["same_objects"]  # NumPy components written in place


def test_tensorflow_to_torch_and_torch_to_tensorflow_target_and_into() -> None:
    """A TF DTensor process (4 logical CPUs) joins the torch group for the wire, both ways."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("needs tensorflow (tox -e checkpoint)")
    results = _run("tf", 3)
    for case in ("to_tf", "tf_into", "from_tf"):
        for rank, result in results.items():
            _exact_bytes(result[case], rank)
        # every element once to the side that holds none: f32 (6, 4), bf16 (4, 6), int32 (8, 2)
        assert results[2][case]["report"]["floor_bytes"] == 6 * 4 * 4 + 4 * 6 * 2 + 8 * 2 * 4
    tf_rank = results[2]
    assert tf_rank["to_tf"]["tf_dtensors"] and tf_rank["to_tf"]["adopted"]  # TF holds the receive blocks as they are
    assert tf_rank["tf_into"]["variables_assigned"] and tf_rank["tf_into"]["variables_hold"]
    assert tf_rank["tf_into"]["tensor_replaced"]  # a DTensor is immutable: a new one on the same layout
    assert tf_rank["from_tf"]["no_copy"]  # the sender reads TF's own buffers (DLPack)
    assert all(results[r]["from_tf"]["ok"] for r in (0, 1))
    for result in results.values():  # a layout TF cannot hold: refused on every rank before any byte
        refused = result["tf_refused"]
        assert refused["error"] is not None and refused["error"]["paths"] == ["f32"], refused
        assert "multi_axis" in refused["error"]["message"] and refused["sent"] == refused["received"] == 0
    dtype = tf_rank["tf_dtype_refused"]  # a dtype TF has no tensor of: refused when the blocks are made
    assert dtype is not None and dtype["paths"] == ["scales"] and "float8_e8m0fnu" in dtype["message"], dtype


def test_a_multi_client_tensorflow_job_of_two_processes_receives_and_sends() -> None:
    """Two TF processes, the clients of one DTensor cluster (2 logical CPUs each): a 2x2 mesh spans both."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("needs tensorflow (tox -e checkpoint)")
    results = _run("tf_mc", 4, extra={"TF_MC_PORTS": f"{_port()},{_port()}"})
    for case in ("to_tf", "from_tf"):
        for rank, result in results.items():
            _exact_bytes(result[case], rank)
    # client t holds mesh row a=t: f32 ("a", "b") half each; bf16 ("b", None) and int32 (None, "b") whole on each
    assert results[2]["to_tf"]["report"]["floor_bytes"] == 6 * 4 * 4 + 2 * 4 * 6 * 2 + 2 * 8 * 2 * 4
    assert results[2]["from_tf"]["report"]["floor_bytes"] == 6 * 4 * 4 + 4 * 6 * 2 + 8 * 2 * 4  # torch: half each
    assert results[2]["to_tf"]["devices"] == [
        f"/job:worker/replica:0/task:{t}/device:CPU:{i}" for t in (0, 1) for i in (0, 1)
    ]
    assert all(results[r]["from_tf"]["ok"] for r in (0, 1))


def test_two_single_client_tensorflow_processes_on_one_side_are_refused_naming_devices_and_paths() -> None:
    """Each names its devices /job:localhost/.../CPU:i: no plan could tell which process holds a block."""
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("needs tensorflow (tox -e checkpoint)")
    results = _run("tf_twice", 3)
    for case, side in (("to_tf", "receiver"), ("from_tf", "sender")):
        for result in results.values():
            got = result[case]
            assert got["error"] is not None and got["sent"] == got["received"] == 0, got
            message = got["error"]["message"]
            assert f"{side} ranks [1, 2] each hold device(s) ['CPU:0', 'CPU:1']" in message, message
            assert "initialize_multi_client" in message and sorted(got["error"]["paths"]) == ["bf16", "f32", "i32"]


def test_numpy_to_torch() -> None:
    results = _run("numpy", 3)
    for rank, result in results.items():
        _exact_bytes(result["numpy_torch"], rank)
    assert results[0]["numpy_torch"]["sent"] == results[0]["numpy_torch"]["report"]["floor_bytes"]


@pytest.mark.parametrize("scenario", ["die", "hang"])
def test_a_sender_dying_or_hanging_mid_transfer_makes_every_survivor_raise(scenario: str) -> None:
    results = _run(scenario, 3, expect_dead=1)
    assert sorted(results) == [0, 2]
    for result in results.values():
        assert result["error"] is not None and result["error"].startswith("transfer: rank")
        # bounded by the link's timeout (10 s) plus start-up, far below the process group's own 120 s
        assert result["seconds"] < result["timeout"] + 45, result
