"""tensorpress.integrations.nvflare against the NVIDIA FLARE stand-in (2.9.0dev / 2.8.1).

Client task_result_filters (compressor) -> server task_result_filters
(decompressor), on WEIGHTS and WEIGHT_DIFF DXOs, as FLARE's ModelQuantizer /
ModelDequantizer are placed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from standins import nvflare_standin as nv


def _weights() -> dict[str, Any]:
    rng = np.random.default_rng(7)
    return {
        "conv.w": rng.standard_normal((16, 3, 5, 5)).astype(np.float32),
        "fc.w": rng.standard_normal((100, 90)),  # float64
        "fc.b": rng.standard_normal(10).astype(np.float16),
        "steps": np.array([3, 4], np.int64),
        "lr": 0.1,
    }


def _through(filters_client: list, filters_server: list, dxo: nv.DXO) -> nv.DXO:
    ctx = nv.FLContext()
    s = nv.run_filter_chain([], filters_client, dxo.to_shareable(), ctx)
    s = nv.run_filter_chain(filters_server, [], s, ctx)
    return nv.from_shareable(s)


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


@pytest.mark.parametrize("kind", [nv.DataKind.WEIGHTS, nv.DataKind.WEIGHT_DIFF])
def test_lossless_round_trip_bit_exact_and_dxo_untouched(nvflare: Any, kind: str) -> None:
    w = _weights()
    original = dict(w)
    dxo = nv.DXO(kind, w, {"filter_history": ["Earlier"]})
    comp = nvflare.TensorpressCompressor()
    ctx = nv.FLContext()
    sent = nv.from_shareable(comp.process(dxo.to_shareable(), ctx))
    assert w == original and all(w[k] is original[k] for k in w)  # input dict not mutated
    assert sent.data["conv.w"].dtype == np.uint8 and sent.data["conv.w"].ndim == 1
    assert sent.data["steps"] is w["steps"] and sent.data["lr"] == 0.1
    assert sent.get_meta_prop(nv.MetaKey.PROCESSED_ALGORITHM) == "tensorpress"
    out = nv.from_shareable(nvflare.TensorpressDecompressor().process(sent.to_shareable(), ctx))
    for k in ("conv.w", "fc.w", "fc.b"):
        assert out.data[k].dtype == w[k].dtype and out.data[k].shape == w[k].shape
        assert _bits(out.data[k]) == _bits(w[k]), k
    assert not any(k.startswith("tensorpress") for k in out.meta)
    assert nv.MetaKey.PROCESSED_ALGORITHM not in out.meta
    assert out.get_filter_history() == ["Earlier", "TensorpressCompressor",
                                        "TensorpressDecompressor"]


def test_float16_alias_matches_model_quantizer(nvflare: Any) -> None:
    w = {k: v for k, v in _weights().items() if k in ("conv.w", "fc.w", "fc.b")}
    ours = _through([nvflare.TensorpressCompressor(quantization_type="float16")],
                    [nvflare.TensorpressDecompressor()], nv.DXO(nv.DataKind.WEIGHTS, dict(w)))
    theirs = _through([nv.ModelQuantizer("float16")], [nv.ModelDequantizer()],
                      nv.DXO(nv.DataKind.WEIGHTS, {k: v.copy() for k, v in w.items()}))
    for k in w:
        assert ours.data[k].dtype == w[k].dtype
        assert _bits(ours.data[k]) == _bits(theirs.data[k]), k  # both round to nearest even


@pytest.mark.parametrize("qtype,block,rel", [("blockwise8", 4096, 1 / 254 + 2.0**-21),
                                             ("BLOCKWISE8", 4096, 1 / 254 + 2.0**-21),
                                             ("float4", 64, 0.1667), ("normfloat4", 64, 0.1520)])
def test_block_quantization_aliases_within_bound(nvflare: Any, qtype: str, block: int,
                                                 rel: float) -> None:
    assert nvflare.QUANTIZATION_TYPES[qtype.lower()]
    w = {"conv.w": _weights()["conv.w"]}
    out = _through([nvflare.TensorpressCompressor(quantization_type=qtype)],
                   [nvflare.TensorpressDecompressor()], nv.DXO(nv.DataKind.WEIGHT_DIFF, dict(w)))
    x = w["conv.w"].astype(np.float64).ravel()
    got = out.data["conv.w"].astype(np.float64).ravel()
    for s in range(0, x.size, block):
        blk = x[s:s + block]
        assert np.all(np.abs(got[s:s + block] - blk) <= np.abs(blk).max() * rel * (1 + 1e-6))


def test_spec_on_weight_diff_error_feedback(nvflare: Any, tp: Any) -> None:
    ratio = 0.05
    comp = nvflare.TensorpressCompressor(spec=f"topk({ratio})")
    dec = nvflare.TensorpressDecompressor()
    rng = np.random.default_rng(3)
    residual = np.zeros((40, 50), np.float32)
    for _ in range(3):
        diff = rng.standard_normal((40, 50)).astype(np.float32)
        out = _through([comp], [dec], nv.DXO(nv.DataKind.WEIGHT_DIFF, {"w": diff}))
        got = out.data["w"]
        assert got.dtype == np.float32 and got.shape == diff.shape
        v = diff + residual
        kept = np.flatnonzero(got.ravel())
        assert kept.size == math.ceil(ratio * v.size)
        assert np.array_equal(got.ravel()[kept], v.ravel()[kept])
        residual = v - got  # decoded + residual_new == update + residual_old
    with pytest.raises(ValueError, match="params_transfer_type=DIFF"):
        comp.process(nv.DXO(nv.DataKind.WEIGHTS, {"w": residual}).to_shareable(), nv.FLContext())


def test_dgc_warmup_follows_current_round(nvflare: Any) -> None:
    """A spec's schedule reads the result's current_round header (FLARE counts from 0)."""
    comp = nvflare.TensorpressCompressor(spec="dgc(0.01,warmup=3)", min_size=16)
    rng = np.random.default_rng(5)
    sizes = []
    for rnd in range(5):
        s = nv.DXO(nv.DataKind.WEIGHT_DIFF, {"w": rng.standard_normal((100, 90)).astype(np.float32)}).to_shareable()
        s.set_header("current_round", rnd)
        out = nv.from_shareable(nv.run_filter_chain([], [comp], s, nv.FLContext()))
        sizes.append(out.data["w"].size)
    # Warm-up densities 25%, 6.25%, 1.5625%, then 1%.
    assert sizes[0] > sizes[1] > sizes[2] > sizes[3], sizes
    assert abs(sizes[4] - sizes[3]) <= sizes[3] // 4, sizes


def test_foreign_processed_algorithm_is_left_alone(nvflare: Any) -> None:
    w = {"conv.w": _weights()["conv.w"]}
    ctx = nv.FLContext()
    s = nv.run_filter_chain([nv.ModelQuantizer("float16")],
                            [nvflare.TensorpressCompressor(recipe="*:zstd(1)")],
                            nv.DXO(nv.DataKind.WEIGHTS, dict(w)).to_shareable(), ctx)
    d = nv.from_shareable(s)
    assert d.data["conv.w"].dtype == np.float16  # not compressed again
    assert d.get_filter_history() == ["ModelQuantizer"]
    twice = nvflare.TensorpressCompressor()
    once = nv.from_shareable(twice.process(nv.DXO(nv.DataKind.WEIGHTS, dict(w)).to_shareable(),
                                           ctx))
    again = nv.from_shareable(twice.process(once.to_shareable(), ctx))
    assert _bits(again.data["conv.w"]) == _bits(once.data["conv.w"])


def test_collection_metrics_and_failed_results(nvflare: Any) -> None:
    ctx = nv.FLContext()
    w = _weights()
    coll = nv.DXO(nv.DataKind.COLLECTION, {"model": nv.DXO(nv.DataKind.WEIGHTS, dict(w)),
                                           "m": nv.DXO(nv.DataKind.METRICS, {"acc": 0.9})})
    s = nvflare.TensorpressCompressor().process(coll.to_shareable(), ctx)
    inner = nv.from_shareable(s).data
    assert inner["model"].data["conv.w"].dtype == np.uint8 and inner["m"].data == {"acc": 0.9}
    s = nvflare.TensorpressDecompressor().process(s, ctx)
    assert _bits(nv.from_shareable(s).data["model"].data["fc.w"]) == _bits(w["fc.w"])
    bad = nv.DXO(nv.DataKind.WEIGHTS, dict(w)).to_shareable()
    bad.set_return_code(nv.ReturnCode.EXECUTION_EXCEPTION)
    assert nv.from_shareable(nvflare.TensorpressCompressor().process(bad, ctx)).data["fc.w"] \
        is w["fc.w"]


def test_errors(nvflare: Any, tp: Any) -> None:
    ctx = nv.FLContext()
    with pytest.raises(ValueError, match="one of"):
        nvflare.TensorpressCompressor(recipe="fp16", quantization_type="float16")
    with pytest.raises(ValueError, match="float8"):
        nvflare.TensorpressCompressor(quantization_type="float8")
    with pytest.raises(tp.RecipeError):
        nvflare.TensorpressCompressor(recipe="nosuchstage")
    with pytest.raises(ValueError, match="invalid data kinds"):
        nvflare.TensorpressCompressor(data_kinds_to_filter=[nv.DataKind.METRICS])
    plain = nv.DXO(nv.DataKind.WEIGHTS, {"w": np.ones(4, np.float32)}).to_shareable()
    with pytest.raises(ValueError, match="tensorpress_format"):
        nvflare.TensorpressDecompressor().process(plain, ctx)
    sent = nv.from_shareable(nvflare.TensorpressCompressor().process(
        nv.DXO(nv.DataKind.WEIGHTS, {"fc.w": np.ones(64, np.float32)}).to_shareable(), ctx))
    sent.data["fc.w"] = sent.data["fc.w"][: sent.data["fc.w"].size // 2]
    with pytest.raises(tp.TensorpressError, match="'fc.w'"):
        nvflare.TensorpressDecompressor().process(sent.to_shareable(), ctx)
    sent.data["fc.w"] = np.zeros(3, np.float32)
    with pytest.raises(tp.CorruptError, match="'fc.w'"):
        nvflare.TensorpressDecompressor().process(sent.to_shareable(), ctx)


def test_spec_over_the_whole_update(nvflare: Any) -> None:
    """topk(r,model=on): one k over the DXO's arrays; the small array of large values goes whole."""
    comp = nvflare.TensorpressCompressor(spec="topk(0.01,model=on)")
    dec = nvflare.TensorpressDecompressor()
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((64, 64)) * 0.01).astype(np.float32)
    out_w = np.ones((4, 4), np.float32) + rng.random((4, 4)).astype(np.float32)
    out = _through([comp], [dec], nv.DXO(nv.DataKind.WEIGHT_DIFF, {"w": w, "out.w": out_w}))
    # k = ceil(0.01 * 4112) = 42: the 16 of out.w and 26 of w.
    assert np.count_nonzero(out.data["out.w"]) == 16
    assert np.count_nonzero(out.data["w"]) == 26
