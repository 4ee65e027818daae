"""tensorpress.integrations.flower against the Flower stand-in (framework-1.29.0).

A Flower-shaped round: arrays in, the client mod first in ``mods``, the
ClientApp's reply, object ids computed after the app returns and verified on
receipt, the server step (TensorpressStrategy wrapping FedAvg), arrays out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from standins import flwr_standin as fl

RNG_SEED = 22
SHAPES = {"fc1.w": (64, 100), "fc1.b": (8,), "fc2.w": (10, 64), "emb": (40,), "steps": (3,)}


def _global() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(RNG_SEED)
    out = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    out["steps"] = np.array([1, 2, 3], np.int64)
    out["fc2.w"] = out["fc2.w"].astype(np.float64)
    out["emb"] = out["emb"].astype(np.float16)
    return out


def _record(arrays: dict[str, np.ndarray]) -> fl.ArrayRecord:
    return fl.ArrayRecord({k: fl.Array.from_numpy_ndarray(v) for k, v in arrays.items()})


class _Capture(fl.FedAvg):
    """FedAvg that keeps every reply's arrays as the strategy sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, np.ndarray]] = []

    def aggregate_train(self, server_round: int, replies: Any) -> Any:
        replies = list(replies)
        for m in replies:
            self.seen.append({k: a.numpy() for k, a in m.content["arrays"].items()})
        return super().aggregate_train(server_round, replies)


class _LogGrid(fl.InMemoryGrid):
    """Keeps the replies' ArrayRecords as they arrived (frames, before restoring)."""

    def __init__(self, apps: dict) -> None:
        super().__init__(apps)
        self.wire: list[tuple[int, fl.ArrayRecord]] = []

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list:
        replies = super().send_and_receive(messages, timeout=timeout)
        self.wire.extend((m.metadata.src_node_id, m.content["arrays"]) for m in replies)
        return replies


def _app(mod: Any, sent: dict[int, list[dict[str, np.ndarray]]],
         step: float = 0.01) -> fl.ClientApp:
    """A ClientApp whose train step adds a node- and round-dependent update."""
    app = fl.ClientApp(mods=[mod])

    @app.train()
    def train(msg: fl.Message, ctxt: fl.Context) -> fl.Message:
        rec = msg.content["arrays"]
        assert all(a.stype == fl.NUMPY_STYPE for a in rec.values())  # restored downlink
        rnd = len(sent.setdefault(ctxt.node_id, []))
        rng = np.random.default_rng(1000 * ctxt.node_id + rnd)
        trained = {}
        for k, a in rec.items():
            g = a.numpy()
            if g.dtype.kind == "f":
                g = g + (step * rng.standard_normal(g.shape)).astype(g.dtype)
            trained[k] = g
        sent[ctxt.node_id].append(trained)
        content = fl.RecordDict({"arrays": _record(trained),
                                 "metrics": fl.MetricRecord({"num-examples": 10})})
        return fl.Message(content, reply_to=msg)

    return app


def _run(flower: Any, mod: Any, rounds: int = 1, nodes: int = 2, downlink: str | None = None
         ) -> tuple[_Capture, _LogGrid, dict]:
    sent: dict[int, list] = {}
    grid = _LogGrid({n: _app(mod, sent) for n in range(1, nodes + 1)})
    cap = _Capture()
    strat = flower.TensorpressStrategy(cap, downlink=downlink, min_size=16)
    strat.start(grid, _record(_global()), num_rounds=rounds)
    return cap, grid, sent


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


@pytest.mark.parametrize("recipe", [None, "*:zstd(1)", "shuffle4 | plane3:huff0"])
def test_lossless_recipe_round_trip_is_bit_exact(flower: Any, recipe: str | None) -> None:
    mod = flower.tensorpress_mod(recipe=recipe, min_size=16)
    if recipe == "shuffle4 | plane3:huff0":  # a 4-byte shuffle: float32 arrays only
        glob = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in _global().items()}
        rec = flower.compress_arrays(_record(glob), recipe=recipe, min_size=16)
        back = flower.restore_arrays(rec)
        for k, v in glob.items():
            assert _bits(back[k].numpy()) == _bits(v) and back[k].numpy().dtype == v.dtype
        return
    cap, grid, sent = _run(flower, mod, nodes=2)
    assert len(cap.seen) == 2
    for (node, wire), seen in zip(grid.wire, cap.seen):
        trained = sent[node][0]
        for k, v in trained.items():
            assert seen[k].dtype == v.dtype and seen[k].shape == v.shape
            assert _bits(seen[k]) == _bits(v), k
        assert wire["fc1.w"].stype == flower.STYPE
        assert wire["fc1.b"].stype == fl.NUMPY_STYPE  # under min_size
        assert wire["steps"].stype == fl.NUMPY_STYPE  # not float


