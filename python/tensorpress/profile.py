"""Profiles: YAML files that choose recipes and limits per tensor (see the
repository's docs/PROFILES.md)."""

from __future__ import annotations

import ctypes
import os
from typing import List, Union

from . import _lib
from ._abi import tp_handle

__all__ = ["Profile"]


class Profile(_lib.Handle):
    """A loaded, validated profile. Pass it as ``profile=`` to encode and decode.

    Make one with :meth:`load` or :meth:`builtin`.
    """

    _kind = "profile"

    def __init__(self, h: int, name: str) -> None:
        super().__init__(h)
        self.name = name

    @classmethod
    def load(cls, src: Union[str, bytes, "os.PathLike[str]"]) -> "Profile":
        """Load a profile from a file path, or from YAML text (str containing a newline, or bytes)."""
        name = "<text>"
        if isinstance(src, bytes):
            data = src
        elif isinstance(src, str) and "\n" in src:
            data = src.encode()
        else:
            name = os.fspath(src)
            with open(name, "rb") as f:
                data = f.read()
        h, err = tp_handle(), _lib.Err()
        _lib.check(_lib.lib().tp_profile_load(data, len(data), ctypes.byref(h), err.ref), err,
                   f"tensorpress: profile {name}")
        return cls(h.value, name)

    @classmethod
    def builtin(cls, name: str) -> "Profile":
        """A built-in profile by name (see :meth:`builtins`)."""
        h, err = tp_handle(), _lib.Err()
        _lib.check(_lib.lib().tp_profile_builtin(name.encode(), ctypes.byref(h), err.ref), err)
        return cls(h.value, name)

    @staticmethod
    def builtins() -> List[str]:
        """The names of the built-in profiles."""
        n, err = ctypes.c_int64(), _lib.Err()
        L = _lib.lib()
        _lib.check(L.tp_profile_builtins(None, 0, ctypes.byref(n), err.ref), err)
        buf = ctypes.create_string_buffer(n.value + 1)
        _lib.check(L.tp_profile_builtins(buf, n.value, ctypes.byref(n), err.ref), err)
        return buf.raw[: n.value].decode().split("\n") if n.value else []

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        return f"Profile({self.name!r}{state})"
