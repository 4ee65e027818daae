"""Safety and memory runs of the tensorpress Python package, each meant to run in its own process.

``fuzz``: N random and mutated frames through ``tp.decode``, ``tp.decode_all`` and
``Receiver.add``, and N/10 mutated error-feedback state images (trailing CRC re-sealed)
through ``Sender.load_state``, each followed by a compress with the loaded state. Seeds are the golden frames, fresh encodes and the malformed corpus;
mutations are bit flips, truncation, insertion and deletion, varint tweaks, frame splices
and duplicates, most of them *re-sealed*: the header CRC (over lead, hlen and header) and
the payload CRC are recomputed with a pure-Python CRC-32C, so that the mutation gets past
the checksums and reaches the parsers and decoders. Only :class:`tp.TensorpressError`
subclasses may escape, and not :class:`tp.InternalError` (a recovered panic is a bug too).
A crash of the interpreter is caught by the caller: the process must exit 0.

``memory``: after a warm-up that touches every path, M mixed calls (sizes 1 KiB to
4 MiB; encode, decode, Sender compress/commit/abort/state, Receiver add), then
``gc.collect()``, ``tp.release_memory()`` twice and ``malloc_trim(0)``: RSS (VmRSS) must be
back within ``--slack`` MiB of the start, and the library's live handles back to their count.

Usage (Debian's python3, which has numpy)::

    /usr/bin/python3 python/bench/safety_run.py fuzz --n 100000
    /usr/bin/python3 python/bench/safety_run.py memory --m 100000

``TP_FUZZ_N`` and ``TP_MEM_M`` give the defaults of ``--n`` and ``--m``. Each prints one
summary line (``key=value`` pairs) and exits 1 on a failed check.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import random
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # noqa: E402

import tensorpress as tp  # noqa: E402

GOLDEN = os.path.join(ROOT, "testvectors", "golden")
MALFORMED = os.path.join(ROOT, "testvectors", "malformed")

# ---------------------------------------------------------------- CRC-32C


def _table() -> List[int]:
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli), as hash/crc32 with crc32.Castagnoli computes it."""
    c = crc ^ 0xFFFFFFFF
    t = _T
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def uvarint(n: int) -> bytes:
    """n as a minimal uvarint."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(b: bytes, off: int, maxlen: int = 10) -> Optional[Tuple[int, int]]:
    """The uvarint at off and the offset after it, or None."""
    n = shift = 0
    for i in range(maxlen):
        if off + i >= len(b):
            return None
        x = b[off + i]
        n |= (x & 0x7F) << shift
        if x < 0x80:
            return n, off + i + 1
        shift += 7
    return None


# ---------------------------------------------------------------- frames


class Frame:
    """One frame of a seed: lead byte, header, payload and whether a payload CRC follows."""

    __slots__ = ("lead", "header", "payload")

    def __init__(self, lead: int, header: bytes, payload: bytes) -> None:
        self.lead, self.header, self.payload = lead, header, payload

    def seal(self) -> bytes:
        """The frame with hlen, hcrc and pcrc recomputed."""
        head = bytes([self.lead]) + uvarint(len(self.header)) + self.header
        out = head + crc32c(head).to_bytes(4, "little") + self.payload
        if self.lead & 0x10:
            out += crc32c(self.payload).to_bytes(4, "little")
        return out


def _envelope(b: bytes, off: int) -> Optional[Tuple[int, bytes, int]]:
    """(lead, header, offset after hcrc) when a version-1 envelope with a matching hcrc is at off."""
    if off >= len(b) or b[off] >> 5 != 1:
        return None
    v = read_uvarint(b, off + 1, 4)
    if v is None:
        return None
    hlen, hs = v
    he = hs + hlen
    if hlen > 1 << 20 or he + 4 > len(b):
        return None
    if crc32c(b[off:he]) != int.from_bytes(b[he:he + 4], "little"):
        return None
    return b[off], b[hs:he], he + 4


def split_frames(b: bytes) -> Optional[List[Frame]]:
    """The frames of b, found from their CRCs (payload lengths are not parsed), or None."""
    frames: List[Frame] = []
    off = 0
    while off < len(b):
        env = _envelope(b, off)
        if env is None:
            return None
        lead, header, ps = env
        end = _payload_end(b, ps, bool(lead & 0x10))
        if end is None:
            return None
        pe, off = end
        frames.append(Frame(lead, header, b[ps:pe]))
    return frames


def _payload_end(b: bytes, ps: int, pcrc: bool) -> Optional[Tuple[int, int]]:
    """(payload end, next frame start): the first end where a matching pcrc (if any) is followed
    by the end of b or by another envelope."""
    c = 0xFFFFFFFF
    t = _T
    for e in range(ps, len(b) + 1):
        if e > ps:
            c = t[(c ^ b[e - 1]) & 0xFF] ^ (c >> 8)
        nxt = e
        if pcrc:
            if e + 4 > len(b) or (c ^ 0xFFFFFFFF) != int.from_bytes(b[e:e + 4], "little"):
                continue
            nxt = e + 4
        if nxt == len(b) or _envelope(b, nxt) is not None:
            return e, nxt
    return None


# ---------------------------------------------------------------- seeds and mutations


def seeds(rng: np.random.Generator) -> List[Tuple[str, bytes]]:
    """Golden frames, fresh encodes of several recipes and gradient compressors, malformed inputs."""
    out: List[Tuple[str, bytes]] = []
    for d in (GOLDEN, MALFORMED):
        for f in sorted(os.listdir(d)):
            if f.endswith((".tpf", ".bin")):
                with open(os.path.join(d, f), "rb") as fh:
                    out.append((f, fh.read()))
    x = rng.normal(0, 0.02, (16, 64)).astype(np.float32)
    for r in ["", "shuffle4 | plane3:huff0", "*:zstd(1)", "int8(64) | q:huff0", "fp16", "nf4(64)",
              "bf16", "topk(0.1)", "*:s2"]:
        try:
            out.append((f"encode {r!r}", tp.encode(x, recipe=r or None, name="w")))
        except tp.TensorpressError:
            pass
    out.append(("encode i64", tp.encode(np.arange(300, dtype=np.int64), name="i", recipe="*:zstd(3)")))
    out.append(("two tensors", tp.encode(x[:4], name="a") + tp.encode(x[4:], name="b", recipe="fp16")))
    out.append(("bytes", tp.encode_bytes(b"tensorpress " * 50, recipe="*:zstd(1)")))
    for spec in ["topk(0.05)", "int8(64)", "dgc(0.1) | val:fp16 | *:huff0", "qsgd(4)"]:
        try:
            with tp.Sender(spec) as s:
                out.append((f"sender {spec}", s.compress("w", x)))
                s.commit()
        except tp.TensorpressError:
            pass
    return out


def _rand_bytes(r: random.Random, n: int) -> bytes:
    return bytes(r.getrandbits(8) for _ in range(n))


def mutate_raw(r: random.Random, b: bytes) -> bytes:
    """A mutation of the bytes, CRCs left as they are."""
    k = r.randrange(5)
    if not b:
        return _rand_bytes(r, r.randrange(1, 64))
    if k == 0:  # bit flips
        a = bytearray(b)
        for _ in range(r.randrange(1, 5)):
            i = r.randrange(len(a))
            a[i] ^= 1 << r.randrange(8)
        return bytes(a)
    if k == 1:  # truncation
        return b[: r.randrange(len(b))]
    if k == 2:  # insertion
        i = r.randrange(len(b) + 1)
        return b[:i] + _rand_bytes(r, r.randrange(1, 16)) + b[i:]
    if k == 3:  # deletion
        i = r.randrange(len(b))
        return b[:i] + b[i + r.randrange(1, 16):]
    return _rand_bytes(r, r.randrange(1, 256))


def _mutate_part(r: random.Random, p: bytes) -> bytes:
    """A mutation of a header or payload, varint tweaks included."""
    if not p:
        return _rand_bytes(r, r.randrange(1, 8))
    k = r.randrange(6)
    a = bytearray(p)
    i = r.randrange(len(a))
    if k == 0:
        a[i] ^= 1 << r.randrange(8)
    elif k == 1:  # a varint-ish tweak: a byte nudged, a continuation bit set or cleared
        a[i] = (a[i] + r.choice([-1, 1, 2, 0x80, -0x80])) & 0xFF
    elif k == 2:
        a[i] = r.choice([0, 0x7F, 0x80, 0xFF, 0x01])
    elif k == 3:
        return p[:i] + _rand_bytes(r, r.randrange(1, 8)) + p[i:]
    elif k == 4:
        return p[:i] + p[i + r.randrange(1, 8):]
    else:
        return p[:i]
    return bytes(a)


def mutate_sealed(r: random.Random, frames: List[Frame], pool: List[List[Frame]]) -> bytes:
    """A structural mutation of parsed frames, re-sealed so that every CRC matches."""
    fs = [Frame(f.lead, f.header, f.payload) for f in frames]
    k = r.randrange(8)
    f = r.choice(fs)
    if k <= 2:
        f.header = _mutate_part(r, f.header)
    elif k <= 4:
        f.payload = _mutate_part(r, f.payload)
    elif k == 5:  # the lead: type, flags
        f.lead ^= r.choice([0x01, 0x02, 0x04, 0x08, 0x10])
    elif k == 6:  # a splice with another seed's frame, or a frame dropped or repeated
        other = r.choice(pool)
        j = r.randrange(len(fs) + 1)
        if other and r.random() < 0.5:
            fs.insert(j, r.choice(other))
        elif len(fs) > 1 and r.random() < 0.5:
            del fs[r.randrange(len(fs))]
        else:
            fs.insert(j, r.choice(fs))
    else:
        f.header = _mutate_part(r, f.header)
        f.payload = _mutate_part(r, f.payload)
    return b"".join(x.seal() for x in fs)


# ---------------------------------------------------------------- fuzz


def _targets(acc: Dict[str, np.ndarray]) -> List[Tuple[str, Callable[[bytes], object]]]:
    recv = tp.Receiver(limits=tp.Limits(max_decoded=64 << 20))
    one = np.zeros((16, 64), np.float32)

    def add_named(b: bytes) -> object:
        for a in acc.values():
            a.fill(0)
        return recv.add(b, 0.5, into=acc)

    def decode(b: bytes) -> object:
        try:
            return tp.decode(b)
        except ValueError as e:
            if isinstance(e, tp.TensorpressError) or "use decode_all" not in str(e):
                raise
            return None  # more than one tensor: decode_all's business

    return [("decode", decode), ("decode_all", tp.decode_all),
            ("receiver.add", lambda b: recv.add(b, 1.0, into=one)), ("receiver.add(named)", add_named)]


STATE_SPECS = ["topk(0.05)", "dgc(0.1)", "powersgd(2)", "int8(64)"]


def state_seeds(x: np.ndarray) -> List[Tuple[str, bytes]]:
    """Saved error-feedback states (FORMAT.md "Error-feedback memory image") of a few compressors."""
    out = []
    for spec in STATE_SPECS:
        try:
            with tp.Sender(spec) as s:
                for i in range(2):
                    s.compress("w", x * (i + 1))
                    s.compress("v", x[:4])
                    s.commit()
                out.append((f"state {spec}", s.state()))
        except tp.TensorpressError:
            pass
    return out


def mutate_state(r: random.Random, b: bytes) -> bytes:
    """A mutation of a state image, its trailing CRC-32C recomputed most of the time."""
    if r.random() < 0.2 or len(b) < 8:
        return mutate_raw(r, b)
    body = _mutate_part(r, b[:-4])
    return body + crc32c(body).to_bytes(4, "little")


def fuzz_state(n: int, r: random.Random, x: np.ndarray, counts: Dict[str, int]) -> Optional[str]:
    """n mutated state images through Sender.load_state, each loaded one then used: a failure's text, or None."""
    sd = state_seeds(x)
    senders = [tp.Sender(spec) for spec in STATE_SPECS]
    try:
        for i in range(n):
            name, b = sd[r.randrange(len(sd))]
            data = mutate_state(r, b)
            s = senders[i % len(senders)]
            try:
                s.load_state(data)
                s.compress("w", x)
                s.abort()
            except tp.InternalError as e:
                return f"load_state on a mutation of {name} (iteration {i}): internal error: {e}\ninput: {data.hex()}"
            except tp.TensorpressError as e:
                if s.pending:
                    s.abort()
                k = "state:" + type(e).__name__
                counts[k] = counts.get(k, 0) + 1
            except Exception as e:  # noqa: BLE001 -- anything else is the failure this run looks for
                return (f"load_state on a mutation of {name} (iteration {i}) raised {type(e).__name__}: {e}\n"
                        f"input: {data.hex()}")
    finally:
        for s in senders:
            s.close()
    return None


