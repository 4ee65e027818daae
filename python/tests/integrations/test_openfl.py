"""tensorpress.integrations.openfl against the OpenFL stand-in (v1.6).

The pipeline is built from a plan section, used through TensorCodec, and its
output crosses the NamedTensor protobuf (bytes only, metadata reduced to three
fields at int32/float32 precision, handed back as protobuf containers).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from standins import openfl_standin as of

KEY = of.TensorKey("conv.w", "col1", 1, False, ("trained",))
TEMPLATE = "tensorpress.integrations.openfl."


def _tensor(dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(5).standard_normal((32, 3, 7, 7)).astype(dtype)


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
def test_lossless_pipeline_from_plan_bit_exact_in_own_dtype(openfl: Any, dtype: Any) -> None:
    pipe = of.build_from_plan({"template": TEMPLATE + "TensorpressLosslessPipeline",
                               "settings": {}})
    assert not pipe.is_lossy()
    codec = of.TensorCodec(pipe)
    assert codec.lossless_pipeline is pipe  # OpenFL keeps a lossless pipeline for everything
    x = _tensor(dtype)
    for lossless in (False, True):
        nt = of.send(codec, KEY, x, require_lossless=lossless)
        got = of.receive(codec, KEY, nt, require_lossless=lossless)
        assert got.dtype == x.dtype and got.shape == x.shape and _bits(got) == _bits(x)


@pytest.mark.parametrize("recipe,rel,block", [("fp16", 2.0**-11, None),
                                              ("int8(4096) | q:huff0", 1 / 254 + 2.0**-21, 4096)])
def test_lossy_pipeline_within_bound(openfl: Any, recipe: str, rel: float,
                                     block: int | None) -> None:
    pipe = of.build_from_plan({"template": TEMPLATE + "TensorpressPipeline",
                               "settings": {"recipe": recipe}})
    assert pipe.is_lossy()
    codec = of.TensorCodec(pipe)
    assert isinstance(codec.lossless_pipeline, of.NoCompressionPipeline)
    x = _tensor()
    key, data, meta = codec.compress(KEY, x)
    assert "lossy_compressed" in key.tags and isinstance(data, bytes)
    got = of.receive(codec, KEY, of.to_wire(data, meta), require_lossless=False)
    xs, gs = x.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    if block is None:
        assert np.all(np.abs(gs - xs) <= rel * np.abs(xs) + 2.0**-25)
    else:
        for s in range(0, xs.size, block):
            b = xs[s:s + block]
            assert np.all(np.abs(gs[s:s + block] - b) <= np.abs(b).max() * rel * (1 + 1e-6))


def test_topk_recipe_is_stateless_sparsification(openfl: Any) -> None:
    ratio = 0.05
    pipe = openfl.TensorpressPipeline(recipe=f"topk({ratio}) | val:fp16 | *:huff0")
    x = _tensor()
    data, meta = pipe.forward(x)
    got = pipe.backward(data, meta)
    kept = np.flatnonzero(got.ravel())
    assert kept.size <= math.ceil(ratio * x.size)
    top = set(np.argsort(-np.abs(x.ravel()), kind="stable")[:math.ceil(ratio * x.size)].tolist())
    assert set(kept.tolist()) <= top
    xv = x.ravel()[kept].astype(np.float64)
    assert np.all(np.abs(got.ravel()[kept] - xv) <= 2.0**-11 * np.abs(xv))
    assert pipe.forward(x)[0] == data  # deterministic: the same bytes every call


def test_aggregator_and_collaborators_agree(openfl: Any) -> None:
    """The aggregator's own compress -> decompress and each collaborator's give one model."""
    codec = of.TensorCodec(openfl.TensorpressPipeline(recipe="int8(4096) | q:huff0"))
    base = _tensor()
    delta = (0.01 * _tensor()).astype(np.float32)
    server, clients = of.aggregator_round(codec, KEY, base, delta, n_collaborators=3)
    for c in clients:
        assert _bits(c) == _bits(server)


def test_lossless_kwarg_and_metadata_ignored(openfl: Any) -> None:
    t = openfl.TensorpressTransformer(recipe="fp16", lossless_recipe="*:zstd(1)")
    assert t.lossy
    x = _tensor()
    data, meta = t.forward(x, lossless=True)
    assert meta == {"int_list": list(x.shape)}
    garbage = {"int_to_float": of.ScalarMap({}), "int_list": of.RepeatedScalarContainer([1]),
               "bool_list": of.RepeatedScalarContainer([])}
    assert _bits(t.backward(data, garbage)) == _bits(x)
    assert _bits(t.backward(memoryview(data), None)) == _bits(x)
    lossy, _ = t.forward(x)
    assert lossy != data


def test_errors(openfl: Any, tp: Any) -> None:
    with pytest.raises(ValueError, match="lossy"):
        openfl.TensorpressLosslessPipeline(recipe="fp16")
    with pytest.raises(ValueError, match="lossy"):
        openfl.TensorpressTransformer(recipe="fp16", lossless_recipe="int8(64)")
    with pytest.raises(tp.RecipeError):
        openfl.TensorpressPipeline(recipe="nosuchstage(2)")
    t = openfl.TensorpressTransformer()
    data, _ = t.forward(_tensor())
    with pytest.raises(tp.TensorpressError):
        t.backward(data[: len(data) // 2], None)
    with pytest.raises(tp.TensorpressError):
        t.backward(b"definitely not a frame", None)
    with pytest.raises(TypeError, match="bytes"):
        t.backward(np.zeros(3), None)
    with pytest.raises(TypeError):
        t.forward(np.array(["a", "b"]))


def test_backward_limits(openfl: Any, tp: Any) -> None:
    """A Transformer's ``limits`` bound the frames it decodes."""
    x = _tensor()
    data, meta = openfl.TensorpressTransformer(lossless_recipe="floatcm").forward(x, lossless=True)
    assert _bits(openfl.TensorpressTransformer().backward(data, meta)) == _bits(x)
    with pytest.raises(tp.LimitError):
        openfl.TensorpressTransformer(limits=tp.Limits(max_slow_decoded=1024)).backward(data, meta)
