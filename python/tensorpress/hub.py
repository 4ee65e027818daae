"""A client of a tensorpress model hub (``tensorpress hub``): list its
versions, fetch one into numpy arrays (as deltas against a version held),
upload gradient updates for a round.

    >>> with tp.Hub("127.0.0.1:7077") as hub:          # doctest: +SKIP
    ...     v1 = hub.fetch()                           # the newest version
    ...     v2 = hub.fetch(base=v1)                    # later: deltas against v1
    ...     hub.upload({"fc1.w": grad}, "topk(0.01)", round=3, sender=sender)

Every tensor fetched is checked against the hub's SHA-256 digest of the
version (bit for bit) unless it came through a lossy recipe, which happens
only with ``require_lossless=False``.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from . import _dtypes, _lib
from ._abi import ALLOC_FN, tp_auth, tp_handle, tp_tensor
from .codec import Limits, _descs, _float32s, _lim
from .errors import BaseMismatchError, TensorpressError
from .gradient import Sender

__all__ = ["Hub", "TLS", "Fetched", "VersionInfo", "UploadResult", "load_dir"]

_EBASE = BaseMismatchError.code
_T = TypeVar("_T")


@dataclass(frozen=True)
class TLS:
    """TLS toward the hub: ``ca`` (PEM file the hub's certificate must chain to), ``cert`` and ``key``
    (this client's, for mutual TLS), ``server_name`` (checked in the hub's certificate; default: the
    address's host)."""

    ca: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None
    server_name: Optional[str] = None


@dataclass(frozen=True)
class VersionInfo:
    """A version the hub serves: its number, tensor count and decoded bytes."""

    version: int
    tensors: int
    bytes: int


@dataclass(frozen=True)
class UploadResult:
    """What an upload sent: the updates (all acknowledged) and the gRPC wire bytes.

    With ``within``: ``densities``, the density chosen for each update, and ``uplink``, the
    uplink this upload measured (bytes per second; 0.0 when too short to tell), which the next
    upload's choice goes by.
    """

    updates: int
    bytes_sent: int
    densities: Dict[str, float] = field(default_factory=dict)
    uplink: float = 0.0


class Fetched(Dict[str, np.ndarray]):
    """The tensors of a fetched version by name, with how the fetch went.

    ``version``: the version fetched; ``digests``: the hub's SHA-256 (hex) of each tensor's
    little-endian bytes; ``deltas``/``full``: tensors that came as deltas against the base or whole;
    ``bytes_received``: gRPC wire bytes of the fetch (with a fallback's); ``lossy``: tensors that came
    through a lossy recipe (not checked bit for bit); ``refetched``: tensors whose delta did not match
    the base, fetched again whole; ``base_note``: the hub's reason for sending full copies where deltas
    were asked for.
    """

    version: int = 0
    digests: Dict[str, str]
    deltas: int = 0
    full: int = 0
    bytes_received: int = 0
    lossy: List[str]
    refetched: List[str]
    base_note: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.digests, self.lossy, self.refetched = {}, [], []

    def __repr__(self) -> str:
        return (f"Fetched(version={self.version}, tensors={len(self)}, deltas={self.deltas}, full={self.full}, "
                f"bytes_received={self.bytes_received})")


MANIFEST = "tensorpress.json"


def _file_name(name: str) -> str:
    """The .npy file of a tensor in a fetch directory: one path component whatever the name."""
    return urllib.parse.quote(name, safe="._-") + ".npy"


def load_dir(path: str) -> Fetched:
    """The version a ``fetch(out_dir=path)`` left in ``path``, its arrays memory-mapped read-only
    from the .npy files: a base for the next fetch (``hub.fetch(base=tp.load_dir(path))``, or
    ``base=path``). bfloat16 tensors, stored as their uint16 bits, come widened to float32.

    Raises FileNotFoundError when ``path`` holds no fetched version, ValueError when its
    manifest is damaged.
    """
    try:
        with open(os.path.join(path, MANIFEST)) as f:
            m = json.load(f)
        version, files = int(m["version"]), dict(m["files"])
        digests, bf16 = dict(m.get("digests") or {}), set(m.get("bf16") or [])
    except FileNotFoundError:
        raise FileNotFoundError(f"tensorpress: {path!r} holds no fetched version (no {MANIFEST})") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"tensorpress: {os.path.join(path, MANIFEST)}: damaged manifest: {e}") from None
    out = Fetched()
    out.version, out.digests = version, digests
    for name, fn in files.items():
        if fn != _file_name(name):
            raise ValueError(f"tensorpress: {os.path.join(path, MANIFEST)}: tensor {name!r} in file {fn!r}")
        a = np.load(os.path.join(path, fn), mmap_mode="r", allow_pickle=False)
        out[name] = _dtypes.widen_bf16(np.asarray(a)) if name in bf16 else a
    return out


class _DirWriter:
    """Where a fetch into files puts its tensors: .npy files, memory-mapped, in a temporary
    directory inside ``out_dir``, moved into place with the manifest when the fetch succeeds."""

    def __init__(self, out_dir: str) -> None:
        os.makedirs(out_dir, exist_ok=True)
        self.dir = out_dir
        self.tmp = tempfile.mkdtemp(prefix=".fetch-", dir=out_dir)
        self.maps: Dict[str, np.ndarray] = {}

    def array(self, name: str, dtype: Any, shape: Tuple[int, ...]) -> np.ndarray:
        """A writable array of the tensor, backed by its file."""
        path = os.path.join(self.tmp, _file_name(name))
        if name in self.maps:  # fetched again (its delta did not match): a new file, the old map intact
            os.remove(path)
        if int(np.prod(shape, dtype=np.int64)) == 0:  # an empty file cannot be mapped
            a = np.empty(shape, dtype)
            np.save(path, a)
        else:
            a = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        self.maps[name] = a
        return a

    def commit(self, out: Fetched, bf16: List[str]) -> None:
        """Move the files of ``out`` into place, then the manifest; remove files of the version before."""
        old: Dict[str, str] = {}
        try:
            with open(os.path.join(self.dir, MANIFEST)) as f:
                old = dict(json.load(f).get("files") or {})
        except (OSError, ValueError, AttributeError):
            pass
        files = {name: _file_name(name) for name in out}
        for name, fn in files.items():
            a = self.maps.get(name)
            if isinstance(a, np.memmap):
                a.flush()
            os.replace(os.path.join(self.tmp, fn), os.path.join(self.dir, fn))
        m = {"version": out.version, "files": files, "digests": out.digests, "bf16": sorted(bf16)}
        tmp = os.path.join(self.tmp, MANIFEST)
        with open(tmp, "w") as f:
            json.dump(m, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.dir, MANIFEST))
        for name, fn in old.items():
            if name not in files and fn == _file_name(name):
                try:
                    os.remove(os.path.join(self.dir, fn))
                except OSError:
                    pass
        self.discard()

    def discard(self) -> None:
        """Remove the temporary directory and what is left in it."""
        shutil.rmtree(self.tmp, ignore_errors=True)


