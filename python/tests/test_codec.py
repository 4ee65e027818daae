"""Encode and decode from numpy: goldens, the malformed corpus, dtypes, errors, limits."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest

import tensorpress as tp

from conftest import TESTVECTORS

GOLDEN = os.path.join(TESTVECTORS, "golden")
MALFORMED = os.path.join(TESTVECTORS, "malformed")


def golden(name: str) -> bytes:
    with open(os.path.join(GOLDEN, name + ".tpf"), "rb") as f:
        return f.read()


# Goldens grouped by their input (testvectors/cases.go): within a group the
# lossless ones decode to the same data, and the first is stored raw (or the
# input is known here).
SAME_W = ["raw-f32", "shuffle4-f32", "huff0-planes", "zstd1-f32", "sparse-dense"]
SAME_TEXT = ["huff0-bytes", "s2-text", "zstd3-text", "xz-text"]
SAME_SPARSE = ["sparse-auto", "sparse-bitmap", "sparse-gaps", "sparse-varint", "coo-delta-bitpack",
               "coo-delta-varint"]
RAMP_I64 = ["bytedelta-i64", "s2-better-i64"]


def test_goldens_lossless_equal_their_reference() -> None:
    w = tp.decode(golden("raw-f32"))
    assert w.dtype == np.float32 and w.shape == (256,)
    for name in SAME_W:
        got = tp.decode(golden(name))
        assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), w.view(np.uint32)), name
    for name in RAMP_I64:
        got = tp.decode(golden(name))
        assert got.dtype == np.int64 and np.array_equal(got, np.arange(200, dtype=np.int64) * 3), name
    text = tp.decode_bytes(golden(SAME_TEXT[0]))
    for name in SAME_TEXT:
        assert tp.decode_bytes(golden(name)) == text, name
    assert tp.decode_bytes(golden("shuffle4-tail")) == text[:1001]
    sp = tp.decode(golden(SAME_SPARSE[0]))
    for name in SAME_SPARSE:
        assert np.array_equal(tp.decode(golden(name)), sp), name


def test_goldens_lossy_within_bounds() -> None:
    grad = tp.decode(golden("huff0-all"))  # lossless coding of the same input
    assert grad.dtype == np.float32 and grad.size == 300
    fp16 = tp.decode(golden("fp16"))
    assert np.all(np.abs(fp16 - grad) <= np.abs(grad) * 2.0 ** -11 + 6e-8)
    bf16 = tp.decode(golden("bf16"))
    assert bf16.dtype == np.float32
    assert np.all(np.abs(bf16 - grad) <= np.abs(grad) * 2.0 ** -8)
    for name in ["int8-b64", "nf4-double", "fp4-b64", "qsgd", "sign", "ternary"]:
        got = tp.decode(golden(name))
        assert got.shape == grad.shape and got.dtype == np.float32, name


def test_every_golden_decodes() -> None:
    for fn in sorted(os.listdir(GOLDEN)):
        if not fn.endswith(".tpf"):
            continue
        buf = golden(fn[:-4])
        if fn.endswith("-chunk.tpf"):  # one chunk of a larger tensor
            with pytest.raises(tp.TruncatedError):
                tp.decode_all(buf)
            continue
        out = tp.decode_all(buf)
        assert out, fn
    assert tp._stats.copies == 0


def test_golden_streams() -> None:
    out = tp.decode_all(golden("stream-chunks"))  # a tensor in three chunks, then a whole one
    assert out["w"].shape == (4, 25) and out["w"].dtype == np.float32
    assert np.array_equal(out["steps"], np.arange(10, dtype=np.int32) * 3)
    out = tp.decode_all(golden("stream"))
    assert out[""].tobytes() == b"a byte stream chunk"
    assert [(k, v.dtype.str) for k, v in out.items()] == [("bias", "<f4"), ("ln", "<f2"), ("idx", "<i4"), ("", "|u1")]
    out = tp.decode_all(golden("ext-tensors"))
    assert set(out) == {"a", "b"}


SENTINEL = {
    "ErrUnexpectedEOF": tp.TruncatedError, "ErrChecksum": tp.ChecksumError,
    "ErrUnsupported": tp.UnsupportedError, "ErrNotFrame": tp.NotAFrameError,
    "ErrCorrupt": tp.CorruptError, "ErrLimit": tp.LimitError,
}


def manifest() -> list:
    rows = []
    with open(os.path.join(MALFORMED, "MANIFEST")) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and not line.startswith("#"):
                rows.append(tuple(parts))
    return rows


@pytest.mark.parametrize("fn,mode,sentinel", manifest())
def test_malformed_corpus(fn: str, mode: str, sentinel: str) -> None:
    with open(os.path.join(MALFORMED, fn), "rb") as f:
        buf = f.read()
    cls = SENTINEL[sentinel]
    with pytest.raises(cls) as e:
        tp.decode_all(buf)
    # ErrCorrupt is the parent of the other corrupt kinds: the class must be exact.
    assert type(e.value) is cls, (fn, type(e.value), str(e.value))
    with pytest.raises(tp.TensorpressError):
        r = tp.Receiver()
        try:
            r.add(buf, 1.0, into=np.zeros(100, np.float32))
        finally:
            r.close()


def test_manifest_is_whole() -> None:
    bins = [f for f in os.listdir(MALFORMED) if f.endswith(".bin")]
    assert sorted(r[0] for r in manifest()) == sorted(bins)


def test_claims_one_tib_refused_with_little_memory() -> None:
    with open(os.path.join(MALFORMED, "claims-1TiB.bin"), "rb") as f:
        buf = f.read()
    with pytest.raises(tp.LimitError):
        tp.decode(buf)  # warm up
    import ctypes

    from tensorpress import _lib
    h, ta, s = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
    _lib.lib().tp_debug_memstats(ctypes.byref(h), ctypes.byref(ta), ctypes.byref(s))
    before = ta.value
    tracemalloc.start()
    with pytest.raises(tp.LimitError) as e:
        tp.decode(buf)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    _lib.lib().tp_debug_memstats(ctypes.byref(h), ctypes.byref(ta), ctypes.byref(s))
    assert (ta.value - before) + peak < 1 << 20, (ta.value - before, peak)
    assert "limit" in str(e.value)


DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("recipe", [None, "*:zstd(1)"])
def test_dtypes_round_trip(dt: type, recipe: str) -> None:
    rng = np.random.default_rng(1)
    a = (rng.normal(0, 100, (3, 5, 7)) > 0) if dt is np.bool_ else (rng.normal(0, 100, (3, 5, 7))).astype(dt)
    f = tp.encode(a, recipe=recipe, name="t")
    b = tp.decode(f)
    assert b.dtype == np.dtype(dt) and b.shape == a.shape
    assert np.array_equal(b.view(np.uint8), a.view(np.uint8))


def test_scalar_and_empty() -> None:
    for a in [np.float32(3.5), np.zeros((0, 4), np.float32), np.zeros(0, np.int8)]:
        b = tp.decode(tp.encode(a))
        assert b.shape == np.shape(a) and b.dtype == np.asarray(a).dtype
        assert np.array_equal(b, a)


def test_bf16() -> None:
    x = np.array([1.0, -2.5, 3.140625, 0.0, -0.0, np.inf], np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    f = tp.encode(bits, dtype="bf16", name="h")
    assert tp.info(f)[0].dtype == "bf16"
    wide = tp.decode(f)
    assert wide.dtype == np.float32 and np.array_equal(wide.view(np.uint32), x.view(np.uint32))
    assert np.array_equal(tp.decode(f, bf16="bits"), bits)
    # float32 through the bf16 stage decodes to float32.
    y = tp.decode(tp.encode(x[:3], recipe="bf16"))
    assert y.dtype == np.float32 and np.array_equal(y, x[:3])


def test_no_copy_of_input_and_copy_of_other_layouts() -> None:
    a = np.arange(4096, dtype=np.float32).reshape(64, 64)
    start = tp._stats.copies
    tp.encode(a)
    assert tp._stats.copies == start
    b = tp.decode(tp.encode(a.T))  # not C-contiguous: one counted copy
    assert tp._stats.copies == start + 1 and np.array_equal(b, a.T)
    big = a.astype(">f4")
    assert np.array_equal(tp.decode(tp.encode(big)), a)
    assert tp._stats.copies == start + 2


def test_errors_name_the_array() -> None:
    with pytest.raises(TypeError, match="fc1.w"):
        tp.encode(np.zeros(4, np.complex64), name="fc1.w")
    with pytest.raises(TypeError, match="fc1.w"):
        tp.encode(np.array(["a"]), name="fc1.w")
    with pytest.raises(tp.LossyError, match="fc1.w"):
        tp.encode(np.zeros(64, np.float32), recipe="fp16", lossless=True, name="fc1.w")
    with pytest.raises(tp.RecipeError) as e:
        tp.encode(np.zeros(4, np.float32), recipe="nosuch(3)", name="fc1.w")
    assert isinstance(e.value, ValueError)
    with pytest.raises(ValueError, match="decode_all"):
        tp.decode(tp.encode(np.zeros(4)) + tp.encode(np.ones(3)))


def test_recipes() -> None:
    assert tp.is_lossy("int8(4096) | q:huff0")
    assert not tp.is_lossy("shuffle4 | plane3:huff0")
    tp.check_recipe("*:zstd(1)")
    with pytest.raises(tp.RecipeError):
        tp.check_recipe("zstd(")


def test_encode_into_and_decode_into() -> None:
    a = np.random.default_rng(2).normal(0, 1, 1000).astype(np.float32)
    out = bytearray(8000)
    n = tp.encode_into(a, out, recipe="*:zstd(1)")
    b = np.empty_like(a)
    tp.decode_into(memoryview(out)[:n], b)
    assert np.array_equal(a, b)
    with pytest.raises(tp.ArgumentError):
        tp.encode_into(a, bytearray(10))
    with pytest.raises(tp.ArgumentError):
        tp.decode_into(memoryview(out)[:n], np.empty(999, np.float32))


def test_decode_all_and_bytes() -> None:
    a, b = np.arange(10, dtype=np.int32), np.ones((2, 2), np.float64)
    out = tp.decode_all(tp.encode(a, name="a") + tp.encode(b, name="b"))
    assert list(out) == ["a", "b"] and np.array_equal(out["a"], a) and np.array_equal(out["b"], b)
    data = b"tensorpress " * 1000
    f = tp.encode_bytes(data, recipe="*:zstd(3)")
    assert len(f) < len(data) and tp.decode_bytes(f) == data
    assert tp.decode_bytes(tp.encode_bytes(b"")) == b""


def test_limits() -> None:
    f = tp.encode(np.zeros(1024, np.float32))
    with pytest.raises(tp.LimitError):
        tp.decode(f, limits=tp.Limits(max_decoded=1000))
    assert tp.decode(f, limits=tp.Limits(max_decoded=4096)).size == 1024


def test_floatcm_and_its_limit() -> None:
    """floatcm codes weights losslessly; max_slow_decoded bounds its bytes."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal(4096) * 0.02).astype(np.float32)
    f = tp.encode(w, recipe="floatcm")
    assert len(f) < w.nbytes
    np.testing.assert_array_equal(tp.decode(f), w)
    with pytest.raises(tp.LimitError):
        tp.decode(f, limits=tp.Limits(max_slow_decoded=w.nbytes - 4))


