"""Flower adapter: a client mod that compresses replies and a strategy wrapper that restores them.

Written against Flower framework-1.29.0 (``flwr.app``, ``flwr.serverapp.strategy``)
and tested against a stand-in that copies its signatures and behaviour
(``python/tests/integrations/standins/flwr_standin.py``, see python/INTEGRATIONS.md);
it has not been run against a real Flower installation.

Two modes:

- ``recipe=`` (stateless): each float array of the reply is encoded as one
  tensorpress frame (``tp.encode``). A lossless recipe (or the default,
  ``recipe=None``) restores the arrays bit for bit; ``"fp16"`` or
  ``"int8(4096) | q:huff0"`` within the recipe's stated bound.
- ``spec=`` (gradient, error feedback): the mod compresses the *update*
  ``trained - global``, where ``global`` is the ArrayRecord of the incoming
  message, with a ``tp.Sender`` whose residual lives in ``Context.state``
  (Flower keeps it on the node across rounds, also when each message runs in
  a fresh process). The server computes ``global + decoded``; what was not
  sent stays in the residual: ``decoded + residual_new == update + residual_old``.

Client::

    from flwr.clientapp import ClientApp
    from tensorpress.integrations.flower import tensorpress_mod

    app = ClientApp(mods=[tensorpress_mod(spec="topk(0.05) | val:fp16 | *:huff0")])

The mod must be ``mods[0]``, the outermost: Flower wraps ``reversed(mods)``, so
the first mod sees the reply last, and other mods (DP clipping) then work on
plain arrays.

Server::

    from flwr.serverapp.strategy import FedAvg
    from tensorpress.integrations.flower import TensorpressStrategy

    strategy = TensorpressStrategy(FedAvg())
    strategy.start(grid=grid, initial_arrays=arrays, num_rounds=10)

Compression happens inside the ClientApp, before the reply is built and before
Flower computes its content-addressed object ids (``push_appoutputs``); nothing
changes bytes in transit. A compressed Array keeps its real ``dtype`` and
``shape`` (``arrays_size_mod`` reads them) and carries the frame in ``data``
with ``stype`` :data:`STYPE` or :data:`STYPE_DELTA`; ``Array.numpy()`` refuses
those, so a reply must pass :class:`TensorpressStrategy` (or
:func:`restore_arrays`) before a strategy reads it.

Compressors with a schedule (DGC's ``warmup=``) take the round that Flower's
strategies put in the train config (``config["server-round"]``, FedAvg and its
kin): epoch = round - 1. Without it the epoch stays 0.

Error feedback commits when the mod returns (optimistic): Flower has no
acknowledgement a mod could wait for, so a reply lost in transit loses that
round's update.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

import tensorpress as tp
from tensorpress.integrations._names import named

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, \
        MetricRecord, RecordDict
    from flwr.serverapp.strategy import Strategy
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError("tensorpress.integrations.flower needs Flower >= 1.29 "
                      "(flwr.app, flwr.serverapp.strategy)") from _e

if TYPE_CHECKING:  # pragma: no cover
    from flwr.serverapp import Grid

__all__ = ["STYPE", "STYPE_DELTA", "STATE_KEY", "tensorpress_mod", "TensorpressStrategy",
           "compress_arrays", "restore_arrays"]

STYPE = "tensorpress/v1"
"""stype of an Array whose ``data`` is a frame of the array's own values."""

STYPE_DELTA = "tensorpress/v1+delta"
"""stype of an Array whose ``data`` is a gradient frame of ``trained - global``."""

STATE_KEY = "tensorpress"
"""Key of the ArrayRecord in ``Context.state`` holding the Sender's committed state."""

ClientAppCallable = Callable[[Message, Context], Message]
Mod = Callable[[Message, Context, ClientAppCallable], Message]


def _eligible(arr: np.ndarray, min_size: int) -> bool:
    return arr.dtype.kind == "f" and arr.size >= min_size


def _numpy(name: str, a: Array) -> np.ndarray:
    if a.stype in (STYPE, STYPE_DELTA):
        raise TypeError(f"tensorpress: array '{name}' is compressed ({a.stype}); "
                        "restore it with restore_arrays or TensorpressStrategy first")
    try:
        return a.numpy()
    except TypeError as e:
        raise TypeError(f"tensorpress: array '{name}': {e}") from e


def _frame_array(arr: np.ndarray, frame: bytes, stype: str) -> Array:
    return Array(dtype=str(arr.dtype), shape=tuple(int(d) for d in arr.shape), stype=stype,
                 data=bytes(frame))


