#!/usr/bin/env python3
"""The torch side of the GPU benchmarks (gpu/bench/run.sh runs it beside
the Go test binary, in the same session on the same GPU).

Each line: name, median milliseconds over --runs timed runs (CUDA events,
after warm-ups), and GB/s counting the bytes the operation must move.
The inputs are 100M float32 N(0, 1) (--n), as in the Go benchmarks.
"""
import argparse
import statistics

import torch


def timed(fn, runs, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000_000)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    n, runs = args.n, args.runs
    dev = torch.device("cuda")
    torch.manual_seed(1)
    x = torch.randn(n, device=dev, dtype=torch.float32)
    res = torch.randn(n, device=dev) * 0.1
    u = torch.randn(n, device=dev) * 0.1
    out = torch.empty_like(x)
    nbytes = 4 * n
    print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}, n {n}")

    def report(name, ms, moved):
        print(f"torch {name:<28} {ms:9.3f} ms {moved / ms / 1e6:9.1f} GB/s")

    copy_ms = timed(lambda: out.copy_(x), runs)
    report("copy d2d", copy_ms, 2 * nbytes)
    for r in (0.001, 0.01):
        k = int(n * r)
        report(f"topk {r:g}", timed(lambda: torch.topk(x.abs(), k, sorted=False), runs), nbytes)

    # DGC's sampled threshold (the reference's strided sample, 1%),
    # then the selection by it: what tp's sampled selection replaces.
    k = int(n * 0.001)
    stride = n // (n // 100)

    def sampled():
        smp = x[::stride].abs()
        t = torch.topk(smp, max(1, k * smp.numel() // n), sorted=False)[0].min()
        return torch.nonzero(x.abs() >= t).squeeze(1)

    report("dgc sampled 0.001", timed(sampled, runs), nbytes)

    def compensate():
        u.mul_(0.9).add_(x)
        res.add_(u)
    report("dgc compensate (unfused)", timed(compensate, runs), 5 * nbytes)

    report("fp16 cast", timed(lambda: x.half(), runs), nbytes + nbytes // 2)
    report("bf16 cast", timed(lambda: x.bfloat16(), runs), nbytes + nbytes // 2)

    B = 4096
    m = n // B * B

    def int8():
        xb = x[:m].view(-1, B)
        s = xb.abs().amax(dim=1, keepdim=True)
        return torch.round(xb * (127.0 / s)).clamp_(-127, 127).to(torch.int8), s

    report("int8 blockwise (unfused)", timed(int8, runs), nbytes + nbytes // 4)

    pinned = torch.empty(n, dtype=torch.float32, pin_memory=True)
    report("copy h2d pinned", timed(lambda: x.copy_(pinned, non_blocking=True), runs), nbytes)
    report("copy d2h pinned", timed(lambda: pinned.copy_(x, non_blocking=True), runs), nbytes)


if __name__ == "__main__":
    main()
