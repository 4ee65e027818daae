#!/usr/bin/python3
"""A client process of ``codec-bench fed``'s Python rows (``py:dense``, ``py:SPEC``).

``codec-bench fed`` starts one per client with its configuration as JSON in the environment
variable ``CODEC_BENCH_FED_PY`` and reads what it prints on stdout: a ready line once the data
is loaded and the hub answered, then one line per round. It writes the start ("go") on stdin.
Every round the client waits for the round's version on the hub, fetches it with the package's
``tensorpress.Hub`` (as deltas against the version it holds; lossy where the row's hub serves a
lossy recipe), trains one local epoch of the numpy MLP on its shard (the indices the
coordinator wrote, the same shards as the Go clients'), and uploads ``w_local - w`` through
``Hub.upload`` with the row's compressor and a ``tensorpress.Sender``'s error feedback,
committed as the hub acknowledges each update. A round the hub closed before the update came
(``StateError``) leaves the update in the residual for the next round.

The link is the coordinator's: the hub address given is a relay that shapes the connection.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import fl_data  # noqa: E402
import fl_model  # noqa: E402

ENV = "CODEC_BENCH_FED_PY"


def _print(line: Dict[str, Any]) -> None:
    """Write one JSON line for the coordinator and flush it."""
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def await_version(hub: Any, v: int, poll: float = 0.01) -> None:
    """Block until the hub holds version ``v``, asking every ``poll`` seconds (over the link)."""
    while True:
        if any(x.version == v for x in hub.versions()):
            return
        time.sleep(poll)


def run(cfg: Dict[str, Any]) -> int:
    """Run the client described by ``cfg`` (see ``codec-bench fed``); the exit status."""
    import tensorpress as tp

    cid = int(cfg["id"])
    train, _ = fl_data.load_fashion_mnist(cfg["data"])
    shard = np.fromfile(cfg["shard"], dtype="<i4").astype(np.int64)
    if shard.size == 0 or shard.min() < 0 or shard.max() >= train.n:
        raise ValueError(f"client {cid}: shard file {cfg['shard']}: {shard.size} indices, want some in [0, {train.n})")
    spec: str = cfg.get("spec") or ""
    sender: Optional[Any] = tp.Sender(spec) if spec and spec != "none" else None
    hub = tp.Hub(cfg["addr"], timeout=600)
    hub.versions()  # connected
    _print({"ready": True, "round": 0})
    if sys.stdin.readline().strip() != "go":
        raise RuntimeError(f"client {cid}: no start on stdin")
    r = fl_data.rng(int(cfg["seed"]), fl_data.STREAM_SHUFFLE, cid)
    order = shard.copy()
    held: Optional[tp.Fetched] = None
    lossless = not cfg.get("lossy", False)
    within: Optional[float] = cfg.get("within") or None  # py:auto: rows: the autotuner's time for an upload
    for rnd in range(1, int(cfg["rounds"]) + 1):
        await_version(hub, rnd)
        t0 = time.monotonic()
        base = held if cfg.get("base", True) else None
        # The first version exactly, lossy deltas after it: the hub takes them from the copy a
        # client holds that followed the versions, so a copy that starts exact stays within a
        # delta's rounding of the model.
        glob = hub.fetch(rnd, base=base, require_lossless=lossless or (held is None and cfg.get("base", True)), retries=100)
        held = glob
        t1 = time.monotonic()
        local = fl_model.copy_params(dict(glob))
        loss, seen = 0.0, 0
        for _ in range(int(cfg.get("local_epochs", 1))):
            r.shuffle(order)
            ls, n = fl_model.train_local(local, train, order, int(cfg["batch"]), float(cfg["lr"]), float(cfg["momentum"]))
            loss, seen = loss + ls, seen + n
        update = {k: local[k] - glob[k] for k in glob}
        largest = max(update, key=lambda k: update[k].size)  # the tensor whose density is reported
        t2 = time.monotonic()
        if sender is not None:
            sender.set_epoch(float(rnd - 1))
        late, density, uplink = False, 0.0, 0.0
        try:
            res = hub.upload(update, spec if sender is None else None, round=rnd, weight=float(cfg["weight"]),
                             peer=f"client{cid}", sender=sender, within=within,
                             densities=cfg.get("densities") if within else None)
            up, uplink = res.bytes_sent, res.uplink
            density = res.densities.get(largest, 0.0)
        except tp.StateError:
            late, up = True, 0  # the round closed first: the sender keeps the update
        t3 = time.monotonic()
        _print({"round": rnd, "fetch_seconds": t1 - t0, "train_seconds": t2 - t1, "upload_seconds": t3 - t2,
                "bytes_down": 0, "bytes_up": 0, "grpc_bytes_up": up, "deltas": glob.deltas,
                "loss": loss / max(seen, 1), "late": late, "density": density, "uplink_estimate": uplink})
    hub.close()
    if sender is not None:
        sender.close()
    return 0


def main() -> int:
    """Read the configuration from the environment and run."""
    raw = os.environ.get(ENV)
    if not raw:
        sys.stderr.write(f"fed_client.py is started by `codec-bench fed` (rows py:...), with {ENV} set\n")
        return 2
    return run(json.loads(raw))


if __name__ == "__main__":
    sys.exit(main())
