//go:build cgo && !tensorpress_nolzma

// Package liblzma binds the two calls of XZ Utils' liblzma that the xz
// stage uses, through cgo: a one-block .xz stream with preset 6's encoder
// settings (what `xz -6` writes) at a given dictionary, and the decoding of
// one block's raw LZMA2 data into a buffer it must fill exactly. It exists
// only where cgo is on (the lossless package holds Go assembly, which a
// cgo package cannot) and the build tag tensorpress_nolzma is not set: it
// needs liblzma's header and library (Debian's liblzma-dev; Homebrew's
// xz; Alpine's xz-dev). The container, its limits and the memory a hostile
// stream may ask for are the caller's to check (lossless.xzDecode).
package liblzma

/*
#cgo LDFLAGS: -llzma
#include <lzma.h>

// tp_xz_encode writes one .xz stream of one LZMA2 block, no integrity
// check, with preset 6's encoder settings and a dictionary of dict bytes.
static lzma_ret tp_xz_encode(const uint8_t *in, size_t n, uint8_t *out, size_t *out_pos, size_t out_size, uint32_t dict) {
	lzma_options_lzma opt;
	if (lzma_lzma_preset(&opt, 6))
		return LZMA_OPTIONS_ERROR;
	opt.dict_size = dict;
	lzma_filter f[2] = {{LZMA_FILTER_LZMA2, &opt}, {LZMA_VLI_UNKNOWN, NULL}};
	return lzma_stream_buffer_encode(f, LZMA_CHECK_NONE, NULL, in, n, out, out_pos, out_size);
}

// tp_xz_decode_block decodes raw LZMA2 data into out, which it must fill
// exactly, with a dictionary of dict bytes.
static lzma_ret tp_xz_decode_block(const uint8_t *in, size_t n, size_t *in_pos, uint8_t *out, size_t *out_pos, size_t out_size, uint32_t dict) {
	lzma_options_lzma opt = {0};
	opt.dict_size = dict;
	lzma_filter f[2] = {{LZMA_FILTER_LZMA2, &opt}, {LZMA_VLI_UNKNOWN, NULL}};
	return lzma_raw_buffer_decode(f, NULL, in, in_pos, n, out, out_pos, out_size);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// Bound is the most bytes Encode writes for n bytes of input, 0 when n is
// too large for liblzma.
func Bound(n int) int { return int(C.lzma_stream_buffer_bound(C.size_t(n))) }

// Encode writes src as one .xz stream into out, which has at least
// Bound(len(src)) bytes, and returns the bytes written.
func Encode(out, src []byte, dict int) (int, error) {
	var pos C.size_t
	if r := C.tp_xz_encode(cbytes(src), C.size_t(len(src)), cbytes(out), &pos, C.size_t(len(out)), C.uint32_t(dict)); r != C.LZMA_OK {
		return 0, fmt.Errorf("liblzma: encode: %w", lzmaErr(r))
	}
	return int(pos), nil
}

// ErrTrailing means that a block's LZMA2 data ended (its end marker)
// before the data given did.
var ErrTrailing = errors.New("liblzma: data past the block's decoded size")

// DecodeBlock decodes the raw LZMA2 data of one block into out, which it
// must fill exactly, consuming all of data, with a dictionary of dict
// bytes (4 KiB to 4 GiB - 1; the caller bounds it).
func DecodeBlock(out, data []byte, dict int64) error {
	var in, got C.size_t
	r := C.tp_xz_decode_block(cbytes(data), C.size_t(len(data)), &in, cbytes(out), &got, C.size_t(len(out)), C.uint32_t(dict))
	switch {
	case r == C.LZMA_BUF_ERROR:
		// liblzma restores the positions on an error: whether the input
		// ended early or the output filled first, it does not say.
		return fmt.Errorf("liblzma: the block ends before %d bytes or holds more", len(out))
	case r != C.LZMA_OK:
		return fmt.Errorf("%d of %d bytes decoded: liblzma: %w", int(got), len(out), lzmaErr(r))
	case int(got) != len(out):
		return fmt.Errorf("liblzma: %d of %d bytes decoded", int(got), len(out))
	case int(in) != len(data):
		return ErrTrailing
	}
	return nil
}

// cbytes is b's first byte for C (for an empty b, a byte of its own:
// liblzma refuses NULL buffers): the memory holds no Go pointers, and C
// keeps none of it past the call.
func cbytes(b []byte) *C.uint8_t {
	if len(b) == 0 {
		return (*C.uint8_t)(unsafe.Pointer(&empty))
	}
	return (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(b)))
}

var empty byte

// ErrMemory means that liblzma could not allocate what it needed (an
// encoder's match finder, a decoder's dictionary): a resource failure,
// not bad data.
var ErrMemory = errors.New("liblzma: out of memory")

func lzmaErr(r C.lzma_ret) error {
	switch r {
	case C.LZMA_MEM_ERROR, C.LZMA_MEMLIMIT_ERROR:
		return ErrMemory
	case C.LZMA_OPTIONS_ERROR:
		return errors.New("unsupported options")
	case C.LZMA_DATA_ERROR:
		return errors.New("corrupt data")
	case C.LZMA_BUF_ERROR:
		return errors.New("input ends early or output is full")
	case C.LZMA_PROG_ERROR:
		return errors.New("bad arguments")
	}
	return fmt.Errorf("error %d", int(r))
}
