#!/usr/bin/python3
"""FedAvg in numpy on Fashion-MNIST, Flower-shaped: client updates go through
the Flower adapter ``tensorpress.integrations.flower``.

This runs the adapter over the Flower STAND-IN
(``python/tests/integrations/standins/flwr_standin.py``, which copies Flower
1.29's signatures: Array, ArrayRecord, RecordDict, Message, Context,
ClientApp, InMemoryGrid, FedAvg), not over Flower: Flower does not install
here. The stand-in is registered in ``sys.modules`` under the real module
names (``flwr``, ``flwr.app``, ...) as ``python/tests/integrations/conftest.py``
does, so the adapter runs its production imports unchanged; the bench refuses
to run when a real ``flwr`` is importable or already imported (it would be
shadowed).

Per run: one ClientApp per node (node ids 1..clients) with
``mods=[tensorpress_mod(spec=SPEC, min_size=1)]`` (min_size 1: the biases are
compressed too, every tensor goes through the Sender, as in fedavg.py's
``tp:SPEC`` rows); its train function trains the node's shard from the arrays
it received and replies with the trained arrays and
``MetricRecord({"num-examples": shard size})``. The mod sends
``trained - global`` through a ``tp.Sender`` whose residual lives in
``Context.state`` (the grid keeps one Context per node across rounds; the bench
checks it). The server is ``TensorpressStrategy(FedAvg())``, driven round by
round (configure_train, the grid, aggregate_train) so that the global model is
evaluated on the test set after every round. The row ``none`` has no mod and a
plain ``FedAvg()``: the trained weights travel as ``np.save`` Arrays (fp32).
The global model goes to the clients in memory, as plain arrays (no hub).

The training setup and the seeds are fedavg.py's (MLP 784-128-64-10, SGD lr
0.05 momentum 0.9, batch 64, 1 local epoch, a shuffle generator per client,
the IID or Dirichlet split of ``fl_data.shards``), so a row here is comparable
with ``fedavg.py --fetch none --rows 'tp:SPEC'`` on the same seed: the adapter
computes ``trained - global`` in float32, the server restores
``global + decoded`` and FedAvg averages weighted by num-examples, which is
fedavg.py's ``global + sum(n_c/N * decoded)`` up to float rounding.

    PYTHONPATH=python /usr/bin/python3 python/bench/fedavg_flower.py \\
        --spec none --spec 'topk(0.05) | idx:delta,bitpack | val:nf4(64) | *:huff0' --seeds 1

Bytes up are ``len(Array.data)`` of the reply arrays as they arrived at the
server (frames, before the strategy restores them), summed over tensors,
clients and rounds.

Output: a JSON line per (spec, seed) with ``--json`` (final ``accuracy``,
``up_bytes``, ``down_bytes`` (np.save bytes of the global sent to every
node), ``history`` per round (loss, accuracy, cumulative bytes up),
``reply_stypes``, ``state_bytes`` (the Sender state each node keeps in
Context.state), ``seconds``, ``times``, ``config``); a table on stdout: row,
split, seed, accuracy, bytes up and the reduction against the ``none`` row of
the same split and seed.

A spec with a schedule (DGC's ``warmup=``) follows the round as in fedavg.py:
the mod reads FedAvg's ``config["server-round"]``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import asdict
from types import ModuleType
from typing import Any, Dict, List, Optional, TextIO, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PYROOT = os.path.dirname(HERE)  # python/: the tensorpress package
STANDINS = os.path.join(PYROOT, "tests", "integrations")  # holds the ``standins`` package
for _p in (HERE, PYROOT, STANDINS):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import fl_data  # noqa: E402
import fl_model  # noqa: E402
from fedavg import Config, Diverged, Timer, _human, add_training_args, blas_name  # noqa: E402

NONE = "none"
DEFAULT_SPECS = (NONE, "topk(0.05) | idx:delta,bitpack | val:nf4(64) | *:huff0")
MIN_SIZE = 1  # compress every float tensor, biases included (fedavg.py's tp: rows send all six)



def load_standin() -> ModuleType:
    """The Flower stand-in, registered in ``sys.modules`` under Flower's module names.

    Raises:
        RuntimeError: a real ``flwr`` is imported or importable; the bench runs on the
            stand-in and will not shadow an installed Flower.
    """
    from standins import flwr_standin

    if "flwr" not in sys.modules and importlib.util.find_spec("flwr") is not None:
        raise RuntimeError("a real flwr is importable; this bench runs the adapter over the Flower "
                           "stand-in and will not shadow an installed Flower")
    for n in flwr_standin.MODULE_NAMES:
        existing = sys.modules.get(n)
        if existing is not None and existing is not flwr_standin:
            raise RuntimeError(f"{n} is already imported from {existing!r}; the stand-in "
                               "must not shadow an installed framework")
        sys.modules[n] = flwr_standin
    return flwr_standin


def load_adapter() -> ModuleType:
    """``tensorpress.integrations.flower`` over the stand-in (registered first)."""
    load_standin()
    try:
        return importlib.import_module("tensorpress.integrations.flower")
    except ImportError as e:
        raise RuntimeError("spec rows need the tensorpress package: run `make python` and put python/ "
                           f"on PYTHONPATH ({e})") from e


def row_name(spec: str) -> str:
    """The row's name: ``none`` or ``tp:SPEC`` (as fedavg.py names the same Sender row)."""
    return NONE if spec == NONE else f"tp:{spec}"


