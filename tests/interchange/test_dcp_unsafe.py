"""torch DCP pickles outside the allow-list raise CheckpointError naming the file and never run.

The DCP directories here are built without torch: stand-in classes registered under DCP's
module names are pickled the way torch pickles them, so the tests run in the NumPy env.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
import types
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import layoutcore as lc
from layoutcore.checkpoint import _foreign as F

META = "torch.distributed.checkpoint.metadata"
FS = "torch.distributed.checkpoint.filesystem"


@pytest.fixture
def fake_torch() -> Iterator[dict[str, type]]:
    """Stand-in DCP classes under DCP's module names (removed afterwards), and a torch.float32 stand-in."""
    made: dict[str, type] = {}
    saved = {m: sys.modules.get(m) for m in (META, FS, "torch", "torch._utils")}
    mods = {m: types.ModuleType(m) for m in saved}
    mods["torch._utils"]._rebuild_tensor_v2 = _rebuild  # type: ignore[attr-defined]
    mods["torch"].FloatStorage = _FloatStorage  # type: ignore[attr-defined]
    for mod, names in {
        META: ["Metadata", "TensorStorageMetadata", "TensorProperties", "ChunkStorageMetadata", "MetadataIndex"],
        FS: ["_StorageInfo"],
    }.items():
        for name in names:
            cls = type(name, (), {"__module__": mod})
            setattr(mods[mod], name, cls)
            made[name] = cls
    f32 = type("dtype", (), {"__reduce__": lambda self: "float32", "__module__": "torch"})()
    mods["torch"].float32 = f32  # type: ignore[attr-defined]
    made["float32"] = f32  # type: ignore[assignment]
    sys.modules.update(mods)
    try:
        yield made
    finally:
        for m, old in saved.items():
            if old is None:
                sys.modules.pop(m, None)
            else:
                sys.modules[m] = old


def _obj(cls: type, **attrs: object) -> object:
    o = cls.__new__(cls)
    o.__dict__.update(attrs)
    return o


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (f"touch {self.marker}",))


def _tensor_record(a: np.ndarray, evil: object = None) -> bytes:
    """A torch.save-style zip of one float32 tensor (data.pkl with a persistent storage id)."""

    class Rebuild:
        def __reduce__(self) -> tuple[object, ...]:
            return (_rebuild, ())

    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=2)
    p.persistent_id = lambda obj: ("storage", _FloatStorage, "0", "cpu", a.size) if obj is _STORAGE else None  # type: ignore[method-assign]
    p.dump(evil if evil is not None else _Rebuilt(a))
    with io.BytesIO() as raw:
        with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr("archive/data.pkl", buf.getvalue())
            z.writestr("archive/byteorder", "little")
            z.writestr("archive/data/0", a.astype("<f4").tobytes())
        return raw.getvalue()


_STORAGE = object()


class _FloatStorage:
    pass


_FloatStorage.__module__, _FloatStorage.__qualname__ = "torch", "FloatStorage"


def _rebuild() -> None:
    pass


_rebuild.__module__, _rebuild.__qualname__ = "torch._utils", "_rebuild_tensor_v2"


