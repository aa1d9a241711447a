"""The save's commit: old or new at every step, with and without an atomic exchange; stale temporaries.

A save is killed (SIGKILL, in a forked child) right before each file-system mutation of its commit
(``rename``, ``replace``, ``unlink``, ``rmdir``, the exchange) in turn; after each kill a reader
must load the complete old checkpoint or the complete new one, checked against values computed
here. Then a later save commits over whatever the kill left, and removes the killed save's
temporary directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import Layout, Mesh, checkpoint
from layoutcore.checkpoint import _commit

sys.path.insert(0, str(Path(__file__).parent))
from test_crash_and_core import load_complete_or_none

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="kills forked savers")

MESH = Mesh((2,), ("x",))
SHAPES = {"a": (4, 3), "b": (5,)}


def _tree(generation: int) -> dict[str, Any]:
    return {
        name: lc.distribute_tensor(_value(name, generation), Layout(("x",) + (None,) * (len(shape) - 1), MESH))
        for name, shape in SHAPES.items()
    }


def _value(name: str, generation: int) -> np.ndarray[Any, Any]:
    shape = SHAPES[name]
    return np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape) + 1000 * generation + ord(name)


def _generation(path: Path) -> int | None:
    """The generation the checkpoint at ``path`` holds, checked whole; None where there is none."""
    out = load_complete_or_none(path)
    if out is None:
        return None
    assert set(out) == set(SHAPES)
    generation = (int(lc.to_numpy(out["a"])[0, 0]) - ord("a")) // 1000
    for name, v in out.items():
        assert np.array_equal(lc.to_numpy(v), _value(name, generation)), name  # no mix of generations
    return generation


MUTATIONS = ("rename", "replace", "unlink", "rmdir")


def _save_killed_at(path: Path, generation: int, step: int, *, exchange: bool) -> int:
    """Fork a child that saves ``generation`` over ``path`` and SIGKILLs itself right before the
    ``step``-th file-system mutation after the writes (0: never); returns how many it made."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(read)
            count = [0]

            def counting(fn: Callable[..., Any]) -> Callable[..., Any]:
                def run(*args: Any, **kwargs: Any) -> Any:
                    count[0] += 1
                    if count[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return fn(*args, **kwargs)

                return run

            tree = _tree(generation)
            for name in MUTATIONS:
                setattr(os, name, counting(getattr(os, name)))
            _commit._exchange = counting(_commit._exchange if exchange else lambda a, b: False)  # type: ignore[assignment]
            checkpoint.save(path, tree, overwrite=True)
            os.write(write, str(count[0]).encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        made = f.read()
    if step:
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
        return step
    assert made, "the child saver failed"
    return int(made)


@pytest.mark.parametrize("exchange", [False, True], ids=["pointer", "exchange"])
def test_killed_at_every_commit_step_leaves_old_or_new(tmp_path: Path, exchange: bool) -> None:
    path = tmp_path / "ck"
    checkpoint.save(path, _tree(1))
    steps = _save_killed_at(path, 2, 0, exchange=exchange)  # a whole save: how many mutations it makes
    assert _generation(path) == 2 and steps >= 2
    committed = 2
    for step in range(1, steps + 1):
        generation = committed + 1
        for stale in tmp_path.glob(".ck.tmp-*"):  # the last kill's: removing it would shift the steps
            shutil.rmtree(stale)
        _save_killed_at(path, generation, step, exchange=exchange)
        found = _generation(path)
        assert found in (committed, generation), (step, found, committed)
        committed = found
    # a later save commits over whatever the kills left, and removes their temporary directories
    _save_killed_at(path, 50, 0, exchange=exchange)
    assert _generation(path) == 50
    assert not list(tmp_path.glob(".ck.tmp-*"))
    entries = sorted(os.listdir(path))
    if not exchange:  # the pointer: the metadata, the root group and the one live version
        assert len(entries) == 3 and entries[0].startswith(_commit.POINTER_PREFIX), entries
        assert entries[1:] == ["layoutcore.json", "zarr.json"]
    else:
        assert not any(e.startswith(_commit.POINTER_PREFIX) for e in entries), entries


def test_pointer_commit_is_a_checkpoint_zarr_tools_and_inspect_see(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_commit, "_exchange", lambda a, b: False)
    path = tmp_path / "ck"
    checkpoint.save(path, _tree(1))
    assert not any(e.startswith(".v-") for e in os.listdir(path))  # a new path: one rename
    info = checkpoint.save(path, _tree(2), overwrite=True)
    live = [e for e in os.listdir(path) if e.startswith(".v-")]
    assert len(live) == 1
    assert info.files == checkpoint.inspect(path).files
    assert all((path / f).is_file() for f in info.files)
    assert _generation(path) == 2
    # the live version is itself a complete checkpoint, and the root stays a zarr group
    assert _generation(path / live[0]) == 2
    assert json.loads((path / "zarr.json").read_text())["node_type"] == "group"
    # the other readers follow the nodes too: read_plan's ranges and the safetensors export
    plan = checkpoint.read_plan(path, {"a": Layout.replicated(MESH, 2), "b": Layout.replicated(MESH, 1)})
    assert plan.reads and all(r[0].startswith((f"{live[0]}/a/c/", f"{live[0]}/b/c/")) for r in plan.reads), plan
    index = checkpoint.export_safetensors(path, tmp_path / "st")
    exported = checkpoint.load(index.parent, driver="numpy")
    assert np.array_equal(lc.to_numpy(exported["a"]), _value("a", 2))
    checkpoint.save(path, _tree(3), overwrite=True)
    assert _generation(path) == 3 and live[0] not in os.listdir(path)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temporaries_of_killed_saves_are_removed_or_reported(tmp_path: Path) -> None:
    path = tmp_path / "ck"
    host = _commit._host_tag()
    dead = tmp_path / f".ck.tmp-{_dead_pid()}-{host}-0123456789ab"
    alive = tmp_path / f".ck.tmp-{os.getpid()}-{host}-0123456789ab"
    elsewhere = tmp_path / ".ck.tmp-1-00000000-0123456789ab"  # another host: only its age tells
    old_unknown = tmp_path / ".ck.tmp-torch-2"  # a multi-process save's: no owner recorded
    other_target = tmp_path / f".other.tmp-{_dead_pid()}-{host}-0123456789ab"
    for d in (dead, alive, elsewhere, old_unknown, other_target):
        (d / "w").mkdir(parents=True)
        (d / "w" / "zarr.json").write_text("{}")
    old = time.time() - _commit.STALE_AFTER_S - 60
    for p in (old_unknown, old_unknown / "w"):
        os.utime(p, (old, old))
    with pytest.warns(RuntimeWarning, match="may still run") as caught:
        checkpoint.save(path, _tree(1))
    message = str(caught[0].message)
    assert str(alive) in message and str(elsewhere) in message and str(dead) not in message
    assert not dead.exists() and not old_unknown.exists()
    assert alive.exists() and elsewhere.exists() and other_target.exists()  # another checkpoint's: not ours
    assert _generation(path) == 1
    shutil.rmtree(alive)
    shutil.rmtree(elsewhere)


def test_killed_save_leaves_a_temporary_that_the_next_save_removes(tmp_path: Path) -> None:
    """Regression: before this test, a killed save's ``.NAME.tmp-*`` stayed forever."""
    path = tmp_path / "ck"
    checkpoint.save(path, _tree(1))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            real = os.makedirs

            def makedirs_then_die(name: Any, *args: Any, **kwargs: Any) -> None:
                real(name, *args, **kwargs)
                if ".tmp-" in str(name):
                    os.kill(os.getpid(), signal.SIGKILL)

            os.makedirs = makedirs_then_die  # type: ignore[assignment]
            checkpoint.save(path, _tree(2), overwrite=True)
        finally:
            os._exit(0)
    os.close(write)
    os.close(read)
    os.waitpid(pid, 0)
    assert len(list(tmp_path.glob(".ck.tmp-*"))) == 1
    assert _generation(path) == 1
    checkpoint.save(path, _tree(3), overwrite=True)
    assert not list(tmp_path.glob(".ck.tmp-*"))
    assert _generation(path) == 3
