"""The ctypes mirrors (tensorpress._abi) against the committed C header."""

from __future__ import annotations

import ctypes
import os
import re
from ctypes import POINTER, c_char_p, c_double, c_float, c_int32, c_int64, c_uint64, c_void_p

import numpy as np
import pytest

import tensorpress as tp
from tensorpress import _abi, _lib

from conftest import ROOT

HEADER = os.path.join(ROOT, "cmd", "libtensorpress", "libtensorpress.h")

SCALARS = {"int32_t": c_int32, "int64_t": c_int64, "double": c_double, "float": c_float,
           "tp_handle": c_uint64, "void": None, "tp_alloc_fn": _abi.ALLOC_FN}


def ctype(decl: str):
    """The ctypes type of a C type as the header writes it."""
    decl = decl.replace("const ", "").strip()
    if decl in ("char*", "char *"):
        return c_char_p
    if decl.replace(" ", "") in ("void*", "uint8_t*"):
        return c_void_p
    if decl.replace(" ", "") == "char**":
        return POINTER(c_char_p)
    if decl.endswith("*"):
        base = decl[:-1].strip()
        if base in _abi.STRUCTS:
            return POINTER(_abi.STRUCTS[base])
        return POINTER(SCALARS[base])
    return SCALARS[decl]


def same(a, b) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    return ctypes.sizeof(a) == ctypes.sizeof(b) and getattr(a, "_type_", None) == getattr(b, "_type_", None)


def header() -> str:
    with open(HEADER) as f:
        return f.read()


def test_structs_match_header() -> None:
    text = header()
    for name, cls in _abi.STRUCTS.items():
        m = re.search(r"typedef struct \{([^{}]*)\}\s*" + name + ";", text, re.S)
        assert m, name
        body = re.sub(r"/\*.*?\*/|//[^\n]*", "", m.group(1), flags=re.S)
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            base, rest = re.match(r"((?:const\s+)?\w+)\s+(.*)", decl, re.S).groups()
            for var in rest.split(","):
                var = var.strip()
                ptr = var.count("*")
                fields.append((var.lstrip("* "), ctype(base + "*" * ptr)))
        got = [(n, t) for n, t in cls._fields_]
        assert [n for n, _ in fields] == [n for n, _ in got], name
        for (n, want), (_, have) in zip(fields, got):
            assert same(want, have), (name, n, want, have)


def test_functions_match_header() -> None:
    text = header()
    found = {}
    for ret, name, args in re.findall(r"^extern (.+?)\b(tp_\w+)\((.*?)\);", text, re.M):
        params = [] if args.strip() == "void" else [re.sub(r"\s*\w+$", "", a.strip()) for a in args.split(",")]
        found[name] = (ctype(ret.strip()), [ctype(p) for p in params])
    assert set(found) == set(_abi.SIGNATURES), set(found) ^ set(_abi.SIGNATURES)
    for name, (ret, params) in found.items():
        wret, wparams = _abi.SIGNATURES[name]
        assert same(ret, wret), (name, ret, wret)
        assert len(params) == len(wparams), name
        for i, (a, b) in enumerate(zip(params, wparams)):
            assert same(a, b), (name, i, a, b)


def test_codes_match_header() -> None:
    text = header()
    for name, value in re.findall(r"TP_E(\w+)=(\d+)", text):
        cls = tp.errors.BY_CODE[int(value)]
        assert cls.code == int(value), name


def test_abi_version_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library of another ABI version is refused at load, not misread."""
    _lib.lib()
    monkeypatch.setattr(_abi, "ABI_VERSION", _abi.ABI_VERSION + 1)
    monkeypatch.setattr(_lib, "_lib", None)
    with pytest.raises(ImportError, match="ABI version"):
        _lib.lib()


def test_abi_version_and_handles() -> None:
    assert _lib.lib().tp_abi_version() == _abi.ABI_VERSION == 2
    assert tp.version().startswith("tensorpress")
    start = tp.live_handles()
    s = tp.Sender("topk(0.5)")
    assert tp.live_handles() == start + 1
    s.close()
    s.close()  # idempotent
    assert tp.live_handles() == start
    assert "closed" in repr(s)
    try:
        s.compress("x", np.zeros(4, np.float32))
    except ValueError as e:
        assert "closed" in str(e)
    else:
        raise AssertionError("a closed Sender compressed")


def test_panic_becomes_internal_error() -> None:
    """A NULL out-pointer makes the wrapper panic in Go: recovered as TP_EINTERNAL, no crash."""
    frame = tp.encode(np.zeros(4, np.float32))
    err = _lib.Err()
    rc = _lib.lib().tp_decode_info(frame, len(frame), None, 0, None, 0, None, err.ref)
    assert rc == tp.InternalError.code
    with pytest.raises(tp.InternalError, match="internal error"):
        _lib.check(rc, err)
    # The library still works.
    assert np.array_equal(tp.decode(frame), np.zeros(4, np.float32))


def test_forked_child_is_refused() -> None:
    """After fork() the Go runtime is gone in the child: calls raise RuntimeError there."""
    import os

    tp.live_handles()  # the library is loaded
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            tp.encode(np.zeros(4, np.float32))
        except RuntimeError as e:
            code = 0 if "spawn" in str(e) else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
