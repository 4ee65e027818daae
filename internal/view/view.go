// Package view holds the unsafe conversions between byte slices and typed
// slices that the rest of tensorpress uses for zero-copy tensor access, and
// the aligned allocator that makes those conversions legal.
//
// Every conversion checks length and alignment and reports failure instead of
// producing a misaligned typed slice: with -race, checkptr aborts on such a
// slice, and on some architectures the hardware does too. The host must be
// little-endian (tensor data is little-endian on the wire and in memory);
// LittleEndian reports it.
package view

import "unsafe"

// Align is the alignment, in bytes, of every buffer Bytes returns.
const Align = 8

// LittleEndian reports whether the host stores integers little-endian.
var LittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Bytes returns a zeroed byte slice of length n whose first byte is aligned
// to Align bytes, so that it can be viewed as any numeric type.
func Bytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	words := make([]uint64, (n+Align-1)/Align)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}

// Aligned reports whether b starts at an address that is a multiple of a.
func Aligned(b []byte, a int) bool {
	if len(b) == 0 {
		return true
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(a) == 0
}

// As views b as a slice of T without copying. It returns ok=false when b's
// length is not a multiple of T's size or b is not aligned for T.
func As[T any](b []byte) (s []T, ok bool) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if size == 0 || len(b)%size != 0 || !Aligned(b, int(unsafe.Alignof(zero))) {
		return nil, false
	}
	if len(b) == 0 {
		return []T{}, true
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/size), true
}

// Of views s as its bytes without copying.
func Of[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// AsCopy is As for a b whose length is a multiple of T's size: when b is
// not aligned for T, it copies b into alloc(len(b)) (memory aligned to 8
// bytes, such as codec.Arena.Alloc gives) and views the copy.
func AsCopy[T any](b []byte, alloc func(n int) []byte) []T {
	if s, ok := As[T](b); ok {
		return s
	}
	c := alloc(len(b))
	copy(c, b)
	s, _ := As[T](c)
	return s
}