def test_fp16_recipe_within_bound(flower: Any) -> None:
    cap, grid, sent = _run(flower, flower.tensorpress_mod(recipe="fp16", min_size=16))
    for (node, _), seen in zip(grid.wire, cap.seen):
        for k, v in sent[node][0].items():
            if v.dtype.kind != "f" or v.size < 16:
                continue
            x = v.astype(np.float64)
            err = np.abs(seen[k].astype(np.float64) - x)
            assert np.all(err <= 2.0**-11 * np.abs(x) + 2.0**-25), k  # fp16 stage's stated bound
            assert seen[k].dtype == v.dtype


def test_int8_blockwise_within_bound(flower: Any) -> None:
    recipe = "int8(4096) | q:huff0"
    cap, grid, sent = _run(flower, flower.tensorpress_mod(recipe=recipe, min_size=16))
    for (node, _), seen in zip(grid.wire, cap.seen):
        for k, v in sent[node][0].items():
            if v.dtype.kind != "f" or v.size < 16:
                continue
            x = v.astype(np.float64).ravel()
            got = seen[k].astype(np.float64).ravel()
            for s in range(0, x.size, 4096):
                blk = x[s:s + 4096]
                bound = np.abs(blk).max() * (1 / 254 + 2.0**-21) * (1 + 1e-6)
                if v.dtype == np.float16:  # quantized in float32, then narrowed back
                    bound = bound + 2.0**-11 * np.abs(got[s:s + 4096]) + 2.0**-24
                assert np.all(np.abs(got[s:s + 4096] - blk) <= bound), k


def test_topk_error_feedback_identity_over_rounds(flower: Any, tp: Any) -> None:
    """out = global + decoded; decoded + residual_new == update + residual_old."""
    ratio, rounds = 0.1, 3
    mod = flower.tensorpress_mod(spec=f"topk({ratio})", min_size=16)
    sent: dict[int, list] = {}
    grid = _LogGrid({1: _app(mod, sent)})
    cap = _Capture()
    strat = flower.TensorpressStrategy(cap, min_size=16)
    arrays = _record(_global())
    residual = {k: np.zeros(v.shape, np.float32) for k, v in _global().items()}
    for rnd in range(1, rounds + 1):
        glob = {k: a.numpy() for k, a in arrays.items()}
        replies = grid.send_and_receive(strat.configure_train(rnd, arrays, fl.ConfigRecord(), grid))
        arrays, _ = strat.aggregate_train(rnd, replies)
        wire, seen = grid.wire[-1][1], cap.seen[-1]
        for k in ("fc1.w", "fc2.w", "emb"):
            assert wire[k].stype == flower.STYPE_DELTA
            assert wire[k].shape == SHAPES[k] and wire[k].dtype == str(glob[k].dtype)
            dec = np.zeros(SHAPES[k], np.float32)
            tp.Receiver().add(wire[k].data, 1.0, into={k: dec})
            t = sent[1][-1][k]
            upd = (t.astype(np.float32) - glob[k].astype(np.float32)) if t.dtype.itemsize < 4 \
                else (t - glob[k]).astype(np.float32)
            v = upd + residual[k]
            kept = np.flatnonzero(dec.ravel())
            n = v.size
            assert kept.size == math.ceil(ratio * n)
            top = np.argsort(-np.abs(v.ravel()), kind="stable")[:kept.size]
            assert set(kept.tolist()) == set(top.tolist())
            assert np.array_equal(dec.ravel()[kept], v.ravel()[kept])  # lossless tail
            residual[k] = v - dec  # decoded + residual_new == update + residual_old
            want = (glob[k] + dec).astype(glob[k].dtype) if glob[k].dtype != np.float32 \
                else glob[k] + dec
            assert _bits(seen[k]) == _bits(want), k  # out = global + decoded
    assert "tensorpress" in grid.contexts[1].state  # the residual lives in Context.state


def test_dgc_warmup_follows_the_server_round(flower: Any) -> None:
    """The mod gives the Sender FedAvg's config["server-round"]: DGC's warm-up density falls."""
    rounds, sizes = 5, []
    sent: dict[int, list] = {}
    grid = _LogGrid({1: _app(flower.tensorpress_mod(spec="dgc(0.01,warmup=3)", min_size=16), sent)})
    strat = flower.TensorpressStrategy(fl.FedAvg(), min_size=16)
    arrays = _record(_global())
    for rnd in range(1, rounds + 1):
        msgs = list(strat.configure_train(rnd, arrays, fl.ConfigRecord(), grid))
        assert all(m.content["config"]["server-round"] == rnd for m in msgs)
        arrays, _ = strat.aggregate_train(rnd, grid.send_and_receive(msgs))
        sizes.append(len(grid.wire[-1][1]["fc1.w"].data))
    # Warm-up densities 25%, 6.25%, 1.5625%, then 1%: each round's frame smaller, then flat.
    assert sizes[0] > sizes[1] > sizes[2] > sizes[3], sizes
    assert abs(sizes[4] - sizes[3]) <= sizes[3] // 4, sizes


