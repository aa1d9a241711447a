"""Scenario ``torch4`` of _worker.py: 4 torch ranks, senders 0 and 1, receivers 2 and 3 (and a colocated link on 0, 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

import layoutcore as lc
from layoutcore import Layout, TensorSpec, transfer

SHAPES = {"w_f32": ((7, 5), "float32"), "w_bf16": ((6, 4), "bfloat16"), "w_i32": ((5, 3), "int32")}
FUSED = {"q": (8, 4), "k": (4, 4), "v": (4, 4), "gate": (6, 4), "up": (6, 4), "down": (4, 6)}


def per_segment_oracle(w: Any, names: list[str], n: int) -> np.ndarray:
    """The receiver tensor as its n TP devices hold it: device j's block is [seg_0 chunk j; seg_1 chunk j; ...]."""
    segs = [w.oracle("model." + s, FUSED[s], "bfloat16") for s in names]
    return np.concatenate([np.array_split(s, n)[j] for j in range(n) for s in segs])


def sync(w: Any, link: Any, name: str, send_tree: Any, **receive: Any) -> dict[str, Any]:
    if w.rank in link.senders and w.rank in link.receivers:
        c = w.counted(lambda: link.sync(send_tree(), **receive))
    elif w.rank in link.senders:
        c = w.counted(lambda: link.send(send_tree()))
    else:
        c = w.counted(lambda: link.receive(**receive))
    if c["error"] is None:
        c["report"] = w.report(link)
    return c