def _signal_checker() -> Callable[[], int]:
    """CPython's PyErr_CheckSignals, through the package's handle on the interpreter.

    A signal (Ctrl-C) caught on a thread other than the main one (a Go thread, the worker),
    or _thread.interrupt_main() from another thread, marks the signal pending without
    waking the main thread's evaluation loop; without contention for the GIL, it may go
    unseen for as long as the call lasts. Calling this from the main thread runs the
    handler (KeyboardInterrupt) at once. Elsewhere than CPython it does nothing.
    """
    api = _lib.pythonapi()
    f = getattr(api, "PyErr_CheckSignals", None) if api is not None else None
    if f is None:
        return lambda: 0
    f.restype, f.argtypes = ctypes.c_int, ()
    return f  # type: ignore[no-any-return]


_check_signals = _signal_checker()


def _cstr(s: Optional[str]) -> Optional[bytes]:
    return s.encode() if s else None


def _seconds_ms(t: Optional[float], what: str) -> int:
    if t is None:
        return 0
    if t <= 0:
        raise ValueError(f"tensorpress: {what} must be positive seconds, not {t!r}")
    return max(1, int(t * 1000))


class _Out:
    """An output buffer for a JSON result, with its spill."""

    def __init__(self, cap: int = 1 << 14) -> None:
        self.buf = bytearray(cap)
        self.c = (ctypes.c_char * cap).from_buffer(self.buf)
        self.n, self.spill, self.err = ctypes.c_int64(), tp_handle(), _lib.Err()
        self.args = (self.c, cap, ctypes.byref(self.n), ctypes.byref(self.spill), self.err.ref)

    def json(self) -> Any:
        n = self.n.value
        if n == 0:
            return None
        if self.spill.value:
            out = bytearray(n)
            c = (ctypes.c_char * n).from_buffer(out)
            h, self.spill.value = self.spill.value, 0
            rc = _lib.lib().tp_take(h, c, n, ctypes.byref(self.n), self.err.ref)
            del c
            _lib.check(rc, self.err)
            return json.loads(bytes(out))
        return json.loads(bytes(memoryview(self.buf)[:n]))


