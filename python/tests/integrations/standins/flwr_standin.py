"""Stand-in for Flower (``flwr``), framework-1.29.0.

This is NOT Flower. It reproduces, written anew, only the signatures and the
behaviour that ``tensorpress.integrations.flower`` relies on, as read from
``flwrlabs/flower`` at tag ``framework-1.29.0`` (paths under
``framework/py/flwr/``; unchanged at the 2026-04 head in these files):

- ``app/__init__.py``: the public names (Array, ArrayRecord, ConfigRecord,
  Context, Message, MessageType, MetricRecord, RecordDict) that the adapter
  imports from ``flwr.app``.
- ``common/record/array.py``: ``Array(dtype: str, shape: tuple[int, ...],
  stype: str, data: bytes)`` with strict type checks (a list shape or a
  bytearray ``data`` raise TypeError); ``Array.from_numpy_ndarray`` writes
  ``np.save(..., allow_pickle=False)`` with ``stype="numpy.ndarray"``;
  ``Array.numpy()`` raises TypeError on any other stype.
- ``common/record/arrayrecord.py``: ``ArrayRecord(dict[str, Array])`` or
  ``ArrayRecord(list[NDArray])`` (keys "0", "1", ...); TypeError on a non-str
  key or a non-Array value; ``to_numpy_ndarrays()``; ``count_bytes()``.
- ``common/record/recorddict.py``: RecordDict with the write-through views
  ``array_records``, ``metric_records``, ``config_records``.
- ``common/message.py``: ``Message(content, dst_node_id, message_type)`` and
  ``Message(content, reply_to=msg)``; ``metadata.message_type``; ``error``,
  ``has_error()``, ``has_content()``.
- ``common/context.py``: ``Context(run_id, node_id, node_config, state,
  run_config)``; ``state`` is a RecordDict that stays on the node.
- ``client/typing.py``: ``ClientAppCallable`` and ``Mod``.
- ``client/mod/utils.py``: ``make_ffn`` wraps in ``reversed(mods)``, so
  ``mods[0]`` is the outermost mod.
- ``serverapp/strategy/strategy.py``: the Strategy ABC (configure_train,
  aggregate_train, configure_evaluate, aggregate_evaluate, summary, start).
- ``serverapp/strategy/fedavg.py`` and ``strategy_utils.py``: FedAvg with
  ``arrayrecord_key="arrays"``, ``weighted_by_key="num-examples"``,
  ``validate_message_reply_consistency`` (exactly one ArrayRecord and one
  MetricRecord per reply, same keys) and ``aggregate_arrayrecords`` (calls
  ``.numpy()`` on every Array).
- ``supercore/inflatable/inflatable_object.py``: object id = sha256 of
  ``f"{qualname} {','.join(child_ids)} {len(body)}".encode() + b"\\x00" +
  body``; Array's children are ArrayChunks of ``data`` cut every 5 MiB;
  records deflate to JSON of child ids. Ids are computed after the ClientApp
  returns (``supernode/runtime/run_clientapp.py`` ``push_appoutputs``) and
  verified on receipt.

The Grid here (``InMemoryGrid``) runs ClientApps in-process; it stands for the
SuperLink and SuperNodes and is not a Flower class.
"""

from __future__ import annotations

import hashlib
import io
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The framework's module names this stand-in is registered under (conftest.py, benches).
MODULE_NAMES = (
    "flwr",
    "flwr.app",
    "flwr.common",
    "flwr.client",
    "flwr.client.typing",
    "flwr.client.mod",
    "flwr.clientapp",
    "flwr.serverapp",
    "flwr.serverapp.strategy",
)

# --- app/message_type.py -----------------------------------------------------


class MessageType:
    """Message types (``flwr/app/message_type.py``)."""

    TRAIN = "train"
    EVALUATE = "evaluate"
    QUERY = "query"


# --- common/record/array.py --------------------------------------------------

NUMPY_STYPE = "numpy.ndarray"
MAX_ARRAY_CHUNK_SIZE = 5242880  # FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE default


