"""Seed 002, ``tf.keras.dtensor.experimental.layout_map_scope``, run as written against layoutcore's API.

The three model types of the seed (subclassed, functional, sequential) with ``d1``/``d2`` kernels
and biases take their layouts from a layoutcore ``LayoutMap`` inside ``lc.layout_map_scope``;
each layout is read back with DTensor's own ``fetch_layout`` (through the driver's native path and
raw) and the models' outputs are checked against NumPy.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is tf-keras (keras 3 has no DTensor on TF)

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from layoutcore_tensorflow import TensorFlowDriver, to_tensorflow_layout
from tensorflow.experimental import dtensor

import layoutcore as lc


@pytest.fixture
def seed_map(driver: TensorFlowDriver) -> tuple[lc.LayoutMap, dict[str, lc.Layout]]:
    """The seed's map: ``d1``/``d2`` kernels and biases; ``d2.bias`` is left to the replicated default."""
    assert tf.keras.layers.Dense is tf_keras.layers.Dense, "tf.keras must be tf-keras here (TF_USE_LEGACY_KERAS=1)"
    mesh = lc.Mesh((2, 4), ("batch", "model"))
    layout_1 = lc.Layout((None, "model"), mesh)
    layout_2 = lc.Layout(("model",), mesh)
    layout_3 = lc.Layout(("model", None), mesh)
    layout_map = lc.LayoutMap(mesh=mesh)
    layout_map["d1.kernel"] = layout_1
    layout_map["d1.bias"] = layout_2
    layout_map["d2.kernel"] = layout_3
    expected = {"d1.kernel": layout_1, "d1.bias": layout_2, "d2.kernel": layout_3, "d2.bias": lc.Layout((None,), mesh)}
    return layout_map, expected


def check(variables: dict[str, tf.Variable], expected: dict[str, lc.Layout]) -> None:
    for path, layout in expected.items():
        variable = variables[path]
        assert isinstance(variable, dtensor.DVariable), path
        assert lc.fetch_layout(variable) == layout, path
        assert dtensor.fetch_layout(variable) == to_tensorflow_layout(layout), path  # TF's own answer


def check_forward(model: tf_keras.Model, variables: dict[str, tf.Variable], mesh: lc.Mesh, batch: int = 10) -> None:
    """The model's output equals NumPy's two dense layers on the same weights."""
    x = np.random.default_rng(0).standard_normal((batch, 10)).astype(np.float32)
    got = lc.to_numpy(model(lc.distribute_tensor(x, lc.Layout(("batch", None), mesh))))
    w = {k: lc.to_numpy(v) for k, v in variables.items()}
    want = (x @ w["d1.kernel"] + w["d1.bias"]) @ w["d2.kernel"] + w["d2.bias"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


class SubclassModel(tf.keras.Model):  # the seed's model, as written
    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)
        self.d1 = tf.keras.layers.Dense(1000)
        self.d2 = tf.keras.layers.Dense(1000)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        x = self.d1(inputs)
        return self.d2(x)


@pytest.mark.parametrize("build_inside", [False, True], ids=["weights-after-scope", "weights-inside-scope"])
def test_subclassed_model(seed_map: tuple[lc.LayoutMap, dict[str, lc.Layout]], build_inside: bool) -> None:
    layout_map, expected = seed_map
    mesh = layout_map.mesh
    assert mesh is not None
    inputs = lc.distribute_tensor(np.zeros((10, 10), np.float32), lc.Layout(("batch", None), mesh))
    with lc.layout_map_scope(layout_map):
        model = SubclassModel()
        if build_inside:
            model(inputs)
    # Triggering the creation of weights within or outside of the scope works (the seed).
    results = model(inputs)
    assert lc.fetch_layout(results).mesh == mesh
    variables = {"d1.kernel": model.d1.kernel, "d1.bias": model.d1.bias, "d2.kernel": model.d2.kernel}
    variables["d2.bias"] = model.d2.bias
    check(variables, expected)
    check_forward(model, variables, mesh)


def test_functional_model(seed_map: tuple[lc.LayoutMap, dict[str, lc.Layout]]) -> None:
    layout_map, expected = seed_map
    with lc.layout_map_scope(layout_map):
        inputs = tf.keras.Input((10,), batch_size=10)
        x = tf.keras.layers.Dense(20, name="d1")(inputs)
        output = tf.keras.layers.Dense(30, name="d2")(x)
        model = tf.keras.Model(inputs, output)
    d1 = model.layers[1]
    d2 = model.layers[2]
    variables = {"d1.kernel": d1.kernel, "d1.bias": d1.bias, "d2.kernel": d2.kernel, "d2.bias": d2.bias}
    check(variables, expected)
    assert layout_map.mesh is not None
    check_forward(model, variables, layout_map.mesh)


