"""NVIDIA FLARE adapter: DXO filters that compress and restore WEIGHTS and WEIGHT_DIFF.

Written against NVIDIA FLARE 2.8/2.9 (``nvflare.apis.dxo_filter.DXOFilter``) and
tested against a stand-in that copies its signatures and behaviour
(``python/tests/integrations/standins/nvflare_standin.py``, see
python/INTEGRATIONS.md); it has not been run against a real FLARE installation.

:class:`TensorpressCompressor` and :class:`TensorpressDecompressor` are drop-in
replacements for FLARE's ``ModelQuantizer`` / ``ModelDequantizer``:
``quantization_type`` takes FLARE's names (``float16``, ``blockwise8``,
``float4``, ``normfloat4``) and maps them to tensorpress recipes, running on the
CPU without bitsandbytes. Each compressed array travels in ``dxo.data`` as a
``np.uint8`` array holding one frame.

Job config (``config_fed_client.json`` / ``.conf``)::

    task_result_filters = [
      { tasks = ["train"], filters = [ {
          path = "tensorpress.integrations.nvflare.TensorpressCompressor"
          args { quantization_type = "blockwise8" }
      } ] }
    ]

and on the server (``config_fed_server.conf``), first in the chain::

    task_result_filters = [
      { tasks = ["train"], filters = [ {
          path = "tensorpress.integrations.nvflare.TensorpressDecompressor", args {} } ] }
    ]

Recipe API: ``recipe.add_client_output_filter(TensorpressCompressor(spec="topk(0.05)"),
tasks=["train"])`` and ``recipe.add_server_input_filter(TensorpressDecompressor(),
tasks=["train"])``. For the downlink (global model) use
``add_server_output_filter`` / ``add_client_input_filter`` with a recipe (a
lossless one, or ``"fp16"``), never a ``spec``.

``spec=`` (gradient compression with error feedback) applies to WEIGHT_DIFF
only: set ``params_transfer_type=DIFF`` in the client API so FLARE sends
``trained - global``. The Sender and its residual live on the filter object, a
long-lived client component; it commits each update when the filter returns
(FLARE gives a filter no acknowledgement). Whether the object survives between
rounds under every FLARE process model is not confirmed. A schedule (DGC's
``warmup=``) follows the result's ``current_round`` header, which FLARE's
executors copy from the task.

The filters never mutate the incoming ``dxo.data``: they build a new DXO, so
the same DXO can be filtered for many clients without a lock. Put
``ConvertWeights`` (if any) before the compressor: FLARE components skip DXOs
that carry ``processed_algorithm``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import tensorpress as tp
from tensorpress.integrations._names import named

try:
    from nvflare.apis.dxo import DXO, DataKind, MetaKey
    from nvflare.apis.dxo_filter import DXOFilter
    from nvflare.apis.fl_context import FLContext
    from nvflare.apis.shareable import Shareable
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError("tensorpress.integrations.nvflare needs NVIDIA FLARE >= 2.8 "
                      "(nvflare.apis.dxo_filter)") from _e

__all__ = ["QUANTIZATION_TYPES", "ALGORITHM", "FORMAT_KEY", "DTYPES_KEY", "SHAPES_KEY", "MODE_KEY",
           "TensorpressCompressor", "TensorpressDecompressor"]

QUANTIZATION_TYPES: dict[str, str] = {
    "float16": "fp16",
    "blockwise8": "int8(4096) | q:huff0",
    "float4": "fp4(64)",
    "normfloat4": "nf4(64)",
}
"""FLARE ``ModelQuantizer`` quantization types and the tensorpress recipe each maps to."""

ALGORITHM = "tensorpress"
"""Value written to ``MetaKey.PROCESSED_ALGORITHM``."""
FORMAT_KEY = "tensorpress_format"
"""Meta key: the layout version of a compressed DXO (1)."""
DTYPES_KEY = "tensorpress_dtypes"
"""Meta key: ``{name: source dtype}`` of every compressed entry."""
MODE_KEY = "tensorpress_mode"
"""Meta key: ``"recipe"`` (codec frames of the values) or ``"spec"`` (gradient frames)."""

CURRENT_ROUND = "current_round"
"""The header FLARE's workflows set on a task and its executor copies onto the result
(``AppConstants.CURRENT_ROUND``, ``nvflare/app_common/app_constant.py``); a ``spec``'s
schedule (DGC's warm-up) follows it."""

_FORMAT = 1
SHAPES_KEY = "tensorpress_shapes"
"""Meta key: ``{name: shape}`` of every compressed entry."""

_OUR_KEYS = [FORMAT_KEY, DTYPES_KEY, SHAPES_KEY, MODE_KEY]


def _new_meta(dxo: DXO) -> dict:
    # FLARE copies the old filter history onto a new DXO itself; a shared list
    # would be extended with itself.
    meta = dict(dxo.meta or {})
    meta.pop(MetaKey.FILTER_HISTORY, None)
    return meta


def _resolve(recipe: str | None, spec: str | None, quantization_type: str | None
             ) -> tuple[str | None, str | None]:
    given = [n for n, v in (("recipe", recipe), ("spec", spec),
                            ("quantization_type", quantization_type)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"TensorpressCompressor: give one of recipe, spec, quantization_type; "
                         f"got {', '.join(given)}")
    if quantization_type is not None:
        q = quantization_type.lower()
        if q not in QUANTIZATION_TYPES:
            raise ValueError(f"TensorpressCompressor: quantization_type {quantization_type!r} "
                             f"is not one of {sorted(QUANTIZATION_TYPES)}")
        recipe = QUANTIZATION_TYPES[q]
    return recipe, spec


class TensorpressCompressor(DXOFilter):
    """Compresses every float array of a WEIGHTS or WEIGHT_DIFF DXO into tensorpress frames.

    Args:
        recipe: a codec recipe (``"fp16"``, ``"int8(4096) | q:huff0"``,
            ``"shuffle4 | plane3:huff0"``); None with no ``spec`` picks a
            lossless one per tensor.
        spec: a gradient spec with error feedback (``"topk(0.05)"``,
            ``"dgc(0.01) | val:fp16 | *:huff0"``), WEIGHT_DIFF only.
        quantization_type: FLARE's ``ModelQuantizer`` names, as aliases
            (:data:`QUANTIZATION_TYPES`).
        data_kinds_to_filter: a subset of ``[WEIGHTS, WEIGHT_DIFF]``.
        min_size: float arrays with fewer elements stay as they are.

    Raises:
        ValueError: more than one of recipe / spec / quantization_type, or an
            unknown quantization type.
        tensorpress.RecipeError: a bad recipe or spec (here, not at the first round).
    """

    def __init__(self, recipe: str | None = None, spec: str | None = None,
                 quantization_type: str | None = None,
                 data_kinds_to_filter: list[str] | None = None, min_size: int = 0) -> None:
        super().__init__(supported_data_kinds=[DataKind.WEIGHTS, DataKind.WEIGHT_DIFF],
                         data_kinds_to_filter=data_kinds_to_filter)
        self.recipe, self.spec = _resolve(recipe, spec, quantization_type)
        self.min_size = min_size
        self._sender: Any = None
        self._lossy = False
        if self.spec is not None:
            self._sender = tp.Sender(self.spec)
        elif self.recipe is not None:
            self._lossy = tp.is_lossy(self.recipe)  # a bad recipe fails here

    def _encode(self, name: str, arr: np.ndarray) -> bytes:
        try:
            if self._sender is not None:
                return self._sender.compress(name, np.ascontiguousarray(arr, dtype=np.float32))
            if self._lossy and arr.dtype.itemsize < 4:
                arr = arr.astype(np.float32)  # quantizers take float32/float64; exact widening
            return tp.encode(arr, recipe=self.recipe, name=name)
        except (tp.TensorpressError, TypeError, ValueError) as e:
            raise named(name, e) from e

    def _eligible(self, value: Any) -> np.ndarray | None:
        """``value`` as the float array this filter compresses, or None to pass it through."""
        arr = value if isinstance(value, np.ndarray) else None
        if arr is None and hasattr(value, "__array__") and not np.isscalar(value):
            arr = np.asarray(value)
        if arr is None or arr.dtype.kind != "f" or arr.size < self.min_size:
            return None
        return arr

    def process_dxo(self, dxo: DXO, shareable: Shareable, fl_ctx: FLContext) -> DXO | None:
        """A new DXO with the float arrays as frames; None when already processed.

        Raises:
            ValueError: a ``spec`` on a WEIGHTS DXO (send WEIGHT_DIFF instead).
        """
        if dxo.get_meta_prop(FORMAT_KEY) is not None:
            return None
        if dxo.get_meta_prop(MetaKey.PROCESSED_ALGORITHM) is not None:
            return None  # someone else's (HE, ModelQuantizer): leave it alone
        if self.spec is not None and dxo.data_kind != DataKind.WEIGHT_DIFF:
            raise ValueError(f"TensorpressCompressor: spec {self.spec!r} compresses updates, but "
                             f"the DXO is {dxo.data_kind}; set params_transfer_type=DIFF (or "
                             "use recipe= / quantization_type=)")
        data: dict[str, Any] = {}
        dtypes: dict[str, str] = {}
        shapes: dict[str, list[int]] = {}
        if self._sender is not None:
            rnd = shareable.get_header(CURRENT_ROUND) if shareable is not None else None
            if isinstance(rnd, int) and not isinstance(rnd, bool):
                self._sender.set_epoch(float(rnd))  # DGC's warm-up; FLARE counts rounds from 0
        try:
            arrays = {name: self._eligible(value) for name, value in dxo.data.items()}
            if self._sender is not None:  # topk(r,model=on): one k over the whole update
                self._sender.plan({name: np.ascontiguousarray(arr, dtype=np.float32)
                                   for name, arr in arrays.items() if arr is not None})
            for name, value in dxo.data.items():
                arr = arrays[name]
                if arr is None:
                    data[name] = value
                    continue
                data[name] = np.frombuffer(self._encode(name, arr), dtype=np.uint8)
                dtypes[name] = str(arr.dtype)
                shapes[name] = [int(d) for d in arr.shape]
            if self._sender is not None:
                self._sender.commit()
        except BaseException:
            if self._sender is not None:
                self._sender.abort()
            raise
        meta = _new_meta(dxo)
        meta[MetaKey.PROCESSED_ALGORITHM] = ALGORITHM
        meta[FORMAT_KEY] = _FORMAT
        meta[DTYPES_KEY] = dtypes
        meta[SHAPES_KEY] = shapes
        meta[MODE_KEY] = "spec" if self.spec is not None else "recipe"
        return DXO(dxo.data_kind, data, meta=meta)


def _decode(name: str, value: Any, dtype: str, shape: Any, mode: str, limits: Any
            ) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype != np.uint8 or value.ndim != 1:
        raise tp.CorruptError(f"tensorpress: array '{name}': expected a uint8 frame, got "
                              f"{type(value).__name__} {getattr(value, 'dtype', '')}")
    frame = value.tobytes()
    try:
        if mode == "spec":
            # An update: zeros plus the scattered values (sparse frames are never densified
            # on the wire side; the Receiver adds them straight into the array).
            out = np.zeros(tuple(int(d) for d in shape), np.float32)
            tp.Receiver(limits=limits).add(frame, 1.0, into={name: out})
        else:
            out = tp.decode(frame, limits=limits)
    except (tp.TensorpressError, TypeError, ValueError, KeyError) as e:
        raise named(name, e) from e
    return out.astype(np.dtype(dtype), copy=False)


class TensorpressDecompressor(DXOFilter):
    """Restores DXOs written by :class:`TensorpressCompressor`, with their source dtypes.

    Like FLARE's ``ModelDequantizer``, it raises on a DXO that was not
    compressed, so a misplaced filter fails loudly; it removes its meta keys
    and ``processed_algorithm`` when that holds ``"tensorpress"``.

    Args:
        data_kinds_to_filter: a subset of ``[WEIGHTS, WEIGHT_DIFF]``.
        limits: decode limits for the frames (``tp.Limits``), weights and updates alike.
    """

    def __init__(self, data_kinds_to_filter: list[str] | None = None, limits: Any = None) -> None:
        super().__init__(supported_data_kinds=[DataKind.WEIGHTS, DataKind.WEIGHT_DIFF],
                         data_kinds_to_filter=data_kinds_to_filter)
        self.limits = limits

    def process_dxo(self, dxo: DXO, shareable: Shareable, fl_ctx: FLContext) -> DXO:
        """A new DXO with every frame decoded back to its source dtype.

        Raises:
            ValueError: the DXO has no tensorpress meta, or another format version.
            tensorpress.CorruptError (and the other ``tp`` errors): a bad frame,
                naming the array.
        """
        fmt = dxo.get_meta_prop(FORMAT_KEY)
        dtypes = dxo.get_meta_prop(DTYPES_KEY)
        if fmt is None or not isinstance(dtypes, dict):
            raise ValueError("TensorpressDecompressor: the DXO has no tensorpress_format / "
                             "tensorpress_dtypes meta; was it compressed by "
                             "TensorpressCompressor?")
        if fmt != _FORMAT:
            raise ValueError(f"TensorpressDecompressor: tensorpress_format {fmt!r} is not "
                             f"supported (this version reads {_FORMAT})")
        mode = dxo.get_meta_prop(MODE_KEY, "recipe")
        shapes = dxo.get_meta_prop(SHAPES_KEY) or {}
        data = dict(dxo.data)
        for name, dtype in dtypes.items():
            if name not in data:
                raise tp.CorruptError(f"tensorpress: array '{name}' is listed in the meta but "
                                      "missing from the DXO")
            if mode == "spec" and name not in shapes:
                raise tp.CorruptError(f"tensorpress: array '{name}': no shape in the meta")
            data[name] = _decode(name, data[name], dtype, shapes.get(name), mode, self.limits)
        meta = _new_meta(dxo)
        for k in _OUR_KEYS:
            meta.pop(k, None)
        if meta.get(MetaKey.PROCESSED_ALGORITHM) == ALGORITHM:
            meta.pop(MetaKey.PROCESSED_ALGORITHM)
        return DXO(dxo.data_kind, data, meta=meta)
