"""Encode numpy arrays into tensorpress frames and decode them back.

Arrays that are C-contiguous, aligned and little-endian are read in place,
with no copy (``_stats.copies`` counts the copies made for other layouts).
Decoding writes the data once, straight into the new array.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import threading
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

from . import _dtypes, _lib
from ._abi import tp_buf, tp_handle, tp_limits, tp_tensor
from .errors import ArgumentError, CorruptError
from .profile import Profile

__all__ = [
    "encode", "encode_into", "encode_bytes", "decode", "decode_into", "decode_all", "decode_bytes",
    "info", "check_recipe", "is_lossy", "Limits", "TensorInfo",
]

Buffer = Union[bytes, bytearray, memoryview, np.ndarray]

_CRC = {"always": 0, "omit-raw": 1}
_F_LOSSLESS, _F_BYTES = 1, 2


class _Stats:
    """Counters of the copies the package made (inputs not C-contiguous,
    aligned and little-endian; outputs the library could not write in place)."""

    def __init__(self) -> None:
        self.copies = 0

    def __repr__(self) -> str:
        return f"_Stats(copies={self.copies})"


_stats = _Stats()


@dataclass
class Limits:
    """Decoder limits; a field at 0 takes the library's default (see codec.Limits)."""

    max_header: int = 0
    max_frame: int = 0
    max_decoded: int = 0
    max_tensor: int = 0
    max_dims: int = 0
    max_segments: int = 0
    max_tensors: int = 0
    max_name: int = 0
    max_tags: int = 0
    #: bytes of a frame decoded through stages that decode at some or tens
    #: of MB/s (floatcm, floatrank); default 64 MiB, 1 MiB for a Receiver
    #: (updates from peers: a frame of zeros is under 3 KB a MiB through them)
    max_slow_decoded: int = 0

    def _struct(self) -> tp_limits:
        return tp_limits(*(int(getattr(self, f.name)) for f in fields(self)))


class TensorInfo(NamedTuple):
    """What a frame's header says of one tensor (or byte stream chunk)."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    nbytes: int
    lossless: bool
    is_bytes: bool


class _Scratch(threading.local):
    """Per-thread reusable ctypes objects and output buffer."""

    def __init__(self) -> None:
        self.err = _lib.Err()
        self.n = ctypes.c_int64()
        self.spill = tp_handle()
        self.n_ref = ctypes.byref(self.n)
        self.spill_ref = ctypes.byref(self.spill)
        self.t = tp_tensor()
        self.t_ref = ctypes.byref(self.t)
        self.out = bytearray(0)
        self.out_c: Any = None
        self.out_addr = 0
        self.info = bytearray(4096)
        self.info_addr = ctypes.addressof((ctypes.c_char * len(self.info)).from_buffer(self.info))

    def out_buf(self, n: int) -> Tuple[Union[bytearray, np.ndarray], int]:
        """A buffer of at least n bytes: the thread's own up to 64 MiB, else a fresh one."""
        if n > 64 << 20:
            a = np.empty(n, np.uint8)
            return a, a.ctypes.data
        if len(self.out) < n:
            self.out_c = None
            self.out = bytearray(max(n, 4096))
            self.out_c = (ctypes.c_char * len(self.out)).from_buffer(self.out)
            self.out_addr = ctypes.addressof(self.out_c)
        return self.out, self.out_addr


_scratch = _Scratch()


def _prep(arr: Any, name: str) -> np.ndarray:
    """arr as a C-contiguous, aligned, little-endian array (a copy only when it is not one)."""
    if not isinstance(arr, np.ndarray):
        arr = np.asarray(arr)
    if arr.dtype.hasobject or arr.dtype.kind in "OUSVcmM":
        raise TypeError(f"tensorpress: array {name!r}: {arr.dtype} is not supported")
    if not (arr.flags.c_contiguous and arr.flags.aligned) or arr.dtype.byteorder == ">":
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
        _stats.copies += 1
    return arr


_shapes = threading.local()


