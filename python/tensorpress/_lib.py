"""Loading libtensorpress and turning its error codes into exceptions.

The library is loaded lazily, at the first call, from ``$TENSORPRESS_LIB`` or
from this package's directory. ctypes releases the GIL around every call, so
Python threads encode and decode in parallel.

The Go runtime does not survive ``fork()``: once the library is loaded, a
forked child that calls it gets a RuntimeError (use the 'spawn' start method
of multiprocessing).
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any, Optional, TypeVar

from . import _abi
from .errors import from_code

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_forked = False


def _after_fork() -> None:
    global _forked
    if _lib is not None:
        _forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def path() -> str:
    """Where the library is loaded from."""
    return os.environ.get("TENSORPRESS_LIB") or os.path.join(os.path.dirname(__file__), "libtensorpress.so")


def lib() -> Any:
    """The loaded library, with the argument and result types of every function."""
    global _lib
    if _forked:
        raise RuntimeError("tensorpress: the library was loaded before fork(); the Go runtime does not survive "
                           "it: use multiprocessing's 'spawn' start method")
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            p = path()
            if not os.path.exists(p):
                raise ImportError(f"tensorpress: {p} not found: build it with `make python` from the repository, "
                                  f"or install the package with pip (which runs go build)")
            dll = ctypes.CDLL(p)
            for name, (res, args) in _abi.SIGNATURES.items():
                f = getattr(dll, name)
                f.restype, f.argtypes = res, args
            if (v := dll.tp_abi_version()) != _abi.ABI_VERSION:
                raise ImportError(f"tensorpress: {p} speaks C ABI version {v}, this package {_abi.ABI_VERSION}: "
                                  f"rebuild it with `make python` (or reinstall the package)")
            _lib = dll
    return _lib


class Err:
    """A ``char *`` out-argument for the error message, reused per thread."""

    __slots__ = ("p", "ref")

    def __init__(self) -> None:
        self.p = ctypes.c_char_p()
        self.ref = ctypes.byref(self.p)


def pythonapi() -> Optional[ctypes.PyDLL]:
    """A private handle on the interpreter's C API (CPython), or None elsewhere.

    ctypes.pythonapi's function objects are shared by every library in the process: their
    restype and argtypes are not ours to set, so the package sets them on its own handle.
    """
    try:
        return ctypes.PyDLL(ctypes.pythonapi._name, handle=ctypes.pythonapi._handle)
    except (AttributeError, OSError, ValueError):
        return None


def check(rc: int, err: Err, context: str = "") -> None:
    """Raise the exception of code rc, with the message the library made (freed here)."""
    if rc == 0:
        return
    msg = ""
    if err.p.value is not None:
        msg = err.p.value.decode("utf-8", "replace")
        lib().tp_free(ctypes.cast(err.p, ctypes.c_void_p))
        err.p.value = None
    if context and context not in msg:
        msg = f"{context}: {msg}"
    raise from_code(rc, msg)


class Handle:
    """Base of the classes that own a library object (profiles, senders, receivers).

    ``close()`` releases it; the class is a context manager; a
    ``weakref.finalize`` backstop closes it when it is collected.
    """

    _kind = "object"

    def __init__(self, h: int) -> None:
        self._h = h
        self._finalizer = weakref.finalize(self, _close_quietly, h)

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._h == 0

    def _handle(self) -> int:
        if self._h == 0:
            raise ValueError(f"tensorpress: {self._kind} is closed")
        return self._h

    def close(self) -> None:
        """Release the library object (idempotent)."""
        if self._h:
            h, self._h = self._h, 0
            self._finalizer.detach()
            err = Err()
            check(lib().tp_close(h, err.ref), err)

    def __enter__(self: "_H") -> "_H":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_H = TypeVar("_H", bound=Handle)


def _close_quietly(h: int) -> None:
    if _lib is not None and not _forked:
        _lib.tp_close(h, None)
