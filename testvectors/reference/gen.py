#!/usr/bin/python3
"""Generate reference test vectors with real implementations (numpy, torch).

Run from the repository root:

    /usr/bin/python3 testvectors/reference/gen.py            # everything
    /usr/bin/python3 testvectors/reference/gen.py npy fp     # only some parts

Parts: npy, fp, model, quant (quant reads model/weights/fc1.weight.npy, so
"model" must have been generated first; running everything does that).
All output is deterministic: fixed seeds, no timestamps.  See README.md.
"""

import gzip
import hashlib
import io
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FASHION_DIR = "/usr/share/datasets/fashion-mnist"


def out_path(*parts):
    p = os.path.join(HERE, *parts)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def save(arr, *parts):
    """np.save, after checking the array is little-endian (or byte-sized) and C order."""
    arr = np.asarray(arr)
    assert arr.dtype.byteorder in ("<", "|", "=") and sys.byteorder == "little", arr.dtype
    arr = np.ascontiguousarray(arr)
    np.save(out_path(*parts), arr, allow_pickle=False)
    return arr


def write_bytes(data, *parts):
    with open(out_path(*parts), "wb") as f:
        f.write(data)


def npy_bytes(arr, version=None, allow_pickle=False):
    buf = io.BytesIO()
    if version is None:
        np.save(buf, arr, allow_pickle=allow_pickle)
    else:
        np.lib.format.write_array(buf, arr, version=version, allow_pickle=allow_pickle)
    return buf.getvalue()


def shape_str(shape):
    if len(shape) == 0:
        return "scalar"
    return "x".join(str(d) for d in shape)


def f32_from_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


# --------------------------------------------------------------------------
# npy/
# --------------------------------------------------------------------------

