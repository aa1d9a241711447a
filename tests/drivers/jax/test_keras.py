"""``layoutcore.keras`` on keras 3's JAX backend: conversions, the map translation, and ModelParallel with fit.

Oracles: hand-written PartitionSpecs per variable path, keras' own ``LayoutMap`` lookup, and the
same model trained by keras without any distribution.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is imported (tox sets it too)

import json
import re
from collections.abc import Iterator
from typing import Any

import jax
import keras
import numpy as np
import pytest
from _jax_helpers import run_python
from jax.sharding import NamedSharding, PartitionSpec
from keras import layers
from layoutcore_jax import JaxDriver

import layoutcore as lc
import layoutcore.keras as lk

assert keras.backend.backend() == "jax", "these tests need KERAS_BACKEND=jax set before keras is imported"

P = PartitionSpec
# The layouts ModelParallel must give, per keras variable path (unlisted paths: replicated).
EXPECTED = {
    "embedding/embeddings": P(None, "model"),
    "mha/query/kernel": P(None, "model", None),
    "mha/key/kernel": P(None, "model", None),
    "mha/value/kernel": P(None, "model", None),
    "mha/attention_output/kernel": P("model", None, None),
    "mlp_up/kernel": P(None, ("batch", "model")),
    "mlp_up/bias": P(("batch", "model")),
    "mlp_down/kernel": P("model", None),
}


def _map(mesh: lc.Mesh, *, multi_axis: bool = True) -> lc.LayoutMap:
    """Search-mode patterns (layoutcore's default), as a user writes them: not anchored to the model's name."""
    lm = lc.LayoutMap(mesh)
    lm["embedding/embeddings"] = (None, "model")
    lm["query/kernel"] = (None, "model", None)
    lm["(key|value)/kernel"] = (None, "model", None)
    lm["attention_output/kernel"] = ("model", None, None)
    lm["mlp_down/kernel"] = ("model", None)
    if multi_axis:
        lm["mlp_up/kernel"] = (None, ("batch", "model"))
        lm["mlp_up/bias"] = (("batch", "model"),)
    return lm


def _build() -> keras.Model:
    """A transformer block: embedding, multi-head self-attention, MLP, layer norms, a classifier head."""
    inputs = keras.Input((8,), dtype="int32")
    x = layers.Embedding(32, 16, name="embedding")(inputs)
    attn = layers.MultiHeadAttention(num_heads=2, key_dim=8, name="mha")(x, x)
    x = layers.LayerNormalization(name="ln1")(x + attn)
    h = layers.Dense(32, activation="relu", name="mlp_up")(x)
    h = layers.Dense(16, name="mlp_down")(h)
    x = layers.LayerNormalization(name="ln2")(x + h)
    x = layers.GlobalAveragePooling1D()(x)
    model = keras.Model(inputs, layers.Dense(4, name="head")(x))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


@pytest.fixture
def mesh42(driver: JaxDriver) -> lc.Mesh:
    return lc.Mesh((4, 2), ("batch", "model"))


@pytest.fixture(autouse=True)
def _no_global_distribution() -> Iterator[None]:
    yield
    keras.distribution.set_distribution(None)


# -- conversions ---------------------------------------------------------------------------------
def test_to_keras_mesh_and_layout(mesh42: lc.Mesh) -> None:
    km = lk.to_keras_mesh(mesh42)
    assert isinstance(km, keras.distribution.DeviceMesh)
    assert tuple(km.shape) == (4, 2) and list(km.axis_names) == ["batch", "model"]
    assert km.devices.tolist() == [[f"cpu:{2 * r + c}" for c in range(2)] for r in range(4)]
    # keras' own backend conversion lands on the same devices, row-major.
    assert [d.id for d in km.backend_mesh.devices.flat] == list(range(8))
    kl = lk.to_keras_layout(lc.Layout(("batch", None), mesh42))
    assert isinstance(kl, keras.distribution.TensorLayout) and kl.axes == ("batch", None)
    assert kl.backend_layout == NamedSharding(km.backend_mesh, P("batch", None))
    assert lk.to_keras_layout(lc.Layout((None, "model"))).device_mesh is None


def test_to_keras_layout_refuses_multi_axis_typed(mesh42: lc.Mesh) -> None:
    with pytest.raises(lc.UnsupportedLayoutError) as info:
        lk.to_keras_layout(lc.Layout((("batch", "model"), None), mesh42))
    assert info.value.feature == "multi_axis" and info.value.driver == "keras"
    with pytest.raises(lc.UnsupportedLayoutError):
        lk.to_keras_layout_map(_map(mesh42))  # holds multi-axis entries
    with pytest.raises(lc.LayoutError):
        lk.to_keras_layout(("batch", None))
    with pytest.raises(lc.LayoutError):
        lk.to_keras_mesh("4x2")


# -- the map translation ---------------------------------------------------------------------------
PROBE_PATHS = ["query/kernel", "mha/query/kernel_extra", "a\nquery/kernel", "key", "x/key/kernel/y"]


def _keras_axes(km: Any, path: str) -> Any:
    try:
        got = km[path]
    except ValueError:
        return "ambiguous"
    return None if got is None else tuple(got.axes)


def _lc_axes(lm: lc.LayoutMap, path: str) -> Any:
    try:
        got = lm[path]
    except lc.AmbiguousLayoutError:
        return "ambiguous"
    return None if got is None else got.axes


def test_the_installed_keras_fullmatches() -> None:
    assert lk.keras_match_rule() == "fullmatch"  # keras 3.15.1, pinned in constraints.txt


def test_search_map_translates_to_the_same_answers_under_keras_lookup(mesh42: lc.Mesh) -> None:
    lm = _map(mesh42, multi_axis=False)
    km = lk.to_keras_layout_map(lm)
    paths = [v.path for v in _build().variables] + PROBE_PATHS
    for path in paths:
        assert _keras_axes(km, path) == _lc_axes(lm, path), path
    # The naive copy keras users write by hand differs: that is what the translation is for.
    naive = keras.distribution.LayoutMap(lk.to_keras_mesh(mesh42))
    for pattern in lm:
        naive[pattern] = tuple(lm[pattern].axes)  # type: ignore[union-attr]
    assert naive["mha/query/kernel"] is None and lm["mha/query/kernel"] is not None


@pytest.mark.parametrize("match", ["search", "match", "fullmatch"])
@pytest.mark.parametrize("on_multiple", ["error", "first"])
def test_translation_keeps_exact_keys_modes_and_first(mesh42: lc.Mesh, match: str, on_multiple: str) -> None:
    lm = lc.LayoutMap(mesh42, match=match, on_multiple=on_multiple)  # type: ignore[arg-type]
    lm["dense/kernel"] = ("batch", None)  # an exact key that the next pattern also matches
    lm["dense.*"] = (None, "model")
    lm["a+b"] = ("model",)  # a key whose own text the pattern does not match
    lm[r"^x"] = ("batch",)
    km = lk.to_keras_layout_map(lm)
    for path in ["dense/kernel", "dense/bias", "my/dense/kernel", "a+b", "aab", "xaab", "x", "yx", "dense"]:
        assert _keras_axes(km, path) == _lc_axes(lm, path), (match, on_multiple, path)


def test_translation_refuses_what_it_cannot_rewrite(mesh42: lc.Mesh) -> None:
    lm = lc.LayoutMap(mesh42)
    lm["(?i)dense"] = ("batch",)
    with pytest.raises(lc.LayoutError, match=re.escape("(?i)dense")):
        lk.to_keras_layout_map(lm)


# -- ModelParallel + fit -------------------------------------------------------------------------
def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 32, size=(64, 8)).astype("int32"), rng.integers(0, 4, size=(64,)).astype("int32")


def test_model_parallel_fit_lays_out_every_variable_and_slot_and_matches_undistributed(
    driver: JaxDriver, mesh42: lc.Mesh
) -> None:
    x, y = _data()
    keras.utils.set_random_seed(0)
    reference = _build()
    initial = [np.array(w) for w in reference.get_weights()]
    reference.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)

    distribution = lk.ModelParallel(_map(mesh42), batch_dim_name="batch")
    assert isinstance(distribution, keras.distribution.ModelParallel)
    with distribution.scope():
        model = _build()
        model.set_weights(initial)
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)

    jax_mesh = lk.to_keras_mesh(mesh42).backend_mesh
    optimizer = model.optimizer
    slots = {"momentum": optimizer._momentums, "velocity": optimizer._velocities}
    assert [v.path for v in model.trainable_variables] == [v.path for v in model.variables]
    for index, variable in enumerate(model.trainable_variables):
        want = NamedSharding(jax_mesh, EXPECTED.get(variable.path, P()))
        arrays = {"variable": variable.value} | {k: s[index].value for k, s in slots.items()}
        for what, array in arrays.items():
            assert isinstance(array, jax.Array)
            assert array.sharding.is_equivalent_to(want, array.ndim), (variable.path, what, array.sharding)
            spec = tuple(EXPECTED.get(variable.path, ()))
            assert lc.fetch_layout(array, driver="jax") == lc.Layout(spec + (None,) * (array.ndim - len(spec)), mesh42)
    for got, want in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # Training moved the weights: the comparison is not between two untouched copies.
    assert not np.allclose(model.get_weights()[0], initial[0])


def test_model_parallel_refuses_typed(mesh42: lc.Mesh) -> None:
    with pytest.raises(lc.LayoutError, match="LayoutMap"):
        lk.ModelParallel({"a": ("batch",)})
    with pytest.raises(lc.LayoutError, match="mesh"):
        lk.ModelParallel(lc.LayoutMap())
    with pytest.raises(lc.LayoutError, match="batch_dim_name"):
        lk.ModelParallel(lc.LayoutMap(mesh42), batch_dim_name="data")
    lm = lc.LayoutMap(mesh42)
    lm["kernel"] = ("batch",)  # rank 1 for a rank-2 kernel
    with lk.ModelParallel(lm).scope(), pytest.raises(lc.LayoutError, match="kernel"):
        layers.Dense(4).build((None, 8))


def test_keras_started_jax_first_is_refused_with_what_to_do() -> None:
    code = (
        "import os, json\n"
        "os.environ['KERAS_BACKEND'] = 'jax'\n"
        "import keras\n"
        "keras.ops.ones(2)\n"  # keras starts JAX: one CPU device
        "import layoutcore as lc, layoutcore.keras as lk\n"
        "try:\n"
        "    lk.ModelParallel(lc.LayoutMap(lc.Mesh((4, 2), ('batch', 'model'))))\n"
        "except lc.LayoutError as e:\n"
        "    print(json.dumps(str(e)))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    message = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "needs 8 devices" in message and "before any keras operation" in message
    assert "JAX_NUM_CPU_DEVICES" in message


def test_importing_layoutcore_keras_imports_neither_keras_nor_jax() -> None:
    code = (
        "import json, sys\n"
        "import layoutcore, layoutcore.keras\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('keras', 'jax', 'jaxlib'))))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_model_parallel_on_a_backend_without_distribution_is_refused_typed() -> None:
    code = (
        "import os, json\n"
        "os.environ['KERAS_BACKEND'] = 'numpy'\n"
        "import layoutcore as lc, layoutcore.keras as lk\n"
        "try:\n"
        "    lk.ModelParallel(lc.LayoutMap(lc.Mesh((2,), ('batch',))))\n"
        "except lc.UnsupportedLayoutError as e:\n"
        "    print(json.dumps([e.driver, e.feature, str(e)]))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    driver, feature, message = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [driver, feature] == ["keras", "backend"] and "'numpy'" in message
