//go:build cgo

package main

/*
#include <stdint.h>
#include <stdlib.h>

typedef uint64_t tp_handle;

// Codes (internal/cabi): values are permanent.
enum { TP_OK=0, TP_ECORRUPT=1, TP_ECHECKSUM=2, TP_ETRUNCATED=3, TP_ENOTFRAME=4, TP_ELIMIT=5,
       TP_EUNSUPPORTED=6, TP_ELOSSY=7, TP_ERECIPE=8, TP_EARG=9, TP_ESTATE=10, TP_ENONFINITE=11,
       TP_ENOTFOUND=12, TP_EBASE=13, TP_EUNAVAILABLE=14, TP_EAUTH=15, TP_ETIMEOUT=16,
       TP_ECANCELED=17, TP_EHANDLE=18, TP_EINTERNAL=99 };

// Tensor flags; TP_F_BYTES marks a byte stream record of tp_decode_info.
enum { TP_F_LOSSLESS=1, TP_F_BYTES=2 };

// CRC modes of tp_encode: a payload CRC always, or not on frames stored raw.
enum { TP_CRC_ALWAYS=0, TP_CRC_OMIT_RAW=1 };

// A tensor: dtype is the codec.DType wire ID (0 byte, 1 f64, 2 f32, 3 f16,
// 4 bf16, 5 i64, 6 i32, 7 i16, 8 i8, 9 u8, 10 bool, 11 u16, 12 u32, 13 u64);
// data is little-endian, row-major, nbytes long; tags "k=v\0k=v" or NULL.
typedef struct { const char *name; int64_t name_len; int32_t dtype; int32_t ndim;
                 const int64_t *shape; void *data; int64_t nbytes; int32_t flags;
                 const char *tags; int64_t tags_len; } tp_tensor;

// Decoder limits; a field at 0 takes the default (codec.DefaultLimits).
// max_slow_decoded: bytes of a frame decoded through stages that decode at
// some or tens of MB/s (floatcm, floatrank); 64 MiB by default, 1 MiB for
// a receiver (tp_receiver_new: updates from peers).
typedef struct { int64_t max_header, max_frame, max_decoded, max_tensor, max_dims,
                 max_segments, max_tensors, max_name, max_tags, max_slow_decoded; } tp_limits;

// An output buffer.
typedef struct { void *data; int64_t cap; } tp_buf;

// A float32 accumulator of tp_receiver_add; name NULL: any tensor.
typedef struct { const char *name; int64_t name_len; float *data; int64_t nelem;
                 int32_t ndim; const int64_t *shape; } tp_acc;

// Hub authentication, each a file path or NULL: a CA (TLS on), a client
// certificate and key (mutual TLS), the name the server's certificate is
// checked for, a token file.
typedef struct { const char *ca_file, *cert_file, *key_file, *server_name, *token_file; } tp_auth;

// The memory of a fetched tensor (nbytes bytes, dtype and shape as in
// tp_tensor), valid until tp_hub_fetch returns; NULL cancels the fetch.
typedef void *(*tp_alloc_fn)(void *user, const char *name, int64_t name_len, int32_t dtype,
                             int32_t ndim, const int64_t *shape, int64_t nbytes);
static inline void *tp_call_alloc(tp_alloc_fn f, void *u, const char *n, int64_t nl, int32_t d,
                                  int32_t nd, const int64_t *s, int64_t nb) { return f(u, n, nl, d, nd, s, nb); }
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"unsafe"

	"github.com/tensorpress/tensorpress/internal/cabi"
)

// abiVersion changes when a signature or struct of the header changes.
const abiVersion = 2

var version = C.CString(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return "tensorpress " + bi.Main.Version
	}
	return "tensorpress (devel)"
}())

// ret returns code, with msg in *err when err is not NULL.
func ret(code int32, msg string, err **C.char) C.int32_t {
	if code != cabi.OK && err != nil {
		*err = C.CString(msg)
	}
	return C.int32_t(code)
}

// guard recovers a panic in a wrapper (a bad out pointer, say) as
// TP_EINTERNAL; the logic in cabi recovers its own.
func guard(rc *C.int32_t, err **C.char) {
	if r := recover(); r != nil {
		*rc = ret(cabi.EINTERNAL, fmt.Sprintf("tensorpress: internal error (please report): %v", r), err)
	}
}

func bp(p *C.char) *byte             { return (*byte)(unsafe.Pointer(p)) }
func tv(t *C.tp_tensor) *cabi.Tensor { return (*cabi.Tensor)(unsafe.Pointer(t)) }
func lv(l *C.tp_limits) *cabi.Limits { return (*cabi.Limits)(unsafe.Pointer(l)) }

// setOut stores an output length and spill handle where asked.
func setOut(outLen *C.int64_t, spill *C.tp_handle, n int64, s uint64) {
	if outLen != nil {
		*outLen = C.int64_t(n)
	}
	if spill != nil {
		*spill = C.tp_handle(s)
	}
}

//export tp_version
func tp_version() *C.char { return version }

//export tp_abi_version
func tp_abi_version() C.int32_t { return abiVersion }

//export tp_free
func tp_free(p unsafe.Pointer) { C.free(p) }

//export tp_release_memory
func tp_release_memory() { debug.FreeOSMemory() }

//export tp_live_handles
func tp_live_handles() C.int64_t { return C.int64_t(cabi.LiveHandles()) }

//export tp_close
func tp_close(h C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	code, msg := cabi.Close(uint64(h))
	return ret(code, msg, err)
}

//export tp_take
func tp_take(spill C.tp_handle, out *C.uint8_t, capacity C.int64_t, outLen *C.int64_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	n, code, msg := cabi.Take(uint64(spill), unsafe.Pointer(out), int64(capacity))
	setOut(outLen, nil, n, 0)
	return ret(code, msg, err)
}

//export tp_recipe_check
func tp_recipe_check(s *C.char, n C.int64_t, lossy *C.int32_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	l, code, msg := cabi.RecipeCheck(bp(s), int64(n))
	if lossy != nil {
		*lossy = 0
		if l {
			*lossy = 1
		}
	}
	return ret(code, msg, err)
}

//export tp_spec_check
func tp_spec_check(s *C.char, n C.int64_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	code, msg := cabi.SpecCheck(bp(s), int64(n))
	return ret(code, msg, err)
}

//export tp_profile_load
func tp_profile_load(yaml *C.char, n C.int64_t, out *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	h, code, msg := cabi.ProfileLoad(unsafe.Pointer(yaml), int64(n))
	*out = C.tp_handle(h)
	return ret(code, msg, err)
}

//export tp_profile_builtin
func tp_profile_builtin(name *C.char, out *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	s := C.GoString(name)
	h, code, msg := cabi.ProfileBuiltin(unsafe.StringData(s), int64(len(s)))
	*out = C.tp_handle(h)
	return ret(code, msg, err)
}

// tp_profile_builtins writes the built-in profiles' names, one per line,
// into out; *len is the length needed (retry with a larger buffer when it
// is above cap; nothing is written then).
//
//export tp_profile_builtins
func tp_profile_builtins(out *C.uint8_t, capacity C.int64_t, n *C.int64_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	s := cabi.ProfileBuiltins()
	*n = C.int64_t(len(s))
	if int64(len(s)) <= int64(capacity) && len(s) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), len(s)), s)
	}
	return C.TP_OK
}

//export tp_max_tensor_len
func tp_max_tensor_len(t *C.tp_tensor) C.int64_t { return C.int64_t(cabi.MaxTensorLen(tv(t))) }

//export tp_max_encoded_len
func tp_max_encoded_len(n C.int64_t) C.int64_t { return C.int64_t(cabi.MaxEncodedLen(int64(n))) }

//export tp_encode
func tp_encode(t *C.tp_tensor, recipe *C.char, rlen C.int64_t, profile C.tp_handle, crc C.int32_t,
	out *C.uint8_t, capacity C.int64_t, outLen *C.int64_t, spill *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	n, s, code, msg := cabi.Encode(tv(t), bp(recipe), int64(rlen), uint64(profile), int32(crc), unsafe.Pointer(out), int64(capacity))
	setOut(outLen, spill, n, s)
	return ret(code, msg, err)
}

//export tp_encode_bytes
func tp_encode_bytes(p *C.uint8_t, n C.int64_t, recipe *C.char, rlen C.int64_t, crc C.int32_t,
	out *C.uint8_t, capacity C.int64_t, outLen *C.int64_t, spill *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	m, s, code, msg := cabi.EncodeBytes(unsafe.Pointer(p), int64(n), bp(recipe), int64(rlen), int32(crc), unsafe.Pointer(out), int64(capacity))
	setOut(outLen, spill, m, s)
	return ret(code, msg, err)
}

// tp_decode_info describes the frames at src from their headers: a u32
// record count, then per record u8 dtype, u8 flags, u16 ndim, u32 name
// length, i64 bytes, i64 shape[ndim], the name (little-endian). *len is
// the length needed; when above cap, nothing is written: retry.
//
//export tp_decode_info
func tp_decode_info(src *C.uint8_t, n C.int64_t, lim *C.tp_limits, profile C.tp_handle,
	info *C.uint8_t, capacity C.int64_t, infoLen *C.int64_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	need, code, msg := cabi.DecodeInfo(unsafe.Pointer(src), int64(n), lv(lim), uint64(profile), unsafe.Pointer(info), int64(capacity))
	*infoLen = C.int64_t(need)
	return ret(code, msg, err)
}

//export tp_decode_into
func tp_decode_into(src *C.uint8_t, n C.int64_t, lim *C.tp_limits, profile C.tp_handle,
	outs *C.tp_buf, nout C.int32_t, copies *C.int64_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	c, code, msg := cabi.DecodeInto(unsafe.Pointer(src), int64(n), lv(lim), uint64(profile), (*cabi.Buf)(unsafe.Pointer(outs)), int32(nout))
	if copies != nil {
		*copies = C.int64_t(c)
	}
	return ret(code, msg, err)
}

//export tp_sender_new
func tp_sender_new(spec *C.char, n C.int64_t, out *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	h, code, msg := cabi.SenderNew(bp(spec), int64(n))
	*out = C.tp_handle(h)
	return ret(code, msg, err)
}

//export tp_sender_compress
func tp_sender_compress(s C.tp_handle, t *C.tp_tensor, spec *C.char, sn C.int64_t, density C.double,
	out *C.uint8_t, capacity C.int64_t, outLen *C.int64_t, spill *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	n, sp, code, msg := cabi.SenderCompress(uint64(s), tv(t), bp(spec), int64(sn), float64(density), unsafe.Pointer(out), int64(capacity))
	setOut(outLen, spill, n, sp)
	return ret(code, msg, err)
}

// tp_sender_plan ranks the n float32 updates upd (every tensor of one
// update) together for a spec that selects over the whole update,
// topk(r,model=on): the sender's, or spec when not NULL. Each tensor's next
// tp_sender_compress with that spec keeps its share of the update's k
// largest values; a compress of such a spec without a plan fails. Other
// specs: nothing to do.
//
//export tp_sender_plan
func tp_sender_plan(s C.tp_handle, upd *C.tp_tensor, nupd C.int32_t, spec *C.char, sn C.int64_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	code, msg := cabi.SenderPlan(uint64(s), tv(upd), int32(nupd), bp(spec), int64(sn))
	return ret(code, msg, err)
}

//export tp_sender_commit
func tp_sender_commit(s C.tp_handle, n C.int32_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	code, msg := cabi.SenderCommit(uint64(s), int32(n))
	return ret(code, msg, err)
}

//export tp_sender_abort
func tp_sender_abort(s C.tp_handle, lastOnly C.int32_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	code, msg := cabi.SenderAbort(uint64(s), lastOnly != 0)
	return ret(code, msg, err)
}

//export tp_sender_pending
func tp_sender_pending(s C.tp_handle, n *C.int32_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	k, code, msg := cabi.SenderPending(uint64(s))
	*n = C.int32_t(k)
	return ret(code, msg, err)
}

//export tp_sender_set_epoch
func tp_sender_set_epoch(s C.tp_handle, e C.double, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	code, msg := cabi.SenderSetEpoch(uint64(s), float64(e))
	return ret(code, msg, err)
}

//export tp_sender_state
func tp_sender_state(s C.tp_handle, out *C.uint8_t, capacity C.int64_t, outLen *C.int64_t, spill *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	n, sp, code, msg := cabi.SenderState(uint64(s), unsafe.Pointer(out), int64(capacity))
	setOut(outLen, spill, n, sp)
	return ret(code, msg, err)
}

//export tp_sender_load_state
func tp_sender_load_state(s C.tp_handle, p *C.uint8_t, n C.int64_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	code, msg := cabi.SenderLoadState(uint64(s), unsafe.Pointer(p), int64(n))
	return ret(code, msg, err)
}

//export tp_receiver_new
func tp_receiver_new(lim *C.tp_limits, out *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	h, code, msg := cabi.ReceiverNew(lv(lim))
	*out = C.tp_handle(h)
	return ret(code, msg, err)
}

//export tp_receiver_add
func tp_receiver_add(r C.tp_handle, src *C.uint8_t, n C.int64_t, weight C.float, accs *C.tp_acc, nacc C.int32_t,
	consumed *C.int64_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	k, code, msg := cabi.ReceiverAdd(uint64(r), unsafe.Pointer(src), int64(n), float32(weight), (*cabi.Acc)(unsafe.Pointer(accs)), int32(nacc))
	if consumed != nil {
		*consumed = C.int64_t(k)
	}
	return ret(code, msg, err)
}

// tp_hub_dial makes a client of the hub at addr (host:port,
// dns:///host:port, unix:///path, http:// or https://); auth may be NULL.
// It connects at the first call.
//
//export tp_hub_dial
func tp_hub_dial(addr *C.char, a *C.tp_auth, out *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	var ha cabi.HubAuth
	if a != nil {
		ha = cabi.HubAuth{CAFile: C.GoString(a.ca_file), CertFile: C.GoString(a.cert_file), KeyFile: C.GoString(a.key_file),
			ServerName: C.GoString(a.server_name), TokenFile: C.GoString(a.token_file)}
	}
	h, code, msg := cabi.HubDial(C.GoString(addr), ha)
	*out = C.tp_handle(h)
	return ret(code, msg, err)
}

// tp_hub_versions writes the hub's versions, newest first, as JSON
// [{"version","tensors","bytes"}] into out (spill when it does not fit).
//
//export tp_hub_versions
func tp_hub_versions(h C.tp_handle, timeoutMS C.int64_t, out *C.uint8_t, capacity C.int64_t, outLen *C.int64_t, spill *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	n, sp, code, msg := cabi.HubVersions(uint64(h), int64(timeoutMS), unsafe.Pointer(out), int64(capacity))
	setOut(outLen, spill, n, sp)
	return ret(code, msg, err)
}

// tp_hub_fetch fetches what the JSON request {version, names,
// require_lossless, credit, base, retries, stall_ms, timeout_ms} selects:
// each tensor goes into the memory alloc returns for it, checked against
// the hub's digest; base holds the caller's copies of version base (read
// only). The JSON result {version, deltas, full, resumed, base_note,
// digests, lossy, unchecked, bytes_received, base_error} goes into out,
// also with TP_EBASE (base_error names the tensors to fetch again whole).
//
//export tp_hub_fetch
func tp_hub_fetch(h C.tp_handle, req *C.char, n C.int64_t, lim *C.tp_limits, base *C.tp_tensor, nbase C.int32_t,
	alloc C.tp_alloc_fn, user unsafe.Pointer, out *C.uint8_t, capacity C.int64_t, outLen *C.int64_t, spill *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	if alloc == nil {
		return ret(cabi.EARG, "tensorpress: tp_hub_fetch: no alloc function (NULL)", err)
	}
	af := func(name string, dtype int32, shape []int64, nb int64) unsafe.Pointer {
		return C.tp_call_alloc(alloc, user, (*C.char)(unsafe.Pointer(unsafe.StringData(name))), C.int64_t(len(name)), C.int32_t(dtype),
			C.int32_t(len(shape)), (*C.int64_t)(unsafe.Pointer(unsafe.SliceData(shape))), C.int64_t(nb))
	}
	m, sp, code, msg := cabi.HubFetch(uint64(h), C.GoBytes(unsafe.Pointer(req), C.int(n)), lv(lim), tv(base), int32(nbase), af, unsafe.Pointer(out), int64(capacity))
	setOut(outLen, spill, m, sp)
	return ret(code, msg, err)
}

// tp_hub_upload sends the float32 updates upd for the round of the JSON
// request {round, weight, peer, spec, timeout_ms} through sender's error
// feedback (0: none kept); each is committed in the sender when the hub
// acknowledges it. The JSON result {updates, bytes_sent} goes into out.
//
//export tp_hub_upload
func tp_hub_upload(h, sender C.tp_handle, req *C.char, n C.int64_t, upd *C.tp_tensor, nupd C.int32_t,
	out *C.uint8_t, capacity C.int64_t, outLen *C.int64_t, spill *C.tp_handle, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	m, sp, code, msg := cabi.HubUpload(uint64(h), uint64(sender), C.GoBytes(unsafe.Pointer(req), C.int(n)), tv(upd), int32(nupd), unsafe.Pointer(out), int64(capacity))
	setOut(outLen, spill, m, sp)
	return ret(code, msg, err)
}

// tp_hub_cancel cancels the calls in flight on hub h (from another
// thread): they return TP_ECANCELED. *n, if not NULL, is how many.
//
//export tp_hub_cancel
func tp_hub_cancel(h C.tp_handle, n *C.int32_t, err **C.char) (rc C.int32_t) {
	defer guard(&rc, err)
	k, code, msg := cabi.HubCancel(uint64(h))
	if n != nil {
		*n = C.int32_t(k)
	}
	return ret(code, msg, err)
}

// tp_debug_memstats reports the Go heap in use, the bytes allocated since
// the start and the memory obtained from the system (unstable: tests).
//
//export tp_debug_memstats
func tp_debug_memstats(heap, totalAlloc, sys *C.int64_t) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	*heap, *totalAlloc, *sys = C.int64_t(m.HeapAlloc), C.int64_t(m.TotalAlloc), C.int64_t(m.Sys)
}

// layouts gives, for each C struct, its size and field offsets as the C
// compiler lays them out and as internal/cabi's Go twin does, for the test
// that holds them equal (the wrappers cast one to the other).
func layouts() map[string][2][]uintptr {
	var t C.tp_tensor
	var gt cabi.Tensor
	var l C.tp_limits
	var gl cabi.Limits
	var b C.tp_buf
	var gb cabi.Buf
	var a C.tp_acc
	var ga cabi.Acc
	var au C.tp_auth
	return map[string][2][]uintptr{
		"tp_tensor": {
			{unsafe.Sizeof(t), unsafe.Offsetof(t.name), unsafe.Offsetof(t.name_len), unsafe.Offsetof(t.dtype), unsafe.Offsetof(t.ndim), unsafe.Offsetof(t.shape), unsafe.Offsetof(t.data), unsafe.Offsetof(t.nbytes), unsafe.Offsetof(t.flags), unsafe.Offsetof(t.tags), unsafe.Offsetof(t.tags_len)},
			{unsafe.Sizeof(gt), unsafe.Offsetof(gt.Name), unsafe.Offsetof(gt.NameLen), unsafe.Offsetof(gt.DType), unsafe.Offsetof(gt.NDim), unsafe.Offsetof(gt.Shape), unsafe.Offsetof(gt.Data), unsafe.Offsetof(gt.NBytes), unsafe.Offsetof(gt.Flags), unsafe.Offsetof(gt.Tags), unsafe.Offsetof(gt.TagsLen)},
		},
		"tp_limits": {
			{unsafe.Sizeof(l), unsafe.Offsetof(l.max_header), unsafe.Offsetof(l.max_tags), unsafe.Offsetof(l.max_slow_decoded)},
			{unsafe.Sizeof(gl), unsafe.Offsetof(gl.MaxHeader), unsafe.Offsetof(gl.MaxTags), unsafe.Offsetof(gl.MaxSlowDecoded)},
		},
		"tp_buf": {
			{unsafe.Sizeof(b), unsafe.Offsetof(b.data), unsafe.Offsetof(b.cap)},
			{unsafe.Sizeof(gb), unsafe.Offsetof(gb.Data), unsafe.Offsetof(gb.Cap)},
		},
		"tp_acc": {
			{unsafe.Sizeof(a), unsafe.Offsetof(a.name), unsafe.Offsetof(a.name_len), unsafe.Offsetof(a.data), unsafe.Offsetof(a.nelem), unsafe.Offsetof(a.ndim), unsafe.Offsetof(a.shape)},
			{unsafe.Sizeof(ga), unsafe.Offsetof(ga.Name), unsafe.Offsetof(ga.NameLen), unsafe.Offsetof(ga.Data), unsafe.Offsetof(ga.NElem), unsafe.Offsetof(ga.NDim), unsafe.Offsetof(ga.Shape)},
		},
		// tp_auth is read field by field (C.GoString), not cast: five pointers.
		"tp_auth": {
			{unsafe.Sizeof(au), unsafe.Offsetof(au.token_file)},
			{5 * unsafe.Sizeof(uintptr(0)), 4 * unsafe.Sizeof(uintptr(0))},
		},
	}
}
