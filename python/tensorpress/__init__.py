"""tensorpress from Python: tensor frames, gradient compressors with error
feedback and a model hub client, over the Go library through its C ABI
(ctypes and numpy only).

    >>> import numpy as np, tensorpress as tp
    >>> w = np.random.default_rng(0).normal(0, 0.02, (256, 128)).astype(np.float32)
    >>> frame = tp.encode(w, recipe="shuffle4 | plane3:huff0", name="fc1.w")
    >>> np.array_equal(tp.decode(frame), w)
    True

The shared library is loaded at the first call (``$TENSORPRESS_LIB``, else
``libtensorpress.so`` beside this file; ``make python`` builds it there).
"""

from __future__ import annotations

from . import _lib
from .codec import (Limits, TensorInfo, _stats, check_recipe, decode, decode_all, decode_bytes, decode_into,
                    encode, encode_bytes, encode_into, info, is_lossy)
from .errors import (ArgumentError, AuthError, BaseMismatchError, CanceledError, ChecksumError, CorruptError,
                     HandleError, HubError, InternalError, LimitError, LossyError, NonFiniteError,
                     NotAFrameError, NotFoundError, RecipeError, StateError, TensorpressError,
                     TensorpressTimeoutError, TruncatedError, UnsupportedError)
from .gradient import Receiver, Sender
from .hub import TLS, Fetched, Hub, UploadResult, VersionInfo, load_dir
from .profile import Profile

__all__ = [
    "encode", "encode_into", "encode_bytes", "decode", "decode_into", "decode_all", "decode_bytes", "info",
    "check_recipe", "is_lossy", "Limits", "TensorInfo", "Profile", "Sender", "Receiver",
    "Hub", "TLS", "Fetched", "VersionInfo", "UploadResult", "load_dir",
    "release_memory", "live_handles", "version",
    "TensorpressError", "CorruptError", "ChecksumError", "TruncatedError", "NotAFrameError", "LimitError",
    "UnsupportedError", "LossyError", "RecipeError", "ArgumentError", "StateError", "NonFiniteError",
    "NotFoundError", "BaseMismatchError", "HubError", "AuthError", "TensorpressTimeoutError",
    "CanceledError", "HandleError", "InternalError",
]


def release_memory() -> None:
    """Return the Go heap's free memory to the operating system."""
    _lib.lib().tp_release_memory()


def live_handles() -> int:
    """The number of library objects alive (profiles, senders, receivers, spilled outputs)."""
    return int(_lib.lib().tp_live_handles())


def version() -> str:
    """The library's version string."""
    return _lib.lib().tp_version().decode()