def _record(fl: ModuleType, params: fl_model.Params) -> Any:
    return fl.ArrayRecord({k: fl.Array.from_numpy_ndarray(params[k]) for k in fl_model.NAMES})


def _params(rec: Any) -> fl_model.Params:
    p = fl_model.copy_params({k: rec[k].numpy() for k in fl_model.NAMES})
    fl_model.check_params(p, "arrays")
    return p


def _client_app(fl: ModuleType, mods: List[Any], cfg: Config, shard: np.ndarray, order: np.ndarray,
                r: np.random.Generator, train: fl_data.Dataset, losses: Dict[int, Tuple[float, int]],
                t: Timer) -> Any:
    """A ClientApp whose train function runs fedavg.py's local epoch(s) on one shard."""
    app = fl.ClientApp(mods=mods)

    @app.train()
    def train_fn(msg: Any, ctxt: Any) -> Any:
        local = _params(msg.content["arrays"])
        loss, seen = 0.0, 0
        with t("train"):
            for _ in range(cfg.local_epochs):
                r.shuffle(order)
                ls, n = fl_model.train_local(local, train, order, cfg.batch, cfg.lr, cfg.momentum)
                loss, seen = loss + ls, seen + n
        for name in fl_model.NAMES:
            if not np.isfinite(local[name]).all():
                raise Diverged(f"node {ctxt.node_id}: {name} is not finite after local training")
        losses[ctxt.node_id] = (loss, seen)
        content = fl.RecordDict({"arrays": _record(fl, local),
                                 "metrics": fl.MetricRecord({"num-examples": int(shard.size)})})
        return fl.Message(content, reply_to=msg)

    return app