def fuzz(n: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    r = random.Random(seed)
    sd = seeds(rng)
    parsed = [p for p in (split_frames(b) for _, b in sd) if p]
    acc = {"w": np.zeros((16, 64), np.float32), "a": np.zeros((4, 64), np.float32),
           "b": np.zeros((12, 64), np.float32)}
    targets = _targets(acc)
    counts: Dict[str, int] = {}
    ok = sealed = 0
    t0 = time.perf_counter()
    for i in range(n):
        name, b = sd[r.randrange(len(sd))]
        fr = split_frames(b) if r.random() < 0.7 and len(b) <= 8192 else None
        if fr:
            data = mutate_sealed(r, fr, parsed)
            sealed += 1
        else:
            data = mutate_raw(r, b)
        tname, fn = targets[i % len(targets)]
        try:
            fn(data)
            ok += 1
        except tp.InternalError as e:
            print(f"FAIL: {tname} on a mutation of {name} (iteration {i}): internal error: {e}\n"
                  f"input: {data.hex()}", file=sys.stderr)
            return 1
        except tp.TensorpressError as e:
            k = type(e).__name__
            counts[k] = counts.get(k, 0) + 1
        except Exception as e:  # noqa: BLE001 -- anything else is the failure this run looks for
            print(f"FAIL: {tname} on a mutation of {name} (iteration {i}) raised {type(e).__name__}: {e}\n"
                  f"input: {data.hex()}", file=sys.stderr)
            return 1
    fail = fuzz_state(max(n // 10, 1), r, rng.normal(0, 0.02, (16, 64)).astype(np.float32), counts)
    if fail:
        print(f"FAIL: {fail}", file=sys.stderr)
        return 1
    dt = time.perf_counter() - t0
    errs = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    print(f"fuzz n={n} seeds={len(sd)} resealed={sealed} accepted={ok} seconds={dt:.1f} {errs} "
          f"live_handles={tp.live_handles()}")
    return 0


# ---------------------------------------------------------------- memory


def rss() -> int:
    """VmRSS of this process in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _trim() -> None:
    gc.collect()
    tp.release_memory()
    tp.release_memory()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


RECIPES = [None, "shuffle4 | plane3:huff0", "*:zstd(1)", "int8(4096) | q:huff0", "fp16"]
SPECS = ["topk(0.05)", "int8(4096)", "dgc(0.01) | val:fp16 | *:huff0"]
SIZES = [256, 4096, 64 << 10, 256 << 10, 1 << 20]  # elements of float32: 1 KiB to 4 MiB


def _mixed(i: int, r: random.Random, data: Dict[int, np.ndarray], sender: "tp.Sender",
           recv: "tp.Receiver", accs: Dict[int, np.ndarray]) -> None:
    """Call i of the mixed load."""
    n = SIZES[r.randrange(len(SIZES))] if i % 50 == 0 else SIZES[r.randrange(3)]
    x = data[n]
    k = i % 5
    if k == 0:
        tp.decode(tp.encode(x, recipe=RECIPES[r.randrange(len(RECIPES))], name="m"))
    elif k == 1:
        tp.decode_all(tp.encode(x, name="a") + tp.encode(x[:100], name="b", recipe="*:zstd(1)"))
    elif k == 2:
        f = sender.compress(f"g{n}", x)
        recv.add(f, 0.5, into=accs[n])
        if r.random() < 0.5:
            sender.commit()
        else:
            sender.abort()
    elif k == 3:
        if i % 500 == 3:
            sender.load_state(sender.state())
        else:
            tp.info(tp.encode(x, recipe="fp16"))
    else:
        with tp.Sender(SPECS[r.randrange(len(SPECS))]) as s:
            s.compress("t", data[256])
            s.commit()
            s.state()


def memory(m: int, seed: int, slack_mib: float) -> int:
    rng = np.random.default_rng(seed)
    r = random.Random(seed)
    data = {n: rng.normal(0, 0.02, n).astype(np.float32) for n in SIZES}
    accs = {n: np.zeros(n, np.float32) for n in SIZES}
    sender = tp.Sender(SPECS[0])
    recv = tp.Receiver()
    for i in range(2 * len(SIZES) * 5):  # warm-up: every path and size
        _mixed(i, r, data, sender, recv, accs)
    for n in SIZES:
        for rec in RECIPES:
            tp.decode(tp.encode(data[n], recipe=rec))
    for spec in SPECS:
        with tp.Sender(spec) as s:
            for n in SIZES:
                recv.add(s.compress(f"w{n}", data[n]), 1.0, into=accs[n])
            s.commit()
            s.load_state(s.state())
    _trim()
    start, handles = rss(), tp.live_handles()
    t0 = time.perf_counter()
    for i in range(m):
        _mixed(i, r, data, sender, recv, accs)
    dt = time.perf_counter() - t0
    gc.collect()
    tp.release_memory()
    tp.release_memory()
    before_trim = rss()
    _trim()
    end, end_handles = rss(), tp.live_handles()
    sender.close()
    recv.close()
    mib = 1 << 20
    print(f"memory m={m} seconds={dt:.1f} rss_start_mib={start / mib:.1f} "
          f"rss_before_trim_mib={before_trim / mib:.1f} rss_end_mib={end / mib:.1f} "
          f"delta_mib={(end - start) / mib:+.1f} live_handles_start={handles} live_handles_end={end_handles}")
    if end - start > slack_mib * mib:
        print(f"FAIL: RSS grew by {(end - start) / mib:.1f} MiB (allowed {slack_mib} MiB)", file=sys.stderr)
        return 1
    if end_handles != handles:
        print(f"FAIL: {end_handles} live handles, {handles} at the start", file=sys.stderr)
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fuzz", help="mutated frames through decode, decode_all and Receiver.add")
    f.add_argument("--n", type=int, default=int(os.environ.get("TP_FUZZ_N", "3000")))
    f.add_argument("--seed", type=int, default=int(os.environ.get("TP_FUZZ_SEED", "1")))
    mm = sub.add_parser("memory", help="RSS after mixed calls, back near the start")
    mm.add_argument("--m", type=int, default=int(os.environ.get("TP_MEM_M", "3000")))
    mm.add_argument("--seed", type=int, default=1)
    mm.add_argument("--slack", type=float, default=8.0, help="MiB of RSS growth allowed")
    a = ap.parse_args(argv)
    if a.cmd == "fuzz":
        return fuzz(a.n, a.seed)
    return memory(a.m, a.seed, a.slack)


if __name__ == "__main__":
    sys.exit(main())
