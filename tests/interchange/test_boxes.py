"""Box records (torch DCP ChunkStorageMetadata) <-> layouts, and Orbax _sharding entries <-> layouts."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from strategies import specs

import layoutcore as lc
from layoutcore import TensorSpec
from layoutcore.checkpoint._foreign._boxes import dcp_chunks, layout_from_boxes
from layoutcore.checkpoint._foreign._orbax import layout_from_orbax_sharding, orbax_sharding_entry


def _distinct(spec: TensorSpec) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
    return {b for b in spec.boxes() if math.prod(b[1]) or not spec.shape}


@given(specs())
def test_dcp_chunks_are_the_distinct_non_empty_blocks(spec: TensorSpec) -> None:
    chunks = dcp_chunks(spec.shape, spec.layout)
    assert len(chunks) == len(set(chunks))
    assert set(chunks) == _distinct(spec)  # the oracle: TensorSpec.boxes (== device_slices)


@given(specs())
def test_layout_from_boxes_has_exactly_those_blocks(spec: TensorSpec) -> None:
    chunks = dcp_chunks(spec.shape, spec.layout)
    inferred = layout_from_boxes(spec.shape, chunks)
    assert inferred is not None  # every layout's blocks are some layout's blocks
    assert inferred.mesh is not None and inferred.mesh.devices is None
    assert _distinct(TensorSpec(spec.shape, spec.dtype, inferred)) == set(chunks)


def test_spec_from_boxes_refuses_irregular_boxes() -> None:
    from layoutcore.checkpoint._foreign._boxes import spec_from_boxes

    spec = spec_from_boxes((5, 2), "float32", [((0, 0), (3, 2)), ((3, 0), (2, 2))])
    assert spec.layout == lc.Layout(("d0", None), lc.Mesh((2,), ("d0",)))
    with pytest.raises(lc.UnsupportedLayoutError, match="blocks of no layout") as err:
        spec_from_boxes((6,), "float32", [((0,), (4,)), ((4,), (2,))])
    assert err.value.feature == "placement"


def test_layout_from_irregular_boxes_is_none() -> None:
    assert layout_from_boxes((6,), [((0,), (4,)), ((4,), (2,))]) is None  # 4 + 2 is no chunk rule
    assert layout_from_boxes((4, 4), [((0, 0), (2, 4)), ((2, 0), (2, 2)), ((2, 2), (2, 2))]) is None  # not a grid
    assert layout_from_boxes((5,), [((0,), (2,)), ((2,), (2,)), ((4,), (1,))]) == lc.Layout(
        ("d0",), lc.Mesh((3,), ("d0",))
    )


@given(specs())
def test_orbax_sharding_entry_round_trip(spec: TensorSpec) -> None:
    entry = orbax_sharding_entry(spec.layout)
    text = json.dumps(entry)
    assert layout_from_orbax_sharding(text) == spec.layout
    if spec.mesh.size > 1:  # permuted device ids are kept (ids 0..n-1 in order read back abstract)
        ids = [f"CPU:{i}" for i in reversed(range(spec.mesh.size))]
        with_ids = lc.Layout(spec.layout.axes, spec.mesh.with_devices(ids))
        assert layout_from_orbax_sharding(json.dumps(orbax_sharding_entry(with_ids))) == with_ids


def test_orbax_sharding_refusals() -> None:
    with pytest.raises(lc.CheckpointError, match="GSPMDSharding"):
        layout_from_orbax_sharding('{"sharding_type": "GSPMDSharding"}', file="x/_sharding")
    with pytest.raises(lc.CheckpointError, match="not Orbax sharding JSON"):
        layout_from_orbax_sharding("{", file="x/_sharding")
    bad = {"sharding_type": "NamedSharding", "shape": [2], "axis_names": ["x"], "partition_spec": ["z"]}
    with pytest.raises(lc.CheckpointError, match="cannot express"):
        layout_from_orbax_sharding(bad, file="x/_sharding")
