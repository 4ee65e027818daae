"""Exceptions raised by tensorpress, one class per error code of the C ABI.

Every exception derives from :class:`TensorpressError`. Errors about the
caller's input also derive from the matching built-in class, so that code
written against plain Python keeps working: a bad recipe is a ``ValueError``,
a corrupt frame is a ``ValueError``, a missing version a ``LookupError``.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Type

__all__ = [
    "TensorpressError", "CorruptError", "ChecksumError", "TruncatedError", "NotAFrameError",
    "LimitError", "UnsupportedError", "LossyError", "RecipeError", "NonFiniteError",
    "StateError", "NotFoundError", "BaseMismatchError", "HubError", "AuthError",
    "TensorpressTimeoutError", "CanceledError", "HandleError", "InternalError",
]


class TensorpressError(Exception):
    """Base class of every tensorpress error. ``code`` is the C ABI's code."""

    code: int = -1


class CorruptError(TensorpressError, ValueError):
    """The input is not a valid tensorpress frame (``TP_ECORRUPT``)."""

    code = 1


class ChecksumError(CorruptError):
    """A header or payload CRC-32C did not match (``TP_ECHECKSUM``)."""

    code = 2


class TruncatedError(CorruptError):
    """The input ends inside a frame or a tensor (``TP_ETRUNCATED``)."""

    code = 3


class NotAFrameError(CorruptError):
    """The input is not tensorpress data at all, e.g. a gzip file (``TP_ENOTFRAME``)."""

    code = 4


class LimitError(TensorpressError):
    """The input asks for more than the decoder's limits allow (``TP_ELIMIT``)."""

    code = 5


class UnsupportedError(TensorpressError):
    """An unknown format version, stage, dtype or critical extension (``TP_EUNSUPPORTED``)."""

    code = 6


class LossyError(TensorpressError, ValueError):
    """A lossy recipe was asked for on a tensor that must stay lossless (``TP_ELOSSY``)."""

    code = 7


class RecipeError(TensorpressError, ValueError):
    """A recipe, gradient spec or profile does not parse or does not fit (``TP_ERECIPE``)."""

    code = 8


class ArgumentError(TensorpressError, ValueError):
    """A bad argument: dtype, shape, buffer size (``TP_EARG``)."""

    code = 9


class StateError(TensorpressError):
    """A call not allowed in the object's state, a bad saved state, or an update the hub refused because
    its round is closed or it already counted the peer's update of the tensor (``TP_ESTATE``)."""

    code = 10


class NonFiniteError(TensorpressError, ValueError):
    """A NaN or an infinity where none may be (``TP_ENONFINITE``).

    A quantizer's input, or an update a :class:`Receiver` would add (one NaN would make its
    accumulator NaN for good; ``weight`` times a value past float32's range counts too).
    """

    code = 11


class NotFoundError(TensorpressError, LookupError):
    """No such version or tensor on the hub (``TP_ENOTFOUND``)."""

    code = 12


class BaseMismatchError(TensorpressError):
    """The hub's delta base is not the caller's (``TP_EBASE``)."""

    code = 13

    def __init__(self, msg: str = "", base: Optional[str] = None, names: Sequence[str] = ()) -> None:
        super().__init__(msg)
        self.base = base
        self.names = list(names)


class HubError(TensorpressError, ConnectionError):
    """The hub could not be reached (``TP_EUNAVAILABLE``)."""

    code = 14


class AuthError(TensorpressError, PermissionError):
    """The hub refused the credentials (``TP_EAUTH``)."""

    code = 15


class TensorpressTimeoutError(TensorpressError, TimeoutError):
    """A deadline passed or a transfer stalled (``TP_ETIMEOUT``)."""

    code = 16


class CanceledError(TensorpressError):
    """The call was canceled (``TP_ECANCELED``)."""

    code = 17


class HandleError(TensorpressError, ValueError):
    """The object was closed, or a handle of another kind was used (``TP_EHANDLE``)."""

    code = 18


class InternalError(TensorpressError, RuntimeError):
    """A bug in tensorpress (a recovered panic): please report it (``TP_EINTERNAL``)."""

    code = 99


BY_CODE: Dict[int, Type[TensorpressError]] = {
    c.code: c
    for c in (CorruptError, ChecksumError, TruncatedError, NotAFrameError, LimitError,
              UnsupportedError, LossyError, RecipeError, ArgumentError, StateError,
              NonFiniteError, NotFoundError, BaseMismatchError, HubError, AuthError,
              TensorpressTimeoutError, CanceledError, HandleError, InternalError)
}

__all__.append("ArgumentError")


def from_code(code: int, msg: str) -> TensorpressError:
    """The exception for a C ABI code and message."""
    cls = BY_CODE.get(code, InternalError)
    return cls(msg)
