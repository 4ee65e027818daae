#!/usr/bin/python3
"""FedAvg in numpy on Fashion-MNIST with the model served by a real
``tensorpress hub`` and the updates sent through pluggable uplink rows.

Every round the server publishes its model as a hub version; each client
fetches it (deltas against the version it holds), checks every tensor bit for
bit against the published arrays, trains one local epoch, and sends its
update ``w_local - w`` through the row's codec; the server adds the updates
weighted by shard size. The setup follows ``codec-bench fl`` (MLP
784-128-64-10, SGD lr 0.05 momentum 0.9, batch 64, 1 local epoch); see
README.md for the differences.

    /usr/bin/python3 python/bench/fedavg.py --rounds 20 --seeds 3 --json fedavg.jsonl --plot fedavg.svg
    /usr/bin/python3 python/bench/fedavg.py --table fedavg.jsonl      # the table again from the rows

Output: a JSON line per (row, split, seed) with the bytes up and down, the
accuracy per round and the times; a codec-bench-style table (mean and sample
sd over the seeds); an SVG plot (accuracy against round and against bytes up).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, TextIO

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import fl_data  # noqa: E402
import fl_model  # noqa: E402
from fl_downlink import CliFetcher, HubProcess, TpHubFetcher, build_tensorpress, check_digests  # noqa: E402
from fl_uplink import Row, default_rows, make_row, tensorpress_available  # noqa: E402


@dataclass
class Config:
    """One training setup (the row and the seed vary around it)."""

    clients: int = 8
    rounds: int = 20
    split: str = "iid"
    alpha: float = 0.5
    batch: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    local_epochs: int = 1
    train_limit: int = 0
    test_limit: int = 0
    eval_every: int = 1
    fetch: str = "cli"  # cli: tensorpress fetch; tp: tp.Hub; none: no hub (in-memory model)
    server_lr: float = 1.0  # the server steps glob += server_lr * (momentum buffer or the round's sum)
    server_momentum: float = 0.0  # FedAvgM: v = m * v + sum; 0: no buffer

    def validate(self) -> None:
        """Raise ValueError on a setting out of range."""
        checks = [(self.clients > 0, "clients"), (self.rounds > 0, "rounds"), (self.batch > 0, "batch"),
                  (self.lr > 0, "lr"), (0 <= self.momentum < 1, "momentum"), (self.local_epochs > 0, "local_epochs"),
                  (self.train_limit >= 0, "train_limit"), (self.test_limit >= 0, "test_limit"),
                  (self.eval_every > 0, "eval_every"), (self.split in ("iid", "dirichlet"), "split"),
                  (self.fetch in ("cli", "tp", "none"), "fetch"), (self.server_lr > 0, "server_lr"),
                  (0 <= self.server_momentum < 1, "server_momentum")]
        for ok, what in checks:
            if not ok:
                raise ValueError(f"config: {what} = {getattr(self, what)!r} is out of range")


class Timer:
    """Seconds spent per phase."""

    def __init__(self) -> None:
        self.s: Dict[str, float] = {}
        self._t = 0.0
        self._k = ""

    def __call__(self, key: str) -> "Timer":
        self._k = key
        return self

    def __enter__(self) -> None:
        self._t = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        self.s[self._k] = self.s.get(self._k, 0.0) + time.perf_counter() - self._t


class _Downlink:
    """The model's way to the clients: a hub process and a fetcher per client, or nothing."""

    def __init__(self, cfg: Config, binary: Optional[str], workdir: str) -> None:
        self.cfg, self.hub, self.fetchers = cfg, None, []
        if cfg.fetch == "none":
            return
        if binary is None:
            raise ValueError("the hub downlink needs the tensorpress binary")
        self.hub = HubProcess(binary, os.path.join(workdir, "hub"))
        for c in range(cfg.clients):
            if cfg.fetch == "tp":
                self.fetchers.append(TpHubFetcher(self.hub))
            else:
                self.fetchers.append(CliFetcher(binary, self.hub, os.path.join(workdir, f"client{c}")))

    def publish(self, version: int, params: fl_model.Params) -> Optional[Dict[str, str]]:
        return None if self.hub is None else self.hub.publish(version, params)

    def fetch(self, c: int, version: int, digests: Optional[Dict[str, str]],
              params: fl_model.Params) -> tuple:
        """Client ``c``'s copy of the model and the bytes it took (0 without a hub)."""
        if self.hub is None:
            return fl_model.copy_params(params), 0, 0
        f = self.fetchers[c].fetch(version)
        assert digests is not None
        check_digests(f.arrays, digests, f"client {c}, version {version}")
        return fl_model.copy_params(f.arrays), f.bytes_received, f.deltas

    def close(self) -> None:
        for f in self.fetchers:
            f.close()
        if self.hub is not None:
            self.hub.close()


