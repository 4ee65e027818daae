"""Gradient compressors with error feedback (Sender) and the side that adds
their frames into accumulators (Receiver)."""

from __future__ import annotations

import ctypes
from typing import Any, List, Mapping, Optional, Union

import numpy as np

from . import _lib
from ._abi import tp_acc, tp_handle, tp_tensor
from .codec import Buffer, Limits, _descs, _fill, _float32, _float32s, _lim, _prep, _scratch, _src, _take
from .errors import ArgumentError

__all__ = ["Sender", "Receiver"]


class Sender(_lib.Handle):
    """Compresses gradient updates for one peer, with error feedback.

    ``spec`` is a gradient compressor such as ``"topk(0.01)"``,
    ``"dgc(0.001) | val:fp16 | *:huff0"`` or ``"int8(4096)"``. What a frame
    leaves out is kept as a residual per tensor name and added to the next
    update of that tensor. Each update stays *pending* until :meth:`commit`
    (the peer got it) or :meth:`abort` (it was lost: the whole update goes
    back into the residual). :meth:`state` saves the committed state and
    :meth:`load_state` restores it, e.g. across processes.

    Calls on one Sender are serialized; use one Sender per peer.
    """

    _kind = "sender"

    def __init__(self, spec: str, *, device: str = "cpu") -> None:
        if device != "cpu":
            raise ValueError(f"tensorpress: Sender device {device!r}: this build supports 'cpu' only")
        if not isinstance(spec, str):
            raise TypeError(f"tensorpress: spec must be a str, not {type(spec).__name__}")
        b = spec.encode()
        h, err = tp_handle(), _lib.Err()
        _lib.check(_lib.lib().tp_sender_new(b, len(b), ctypes.byref(h), err.ref), err,
                   f"tensorpress: spec {spec!r}")
        super().__init__(h.value)
        self.spec = spec

    def compress(self, name: str, arr: Any, *, density: Optional[float] = None, spec: Optional[str] = None) -> bytes:
        """Compress the update ``arr`` (float32) of tensor ``name`` into a frame; it stays pending.

        ``density`` overrides the compressor's fraction of elements kept; ``spec`` another compressor
        (sharing this Sender's residuals). Other float dtypes are converted to float32 (a copy).
        """
        h = self._handle()
        a = _prep(_float32(name, arr, "gradient compressors"), name)
        s = _scratch
        nb = name.encode()
        keep = _fill(s.t, a, nb, 2, False, None)
        sb = spec.encode() if spec else None
        d = 0.0 if density is None else float(density)
        L = _lib.lib()
        cap = max(a.nbytes + (a.nbytes >> 3) + 4096, 1 << 16)
        out, addr = s.out_buf(cap)
        rc = L.tp_sender_compress(h, s.t_ref, sb, len(sb) if sb else 0, d, addr, cap, s.n_ref,
                                  s.spill_ref, s.err.ref)
        del keep
        _lib.check(rc, s.err, f"tensorpress: array {name!r}")
        return _result(s, out)

    def plan(self, updates: Mapping[str, Any], *, spec: Optional[str] = None) -> None:
        """Rank one whole update (float arrays by tensor name) for a spec that selects over it.

        With ``topk(r,model=on)`` (this Sender's spec, or ``spec``), the ``k = ceil(r*N)`` largest
        values of all of ``updates`` (plus their residuals) are kept, each tensor its share (at
        least one element): call ``plan`` with the whole update, then :meth:`compress` each of
        its tensors (without a ``density``). For other specs it does nothing.
        """
        items = _float32s(updates, "gradient compressors")
        ts, keep = _descs(items)
        sb = spec.encode() if spec else None
        err = _lib.Err()
        rc = _lib.lib().tp_sender_plan(self._handle(), ts, len(items), sb, len(sb) if sb else 0, err.ref)
        del keep
        _lib.check(rc, err, "tensorpress: plan")

    def commit(self, n: Optional[int] = None) -> None:
        """Commit the ``n`` oldest pending updates (all by default): their frames arrived."""
        err = _lib.Err()
        _lib.check(_lib.lib().tp_sender_commit(self._handle(), -1 if n is None else int(n), err.ref), err)

    def abort(self, last: bool = False) -> None:
        """Return the pending updates (or only the last one) to the residuals: their frames were lost."""
        err = _lib.Err()
        _lib.check(_lib.lib().tp_sender_abort(self._handle(), 1 if last else 0, err.ref), err)

    @property
    def pending(self) -> int:
        """The number of pending updates."""
        n, err = ctypes.c_int32(), _lib.Err()
        _lib.check(_lib.lib().tp_sender_pending(self._handle(), ctypes.byref(n), err.ref), err)
        return n.value

    def set_epoch(self, epoch: float) -> None:
        """Set the epoch that compressors with a warm-up (DGC) read."""
        err = _lib.Err()
        _lib.check(_lib.lib().tp_sender_set_epoch(self._handle(), float(epoch), err.ref), err)

    def state(self) -> bytes:
        """The committed state (residuals, momentum) as bytes; :class:`StateError` while updates are pending."""
        h = self._handle()
        s = _scratch
        cap = 1 << 16
        out, addr = s.out_buf(cap)
        rc = _lib.lib().tp_sender_state(h, addr, cap, s.n_ref, s.spill_ref, s.err.ref)
        _lib.check(rc, s.err)
        return _result(s, out)

    def load_state(self, state: Buffer) -> None:
        """Replace the state by one :meth:`state` saved (refused while updates are pending)."""
        p, n, keep = _src(state)
        err = _lib.Err()
        _lib.check(_lib.lib().tp_sender_load_state(self._handle(), p, n, err.ref), err)

    def __repr__(self) -> str:
        if self.closed:
            return f"Sender({self.spec!r}, closed)"
        return f"Sender({self.spec!r}, pending={self.pending})"