@dataclass
class Array:
    """An array with its raw bytes and a serialization type (``stype``)."""

    dtype: str
    shape: tuple[int, ...]
    stype: str
    data: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, str):
            raise TypeError("`dtype` must be a str")
        if not isinstance(self.shape, tuple) or not all(isinstance(d, int) for d in self.shape):
            raise TypeError("`shape` must be a tuple of int")
        if not isinstance(self.stype, str):
            raise TypeError("`stype` must be a str")
        if not isinstance(self.data, bytes):
            raise TypeError("`data` must be bytes")

    @classmethod
    def from_numpy_ndarray(cls, ndarray: np.ndarray) -> Array:
        """``np.save`` with ``allow_pickle=False``, stype ``numpy.ndarray``."""
        buf = io.BytesIO()
        np.save(buf, ndarray, allow_pickle=False)
        return cls(dtype=str(ndarray.dtype), shape=tuple(int(d) for d in ndarray.shape),
                   stype=NUMPY_STYPE, data=buf.getvalue())

    def numpy(self) -> np.ndarray:
        """Deserialize; TypeError for any stype but ``numpy.ndarray``."""
        if self.stype != NUMPY_STYPE:
            raise TypeError(f"Unsupported serialization type for numpy conversion: '{self.stype}'")
        return np.load(io.BytesIO(self.data), allow_pickle=False)


# --- common/record/arrayrecord.py, metricrecord.py, configrecord.py ---------


class ArrayRecord(dict):
    """An ordered ``dict[str, Array]``."""

    def __init__(self, arrays: Any = None) -> None:
        super().__init__()
        if arrays is None:
            return
        if isinstance(arrays, dict):
            for k, v in arrays.items():
                self[k] = v
        else:
            for i, a in enumerate(arrays):
                if not isinstance(a, Array):
                    a = Array.from_numpy_ndarray(np.asarray(a))
                self[str(i)] = a

    def __setitem__(self, key: str, value: Array) -> None:
        if not isinstance(key, str):
            raise TypeError(f"Key must be of type `str` but `{type(key)}` was passed.")
        if not isinstance(value, Array):
            raise TypeError(f"Value must be of type `Array` but `{type(value)}` was passed.")
        super().__setitem__(key, value)

    def to_numpy_ndarrays(self) -> list[np.ndarray]:
        """Every Array as a numpy array, in order."""
        return [a.numpy() for a in self.values()]

    def count_bytes(self) -> int:
        """Sum of ``len(data) + len(key)``."""
        return sum(len(a.data) + len(k) for k, a in self.items())


class MetricRecord(dict):
    """Metrics: ``dict[str, int | float | list]``."""


class ConfigRecord(dict):
    """Configuration: ``dict[str, scalar | list | bytes]``."""


# --- common/record/recorddict.py ---------------------------------------------


class _View(MutableMapping):
    """A write-through view of the records of one type in a RecordDict."""

    def __init__(self, parent: RecordDict, kind: type) -> None:
        self._p, self._k = parent, kind

    def __getitem__(self, key: str) -> Any:
        v = dict.__getitem__(self._p, key)
        if not isinstance(v, self._k):
            raise KeyError(key)
        return v

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(value, self._k):
            raise TypeError(f"Expected `{self._k.__name__}`, but `{type(value)}` was passed.")
        self._p[key] = value

    def __delitem__(self, key: str) -> None:
        self.__getitem__(key)
        dict.__delitem__(self._p, key)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (k for k, v in dict.items(self._p) if isinstance(v, self._k))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class RecordDict(dict):
    """``dict[str, ArrayRecord | MetricRecord | ConfigRecord]``."""

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError("RecordDict keys must be str")
        if not isinstance(value, (ArrayRecord, MetricRecord, ConfigRecord)):
            raise TypeError(f"Unsupported record type {type(value)}")
        super().__setitem__(key, value)

    def __init__(self, records: dict | None = None) -> None:
        super().__init__()
        for k, v in (records or {}).items():
            self[k] = v

    @property
    def array_records(self) -> _View:
        """The ArrayRecords (writes go to this RecordDict)."""
        return _View(self, ArrayRecord)

    @property
    def metric_records(self) -> _View:
        """The MetricRecords."""
        return _View(self, MetricRecord)

    @property
    def config_records(self) -> _View:
        """The ConfigRecords."""
        return _View(self, ConfigRecord)