def run(w: Any) -> None:
    rank = w.rank
    w.torch_groups([0, 1], [2, 3])
    S, T = w.torch_mesh([0, 1]), w.torch_mesh([2, 3])
    link = transfer.Link(senders=[0, 1], receivers=[2, 3], timeout=60)

    def rows_tree() -> dict[str, Any]:
        return {
            k: lc.distribute_tensor(w.oracle(k, s, d), Layout(("x", None), S), driver="torch")
            for k, (s, d) in SHAPES.items()
        }

    cols = {k: Layout((None, "x"), T) for k in SHAPES}
    for attempt in ("rows_cols", "rows_cols_again"):
        c = sync(w, link, attempt, rows_tree, target=cols, driver="torch")
        if rank >= 2:
            c["ok"] = {k: w.shards_ok(c["out"][k], w.oracle(k, *SHAPES[k]), cols[k], "torch") for k in SHAPES}
        c.pop("out")
        w.RESULT[attempt] = c
    # the senders send what they sent twice, the receivers want another layout: the link must not reuse its
    # last exchange (it does when every rank's metadata is unchanged)
    rows = {k: Layout(("x", None), T) for k in SHAPES}
    c = sync(w, link, "rows_rows_receivers_changed", rows_tree, target=rows, driver="torch")
    if rank >= 2:
        c["ok"] = {k: w.shards_ok(c["out"][k], w.oracle(k, *SHAPES[k]), rows[k], "torch") for k in SHAPES}
    c.pop("out")
    w.RESULT["rows_rows_receivers_changed"] = c

    def replicas() -> dict[str, Any]:
        return {
            f"r{i}": lc.distribute_tensor(w.oracle(f"r{i}", (8, 8), "float32"), Layout((None, None), S), driver="torch")
            for i in range(4)
        }

    tp = {f"r{i}": Layout(("x", None), T) for i in range(4)}
    c = sync(w, link, "dp_tp", replicas, target=tp, driver="torch")
    if rank >= 2:
        c["ok"] = {k: w.shards_ok(c["out"][k], w.oracle(k, (8, 8), "float32"), tp[k], "torch") for k in tp}
    c.pop("out")
    w.RESULT["dp_tp"] = c

    def fsdp() -> dict[str, Any]:
        return {
            "model": {
                s: lc.distribute_tensor(
                    w.oracle("model." + s, shape, "bfloat16"), Layout(("x", None), S), driver="torch"
                )
                for s, shape in FUSED.items()
            }
        }

    served = {"qkv": Layout(("x", None), T), "gate_up": Layout(("x", None), T), "down": Layout((None, "x"), T)}
    rename = lambda p: p.removeprefix("model/")  # noqa: E731
    fuse = {
        "qkv": (0, ["model/q", "model/k", "model/v"], "per_segment"),
        "gate_up": (0, ["model/gate", "model/up"], "per_segment"),
    }
    c = sync(w, link, "fsdp_tp", fsdp, target=served, rename=rename, fuse=fuse, driver="torch")
    if rank >= 2:
        want = {
            "qkv": per_segment_oracle(w, ["q", "k", "v"], 2),
            "gate_up": per_segment_oracle(w, ["gate", "up"], 2),
            "down": w.oracle("model.down", FUSED["down"], "bfloat16"),
        }
        c["ok"] = {k: w.shards_ok(c["out"][k], want[k], served[k], "torch") for k in served}
    c.pop("out")
    w.RESULT["fsdp_tp"] = c

    # fail closed: every rank raises before any tensor byte moves
    bad = {
        "missing": {"target": {"w_f32": cols["w_f32"], "nope": cols["w_f32"]}},
        "dtype": {"target": {"w_f32": TensorSpec((7, 5), "bfloat16", cols["w_f32"])}},
        "fused_sizes": {"target": {"qkv": TensorSpec((20, 4), "bfloat16", served["qkv"])}, "fuse": fuse},
    }
    for name, kwargs in bad.items():
        tree = fsdp if name == "fused_sizes" else rows_tree
        c = sync(w, link, name, tree, driver="torch", **kwargs)
        c.pop("out")
        w.RESULT[name] = c

    # verify=True: a CRC-32C per sub-box; then one corrupted on rank 2 (its check sees a wrong sum)
    c = w.counted(
        lambda: link.send(rows_tree(), verify=True) if rank < 2 else link.receive(cols, driver="torch", verify=True)
    )
    out = c.pop("out")
    c["checksum_bytes"] = link.last_report.checksum_bytes
    if rank >= 2:
        c["ok"] = {k: w.shards_ok(out[k], w.oracle(k, *SHAPES[k]), cols[k], "torch") for k in SHAPES}
    w.RESULT["verify"] = c
    if rank == 2:
        from layoutcore.transfer import _schedule

        real = _schedule._crc
        _schedule._crc = lambda data: real(data) ^ 1  # type: ignore[assignment]
    c = w.counted(
        lambda: link.send(rows_tree(), verify=True) if rank < 2 else link.receive(cols, driver="torch", verify=True)
    )
    c.pop("out")
    w.RESULT["corrupt"] = c
    if rank == 2:
        _schedule._crc = real  # type: ignore[assignment]

    # colocated: ranks 0 and 1 send and receive; into= keeps each torch tensor's storage
    if rank < 2:
        both = transfer.Link(senders=[0, 1], receivers=[0, 1], timeout=60)
        into = {
            k: lc.distribute_tensor(np.zeros(s, dtype=w.oracle(k, s, d).dtype), Layout((None, "x"), S), driver="torch")
            for k, (s, d) in SHAPES.items()
        }
        ptrs = {k: [t.data_ptr() for t in lc.unpack(v)] for k, v in into.items()}
        c = sync(w, both, "colocated", rows_tree, into=into)
        out = c.pop("out")
        c["same_objects"] = all(out[k] is into[k] for k in into)
        c["storage_kept"] = all([t.data_ptr() for t in lc.unpack(into[k])] == ptrs[k] for k in into)
        c["ok"] = {k: w.shards_ok(into[k], w.oracle(k, *SHAPES[k]), Layout((None, "x"), S), "torch") for k in SHAPES}
        w.RESULT["colocated"] = c
        c = w.counted(lambda: both.send(rows_tree()))  # a rank in both sets must call sync
        c.pop("out")
        w.RESULT["misuse"] = c