def run_one(cfg: Config, spec: str, seed: int, train: fl_data.Dataset, test: fl_data.Dataset,
            progress: Optional[TextIO] = None, min_size: int = MIN_SIZE) -> Dict[str, Any]:
    """Train ``cfg`` with the updates through ``tensorpress_mod(spec=spec)`` (or plain, ``none``) on ``seed``.

    Returns the JSON record of the run.
    """
    cfg.validate()
    fl = load_standin()
    flower = None if spec == NONE else load_adapter()
    t0, t = time.perf_counter(), Timer()
    train, test = train.head(cfg.train_limit), test.head(cfg.test_limit)
    shards = fl_data.shards(train, cfg.clients, cfg.split, seed, cfg.alpha)
    orders = [s.copy() for s in shards]
    rngs = [fl_data.rng(seed, fl_data.STREAM_SHUFFLE, c) for c in range(cfg.clients)]
    losses: Dict[int, Tuple[float, int]] = {}
    apps = {}
    for c in range(cfg.clients):
        mods = [] if flower is None else [flower.tensorpress_mod(spec=spec, min_size=min_size)]
        apps[c + 1] = _client_app(fl, mods, cfg, shards[c], orders[c], rngs[c], train, losses, t)
    grid = fl.InMemoryGrid(apps)
    contexts = dict(grid.contexts)
    strategy = fl.FedAvg() if flower is None else flower.TensorpressStrategy(fl.FedAvg(), min_size=min_size)
    arrays = _record(fl, fl_model.init_params(seed))
    hist: List[Dict[str, Any]] = []
    up_total = down_total = 0
    stypes: Dict[str, int] = {}
    diverged = 0
    for rnd in range(1, cfg.rounds + 1):
        losses.clear()
        msgs = list(strategy.configure_train(rnd, arrays, fl.ConfigRecord(), grid))
        down_total += sum(len(a.data) for m in msgs for a in m.content["arrays"].values())
        try:
            replies = grid.send_and_receive(msgs)
        except Diverged as e:
            diverged = rnd
            if progress:
                print(f"  {row_name(spec)} {cfg.split} seed {seed} round {rnd}: diverged ({e})",
                      file=progress, flush=True)
            hist.append({"round": rnd, "loss": float("nan"), "up_bytes": up_total, "accuracy": float("nan")})
            break
        for m in replies:  # as they arrived: frames, before TensorpressStrategy restores them
            for a in m.content["arrays"].values():
                up_total += len(a.data)
                stypes[a.stype] = stypes.get(a.stype, 0) + 1
        with t("aggregate"):
            agg, _ = strategy.aggregate_train(rnd, replies)
        if agg is None:
            raise RuntimeError(f"round {rnd}: the strategy aggregated nothing")
        arrays = agg
        if set(grid.contexts) != set(contexts) or any(grid.contexts[n] is not contexts[n] for n in contexts):
            raise RuntimeError("the grid did not keep one Context per node across rounds")
        if flower is not None and any(flower.STATE_KEY not in c.state for c in contexts.values()):
            raise RuntimeError(f"round {rnd}: a node's Context.state holds no Sender state")
        point: Dict[str, Any] = {"round": rnd,
                                 "loss": sum(v[0] for v in losses.values()) / sum(v[1] for v in losses.values()),
                                 "up_bytes": up_total}
        if rnd % cfg.eval_every == 0 or rnd == cfg.rounds:
            with t("eval"):
                point["accuracy"] = fl_model.accuracy(_params(arrays), test)
        hist.append(point)
        if progress:
            print(f"  {row_name(spec)} {cfg.split} seed {seed} round {rnd}/{cfg.rounds}: "
                  f"acc {point.get('accuracy', float('nan')):.4f} up {up_total} "
                  f"({time.perf_counter() - t0:.1f}s)", file=progress, flush=True)
    state_bytes = None
    if flower is not None:
        state_bytes = [len(c.state[flower.STATE_KEY]["memory"].data) if flower.STATE_KEY in c.state else 0
                       for c in contexts.values()]
    seconds = time.perf_counter() - t0
    return {"row": row_name(spec), "spec": spec, "via": "flower-standin", "split": cfg.split, "seed": seed,
            "accuracy": hist[-1]["accuracy"], "diverged": diverged, "up_bytes": up_total,
            "down_bytes": down_total, "min_size": min_size if flower is not None else None,
            "reply_stypes": stypes, "state_bytes": state_bytes, "seconds": seconds,
            "seconds_per_round": seconds / len(hist), "times": t.s, "history": hist,
            "final_params_sha": _digest(arrays), "shard_sizes": [int(s.size) for s in shards],
            "params": fl_model.NUM_PARAMS, "config": asdict(cfg), "blas": blas_name()}