def gen_npy():
    ok = []       # (name, array, bytes)
    bad = []      # (name, bytes, reason)

    def add_ok(name, arr, version=None):
        ok.append((name, arr, npy_bytes(arr, version=version)))

    # Floats: shape (3, 4); negative values, +-0, NaN, +-Inf.
    fvals = [0.0, -0.0, 1.0, -1.5, 3.140625, -2.75e-3, 1e4, -6.5e4,
             np.nan, np.inf, -np.inf, 0.1]
    add_ok("f2_3x4.npy", np.array(fvals, dtype="<f2").reshape(3, 4))
    fvals32 = list(fvals)
    fvals32[6] = 1e30
    fvals32[11] = 1.0e-40  # float32 subnormal
    add_ok("f4_3x4.npy", np.array(fvals32, dtype="<f4").reshape(3, 4))
    fvals64 = list(fvals)
    fvals64[6] = 1e300
    fvals64[11] = 5e-324  # smallest float64 subnormal
    add_ok("f8_3x4.npy", np.array(fvals64, dtype="<f8").reshape(3, 4))
    # float32 also as (2,3,4), the common layout in tests.
    f4_234 = (np.arange(24, dtype=np.float32) - 11.5) * np.float32(0.25)
    f4_234[3] = np.nan
    f4_234[7] = -np.inf
    f4_234[17] = np.inf
    add_ok("f4_2x3x4.npy", f4_234.reshape(2, 3, 4))

    # Integers: shape (2, 3, 4); min, max, -1, 0, 1 and a ramp.
    for code in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"):
        dt = np.dtype("<" + code)
        info = np.iinfo(dt)
        vals = [info.min, info.max, 0, 1, info.max - 1, info.min + 1]
        if info.min < 0:
            vals += [-1, -2]
        else:
            vals += [2, 3]
        ramp_len = 24 - len(vals)
        step = max(1, int(info.max) // 97)
        for i in range(ramp_len):
            v = (i * step * 7) % (int(info.max) + 1)
            if info.min < 0 and i % 2 == 1:
                v = -v
            vals.append(v)
        arr = np.array(vals, dtype=object).astype(dt).reshape(2, 3, 4)
        add_ok(code + "_2x3x4.npy", arr)

    b = np.array([True, False, False, True, True, True,
                  False, False, True, False, True, False], dtype="|b1").reshape(3, 4)
    add_ok("b1_3x4.npy", b)

    # 0-d scalar.
    add_ok("f8_scalar.npy", np.array(-2.5, dtype="<f8"))
    add_ok("i4_scalar.npy", np.array(-123456, dtype="<i4"))
    # Empty arrays.
    add_ok("f4_empty_0.npy", np.zeros((0,), dtype="<f4"))
    add_ok("i4_empty_2x0x3.npy", np.zeros((2, 0, 3), dtype="<i4"))
    # Large 1-d float32.
    rng = np.random.default_rng(1234)
    add_ok("f4_100000.npy", rng.standard_normal(100000).astype("<f4"))
    # Explicit header versions.
    v_arr = (np.arange(15, dtype="<f4") * np.float32(-0.5)).reshape(3, 5)
    add_ok("f4_3x5_v1.npy", v_arr, version=(1, 0))
    add_ok("f4_3x5_v2.npy", v_arr, version=(2, 0))
    add_ok("i2_3x5_v3.npy", (np.arange(15, dtype="<i2") - 7).reshape(3, 5), version=(3, 0))

    # ---- files that must be refused ----
    bad.append(("refuse_bigendian_f4.npy",
                npy_bytes(np.arange(6, dtype=">f4").reshape(2, 3)),
                "big-endian dtype >f4"))
    fo = np.asfortranarray(np.arange(15, dtype="<f4").reshape(3, 5))
    fob = npy_bytes(fo)
    assert b"'fortran_order': True" in fob
    bad.append(("refuse_fortran_3x5.npy", fob, "fortran_order True"))
    obj = np.array([1, "two", None, 3.5], dtype=object)
    bad.append(("refuse_object.npy", npy_bytes(obj, allow_pickle=True),
                "object dtype (pickle)"))
    st = np.zeros(3, dtype=[("a", "<i4"), ("b", "<f4")])
    st["a"] = [1, 2, 3]
    st["b"] = [0.5, -1.0, 2.0]
    bad.append(("refuse_structured.npy", npy_bytes(st), "structured dtype"))
    bad.append(("refuse_complex64.npy",
                npy_bytes(np.array([1 + 2j, -3.5j, 4], dtype="<c8")),
                "complex64 dtype <c8"))
    bad.append(("refuse_unicode_U5.npy",
                npy_bytes(np.array(["ab", "hello", ""], dtype="<U5")),
                "unicode string dtype <U5"))
    full = npy_bytes(f4_234.reshape(2, 3, 4))
    hlen = struct.unpack("<H", full[8:10])[0]
    data_start = 10 + hlen
    assert len(full) == data_start + 96
    bad.append(("refuse_truncated_data.npy", full[:data_start + 50],
                "truncated in data (50 of 96 data bytes)"))
    bad.append(("refuse_truncated_header.npy", full[:40],
                "truncated in header (40 bytes)"))

    lines = []
    for name, arr, data in ok:
        write_bytes(data, "npy", name)
        # Self-check: numpy reads it back identically.
        back = np.load(out_path("npy", name), allow_pickle=False)
        assert back.dtype == arr.dtype and back.shape == arr.shape
        assert back.tobytes() == np.ascontiguousarray(arr).tobytes()
        sha = hashlib.sha256(np.ascontiguousarray(arr).tobytes(order="C")).hexdigest()
        lines.append("\t".join([name, "ok", arr.dtype.str, shape_str(arr.shape), sha]))
    for name, data, reason in bad:
        write_bytes(data, "npy", name)
        lines.append("\t".join([name, "error", reason]))
    with open(out_path("npy", "MANIFEST.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("npy: %d ok, %d refuse" % (len(ok), len(bad)))


# --------------------------------------------------------------------------
# fp/
# --------------------------------------------------------------------------

def _f32_bits(v):
    return int(np.float32(v).view(np.uint32))


def _next_up(bits):
    """Bits of the next float32 towards +Inf (for finite values)."""
    return int(np.nextafter(np.uint32(bits).view(np.float32), np.float32(np.inf)).view(np.uint32))


def _next_down(bits):
    return int(np.nextafter(np.uint32(bits).view(np.float32), np.float32(-np.inf)).view(np.uint32))


def fp_inputs():
    """Return (bits uint32 array, list of (start, count, description))."""
    groups = []

    def group(desc, bits):
        groups.append((desc, [int(b) & 0xFFFFFFFF for b in bits]))

    group("+0, -0, +Inf, -Inf", [0x00000000, 0x80000000, 0x7F800000, 0xFF800000])
    group("quiet NaNs, both signs, various payloads",
          [0x7FC00000, 0xFFC00000, 0x7FC00001, 0xFFC00001, 0x7FFFFFFF, 0xFFFFFFFF,
           0x7FD55555, 0xFFEAAAAA, 0x7FC12345, 0x7FE00000, 0x7FC0FFFF, 0x7FFF8000,
           0xFFFF8000, 0x7FC02000, 0x7FC01000, 0xFFC0FFFF])
    group("signalling NaNs, both signs, various payloads",
          [0x7F800001, 0xFF800001, 0x7FA00000, 0xFFA00000, 0x7F80FFFF, 0x7F808000,
           0x7F810000, 0xFFBFFFFF, 0x7FBFFFFF, 0x7F802000, 0x7F801FFF, 0x7F812345,
           0xFF812345, 0x7F8FE000, 0x7F800100, 0xFF80FFFF])
    group("float32 subnormals (and the float32 min normal)",
          [0x00000001, 0x80000001, 0x00000002, 0x007FFFFF, 0x807FFFFF, 0x00400000,
           0x80400000, 0x00008000, 0x00018000, 0x00007FFF, 0x00008001, 0x007F8000,
           0x807F8000, 0x00800000, 0x80800000, 0x007FFFFE])
    # float16 limits, each with its float32 neighbours, both signs.
    f16_points = [65504.0, 65520.0, 65536.0, 65488.0, 65512.0, 65472.0, 1e5,
                  2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -26,
                  2.0 ** -14 - 2.0 ** -25, 2.0 ** -14 - 2.0 ** -24, 2.0 ** -14 + 2.0 ** -24,
                  1e-8, 5.960464477539063e-08, 6.097555160522461e-05]
    b = []
    for v in f16_points:
        c = _f32_bits(v)
        for x in (_next_down(c), c, _next_up(c)):
            b += [x, x | 0x80000000]
    group("float16 limits and their float32 neighbours (+/-): 65504, 65520, 65536, "
          "65488, 65512, 65472, 1e5, 2^-14, 2^-24, 2^-25, 3*2^-25, 2^-26, "
          "2^-14-2^-25, 2^-14-2^-24, 2^-14+2^-24, 1e-8, ~2^-24, ~2^-14", b)
    # Exact halfway cases between adjacent float16 values (positive finite h,
    # h+1), with float32 neighbours, both signs.
    rng = np.random.default_rng(11)
    hs = [0x3C00, 0x3C01, 0x0000, 0x0001, 0x0002, 0x03FE, 0x03FF, 0x0400, 0x0401,
          0x3BFF, 0x7BFE, 0x4248, 0x5000, 0x5001]
    hs += [int(v) for v in rng.integers(0, 0x7BFF, size=34)]
    b = []
    for h in hs:
        lo = float(np.uint16(h).view(np.float16))
        hi = float(np.uint16(h + 1).view(np.float16))
        mid = np.float32((lo + hi) / 2)
        assert float(mid) == (lo + hi) / 2
        c = int(mid.view(np.uint32))
        for x in (_next_down(c), c, _next_up(c)):
            b += [x, x | 0x80000000]
    group("float16 ties: exact midpoints between adjacent float16 values (both parities) "
          "and their float32 neighbours, +/-", b)
    bs = [0x3F80, 0x3F81, 0x0000, 0x0001, 0x007F, 0x0080, 0x7F7E, 0x3FFF, 0x4049,
          0x4000, 0x4001, 0x0100]
    bs += [int(v) for v in rng.integers(0, 0x7F7F, size=36)]
    b = []
    for h in bs:
        for low in (0x7FFF, 0x8000, 0x8001):
            x = (h << 16) | low
            b += [x, x | 0x80000000]
    group("bfloat16 ties: bf16 pattern h with low half 0x7FFF / 0x8000 (exact midpoint) / "
          "0x8001, +/-", b)
    b = []
    for x in (0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7FFFFF, 0x7F7EFFFF,
              0x7F7E8000, 0x7F7E7FFF, _f32_bits(3.3895e38), _f32_bits(3.39e38),
              _f32_bits(3.3895314e38), _f32_bits(3.4e38)):
        b += [x, x | 0x80000000]
    group("bfloat16 overflow boundary (max bf16 0x7F7F = 3.3895314e38), +/-", b)
    rng = np.random.default_rng(12)
    u = rng.integers(0, 2 ** 32, size=4096, dtype=np.uint64).astype(np.uint32)
    nan = ((u & 0x7F800000) == 0x7F800000) & ((u & 0x007FFFFF) != 0)
    u[nan] ^= np.uint32(0x40000000)
    group("4096 random float32 bit patterns (non-NaN; NaN draws had bit 30 flipped)", u)
    rng = np.random.default_rng(13)
    z = rng.standard_normal(4096)
    e = rng.integers(-36, 21, size=4096)
    v = (z * np.exp2(e.astype(np.float64))).astype(np.float32)
    group("4096 values N(0,1) * 2^k, k uniform in [-36, 20]", v.view(np.uint32))

    allbits = []
    ranges = []
    for desc, bl in groups:
        ranges.append((len(allbits), len(bl), desc))
        allbits += bl
    return np.array(allbits, dtype=np.uint32), ranges


def _is_nan_bits(u):
    u = np.asarray(u, dtype=np.uint32)
    return ((u & 0x7F800000) == 0x7F800000) & ((u & 0x007FFFFF) != 0)


def _ref_bf16(u):
    """IEEE round-to-nearest-even float32 -> bfloat16 bits (NaN entries meaningless)."""
    u = u.astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def gen_fp():
    import subprocess
    import torch
    torch.set_num_threads(1)

    bits, ranges = fp_inputs()
    x = bits.view(np.float32)
    save(x, "fp", "f32_in.npy")
    with open(out_path("fp", "f32_in_groups.tsv"), "w") as f:
        f.write("start\tcount\tdescription\n")
        for st, n, d in ranges:
            f.write("%d\t%d\t%s\n" % (st, n, d))
    t = torch.from_numpy(x.copy())
    assert (t.view(torch.int32).numpy().view(np.uint32) == bits).all()
    nan = _is_nan_bits(bits)
    nan_idx = np.nonzero(nan)[0]

    def tbits16(tt):
        return tt.contiguous().view(torch.int16).numpy().view(np.uint16).copy()

    report = []
    cap = [l.strip() for l in torch.__config__.show().splitlines() if "CPU capability" in l]
    report.append("torch %s, numpy %s, %s" % (torch.__version__, np.__version__,
                                              cap[0] if cap else "CPU capability unknown"))
    report.append("inputs: %d float32 values, %d NaNs" % (len(x), int(nan.sum())))
    with np.errstate(over="ignore", invalid="ignore"):
        np_f16 = x.astype(np.float16).view(np.uint16)
    ref_bf16 = _ref_bf16(bits)
    for name, dt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        vec = tbits16(t.to(dt))
        save(vec, "fp", name + "_torch.npy")
        sca = np.array([tbits16(torch.from_numpy(x[i:i + 1]).reshape(()).to(dt))[()]
                        for i in range(len(x))], dtype=np.uint16)
        report.append("")
        report.append("== %s ==" % name)
        ref = np_f16 if name == "f16" else ref_bf16
        refname = "numpy astype(float16)" if name == "f16" else "IEEE RNE (bits+0x7FFF+lsb)>>16"
        mm = np.nonzero((vec != ref) & ~nan)[0]
        report.append("non-NaN inputs where the vector result differs from %s: %d" % (refname, len(mm)))
        for i in mm[:20]:
            report.append("  [%d] in=0x%08X torch=0x%04X ref=0x%04X" % (i, bits[i], vec[i], ref[i]))
        nan_out_vec = sorted(set(int(v) for v in vec[nan]))
        nan_out_sca = sorted(set(int(v) for v in sca[nan]))
        report.append("NaN outputs, whole-tensor (vector) path: %s" % ", ".join("0x%04X" % v for v in nan_out_vec))
        report.append("NaN outputs, 0-d tensor (scalar) path:   %s" % ", ".join("0x%04X" % v for v in nan_out_sca))
        diff = np.nonzero(vec != sca)[0]
        if len(diff):
            save(sca, "fp", name + "_torch_scalar.npy")
            report.append("vector and scalar paths differ at %d inputs (%d of them NaN); saved %s_torch_scalar.npy"
                          % (len(diff), int(nan[diff].sum()), name))
            pairs = sorted(set((int(bits[i]), int(vec[i]), int(sca[i])) for i in diff))
            for b_, v_, s_ in pairs:
                report.append("  in=0x%08X vector=0x%04X scalar=0x%04X" % (b_, v_, s_))
        else:
            p = out_path("fp", name + "_torch_scalar.npy")
            if os.path.exists(p):
                os.remove(p)
            report.append("vector and scalar paths agree on all inputs")
        # Length dependence for the NaN inputs.
        xn = x[nan_idx].copy()
        full = vec[nan_idx]
        l1 = np.array([tbits16(torch.from_numpy(xn[i:i + 1]).to(dt))[0] for i in range(len(xn))], dtype=np.uint16)
        l7 = np.concatenate([tbits16(torch.from_numpy(np.resize(xn[i:i + 7], 7)).to(dt))[:len(xn[i:i + 7])]
                             for i in range(0, len(xn), 7)])
        lall = tbits16(torch.from_numpy(xn).to(dt))
        strided = tbits16(torch.from_numpy(np.repeat(xn, 2))[::2].to(dt))
        for lbl, r in (("length-1 1-d tensors", l1), ("length-7 1-d tensors", l7),
                       ("one tensor of all %d NaNs" % len(xn), lall),
                       ("non-contiguous (stride 2) tensor", strided)):
            same = bool((r == full).all())
            report.append("NaN inputs as %s: %s (outputs %s)" % (
                lbl, "same as full tensor" if same else "DIFFERENT from full tensor",
                ", ".join("0x%04X" % v for v in sorted(set(int(v) for v in r)))))

    # Same conversion with the non-vectorized CPU kernels.
    code = ("import numpy as np, torch, sys\n"
            "x = np.load(sys.argv[1])\n"
            "t = torch.from_numpy(x)\n"
            "for dt in (torch.float16, torch.bfloat16):\n"
            "    r = t.to(dt).view(torch.int16).numpy().view(np.uint16)\n"
            "    sys.stdout.write(r.tobytes().hex() + '\\n')\n"
            "p = torch.from_numpy(np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.int16))\n"
            "for dt in (torch.float16, torch.bfloat16):\n"
            "    r = p.view(dt).to(torch.float32).view(torch.int32).numpy().view(np.uint32)\n"
            "    sys.stdout.write(r.tobytes().hex() + '\\n')\n")
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    res = subprocess.run([sys.executable, "-c", code, out_path("fp", "f32_in.npy")],
                         env=env, capture_output=True, text=True, check=True)
    outs = res.stdout.split()
    wide_default = {}
    report.append("")
    report.append("== whole-tensor conversion with ATEN_CPU_CAPABILITY=default (no AVX kernels) ==")
    for name, hexs in zip(("f16", "bf16"), outs[:2]):
        r = np.frombuffer(bytes.fromhex(hexs), dtype=np.uint16)
        vec = np.load(out_path("fp", name + "_torch.npy"))
        d = np.nonzero(r != vec)[0]
        report.append("%s: differs from %s_torch.npy at %d inputs (%d NaN); NaN outputs %s"
                      % (name, name, len(d), int(nan[d].sum()),
                         ", ".join("0x%04X" % v for v in sorted(set(int(v) for v in r[nan])))))
        scap = out_path("fp", name + "_torch_scalar.npy")
        if os.path.exists(scap):
            report.append("%s: equal to %s_torch_scalar.npy: %s" % (name, name, bool((np.load(scap) == r).all())))

    for name, hexs in zip(("f16", "bf16"), outs[2:]):
        r = np.frombuffer(bytes.fromhex(hexs), dtype=np.uint32)
        wide_default[name] = r

    # Widening: all 65536 half / bfloat16 patterns to float32.
    report.append("")
    allp = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    th = torch.from_numpy(allp.view(np.int16).copy())
    for name, dt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        src = th.view(dt)
        vec = src.to(torch.float32).view(torch.int32).numpy().view(np.uint32).copy()
        save(vec, "fp", name + "_all_to_f32_torch.npy")
        sca = np.array([int(src[i].to(torch.float32).view(torch.int32).item()) & 0xFFFFFFFF
                        for i in range(65536)], dtype=np.uint32)
        if name == "f16":
            ref = allp.view(np.float16).astype(np.float32).view(np.uint32)
            refname = "numpy astype(float32)"
        else:
            ref = allp.astype(np.uint32) << 16
            refname = "bits << 16"
        report.append("== %s -> f32 (all 65536 patterns) ==" % name)
        d = np.nonzero(vec != ref)[0]
        report.append("differs from %s at %d patterns" % (refname, len(d)))
        if len(d):
            quieted = bool((vec[d] == (ref[d] | 0x00400000)).all())
            snan16 = bool((((allp[d] & 0x7C00) == 0x7C00) & ((allp[d] & 0x03FF) != 0)
                           & ((allp[d] & 0x0200) == 0)).all())
            report.append("all of them signalling NaNs: %s; torch = ref | 0x00400000 "
                          "(quiet bit set, sign and payload kept) for all: %s" % (snan16, quieted))
        for i in d[:20]:
            report.append("  0x%04X -> torch 0x%08X, ref 0x%08X" % (i, vec[i], ref[i]))
        d = np.nonzero(vec != wide_default[name])[0]
        report.append("with ATEN_CPU_CAPABILITY=default: %d differences" % len(d))
        d = np.nonzero(vec != sca)[0]
        report.append("vector vs 0-d (scalar) path: %d differences" % len(d))
        for i in d[:20]:
            report.append("  0x%04X -> vector 0x%08X, scalar 0x%08X" % (i, vec[i], sca[i]))
        if len(d):
            save(sca, "fp", name + "_all_to_f32_torch_scalar.npy")

    with open(out_path("fp", "REPORT.txt"), "w") as f:
        f.write("\n".join(report) + "\n")
    print("fp: %d inputs" % len(x))
    print("\n".join(report))


# --------------------------------------------------------------------------
# model/
# --------------------------------------------------------------------------

def read_idx(path):
    """Parse an IDX file (gzip-compressed): big-endian magic 0x0000TTNN, N u32 dims."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, tcode, ndim = struct.unpack(">HBB", data[:4])
    assert zero == 0 and tcode == 0x08, (path, zero, tcode)  # 0x08 = unsigned byte
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    assert arr.size == int(np.prod(dims)), path
    return arr.reshape(dims)


def load_fashion(split):
    img = read_idx(os.path.join(FASHION_DIR, "%s-images-idx3-ubyte.gz" % split))
    lab = read_idx(os.path.join(FASHION_DIR, "%s-labels-idx1-ubyte.gz" % split))
    x = (img.reshape(img.shape[0], -1).astype(np.float32) / np.float32(255)).astype(np.float32)
    return x, lab.astype(np.int64)


MODEL_SEED = 0       # torch.manual_seed: parameter initialisation
SHUFFLE_SEED = 1     # torch.Generator for the per-epoch permutation
EPOCHS = 3
BATCH = 64
LR = 0.05
MOMENTUM = 0.9
THREADS = 2


def gen_model():
    import time
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(THREADS)
    torch.manual_seed(MODEL_SEED)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 128)
            self.fc2 = nn.Linear(128, 64)
            self.fc3 = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    xtr, ytr = load_fashion("train")
    xte, yte = load_fashion("t10k")
    xtr_t, ytr_t = torch.from_numpy(xtr), torch.from_numpy(ytr)
    xte_t, yte_t = torch.from_numpy(xte), torch.from_numpy(yte)

    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    gen = torch.Generator().manual_seed(SHUFFLE_SEED)
    n = xtr.shape[0]
    losses = []
    t0 = time.time()
    for epoch in range(EPOCHS):
        model.train()
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for i in range(0, n, BATCH):
            idx = perm[i:i + BATCH]
            opt.zero_grad()
            loss = F.cross_entropy(model(xtr_t[idx]), ytr_t[idx])
            loss.backward()
            opt.step()
            total += float(loss.item()) * len(idx)
        losses.append(total / n)
        print("model: epoch %d mean train loss %.6f (%.1fs)" % (epoch + 1, losses[-1], time.time() - t0))
    model.eval()
    with torch.no_grad():
        pred = model(xte_t).argmax(dim=1)
        acc = float((pred == yte_t).double().mean().item())
    print("model: test accuracy %.4f" % acc)

    # Gradients of one batch: the first 128 training images, train mode.
    model.train()
    opt.zero_grad()
    gloss = F.cross_entropy(model(xtr_t[:128]), ytr_t[:128])
    gloss.backward()

    nparams = 0
    shapes = {}
    for name, p in model.named_parameters():
        w = p.detach().numpy().astype("<f4")
        g = p.grad.detach().numpy().astype("<f4")
        save(w, "model", "weights", name + ".npy")
        save(g, "model", "grads", name + ".npy")
        nparams += w.size
        shapes[name] = list(w.shape)

    info = {
        "architecture": "MLP 784-128-64-10, ReLU, nn.Linear layers fc1, fc2, fc3",
        "dataset": "Fashion-MNIST (" + FASHION_DIR + "/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz), pixels/255 float32",
        "epochs": EPOCHS,
        "batch_size": BATCH,
        "optimizer": "SGD",
        "lr": LR,
        "momentum": MOMENTUM,
        "loss": "cross_entropy (mean)",
        "torch_manual_seed": MODEL_SEED,
        "shuffle_generator_seed": SHUFFLE_SEED,
        "shuffle": "torch.randperm(60000, generator=torch.Generator().manual_seed(%d)) each epoch, same generator" % SHUFFLE_SEED,
        "num_threads": THREADS,
        "train_loss_per_epoch": losses,
        "test_accuracy": acc,
        "test_correct": int((pred == yte_t).sum().item()),
        "test_size": int(xte.shape[0]),
        "grads_batch": "first 128 training images, model in train mode, after training",
        "grads_batch_loss": float(gloss.item()),
        "parameter_count": int(nparams),
        "parameter_shapes": shapes,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
    }
    with open(out_path("model", "train.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")


# --------------------------------------------------------------------------
# quant/   (definitions are repeated verbatim in README.md)
# --------------------------------------------------------------------------

QUANT_N = 3 * 4096 + 100
QUANT_BLOCKS = (64, 4096)

NF4_CODEBOOK = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=np.float32)
FP4_MAGNITUDES = (np.array([0, 0.0625, 2, 3, 4, 6, 8, 12], dtype=np.float32)
                  / np.float32(12)).astype(np.float32)


def _midpoints(cb):
    return ((cb[:-1] + cb[1:]).astype(np.float32) * np.float32(0.5)).astype(np.float32)


def _blocks(x, B):
    return [x[i:i + B] for i in range(0, len(x), B)]


def _absmax(xb):
    return np.float32(np.max(np.abs(xb))) if len(xb) else np.float32(0)


def quant_int8(x, B):
    qs, ams, deqs = [], [], []
    for xb in _blocks(x, B):
        am = _absmax(xb)
        if am == 0:
            q = np.zeros(len(xb), dtype=np.int8)
        else:
            inv = np.float32(np.float32(127) / am)
            y = (xb * inv).astype(np.float32)
            q = np.clip(np.rint(y), -127, 127).astype(np.int8)
        deq = (q.astype(np.float32) * np.float32(am / np.float32(127))).astype(np.float32)
        qs.append(q)
        ams.append(am)
        deqs.append(deq)
    return np.concatenate(qs), np.array(ams, dtype=np.float32), np.concatenate(deqs)


def quant_nf4(x, B):
    mids = _midpoints(NF4_CODEBOOK)
    cs, ams, deqs = [], [], []
    for xb in _blocks(x, B):
        am = _absmax(xb)
        if am == 0:
            c = np.full(len(xb), 7, dtype=np.uint8)
        else:
            inv = np.float32(np.float32(1) / am)
            y = (xb * inv).astype(np.float32)
            c = (y[:, None] > mids[None, :]).sum(axis=1).astype(np.uint8)
        deq = (NF4_CODEBOOK[c] * am).astype(np.float32)
        cs.append(c)
        ams.append(am)
        deqs.append(deq)
    return np.concatenate(cs), np.array(ams, dtype=np.float32), np.concatenate(deqs)


def quant_fp4(x, B):
    mids = _midpoints(FP4_MAGNITUDES)
    cs, ams, deqs = [], [], []
    for xb in _blocks(x, B):
        am = _absmax(xb)
        if am == 0:
            c = np.zeros(len(xb), dtype=np.uint8)
        else:
            inv = np.float32(np.float32(1) / am)
            y = (xb * inv).astype(np.float32)
            mag = (np.abs(y)[:, None] > mids[None, :]).sum(axis=1).astype(np.uint8)
            c = (np.signbit(xb).astype(np.uint8) << 3) | mag
        m = (FP4_MAGNITUDES[c & 7] * am).astype(np.float32)
        deq = np.where((c & 8) != 0, -m, m).astype(np.float32)
        cs.append(c)
        ams.append(am)
        deqs.append(deq)
    return np.concatenate(cs), np.array(ams, dtype=np.float32), np.concatenate(deqs)


def gen_quant():
    rng = np.random.default_rng(1)
    xn = rng.normal(0.0, 0.02, size=QUANT_N).astype(np.float32)
    xn[128:192] = 0
    xn[300] = 1.5
    xn[5] = -0.0
    save(xn, "quant", "x_normal.npy")
    wpath = out_path("model", "weights", "fc1.weight.npy")
    if not os.path.exists(wpath):
        sys.exit("quant: %s missing; generate the model part first" % wpath)
    xw = np.load(wpath).reshape(-1)[:QUANT_N].astype(np.float32)
    save(xw, "quant", "x_weights.npy")
    assert np.isfinite(xn).all() and np.isfinite(xw).all()
    for B in QUANT_BLOCKS:
        for iname, x in (("normal", xn), ("weights", xw)):
            q, am, deq = quant_int8(x, B)
            assert len(am) == -(-QUANT_N // B)
            save(q, "quant", "int8_b%d_%s_q.npy" % (B, iname))
            save(am, "quant", "int8_b%d_%s_absmax.npy" % (B, iname))
            save(deq, "quant", "int8_b%d_%s_deq.npy" % (B, iname))
            for kind, fn in (("nf4", quant_nf4), ("fp4", quant_fp4)):
                c, am2, deq = fn(x, B)
                assert (am2.view(np.uint32) == am.view(np.uint32)).all()
                save(c, "quant", "%s_b%d_%s_codes.npy" % (kind, B, iname))
                save(am2, "quant", "%s_b%d_%s_absmax.npy" % (kind, B, iname))
                save(deq, "quant", "%s_b%d_%s_deq.npy" % (kind, B, iname))
    print("quant: %d elements, blocks %s" % (QUANT_N, QUANT_BLOCKS))


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

PARTS = ["npy", "fp", "model", "quant"]


def main(argv):
    parts = argv[1:] or PARTS
    for p in parts:
        if p not in PARTS:
            sys.exit("unknown part %r (known: %s)" % (p, " ".join(PARTS)))
    for p in PARTS:
        if p in parts:
            globals()["gen_" + p]()


if __name__ == "__main__":
    main(sys.argv)