class Diverged(Exception):
    """Local training produced a non-finite model: the run stops and is recorded as diverged."""


def _client_round(cfg: Config, c: int, local: fl_model.Params, glob: fl_model.Params, order: np.ndarray,
                  r: np.random.Generator, train: fl_data.Dataset, codec: Any, server: Any,
                  weight: float, acc: fl_model.Params, t: Timer) -> tuple:
    """Client ``c`` trains from ``local`` and sends its update; returns (loss sum, samples, bytes up)."""
    loss, seen = 0.0, 0
    with t("train"):
        for _ in range(cfg.local_epochs):
            r.shuffle(order)
            ls, n = fl_model.train_local(local, train, order, cfg.batch, cfg.lr, cfg.momentum)
            loss, seen = loss + ls, seen + n
    up = 0
    for name in fl_model.NAMES:
        update = local[name] - glob[name]
        if not np.isfinite(update).all():
            raise Diverged(f"client {c}: {name} is not finite after local training")
        with t("encode"):
            payload = codec.encode(name, update)
        up += len(payload)
        with t("decode"):
            server.add(name, payload, weight, acc[name])
    codec.commit()
    return loss, seen, up


def server_step(cfg: Config, glob: fl_model.Params, acc: fl_model.Params,
                vel: Optional[fl_model.Params]) -> None:
    """The server's step with the round's weighted sum ``acc``: plain FedAvg adds it; with
    ``server_momentum`` (FedAvgM) a buffer ``v = m * v + acc`` is added instead, times ``server_lr``."""
    for k in glob:
        step = acc[k]
        if vel is not None:
            vel[k] *= np.float32(cfg.server_momentum)
            vel[k] += step
            step = vel[k]
        if cfg.server_lr == 1.0:
            glob[k] += step
        else:
            glob[k] += np.float32(cfg.server_lr) * step


def run_one(cfg: Config, row: Row, seed: int, train: fl_data.Dataset, test: fl_data.Dataset,
            binary: Optional[str], workdir: str, progress: Optional[TextIO] = None) -> Dict[str, Any]:
    """Train ``cfg`` with ``row`` on ``seed``; the JSON record of the run."""
    cfg.validate()
    t0, t = time.perf_counter(), Timer()
    train, test = train.head(cfg.train_limit), test.head(cfg.test_limit)
    shards = fl_data.shards(train, cfg.clients, cfg.split, seed, cfg.alpha)
    orders = [s.copy() for s in shards]
    rngs = [fl_data.rng(seed, fl_data.STREAM_SHUFFLE, c) for c in range(cfg.clients)]
    glob = fl_model.init_params(seed)
    codecs = [row.new_client() for _ in range(cfg.clients)]
    server = row.new_server()
    down = _Downlink(cfg, binary, workdir)
    hist: List[Dict[str, Any]] = []
    up_total = down_total = deltas = 0
    diverged = 0
    vel = {k: np.zeros_like(v) for k, v in glob.items()} if cfg.server_momentum else None
    try:
        for rnd in range(cfg.rounds):
            with t("publish"):
                digests = down.publish(rnd + 1, glob)
            acc = {k: np.zeros_like(v) for k, v in glob.items()}
            loss = seen = 0
            for c in range(cfg.clients):
                with t("fetch"):
                    local, nb, nd = down.fetch(c, rnd + 1, digests, glob)
                down_total, deltas = down_total + nb, deltas + nd
                codecs[c].set_round(rnd)
                try:
                    ls, n, up = _client_round(cfg, c, local, glob, orders[c], rngs[c], train, codecs[c], server,
                                              shards[c].size / train.n, acc, t)
                except Diverged as e:
                    diverged = rnd + 1
                    if progress:
                        print(f"  {row.name} {cfg.split} seed {seed} round {rnd + 1}: diverged ({e})",
                              file=progress, flush=True)
                    break
                loss, seen, up_total = loss + ls, seen + n, up_total + up
            if diverged:
                hist.append({"round": rnd + 1, "loss": float("nan"), "up_bytes": up_total,
                             "down_bytes": down_total, "accuracy": float("nan")})
                break
            server_step(cfg, glob, acc, vel)
            point: Dict[str, Any] = {"round": rnd + 1, "loss": loss / seen, "up_bytes": up_total,
                                     "down_bytes": down_total}
            if (rnd + 1) % cfg.eval_every == 0 or rnd + 1 == cfg.rounds:
                with t("eval"):
                    point["accuracy"] = fl_model.accuracy(glob, test)
            hist.append(point)
            if progress:
                print(f"  {row.name} {cfg.split} seed {seed} round {rnd + 1}/{cfg.rounds}: "
                      f"acc {point.get('accuracy', float('nan')):.4f} up {up_total} down {down_total} "
                      f"({time.perf_counter() - t0:.1f}s)", file=progress, flush=True)
    finally:
        down.close()
        for cc in codecs:
            cc.close()
        server.close()
    raw = 4 * fl_model.NUM_PARAMS * cfg.clients * cfg.rounds
    return {"row": row.name, "family": row.family, "split": cfg.split, "seed": seed,
            "accuracy": hist[-1]["accuracy"], "diverged": diverged, "up_bytes": up_total,
            "down_bytes": down_total if cfg.fetch != "none" else None, "down_fp32_bytes": raw,
            "down_deltas": deltas, "seconds": time.perf_counter() - t0, "times": t.s,
            "seconds_per_round": (time.perf_counter() - t0) / len(hist), "history": hist,
            "shard_sizes": [int(s.size) for s in shards], "params": fl_model.NUM_PARAMS,
            "config": asdict(cfg), "blas": blas_name()}


