package topk

import (
	"encoding/binary"
	"unsafe"
)

// bitsOf returns the IEEE bits of x without copying. Reading the bits as
// uint32 spares a float-to-integer register move per element.
func bitsOf(x []float32) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(x))), len(x))
}

// bytesOf returns the memory of x without copying, for 64-bit loads.
func bytesOf(x []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

// block is the number of elements skip tests at once.
const block = 16

// skip returns the first i' >= i, i' = i + a multiple of block, such that
// one of the magnitudes of x[i':i'+block] is >= t, where b = bytesOf(x);
// or the first i' with i'+block > len(x).
//
// Two magnitudes are tested per 64-bit word: with the sign bits set,
// (w | H) - (t, t) subtracts t from 2^31 + |x| in each half without a
// borrow crossing halves (both halves stay positive), and the half's top
// bit is left set exactly where |x| >= t. The order of the halves in a
// word does not matter, so native byte order serves.
func skip(b []byte, i int, t uint32) int {
	const H = 0x8000000080000000
	tt := uint64(t) | uint64(t)<<32
	off := 4 * i
	for ; off+4*block <= len(b); off += 4 * block {
		c := b[off : off+4*block : off+4*block]
		acc := ((binary.NativeEndian.Uint64(c[0:]) | H) - tt) |
			((binary.NativeEndian.Uint64(c[8:]) | H) - tt) |
			((binary.NativeEndian.Uint64(c[16:]) | H) - tt) |
			((binary.NativeEndian.Uint64(c[24:]) | H) - tt) |
			((binary.NativeEndian.Uint64(c[32:]) | H) - tt) |
			((binary.NativeEndian.Uint64(c[40:]) | H) - tt) |
			((binary.NativeEndian.Uint64(c[48:]) | H) - tt) |
			((binary.NativeEndian.Uint64(c[56:]) | H) - tt)
		if acc&H != 0 {
			break
		}
	}
	return off / 4
}