def compress_arrays(record: ArrayRecord, *, recipe: str | None = None,
                    min_size: int = 1024) -> ArrayRecord:
    """A new ArrayRecord with every float array of ``min_size`` elements or more encoded.

    Args:
        record: arrays with ``stype="numpy.ndarray"`` (legacy arrays with an
            empty dtype and shape are read through ``.numpy()``).
        recipe: a tensorpress recipe (``"shuffle4 | plane3:huff0"``, ``"fp16"``);
            None picks one per tensor by its class, losslessly.
        min_size: smaller arrays travel unchanged.

    Returns:
        A new record; ``record`` is not modified. Compressed entries have
        ``stype`` :data:`STYPE`, the real dtype and shape, and the frame as data.

    Raises:
        tensorpress.RecipeError: a bad recipe, naming the array.
        TypeError: an Array that cannot be read, naming it.
    """
    lossy = recipe is not None and tp.is_lossy(recipe)
    out: dict[str, Array] = {}
    for name, a in record.items():
        if a.stype in (STYPE, STYPE_DELTA):
            out[name] = a
            continue
        arr = _numpy(name, a)
        if not _eligible(arr, min_size):
            out[name] = a
            continue
        # Quantizers take float32 or float64; float16 widens exactly and is
        # narrowed back on restore (the Array keeps the source dtype).
        src = arr.astype(np.float32) if lossy and arr.dtype.itemsize < 4 else arr
        try:
            frame = tp.encode(src, recipe=recipe, name=name)
        except (tp.TensorpressError, TypeError, ValueError) as e:
            raise named(name, e) from e
        out[name] = _frame_array(arr, frame, STYPE)
    return ArrayRecord(out)


def _apply_update(name: str, a: Array, base: Mapping[str, Array] | None,
                  rx: Any) -> np.ndarray:
    if base is None or name not in base:
        raise ValueError(f"tensorpress: array '{name}' is an update against the round's global "
                         "model, which has no such array (is the strategy wrapped in "
                         "TensorpressStrategy, and configure_train called first?)")
    g = _numpy(name, base[name])
    if a.shape and tuple(g.shape) != tuple(a.shape):
        raise ValueError(f"tensorpress: array '{name}': update of shape {tuple(a.shape)} for a "
                         f"global array of shape {tuple(g.shape)}")
    try:
        if g.dtype == np.float32:
            w = np.array(g, dtype=np.float32, order="C", copy=True)
            rx.add(a.data, 1.0, into={name: w})
            return w
        d = np.zeros(g.shape, np.float32)
        rx.add(a.data, 1.0, into={name: d})
    except (tp.TensorpressError, TypeError, ValueError, KeyError) as e:
        raise named(name, e) from e
    return (g + d).astype(g.dtype)


def _decode_weights(name: str, a: Array, limits: Any = None) -> np.ndarray:
    try:
        arr = tp.decode(a.data, limits=limits)
    except (tp.TensorpressError, TypeError, ValueError) as e:
        raise named(name, e) from e
    if a.shape and tuple(arr.shape) != tuple(a.shape):
        raise tp.CorruptError(f"tensorpress: array '{name}': frame holds shape "
                              f"{tuple(arr.shape)}, the Array says {tuple(a.shape)}")
    if a.dtype and str(arr.dtype) != a.dtype:
        try:
            arr = arr.astype(np.dtype(a.dtype))
        except TypeError as e:
            raise TypeError(f"tensorpress: array '{name}': dtype {a.dtype!r}: {e}") from e
    return arr


def restore_arrays(record: ArrayRecord, base: Mapping[str, Array] | None = None, *,
                   limits: Any = None) -> ArrayRecord:
    """A new ArrayRecord with every tensorpress Array turned back into a numpy Array.

    Use it in custom strategies (``aggregate_train``) or on the server's side of
    a legacy ``aggregate_fit`` after building an ArrayRecord from its tensors.

    Args:
        record: a reply's ArrayRecord; entries without a tensorpress stype are
            kept as they are.
        base: the round's global ArrayRecord; required for :data:`STYPE_DELTA`
            entries, which become ``base + decoded`` in the base's dtype (sparse
            frames are scattered into the copy, never densified).
        limits: decode limits for the frames, weights and updates alike (a
            peer's frames: lower ``max_slow_decoded`` where they may not use
            floatcm or floatrank; updates are bounded at 1 MiB of those by
            default, weights at 64 MiB).

    Raises:
        tensorpress.CorruptError (and the other ``tp`` errors): a bad frame,
            naming the array.
        ValueError: an update with no global array to apply it to.
    """
    rx = None
    out: dict[str, Array] = {}
    for name, a in record.items():
        if a.stype == STYPE:
            out[name] = Array.from_numpy_ndarray(_decode_weights(name, a, limits))
        elif a.stype == STYPE_DELTA:
            rx = rx if rx is not None else tp.Receiver(limits=limits)
            out[name] = Array.from_numpy_ndarray(_apply_update(name, a, base, rx))
        else:
            out[name] = a
    return ArrayRecord(out)


