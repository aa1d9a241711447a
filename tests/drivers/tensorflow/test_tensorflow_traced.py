"""layoutcore inside ``tf.function`` (docs/design.md#data-functions-made-precise): relayout, distribute_tensor, call_with_layout and
fetch_layout in graph mode, and a training step over DVariables that matches eager execution."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import tensorflow as tf
from layoutcore_tensorflow import TensorFlowDriver, to_tensorflow_mesh
from tensorflow.experimental import dtensor

import layoutcore as lc


@pytest.fixture
def mesh(driver: TensorFlowDriver) -> lc.Mesh:
    return lc.Mesh((2, 4), ("batch", "model"))


def blocks(tensor: object, x: np.ndarray, layout: lc.Layout) -> None:
    """Each component (read with DTensor's unpack) is the geometry's slice of ``x``."""
    components = dtensor.unpack(tensor)
    for p, sl in enumerate(layout.device_slices(x.shape)):
        np.testing.assert_array_equal(components[p].numpy(), x[sl], err_msg=f"component {p} of {layout}")


def test_data_functions_inside_tf_function(mesh: lc.Mesh) -> None:
    rows = lc.Layout(("batch", None), mesh)
    cols = lc.Layout((None, "model"), mesh)
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    seen: dict[str, object] = {}

    @tf.function(autograph=False)
    def step(t: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        moved = lc.relayout(t, cols)
        placed = lc.distribute_tensor(tf.ones((4, 8)) * 2.0, rows)  # a graph tensor, placed by a Relayout op
        made = lc.call_with_layout(tf.ones, cols, shape=(4, 8))
        seen["moved"] = lc.fetch_layout(moved)
        seen["made"] = lc.fetch_layout(made)
        seen["read"] = lc.fetch_layout(w.value)  # a captured DVariable's read: its layout is known
        seen["traced"] = lc.get_driver().is_traced(moved)
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            lc.fetch_layout(t * 1.0)  # DTensor decides an op's layout when it compiles the function
        seen["unknown"] = info.value.feature
        with pytest.raises(lc.UnsupportedLayoutError):
            lc.to_numpy(moved)  # a host read inside a trace
        return moved, placed, made

    w = lc.Variable(np.zeros((4, 8), np.float32), rows)
    moved, placed, made = step(lc.distribute_tensor(x, rows))
    assert seen == {"moved": cols, "made": cols, "read": rows, "traced": True, "unknown": "traced"}
    for tensor, values, layout in ((moved, x, cols), (placed, np.full((4, 8), 2.0, np.float32), rows)):
        assert lc.fetch_layout(tensor) == layout
        blocks(tensor, values, layout)
    blocks(made, np.ones((4, 8), np.float32), cols)


def test_relayout_across_meshes_inside_tf_function_is_refused(mesh: lc.Mesh) -> None:
    other = lc.Mesh((8,), ("d",))
    t = lc.distribute_tensor(np.zeros((8, 8), np.float32), lc.Layout(("batch", None), mesh))

    @tf.function(autograph=False)
    def move(v: tf.Tensor) -> tf.Tensor:
        return lc.relayout(lc.relayout(v, lc.Layout((None, "model"), mesh)), lc.Layout(("d", None), other))

    with pytest.raises(lc.UnsupportedLayoutError, match="within one mesh"):
        move(t)


def mlp_params(mesh: lc.Mesh) -> dict[str, lc.Variable]:
    """A 2-layer MLP, Megatron style: w1 column-sharded, w2 row-sharded over ``model``."""
    rng = np.random.default_rng(1)
    return {
        "w1": lc.Variable(rng.standard_normal((8, 16)).astype(np.float32) * 0.3, lc.Layout((None, "model"), mesh)),
        "b1": lc.Variable(np.zeros(16, np.float32), lc.Layout(("model",), mesh)),
        "w2": lc.Variable(rng.standard_normal((16, 4)).astype(np.float32) * 0.3, lc.Layout(("model", None), mesh)),
    }


def make_step(params: dict[str, lc.Variable], batch: lc.Layout, lr: float = 0.1) -> object:
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        x = lc.relayout(x, batch)  # inside tf.function: DTensor's sharding constraint
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, params["w1"].value) + params["b1"].value)
            error = tf.matmul(h, params["w2"].value) - y
            loss = tf.reduce_mean(error * error)  # not ** 2: its eager gradient builds a non-DTensor constant
        grads = tape.gradient(loss, [p.handle for p in params.values()])
        for p, g in zip(params.values(), grads, strict=True):
            p.assign(lc.relayout(p.value - lr * g, p.layout))
        return loss

    return step


def test_tf_function_training_step_matches_eager(mesh: lc.Mesh) -> None:
    batch = lc.Layout(("batch", None), mesh)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((8, 8)).astype(np.float32) for _ in range(3)]
    ys = [rng.standard_normal((8, 4)).astype(np.float32) for _ in range(3)]
    runs = {}
    for mode in ("eager", "tf.function"):
        params = mlp_params(mesh)
        step = make_step(params, batch)
        if mode == "tf.function":
            step = tf.function(step, autograph=False)
        # Eager gradients make new tensors (ones for the loss' gradient): default_mesh gives them the mesh.
        # The tf.function step needs no such scope (its DTensor inputs put it on the mesh).
        scope = dtensor.default_mesh(to_tensorflow_mesh(mesh)) if mode == "eager" else contextlib.nullcontext()
        with scope:
            losses = [
                float(lc.to_numpy(step(lc.distribute_tensor(x, batch), lc.distribute_tensor(y, batch))))  # type: ignore[operator]
                for x, y in zip(xs, ys, strict=True)
            ]
        for name, p in params.items():
            assert lc.fetch_layout(p.value) == p.layout, name
        runs[mode] = (losses, {k: p.numpy() for k, p in params.items()})
    (eager_losses, eager_params), (graph_losses, graph_params) = runs["eager"], runs["tf.function"]
    assert eager_losses[-1] < eager_losses[0]  # it trains
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    for name in eager_params:
        np.testing.assert_allclose(graph_params[name], eager_params[name], rtol=1e-5, atol=1e-6, err_msg=name)
