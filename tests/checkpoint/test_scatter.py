"""Scatter reads (layoutcore.checkpoint._scatter): a stored piece read by the kernel straight into
the parts of several blocks. Oracle: the saved NumPy arrays sliced by the layouts' pure shard math."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import CheckpointError, Layout, Mesh, checkpoint
from layoutcore.checkpoint import _scatter
from layoutcore.driver import ALIGN, aligned_empty

MESH = Mesh((4,), ("x",))


def _blocks_equal(tensor: Any, value: np.ndarray, layout: Layout) -> None:
    for comp, sl in zip(lc.unpack(tensor), layout.device_slices(value.shape), strict=True):
        assert np.asarray(comp).tobytes() == value[sl].tobytes()


@pytest.mark.parametrize(
    ("shape", "saved", "target"),
    [
        ((64, 1024), ("x", None), (None, "x")),  # rows -> columns
        ((16, 64, 8), ("x", None, None), (None, "x", None)),  # trailing axis whole
        ((64, 1024), (None, None), (None, "x")),  # one piece -> 4 column blocks
    ],
)
def test_scatter_reads_layoutcore_pieces_bit_exact_without_verify(
    tmp_path: Path, spy: list[bool], shape: tuple[int, ...], saved: tuple[Any, ...], target: tuple[Any, ...]
) -> None:
    value = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    checkpoint.save(tmp_path / "ck", {"w": lc.distribute_tensor(value, Layout(saved, MESH), driver="numpy")})
    layout = Layout(target, MESH)
    out = checkpoint.load(tmp_path / "ck", {"w": layout}, driver="numpy", verify=False)
    assert spy and all(spy)
    _blocks_equal(out["w"], value, layout)
    spy.clear()
    checked = checkpoint.load(tmp_path / "ck", {"w": layout}, driver="numpy")  # checksums: the slab path
    assert not spy
    _blocks_equal(checked["w"], value, layout)


def test_scatter_reads_safetensors_columns_and_into(tmp_path: Path, spy: list[bool]) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    value = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    file = tmp_path / "m.safetensors"
    safetensors_numpy.save_file({"w": value, "b": value[:3, :5].copy()}, str(file))
    cols = Layout((None, "x"), MESH)
    out = checkpoint.load(file, {"w": cols}, driver="numpy")
    assert not spy  # new NumPy tensors: read whole, the blocks views of it (checkpoint/_whole.py)
    _blocks_equal(out["w"], value, cols)
    raw = file.read_bytes()
    header_end = 8 + int.from_bytes(raw[:8], "little")
    phase = (header_end + json.loads(raw[8:header_end])["w"]["data_offsets"][0]) % ALIGN
    shapes = cols.local_shapes(value.shape)
    # each component its own memory, at the file's phase: scattered into
    into = {"w": lc.pack([aligned_empty(s, np.float32, phase=phase) for s in shapes], cols, global_shape=value.shape)}
    filled = checkpoint.load(file, into=into)
    assert spy == [True]
    _blocks_equal(filled["w"], value, cols)
    # memory off the file's phase (a multiple of 16 bytes off): scattered all the same
    spy.clear()
    off = {"w": lc.pack([aligned_empty(s, np.float32, phase=(phase + 16) % ALIGN) for s in shapes], cols)}
    _blocks_equal(checkpoint.load(file, into=off)["w"], value, cols)
    assert spy == [True]


def test_uneven_and_small_parts_fall_back(tmp_path: Path, spy: list[bool]) -> None:
    value = np.random.default_rng(2).standard_normal((30, 10)).astype(np.float32)  # 10 columns over 4: parts < 512 B
    checkpoint.save(tmp_path / "ck", {"w": lc.distribute_tensor(value, Layout(("x", None), MESH), driver="numpy")})
    layout = Layout((None, "x"), MESH)
    out = checkpoint.load(tmp_path / "ck", {"w": layout}, driver="numpy", verify=False)
    assert spy and not any(spy)
    _blocks_equal(out["w"], value, layout)


def test_uneven_columns_scatter_into_blocks_of_different_widths(tmp_path: Path, spy: list[bool]) -> None:
    # 1030 columns over 4: blocks 258, 258, 258 and 256 wide (row strides differ), parts >= 1 KiB
    value = np.random.default_rng(3).standard_normal((48, 1030)).astype(np.float32)
    checkpoint.save(tmp_path / "ck", {"w": lc.distribute_tensor(value, Layout(("x", None), MESH), driver="numpy")})
    layout = Layout((None, "x"), MESH)
    assert len({s[1] for s in layout.local_shapes(value.shape)}) == 2
    out = checkpoint.load(tmp_path / "ck", {"w": layout}, driver="numpy", verify=False)
    assert spy and all(spy)
    _blocks_equal(out["w"], value, layout)


def test_into_loads_reuse_iovec_tables_and_read_the_new_bytes(
    tmp_path: Path, spy: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    builds: list[int] = []
    real = _scatter._tiles

    def counted(*args: Any) -> Any:
        builds.append(1)
        return real(*args)

    monkeypatch.setattr(_scatter, "_tiles", counted)
    rows, cols = Layout(("x", None), MESH), Layout((None, "x"), MESH)
    rng = np.random.default_rng(4)
    first, second = (rng.standard_normal((64, 1024)).astype(np.float32) for _ in range(2))
    checkpoint.save(tmp_path / "ck", {"w": lc.distribute_tensor(first, rows, driver="numpy")})
    into = {"w": lc.pack([np.zeros(s, np.float32) for s in cols.local_shapes(first.shape)], cols)}
    checkpoint.load(tmp_path / "ck", into=into, verify=False)
    assert spy and all(spy) and len(builds) == len(spy)  # one table per piece, built
    _blocks_equal(into["w"], first, cols)
    # the same path saved again with other values: the kept tables point at memory, not at bytes
    checkpoint.save(tmp_path / "ck", {"w": lc.distribute_tensor(second, rows, driver="numpy")}, overwrite=True)
    spy.clear()
    builds.clear()
    checkpoint.load(tmp_path / "ck", into=into, verify=False)
    assert spy and all(spy) and not builds  # every table reused
    _blocks_equal(into["w"], second, cols)
    # other memory (a load of new arrays; into= other arrays): tables built for it
    out = checkpoint.load(tmp_path / "ck", {"w": cols}, driver="numpy", verify=False)
    assert len(builds) == len(spy) // 2
    _blocks_equal(out["w"], second, cols)
    other = {"w": lc.pack([np.ones(s, np.float32) for s in cols.local_shapes(first.shape)], cols)}
    builds.clear()
    checkpoint.load(tmp_path / "ck", into=other, verify=False)
    assert builds
    _blocks_equal(other["w"], second, cols)


def _table(rows: int) -> Any:
    return _scatter._Table(np.zeros((rows, 2), np.uint64), 0)


def test_table_cache_keeps_what_fits_and_drops_only_tables_two_loads_unused() -> None:
    # the stated policy, step by step: admitted while there is room; when full, tables not used in
    # this load or the one before are dropped (once per load); a table that still does not fit is not kept
    cache = _scatter.TableCache(rows=20)
    a, b, c = _table(8), _table(8), _table(8)
    cache.put(("a",), a, load=1)
    cache.put(("b",), b, load=1)
    cache.put(("c",), c, load=1)  # no room, nothing stale: not kept
    assert cache.get(("c",), 1) is None and cache.kept_rows == 16
    assert cache.get(("a",), 2) is a and cache.get(("b",), 2) is b  # the next step reuses both
    cache.put(("c",), c, load=2)
    assert len(cache) == 2  # a and b were used in this load: kept
    assert cache.get(("a",), 3) is a  # b: last used in load 2
    cache.put(("c",), c, load=4)  # b (2 < 4 - 1) is dropped, a (3) stays
    assert cache.get(("b",), 4) is None and cache.get(("c",), 4) is c and cache.get(("a",), 4) is a
    assert cache.kept_rows == 16
    cache.put(("big",), _table(21), load=5)  # larger than the whole budget: never kept, nothing dropped
    assert len(cache) == 2 and cache.kept_rows == 16
    roomy = _scatter.TableCache(rows=4 * _scatter.TABLE_ROWS)
    roomy.put(("huge",), _table(_scatter.TABLE_ROWS + 1), load=1)  # over the per-table cap: never kept
    roomy.put(("cap",), _table(_scatter.TABLE_ROWS), load=1)
    assert roomy.get(("huge",), 1) is None and roomy.get(("cap",), 1) is not None
    cache.clear()
    assert len(cache) == 0 and cache.kept_rows == 0


def test_into_loop_over_more_tables_than_fit_reuses_the_kept_ones(
    tmp_path: Path, spy: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8 stored pieces (2 tensors x 4 row blocks) of 16 rows x 4 parts = 64 rows (+1 for the checksum)
    # each; room for 3 tables. The 128-entry LRU this replaced reused nothing once a step's tables
    # exceeded it: each was dropped just before its next use.
    rows, cols = Layout(("x", None), MESH), Layout((None, "x"), MESH)
    rng = np.random.default_rng(5)
    values = {k: rng.standard_normal((64, 1024)).astype(np.float32) for k in ("a", "b")}
    checkpoint.save(tmp_path / "ck", {k: lc.distribute_tensor(v, rows, driver="numpy") for k, v in values.items()})
    monkeypatch.setattr(_scatter, "_TABLES", _scatter.TableCache(rows=3 * 65))
    builds: list[int] = []
    real = _scatter._tiles
    monkeypatch.setattr(_scatter, "_tiles", lambda *args: builds.append(1) or real(*args))

    def into() -> dict[str, Any]:
        return {k: lc.pack([np.zeros(s, np.float32) for s in cols.local_shapes((64, 1024))], cols) for k in values}

    first, second = into(), into()
    for step in range(3):
        for target in (first, second):  # two targets loaded in turn, as a benchmark or a server pool does
            builds.clear()
            spy.clear()
            checkpoint.load(tmp_path / "ck", into=target, verify=False)
            assert len(spy) == 8 and all(spy)
            for k, v in values.items():
                _blocks_equal(target[k], v, cols)
            # the first load keeps 3 tables; from then on those 3 are reused every load and never evicted by
            # the other target's (live: used in the load before); every other piece builds its table
            assert len(builds) == (8 if step == 0 and target is first else 8 if target is second else 5)
    assert len(_scatter._TABLES) == 3 and _scatter._TABLES.kept_rows == 3 * 65


def test_a_truncated_file_names_tensor_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    file = tmp_path / "m.safetensors"
    safetensors_numpy.save_file({"w": np.ones((64, 512), np.float32)}, str(file))
    data = file.read_bytes()
    with checkpoint.open(file) as source:  # the sizes were checked at open; the file shrinks after
        file.write_bytes(data[: len(data) - 4096])
        with pytest.raises(CheckpointError, match="changed size") as changed:
            source.load({"w": Layout((None, "x"), MESH)}, driver="numpy")  # refused before any read
        assert changed.value.file == str(file.resolve())
        # a file that shrinks while a load reads it (after the Source's check): the scatter read's own error
        monkeypatch.setattr(source, "_check_current", source._check_open)
        with pytest.raises(CheckpointError, match="truncated") as info:
            source.load({"w": Layout((None, "x"), MESH)}, driver="numpy")
    assert info.value.tensor == "w" and info.value.file is not None
