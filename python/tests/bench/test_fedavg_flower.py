"""Smoke tests of fedavg_flower.py: FedAvg through the Flower adapter over the Flower stand-in, on
2 clients, 2 rounds and a subset of the data (a few seconds)."""

from __future__ import annotations

import io
import json
import os
import sys
import types
from contextlib import redirect_stdout

import pytest

# The bench's modules are scripts beside each other in python/bench (see test_fedavg_bench.py).
BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import fedavg  # noqa: E402
import fedavg_flower  # noqa: E402
import fl_data  # noqa: E402
import fl_model  # noqa: E402
import fl_uplink  # noqa: E402

SPEC = "topk(0.05) | idx:delta,bitpack | val:nf4(64) | *:huff0"
SMALL = dict(clients=2, rounds=2, train_limit=2000, test_limit=1000, fetch="none")
needs_tp = pytest.mark.skipif(not fl_uplink.tensorpress_available(),
                              reason="the tensorpress package is not importable (run `make python`)")


@pytest.fixture(scope="session")
def fmnist():
    """Fashion-MNIST (skip when Debian's dataset-fashion-mnist is not installed)."""
    if not os.path.isdir(fl_data.DEFAULT_DIR):
        pytest.skip("Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist")
    return fl_data.load_fashion_mnist()


def _run(fmnist, spec: str):
    train, test = fmnist
    return fedavg_flower.run_one(fedavg.Config(**SMALL), spec, 1, train, test)


def test_parse_specs():
    assert fedavg_flower.parse_specs(None) == list(fedavg_flower.DEFAULT_SPECS)
    assert fedavg_flower.parse_specs(["none; topk(0.1) | *:huff0", "dgc(0.01)"]) == \
        ["none", "topk(0.1) | *:huff0", "dgc(0.01)"]
    with pytest.raises(ValueError):
        fedavg_flower.parse_specs([" ; "])


def test_refuses_to_shadow_a_real_flower(monkeypatch):
    monkeypatch.setitem(sys.modules, "flwr", types.ModuleType("flwr"))
    with pytest.raises(RuntimeError, match="shadow"):
        fedavg_flower.load_standin()


def test_none_row_is_plain_fp32(fmnist):
    r = _run(fmnist, "none")
    assert r["row"] == "none" and r["via"] == "flower-standin"
    assert 0.4 < r["accuracy"] <= 1.0  # chance is 0.1
    # np.save bytes of the six trained tensors (128-byte headers), both clients, both rounds.
    assert r["up_bytes"] == 2 * 2 * (4 * fl_model.NUM_PARAMS + 128 * 6)
    assert r["reply_stypes"] == {"numpy.ndarray": 2 * 2 * 6} and r["state_bytes"] is None
    assert r["shard_sizes"] == [1000, 1000] and len(r["history"]) == 2
    direct = fedavg.run_one(fedavg.Config(**SMALL), fl_uplink.make_row("fp32"), 1, *fmnist, None, ".")
    assert r["up_bytes"] == direct["up_bytes"]
    assert r["history"][0]["loss"] == direct["history"][0]["loss"]  # same split, init, batch order
    assert abs(r["accuracy"] - direct["accuracy"]) <= 0.03  # the same algorithm up to float rounding


@needs_tp
def test_spec_row_through_the_mod(fmnist):
    base = _run(fmnist, "none")
    r = _run(fmnist, SPEC)
    assert r["row"] == f"tp:{SPEC}" and r["min_size"] == 1
    # min_size 1: all six tensors of every reply, biases included, travel as update frames.
    assert r["reply_stypes"] == {"tensorpress/v1+delta": 2 * 2 * 6}
    assert all(b > 0 for b in r["state_bytes"])  # the residual lives in each node's Context.state
    assert r["up_bytes"] < base["up_bytes"] / 10
    assert r["accuracy"] > 0.25
    direct = fedavg.run_one(fedavg.Config(**SMALL), fl_uplink.make_row(f"tp:{SPEC}"), 1, *fmnist, None, ".")
    # Round 1 trains the same models from the same global: the same updates, the same frames.
    assert r["history"][0]["loss"] == direct["history"][0]["loss"]
    assert r["history"][0]["up_bytes"] == direct["history"][0]["up_bytes"]
    assert abs(r["accuracy"] - direct["accuracy"]) <= 0.03


@needs_tp
def test_cli_table_and_json(fmnist, tmp_path):
    path = tmp_path / "ff.jsonl"
    out = io.StringIO()
    with redirect_stdout(out):
        assert fedavg_flower.main(["--spec", f"none;{SPEC}", "--clients", "2", "--rounds", "2",
                                   "--train-limit", "2000", "--test-limit", "1000", "--json", str(path),
                                   "--quiet"]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("ROW") and len(lines) == 3
    assert lines[1].split()[0] == "none" and "1.0x" in lines[1]
    recs = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert [r["row"] for r in recs] == ["none", f"tp:{SPEC}"]
    assert all(len(r["history"]) == 2 and "accuracy" in r["history"][-1] for r in recs)
