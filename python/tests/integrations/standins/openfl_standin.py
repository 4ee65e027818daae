"""Stand-in for OpenFL (``openfl``), v1.6.

This is NOT OpenFL. It reproduces, written anew, only what
``tensorpress.integrations.openfl`` relies on, as read from
``securefederatedai/openfl`` at v1.6:

- ``openfl/pipelines/pipeline.py``: ``Transformer`` (``lossy``;
  ``forward(data, **kwargs) -> (data, metadata)``, ``backward(data, metadata,
  **kwargs)``); ``Float32NumpyArrayToBytes`` (casts to float32, metadata
  ``{"int_list": shape}``); ``TransformationPipeline(transformers, **kwargs)``
  with ``forward -> (data, list[dict])``, ``backward`` in reverse order popping
  the metadata list, ``is_lossy()`` = any transformer lossy.
- ``openfl/pipelines/no_compression_pipeline.py``: ``NoCompressionPipeline``.
- ``openfl/pipelines/tensor_codec.py``: ``TensorCodec(compression_pipeline)``
  takes NoCompression as its lossless pipeline whenever the configured one is
  lossy; ``compress(tensor_key, data, require_lossless=False, **kwargs)``,
  ``decompress(tensor_key, data, transformer_metadata, require_lossless=False,
  **kwargs)``, ``generate_delta`` (nparray - base), ``apply_delta`` (base +
  delta).
- ``openfl/protocols/base.proto`` and ``openfl/protocols/utils.py``
  (``construct_named_tensor`` / ``deconstruct_proto``): ``data_bytes`` must
  be bytes; each metadata dict keeps only ``int_to_float`` (map<int32,float>),
  ``int_list`` (repeated int32) and ``bool_list`` (repeated bool), at int32 and
  float32 precision; other keys are dropped; the receiver gets non-dict,
  non-list protobuf containers (``to_wire``/``from_wire`` here).
- ``openfl/component/aggregator/aggregator.py``: the aggregated delta is
  compressed then decompressed by the aggregator itself (``_prepare_trained``)
  and again for every collaborator, with ``lossless=`` in ``**kwargs``
  (``aggregator_round`` here; not an OpenFL function).
- ``openfl/federated/plan/plan.py``: ``compression_pipeline`` is built with
  ``import_module(template).Class(**settings)`` (``build_from_plan`` here).
"""

from __future__ import annotations

import importlib
from collections import namedtuple
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

# The framework's module names this stand-in is registered under (conftest.py, benches).
MODULE_NAMES = (
    "openfl",
    "openfl.pipelines",
    "openfl.pipelines.pipeline",
    "openfl.pipelines.tensor_codec",
)

TensorKey = namedtuple("TensorKey", ["tensor_name", "origin", "round_number", "report", "tags"])


class Transformer:
    """Base transformer."""

    def __init__(self) -> None:
        self.lossy: bool | None = None

    def forward(self, data: Any, **kwargs: Any) -> tuple[Any, dict]:
        """Transform forward."""
        raise NotImplementedError

    def backward(self, data: Any, metadata: Any, **kwargs: Any) -> Any:
        """Transform backward."""
        raise NotImplementedError


class Float32NumpyArrayToBytes(Transformer):
    """ndarray -> float32 bytes; metadata ``{"int_list": shape}``."""

    def __init__(self) -> None:
        self.lossy = False

    def forward(self, data: np.ndarray, **kwargs: Any) -> tuple[bytes, dict]:
        """Cast to float32 and serialize."""
        data = np.asarray(data).astype(np.float32)
        return data.tobytes(order="C"), {"int_list": list(data.shape)}

    def backward(self, data: bytes, metadata: Any, **kwargs: Any) -> np.ndarray:
        """Parse float32 bytes with the shape from metadata."""
        shape = tuple(metadata["int_list"])
        return np.reshape(np.frombuffer(data, dtype=np.float32), shape, order="C")


class TransformationPipeline:
    """A chain of transformers."""

    def __init__(self, transformers: list[Transformer], **kwargs: Any) -> None:
        self.transformers = transformers

    def forward(self, data: Any, **kwargs: Any) -> tuple[Any, list]:
        """Each transformer in order; one metadata entry each."""
        meta = []
        for t in self.transformers:
            data, m = t.forward(data=data, **kwargs)
            meta.append(m)
        return data, meta

    def backward(self, data: Any, transformer_metadata: list, **kwargs: Any) -> Any:
        """Each transformer in reverse, popping the metadata list."""
        for t in self.transformers[::-1]:
            data = t.backward(data=data, metadata=transformer_metadata.pop(), **kwargs)
        return data

    def is_lossy(self) -> bool:
        """Whether any transformer is lossy."""
        return any(t.lossy for t in self.transformers)