def test_state_survives_a_fresh_process(flower: Any) -> None:
    """Only Context.state carries the residual: a new mod object continues it."""
    spec = "topk(0.05)"
    g = _global()
    msg = fl.Message(fl.RecordDict({"arrays": _record(g)}), 1, fl.MessageType.TRAIN)

    def app(m: fl.Message, c: fl.Context) -> fl.Message:
        t = {k: v + 1.0 if v.dtype.kind == "f" else v for k, v in g.items()}
        return fl.Message(fl.RecordDict({"arrays": _record(t)}), reply_to=m)

    ctx_a = fl.Context(1, 1, {}, fl.RecordDict(), {})
    ctx_b = fl.Context(1, 1, {}, fl.RecordDict(), {})
    frames = []
    for ctx, mods in ((ctx_a, [flower.tensorpress_mod(spec=spec, min_size=16)] * 2),
                      (ctx_b, [flower.tensorpress_mod(spec=spec, min_size=16),
                               flower.tensorpress_mod(spec=spec, min_size=16)])):
        out = [m(msg, ctx, app).content["arrays"]["fc1.w"].data for m in mods]
        frames.append(out)
    assert frames[0] == frames[1]
    assert frames[0][0] != frames[0][1]  # the second round sends the residual's share


def test_object_ids_stable_and_tamper_detected(flower: Any) -> None:
    mod = flower.tensorpress_mod(recipe="fp16", min_size=16)
    _, g1, _ = _run(flower, mod, nodes=2)
    _, g2, _ = _run(flower, flower.tensorpress_mod(recipe="fp16", min_size=16), nodes=2)
    assert g1.pushed_ids == g2.pushed_ids  # same content, same ids

    def tamper(m: fl.Message) -> None:
        a = m.content["arrays"]["fc1.w"]
        m.content["arrays"]["fc1.w"] = fl.Array(a.dtype, a.shape, a.stype,
                                                a.data[:-1] + bytes([a.data[-1] ^ 1]))

    sent: dict[int, list] = {}
    grid = fl.InMemoryGrid({1: _app(mod, sent)}, tamper=tamper)
    with pytest.raises(ValueError, match="does not match content hash"):
        flower.TensorpressStrategy(fl.FedAvg()).start(grid, _record(_global()), num_rounds=1)


def test_compressed_array_shape_dtype_and_numpy_refusal(flower: Any) -> None:
    rec = flower.compress_arrays(_record(_global()), recipe="fp16", min_size=16)
    a = rec["fc2.w"]
    assert (a.dtype, a.shape, a.stype) == ("float64", (10, 64), flower.STYPE)
    assert isinstance(a.data, bytes)
    assert int(np.prod(a.shape)) == 640  # what arrays_size_mod reads
    with pytest.raises(TypeError):
        a.numpy()


def test_legacy_array_gets_real_dtype_and_shape(flower: Any) -> None:
    v = np.arange(32, dtype=np.float32).reshape(4, 8)
    legacy = fl.Array.from_numpy_ndarray(v)
    legacy = fl.Array(dtype="", shape=(), stype=legacy.stype, data=legacy.data)
    rec = flower.compress_arrays(fl.ArrayRecord({"0": legacy}), min_size=1)
    assert (rec["0"].dtype, rec["0"].shape) == ("float32", (4, 8))
    assert np.array_equal(flower.restore_arrays(rec)["0"].numpy(), v)


def test_downlink_lossless_shared_encoding(flower: Any) -> None:
    cap, grid, sent = _run(flower, flower.tensorpress_mod(min_size=16), nodes=3,
                           downlink="*:zstd(1)")
    assert len(cap.seen) == 3  # the train fn asserted restored numpy arrays
    strat = flower.TensorpressStrategy(fl.FedAvg(), downlink="*:zstd(1)", min_size=16)
    msgs = list(strat.configure_train(1, _record(_global()), fl.ConfigRecord(), grid))
    ids = {fl.object_id(m.content["arrays"]) for m in msgs}
    assert len(ids) == 1 and msgs[0].content["arrays"]["fc1.w"].stype == flower.STYPE
    with pytest.raises(ValueError, match="lossy"):
        flower.TensorpressStrategy(fl.FedAvg(), downlink="fp16")