def _shape_scratch() -> Any:
    """The thread's reusable shape array (up to 8 dimensions)."""
    a = getattr(_shapes, "a", None)
    if a is None:
        a = _shapes.a = (ctypes.c_int64 * 8)()
    return a


def _fill(t: tp_tensor, arr: np.ndarray, name: bytes, did: int, lossless: bool, tags: Optional[bytes]) -> Any:
    """Fill descriptor t for arr; returns what must stay alive during the call."""
    nd = arr.ndim
    if nd <= 8:
        shape = _shape_scratch()
        shape[:nd] = arr.shape
    else:
        shape = (ctypes.c_int64 * nd)(*arr.shape)
    t.name, t.name_len = name, len(name)
    t.dtype, t.ndim = did, nd
    t.shape = shape
    t.data = arr.ctypes.data if arr.nbytes else None
    t.nbytes = arr.nbytes
    t.flags = _F_LOSSLESS if lossless else 0
    t.tags, t.tags_len = tags, len(tags) if tags else 0
    return shape


def _float32(name: str, arr: Any, what: str) -> np.ndarray:
    """``arr`` as float32 (other float dtypes converted: a copy); TypeError for others."""
    a = np.asarray(arr)
    if a.dtype != np.float32:
        if a.dtype.kind != "f":
            raise TypeError(f"tensorpress: array {name!r}: {what} take float arrays, not {a.dtype}")
        a = a.astype(np.float32)
    return a


def _float32s(updates: Mapping[str, Any], what: str) -> List[Tuple[str, np.ndarray]]:
    """(name, float32 array) pairs of ``updates`` (_float32 each)."""
    return [(name, _float32(name, a, what)) for name, a in updates.items()]


def _descs(arrays: List[Tuple[str, np.ndarray]]) -> Tuple[Any, List[Any]]:
    """tp_tensor descriptors of (name, array) pairs, and what keeps them alive."""
    ts = (tp_tensor * max(len(arrays), 1))()
    keep: List[Any] = [ts]
    for i, (name, a) in enumerate(arrays):
        a = _prep(a, name)
        nb = name.encode()
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        keep += [a, nb, shape]
        t = ts[i]
        t.name, t.name_len = nb, len(nb)
        t.dtype, t.ndim, t.shape = _dtypes.dtype_id(a.dtype, name), a.ndim, shape
        t.data, t.nbytes = (a.ctypes.data if a.nbytes else None), a.nbytes
    return ts, keep


def _tags(tags: Optional[Mapping[str, str]]) -> Optional[bytes]:
    if not tags:
        return None
    return b"\0".join(f"{k}={v}".encode() for k, v in tags.items())


def _recipe(recipe: Optional[str]) -> Tuple[Optional[bytes], int]:
    if recipe is None or recipe == "":
        return None, 0
    if not isinstance(recipe, str):
        raise TypeError(f"tensorpress: recipe must be a str, not {type(recipe).__name__}")
    b = recipe.encode()
    return b, len(b)


def _profile(profile: Optional[Profile]) -> int:
    if profile is None:
        return 0
    if not isinstance(profile, Profile):
        raise TypeError(f"tensorpress: profile must be a tensorpress.Profile, not {type(profile).__name__}")
    return profile._handle()


def _take(s: _Scratch, n: int) -> bytes:
    """The output kept in s.spill, read out and freed."""
    out = bytearray(n)
    c = (ctypes.c_char * n).from_buffer(out)
    _lib.check(_lib.lib().tp_take(s.spill.value, c, n, s.n_ref, s.err.ref), s.err)
    del c
    return bytes(out)


def _bound(a: np.ndarray, name: str) -> int:
    """Room for a lossless frame of a (without its tags; codec.MaxTensorLen with room for the header)."""
    return a.nbytes + (a.nbytes >> 10) + len(name.encode()) + 10 * a.ndim + 512