def _result(s: Any, buf: Any) -> bytes:
    """The output of the call just made: in buf, or kept in s.spill when it did not fit."""
    n = s.n.value
    if s.spill.value:
        return _take(s, n)
    return bytes(memoryview(buf)[:n])


class Receiver(_lib.Handle):
    """Adds gradient frames, weighted, into float32 accumulators.

    Sparse frames are scattered into the accumulator, never densified. A bad
    tensor adds nothing (in a frame of several, those before it stay added). ``limits`` bound what a frame may claim; by default a
    frame decodes at most 1 MiB through the stages of some MB/s (floatcm,
    floatrank: ``Limits.max_slow_decoded``). A frame that would add a NaN or an
    infinity is refused (:class:`NonFiniteError`).
    """

    _kind = "receiver"

    def __init__(self, *, limits: Optional[Limits] = None) -> None:
        lim = _lim(limits)
        h, err = tp_handle(), _lib.Err()
        _lib.check(_lib.lib().tp_receiver_new(ctypes.byref(lim) if lim is not None else None,
                                             ctypes.byref(h), err.ref), err)
        super().__init__(h.value)

    def add(self, frame: Buffer, weight: float = 1.0, *,
            into: Union[np.ndarray, Mapping[str, np.ndarray]]) -> int:
        """Add ``weight`` times the tensors of ``frame`` (one or more frames) into ``into``.

        ``into`` is one float32 array (it takes any tensor of its shape) or a mapping from tensor
        names to float32 arrays; each must be C-contiguous and writable, of the tensor's shape.
        Returns the bytes of frames added.
        """
        h = self._handle()
        items: List[Any] = [(None, into)] if isinstance(into, np.ndarray) else list(into.items())
        accs = (tp_acc * max(len(items), 1))()
        keep = []
        for i, (name, a) in enumerate(items):
            label = name if name is not None else "into"
            if not isinstance(a, np.ndarray) or a.dtype != np.float32 or not a.flags.c_contiguous \
                    or not a.flags.writeable or not a.flags.aligned or a.dtype.byteorder == ">":
                raise ArgumentError(f"tensorpress: accumulator {label!r} must be a writable C-contiguous "
                                    f"float32 array")
            shape = (ctypes.c_int64 * a.ndim)(*a.shape) if a.ndim else None
            nb = name.encode() if name is not None else None
            keep.append((shape, nb))
            accs[i].name, accs[i].name_len = nb, len(nb) if nb else 0
            accs[i].data = ctypes.cast(a.ctypes.data, ctypes.POINTER(ctypes.c_float)) if a.size else None
            accs[i].nelem, accs[i].ndim, accs[i].shape = a.size, a.ndim, shape
        p, n, kf = _src(frame)
        consumed, err = ctypes.c_int64(), _lib.Err()
        rc = _lib.lib().tp_receiver_add(h, p, n, float(weight), accs, len(items), ctypes.byref(consumed), err.ref)
        _lib.check(rc, err)
        return consumed.value

    def __repr__(self) -> str:
        return "Receiver(closed)" if self.closed else "Receiver()"