def test_floatrank() -> None:
    """floatrank codes float32 and float16 weights losslessly, near floatcm's
    size; max_slow_decoded bounds it too."""
    rng = np.random.default_rng(2)
    for dt in (np.float32, np.float16):
        w = (rng.standard_normal(8192) * 0.02).astype(dt)
        f = tp.encode(w, recipe="floatrank")
        assert len(f) < w.nbytes
        assert len(f) <= len(tp.encode(w, recipe="floatcm")) * 1.02
        np.testing.assert_array_equal(tp.decode(f), w)
        with pytest.raises(tp.LimitError):
            tp.decode(f, limits=tp.Limits(max_slow_decoded=w.nbytes - 2))


def test_profile() -> None:
    names = tp.Profile.builtins()
    assert names
    with tp.Profile.builtin(names[0]) as p:
        assert names[0] in repr(p)
        a = np.random.default_rng(3).normal(0, 1, 4096).astype(np.float32)
        try:
            f = tp.encode(a, profile=p, name="w")
        except tp.RecipeError as e:  # a rule of gradient compressors
            assert "Sender" in str(e)
        else:
            assert tp.decode(f, profile=p).shape == a.shape
    assert "closed" in repr(p)
    with pytest.raises(tp.RecipeError):
        tp.Profile.load("version: 1\nrules: [[[\n")


def test_large_goes_through_a_stream() -> None:
    if os.environ.get("TP_SKIP_LARGE"):
        pytest.skip("TP_SKIP_LARGE")
    a = np.zeros((256 << 20) // 4 + 100, np.float32)
    a[7] = 1
    f = tp.encode(a, recipe="*:zstd(1)")
    b = tp.decode(f)
    assert np.array_equal(a, b)


def test_large_encode_in_place_frees_on_error_and_keeps_one_reference() -> None:
    """Frames of 256 KiB or more are written into the bytes returned: no leak on the error path."""
    import sys
    import tracemalloc

    x = np.random.default_rng(4).normal(0, 0.02, 1 << 20).astype(np.float32)  # 4 MiB
    f = tp.encode(x, name="w")
    assert type(f) is bytes and sys.getrefcount(f) == 2
    assert np.array_equal(tp.decode(f), x)
    tracemalloc.start()
    try:
        for _ in range(20):
            with pytest.raises(tp.LossyError, match='"w"'):
                tp.encode(x, recipe="fp16", lossless=True, name="w")
            del f
            f = tp.encode(x, name="w")
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current < 2 * len(f) + (1 << 20), current  # the last frame, not 20 of them
