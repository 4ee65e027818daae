"""Sender and Receiver: error feedback, commit and abort, saved state, threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tensorpress as tp


def grad(seed: int, shape=(64, 128)) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, shape).astype(np.float32)


def decoded(frame: bytes, shape) -> np.ndarray:
    acc = np.zeros(shape, np.float32)
    with tp.Receiver() as r:
        assert r.add(frame, 1.0, into=acc) == len(frame)
    return acc


def test_error_feedback_identity() -> None:
    """Over rounds, what was sent plus the residual equals what was given (float32 rounding aside)."""
    with tp.Sender("topk(0.05)") as s:
        total_in = np.zeros((64, 128), np.float64)
        total_out = np.zeros((64, 128), np.float64)
        for i in range(5):
            g = grad(i)
            f = s.compress("layer", g)
            s.commit()
            total_in += g
            total_out += decoded(f, g.shape)
        # The residual is what remains: sent + residual == given, checked by one more round of zeros
        # at density 1 (everything left goes out).
        f = s.compress("layer", np.zeros((64, 128), np.float32), density=1.0)
        s.commit()
        total_out += decoded(f, (64, 128))
        assert np.allclose(total_out, total_in, atol=1e-4)


def test_sparse_frame_is_small_and_residual_kept() -> None:
    g = grad(1)
    with tp.Sender("topk(0.01)") as s:
        f = s.compress("w", g)
        assert len(f) < g.nbytes / 20
        d = decoded(f, g.shape)
        assert 0 < np.count_nonzero(d) <= int(g.size * 0.01) + 1
        kept = d != 0
        assert np.array_equal(d[kept], g[kept])


def test_pending_commit_abort() -> None:
    with tp.Sender("topk(0.1)") as s:
        assert s.pending == 0 and "pending=0" in repr(s)
        s.compress("a", grad(1))
        s.compress("b", grad(2))
        assert s.pending == 2
        with pytest.raises(tp.StateError, match="'a'|\"a\""):
            s.compress("a", grad(3))
        with pytest.raises(tp.StateError):
            s.state()
        with pytest.raises(tp.StateError):
            s.load_state(b"")
        s.commit(1)
        assert s.pending == 1
        s.abort(last=True)
        assert s.pending == 0
        with pytest.raises(tp.StateError):
            s.commit(1)
        s.compress("b", grad(2))
        s.abort()
        assert s.pending == 0


def test_abort_returns_the_update() -> None:
    """An aborted update is sent again, whole, with the next one."""
    g1, g2 = grad(1), grad(2)
    with tp.Sender("topk(1.0)") as s:
        s.compress("w", g1)
        s.abort()
        f = s.compress("w", g2)
        s.commit()
        assert np.allclose(decoded(f, g1.shape), g1 + g2, atol=1e-6)


def test_state_round_trip() -> None:
    with tp.Sender("dgc(0.01)") as a, tp.Sender("dgc(0.01)") as b:
        for i in range(3):
            a.compress("w", grad(i))
            a.commit()
        b.load_state(a.state())
        g = grad(9)
        assert a.compress("w", g) == b.compress("w", g)
        a.commit()
        b.commit()
        img = bytearray(a.state())
        img[len(img) // 2] ^= 1
        before = b.state()
        with pytest.raises(tp.StateError):
            b.load_state(bytes(img))
        assert b.state() == before


def test_spec_errors_and_dtypes() -> None:
    with pytest.raises(tp.RecipeError) as e:
        tp.Sender("nosuch(1)")
    assert isinstance(e.value, ValueError) and "nosuch" in str(e.value)
    with tp.Sender("topk(0.5)") as s:
        with pytest.raises(TypeError, match="fc1.w"):
            s.compress("fc1.w", np.zeros(4, np.int32))
        f = s.compress("h", np.ones(16, np.float16))  # converted to float32
        s.commit()
        assert decoded(f, (16,)).sum() > 0
        with pytest.raises(tp.ArgumentError, match="fc2"):
            s.compress("fc2", np.ones(16, np.float32), density=2.0)
        f = s.compress("x", np.ones(16, np.float32), spec="int8(64)")
        assert tp.info(f)[0].name == "x"


def test_receiver_into_mapping_and_errors() -> None:
    with tp.Sender("topk(0.2)") as s, tp.Receiver() as r:
        fa = s.compress("a", grad(1, (10, 10)))
        fb = s.compress("b", grad(2, (5,)))
        acc = {"a": np.zeros((10, 10), np.float32), "b": np.zeros(5, np.float32)}
        assert r.add(fa + fb, 0.5, into=acc) == len(fa) + len(fb)
        assert np.count_nonzero(acc["a"]) > 0 and np.count_nonzero(acc["b"]) > 0
        with pytest.raises(tp.ArgumentError, match="'a'|\"a\""):
            r.add(fa, into={"a": np.zeros((100,), np.float32)})
        with pytest.raises(tp.ArgumentError):
            r.add(fa, into={"zzz": np.zeros((10, 10), np.float32)})
        with pytest.raises(tp.ArgumentError):
            r.add(fa, into=np.zeros((10, 10), np.float64))
        before = acc["a"].copy()
        bad = bytearray(fa)
        bad[-3] ^= 0x40
        with pytest.raises(tp.TensorpressError):
            r.add(bytes(bad), into=acc)
        assert np.array_equal(acc["a"], before)  # a bad frame adds nothing


def test_receiver_add_equals_decode_for_dense_frames() -> None:
    a = grad(4, (33,))
    f = tp.encode(a, recipe="fp16")
    acc = np.full(33, 2.0, np.float32)
    with tp.Receiver() as r:
        r.add(f, 3.0, into=acc)
    assert np.array_equal(acc, np.float32(2.0) + np.float32(3.0) * tp.decode(f))


def test_threads_share_a_sender() -> None:
    errors = []
    with tp.Sender("topk(0.1)") as s:
        def work(k: int) -> None:
            try:
                for i in range(20):
                    s.compress(f"t{k}.{i}", grad(i, (256,)))
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)
        ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors
        assert s.pending == 80
        s.commit()
        assert len(s.state()) > 0


def test_limits_on_receiver() -> None:
    f = tp.encode(np.zeros(1024, np.float32))
    with tp.Receiver(limits=tp.Limits(max_decoded=100)) as r:
        with pytest.raises(tp.LimitError):
            r.add(f, into=np.zeros(1024, np.float32))


def test_receiver_bounds_slow_stages() -> None:
    """An update decoding over 1 MiB through floatcm is refused unless the limits raise it."""
    x = np.random.default_rng(5).normal(0, 0.02, (1 << 18) + 1024).astype(np.float32)
    f = tp.encode(x, recipe="floatcm")
    acc = np.zeros_like(x)
    with tp.Receiver() as r:
        with pytest.raises(tp.LimitError, match="some MB/s"):
            r.add(f, into=acc)
    assert not acc.any()
    with tp.Receiver(limits=tp.Limits(max_slow_decoded=2 << 20)) as r:
        r.add(f, into=acc)
    assert np.array_equal(acc, x)


def test_receiver_refuses_non_finite() -> None:
    """A NaN, an infinity or a weight past float32's range leaves the accumulator as it was."""
    acc = np.ones(64, np.float32)
    with tp.Receiver() as r:
        for x, w in [(np.float32(np.nan), 1.0), (np.float32(-np.inf), 1.0), (np.float32(3e38), 4.0)]:
            g = np.zeros(64, np.float32)
            g[5] = x
            with pytest.raises(tp.NonFiniteError):
                r.add(tp.encode(g), w, into=acc)
            assert np.array_equal(acc, np.ones(64, np.float32))
        r.add(tp.encode(np.full(64, 2, np.float32)), 0.5, into=acc)
    assert np.array_equal(acc, np.full(64, 2, np.float32))


def test_plan_selects_over_the_whole_update() -> None:
    """topk(r,model=on): one k for the update; the small tensor of large values goes whole."""
    big = np.full((64, 64), 0.01, np.float32) + np.arange(4096, dtype=np.float32).reshape(64, 64) * 1e-7
    small = np.ones((4, 4), np.float32)
    with tp.Sender("topk(0.01,model=on)") as s:
        with pytest.raises(tp.TensorpressError, match="plan"):
            s.compress("w", big)
        s.plan({"w": big, "out": small})
        fw, fo = s.compress("w", big), s.compress("out", small)
        s.commit()
        # k = ceil(0.01 * 4112) = 42: the 16 of out and 26 of w.
        assert np.count_nonzero(decoded(fo, small.shape)) == 16
        assert np.count_nonzero(decoded(fw, big.shape)) == 26
    with tp.Sender("topk(0.01)") as s:
        s.plan({"w": big})  # per tensor: nothing to plan
        assert np.count_nonzero(decoded(s.compress("w", big), big.shape)) == 41
        s.plan({"w": big.astype(np.float64)}, spec="topk(0.01,model=on)")
        s.commit()
        with pytest.raises(TypeError):
            s.plan({"w": np.zeros(3, np.int32)})