class NoCompressionPipeline(TransformationPipeline):
    """Float32 bytes only."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(transformers=[Float32NumpyArrayToBytes()], **kwargs)


def _change_tags(tags: tuple, add_field: str) -> tuple:
    return tuple(tags) + ((add_field,) if add_field not in tags else ())


class TensorCodec:
    """Compression and deltas for the aggregator and the collaborators."""

    def __init__(self, compression_pipeline: TransformationPipeline) -> None:
        self.compression_pipeline = compression_pipeline
        if compression_pipeline.is_lossy():
            self.lossless_pipeline: TransformationPipeline = NoCompressionPipeline()
        else:
            self.lossless_pipeline = compression_pipeline

    def compress(self, tensor_key: TensorKey, data: np.ndarray, require_lossless: bool = False,
                 **kwargs: Any) -> tuple[TensorKey, Any, list]:
        """The lossless pipeline when required, else the configured one."""
        pipe = self.lossless_pipeline if require_lossless else self.compression_pipeline
        out, meta = pipe.forward(data=data, **kwargs)
        lossy = self.compression_pipeline.is_lossy() and not require_lossless
        tag = "lossy_compressed" if lossy else "compressed"
        return tensor_key._replace(tags=_change_tags(tensor_key.tags, tag)), out, meta

    def decompress(self, tensor_key: TensorKey, data: Any, transformer_metadata: Any,
                   require_lossless: bool = False, **kwargs: Any) -> tuple[TensorKey, np.ndarray]:
        """The inverse of ``compress``."""
        pipe = self.lossless_pipeline if require_lossless else self.compression_pipeline
        out = pipe.backward(data=data, transformer_metadata=list(transformer_metadata), **kwargs)
        tags = tuple(t for t in tensor_key.tags if t not in ("compressed", "lossy_compressed"))
        return tensor_key._replace(tags=tags), out

    @staticmethod
    def generate_delta(tensor_key: TensorKey, nparray: np.ndarray,
                       base_model_nparray: np.ndarray) -> tuple[TensorKey, np.ndarray]:
        """``nparray - base``."""
        return tensor_key._replace(tags=_change_tags(tensor_key.tags, "delta")), \
            nparray - base_model_nparray

    @staticmethod
    def apply_delta(tensor_key: TensorKey, delta: np.ndarray, base_model_nparray: np.ndarray,
                    creates_model: bool = False) -> tuple[TensorKey, np.ndarray]:
        """``base + delta``."""
        tags = tuple(t for t in tensor_key.tags if t != "delta")
        return tensor_key._replace(tags=tags), base_model_nparray + delta


# --- protocols/base.proto, protocols/utils.py ---------------------------------


class RepeatedScalarContainer(Sequence):
    """A protobuf repeated field: a Sequence, not a list."""

    def __init__(self, values: list) -> None:
        self._v = list(values)

    def __getitem__(self, i: Any) -> Any:
        return self._v[i]

    def __len__(self) -> int:
        return len(self._v)

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented


class ScalarMap:
    """A protobuf map<int32,float>: mapping-like, not a dict."""

    def __init__(self, d: dict) -> None:
        self._d = dict(d)

    def __getitem__(self, k: int) -> float:
        return self._d[k]

    def __iter__(self) -> Iterator[int]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def items(self) -> Any:
        """The map's items."""
        return self._d.items()


def _int32(v: Any) -> int:
    i = int(v)
    if not -(2**31) <= i < 2**31:
        raise ValueError(f"Value out of range: {i}")
    return i


def to_wire(data: Any, metadata: list[dict]) -> dict:
    """``construct_named_tensor``: bytes only, three metadata fields, proto precision."""
    if not isinstance(data, bytes):
        raise TypeError(f"data_bytes must be bytes, got {type(data).__name__}")
    protos = []
    for m in metadata:
        protos.append({
            "int_to_float": {_int32(k): float(np.float32(v))
                             for k, v in (m.get("int_to_float") or {}).items()},
            "int_list": [_int32(v) for v in m.get("int_list") or []],
            "bool_list": [bool(v) for v in m.get("bool_list") or []],
        })
    return {"data_bytes": bytes(data), "transformer_metadata": protos}


def from_wire(named_tensor: dict) -> tuple[bytes, list[dict]]:
    """``deconstruct_proto``: metadata values as protobuf containers."""
    meta = [{"int_to_float": ScalarMap(p["int_to_float"]),
             "int_list": RepeatedScalarContainer(p["int_list"]),
             "bool_list": RepeatedScalarContainer(p["bool_list"])}
            for p in named_tensor["transformer_metadata"]]
    return named_tensor["data_bytes"], meta


# --- federated/plan/plan.py, component/aggregator/aggregator.py --------------


def build_from_plan(section: dict) -> TransformationPipeline:
    """``{"template": "pkg.mod.Class", "settings": {...}}`` -> ``Class(**settings)``."""
    mod, _, cls = section["template"].rpartition(".")
    return getattr(importlib.import_module(mod), cls)(**section.get("settings", {}))


def send(codec: TensorCodec, key: TensorKey, arr: np.ndarray, *, require_lossless: bool,
         **kwargs: Any) -> dict:
    """Compress and serialize one tensor as a NamedTensor."""
    _, data, meta = codec.compress(key, arr, require_lossless=require_lossless, **kwargs)
    return to_wire(data, meta)


def receive(codec: TensorCodec, key: TensorKey, named_tensor: dict, *, require_lossless: bool,
            **kwargs: Any) -> np.ndarray:
    """Parse and decompress one NamedTensor."""
    data, meta = from_wire(named_tensor)
    return codec.decompress(key, data, meta, require_lossless=require_lossless, **kwargs)[1]


def aggregator_round(codec: TensorCodec, key: TensorKey, base: np.ndarray,
                     agg_delta: np.ndarray, n_collaborators: int) -> tuple[np.ndarray, list]:
    """The aggregator's model and each collaborator's, from one aggregated delta.

    The aggregator compresses and decompresses the delta itself
    (``_prepare_trained``) and applies it; then, per collaborator, compresses
    it again (``lossless=True`` in kwargs as the aggregator passes it), and the
    collaborator decompresses and applies it to its copy of ``base``.
    """
    nt = send(codec, key, agg_delta, require_lossless=False, lossless=True)
    server = codec.apply_delta(key, receive(codec, key, nt, require_lossless=False,
                                            lossless=True), base)[1]
    clients = []
    for _ in range(n_collaborators):
        nt = send(codec, key, agg_delta, require_lossless=False, lossless=True)
        d = receive(codec, key, nt, require_lossless=False, lossless=True)
        clients.append(codec.apply_delta(key, d, base.copy())[1])
    return server, clients
