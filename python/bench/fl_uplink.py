"""Uplink rows: how a client's update (w_local - w) travels to the server.

A :class:`Row` makes one :class:`ClientCodec` per client (stateful: error
feedback lives there, across rounds) and one :class:`ServerCodec`. Per
tensor the client's ``encode(name, update) -> bytes`` gives the payload whose
length is counted as upload bytes (the same rule for every row, as Flower
counts ``len(Array.data)``); the server adds ``weight * decoded`` into its
float32 sum; then the client's ``commit()`` says the server has it.

Rows:

- ``fp32``: ``np.save`` bytes, as Flower's ``Array.from_numpy_ndarray`` makes.
- ``fp16``: NVIDIA FLARE's ModelQuantizer "float16" in numpy (clip to the
  float16 range, cast; ``np.save`` bytes).
- ``int8``: FLARE-style "blockwise8" in numpy: per-4096-element block absmax,
  linear int8 codes ``round(x * 127 / absmax)`` and one float32 scale per
  block (``np.save`` of the codes, then of the scales). FLARE's own filter
  calls bitsandbytes, which maps values through a dynamic (non-linear) 8-bit
  code map instead of a linear one; the bytes are the same.
- ``tp:SPEC``: tensorpress gradient compressors with error feedback
  (``tp.Sender(SPEC).compress``, one Sender per client; the server adds the
  frames with ``tp.Receiver().add``), e.g. ``tp:topk(0.05)``,
  ``tp:dgc(0.01)``, ``tp:int8(4096)``.
- ``tpr:RECIPE``: a stateless tensorpress recipe (``tp.encode(arr,
  recipe=RECIPE)``, decoded with ``tp.decode``), e.g. ``tpr:int8(4096) | q:huff0``.

The tensorpress package is imported only when a ``tp:``/``tpr:`` row is made.
"""

from __future__ import annotations

import io
from typing import Any, Callable, Dict, List

import numpy as np

BLOCK = 4096
_F16_MAX = float(np.finfo(np.float16).max)


