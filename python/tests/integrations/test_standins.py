"""The stand-ins behave as the framework sources they quote.

These run without ``tensorpress``: they pin the behaviour the adapters rely on
(strict Flower Arrays, reversed mod wrapping, object ids computed after the app
returns, FLARE's DXOFilter skipping and history, OpenFL's proto metadata), so
an adapter test passing against a stand-in means something.
"""

from __future__ import annotations

import numpy as np
import pytest

from standins import flwr_standin as fl
from standins import nvflare_standin as nv
from standins import openfl_standin as of

# --- Flower -----------------------------------------------------------------


def test_flwr_array_strict_types() -> None:
    with pytest.raises(TypeError):
        fl.Array(dtype="float32", shape=[2], stype="x", data=b"ab")  # list shape
    with pytest.raises(TypeError):
        fl.Array(dtype="float32", shape=(2,), stype="x", data=bytearray(b"ab"))
    with pytest.raises(TypeError):
        fl.Array(dtype="float32", shape=(2,), stype="x", data=memoryview(b"ab"))
    fl.Array(dtype="float32", shape=(2,), stype="x", data=b"ab")


def test_flwr_array_numpy_round_trip_and_foreign_stype() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    arr = fl.Array.from_numpy_ndarray(a)
    assert (arr.dtype, arr.shape, arr.stype) == ("float32", (2, 3), "numpy.ndarray")
    assert np.array_equal(arr.numpy(), a)
    other = fl.Array(dtype="float32", shape=(2, 3), stype="tensorpress/v1", data=b"x")
    with pytest.raises(TypeError, match="Unsupported serialization type"):
        other.numpy()


def test_flwr_arrayrecord_checks() -> None:
    rec = fl.ArrayRecord([np.zeros(2), np.ones(3)])
    assert list(rec) == ["0", "1"]
    assert rec.count_bytes() == sum(len(a.data) + len(k) for k, a in rec.items())
    with pytest.raises(TypeError):
        rec[1] = rec["0"]  # type: ignore[index]
    with pytest.raises(TypeError):
        rec["x"] = np.zeros(2)  # type: ignore[assignment]


def test_flwr_recorddict_views_write_through() -> None:
    rd = fl.RecordDict({"arrays": fl.ArrayRecord(), "m": fl.MetricRecord({"a": 1})})
    assert list(rd.array_records) == ["arrays"] and list(rd.metric_records) == ["m"]
    rd.array_records["arrays"] = fl.ArrayRecord([np.zeros(1)])
    assert list(rd["arrays"]) == ["0"]
    with pytest.raises(TypeError):
        rd.array_records["y"] = fl.MetricRecord()


def test_flwr_make_ffn_mods0_is_outermost() -> None:
    seen: list[str] = []

    def mk(tag: str):  # type: ignore[no-untyped-def]
        def mod(msg, ctxt, call_next):  # type: ignore[no-untyped-def]
            seen.append(f"{tag}-in")
            out = call_next(msg, ctxt)
            seen.append(f"{tag}-out")
            return out
        return mod

    def app(msg, ctxt):  # type: ignore[no-untyped-def]
        seen.append("app")
        return fl.Message(fl.RecordDict(), reply_to=msg)

    ffn = fl.make_ffn(app, [mk("a"), mk("b")])
    ctx = fl.Context(1, 1, {}, fl.RecordDict(), {})
    ffn(fl.Message(fl.RecordDict(), 1, fl.MessageType.TRAIN), ctx)
    assert seen == ["a-in", "b-in", "app", "b-out", "a-out"]


def test_flwr_fedavg_checks_and_average() -> None:
    def reply(v: float, n: int, extra: bool = False) -> fl.RecordDict:
        rd = fl.RecordDict({"arrays": fl.ArrayRecord({"w": fl.Array.from_numpy_ndarray(
            np.full(3, v))}), "metrics": fl.MetricRecord({"num-examples": n})})
        if extra:
            rd["more"] = fl.ArrayRecord()
        return rd

    out = fl.aggregate_arrayrecords([reply(1.0, 1), reply(4.0, 2)], "num-examples")
    assert np.allclose(out["w"].numpy(), 3.0)
    with pytest.raises(ValueError, match="one ArrayRecord"):
        fl.validate_message_reply_consistency([reply(1.0, 1, extra=True)], "num-examples", True)