def test_sequential_model(seed_map: tuple[lc.LayoutMap, dict[str, lc.Layout]]) -> None:
    layout_map, expected = seed_map
    with lc.layout_map_scope(layout_map):
        model = tf.keras.Sequential(
            [tf.keras.layers.Dense(20, name="d1", input_shape=(10,)), tf.keras.layers.Dense(30, name="d2")]
        )
    d1 = model.layers[0]
    d2 = model.layers[1]
    variables = {"d1.kernel": d1.kernel, "d1.bias": d1.bias, "d2.kernel": d2.kernel, "d2.bias": d2.bias}
    check(variables, expected)
    assert layout_map.mesh is not None
    check_forward(model, variables, layout_map.mesh)


def test_lookups_follow_layoutcore_match_rules(driver: TensorFlowDriver) -> None:
    # tf-keras' own map uses re.match; layoutcore's default is re.search, and several matches are an error.
    mesh = lc.Mesh((8,), ("model",))
    searching = lc.LayoutMap(mesh)
    searching["kernel"] = (None, "model")  # re.match would miss "d1.kernel"
    with lc.layout_map_scope(searching):
        model = tf.keras.Sequential([tf.keras.layers.Dense(16, name="d1", input_shape=(4,))])
    assert lc.fetch_layout(model.layers[0].kernel) == lc.Layout((None, "model"), mesh)
    assert lc.fetch_layout(model.layers[0].bias) == lc.Layout((None,), mesh)

    ambiguous = lc.LayoutMap(mesh)
    ambiguous["d1.*kernel"] = (None, "model")
    ambiguous["kernel"] = ("model", None)
    with pytest.raises(lc.AmbiguousLayoutError) as info, lc.layout_map_scope(ambiguous):
        tf.keras.Sequential([tf.keras.layers.Dense(16, name="d1", input_shape=(8,))])
    assert info.value.patterns == ("d1.*kernel", "kernel")


def test_entry_of_the_wrong_rank_is_refused_naming_the_path(driver: TensorFlowDriver) -> None:
    # tf-keras would hand TF the rank-2 layout for the rank-1 bias (TF's UnknownError).
    mesh = lc.Mesh((8,), ("model",))
    layout_map = lc.LayoutMap(mesh)
    layout_map["d1"] = (None, "model")
    with pytest.raises(lc.LayoutError, match=r"'d1\.bias'.*rank 1"), lc.layout_map_scope(layout_map):
        tf.keras.Sequential([tf.keras.layers.Dense(16, name="d1", input_shape=(8,))])


def test_layoutcore_variables_inside_the_scope(driver: TensorFlowDriver) -> None:
    # lc.Variable makes its DVariable directly: tf-keras' lazy variables do not capture it.
    mesh = lc.Mesh((8,), ("model",))
    layout_map = lc.LayoutMap(mesh)
    layout_map["w"] = ("model",)
    with lc.layout_map_scope(layout_map):
        v = lc.Variable(np.arange(8, dtype=np.float32), path="w")
    assert isinstance(v.handle, dtensor.DVariable)
    assert lc.fetch_layout(v.value) == lc.Layout(("model",), mesh)
    np.testing.assert_array_equal(v.numpy(), np.arange(8))


def test_without_tf_keras_a_variable_in_the_scope_says_what_to_install(
    driver: TensorFlowDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tf_keras", None)  # importlib.util.find_spec("tf_keras") -> None
    layout_map = lc.LayoutMap(lc.Mesh((8,), ("model",)))
    with pytest.raises(lc.DriverUnavailableError) as info, lc.layout_map_scope(layout_map):
        tf.Variable(np.zeros(8, np.float32), name="kernel")
    assert "layoutcore[tf-keras]" in str(info.value) and "kernel" in str(info.value)
    assert isinstance(tf.Variable(1.0), tf.Variable)  # outside the scope nothing is refused


def test_keras3_variables_in_the_scope_are_refused_by_name(driver: TensorFlowDriver) -> None:
    import keras  # keras 3, on its TensorFlow backend here

    layout_map = lc.LayoutMap(lc.Mesh((8,), ("model",)))
    layout_map["kernel"] = (None, "model")
    with pytest.raises(lc.UnsupportedLayoutError, match="keras 3") as info, lc.layout_map_scope(layout_map):
        keras.layers.Dense(8).build((4, 4))
    assert info.value.feature == "keras3" and info.value.driver == "tensorflow"
