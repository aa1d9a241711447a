"""``layoutcore_jax.tree_shardings`` on flax NNX, linen and optax trees, and a training run it places.

The oracle for placement is JAX's own ``NamedSharding`` of the map's PartitionSpec; the oracle for
the training result is the same program run on one device without any sharding.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen, nnx
from jax.sharding import NamedSharding, PartitionSpec
from layoutcore_jax import JaxDriver, tree_paths, tree_shardings

import layoutcore as lc


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.dense1 = nnx.Linear(8, 16, rngs=rngs)
        self.layers = nnx.List([nnx.Linear(16, 16, rngs=rngs) for _ in range(2)])
        self.out = nnx.Linear(16, 4, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jax.nn.relu(self.dense1(x))
        for layer in self.layers:
            x = jax.nn.relu(layer(x))
        return self.out(x)  # type: ignore[no-any-return]


# PartitionSpecs the map below must give, written out by hand as the oracle.
EXPECTED = {
    "dense1/kernel": PartitionSpec(None, "model"),
    "dense1/bias": PartitionSpec("model"),
    "layers/0/kernel": PartitionSpec("model", None),
    "layers/1/kernel": PartitionSpec("model", None),
    "out/kernel": PartitionSpec("model", None),
}


@pytest.fixture
def mesh42(driver: JaxDriver) -> lc.Mesh:
    return lc.Mesh((4, 2), ("batch", "model"))


@pytest.fixture
def layout_map(mesh42: lc.Mesh) -> lc.LayoutMap:
    lm = lc.LayoutMap(mesh42)
    lm["dense1/kernel"] = (None, "model")
    lm["dense1/bias"] = ("model",)
    lm["layers/.*/kernel"] = ("model", None)
    lm["out/kernel"] = ("model", None)
    return lm


def _spec_for(path: str, ndim: int) -> PartitionSpec:
    """The expected spec of a parameter or optimizer slot at ``path`` (slots end with the parameter path)."""
    for key, spec in EXPECTED.items():
        if path == key or path.endswith("/" + key):
            return spec
    return PartitionSpec(*([None] * ndim))


def _assert_sharded_as_map(tree: Any, shardings: Any, jax_mesh: jax.sharding.Mesh, *, placed: bool = True) -> None:
    """Every sharding (and, if ``placed``, every array's own sharding) is the hand-written spec for its path."""
    leaves, _ = tree_paths(tree)
    sharding_leaves = jax.tree_util.tree_leaves(shardings)
    assert len(leaves) == len(sharding_leaves)
    for (path, leaf), sharding in zip(leaves, sharding_leaves, strict=True):
        value = leaf.get_value() if isinstance(leaf, nnx.Variable) else leaf
        want = NamedSharding(jax_mesh, _spec_for(path, value.ndim))
        assert sharding.is_equivalent_to(want, value.ndim), (path, sharding, want)
        if placed:
            assert value.sharding.is_equivalent_to(want, value.ndim), (path, value.sharding)


def test_tree_paths_strip_nnx_value_and_name_optax_slots() -> None:
    _, params = nnx.split(MLP(nnx.Rngs(0)), nnx.Param)
    paths = [p for p, _ in tree_paths(params)[0]]
    assert paths == [
        "dense1/bias",
        "dense1/kernel",
        "layers/0/bias",
        "layers/0/kernel",
        "layers/1/bias",
        "layers/1/kernel",
        "out/bias",
        "out/kernel",
    ]
    opt_paths = [p for p, _ in tree_paths(optax.adam(1e-3).init(params))[0]]
    assert opt_paths[:3] == ["0/count", "0/mu/dense1/bias", "0/mu/dense1/kernel"]
    assert [p for p, _ in tree_paths({"a": [1.0, {"b": np.zeros(2)}]}, separator=".")[0]] == ["a.0", "a.1.b"]


def test_tree_shardings_on_nnx_state_optax_and_shape_structs(
    driver: JaxDriver, layout_map: lc.LayoutMap, mesh42: lc.Mesh
) -> None:
    jax_mesh = driver.named_sharding(lc.Layout.replicated(mesh42, 0)).mesh
    _, params = nnx.split(MLP(nnx.Rngs(0)), nnx.Param)
    shardings = tree_shardings(layout_map, params)
    assert isinstance(shardings, nnx.State)
    _assert_sharded_as_map(params, shardings, jax_mesh, placed=False)
    placed = jax.device_put(params, shardings)  # the result is a pytree prefix jax takes as it is
    _assert_sharded_as_map(placed, shardings, jax_mesh)
    opt_state = optax.adam(1e-3).init(params)
    opt_shardings = tree_shardings(layout_map, opt_state)
    _assert_sharded_as_map(jax.device_put(opt_state, opt_shardings), opt_shardings, jax_mesh)
    # Abstract shapes (nothing allocated) give the same shardings.
    abstract = jax.eval_shape(lambda: params)
    assert jax.tree_util.tree_leaves(tree_shardings(layout_map, abstract)) == jax.tree_util.tree_leaves(shardings)


def test_tree_shardings_on_linen_params(driver: JaxDriver, mesh42: lc.Mesh) -> None:
    model = linen.Sequential([linen.Dense(16), linen.relu, linen.Dense(4)])
    variables = model.init(jax.random.key(0), jnp.ones((2, 8)))
    lm = lc.LayoutMap(mesh42)
    lm[r"layers_0/kernel"] = (None, "model")
    shardings = tree_shardings(lm, variables)
    assert shardings["params"]["layers_0"]["kernel"].spec == PartitionSpec(None, "model")
    assert shardings["params"]["layers_2"]["kernel"].spec == PartitionSpec(None, None)


def test_tree_shardings_refuses_typed(driver: JaxDriver, mesh42: lc.Mesh, layout_map: lc.LayoutMap) -> None:
    with pytest.raises(lc.LayoutError, match="dense1/kernel"):
        tree_shardings(layout_map, {"dense1": {"kernel": np.zeros(3)}})  # rank-2 entry, rank-1 leaf
    with pytest.raises(lc.UnsupportedLayoutError) as info:
        tree_shardings(layout_map, {"dense1": {"kernel": np.zeros((3, 3))}})  # 3 over 2 devices: uneven
    assert info.value.feature == "uneven"
    with pytest.raises(lc.LayoutError, match="LayoutMap"):
        tree_shardings({"a": ("x",)}, {})  # type: ignore[arg-type]
    with pytest.raises(lc.LayoutError, match="JAX driver"):
        tree_shardings(layout_map, {}, driver="numpy")


def _train(params: Any, opt_state: Any, graphdef: Any, data: list[tuple[np.ndarray, np.ndarray]], **jit: Any) -> Any:
    tx = optax.adam(1e-2)

    def loss_fn(p: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.mean((nnx.merge(graphdef, p)(x) - y) ** 2)

    def step(p: Any, o: Any, x: jax.Array, y: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, o = tx.update(grads, o, p)
        return optax.apply_updates(p, updates), o, loss

    step_fn = jax.jit(step, **jit)
    for x, y in data:
        params, opt_state, _ = step_fn(params, opt_state, x, y)
    return params, opt_state


def test_nnx_model_and_optax_state_placed_by_tree_shardings_train_like_one_device(
    driver: JaxDriver, layout_map: lc.LayoutMap, mesh42: lc.Mesh
) -> None:
    rng = np.random.default_rng(0)
    data = [
        (rng.normal(size=(16, 8)).astype(np.float32), rng.normal(size=(16, 4)).astype(np.float32)) for _ in range(10)
    ]
    graphdef, params = nnx.split(MLP(nnx.Rngs(0)), nnx.Param)
    tx = optax.adam(1e-2)

    # Reference: one device, no shardings anywhere.
    one = jax.devices()[0]
    ref_params, _ = _train(
        jax.device_put(params, one), jax.device_put(tx.init(params), one), graphdef,
        [(jax.device_put(x, one), jax.device_put(y, one)) for x, y in data],
    )  # fmt: skip

    p_sh = tree_shardings(layout_map, params)
    o_sh = tree_shardings(layout_map, jax.eval_shape(tx.init, params))
    data_sh = driver.named_sharding(lc.Layout(("batch", None), mesh42))
    rep = driver.named_sharding(lc.Layout.replicated(mesh42, 0))
    placed = jax.device_put(params, p_sh)
    out_params, out_opt = _train(
        placed, jax.device_put(tx.init(params), o_sh), graphdef, data,
        in_shardings=(p_sh, o_sh, data_sh, data_sh), out_shardings=(p_sh, o_sh, rep),
    )  # fmt: skip

    _assert_sharded_as_map(out_params, p_sh, rep.mesh)
    _assert_sharded_as_map(out_opt, o_sh, rep.mesh)
    got = jax.tree_util.tree_leaves(out_params)
    want = jax.tree_util.tree_leaves(ref_params)
    assert len(got) == len(want) == 8
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
    # Training moved the weights (the comparison is not between two untouched copies).
    assert not np.allclose(np.asarray(got[1]), np.asarray(jax.tree_util.tree_leaves(params)[1]))


def test_core_tree_layouts_and_distribute_tree_on_the_jax_driver(
    driver: JaxDriver, layout_map: lc.LayoutMap, mesh42: lc.Mesh
) -> None:
    tree = {"dense1": {"kernel": np.arange(16.0, dtype=np.float32).reshape(2, 8)}, "step": 3}
    placed = lc.distribute_tree(tree, lc.tree_layouts(layout_map, tree), driver="jax")
    kernel = placed["dense1"]["kernel"]
    assert isinstance(kernel, jax.Array) and placed["step"] == 3
    want = NamedSharding(driver.named_sharding(lc.Layout.replicated(mesh42, 0)).mesh, PartitionSpec(None, "model"))
    assert kernel.sharding.is_equivalent_to(want, 2)
    for shard in kernel.addressable_shards:  # JAX's own per-device data against the original
        np.testing.assert_array_equal(np.asarray(shard.data), tree["dense1"]["kernel"][shard.index])  # type: ignore[index]
