"""Smoke tests of the FedAvg bench: data splits, the numpy MLP, the uplink rows, the hub downlink
(a real tensorpress hub process) and the outputs, on 2 clients, 2 rounds and a subset of the data."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

# The bench's modules are scripts beside each other in python/bench (no conftest here: the package's
# tests import names from python/tests/conftest.py, and a second conftest module would shadow it).
BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import fedavg  # noqa: E402
import fl_data  # noqa: E402
import fl_downlink  # noqa: E402
import fl_model  # noqa: E402
import fl_uplink  # noqa: E402


@pytest.fixture(scope="session")
def tensorpress_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """$TENSORPRESS_BIN, else ``tensorpress`` built from this repository (skip without Go)."""
    env = os.environ.get("TENSORPRESS_BIN")
    if env:
        return env
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH: cannot build the tensorpress hub")
    return fl_downlink.build_tensorpress(str(tmp_path_factory.mktemp("bin")))


@pytest.fixture(scope="session")
def fmnist():
    """Fashion-MNIST (skip when Debian's dataset-fashion-mnist is not installed)."""
    if not os.path.isdir(fl_data.DEFAULT_DIR):
        pytest.skip("Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist")
    return fl_data.load_fashion_mnist()


SMALL = dict(clients=2, rounds=2, train_limit=2000, test_limit=500)


def _run(fmnist, row: str, fetch: str = "none", binary=None, tmp_path=None, **kw):
    cfg = fedavg.Config(**{**SMALL, "fetch": fetch, **kw})
    train, test = fmnist
    return fedavg.run_one(cfg, fl_uplink.make_row(row), 1, train, test, binary, str(tmp_path or "."))


def test_splits_cover_the_data_once(fmnist):
    train, _ = fmnist
    train = train.head(3000)
    for split in ("iid", "dirichlet"):
        s = fl_data.shards(train, 8, split, 7)
        assert len(s) == 8 and all(x.size > 0 for x in s)
        both = np.concatenate(s)
        assert np.array_equal(np.sort(both), np.arange(train.n)), split
        again = fl_data.shards(train, 8, split, 7)
        assert all(np.array_equal(a, b) for a, b in zip(s, again))
        other = fl_data.shards(train, 8, split, 8)
        assert not all(np.array_equal(a, b) for a, b in zip(s, other))
    iid = [x.size for x in fl_data.shards(train, 8, "iid", 1)]
    assert max(iid) - min(iid) <= 1
    dirich = fl_data.shards(train, 8, "dirichlet", 1)
    hist = np.array([np.bincount(train.y[x], minlength=10) / x.size for x in dirich])
    assert hist.max() > 0.3  # skewed label histograms


def test_split_errors(fmnist):
    train, _ = fmnist
    with pytest.raises(ValueError, match="split"):
        fl_data.shards(train.head(100), 2, "zipf", 1)
    with pytest.raises(ValueError, match="alpha"):
        fl_data.shards(train.head(100), 2, "dirichlet", 1, alpha=0)
    with pytest.raises(ValueError, match="cannot give"):
        fl_data.shards(train.head(3), 4, "iid", 1)


def test_gradient_matches_finite_differences(fmnist):
    train, _ = fmnist
    p32 = fl_model.init_params(3)
    fl_model.check_params(p32)
    assert 2.0 < fl_model.gradient(p32, train.x[:32], train.y[:32])[0] < 2.6  # about ln(10) at initialisation
    # In float64 (the code is dtype-generic), so that a central difference is exact to ~1e-8.
    p = {k: v.astype(np.float64) for k, v in p32.items()}
    x, y = train.x[:32].astype(np.float64), train.y[:32]
    _, g = fl_model.gradient(p, x, y)
    r = np.random.default_rng(0)
    u = {k: r.standard_normal(v.shape) for k, v in p.items()}
    eps = 1e-6
    numeric = (fl_model.gradient({k: p[k] + eps * u[k] for k in p}, x, y)[0]
               - fl_model.gradient({k: p[k] - eps * u[k] for k in p}, x, y)[0]) / (2 * eps)
    analytic = sum(float((g[k] * u[k]).sum()) for k in p)
    assert abs(numeric - analytic) <= 1e-4 * abs(analytic), (numeric, analytic)


def test_baseline_rows_round_trip():
    r = np.random.default_rng(1)
    a = (r.standard_normal((130, 70)) * 0.01).astype(np.float32)
    a[0, :] = 0
    fp32 = fl_uplink.make_row("fp32")
    c, s = fp32.new_client(), fp32.new_server()
    assert np.array_equal(s.decode("w", c.encode("w", a), a.shape), a)
    f16 = fl_uplink.make_row("fp16")
    d = f16.new_server().decode("w", f16.new_client().encode("w", a), a.shape)
    assert np.all(np.abs(d - a) <= np.abs(a) * 2.0 ** -11 + 2.0 ** -24)
    i8 = fl_uplink.make_row("int8")
    payload = i8.new_client().encode("w", a)
    d = i8.new_server().decode("w", payload, a.shape)
    flat, got = a.ravel(), d.ravel()
    for lo in range(0, flat.size, fl_uplink.BLOCK):
        blk = flat[lo:lo + fl_uplink.BLOCK]
        assert np.all(np.abs(got[lo:lo + fl_uplink.BLOCK] - blk) <= np.abs(blk).max() / 254 * 1.0001 + 1e-12)
    nblocks = -(-a.size // fl_uplink.BLOCK)
    assert a.size + 4 * nblocks < len(payload) < a.size + 4 * nblocks + 300  # codes, scales, two .npy headers
    acc = np.ones_like(a)
    i8.new_server().add("w", payload, 0.5, acc)
    assert np.allclose(acc, 1 + 0.5 * d)


def test_row_names():
    with pytest.raises(ValueError, match="row 'fp8'"):
        fl_uplink.make_row("fp8")
    with pytest.raises(ValueError):
        fl_uplink.make_row("tp:")
    assert fl_uplink.make_row("tp:topk(0.05)").family == "tensorpress"
    assert fl_uplink.default_rows()[:3] == ["fp32", "fp16", "int8"]


@pytest.mark.skipif(fl_uplink.tensorpress_available(), reason="the tensorpress package is importable")
def test_tensorpress_rows_need_the_package():
    with pytest.raises(RuntimeError, match="tensorpress package"):
        fl_uplink.make_row("tp:topk(0.05)").new_client()


def test_smoke_rows_are_paired_and_sane(fmnist):
    recs = {row: _run(fmnist, row) for row in ("fp32", "fp16", "int8")}
    for row, r in recs.items():
        assert 0.4 < r["accuracy"] <= 1.0, row  # chance is 0.1
        assert len(r["history"]) == 2 and r["down_bytes"] is None
    # Same split, init and batch order: round 1 trains the same model on every row.
    losses = {r["history"][0]["loss"] for r in recs.values()}
    assert len(losses) == 1
    assert recs["fp32"]["shard_sizes"] == recs["int8"]["shard_sizes"] == [1000, 1000]
    # fp32: exactly np.save's bytes, 128-byte headers, every tensor every round.
    assert recs["fp32"]["up_bytes"] == 2 * 2 * (4 * fl_model.NUM_PARAMS + 128 * 6)
    assert 1.9 < recs["fp32"]["up_bytes"] / recs["fp16"]["up_bytes"] < 2.0
    assert 3.8 < recs["fp32"]["up_bytes"] / recs["int8"]["up_bytes"] < 4.0
    # The outputs.
    summary = fedavg.summarize(list(recs.values()))
    out = io.StringIO()
    fedavg.write_table(out, summary)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("SPLIT") and len(lines) == 4 and "1.0x" in lines[1]
    json.dumps(list(recs.values()))


def test_smoke_through_the_hub(fmnist, tensorpress_bin, tmp_path):
    direct = _run(fmnist, "fp32")
    hub = _run(fmnist, "fp32", "cli", tensorpress_bin, tmp_path)
    # The downlink is lossless: the same models, the same accuracies, round by round.
    assert [p["accuracy"] for p in hub["history"]] == [p["accuracy"] for p in direct["history"]]
    assert [p["loss"] for p in hub["history"]] == [p["loss"] for p in direct["history"]]
    raw = 4 * fl_model.NUM_PARAMS * 2 * 2
    assert hub["down_fp32_bytes"] == raw
    assert 0 < hub["down_bytes"] < raw
    assert hub["down_deltas"] == 2 * 6  # round 2: every tensor of both clients as a delta
    assert hub["history"][0]["down_bytes"] > 0


def test_hub_publish_fetch_and_digests(tensorpress_bin, tmp_path):
    p = fl_model.init_params(5)
    with fl_downlink.HubProcess(tensorpress_bin, str(tmp_path / "hub")) as hub:
        digests = hub.publish(1, p)
        f = fl_downlink.CliFetcher(tensorpress_bin, hub, str(tmp_path / "c"))
        got = f.fetch(1)
        fl_downlink.check_digests(got.arrays, digests, "v1")
        assert got.bytes_received > 0 and got.deltas == 0
        q = {k: v + np.float32(1e-3) for k, v in p.items()}
        d2 = hub.publish(2, q)
        got2 = f.fetch(2)
        fl_downlink.check_digests(got2.arrays, d2, "v2")
        assert got2.deltas == 6
        bad = dict(got2.arrays)
        bad["fc3.bias"] = bad["fc3.bias"].copy()
        bad["fc3.bias"][0] = np.nextafter(bad["fc3.bias"][0], np.float32(1))
        with pytest.raises(ValueError, match="fc3.bias"):
            fl_downlink.check_digests(bad, d2, "v2")
        with pytest.raises(FileExistsError):
            hub.publish(2, q)


def test_plot_is_valid_svg(fmnist, tmp_path):
    recs = [_run(fmnist, row) for row in ("fp32", "int8")]
    path = tmp_path / "f.svg"
    import plot
    plot.write_fedavg_svg(str(path), recs)
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    assert len([e for e in root.iter() if e.tag.endswith("polyline")]) == 4  # two panels, two rows


def test_config_errors(fmnist):
    with pytest.raises(ValueError, match="clients"):
        _run(fmnist, "fp32", clients=0)
    with pytest.raises(ValueError, match="fetch"):
        _run(fmnist, "fp32", fetch="ftp")


@pytest.mark.skipif(not fl_uplink.tensorpress_available(), reason="the tensorpress package is not importable")
@pytest.mark.parametrize("row", ["tp:topk(0.05)", "tpr:int8(4096) | q:huff0"])
def test_tensorpress_rows_smoke(fmnist, row):
    base = _run(fmnist, "fp32")
    r = _run(fmnist, row)
    assert r["up_bytes"] < base["up_bytes"] / 3
    assert r["accuracy"] > 0.3