class _Rebuilt:
    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __reduce__(self) -> tuple[object, ...]:
        stride = tuple(int(s // 4) for s in self.a.strides)
        return (_rebuild, (_STORAGE, 0, self.a.shape, stride, False, {}))


def _write_dcp(d: Path, fake: dict[str, type], a: np.ndarray, record: bytes, *, meta_extra: object = None) -> None:
    d.mkdir()
    (d / "__0_0.distcp").write_bytes(b"\0" * 16 + record)
    chunk = _obj(fake["ChunkStorageMetadata"], offsets=(0, 0), sizes=a.shape)
    props = _obj(fake["TensorProperties"], dtype=fake["float32"])
    entry = _obj(fake["TensorStorageMetadata"], properties=props, size=a.shape, chunks=[chunk])
    index = _obj(fake["MetadataIndex"], fqn="w", offset=(0, 0), index=0)
    info = _obj(fake["_StorageInfo"], relative_path="__0_0.distcp", offset=16, length=len(record))
    md = _obj(
        fake["Metadata"],
        state_dict_metadata={"w": entry},
        planner_data={"w": ("w",)},
        storage_data={index: info},
        extra=meta_extra,
    )
    (d / ".metadata").write_bytes(pickle.dumps(md, protocol=2))


def test_handmade_dcp_reads(tmp_path: Path, fake_torch: dict[str, type]) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    _write_dcp(tmp_path / "ok", fake_torch, a, _tensor_record(a))
    out = F.load(F.open_foreign(tmp_path / "ok"), {"w": lc.Layout(("x", None), lc.Mesh((2,), ("x",)))}, driver="numpy")
    assert np.array_equal(lc.to_numpy(out["w"]), a)


def test_metadata_with_os_system_is_refused_and_not_run(tmp_path: Path, fake_torch: dict[str, type]) -> None:
    marker = tmp_path / "pwned"
    a = np.ones((2, 2), np.float32)
    _write_dcp(tmp_path / "evil", fake_torch, a, _tensor_record(a), meta_extra=_Evil(marker))
    with pytest.raises(lc.CheckpointError, match=r"\.metadata.*(posix|os)\.system") as err:
        F.open_foreign(tmp_path / "evil")
    assert err.value.file == str(tmp_path / "evil" / ".metadata")
    assert not marker.exists()
    # a bare reduce as the whole file
    d = tmp_path / "bare"
    d.mkdir()
    (d / ".metadata").write_bytes(pickle.dumps(_Evil(marker)))
    with pytest.raises(lc.CheckpointError, match="not on the allow-list"):
        F.open_foreign(d)
    assert not marker.exists()


def test_chunk_pickle_with_eval_is_refused(tmp_path: Path, fake_torch: dict[str, type]) -> None:
    class EvalIt:
        def __reduce__(self) -> tuple[object, ...]:
            return (eval, ("__import__('os').getcwd()",))

    a = np.ones((2, 2), np.float32)
    _write_dcp(tmp_path / "evil", fake_torch, a, _tensor_record(a, evil=EvalIt()))
    with pytest.raises(lc.CheckpointError, match=r"__0_0\.distcp.*(__builtin__|builtins)\.eval"):
        F.open_foreign(tmp_path / "evil")


def test_chunk_that_does_not_tile_or_is_truncated(tmp_path: Path, fake_torch: dict[str, type]) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    record = _tensor_record(a)
    _write_dcp(tmp_path / "cut", fake_torch, a, record)
    distcp = tmp_path / "cut" / "__0_0.distcp"
    distcp.write_bytes(distcp.read_bytes()[:40])
    with pytest.raises(lc.CheckpointError, match="distcp"):
        F.open_foreign(tmp_path / "cut")
    # a record of another shape than the metadata's chunk
    _write_dcp(tmp_path / "shape", fake_torch, a, _tensor_record(a[:2]))
    with pytest.raises(lc.CheckpointError, match="holds float32"):
        F.open_foreign(tmp_path / "shape")


def test_value_outside_plain_data_is_listed_not_loaded(tmp_path: Path, fake_torch: dict[str, type]) -> None:
    """A non-tensor value that is a custom class: inspect lists the tensors, load refuses, nothing runs."""
    marker = tmp_path / "pwned"
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    d = tmp_path / "withvalue"
    _write_dcp(d, fake_torch, a, _tensor_record(a))
    # add a BytesStorageMetadata value whose pickle reduces os.system
    evil = io.BytesIO()
    with zipfile.ZipFile(evil, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle.dumps(_Evil(marker), protocol=2))
    record = evil.getvalue()
    distcp = d / "__0_0.distcp"
    start = distcp.stat().st_size
    distcp.write_bytes(distcp.read_bytes() + record)
    fake_torch["BytesStorageMetadata"] = type("BytesStorageMetadata", (), {"__module__": META})
    sys.modules[META].BytesStorageMetadata = fake_torch["BytesStorageMetadata"]
    raw = pickle.loads((d / ".metadata").read_bytes())
    raw.state_dict_metadata["cfg"] = _obj(fake_torch["BytesStorageMetadata"])
    raw.planner_data["cfg"] = ("cfg",)
    raw.storage_data[_obj(fake_torch["MetadataIndex"], fqn="cfg", offset=None, index=None)] = _obj(
        fake_torch["_StorageInfo"], relative_path="__0_0.distcp", offset=start, length=len(record)
    )
    (d / ".metadata").write_bytes(pickle.dumps(raw, protocol=2))
    info = F.inspect(F.open_foreign(d))
    assert set(info.tensors) == {"w"} and isinstance(info.values["cfg"], F.RefusedValue)
    with pytest.raises(lc.CheckpointError, match=r"value 'cfg' was not loaded.*(posix|os)\.system"):
        F.load(F.open_foreign(d), driver="numpy")
    assert not marker.exists()


@given(
    target=st.sampled_from([".metadata", "__0_0.distcp"]),
    cut=st.integers(0, 200),
    flips=st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=4),
)
@settings(
    max_examples=int(os.environ.get("IC_FUZZ", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_corrupt_dcp_raises_checkpoint_error_or_reads(
    tmp_path_factory: pytest.TempPathFactory,
    fake_torch: dict[str, type],
    target: str,
    cut: int,
    flips: list[tuple[int, int]],
) -> None:
    """Truncated or byte-flipped .metadata / .distcp: CheckpointError, or a load of the right shape."""
    d = tmp_path_factory.mktemp("fuzz") / "dcp"
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    _write_dcp(d, fake_torch, a, _tensor_record(a))
    file = d / target
    data = bytearray(file.read_bytes())
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    file.write_bytes(bytes(data[: max(0, len(data) - cut)]))
    try:
        out = F.load(F.open_foreign(d), driver="numpy")
    except lc.CheckpointError:
        return
    assert lc.to_numpy(out["w"]).shape == (3, 4)


def test_an_opened_dcp_checkpoint_whose_metadata_changed_is_refused(
    tmp_path: Path, fake_torch: dict[str, type]
) -> None:
    """A Source records its ``.metadata``'s version at open; a rewrite of it (a new save) is refused by name."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    _write_dcp(tmp_path / "ok", fake_torch, a, _tensor_record(a))
    src = lc.checkpoint.open(tmp_path / "ok")
    assert np.array_equal(lc.to_numpy(src.load(driver="numpy")["w"]), a)
    meta = tmp_path / "ok" / ".metadata"
    meta.write_bytes(meta.read_bytes() + b"\0")  # a rewrite: other bytes, other size
    with pytest.raises(lc.CheckpointError, match=r"\.metadata.*since this Source was opened") as err:
        src.load(driver="numpy")
    assert err.value.file == str(meta.resolve())