def _has_tp(record: ArrayRecord) -> bool:
    return any(a.stype in (STYPE, STYPE_DELTA) for a in record.values())


def _restore_incoming(msg: Message) -> None:
    """Downlink: decode compressed arrays of ``msg`` into a new RecordDict."""
    if not msg.has_content() or not any(_has_tp(r) for r in msg.content.array_records.values()):
        return
    content = RecordDict(dict(msg.content))
    for key, rec in list(msg.content.array_records.items()):
        if _has_tp(rec):
            content[key] = restore_arrays(rec)
    msg.content = content


def _load_sender(spec: str, ctxt: Context) -> Any:
    sender = tp.Sender(spec)
    rec = ctxt.state.array_records.get(STATE_KEY)
    if rec is not None and "memory" in rec:
        try:
            sender.load_state(rec["memory"].numpy().tobytes())
        except BaseException:
            _close(sender)
            raise
    return sender


def _save_sender(sender: Any, ctxt: Context) -> None:
    state = np.frombuffer(sender.state(), dtype=np.uint8)
    record = ArrayRecord({"memory": Array.from_numpy_ndarray(state)})
    ctxt.state.array_records[STATE_KEY] = record


def _server_round(msg: Message) -> int | None:
    """The round Flower's strategies put in the train config (``config["server-round"]``)."""
    if not msg.has_content():
        return None
    for rec in msg.content.config_records.values():
        r = rec.get("server-round")
        if isinstance(r, int) and not isinstance(r, bool):
            return r
    return None


def _close(obj: Any) -> None:
    close = getattr(obj, "close", None)
    if close is not None:
        close()


def _update(trained: np.ndarray, base: np.ndarray) -> np.ndarray:
    """``trained - base`` as float32 (the gradient Sender's type), rounded once."""
    if trained.dtype.itemsize < 4:
        return trained.astype(np.float32) - base.astype(np.float32)
    return np.ascontiguousarray(trained - base, dtype=np.float32)


def _compress_updates(record: ArrayRecord, base: Mapping[str, Array] | None, sender: Any,
                      min_size: int) -> ArrayRecord:
    out: dict[str, Array] = {}
    updates: dict[str, np.ndarray] = {}
    trained: dict[str, np.ndarray] = {}
    for name, a in record.items():
        arr = _numpy(name, a)
        if not _eligible(arr, min_size):
            out[name] = a
            continue
        if base is None or name not in base:
            raise ValueError(f"tensorpress: array '{name}' of the reply has no counterpart in "
                             "the incoming message's arrays; spec= compresses trained - global")
        g = _numpy(name, base[name])
        if g.shape != arr.shape:
            raise ValueError(f"tensorpress: array '{name}': trained shape {arr.shape} differs "
                             f"from the global shape {g.shape}")
        updates[name], trained[name] = _update(arr, g), arr
    sender.plan(updates)  # topk(r,model=on): one k over the whole update
    for name, update in updates.items():
        try:
            frame = sender.compress(name, update)
        except (tp.TensorpressError, TypeError, ValueError) as e:
            raise named(name, e) from e
        out[name] = _frame_array(trained[name], frame, STYPE_DELTA)
    return ArrayRecord({name: out[name] for name in record.keys()})


