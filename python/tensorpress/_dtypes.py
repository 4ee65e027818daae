"""Mapping between numpy dtypes and tensorpress's permanent DType IDs.

bfloat16 has no numpy dtype (without ml_dtypes): on the way in, uint16 arrays
are sent as BF16 bits with ``dtype="bf16"``; on the way out, BF16 decodes to
exactly widened float32 by default, or to the uint16 bits.
"""

from __future__ import annotations

from typing import Dict, Optional, Union

import numpy as np

BYTE, F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, U16, U32, U64 = range(14)

NAMES: Dict[int, str] = {
    BYTE: "byte", F64: "f64", F32: "f32", F16: "f16", BF16: "bf16", I64: "i64", I32: "i32",
    I16: "i16", I8: "i8", U8: "u8", BOOL: "bool", U16: "u16", U32: "u32", U64: "u64",
}

# numpy dtype (little-endian) of each ID; BF16 travels as its uint16 bits.
NUMPY: Dict[int, np.dtype] = {
    BYTE: np.dtype("u1"), F64: np.dtype("<f8"), F32: np.dtype("<f4"), F16: np.dtype("<f2"),
    BF16: np.dtype("<u2"), I64: np.dtype("<i8"), I32: np.dtype("<i4"), I16: np.dtype("<i2"),
    I8: np.dtype("i1"), U8: np.dtype("u1"), BOOL: np.dtype("?"), U16: np.dtype("<u2"),
    U32: np.dtype("<u4"), U64: np.dtype("<u8"),
}

_FROM_KIND: Dict[str, int] = {
    "f8": F64, "f4": F32, "f2": F16, "i8": I64, "i4": I32, "i2": I16, "i1": I8,
    "u1": U8, "b1": BOOL, "u2": U16, "u4": U32, "u8": U64,
}

_ALIASES: Dict[str, int] = {v: k for k, v in NAMES.items()}
_ALIASES.update({"bfloat16": BF16, "float64": F64, "float32": F32, "float16": F16, "int64": I64,
                 "int32": I32, "int16": I16, "int8": I8, "uint8": U8, "uint16": U16,
                 "uint32": U32, "uint64": U64, "bytes": BYTE})


def dtype_id(arr_dtype: np.dtype, name: str, override: Optional[Union[str, np.dtype]] = None) -> int:
    """The DType ID of an array's dtype (or of ``override``), naming the array on error."""
    if override is not None:
        if isinstance(override, str) and override.lower() in _ALIASES:
            did = _ALIASES[override.lower()]
        else:
            did = dtype_id(np.dtype(override), name)
        if NUMPY[did].itemsize != arr_dtype.itemsize:
            raise TypeError(f"tensorpress: array {name!r}: dtype {override!r} needs {NUMPY[did].itemsize}-byte "
                            f"elements, the array has {arr_dtype}")
        return did
    key = f"{arr_dtype.kind}{arr_dtype.itemsize}"
    did = _FROM_KIND.get(key)
    if did is None:
        raise TypeError(f"tensorpress: array {name!r}: {arr_dtype} is not supported "
                        f"(supported: float16/32/64, int8-64, uint8-64, bool; bf16 as uint16 with dtype='bf16')")
    return did


def widen_bf16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) to float32, exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)
