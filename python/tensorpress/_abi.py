"""ctypes mirrors of the C structs of libtensorpress.h (field for field;
tests/test_abi.py holds them to the header)."""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_double, c_float, c_int32, c_int64, c_uint8, c_uint64, c_void_p

tp_handle = c_uint64


class tp_tensor(ctypes.Structure):
    """A tensor descriptor: the data is the caller's, read in place."""

    _fields_ = [
        ("name", c_char_p), ("name_len", c_int64), ("dtype", c_int32), ("ndim", c_int32),
        ("shape", POINTER(c_int64)), ("data", c_void_p), ("nbytes", c_int64), ("flags", c_int32),
        ("tags", c_char_p), ("tags_len", c_int64),
    ]


class tp_limits(ctypes.Structure):
    """Decoder limits; 0 takes the default."""

    _fields_ = [(n, c_int64) for n in (
        "max_header", "max_frame", "max_decoded", "max_tensor", "max_dims",
        "max_segments", "max_tensors", "max_name", "max_tags", "max_slow_decoded")]


class tp_buf(ctypes.Structure):
    """An output buffer."""

    _fields_ = [("data", c_void_p), ("cap", c_int64)]


class tp_acc(ctypes.Structure):
    """A float32 accumulator; name NULL matches any tensor."""

    _fields_ = [
        ("name", c_char_p), ("name_len", c_int64), ("data", POINTER(c_float)), ("nelem", c_int64),
        ("ndim", c_int32), ("shape", POINTER(c_int64)),
    ]


class tp_auth(ctypes.Structure):
    """Hub authentication: file paths, NULL for none."""

    _fields_ = [(n, c_char_p) for n in ("ca_file", "cert_file", "key_file", "server_name", "token_file")]


# tp_alloc_fn: (user, name, name_len, dtype, ndim, shape, nbytes) -> memory for a fetched tensor, or NULL.
ALLOC_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_void_p, c_int64, c_int32, c_int32, POINTER(c_int64), c_int64)

STRUCTS = {"tp_tensor": tp_tensor, "tp_limits": tp_limits, "tp_buf": tp_buf, "tp_acc": tp_acc, "tp_auth": tp_auth}

_err = POINTER(c_char_p)
_p = c_void_p
_i64p = POINTER(c_int64)
_hp = POINTER(tp_handle)

#: The C ABI these structs and signatures describe (tp_abi_version); it
#: changes with any of them.
ABI_VERSION = 2

# name: (restype, argtypes)
SIGNATURES = {
    "tp_version": (c_char_p, []),
    "tp_abi_version": (c_int32, []),
    "tp_free": (None, [c_void_p]),
    "tp_release_memory": (None, []),
    "tp_live_handles": (c_int64, []),
    "tp_close": (c_int32, [tp_handle, _err]),
    "tp_take": (c_int32, [tp_handle, _p, c_int64, _i64p, _err]),
    "tp_recipe_check": (c_int32, [c_char_p, c_int64, POINTER(c_int32), _err]),
    "tp_spec_check": (c_int32, [c_char_p, c_int64, _err]),
    "tp_profile_load": (c_int32, [c_char_p, c_int64, _hp, _err]),
    "tp_profile_builtin": (c_int32, [c_char_p, _hp, _err]),
    "tp_profile_builtins": (c_int32, [_p, c_int64, _i64p, _err]),
    "tp_max_tensor_len": (c_int64, [POINTER(tp_tensor)]),
    "tp_max_encoded_len": (c_int64, [c_int64]),
    "tp_encode": (c_int32, [POINTER(tp_tensor), c_char_p, c_int64, tp_handle, c_int32,
                            _p, c_int64, _i64p, _hp, _err]),
    "tp_encode_bytes": (c_int32, [_p, c_int64, c_char_p, c_int64, c_int32, _p, c_int64, _i64p, _hp, _err]),
    "tp_decode_info": (c_int32, [_p, c_int64, POINTER(tp_limits), tp_handle, _p, c_int64, _i64p, _err]),
    "tp_decode_into": (c_int32, [_p, c_int64, POINTER(tp_limits), tp_handle, POINTER(tp_buf), c_int32,
                                 _i64p, _err]),
    "tp_sender_new": (c_int32, [c_char_p, c_int64, _hp, _err]),
    "tp_sender_compress": (c_int32, [tp_handle, POINTER(tp_tensor), c_char_p, c_int64, c_double,
                                     _p, c_int64, _i64p, _hp, _err]),
    "tp_sender_plan": (c_int32, [tp_handle, POINTER(tp_tensor), c_int32, c_char_p, c_int64, _err]),
    "tp_sender_commit": (c_int32, [tp_handle, c_int32, _err]),
    "tp_sender_abort": (c_int32, [tp_handle, c_int32, _err]),
    "tp_sender_pending": (c_int32, [tp_handle, POINTER(c_int32), _err]),
    "tp_sender_set_epoch": (c_int32, [tp_handle, c_double, _err]),
    "tp_sender_state": (c_int32, [tp_handle, _p, c_int64, _i64p, _hp, _err]),
    "tp_sender_load_state": (c_int32, [tp_handle, _p, c_int64, _err]),
    "tp_receiver_new": (c_int32, [POINTER(tp_limits), _hp, _err]),
    "tp_receiver_add": (c_int32, [tp_handle, _p, c_int64, c_float, POINTER(tp_acc), c_int32, _i64p, _err]),
    "tp_hub_dial": (c_int32, [c_char_p, POINTER(tp_auth), _hp, _err]),
    "tp_hub_versions": (c_int32, [tp_handle, c_int64, _p, c_int64, _i64p, _hp, _err]),
    "tp_hub_fetch": (c_int32, [tp_handle, c_char_p, c_int64, POINTER(tp_limits), POINTER(tp_tensor), c_int32,
                               ALLOC_FN, c_void_p, _p, c_int64, _i64p, _hp, _err]),
    "tp_hub_upload": (c_int32, [tp_handle, tp_handle, c_char_p, c_int64, POINTER(tp_tensor), c_int32,
                                _p, c_int64, _i64p, _hp, _err]),
    "tp_hub_cancel": (c_int32, [tp_handle, POINTER(c_int32), _err]),
    "tp_debug_memstats": (None, [_i64p, _i64p, _i64p]),
}

U8P = POINTER(c_uint8)