def _npsave(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _npload(f: io.BytesIO, name: str) -> np.ndarray:
    try:
        return np.load(f, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise ValueError(f"tensor {name!r}: bad .npy payload: {e}") from e


class ClientCodec:
    """One client's encoder. Subclasses keep per-client state (error feedback)."""

    def set_round(self, round_: int) -> None:
        """Tell compressors with a schedule (DGC's warm-up) the round, counted from 0."""

    def encode(self, name: str, update: np.ndarray) -> bytes:
        """The payload for tensor ``name``'s update (float32)."""
        raise NotImplementedError

    def commit(self) -> None:
        """The server has added every payload encoded since the last commit."""

    def close(self) -> None:
        """Release resources."""


class ServerCodec:
    """The server side: decodes payloads and adds them, weighted, into the sum."""

    def decode(self, name: str, payload: bytes, shape: tuple) -> np.ndarray:
        """The update tensor ``name`` that ``payload`` holds."""
        raise NotImplementedError

    def add(self, name: str, payload: bytes, weight: float, into: np.ndarray) -> None:
        """``into += weight * decode(payload)`` in float32."""
        a = self.decode(name, payload, into.shape)
        if a.shape != into.shape:
            raise ValueError(f"tensor {name!r}: decoded shape {a.shape}, want {into.shape}")
        into += np.float32(weight) * a.astype(np.float32, copy=False)

    def close(self) -> None:
        """Release resources."""


class Row:
    """A named uplink: makes a codec per client and one for the server."""

    def __init__(self, name: str, client: Callable[[], ClientCodec], server: Callable[[], ServerCodec],
                 family: str) -> None:
        self.name, self._client, self._server, self.family = name, client, server, family

    def new_client(self) -> ClientCodec:
        """A fresh client codec (state starts empty)."""
        return self._client()

    def new_server(self) -> ServerCodec:
        """A fresh server codec."""
        return self._server()

    def __repr__(self) -> str:
        return f"Row({self.name!r}, family={self.family!r})"


# fp32: Flower's Array bytes.
class _Fp32Client(ClientCodec):
    def encode(self, name: str, update: np.ndarray) -> bytes:
        return _npsave(np.ascontiguousarray(update, dtype=np.float32))


class _NpyServer(ServerCodec):
    def decode(self, name: str, payload: bytes, shape: tuple) -> np.ndarray:
        return _npload(io.BytesIO(payload), name)


# fp16: FLARE ModelQuantizer "float16" (clip to the float16 range, cast).
class _Fp16Client(ClientCodec):
    def encode(self, name: str, update: np.ndarray) -> bytes:
        return _npsave(np.clip(update, -_F16_MAX, _F16_MAX).astype(np.float16))


def blockwise8(a: np.ndarray, block: int = BLOCK) -> tuple:
    """Linear int8 codes and float32 absmax scales per ``block`` elements of ``a`` (flattened)."""
    flat = np.ascontiguousarray(a, dtype=np.float32).ravel()
    nb = -(-flat.size // block)
    padded = np.zeros(nb * block, np.float32)
    padded[:flat.size] = flat
    blocks = padded.reshape(nb, block)
    absmax = np.abs(blocks).max(axis=1).astype(np.float32)
    inv = np.divide(np.float32(127), absmax, out=np.zeros_like(absmax), where=absmax > 0)
    codes = np.clip(np.rint(blocks * inv[:, None]), -127, 127).astype(np.int8)
    return codes.ravel()[:flat.size], absmax


def unblockwise8(codes: np.ndarray, absmax: np.ndarray, shape: tuple, block: int = BLOCK) -> np.ndarray:
    """The float32 values of :func:`blockwise8`'s codes and scales."""
    n = int(np.prod(shape, dtype=np.int64))
    if codes.dtype != np.int8 or codes.shape != (n,) or absmax.dtype != np.float32 \
            or absmax.shape != (-(-n // block),):
        raise ValueError(f"blockwise8: {codes.dtype} {codes.shape} codes and {absmax.dtype} {absmax.shape} "
                         f"scales do not fit shape {shape}")
    scale = np.repeat(absmax / np.float32(127), block)[:n]
    return (codes.astype(np.float32) * scale).reshape(shape)


class _Int8Client(ClientCodec):
    def encode(self, name: str, update: np.ndarray) -> bytes:
        codes, absmax = blockwise8(update)
        return _npsave(codes) + _npsave(absmax)


class _Int8Server(ServerCodec):
    def decode(self, name: str, payload: bytes, shape: tuple) -> np.ndarray:
        f = io.BytesIO(payload)
        codes = _npload(f, name)
        absmax = _npload(f, name)
        return unblockwise8(codes, absmax, shape)


# tensorpress rows, written against the package's API (imported lazily).
def _tp() -> Any:
    try:
        import tensorpress
    except ImportError as e:
        raise RuntimeError("tensorpress rows need the tensorpress package: run `make python` and put "
                           "python/ on PYTHONPATH (or pip install ./python)") from e
    return tensorpress


class _TpSenderClient(ClientCodec):
    def __init__(self, spec: str) -> None:
        self.sender = _tp().Sender(spec)

    def set_round(self, round_: int) -> None:
        self.sender.set_epoch(float(round_))

    def encode(self, name: str, update: np.ndarray) -> bytes:
        return self.sender.compress(name, np.ascontiguousarray(update, dtype=np.float32))

    def commit(self) -> None:
        self.sender.commit()

    def close(self) -> None:
        self.sender.close()


class _TpReceiverServer(ServerCodec):
    def __init__(self) -> None:
        self.tp = _tp()
        self.receiver = self.tp.Receiver()

    def decode(self, name: str, payload: bytes, shape: tuple) -> np.ndarray:
        out = np.zeros(shape, np.float32)
        self.receiver.add(payload, 1.0, into=out)
        return out

    def add(self, name: str, payload: bytes, weight: float, into: np.ndarray) -> None:
        self.receiver.add(payload, float(weight), into={name: into})

    def close(self) -> None:
        self.receiver.close()


class _TpRecipeClient(ClientCodec):
    def __init__(self, recipe: str) -> None:
        self.tp, self.recipe = _tp(), recipe

    def encode(self, name: str, update: np.ndarray) -> bytes:
        return self.tp.encode(np.ascontiguousarray(update, dtype=np.float32), recipe=self.recipe, name=name)


class _TpDecodeServer(ServerCodec):
    def __init__(self) -> None:
        self.tp = _tp()

    def decode(self, name: str, payload: bytes, shape: tuple) -> np.ndarray:
        return self.tp.decode(payload)


BASELINES = ("fp32", "fp16", "int8")


def make_row(name: str) -> Row:
    """The row called ``name``: a baseline, ``tp:SPEC`` or ``tpr:RECIPE`` (see the module doc)."""
    name = name.strip()
    if name == "fp32":
        return Row(name, _Fp32Client, _NpyServer, "baseline")
    if name == "fp16":
        return Row(name, _Fp16Client, _NpyServer, "baseline")
    if name == "int8":
        return Row(name, _Int8Client, _Int8Server, "baseline")
    if name.startswith("tp:") and name[3:].strip():
        spec = name[3:].strip()
        return Row(name, lambda: _TpSenderClient(spec), _TpReceiverServer, "tensorpress")
    if name.startswith("tpr:") and name[4:].strip():
        recipe = name[4:].strip()
        return Row(name, lambda: _TpRecipeClient(recipe), _TpDecodeServer, "tensorpress")
    raise ValueError(f"row {name!r}: want fp32, fp16, int8, tp:SPEC (a tensorpress gradient spec) "
                     f"or tpr:RECIPE (a tensorpress recipe)")


# The tensorpress rows of the proof (issue 22): sparse with error feedback, fp16 value tails, quantizers.
TENSORPRESS_ROWS = (
    "tpr:int8(4096) | q:huff0",
    "tp:nf4(64)",
    "tp:efsign",
    "tp:powersgd(4)",
    "tp:topk(0.05) | idx:delta,bitpack | val:fp16 | *:huff0",
    "tp:topk(0.05) | idx:delta,bitpack | val:nf4(64) | *:huff0",
    "tp:topk(0.05) | idx:delta,bitpack | val:sign | *:huff0",
    "tp:topk(0.03) | idx:delta,bitpack | val:nf4(64) | *:huff0",
    "tp:dgc(0.01,momentum=0)",
)


def tensorpress_available() -> bool:
    """Whether the tensorpress package imports (its rows can run)."""
    try:
        _tp()
    except RuntimeError:
        return False
    return True


def default_rows() -> List[str]:
    """The baselines, and the tensorpress rows when the package is importable."""
    return list(BASELINES) + (list(TENSORPRESS_ROWS) if tensorpress_available() else [])


def registry() -> Dict[str, str]:
    """Row name prefixes and what they make (for --help)."""
    return {"fp32": "np.save float32 (Flower Array bytes)", "fp16": "FLARE-style float16",
            "int8": "FLARE-style blockwise int8 (numpy, 4096-blocks)",
            "tp:SPEC": "tp.Sender(SPEC) with error feedback, tp.Receiver on the server",
            "tpr:RECIPE": "tp.encode(recipe=RECIPE), tp.decode on the server"}