class Hub(_lib.Handle):
    """A client of the hub at ``addr``, written as gRPC users write it: ``host:port``, ``host``
    (port 7077), ``[::1]:7077``, ``dns:///host:port``, ``unix:///path``, ``http://host:port`` (plain
    text) or ``https://host:port`` (TLS, the system's roots unless ``tls`` gives a CA).

    ``tls`` turns TLS on (mutual with a client certificate); ``token_file`` holds the hub's shared
    token; ``timeout`` (seconds) bounds every call (None: no bound). It connects at the first call.
    A Hub may be shared by threads; each call releases the GIL. In the main thread, a call runs on a
    worker thread so that Ctrl-C cancels it (KeyboardInterrupt); :meth:`cancel` cancels the calls in
    flight from any thread.
    """

    _kind = "hub"

    def __init__(self, addr: str, *, tls: Optional[TLS] = None, token_file: Optional[str] = None,
                 timeout: Optional[float] = None) -> None:
        if not isinstance(addr, str):
            raise TypeError(f"tensorpress: hub address must be a str, not {type(addr).__name__}")
        if tls is not None and not isinstance(tls, TLS):
            raise TypeError(f"tensorpress: tls must be a tensorpress.TLS, not {type(tls).__name__}")
        self._timeout_ms = _seconds_ms(timeout, "timeout")
        t = tls or TLS()
        a = tp_auth(_cstr(t.ca), _cstr(t.cert), _cstr(t.key), _cstr(t.server_name), _cstr(token_file))
        h, err = tp_handle(), _lib.Err()
        _lib.check(_lib.lib().tp_hub_dial(addr.encode(), ctypes.byref(a), ctypes.byref(h), err.ref), err)
        super().__init__(h.value)
        self.addr, self.tls, self.timeout = addr, tls, timeout

    def cancel(self) -> int:
        """Cancel the calls in flight on this Hub (they raise :class:`CanceledError`); how many there were."""
        n, err = ctypes.c_int32(), _lib.Err()
        _lib.check(_lib.lib().tp_hub_cancel(self._handle(), ctypes.byref(n), err.ref), err)
        return n.value

    def _call(self, f: Callable[[], _T]) -> _T:
        """f(), on a worker thread when called from the main thread, so that Ctrl-C cancels it."""
        if threading.current_thread() is not threading.main_thread():
            return f()
        box: Dict[str, Any] = {"go": True, "begun": False}
        lock = threading.Lock()

        def run() -> None:
            with lock:
                if not box["go"]:
                    return
                box["begun"] = True
            try:
                box["r"] = f()
            except BaseException as e:
                box["e"] = e

        t = threading.Thread(target=run, name="tensorpress-hub", daemon=True)
        try:
            t.start()
            while t.is_alive():
                t.join(0.1)
                _check_signals()
        except KeyboardInterrupt:
            with lock:
                box["go"] = False  # a worker not started yet does not call
            while box["begun"] and t.is_alive():  # until the call has started and seen the cancel
                self.cancel()
                t.join(0.05)
            raise
        if "e" in box:
            raise box["e"]
        return box["r"]

    def versions(self) -> List[VersionInfo]:
        """The versions the hub serves, newest first."""
        h = self._handle()

        def call() -> Any:
            o = _Out()
            _lib.check(_lib.lib().tp_hub_versions(h, self._timeout_ms, *o.args), o.err)
            return o.json()

        return [VersionInfo(v["version"], v["tensors"], v["bytes"]) for v in self._call(call) or []]

    def fetch(self, version: Optional[int] = None, *,
              base: Union[Fetched, Tuple[int, Mapping[str, np.ndarray]], str, None] = None,
              names: Optional[List[str]] = None, require_lossless: bool = True, retries: int = 0,
              stall: Optional[float] = None, limits: Optional[Limits] = None, refetch: bool = True,
              out_dir: Optional[str] = None, fast_deltas: bool = False) -> Fetched:
        """Fetch ``version`` (None: the newest), every tensor or those in ``names``.

        ``out_dir`` writes the tensors into files rather than memory: one ``.npy`` file each
        (the name percent-encoded) and a manifest (``tensorpress.json``: version, files, digests),
        written through memory maps so that a model larger than memory fits; the arrays returned
        are those maps. The files appear only when the whole fetch succeeded and checked (they
        replace the version before, whose files no longer listed are removed); a fetch that fails
        leaves the directory as it was. ``base`` may be such a directory (``load_dir``), the
        same as ``out_dir`` included. One writer per directory at a time.

        ``base`` is a version this client holds, a :class:`Fetched` or ``(version, {name: array})``
        (read, never written): the hub sends the tensors it also has as deltas against it. A tensor
        whose delta does not give the version (the copy differs from the hub's) is fetched again whole
        when ``refetch`` is true, else :class:`BaseMismatchError` (``.base``, ``.names``) is raised.
        ``fast_deltas`` asks for the deltas that decode fastest (over 1 GB/s a core) rather than the
        smallest (about 250 MB/s): for links faster than that. ``retries`` resumes a broken stream
        that many times in a row; ``stall`` (seconds) ends a fetch that receives nothing for that
        long. bfloat16 tensors come as exactly widened float32 (so a Fetched holding them is no base
        for their deltas: they come whole again).
        """
        bv, bmap = 0, {}
        if isinstance(base, (str, os.PathLike)):
            base = load_dir(os.fspath(base))
        if isinstance(base, Fetched):
            bv, bmap = base.version, base
        elif base is not None:
            bv, bmap = base
            if not isinstance(bv, int) or bv <= 0:
                raise ValueError(f"tensorpress: base version must be a positive int, not {bv!r}")
        req: Dict[str, Any] = {"version": int(version or 0), "require_lossless": bool(require_lossless),
                               "retries": int(retries), "stall_ms": _seconds_ms(stall, "stall"),
                               "timeout_ms": self._timeout_ms, "base": int(bv),
                               "fast_deltas": bool(fast_deltas)}
        if names is not None:
            if isinstance(names, str):
                raise TypeError("tensorpress: names must be a list of tensor names, not a str")
            if out_dir is not None:
                raise ValueError("tensorpress: out_dir holds whole versions: fetch without names=")
            req["names"] = list(names)
        out = Fetched()
        files = _DirWriter(os.fspath(out_dir)) if out_dir is not None else None
        bf16: List[str] = []
        try:
            try:
                self._call(lambda: self._fetch(req, list(bmap.items()) if bv else [], limits, out, files, bf16))
            except BaseMismatchError as e:
                if not refetch or not e.names:
                    raise
                req.update(version=out.version, base=0, names=e.names)
                out.refetched = list(e.names)
                self._call(lambda: self._fetch(req, [], limits, out, files, bf16))
            if files is not None:
                files.commit(out, bf16)
        except BaseException:
            if files is not None:
                files.discard()
            raise
        return out

    def _fetch(self, req: Dict[str, Any], bases: List[Tuple[str, np.ndarray]], limits: Optional[Limits],
               out: Fetched, files: Optional[_DirWriter], all_bf16: List[str]) -> None:
        """One tp_hub_fetch into out (into files when files is set); bf16 tensors' names added to all_bf16."""
        arrays: Dict[str, np.ndarray] = {}
        bf16: List[str] = []
        failed: List[BaseException] = []

        def alloc(_user: Any, name: int, nlen: int, did: int, ndim: int, shape: Any, nbytes: int) -> Optional[int]:
            try:
                dt = _dtypes.NUMPY.get(did)
                if dt is None:
                    raise TensorpressError(f"tensorpress: fetched tensor has unknown dtype {did}")
                shp = tuple(shape[i] for i in range(ndim))
                if int(np.prod(shp, dtype=np.int64)) * np.dtype(dt).itemsize != nbytes:
                    raise TensorpressError(f"tensorpress: fetched tensor of {nbytes} bytes for shape {shp}")
                key = ctypes.string_at(name, nlen).decode("utf-8", "replace")
                a = files.array(key, dt, shp) if files is not None else np.empty(shp, dt)
                arrays[key] = a
                if did == _dtypes.BF16:
                    bf16.append(key)
                return a.ctypes.data
            except BaseException as e:  # raised again after the call; the library sees NULL
                failed.append(e)
                return None

        cb = ALLOC_FN(alloc)
        ts, keep = _descs(bases)
        rq = json.dumps(req).encode()
        lim = _lim(limits)
        o = _Out()
        rc = _lib.lib().tp_hub_fetch(self._handle(), rq, len(rq), ctypes.byref(lim) if lim is not None else None,
                                     ts, len(bases), cb, None, *o.args)
        del keep
        all_bf16 += bf16
        if failed:
            raise failed[0]
        res = o.json() or {}
        out.bytes_received += res.get("bytes_received", 0)
        if rc == _EBASE:
            be = res.get("base_error") or {}
            out.version = res.get("version", 0)
            self._merge(out, res, arrays, bf16)
            msg = _message(o.err)
            raise BaseMismatchError(msg, base=be.get("base"), names=be.get("names") or [])
        _lib.check(rc, o.err)
        out.version = res["version"]
        self._merge(out, res, arrays, bf16)

    @staticmethod
    def _merge(out: Fetched, res: Dict[str, Any], arrays: Dict[str, np.ndarray], bf16: List[str]) -> None:
        bad = set((res.get("base_error") or {}).get("names") or [])
        for k, a in arrays.items():
            if k not in bad:
                out[k] = _dtypes.widen_bf16(a) if k in bf16 else a
        out.digests.update(res.get("digests") or {})
        out.deltas += res.get("deltas", 0) - len(bad)
        out.full += res.get("full", 0)
        out.lossy += res.get("lossy") or []
        out.base_note = out.base_note or res.get("base_note", "")

    def upload(self, updates: Mapping[str, np.ndarray], spec: Optional[str] = None, *, round: int,
               weight: float = 1.0, peer: str = "", sender: Optional[Sender] = None,
               within: Optional[float] = None,
               densities: Optional[Sequence[float]] = None) -> UploadResult:
        """Send ``updates`` (float arrays by tensor name: gradients or weight deltas) for ``round``.

        Each is compressed with ``spec`` (else the sender's, else sent dense as float32) through
        ``sender``'s error feedback: an update is committed in the sender when the hub acknowledges
        it, and the others go back into its residuals when the stream breaks. The sender must have no
        update pending. Without a sender, nothing carries over between uploads. An aggregator's hub
        (``tensorpress hub --fedavg``) refuses an update for a round it has closed, and a second update
        of a tensor from the same ``peer`` in a round: :class:`StateError`, the sender keeping the
        refused updates in its residuals. To retry an upload that broke (``HubError``, a timeout)
        in the same round, call ``upload`` again with the same ``sender`` and ``peer`` and zeros as
        the updates: the residuals give the same frames, and the hub acknowledges again what it had
        counted without counting it twice.

        ``within`` (seconds) lets the autotuner choose each update's density for the upload to reach
        the hub within that time on the uplink this ``Hub``'s earlier uploads measured: among
        ``densities`` (default 0.003, 0.01, 0.03, 0.1, 0.3 and 1, the update whole), each tensor
        with its share of the time by its elements. The spec (or the sender's) must have a density
        (``topk``, ``dgc``, ...). With the link not yet measured, the first upload goes sparse.
        """
        if within is not None and not (isinstance(within, (int, float)) and within > 0):
            raise ValueError(f"tensorpress: within must be a positive number of seconds, not {within!r}")
        if densities is not None and within is None:
            raise ValueError("tensorpress: densities are chosen for an upload with a time (within=)")
        if not isinstance(round, int) or round < 0:
            raise ValueError(f"tensorpress: round must be a non-negative int, not {round!r}")
        if sender is not None and not isinstance(sender, Sender):
            raise TypeError(f"tensorpress: sender must be a tensorpress.Sender, not {type(sender).__name__}")
        items = _float32s(updates, "uploads")
        req: Dict[str, Any] = {"round": round, "weight": float(weight), "peer": peer, "spec": spec or "",
                               "timeout_ms": self._timeout_ms}
        if within is not None:
            req["within_ms"] = max(1, int(within * 1000))
            if densities is not None:
                req["densities"] = [float(d) for d in densities]
        rq = json.dumps(req).encode()
        ts, keep = _descs(items)
        h, sh = self._handle(), (sender._handle() if sender is not None else 0)

        def call() -> Any:
            o = _Out(1 << 10)
            _lib.check(_lib.lib().tp_hub_upload(h, sh, rq, len(rq), ts, len(items), *o.args), o.err)
            return o.json()

        r = self._call(call)
        del keep
        return UploadResult(r["updates"], r["bytes_sent"], dict(r.get("densities") or {}),
                            float(r.get("uplink_bytes_per_second") or 0.0))

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        tls = ", tls" if self.tls else ""
        return f"Hub({self.addr!r}{tls}{state})"


def _message(err: _lib.Err) -> str:
    """The library's message in err, freed."""
    msg = ""
    if err.p.value is not None:
        msg = err.p.value.decode("utf-8", "replace")
        _lib.lib().tp_free(ctypes.cast(err.p, ctypes.c_void_p))
        err.p.value = None
    return msg
