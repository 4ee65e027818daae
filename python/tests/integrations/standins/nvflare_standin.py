"""Stand-in for NVIDIA FLARE (``nvflare``), 2.9.0dev head (2.8.1 the same here).

This is NOT NVIDIA FLARE. It reproduces, written anew, only what
``tensorpress.integrations.nvflare`` relies on, as read from ``NVIDIA/NVFlare``:

- ``nvflare/apis/shareable.py``: ``Shareable(dict)`` with headers under
  ``"__headers__"``, ``set_header``/``get_header``, ``set_return_code`` /
  ``get_return_code`` (default OK); ``ReservedHeaderKey.CONTENT_TYPE``.
- ``nvflare/apis/fl_constant.py``: ``ReturnCode.OK``; ``FLMetaKey`` (our
  ``MetaKey``) with ``PROCESSED_ALGORITHM`` and ``FILTER_HISTORY``;
  ``FLContextKey.TASK_DATA``.
- ``nvflare/apis/dxo.py``: ``DataKind``; ``DXO(data_kind, data: dict,
  meta=None)`` validated (data must be a dict); ``get_meta_prop``,
  ``set_meta_prop``, ``remove_meta_props``, ``update_meta_props``,
  ``add_filter_history``; ``update_shareable`` sets header
  ``__content_type__="DXO"`` and ``s["DXO"] = {"kind", "data", "meta"}``;
  ``from_shareable`` raises ValueError on anything else.
- ``nvflare/apis/filter.py``: ``Filter.process(shareable, fl_ctx) -> Shareable``.
- ``nvflare/apis/dxo_filter.py``: ``DXOFilter(supported_data_kinds,
  data_kinds_to_filter)``; ``process`` returns the shareable unchanged when its
  return code is not OK, it is not a DXO, or the DXO's data is None; recurses
  into COLLECTION (list or dict); kinds outside ``data_kinds`` are skipped; a
  None from ``process_dxo`` means not filtered; a new DXO inherits the
  filter history; the class name is appended to ``filter_history``; ends with
  ``result_dxo.update_shareable(shareable)``.
- ``nvflare/apis/fl_context.py``: ``FLContext.get_prop/set_prop``.
- ``nvflare/app_opt/pt/quantization/quantizer.py`` and ``dequantizer.py``:
  ``ModelQuantizer(quantization_type="float16")`` / ``ModelDequantizer()``,
  float16 path only, with the meta keys they write (``PROCESSED_ALGORITHM``,
  ``"quant_state"``, ``"source_datatype"``, ``"quantized_flag"``) and the
  dequantizer's error on a DXO without them (the 8- and 4-bit paths need
  bitsandbytes and CUDA and are not reproduced).
- Filter chains: site (``local/``) filters run before job filters
  (``run_filter_chain``; not a FLARE function).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

# The framework's module names this stand-in is registered under (conftest.py, benches).
MODULE_NAMES = (
    "nvflare",
    "nvflare.apis",
    "nvflare.apis.dxo",
    "nvflare.apis.dxo_filter",
    "nvflare.apis.filter",
    "nvflare.apis.fl_constant",
    "nvflare.apis.fl_context",
    "nvflare.apis.shareable",
)


class ReturnCode:
    """``fl_constant.ReturnCode`` (subset)."""

    OK = "OK"
    EXECUTION_EXCEPTION = "EXECUTION_EXCEPTION"


class ReservedHeaderKey:
    """``shareable.ReservedHeaderKey`` (subset)."""

    HEADERS = "__headers__"
    RC = "__rc__"
    CONTENT_TYPE = "__content_type__"


class FLMetaKey:
    """``fl_constant.FLMetaKey`` (subset)."""

    PROCESSED_ALGORITHM = "processed_algorithm"
    FILTER_HISTORY = "filter_history"
    NUM_STEPS_CURRENT_ROUND = "NUM_STEPS_CURRENT_ROUND"


class MetaKey(FLMetaKey):
    """``dxo.MetaKey``."""


class FLContextKey:
    """``fl_constant.FLContextKey`` (subset)."""

    TASK_DATA = "__task_data__"
    TASK_NAME = "__task_name__"


class Shareable(dict):
    """A dict with headers."""

    def __init__(self) -> None:
        super().__init__()
        self[ReservedHeaderKey.HEADERS] = {}

    def set_header(self, key: str, value: Any) -> None:
        """Set a header."""
        self[ReservedHeaderKey.HEADERS][key] = value

    def get_header(self, key: str, default: Any = None) -> Any:
        """A header, or ``default``."""
        return self.get(ReservedHeaderKey.HEADERS, {}).get(key, default)

    def set_return_code(self, rc: str) -> None:
        """Set the return code."""
        self.set_header(ReservedHeaderKey.RC, rc)

    def get_return_code(self, default: str = ReturnCode.OK) -> str:
        """The return code (OK when unset)."""
        return self.get_header(ReservedHeaderKey.RC, default)


class FLContext:
    """Properties of one FL operation."""

    def __init__(self) -> None:
        self._props: dict[str, Any] = {}

    def set_prop(self, key: str, value: Any, private: bool = True, sticky: bool = True) -> bool:
        """Set a property."""
        self._props[key] = value
        return True

    def get_prop(self, key: str, default: Any = None) -> Any:
        """A property, or ``default``."""
        return self._props.get(key, default)


class DataKind:
    """``dxo.DataKind``."""

    FL_MODEL = "FL_MODEL"
    WEIGHTS = "WEIGHTS"
    WEIGHT_DIFF = "WEIGHT_DIFF"
    METRICS = "METRICS"
    ANALYTIC = "ANALYTIC"
    COLLECTION = "COLLECTION"
    STATISTICS = "STATISTICS"
    PSI = "PSI"
    RAW = "RAW"


class DXO:
    """Data Exchange Object."""

    def __init__(self, data_kind: str, data: dict, meta: dict | None = None) -> None:
        self.data_kind = data_kind
        self.data = {} if data is None else data
        self.meta = {} if meta is None else meta
        if not isinstance(self.data, dict):
            raise ValueError(f"invalid DXO: invalid data: expect dict but got {type(self.data)}")
        if not isinstance(self.meta, dict):
            raise ValueError(f"invalid DXO: invalid props: expect dict but got {type(self.meta)}")

    def get_meta_prop(self, key: str, default: Any = None) -> Any:
        """A meta property, or ``default``."""
        return self.meta.get(key, default) if isinstance(self.meta, dict) else default

    def set_meta_prop(self, key: str, value: Any) -> None:
        """Set a meta property."""
        self.meta[key] = value

    def remove_meta_props(self, keys: list[str]) -> None:
        """Remove meta properties (missing ones are ignored)."""
        for k in keys or []:
            self.meta.pop(k, None)

    def get_meta_props(self) -> dict:
        """The meta dict."""
        return self.meta

    def update_meta_props(self, meta: dict) -> None:
        """Merge a deep copy of ``meta``."""
        self.meta.update(copy.deepcopy(meta))

    def update_shareable(self, s: Shareable) -> Shareable:
        """Store this DXO in ``s``."""
        s.set_header(ReservedHeaderKey.CONTENT_TYPE, "DXO")
        s["DXO"] = {"kind": self.data_kind, "data": self.data, "meta": self.meta}
        return s

    def to_shareable(self) -> Shareable:
        """A new Shareable holding this DXO."""
        return self.update_shareable(Shareable())

    def add_filter_history(self, filter_name: str | list[str] | None) -> None:
        """Append to ``meta["filter_history"]``."""
        if not filter_name:
            return
        hist = self.get_meta_prop(MetaKey.FILTER_HISTORY)
        if not hist:
            hist = []
            self.set_meta_prop(MetaKey.FILTER_HISTORY, hist)
        if isinstance(filter_name, str):
            hist.append(filter_name)
        else:
            hist.extend(filter_name)

    def get_filter_history(self) -> list[str] | None:
        """The filter history."""
        return self.get_meta_prop(MetaKey.FILTER_HISTORY)


def from_shareable(s: Shareable) -> DXO:
    """The DXO in ``s``; ValueError when there is none."""
    if s.get_header(ReservedHeaderKey.CONTENT_TYPE) != "DXO":
        raise ValueError("the shareable is not a valid DXO")
    enc = s.get("DXO")
    if not enc or not isinstance(enc, dict):
        raise ValueError("the shareable is not a valid DXO - missing content")
    return DXO(enc.get("kind"), enc.get("data"), enc.get("meta"))


class FLComponent:
    """Base of every component (logging only here)."""

    def log_debug(self, fl_ctx: FLContext, msg: str) -> None:
        """Debug log (dropped)."""

    def log_info(self, fl_ctx: FLContext, msg: str) -> None:
        """Info log (dropped)."""


class Filter(FLComponent, ABC):
    """``filter.Filter``."""

    @abstractmethod
    def process(self, shareable: Shareable, fl_ctx: FLContext) -> Shareable:
        """Filter ``shareable``."""


class DXOFilter(Filter, ABC):
    """``dxo_filter.DXOFilter``."""

    def __init__(self, supported_data_kinds: list[str] | None,
                 data_kinds_to_filter: list[str] | None) -> None:
        if supported_data_kinds and not isinstance(supported_data_kinds, list):
            raise ValueError("supported_data_kinds must be a list of str")
        if data_kinds_to_filter and not isinstance(data_kinds_to_filter, list):
            raise ValueError("data_kinds_to_filter must be a list of str")
        if supported_data_kinds and data_kinds_to_filter:
            if not all(dk in supported_data_kinds for dk in data_kinds_to_filter):
                raise ValueError(f"invalid data kinds: {data_kinds_to_filter}. "
                                 f"Only support {supported_data_kinds}")
        self.data_kinds = data_kinds_to_filter or supported_data_kinds

    def process(self, shareable: Shareable, fl_ctx: FLContext) -> Shareable:
        """Skip non-OK / non-DXO / no-data; filter (recursively); store back."""
        if shareable.get_return_code() != ReturnCode.OK:
            return shareable
        try:
            dxo = from_shareable(shareable)
        except Exception:  # noqa: BLE001 - FLARE uses a bare except here
            return shareable
        if dxo.data is None:
            return shareable
        start = [dxo]
        self._filter_dxos(start, shareable, fl_ctx)
        return start[0].update_shareable(shareable)

    @abstractmethod
    def process_dxo(self, dxo: DXO, shareable: Shareable, fl_ctx: FLContext) -> DXO | None:
        """The filtered DXO, or None when not filtered."""

    def _apply_filter(self, dxo: DXO, shareable: Shareable, fl_ctx: FLContext) -> DXO:
        if not dxo.data:
            return dxo
        name = self.__class__.__name__
        result = self.process_dxo(dxo, shareable, fl_ctx)
        if not result:
            return dxo
        if not isinstance(result, DXO):
            raise RuntimeError(f"Result from {name} is {type(result)} - must be DXO")
        if result != dxo:
            result.add_filter_history(dxo.get_filter_history())
        result.add_filter_history(name)
        return result

    def _filter_dxos(self, coll: list | dict, shareable: Shareable, fl_ctx: FLContext) -> None:
        if isinstance(coll, list):
            items = list(enumerate(coll))
        elif isinstance(coll, dict):
            items = list(coll.items())
        else:
            raise ValueError(f"DXO COLLECTION must be a dict or list but got {type(coll)}")
        for k, v in items:
            if not isinstance(v, DXO):
                continue
            if v.data_kind == DataKind.COLLECTION:
                self._filter_dxos(v.data, shareable, fl_ctx)
            elif not self.data_kinds or v.data_kind in self.data_kinds:
                coll[k] = self._apply_filter(v, shareable, fl_ctx)


def run_filter_chain(site_filters: list[Filter], job_filters: list[Filter],
                     shareable: Shareable, fl_ctx: FLContext) -> Shareable:
    """Site filters first, then job filters, each on the previous output."""
    for f in list(site_filters) + list(job_filters):
        shareable = f.process(shareable, fl_ctx)
    return shareable


class ModelQuantizer(DXOFilter):
    """``app_opt/pt/quantization/quantizer.py``, float16 on numpy only."""

    def __init__(self, quantization_type: str = "float16") -> None:
        super().__init__([DataKind.WEIGHTS, DataKind.WEIGHT_DIFF], None)
        if quantization_type != "float16":
            raise ValueError("stand-in: only float16 (the others need bitsandbytes and CUDA)")
        self.quantization_type = quantization_type

    def process_dxo(self, dxo: DXO, shareable: Shareable, fl_ctx: FLContext) -> DXO:
        """Cast every float array to float16 in place; write the four meta keys."""
        src, state = {}, {}
        fmax = float(np.finfo(np.float16).max)
        for k, v in dxo.data.items():
            src[k] = str(v.dtype)
            dxo.data[k] = np.clip(v, -fmax, fmax).astype(np.float16)
            state[k] = {}
        dxo.set_meta_prop(MetaKey.PROCESSED_ALGORITHM, self.quantization_type)
        dxo.set_meta_prop("quant_state", state)
        dxo.set_meta_prop("source_datatype", src)
        dxo.set_meta_prop("quantized_flag", True)
        return dxo


class ModelDequantizer(DXOFilter):
    """``app_opt/pt/quantization/dequantizer.py``, float16 on numpy only."""

    def __init__(self) -> None:
        super().__init__([DataKind.WEIGHTS, DataKind.WEIGHT_DIFF], None)

    def process_dxo(self, dxo: DXO, shareable: Shareable, fl_ctx: FLContext) -> DXO:
        """Restore the source dtypes; remove the four meta keys."""
        algo = dxo.get_meta_prop(MetaKey.PROCESSED_ALGORITHM)
        src = dxo.get_meta_prop("source_datatype")
        if algo is None or src is None:
            raise ValueError("quantized_flag or source_datatype not found in meta")
        for k, v in dxo.data.items():
            dxo.data[k] = v.astype(src[k])
        dxo.remove_meta_props([MetaKey.PROCESSED_ALGORITHM, "quant_state", "source_datatype",
                               "quantized_flag"])
        return dxo