# --- common/message.py, app/error.py, app/metadata.py, common/context.py -----


@dataclass
class Error:
    """An error carried by a reply instead of content."""

    code: int
    reason: str | None = None


@dataclass
class Metadata:
    """The parts of Flower's Metadata the adapters read."""

    message_type: str
    dst_node_id: int = 0
    src_node_id: int = 0
    message_id: str = ""
    reply_to_message_id: str = ""
    group_id: str = ""


class Message:
    """``Message(content, dst_node_id, message_type)`` or ``Message(content, reply_to=msg)``."""

    def __init__(self, content: RecordDict | None = None, dst_node_id: int | None = None,
                 message_type: str | None = None, *, error: Error | None = None,
                 reply_to: Message | None = None, group_id: str | None = None) -> None:
        if reply_to is not None:
            md = reply_to.metadata
            self._metadata = Metadata(md.message_type, md.src_node_id, md.dst_node_id,
                                      reply_to_message_id=md.message_id, group_id=md.group_id)
        else:
            if dst_node_id is None or message_type is None:
                raise ValueError("dst_node_id and message_type are required")
            self._metadata = Metadata(message_type, dst_node_id, group_id=group_id or "")
        if (content is None) == (error is None):
            raise ValueError("exactly one of content and error")
        self._content, self._error = content, error

    @property
    def metadata(self) -> Metadata:
        """The message's metadata."""
        return self._metadata

    @property
    def content(self) -> RecordDict:
        """The content; ValueError when the message carries an error."""
        if self._content is None:
            raise ValueError("Message has no content")
        return self._content

    @content.setter
    def content(self, value: RecordDict) -> None:
        self._content = value

    @property
    def error(self) -> Error:
        """The error; ValueError when the message carries content."""
        if self._error is None:
            raise ValueError("Message has no error")
        return self._error

    def has_content(self) -> bool:
        """Whether the message carries content."""
        return self._content is not None

    def has_error(self) -> bool:
        """Whether the message carries an error."""
        return self._error is not None


@dataclass
class Context:
    """Per-node context; ``state`` persists across rounds and never leaves the node."""

    run_id: int
    node_id: int
    node_config: dict
    state: RecordDict
    run_config: dict


# --- client/typing.py, client/mod/utils.py, clientapp/client_app.py ----------

ClientAppCallable = Callable[[Message, Context], Message]
Mod = Callable[[Message, Context, ClientAppCallable], Message]


def wrap_ffn(ffn: ClientAppCallable, mod: Mod) -> ClientAppCallable:
    """Wrap ``ffn`` in ``mod``."""

    def wrapped(message: Message, context: Context) -> Message:
        return mod(message, context, ffn)

    return wrapped


def make_ffn(ffn: ClientAppCallable, mods: list[Mod]) -> ClientAppCallable:
    """``for mod in reversed(mods): ffn = wrap_ffn(ffn, mod)``: mods[0] is outermost."""
    for mod in reversed(mods):
        ffn = wrap_ffn(ffn, mod)
    return ffn