def _encode_to(a: np.ndarray, out_addr: Optional[int], cap: Optional[int], recipe: Optional[str],
               profile: Optional[Profile], name: str, lossless: bool, dtype: Any,
               tags: Optional[bytes], crc: str) -> Tuple[int, Any]:
    """Encode a (made ready by _prep; tags made by _tags) into (out_addr, cap), or the
    thread's buffer when out_addr is None."""
    s = _scratch
    did = _dtypes.dtype_id(a.dtype, name, dtype)
    nb = name.encode()
    keep = _fill(s.t, a, nb, did, lossless, tags)
    rb, rn = _recipe(recipe)
    crcm = _CRC.get(crc)
    if crcm is None:
        raise ValueError(f"tensorpress: crc must be one of {sorted(_CRC)}, not {crc!r}")
    L = _lib.lib()
    buf: Any = None
    if out_addr is None:
        # codec.MaxTensorLen, with room for the header (lossless frames fit;
        # a frame that does not is spilled and read out with tp_take).
        buf, out_addr = s.out_buf(_bound(a, name) + (s.t.tags_len or 0))
        cap = len(buf)
    rc = L.tp_encode(s.t_ref, rb, rn, _profile(profile), crcm, out_addr, cap, s.n_ref, s.spill_ref, s.err.ref)
    del keep
    _lib.check(rc, s.err, "" if name else "tensorpress: array (unnamed)")
    return s.n.value, buf


_HUGE, _HUGE_FROM, _MADV_HUGEPAGE = 2 << 20, 4 << 20, 14


