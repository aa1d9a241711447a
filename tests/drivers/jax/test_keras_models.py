"""keras-hub backbones under their own ``get_layout_map``, carried over by ``layoutcore.keras.from_keras_layout_map``.

Oracles: keras' own ``LayoutMap`` lookup (``kmap[path]``) for every path and variable, and the same
backbone built and trained by keras without any distribution. Tiny configs built in code (no download).
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is imported (tox sets it too)

from typing import Any

import keras
import numpy as np
import pytest

import layoutcore as lc
import layoutcore.keras as lk
from layoutcore.driver import Limitation

keras_hub = pytest.importorskip("keras_hub", reason="the keras-hub tests need keras-hub (tox -e jax)")

assert keras.backend.backend() == "jax", "these tests need KERAS_BACKEND=jax set before keras is imported"


def keras_mesh() -> Any:
    return keras.distribution.DeviceMesh(
        shape=(4, 2), axis_names=("batch", "model"), devices=keras.distribution.list_devices()[:8]
    )


def keras_axes(kmap: Any, path: str, rank: int) -> tuple[str | None, ...]:
    """What keras' own ModelParallel gives the variable at ``path``: its map's entry, else replicated."""
    found = kmap[path]
    return tuple(found.axes) if found is not None else (None,) * rank


def test_keras_match_rule_and_exact_keys_are_carried_over(driver: Any) -> None:
    kmap = keras.distribution.LayoutMap(keras_mesh())
    kmap["dense.*/kernel"] = ("batch", "model")
    kmap["dense_1/kernel"] = (None, "model")  # an exact key wins over the pattern that also matches it
    kmap["emb.*"] = ("model", None)
    kmap["(attn|mlp)/bias"] = ("model",)
    lm = lk.from_keras_layout_map(kmap)
    assert lm.match == lk.keras_match_rule() == "fullmatch"  # keras 3.15
    assert lm.mesh == lc.Mesh((4, 2), ("batch", "model"), devices=tuple(f"CPU:{i}" for i in range(8)))
    paths = ["dense/kernel", "dense_1/kernel", "dense_2/kernel", "model/dense/kernel", "embedding", "x/embedding"]
    paths += ["attn/bias", "mlp/bias", "attn/bias/extra", "other"]
    for path in paths:
        want = kmap[path]
        got = lm.get(path)
        assert (got is None) == (want is None), path
        if got is not None:
            assert got.axes == tuple(want.axes), path
    kmap["dense_2.*"] = ("model", None)  # now "dense_2/kernel" matches two patterns: keras and layoutcore refuse
    with pytest.raises(ValueError, match="multiple"):
        kmap["dense_2/kernel"]
    with pytest.raises(lc.AmbiguousLayoutError):
        lk.from_keras_layout_map(kmap)["dense_2/kernel"]


def test_what_cannot_be_carried_over_is_refused_naming_the_key(driver: Any) -> None:
    with pytest.raises(lc.LayoutError, match=r"keras\.distribution\.LayoutMap"):
        lk.from_keras_layout_map({"a": ("model",)})
    kmap = keras.distribution.LayoutMap(keras_mesh())
    other = keras.distribution.DeviceMesh(
        shape=(8,), axis_names=("model",), devices=keras.distribution.list_devices()[:8]
    )
    kmap["odd/kernel"] = keras.distribution.TensorLayout(("model", None), device_mesh=other)
    with pytest.raises(lc.UnsupportedLayoutError, match="'odd/kernel'") as err:
        lk.from_keras_layout_map(kmap)
    assert err.value.feature is Limitation.KERAS_LAYOUT_MAP


BACKBONES = {
    # Sizes that keras-hub's rules split evenly on a 4x2 (batch, model) mesh.
    "gemma": (
        "GemmaBackbone",
        {"num_query_heads": 4, "num_key_value_heads": 2, "hidden_dim": 16, "intermediate_dim": 32, "head_dim": 8},
    ),
    "llama": (
        "LlamaBackbone",
        {"num_query_heads": 8, "num_key_value_heads": 4, "hidden_dim": 32, "intermediate_dim": 64},
    ),
}


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_keras_hub_backbone_under_its_own_layout_map(driver: Any, name: str, capsys: Any) -> None:
    class_name, sizes = BACKBONES[name]
    backbone = getattr(keras_hub.models, class_name)
    config = {"vocabulary_size": 64, "num_layers": 1, **sizes}  # one block: seconds, not a minute, of compiling
    kmap = backbone.get_layout_map(keras_mesh())
    distribution = lk.ModelParallel(lk.from_keras_layout_map(kmap))
    keras.utils.set_random_seed(0)
    plain = backbone(**config)
    with distribution.scope():
        model = backbone(**config)
    model.set_weights(plain.get_weights())

    # Every variable gets the layout keras' own lookup of keras-hub's map gives it.
    sharded = 0
    for variable in model.weights:
        want = keras_axes(kmap, variable.path, len(variable.shape))
        spec = tuple(variable.value.sharding.spec)
        got = spec + (None,) * (len(variable.shape) - len(spec))
        assert got == want, variable.path
        sharded += any(a is not None for a in want)
    assert sharded >= 1 + 5  # the embedding, the attention and feed-forward kernels at least

    rng = np.random.RandomState(0)
    x = {"token_ids": rng.randint(0, 64, (4, 6)).astype("int32"), "padding_mask": np.ones((4, 6), "int32")}
    want_out = np.asarray(plain(x))
    forward = float(np.abs(np.asarray(model(x)) - want_out).max())
    assert forward <= 1e-4

    y = rng.randn(*want_out.shape).astype("float32")
    before = [np.asarray(w) for w in plain.get_weights()]
    for m in (plain, model):
        m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        m.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    fit = max(
        float(np.abs(np.asarray(p) - np.asarray(q)).max())
        for p, q in zip(plain.get_weights(), model.get_weights(), strict=True)
    )
    moved = max(float(np.abs(np.asarray(p) - b).max()) for p, b in zip(plain.get_weights(), before, strict=True))
    with capsys.disabled():
        print(
            f"\n{class_name} on a 4x2 mesh: {sharded} sharded variables, forward {forward:.1e}, one fit step {fit:.1e}"
        )
    assert moved > 1e-3 and fit <= 1e-4