def test_flwr_object_ids_and_verification() -> None:
    big = np.zeros(2 * fl.MAX_ARRAY_CHUNK_SIZE // 4, np.float32)  # two identical 5 MiB chunks
    a = fl.Array(dtype="float32", shape=big.shape, stype="x", data=big.tobytes())
    b = fl.Array(dtype="float32", shape=big.shape, stype="x", data=big.tobytes()[:-1] + b"\1")
    assert fl.object_id(a) != fl.object_id(b)
    assert fl.object_id(a) == fl.object_id(fl.Array("float32", big.shape, "x", big.tobytes()))

    app = fl.ClientApp()

    @app.train()
    def train(msg, ctxt):  # type: ignore[no-untyped-def]
        return fl.Message(fl.RecordDict({"arrays": fl.ArrayRecord([np.ones(2)])}), reply_to=msg)

    def tamper(m: fl.Message) -> None:
        m.content["arrays"]["0"] = fl.Array.from_numpy_ndarray(np.zeros(2))

    grid = fl.InMemoryGrid({7: app})
    grid.send_and_receive([fl.Message(fl.RecordDict(), 7, fl.MessageType.TRAIN)])
    grid.tamper = tamper
    with pytest.raises(ValueError, match="does not match"):
        grid.send_and_receive([fl.Message(fl.RecordDict(), 7, fl.MessageType.TRAIN)])


# --- NVIDIA FLARE -------------------------------------------------------------


class _Tag(nv.DXOFilter):
    def __init__(self, new: bool = False, none: bool = False) -> None:
        super().__init__([nv.DataKind.WEIGHTS], None)
        self.new, self.none, self.calls = new, none, 0

    def process_dxo(self, dxo, shareable, fl_ctx):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.none:
            return None
        return nv.DXO(dxo.data_kind, dict(dxo.data), dict(dxo.meta)) if self.new else dxo


def test_nvflare_dxofilter_skips() -> None:
    ctx = nv.FLContext()
    f = _Tag()
    s = nv.DXO(nv.DataKind.WEIGHTS, {"w": np.ones(2)}).to_shareable()
    s.set_return_code(nv.ReturnCode.EXECUTION_EXCEPTION)
    assert f.process(s, ctx) is s and f.calls == 0
    plain = nv.Shareable()
    assert f.process(plain, ctx) is plain and f.calls == 0
    m = nv.DXO(nv.DataKind.METRICS, {"acc": 1.0}).to_shareable()
    f.process(m, ctx)
    assert f.calls == 0
    with pytest.raises(ValueError):
        nv.DXO(nv.DataKind.WEIGHTS, [1, 2])  # type: ignore[arg-type]


def test_nvflare_dxofilter_history_and_collection() -> None:
    ctx = nv.FLContext()
    inner = nv.DXO(nv.DataKind.WEIGHTS, {"w": np.ones(2)}, {"filter_history": ["Earlier"]})
    coll = nv.DXO(nv.DataKind.COLLECTION, {"a": inner, "b": nv.DXO(nv.DataKind.METRICS, {"x": 1})})
    out = nv.from_shareable(_Tag(new=True).process(coll.to_shareable(), ctx))
    # The new DXO shares the history list through a shallow meta copy, and FLARE then
    # extends that list with itself: a filter building a new DXO must drop the key.
    assert out.data["a"].get_filter_history() == ["Earlier", "Earlier", "_Tag"]
    assert out.data["b"].get_filter_history() is None
    s = nv.DXO(nv.DataKind.WEIGHTS, {"w": np.ones(2)}).to_shareable()
    assert nv.from_shareable(_Tag(none=True).process(s, ctx)).get_filter_history() is None


def test_nvflare_quantizer_meta_and_dequantizer_error() -> None:
    ctx = nv.FLContext()
    w = {"w": np.linspace(-1, 1, 8, dtype=np.float32)}
    s = nv.DXO(nv.DataKind.WEIGHTS, dict(w)).to_shareable()
    s = nv.run_filter_chain([nv.ModelQuantizer()], [], s, ctx)
    q = nv.from_shareable(s)
    assert q.data["w"].dtype == np.float16
    assert q.get_meta_prop(nv.MetaKey.PROCESSED_ALGORITHM) == "float16"
    assert q.get_meta_prop("source_datatype") == {"w": "float32"}
    assert q.get_meta_prop("quantized_flag") is True
    d = nv.from_shareable(nv.ModelDequantizer().process(s, ctx))
    assert d.data["w"].dtype == np.float32 and "quant_state" not in d.meta
    bare = nv.DXO(nv.DataKind.WEIGHTS, dict(w)).to_shareable()
    with pytest.raises(ValueError, match="not found"):
        nv.ModelDequantizer().process(bare, ctx)


def test_nvflare_site_filters_run_before_job_filters() -> None:
    order: list[str] = []

    class F(nv.Filter):
        def __init__(self, n: str) -> None:
            self.n = n

        def process(self, shareable, fl_ctx):  # type: ignore[no-untyped-def]
            order.append(self.n)
            return shareable

    nv.run_filter_chain([F("site")], [F("job")], nv.Shareable(), nv.FLContext())
    assert order == ["site", "job"]


# --- OpenFL -----------------------------------------------------------------


def test_openfl_nocompression_and_codec_lossless_choice() -> None:
    class Lossy(of.Transformer):
        def __init__(self) -> None:
            self.lossy = True

        def forward(self, data, **kwargs):  # type: ignore[no-untyped-def]
            return data.astype(np.float16).tobytes(), {"int_list": list(data.shape)}

        def backward(self, data, metadata, **kwargs):  # type: ignore[no-untyped-def]
            return np.frombuffer(data, np.float16).astype(np.float32).reshape(
                tuple(metadata["int_list"]))

    lossy = of.TransformationPipeline([Lossy()])
    codec = of.TensorCodec(lossy)
    assert lossy.is_lossy() and isinstance(codec.lossless_pipeline, of.NoCompressionPipeline)
    plain = of.NoCompressionPipeline()
    assert of.TensorCodec(plain).lossless_pipeline is plain
    key = of.TensorKey("w", "agg", 1, False, ("trained",))
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    k2, nt_data, meta = codec.compress(key, a, require_lossless=True)
    assert "compressed" in k2.tags
    assert np.array_equal(codec.decompress(key, nt_data, meta, require_lossless=True)[1], a)


def test_openfl_wire_keeps_three_fields_at_proto_precision() -> None:
    wire = of.to_wire(b"x", [{"int_list": [3, 4], "int_to_float": {1: 0.1}, "other": 5}])
    data, meta = of.from_wire(wire)
    assert data == b"x" and set(meta[0]) == {"int_to_float", "int_list", "bool_list"}
    assert not isinstance(meta[0]["int_list"], list)
    assert not isinstance(meta[0]["int_to_float"], dict)
    assert meta[0]["int_to_float"][1] == float(np.float32(0.1)) != 0.1
    with pytest.raises(ValueError, match="out of range"):
        of.to_wire(b"x", [{"int_list": [2**31]}])
    with pytest.raises(TypeError, match="bytes"):
        of.to_wire(np.zeros(2), [{}])


def test_openfl_pipeline_backward_reverses_and_pops() -> None:
    calls: list[str] = []

    class T(of.Transformer):
        def __init__(self, n: str) -> None:
            self.n, self.lossy = n, False

        def forward(self, data, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(self.n + str(kwargs.get("lossless")))
            return data, {"n": self.n}

        def backward(self, data, metadata, **kwargs):  # type: ignore[no-untyped-def]
            calls.append("back-" + metadata["n"])
            return data

    p = of.TransformationPipeline([T("a"), T("b")])
    d, meta = p.forward(1, lossless=True)
    p.backward(d, meta)
    assert calls == ["aTrue", "bTrue", "back-b", "back-a"] and meta == []


def test_openfl_build_from_plan() -> None:
    p = of.build_from_plan({"template": "standins.openfl_standin.NoCompressionPipeline",
                            "settings": {}})
    assert isinstance(p, of.NoCompressionPipeline)