class _BytesAPI:
    """CPython's bytes constructor and resize, through the package's handle on the
    interpreter (_lib.pythonapi). :func:`encode` writes a large frame straight into a
    fresh bytes object and trims it, with no copy; without this API it copies."""

    def __init__(self, api: ctypes.PyDLL) -> None:
        vp, sz = ctypes.c_void_p, ctypes.c_ssize_t
        self.new = api.PyBytes_FromStringAndSize
        self.new.restype, self.new.argtypes = vp, (vp, sz)
        self.data = api.PyBytes_AsString
        self.data.restype, self.data.argtypes = vp, (vp,)
        self.resize = api._PyBytes_Resize
        self.resize.restype, self.resize.argtypes = ctypes.c_int, (ctypes.POINTER(vp), sz)
        self.decref = api.Py_DecRef
        self.decref.restype, self.decref.argtypes = None, (vp,)
        self.madvise: Any = None
        if sys.platform.startswith("linux"):
            self.madvise = ctypes.CDLL(None).madvise
            self.madvise.restype, self.madvise.argtypes = ctypes.c_int, (vp, ctypes.c_size_t, ctypes.c_int)

    def huge_pages(self, addr: int, n: int) -> None:
        """Ask for transparent huge pages over [addr, addr+n) (whole 2 MiB pages inside it), as
        numpy does for its large arrays: a fresh frame of tens of MiB then takes tens of page
        faults rather than thousands. A refusal (THP off) changes nothing."""
        lo, hi = -(-addr // _HUGE) * _HUGE, (addr + n) // _HUGE * _HUGE
        if self.madvise is not None and hi - lo >= _HUGE:
            self.madvise(lo, hi - lo, _MADV_HUGEPAGE)

    def encode(self, arr: np.ndarray, cap: int, recipe: Optional[str], profile: Optional[Profile], name: str,
               lossless: bool, dtype: Any, tags: Optional[bytes], crc: str) -> Optional[bytes]:
        """The frame, written into a bytes object of cap bytes then trimmed; None when it
        needs more than cap (the library kept it: read it with _take)."""
        p = self.new(None, cap)  # a new reference that only this function holds
        try:
            addr = self.data(p)
            if cap >= _HUGE_FROM:
                self.huge_pages(addr, cap)
            n, _ = _encode_to(arr, addr, cap, recipe, profile, name, lossless, dtype, tags, crc)
            if _scratch.spill.value:
                return None
            h = ctypes.c_void_p(p)
            p = None
            self.resize(ctypes.byref(h), n)  # shrinks in place; on failure frees h and raises
            p = h.value
            return ctypes.cast(p, ctypes.py_object).value  # type: ignore[no-any-return]
        finally:
            if p:
                self.decref(p)


def _bytes_api() -> Optional[_BytesAPI]:
    api = _lib.pythonapi()
    if api is None:
        return None
    try:
        return _BytesAPI(api)
    except AttributeError:
        return None


_bytes = _bytes_api()
_IN_PLACE = 256 << 10  # frames that may reach this many bytes are written in place


def encode(arr: Any, *, recipe: Optional[str] = None, profile: Optional[Profile] = None, name: str = "",
           lossless: bool = False, dtype: Any = None, tags: Optional[Mapping[str, str]] = None,
           crc: str = "always") -> bytes:
    """Encode an array into a tensorpress frame.

    Args:
        arr: any array of a supported dtype (float16/32/64, int8-64, uint8-64, bool);
            read in place when C-contiguous, aligned and little-endian.
        recipe: a recipe such as ``"shuffle4 | plane3:huff0"`` or ``"int8(4096) | q:huff0"``;
            without one, the profile's choice, else the hub's default by class of data.
        profile: a :class:`Profile` choosing the recipe by name, dtype and size.
        name: the tensor's name, carried in the frame.
        lossless: refuse any lossy stage for this tensor (:class:`LossyError`).
        dtype: send the data as this dtype (same element size), e.g. ``"bf16"`` for uint16 bits.
        tags: key/value annotations carried in the frame.
        crc: ``"always"`` (default) or ``"omit-raw"`` (no payload CRC on frames stored raw).

    Returns:
        The frame (or, above 256 MiB, a stream of chunk frames), as bytes.
    """
    s = _scratch
    a, tb = _prep(arr, name), _tags(tags)
    if _bytes is not None:
        cap = _bound(a, name) + len(tb or b"")
        if cap >= _IN_PLACE:
            out = _bytes.encode(a, cap, recipe, profile, name, lossless, dtype, tb, crc)
            return out if out is not None else _take(s, s.n.value)
    n, buf = _encode_to(a, None, None, recipe, profile, name, lossless, dtype, tb, crc)
    if s.spill.value:
        return _take(s, n)
    return bytes(memoryview(buf)[:n])


def encode_into(arr: Any, out: Buffer, *, recipe: Optional[str] = None, profile: Optional[Profile] = None,
                name: str = "", lossless: bool = False, dtype: Any = None,
                tags: Optional[Mapping[str, str]] = None, crc: str = "always") -> int:
    """Encode like :func:`encode` into the writable buffer ``out``; returns the frame's length.

    No copy at all. Raises :class:`ArgumentError` (a ValueError) when ``out`` is too small.
    """
    o = np.frombuffer(out, dtype=np.uint8)
    if not o.flags.writeable:
        raise TypeError("tensorpress: encode_into: out is read-only")
    n, _ = _encode_to(_prep(arr, name), o.ctypes.data if o.size else 0, o.size, recipe, profile, name,
                      lossless, dtype, _tags(tags), crc)
    s = _scratch
    if s.spill.value:
        h, s.spill.value = s.spill.value, 0
        _lib.lib().tp_close(h, None)
        raise ArgumentError(f"tensorpress: encode_into: the frame of array {name!r} needs {n} bytes, "
                            f"out holds {o.size}")
    return n


def encode_bytes(data: Buffer, *, recipe: Optional[str] = None, crc: str = "always") -> bytes:
    """Encode a byte string as a bytes frame (lossless recipes only; none: stored raw)."""
    s = _scratch
    src = data if isinstance(data, bytes) else np.frombuffer(data, np.uint8)
    n = len(data) if isinstance(data, bytes) else src.size
    p = src if isinstance(src, bytes) else (src.ctypes.data if n else None)
    rb, rn = _recipe(recipe)
    L = _lib.lib()
    cap = L.tp_max_encoded_len(n)
    buf, addr = s.out_buf(cap)
    rc = L.tp_encode_bytes(p, n, rb, rn, _CRC[crc], addr, cap, s.n_ref, s.spill_ref, s.err.ref)
    _lib.check(rc, s.err)
    if s.spill.value:
        return _take(s, s.n.value)
    return bytes(memoryview(buf)[: s.n.value])


def _src(buf: Buffer) -> Tuple[Any, int, Any]:
    """A pointer argument for buf, its length, and what keeps it alive."""
    if isinstance(buf, bytes):
        return buf, len(buf), buf
    a = np.frombuffer(buf, dtype=np.uint8)
    return (a.ctypes.data if a.size else None), a.size, a


def _lim(limits: Optional[Limits]) -> Optional[tp_limits]:
    if limits is None:
        return None
    if not isinstance(limits, Limits):
        raise TypeError(f"tensorpress: limits must be a tensorpress.Limits, not {type(limits).__name__}")
    return limits._struct()


def _info(p: Any, n: int, lim: Optional[tp_limits], ph: int) -> List[TensorInfo]:
    s = _scratch
    L = _lib.lib()
    limp = ctypes.byref(lim) if lim is not None else None
    rc = L.tp_decode_info(p, n, limp, ph, s.info_addr, len(s.info), s.n_ref, s.err.ref)
    _lib.check(rc, s.err, "tensorpress: frame")
    raw: Any = s.info
    if s.n.value > len(s.info):
        raw = bytearray(s.n.value)
        c = (ctypes.c_char * len(raw)).from_buffer(raw)
        rc = L.tp_decode_info(p, n, limp, ph, ctypes.addressof(c), len(raw), s.n_ref, s.err.ref)
        del c
        _lib.check(rc, s.err, "tensorpress: frame")
    (count,) = struct.unpack_from("<I", raw, 0)
    off, out = 4, []
    for _ in range(count):
        did, fl, nd, nl, nbytes = struct.unpack_from("<BBHIq", raw, off)
        off += 16
        shape = struct.unpack_from(f"<{nd}q", raw, off)
        off += 8 * nd
        name = bytes(raw[off: off + nl]).decode("utf-8", "replace")
        off += nl
        out.append(TensorInfo(name, _dtypes.NAMES.get(did, str(did)), tuple(shape), nbytes,
                              bool(fl & _F_LOSSLESS), bool(fl & _F_BYTES)))
    return out


def info(buf: Buffer, *, limits: Optional[Limits] = None, profile: Optional[Profile] = None) -> List[TensorInfo]:
    """Describe the tensors in ``buf`` from the frame headers only (CRCs and limits checked, no payload read)."""
    p, n, keep = _src(buf)
    return _info(p, n, _lim(limits), _profile(profile))


_ID_OF = {v: k for k, v in _dtypes.NAMES.items()}


def _empty(ti: TensorInfo) -> np.ndarray:
    if ti.is_bytes:
        return np.empty(ti.nbytes, np.uint8)
    return np.empty(ti.shape, _dtypes.NUMPY[_ID_OF[ti.dtype]])


def _decode_to(p: Any, n: int, lim: Optional[tp_limits], ph: int, arrays: List[np.ndarray]) -> None:
    s = _scratch
    bufs = (tp_buf * max(len(arrays), 1))()
    for i, a in enumerate(arrays):
        bufs[i].data = a.ctypes.data if a.nbytes else None
        bufs[i].cap = a.nbytes
    copies = ctypes.c_int64()
    limp = ctypes.byref(lim) if lim is not None else None
    rc = _lib.lib().tp_decode_into(p, n, limp, ph, bufs, len(arrays), ctypes.byref(copies), s.err.ref)
    _lib.check(rc, s.err, "tensorpress: frame")
    _stats.copies += copies.value


def _finish(a: np.ndarray, ti: TensorInfo, bf16: str) -> np.ndarray:
    if ti.dtype == "bf16":
        if bf16 == "float32":
            return _dtypes.widen_bf16(a)
        if bf16 != "bits":
            raise ValueError(f"tensorpress: bf16 must be 'float32' or 'bits', not {bf16!r}")
    return a


def decode(buf: Buffer, *, limits: Optional[Limits] = None, profile: Optional[Profile] = None,
           bf16: str = "float32", out: Optional[np.ndarray] = None) -> np.ndarray:
    """Decode the one tensor in ``buf`` (a frame, or a stream of its chunks).

    The dtype and shape are restored. bfloat16 comes back as exactly widened float32, or as
    its uint16 bits with ``bf16="bits"``. With ``out``, the data is decoded into that array
    (C-contiguous, of the tensor's dtype and shape). More than one tensor raises ValueError:
    use :func:`decode_all`.
    """
    p, n, keep = _src(buf)
    lim, ph = _lim(limits), _profile(profile)
    infos = _info(p, n, lim, ph)
    if len(infos) != 1:
        raise ValueError(f"tensorpress: decode: the buffer holds {len(infos)} tensors; use decode_all")
    ti = infos[0]
    if out is not None:
        _check_out(out, ti)
        a = out
    else:
        a = _empty(ti)
    _decode_to(p, n, lim, ph, [a])
    return a if out is not None else _finish(a, ti, bf16)


def _check_out(out: np.ndarray, ti: TensorInfo) -> None:
    want = np.uint8 if ti.is_bytes else _dtypes.NUMPY[_ID_OF[ti.dtype]]
    shape = (ti.nbytes,) if ti.is_bytes else ti.shape
    if not isinstance(out, np.ndarray) or out.dtype != want or out.shape != shape \
            or not out.flags.c_contiguous or not out.flags.writeable:
        raise ArgumentError(f"tensorpress: out for tensor {ti.name!r} must be a writable C-contiguous "
                            f"{np.dtype(want)} array of shape {shape}")


def decode_into(buf: Buffer, out: np.ndarray, *, limits: Optional[Limits] = None,
                profile: Optional[Profile] = None) -> np.ndarray:
    """Decode the one tensor in ``buf`` into ``out`` (its dtype and shape; bf16 as uint16 bits)."""
    return decode(buf, limits=limits, profile=profile, out=out)


def decode_all(buf: Buffer, *, limits: Optional[Limits] = None, profile: Optional[Profile] = None,
               bf16: str = "float32") -> Dict[str, np.ndarray]:
    """Decode every tensor in ``buf`` (frames or a stream) into a dict by name.

    Byte stream chunks, if any, come back joined under the key ``""``.
    """
    p, n, keep = _src(buf)
    lim, ph = _lim(limits), _profile(profile)
    infos = _info(p, n, lim, ph)
    arrays = [_empty(ti) for ti in infos]
    _decode_to(p, n, lim, ph, arrays)
    out: Dict[str, np.ndarray] = {}
    chunks = []
    for ti, a in zip(infos, arrays):
        if ti.is_bytes:
            chunks.append(a)
            continue
        if ti.name in out:
            raise CorruptError(f"tensorpress: decode_all: tensor {ti.name!r} appears twice in the buffer")
        out[ti.name] = _finish(a, ti, bf16)
    if chunks:
        out[""] = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    return out


def decode_bytes(buf: Buffer, *, limits: Optional[Limits] = None) -> bytes:
    """Decode bytes frames (from :func:`encode_bytes`) back into the byte string."""
    p, n, keep = _src(buf)
    lim = _lim(limits)
    infos = _info(p, n, lim, 0)
    if any(not ti.is_bytes for ti in infos):
        raise ValueError("tensorpress: decode_bytes: the buffer holds tensors; use decode or decode_all")
    total = np.empty(sum(ti.nbytes for ti in infos), np.uint8)
    parts, off = [], 0
    for ti in infos:
        parts.append(total[off: off + ti.nbytes])
        off += ti.nbytes
    _decode_to(p, n, lim, 0, parts)
    return total.tobytes()


def check_recipe(recipe: str) -> None:
    """Raise :class:`RecipeError` (a ValueError) when ``recipe`` does not parse."""
    is_lossy(recipe)


def is_lossy(recipe: str) -> bool:
    """Whether ``recipe`` has a lossy stage (raises :class:`RecipeError` when it does not parse)."""
    rb, rn = _recipe(recipe)
    lossy, err = ctypes.c_int32(), _lib.Err()
    _lib.check(_lib.lib().tp_recipe_check(rb, rn, ctypes.byref(lossy), err.ref), err,
               f"tensorpress: recipe {recipe!r}")
    return bool(lossy.value)