def _digest(rec: Any) -> str:
    """A short SHA-256 of the arrays' bytes (equal digests: bit-identical models)."""
    h = hashlib.sha256()
    for k in fl_model.NAMES:
        h.update(rec[k].data)
    return h.hexdigest()[:16]


def write_table(f: TextIO, records: List[Dict[str, Any]]) -> None:
    """Row, split, seed, final accuracy, bytes up and the reduction against the ``none`` row (same split, seed)."""
    head = ["ROW", "SPLIT", "SEED", "ACCURACY %", "UPSTREAM", "REDUCTION", "S/ROUND"]
    rows = []
    for r in records:
        base = next((b for b in records if b["row"] == NONE and b["split"] == r["split"]
                     and b["seed"] == r["seed"]), None)
        red = f"{base['up_bytes'] / r['up_bytes']:.1f}x" if base and r["up_bytes"] else "-"
        acc = f"diverged in round {r['diverged']}" if r["diverged"] else f"{100 * r['accuracy']:.2f}"
        rows.append([r["row"], r["split"], str(r["seed"]), acc, _human(r["up_bytes"]), red,
                     f"{r['seconds_per_round']:.1f}"])
    widths = [max(len(x[i]) for x in [head] + rows) for i in range(len(head))]
    for x in [head] + rows:
        f.write("  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() + "\n")


def parse_specs(values: Optional[List[str]]) -> List[str]:
    """The specs of repeated ``--spec`` options, each possibly ';'-separated (default: none and one topk)."""
    if not values:
        return list(DEFAULT_SPECS)
    out = [s.strip() for v in values for s in v.split(";") if s.strip()]
    if not out:
        raise ValueError("--spec: no spec given")
    return out


def _args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", action="append", default=None,
                   help="a tp.Sender spec for tensorpress_mod(spec=...), or 'none' (no mod: np.save fp32 "
                        "Arrays); repeatable or ';'-separated (default: none and "
                        f"'{DEFAULT_SPECS[1]}')")
    p.add_argument("--seeds", type=int, default=1, help="seeds 1..N (every spec runs on each)")
    p.add_argument("--split", default="iid", choices=["iid", "dirichlet"])
    add_training_args(p)
    p.add_argument("--min-size", type=int, default=MIN_SIZE,
                   help="tensorpress_mod's min_size (1: every tensor, biases too, is compressed)")
    p.add_argument("--json", default=None, help="append a JSON line per run to this file")
    p.add_argument("--quiet", action="store_true", help="no per-round progress on stderr")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """The command line (see the module doc)."""
    a = _args(argv)
    specs = parse_specs(a.spec)
    if a.seeds <= 0:
        raise ValueError(f"--seeds must be positive, got {a.seeds}")
    if a.min_size < 0:
        raise ValueError(f"--min-size must be >= 0, got {a.min_size}")
    load_standin()
    if any(s != NONE for s in specs):
        load_adapter()  # fail before loading the data
    train, test = fl_data.load_fashion_mnist(a.data)
    recs: List[Dict[str, Any]] = []
    for seed in range(1, a.seeds + 1):
        for spec in specs:
            cfg = Config(a.clients, a.rounds, a.split, a.alpha, a.batch, a.lr, a.momentum, a.local_epochs,
                         a.train_limit, a.test_limit, a.eval_every, "none")
            rec = run_one(cfg, spec, seed, train, test, None if a.quiet else sys.stderr, a.min_size)
            recs.append(rec)
            how = (f"diverged in round {rec['diverged']}" if rec["diverged"]
                   else f"accuracy {100 * rec['accuracy']:.2f}%")
            print(f"fedavg_flower: {rec['row']} {a.split} seed {seed}: {how} up {_human(rec['up_bytes'])} "
                  f"{rec['seconds']:.1f} s", file=sys.stderr, flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(rec) + "\n")
    write_table(sys.stdout, recs)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, RuntimeError, OSError) as e:
        print(f"fedavg_flower: {e}", file=sys.stderr)
        sys.exit(1)