def blas_name() -> str:
    """The BLAS library numpy has loaded (from /proc/self/maps), or 'unknown'."""
    try:
        with open("/proc/self/maps") as f:
            libs = {ln.split()[-1] for ln in f if "blas" in ln}
    except OSError:
        return "unknown"
    return ",".join(sorted(os.path.basename(x) for x in libs)) or "unknown"


def _mean_sd(v: List[float]) -> tuple:
    a = np.asarray(v, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def _human(b: Optional[float]) -> str:
    if b is None:
        return "-"
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b / k:.2f} {unit}" if unit != "KiB" else f"{b / k:.1f} {unit}"
    return f"{b:.0f} B"


def summarize(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per (split, row): mean and sd of accuracy, mean bytes, and ratios to the fp32 row of the split."""
    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["split"], r["row"]), []).append(r)
    out = []
    for (split, row), rs in groups.items():
        acc, sd = _mean_sd([r["accuracy"] for r in rs])
        up, _ = _mean_sd([r["up_bytes"] for r in rs])
        downs = [r["down_bytes"] for r in rs if r.get("down_bytes") is not None]
        down = _mean_sd(downs)[0] if downs else None
        out.append({"split": split, "row": row, "accuracy": acc, "accuracy_sd": sd, "up_bytes": up,
                    "down_bytes": down, "down_fp32_bytes": rs[0]["down_fp32_bytes"],
                    "seeds": sorted(r["seed"] for r in rs), "diverged": sum(1 for r in rs if r.get("diverged")),
                    "seconds_per_round": _mean_sd([r["seconds_per_round"] for r in rs])[0]})
    for s in out:
        base = next((b for b in out if b["split"] == s["split"] and b["row"] == "fp32"), None)
        s["baseline_accuracy"] = base["accuracy"] if base else None
        s["reduction"] = base["up_bytes"] / s["up_bytes"] if base and s["up_bytes"] else None
        s["down_reduction"] = s["down_fp32_bytes"] / s["down_bytes"] if s["down_bytes"] else None
    return out


def write_table(f: TextIO, summary: List[Dict[str, Any]]) -> None:
    """A codec-bench-style table: accuracy in percent (mean, sd), Δ fp32, bytes and reductions."""
    head = ["SPLIT", "ROW", "ACCURACY %", "SD", "Δ FP32", "UPSTREAM", "REDUCTION", "DOWNSTREAM",
            "DOWN VS FP32", "S/ROUND", "SEEDS"]
    rows = []
    for s in summary:
        delta = "-" if s["baseline_accuracy"] is None else f"{100 * (s['accuracy'] - s['baseline_accuracy']):+.2f}"
        red = "-" if s["reduction"] is None else f"{s['reduction']:.1f}x"
        dred = "-" if s["down_reduction"] is None else f"{s['down_reduction']:.2f}x"
        acc = f"{100 * s['accuracy']:.2f}"
        if s.get("diverged"):
            acc, delta = f"diverged in {s['diverged']} of {len(s['seeds'])}", "-"
        rows.append([s["split"], s["row"], acc, f"{100 * s['accuracy_sd']:.2f}", delta,
                     _human(s["up_bytes"]), red, _human(s["down_bytes"]), dred, f"{s['seconds_per_round']:.1f}",
                     str(len(s["seeds"]))])
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    for r in [head] + rows:
        f.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


def read_jsonl(path: str) -> List[Dict[str, Any]]:
    """The records of a JSON-lines file."""
    with open(path) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def add_training_args(p: argparse.ArgumentParser) -> None:
    """The training setup's options (Config's fields but the split and the fetch), and --data."""
    p.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--local-epochs", type=int, default=1)
    p.add_argument("--train-limit", type=int, default=0, help="first N training images (0: all 60000)")
    p.add_argument("--test-limit", type=int, default=0, help="first N test images (0: all 10000)")
    p.add_argument("--eval-every", type=int, default=1)
    p.add_argument("--data", default=fl_data.DEFAULT_DIR)


def _args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default=None, help="rows separated by ';' (fp32; fp16; int8; tp:SPEC; tpr:RECIPE); "
                   "default: the baselines, and the tensorpress rows when the package imports")
    p.add_argument("--seeds", type=int, default=3, help="seeds 1..N (every row runs on each)")
    p.add_argument("--split", default="iid", choices=["iid", "dirichlet", "both"])
    add_training_args(p)
    p.add_argument("--server-lr", type=float, default=1.0, help="server step size on the round's sum")
    p.add_argument("--server-momentum", type=float, default=0.0, help="server momentum (FedAvgM); 0: none")
    p.add_argument("--fetch", default="cli", choices=["cli", "tp", "none"],
                   help="clients fetch with the tensorpress fetch CLI, the package's tp.Hub, or no hub")
    p.add_argument("--tensorpress", default=os.environ.get("TENSORPRESS_BIN"),
                   help="the tensorpress binary (default $TENSORPRESS_BIN, else built with go build)")
    p.add_argument("--json", default=None, help="append a JSON line per run to this file")
    p.add_argument("--plot", default=None, help="write the SVG plot here")
    p.add_argument("--table", default=None, metavar="JSONL", help="print the table (and --plot) of a JSONL file")
    p.add_argument("--quiet", action="store_true", help="no per-round progress on stderr")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """The command line (see the module doc)."""
    a = _args(argv)
    import plot
    if a.table:
        recs = read_jsonl(a.table)
        write_table(sys.stdout, summarize(recs))
        if a.plot:
            plot.write_fedavg_svg(a.plot, recs)
        return 0
    rows = [make_row(r) for r in (a.rows.split(";") if a.rows else default_rows()) if r.strip()]
    if any(r.family == "tensorpress" for r in rows) and not tensorpress_available():
        raise RuntimeError("tensorpress rows need the tensorpress package: run `make python` and put python/ "
                           "on PYTHONPATH (or pip install ./python)")
    splits = ["iid", "dirichlet"] if a.split == "both" else [a.split]
    train, test = fl_data.load_fashion_mnist(a.data)
    recs: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fedavg-") as tmp:
        binary = a.tensorpress
        if a.fetch != "none" and not binary:
            binary = build_tensorpress(tmp)
        for seed in range(1, a.seeds + 1):
            for split in splits:
                for row in rows:
                    cfg = Config(a.clients, a.rounds, split, a.alpha, a.batch, a.lr, a.momentum, a.local_epochs,
                                 a.train_limit, a.test_limit, a.eval_every, a.fetch, a.server_lr,
                                 a.server_momentum)
                    work = tempfile.mkdtemp(dir=tmp)
                    rec = run_one(cfg, row, seed, train, test, binary, work, None if a.quiet else sys.stderr)
                    recs.append(rec)
                    how = (f"diverged in round {rec['diverged']}" if rec["diverged"]
                           else f"accuracy {100 * rec['accuracy']:.2f}%")
                    print(f"fedavg: {row.name} {split} seed {seed}: {how} "
                          f"up {_human(rec['up_bytes'])} down {_human(rec['down_bytes'])} "
                          f"{rec['seconds_per_round']:.1f} s/round", file=sys.stderr, flush=True)
                    if a.json:
                        with open(a.json, "a") as f:
                            f.write(json.dumps(rec) + "\n")
    write_table(sys.stdout, summarize(recs))
    if a.plot:
        plot.write_fedavg_svg(a.plot, recs)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, RuntimeError, OSError) as e:
        print(f"fedavg: {e}", file=sys.stderr)
        sys.exit(1)