def test_non_train_and_error_replies_pass_unchanged(flower: Any) -> None:
    mod = flower.tensorpress_mod(recipe="fp16", min_size=1)
    ctx = fl.Context(1, 1, {}, fl.RecordDict(), {})
    rec = _record(_global())

    def reply(m: fl.Message, c: fl.Context) -> fl.Message:
        return fl.Message(fl.RecordDict({"arrays": rec}), reply_to=m)

    ev = fl.Message(fl.RecordDict({"arrays": rec}), 1, fl.MessageType.EVALUATE)
    assert mod(ev, ctx, reply).content["arrays"] is rec
    err = fl.Message(error=fl.Error(1, "boom"), reply_to=ev)
    tr = fl.Message(fl.RecordDict({"arrays": rec}), 1, fl.MessageType.TRAIN)
    assert mod(tr, ctx, lambda m, c: err) is err


def test_errors_name_the_array(flower: Any, tp: Any) -> None:
    with pytest.raises(ValueError, match="not both"):
        flower.tensorpress_mod(spec="topk(0.1)", recipe="fp16")
    with pytest.raises(tp.RecipeError):
        flower.tensorpress_mod(recipe="nosuchstage(3)")
    with pytest.raises(tp.TensorpressError):
        flower.tensorpress_mod(spec="nosuchcompressor(1)")
    rec = flower.compress_arrays(_record(_global()), recipe="fp16", min_size=16)
    a = rec["fc1.w"]
    bad = fl.ArrayRecord(dict(rec))
    bad["fc1.w"] = fl.Array(a.dtype, a.shape, a.stype, a.data[: len(a.data) // 2])
    with pytest.raises(tp.TensorpressError, match="'fc1.w'"):
        flower.restore_arrays(bad)
    junk = fl.ArrayRecord({"fc1.w": fl.Array("float32", (4,), flower.STYPE, b"not a frame")})
    with pytest.raises(tp.TensorpressError, match="'fc1.w'"):
        flower.restore_arrays(junk)
    delta = fl.ArrayRecord({"fc9.w": fl.Array("float32", (4,), flower.STYPE_DELTA, b"x")})
    with pytest.raises(ValueError, match="'fc9.w'"):
        flower.restore_arrays(delta, base=_record(_global()))
    with pytest.raises(TypeError, match="'odd'"):
        flower.compress_arrays(fl.ArrayRecord({"odd": fl.Array("float32", (4,), "x/y", b"1")}))
    mod = flower.tensorpress_mod(spec="topk(0.1)", min_size=16)
    ctx = fl.Context(1, 1, {}, fl.RecordDict(), {})
    tr = fl.Message(fl.RecordDict({"arrays": fl.ArrayRecord()}), 1, fl.MessageType.TRAIN)
    with pytest.raises(ValueError, match="'fc1.w'"):
        mod(tr, ctx, lambda m, c: fl.Message(fl.RecordDict({"arrays": _record(_global())}),
                                            reply_to=m))
    assert "tensorpress" not in ctx.state  # nothing committed on failure


def test_spec_over_the_whole_update(flower: Any, tp: Any) -> None:
    """topk(r,model=on) in the mod: the mod plans the reply's update (a compress without a plan
    fails), and the arrays keep one k between them."""
    sent: dict[int, list] = {}
    grid = _LogGrid({1: _app(flower.tensorpress_mod(spec="topk(0.01,model=on)", min_size=16), sent)})
    strat = flower.TensorpressStrategy(fl.FedAvg(), min_size=16)
    arrays = _record(_global())
    strat.aggregate_train(1, grid.send_and_receive(strat.configure_train(1, arrays, fl.ConfigRecord(), grid)))
    wire = grid.wire[-1][1]
    kept, total = 0, 0
    for k, a in wire.items():
        if a.stype != flower.STYPE_DELTA:
            continue
        dec = np.zeros(SHAPES[k], np.float32)
        tp.Receiver().add(a.data, 1.0, into={k: dec})
        kept += np.count_nonzero(dec)
        total += dec.size
    # One k over all of them: ceil(0.01 * total), and up to one more per array (each keeps one).
    n = sum(1 for a in wire.values() if a.stype == flower.STYPE_DELTA)
    assert math.ceil(0.01 * total) <= kept <= math.ceil(0.01 * total) + n, (kept, total)


def test_restore_limits_reach_weights(flower: Any, tp: Any) -> None:
    """``limits`` bound the weight frames too: floatcm past max_slow_decoded is refused."""
    w = {"fc1.w": np.random.default_rng(9).normal(0, 0.02, 1 << 12).astype(np.float32)}
    rec = flower.compress_arrays(_record(w), recipe="floatcm", min_size=16)
    assert np.array_equal(flower.restore_arrays(rec)["fc1.w"].numpy(), w["fc1.w"])
    with pytest.raises(tp.LimitError, match="'fc1.w'"):
        flower.restore_arrays(rec, limits=tp.Limits(max_slow_decoded=1024))
