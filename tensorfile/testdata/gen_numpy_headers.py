#!/usr/bin/python3
"""Write numpy_headers.tsv: the .npy preambles numpy itself writes.

Run from this folder with a Python that has numpy (1.24 or later):

    /usr/bin/python3 gen_numpy_headers.py > numpy_headers.tsv

Each line: descr, shape (comma-separated, "-" for 0-d, D*N for N copies of
D), version ("auto"
for np.save's choice, else 1, 2 or 3), the preamble length, and the SHA-256
of the preamble (magic, version, length field, dict and padding).
TestNpyHeaderGolden checks AppendNpyHeader against it.
"""
import hashlib
import io
import warnings

import numpy as np

DESCRS = ["|b1", "|i1", "|u1", "<i2", "<u2", "<f2", "<i4", "<u4", "<f4", "<i8", "<u8", "<f8"]


def shapes():
    yield ()
    for n in range(1, 24):                     # ranks across the 64-byte steps
        yield tuple(range(1, n + 1))
        yield (0,) * n
    for d in (1, 9, 10, 99, 100, 12345, 2**31, 2**40, 2**62):
        yield (d,)
        yield (d, 3)
        yield (3, d)
    yield (10**18,)
    yield tuple([7] * 40)
    yield tuple([123456] * 30)
    yield (0,) * 22000                         # too long for version 1.0


def preamble(descr, shape, version):
    a = np.lib.format
    buf = io.BytesIO()
    d = {"descr": descr, "fortran_order": False, "shape": shape}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a._write_array_header(buf, d, version)
    return buf.getvalue()


def line(descr, shape, vname, version):
    try:
        p = preamble(descr, shape, version)
    except ValueError:
        return None
    if len(shape) > 8 and len(set(shape)) == 1:
        s = "%d*%d" % (shape[0], len(shape))   # n copies of one dimension
    else:
        s = ",".join(str(x) for x in shape) if shape else "-"
    return "\t".join([descr, s, vname, str(len(p)), hashlib.sha256(p).hexdigest()])


def main():
    out = []
    for descr in DESCRS:
        for shape in [(), (5,), (3, 4), (2, 0, 3), (100000,)]:
            out.append(line(descr, shape, "auto", None))
    for shape in shapes():
        for vname, version in (("auto", None), ("1", (1, 0)), ("2", (2, 0)), ("3", (3, 0))):
            out.append(line("<f4", shape, vname, version))
    print("\n".join(l for l in out if l is not None))


main()