class ClientApp:
    """``ClientApp(mods=...)`` with ``@app.train()`` and ``@app.evaluate()``."""

    def __init__(self, mods: list[Mod] | None = None) -> None:
        self._mods = list(mods or [])
        self._fns: dict[str, ClientAppCallable] = {}

    def _register(self, kind: str, mods: list[Mod] | None) -> Callable:
        def deco(fn: ClientAppCallable) -> ClientAppCallable:
            self._fns[kind] = make_ffn(fn, self._mods + list(mods or []))
            return fn

        return deco

    def train(self, action: str = "default", *, mods: list[Mod] | None = None) -> Callable:
        """Register the train function (app-wide mods first, then these)."""
        return self._register(MessageType.TRAIN, mods)

    def evaluate(self, action: str = "default", *, mods: list[Mod] | None = None) -> Callable:
        """Register the evaluate function."""
        return self._register(MessageType.EVALUATE, mods)

    def __call__(self, message: Message, context: Context) -> Message:
        return self._fns[message.metadata.message_type](message, context)


# --- supercore/inflatable/inflatable_object.py -------------------------------


def _oid(qualname: str, children: list[str], body: bytes) -> str:
    head = f"{qualname} {','.join(children)} {len(body)}".encode()
    return hashlib.sha256(head + b"\x00" + body).hexdigest()


def object_id(obj: Any) -> str:
    """The content-addressed id of a Message, RecordDict, record or Array."""
    if isinstance(obj, Array):
        chunks = [obj.data[i:i + MAX_ARRAY_CHUNK_SIZE]
                  for i in range(0, len(obj.data), MAX_ARRAY_CHUNK_SIZE)]
        ids = [_oid("ArrayChunk", [], c) for c in chunks]
        body = json.dumps({"dtype": obj.dtype, "shape": list(obj.shape), "stype": obj.stype,
                           "arraychunk_ids": ids}).encode()
        return _oid("Array", sorted(set(ids)), body)
    if isinstance(obj, ArrayRecord):
        refs = {k: object_id(v) for k, v in obj.items()}
        return _oid("ArrayRecord", sorted(set(refs.values())), json.dumps(refs).encode())
    if isinstance(obj, (MetricRecord, ConfigRecord)):
        body = json.dumps(obj, sort_keys=True, default=repr).encode()
        return _oid(type(obj).__name__, [], body)
    if isinstance(obj, RecordDict):
        refs = {k: object_id(v) for k, v in obj.items()}
        return _oid("RecordDict", sorted(set(refs.values())), json.dumps(refs).encode())
    if isinstance(obj, Message):
        child = [object_id(obj.content)] if obj.has_content() else []
        md = obj.metadata
        body = json.dumps([md.message_type, md.dst_node_id, md.reply_to_message_id]).encode()
        return _oid("Message", child, body)
    raise TypeError(f"not an inflatable object: {type(obj)}")


# --- serverapp/grid (stand-in transport) --------------------------------------


@dataclass
class InMemoryGrid:
    """SuperLink plus SuperNodes in one process (not a Flower class).

    Each node has a ClientApp and a Context whose state persists. A reply's
    object id is computed right after the app returns (``push_appoutputs``)
    and verified when the server pulls it, so any change to the bytes after
    the app returns raises ``ValueError("Object ID ... does not match")``.
    ``tamper`` (tests only) runs on each reply between the two.
    """

    apps: dict[int, ClientApp]
    contexts: dict[int, Context] = field(default_factory=dict)
    tamper: Callable[[Message], None] | None = None
    pushed_ids: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for nid in self.apps:
            self.contexts.setdefault(nid, Context(1, nid, {}, RecordDict(), {}))

    def get_node_ids(self) -> list[int]:
        """The connected nodes."""
        return sorted(self.apps)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None
                         ) -> list[Message]:
        """Run each message through its node's ClientApp; verify reply ids."""
        replies = []
        for msg in messages:
            msg.metadata.message_id = object_id(msg)
            nid = msg.metadata.dst_node_id
            reply = self.apps[nid](msg, self.contexts[nid])
            reply.metadata.src_node_id = nid
            oid = object_id(reply)  # push_appoutputs
            self.pushed_ids.append(oid)
            if self.tamper is not None:
                self.tamper(reply)
            if object_id(reply) != oid:
                raise ValueError(f"Object ID {oid} does not match content hash")
            replies.append(reply)
        return replies


Grid = InMemoryGrid


