#!/usr/bin/python3
"""A Python gRPC peer of the proxy test: no tensorpress code, no protoc.

  peer.py server           serve demo.Tensors on 127.0.0.1 (port printed as "PORT n")
  peer.py client TARGET SIZES     call it through TARGET and print what it saw
  peer.py exchange TARGET W G R   send the bytes of files W (weights) and G
                                  (gradients) R times each, print "TIME s"

Methods (bytes in, bytes out, generic handlers):
  Echo    unary: the request back, its SHA-256 in the trailer "sha256"
  Stream  bidirectional: each request back, in order
  Slow    unary: waits while the call is active, then prints what ended
          it ("SLOW deadline" or "SLOW cancelled") on the server's stdout
"""
import hashlib
import sys
import threading
import time
from concurrent import futures

import grpc
import numpy as np

MAX = 300 << 20
OPTS = [("grpc.max_send_message_length", MAX), ("grpc.max_receive_message_length", MAX)]


def serve():
    def echo(req, ctx):
        ctx.set_trailing_metadata((("sha256", hashlib.sha256(req).hexdigest()),))
        return req

    def stream(reqs, ctx):
        for r in reqs:
            yield r

    def slow(req, ctx):
        had_deadline = ctx.time_remaining() is not None and ctx.time_remaining() < 60
        while ctx.is_active():
            time.sleep(0.01)
        print("SLOW", "deadline" if had_deadline else "cancelled", flush=True)
        return b""

    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Stream": grpc.stream_stream_rpc_method_handler(stream),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=OPTS)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("demo.Tensors", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print("PORT", port, flush=True)
    sys.stdin.read()  # until the test closes stdin
    server.stop(1)


def weights(nbytes, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(nbytes // 4) * 0.02).astype(np.float32).tobytes()


def client(target, sizes):
    ch = grpc.insecure_channel(target, options=OPTS)
    echo = ch.unary_unary("/demo.Tensors/Echo")
    stream = ch.stream_stream("/demo.Tensors/Stream")
    slow = ch.unary_unary("/demo.Tensors/Slow")
    for i, n in enumerate(sizes):
        req = weights(n, i)
        resp, call = echo.with_call(req, timeout=600)
        trailer = dict(call.trailing_metadata())
        ok = resp == req and trailer.get("sha256") == hashlib.sha256(req).hexdigest()
        print("ECHO", n, "ok" if ok else "MISMATCH", hashlib.sha256(resp).hexdigest(), flush=True)
    reqs = [weights(n, 100 + i) for i, n in enumerate([1024, 65536, 1 << 20, 3 << 20])]
    got = list(stream(iter(reqs), timeout=600))
    print("STREAM", len(got), "ok" if got == reqs else "MISMATCH", flush=True)
    try:
        slow(b"x", timeout=0.5)
        print("DEADLINE none", flush=True)
    except grpc.RpcError as e:
        print("DEADLINE", e.code().name, flush=True)
    fut = slow.future(b"x")
    time.sleep(0.5)
    fut.cancel()
    try:
        fut.result()
        print("CANCEL none", flush=True)
    except grpc.FutureCancelledError:
        print("CANCEL CANCELLED", flush=True)
    except grpc.RpcError as e:
        print("CANCEL", e.code().name, flush=True)
    time.sleep(0.5)  # the server's handler notices


def exchange(target, wfile, gfile, rounds):
    ch = grpc.insecure_channel(target, options=OPTS)
    echo = ch.unary_unary("/demo.Tensors/Echo")
    w, g = open(wfile, "rb").read(), open(gfile, "rb").read()
    echo(b"warm-up", timeout=60)
    t0 = time.perf_counter()
    for _ in range(rounds):
        for m in (w, g):
            if echo(m, timeout=600) != m:
                print("MISMATCH", flush=True)
                return
    print("TIME", time.perf_counter() - t0, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve()
    elif sys.argv[1] == "exchange":
        exchange(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        client(sys.argv[2], [int(s) for s in sys.argv[3].split(",")])
