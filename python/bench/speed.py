"""Speed of the tensorpress Python package against the Go library underneath it.

Three measurements, printed as a table:

1. Encode and decode of a 64 MiB float32 array, N(0, 0.02), for the recipes ByClass
   (no recipe: plane coding), ``*:zstd(1)`` and ``int8(4096) | q:huff0``. Python's
   ``encode_into`` / ``decode_into`` (reused buffers) are set against internal/cabi's
   ``BenchmarkEncode`` / ``BenchmarkDecode`` (``go test -bench``, run by this script in the
   same run: the Go side of the same calls, reused buffers, no ctypes), like with like;
   ``encode`` (fresh bytes) and ``decode`` (fresh array) against ``BenchmarkEncodeFresh`` /
   ``BenchmarkDecodeFresh`` (a new output buffer every call). Python
   figures are medians of ``--reps`` interleaved runs.
2. Per-call overhead: the median time of ``encode(np.ones(256, float32))`` (1 KiB) over
   ``--calls`` calls, beside Go's 1 KiB BenchmarkEncode.
3. Threads: two Python threads each encoding 16 MiB ``--thread-reps`` times against one
   thread doing the same total (ctypes releases the GIL); the target is 1.7x or more. Beside
   it, Go's own speed-up on the same machine: ``BenchmarkEncodeParallel`` at ``-cpu 1,2``.

The figures depend on the machine and on what else runs on it: a shared or busy machine
gives noisy numbers, and the thread speed-up needs two idle cores.

Usage: ``/usr/bin/python3 python/bench/speed.py [--quick] [--no-go]``
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # noqa: E402

import tensorpress as tp  # noqa: E402

RECIPES = ["", "*:zstd(1)", "int8(4096) | q:huff0"]
MiB = 1 << 20


def go_bench(benchtime: str, size: int) -> Dict[Tuple[str, int, str], float]:
    """ns/op of internal/cabi's BenchmarkEncode and BenchmarkDecode of size bytes, by (op, bytes, recipe)."""
    cmd = ["go", "test", "-run", "^$", "-bench", f"^Benchmark(Encode|Decode)(Fresh)?$/^{size}B$", "-benchtime", benchtime,
           "-count", "1", "./internal/cabi"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    out: Dict[Tuple[str, int, str], float] = {}
    pat = re.compile(r'^Benchmark(Encode|Decode)(Fresh)?/(\d+)B/"(.*)"-\d+\s+\d+\s+([\d.]+) ns/op')
    for line in r.stdout.splitlines():
        m = pat.match(line)
        if m:
            op = m.group(1).lower() + ("_fresh" if m.group(2) else "")
            out[(op, int(m.group(3)), m.group(4).replace("_", " "))] = float(m.group(5))
    return out


def go_parallel(benchtime: str) -> Optional[float]:
    """Go's own speed-up from a second core: BenchmarkEncodeParallel (16 MiB, *:zstd(1)) at -cpu 1,2."""
    cmd = ["go", "test", "-run", "^$", "-bench", "^BenchmarkEncodeParallel$", "-benchtime", benchtime,
           "-cpu", "1,2", "-count", "1", "./internal/cabi"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    ns = {int(m.group(1) or 1): float(m.group(2))
          for m in re.finditer(r"^BenchmarkEncodeParallel(?:-(\d+))?\s+\d+\s+([\d.]+) ns/op", r.stdout, re.M)}
    return ns[1] / ns[2] if 1 in ns and 2 in ns else None


def median_time(fns: List[Callable[[], object]], reps: int) -> List[float]:
    """Median seconds of each function, runs interleaved (one of each per round)."""
    times: List[List[float]] = [[] for _ in fns]
    for _ in range(reps):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def big(reps: int, n: int) -> List[Tuple[str, float, float, float, float, int]]:
    """(recipe, encode, encode_into, decode, decode_into seconds, frame bytes) per recipe."""
    x = np.random.default_rng(1).normal(0, 0.02, n).astype(np.float32)
    rows = []
    for rec in RECIPES:
        r = rec or None
        frame = tp.encode(x, recipe=r, name="w")
        out = bytearray(len(frame) + x.nbytes // 64 + (1 << 20))
        y = np.empty_like(x)
        tp.encode_into(x, out, recipe=r, name="w")  # warm-up
        tp.decode_into(frame, y)
        e, ei, d, di = median_time([
            lambda: tp.encode(x, recipe=r, name="w"),
            lambda: tp.encode_into(x, out, recipe=r, name="w"),
            lambda: tp.decode(frame),
            lambda: tp.decode_into(frame, y),
        ], reps)
        rows.append((rec, e, ei, d, di, len(frame)))
    return rows


def per_call(calls: int, x: np.ndarray, name: str = "") -> float:
    """Median seconds of one encode of x named name (ByClass)."""
    for _ in range(1000):
        tp.encode(x, name=name)
    ts = []
    pc = time.perf_counter_ns
    for _ in range(calls):
        t0 = pc()
        tp.encode(x, name=name)
        ts.append(pc() - t0)
    return statistics.median(ts) * 1e-9


def threads(reps: int, recipe: str) -> Tuple[float, float]:
    """Seconds for one thread encoding 16 MiB 2*reps times, and for two threads reps times each."""
    x = np.random.default_rng(2).normal(0, 0.02, 4 * MiB).astype(np.float32)
    cap = x.nbytes + x.nbytes // 64 + MiB

    def work(k: int) -> None:
        out = bytearray(cap)
        for _ in range(k):
            tp.encode_into(x, out, recipe=recipe)

    def two() -> None:
        ts = [threading.Thread(target=work, args=(reps,)) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    work(2)
    two()  # warm-up of both threads' paths
    one_t, two_t = median_time([lambda: work(2 * reps), two], 3)
    return one_t, two_t


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts (a smoke run, figures meaningless)")
    ap.add_argument("--no-go", action="store_true", help="skip go test -bench")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--thread-reps", type=int, default=8)
    ap.add_argument("--thread-recipe", default="*:zstd(1)")
    a = ap.parse_args(argv)
    n = 16 * MiB  # float32 elements: 64 MiB
    if a.quick:
        a.reps, a.calls, a.thread_reps, n = 1, 2000, 1, MiB
    print(f"libtensorpress {tp.version()}, numpy {np.__version__}, Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs (figures are noisy on a shared machine)")
    gb: Dict[Tuple[str, int, str], float] = {}
    go_two: Optional[float] = None
    if not a.no_go and not a.quick:
        gb = {**go_bench("5x", 4 * 16 * MiB), **go_bench("20000x", 1024)}
        go_two = go_parallel(f"{2 * a.thread_reps}x")
    rows = big(a.reps, n)
    size = 4 * n
    print(f"\n{size // MiB} MiB float32 N(0, 0.02), medians of {a.reps} (MB/s = 1e6 bytes of array per s)")
    print(f"{'recipe':<22}{'ratio':>6}  {'encode':>7}{'Go new':>7}{'py/Go':>6}  {'enc_into':>8}{'Go enc':>7}{'py/Go':>6}"
          f"  {'decode':>7}{'Go new':>7}{'py/Go':>6}  {'dec_into':>8}{'Go dec':>7}{'py/Go':>6}")

    def mbs(s: Optional[float]) -> str:
        return f"{size / s / 1e6:7.0f}" if s else f"{'-':>7}"

    def ratio(go_ns: Optional[float], py_s: float) -> str:
        return f"{go_ns * 1e-9 / py_s:6.2f}" if go_ns else f"{'-':>6}"

    for rec, e, ei, d, di, fl in rows:
        g = {op: gb.get((op, size, rec)) for op in ("encode", "encode_fresh", "decode", "decode_fresh")}
        sec = {op: (v * 1e-9 if v else None) for op, v in g.items()}
        print(f"{rec or '(ByClass)':<22}{size / fl:6.2f}  {mbs(e)}{mbs(sec['encode_fresh'])}{ratio(g['encode_fresh'], e)}"
              f"  {mbs(ei):>8}{mbs(sec['encode'])}{ratio(g['encode'], ei)}"
              f"  {mbs(d)}{mbs(sec['decode_fresh'])}{ratio(g['decode_fresh'], d)}"
              f"  {mbs(di):>8}{mbs(sec['decode'])}{ratio(g['decode'], di)}")
    print("py/Go: Go seconds / Python seconds (1.0 = no overhead). encode/decode return new bytes/arrays, set\n"
          "against Go calls with a new output buffer each time ('Go new': BenchmarkEncodeFresh/DecodeFresh);\n"
          "enc_into/dec_into reuse buffers, against BenchmarkEncode/BenchmarkDecode.")
    ones = per_call(a.calls, np.ones(256, np.float32))
    normal = per_call(a.calls, np.random.default_rng(3).normal(0, 0.02, 256).astype(np.float32), "w")
    g1 = gb.get(("encode", 1024, ""))
    print(f"\n1 KiB encode (256 float32, ByClass), median of {a.calls} calls: np.ones {ones * 1e6:.2f} us, "
          f"N(0, 0.02) named 'w' {normal * 1e6:.2f} us" + (f"; Go alone (the same, mean) {g1 / 1e3:.2f} us, "
                                                            f"so the Python overhead of a call is "
                                                            f"{normal * 1e6 - g1 / 1e3:.2f} us (target <= 20)"
                                                            if g1 else ""))
    one_t, two_t = threads(a.thread_reps, a.thread_recipe)
    print(f"\nthreads ({a.thread_recipe!r}, 16 MiB x {2 * a.thread_reps}): one thread {one_t:.3f} s, "
          f"two threads {two_t:.3f} s, speed-up {one_t / two_t:.2f}x (target >= 1.7x)"
          + (f"; Go's own, two goroutines against one (-cpu 1,2): {go_two:.2f}x" if go_two else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