# --- serverapp/strategy/strategy.py, fedavg.py, strategy_utils.py ------------


class Strategy(ABC):
    """Message-based strategy ABC (``serverapp/strategy/strategy.py``)."""

    @abstractmethod
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Messages for the next training round."""

    @abstractmethod
    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Aggregate training replies."""

    @abstractmethod
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """Messages for the next evaluation round."""

    @abstractmethod
    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        """Aggregate evaluation replies."""

    @abstractmethod
    def summary(self) -> None:
        """Log the configuration."""

    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3,
              timeout: float = 3600, train_config: ConfigRecord | None = None,
              evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable | None = None) -> ArrayRecord:
        """Run rounds (training only here); returns the final arrays."""
        arrays = initial_arrays
        for rnd in range(1, num_rounds + 1):
            replies = grid.send_and_receive(
                self.configure_train(rnd, arrays, train_config or ConfigRecord(), grid),
                timeout=timeout)
            agg, _ = self.aggregate_train(rnd, replies)
            if agg is not None:
                arrays = agg
        return arrays


def validate_message_reply_consistency(replies: list[RecordDict], weighted_by_key: str,
                                       check_arrayrecord: bool) -> None:
    """Exactly one ArrayRecord and one MetricRecord per reply, same keys everywhere."""
    skip = "aggregate_train"
    for rec in replies:
        if check_arrayrecord and len(rec.array_records) != 1:
            raise ValueError(f"{skip}: expected one ArrayRecord per reply")
        if len(rec.metric_records) != 1:
            raise ValueError(f"{skip}: expected one MetricRecord per reply")
        m = next(iter(rec.metric_records.values()))
        if weighted_by_key not in m:
            raise ValueError(f"{skip}: missing key '{weighted_by_key}' in MetricRecord")
    if check_arrayrecord and replies:
        keys = [set(next(iter(r.array_records.values())).keys()) for r in replies]
        if any(k != keys[0] for k in keys):
            raise ValueError(f"{skip}: ArrayRecords have different keys")


def aggregate_arrayrecords(records: list[RecordDict], weighting_metric_name: str) -> ArrayRecord:
    """Weighted average of every Array (calls ``.numpy()`` on each)."""
    weights = [float(next(iter(r.metric_records.values()))[weighting_metric_name]) for r in records]
    total = sum(weights)
    out = ArrayRecord()
    first = next(iter(records[0].array_records.values()))
    for key in first:
        acc = None
        for r, w in zip(records, weights):
            a = next(iter(r.array_records.values()))[key].numpy()
            acc = a * (w / total) if acc is None else acc + a * (w / total)
        out[key] = Array.from_numpy_ndarray(np.asarray(acc))
    return out


class FedAvg(Strategy):
    """FedAvg over all connected nodes (sampling left out)."""

    def __init__(self, arrayrecord_key: str = "arrays", configrecord_key: str = "config",
                 weighted_by_key: str = "num-examples") -> None:
        self.arrayrecord_key = arrayrecord_key
        self.configrecord_key = configrecord_key
        self.weighted_by_key = weighted_by_key

    def _configure(self, kind: str, arrays: ArrayRecord, config: ConfigRecord,
                   grid: Grid) -> list[Message]:
        content = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return [Message(content, nid, kind) for nid in grid.get_node_ids()]

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """One train message per node, the same content for all; like Flower's FedAvg it
        injects the round into the config (``config["server-round"] = server_round``)."""
        config["server-round"] = server_round
        return self._configure(MessageType.TRAIN, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate replies, then the weighted average."""
        contents = [m.content for m in replies if not m.has_error()]
        if not contents:
            return None, None
        validate_message_reply_consistency(contents, self.weighted_by_key, True)
        return aggregate_arrayrecords(contents, self.weighted_by_key), MetricRecord()

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """One evaluate message per node."""
        return self._configure(MessageType.EVALUATE, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        """No metrics aggregation in the stand-in."""
        return MetricRecord()

    def summary(self) -> None:
        """Nothing to log."""