def tensorpress_mod(*, spec: str | None = None, recipe: str | None = None, key: str = "arrays",
                    min_size: int = 1024) -> Mod:
    """A Flower client mod that compresses the reply's ArrayRecord ``key`` on train messages.

    Args:
        spec: a gradient spec (``"topk(0.05)"``, ``"dgc(0.01) | val:fp16 | *:huff0"``):
            compress ``trained - global`` with error feedback kept in ``Context.state``.
        recipe: a codec recipe (``"fp16"``, ``"int8(4096) | q:huff0"``): compress the
            weights themselves. With neither, the weights go through the default
            lossless choice.
        key: the ArrayRecord to compress (FedAvg's ``arrayrecord_key``).
        min_size: float arrays with fewer elements travel unchanged.

    Returns:
        ``mod(msg, ctxt, call_next) -> Message``. Put it first in ``mods``.

    Raises:
        ValueError: both ``spec`` and ``recipe``, or ``min_size < 0``.
        tensorpress.RecipeError: a bad recipe or spec (checked here, not at the first round).
    """
    if spec is not None and recipe is not None:
        raise ValueError("tensorpress_mod: give spec= (updates) or recipe= (weights), not both")
    if min_size < 0:
        raise ValueError(f"tensorpress_mod: min_size must be >= 0, got {min_size}")
    if spec is not None:
        _close(tp.Sender(spec))  # a bad spec fails here
    elif recipe is not None:
        tp.is_lossy(recipe)  # a bad recipe fails here

    def mod(msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        _restore_incoming(msg)
        base = msg.content.array_records.get(key) if msg.has_content() else None
        rnd = _server_round(msg)
        out = call_next(msg, ctxt)
        if out.has_error() or msg.metadata.message_type != MessageType.TRAIN:
            return out
        if not out.has_content() or key not in out.content.array_records:
            return out
        record = out.content.array_records[key]
        if spec is None:
            out.content.array_records[key] = compress_arrays(record, recipe=recipe,
                                                             min_size=min_size)
            return out
        sender = _load_sender(spec, ctxt)
        try:
            if rnd is not None:
                sender.set_epoch(float(rnd - 1))  # DGC's warm-up: epochs counted from 0
            new = _compress_updates(record, base, sender, min_size)
            sender.commit()
            _save_sender(sender, ctxt)
        except BaseException:
            sender.abort()
            raise
        finally:
            _close(sender)
        out.content.array_records[key] = new
        return out

    return mod


class TensorpressStrategy(Strategy):
    """Wraps a Flower strategy: restores tensorpress arrays of every reply, then delegates.

    Modelled on Flower's ``DifferentialPrivacyFixedClippingBase``: it holds
    ``self.strategy``, rewrites each reply's ArrayRecords in ``aggregate_train``
    and delegates every call, so FedAvg's ``.numpy()`` and its
    one-ArrayRecord-per-reply check pass on plain arrays. ``start`` is
    inherited, so its calls go through the wrapper.

    Args:
        strategy: the strategy doing the aggregation (FedAvg, FedProx, ...).
        downlink: a lossless recipe to send the global arrays compressed (one
            encoding for every message, so broadcast deduplication keeps
            working); the client mod restores them. None sends them plain.
        min_size: arrays below this many elements are not compressed downlink.
        limits: decode limits for the replies' frames (see :func:`restore_arrays`).

    Raises:
        ValueError: a lossy ``downlink`` (clients apply updates to the global
            arrays, so both sides must hold the same bits).
    """

    def __init__(self, strategy: Strategy, *, downlink: str | None = None, min_size: int = 1024,
                 limits: Any = None) -> None:
        if downlink is not None and tp.is_lossy(downlink):
            raise ValueError(f"TensorpressStrategy: downlink recipe {downlink!r} is lossy; "
                             "updates are applied to the global arrays, which must be exact")
        self.strategy = strategy
        self.downlink = downlink
        self.min_size = min_size
        self.limits = limits
        self._global: tuple[int, ArrayRecord] | None = None

    def _down(self, arrays: ArrayRecord) -> ArrayRecord:
        if self.downlink is None:
            return arrays
        return compress_arrays(arrays, recipe=self.downlink, min_size=self.min_size)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Remember the round's global arrays, then delegate."""
        self._global = (server_round, arrays)
        return self.strategy.configure_train(server_round, self._down(arrays), config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Restore every reply's tensorpress arrays, then delegate."""
        replies = list(replies)
        base = self._global[1] if self._global and self._global[0] == server_round else None
        for msg in replies:
            if msg.has_error() or not msg.has_content():
                continue
            for key, rec in list(msg.content.array_records.items()):
                if _has_tp(rec):
                    msg.content.array_records[key] = restore_arrays(rec, base, limits=self.limits)
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """Delegate (arrays compressed as for training when ``downlink`` is set)."""
        return self.strategy.configure_evaluate(server_round, self._down(arrays), config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        """Delegate."""
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        """Delegate."""
        self.strategy.summary()
