//go:build amd64 && !noasm && gc

package lossless

import (
	"unsafe"

	"github.com/tensorpress/tensorpress/internal/cpufeature"
)

// This file and shuffle_amd64.s hold the AVX2 shuffle kernels; without
// AVX2 (or in noasm and gccgo builds: shuffle_noasm.go) the pure-Go
// kernels of shuffle.go do all the work, with the same results. Each
// *Asm function handles the largest multiple of 32 elements it can and
// returns how many elements it did; the caller finishes the rest.

// shuffleHasAVX2 reports whether the CPU and the OS support AVX2.
var shuffleHasAVX2 = cpufeature.AVX2

// shuffleNTMin is the output size in bytes from which the unshuffle
// kernels write with non-temporal stores (when the output address is a
// multiple of 32): an output this big would not stay in cache anyway, and
// streaming it saves reading every destination line before writing it, a
// third of the memory traffic (runtime.memmove streams from 1 MiB). At
// 64 MiB it takes Unshuffle4 from about 0.7x of copy to 1x or more. The
// shuffle kernels write w planes at once, too many streams for the CPU's
// write-combining buffers: streaming stores made them slower (Shuffle8 at
// 64 MiB 6.7 GB/s, against 11.5 GB/s with ordinary stores), so they never
// stream.
var shuffleNTMin = 8 << 20

// shuffleNT reports whether an output of n bytes at p takes the
// non-temporal kernels.
func shuffleNT(n int, p *byte) bool {
	return n >= shuffleNTMin && uintptr(unsafe.Pointer(p))%32 == 0
}

//go:noescape
func shuffle2AVX2(p0, p1, src *byte, n int)

//go:noescape
func unshuffle2AVX2(dst, p0, p1 *byte, n int)

//go:noescape
func unshuffle2AVX2NT(dst, p0, p1 *byte, n int)

//go:noescape
func shuffle4AVX2(p0, p1, p2, p3, src *byte, n int)

//go:noescape
func unshuffle4AVX2(dst, p0, p1, p2, p3 *byte, n int)

//go:noescape
func unshuffle4AVX2NT(dst, p0, p1, p2, p3 *byte, n int)

//go:noescape
func shuffle8AVX2(p0, p1, p2, p3, p4, p5, p6, p7, src *byte, n int)

//go:noescape
func unshuffle8AVX2(dst, p0, p1, p2, p3, p4, p5, p6, p7 *byte, n int)

//go:noescape
func unshuffle8AVX2NT(dst, p0, p1, p2, p3, p4, p5, p6, p7 *byte, n int)

// The wrappers check every length before the kernels touch memory.

func shuffle2Asm(p0, p1, src []byte) int {
	n := len(p0) &^ 31
	if !shuffleHasAVX2 || n == 0 {
		return 0
	}
	_, _ = p1[n-1], src[2*n-1]
	shuffle2AVX2(&p0[0], &p1[0], &src[0], n)
	return n
}

func unshuffle2Asm(dst, p0, p1 []byte) int {
	n := len(p0) &^ 31
	if !shuffleHasAVX2 || n == 0 {
		return 0
	}
	_, _ = p1[n-1], dst[2*n-1]
	if shuffleNT(2*n, &dst[0]) {
		unshuffle2AVX2NT(&dst[0], &p0[0], &p1[0], n)
		return n
	}
	unshuffle2AVX2(&dst[0], &p0[0], &p1[0], n)
	return n
}

func shuffle4Asm(p0, p1, p2, p3, src []byte) int {
	n := len(p0) &^ 31
	if !shuffleHasAVX2 || n == 0 {
		return 0
	}
	_, _, _, _ = p1[n-1], p2[n-1], p3[n-1], src[4*n-1]
	shuffle4AVX2(&p0[0], &p1[0], &p2[0], &p3[0], &src[0], n)
	return n
}

func unshuffle4Asm(dst, p0, p1, p2, p3 []byte) int {
	n := len(p0) &^ 31
	if !shuffleHasAVX2 || n == 0 {
		return 0
	}
	_, _, _, _ = p1[n-1], p2[n-1], p3[n-1], dst[4*n-1]
	if shuffleNT(4*n, &dst[0]) {
		unshuffle4AVX2NT(&dst[0], &p0[0], &p1[0], &p2[0], &p3[0], n)
		return n
	}
	unshuffle4AVX2(&dst[0], &p0[0], &p1[0], &p2[0], &p3[0], n)
	return n
}

func shuffle8Asm(p *[8][]byte, src []byte) int {
	n := len(p[0]) &^ 31
	if !shuffleHasAVX2 || n == 0 {
		return 0
	}
	for k := range p {
		_ = p[k][n-1]
	}
	_ = src[8*n-1]
	shuffle8AVX2(&p[0][0], &p[1][0], &p[2][0], &p[3][0], &p[4][0], &p[5][0], &p[6][0], &p[7][0], &src[0], n)
	return n
}

func unshuffle8Asm(dst []byte, p *[8][]byte) int {
	n := len(p[0]) &^ 31
	if !shuffleHasAVX2 || n == 0 {
		return 0
	}
	for k := range p {
		_ = p[k][n-1]
	}
	_ = dst[8*n-1]
	if shuffleNT(8*n, &dst[0]) {
		unshuffle8AVX2NT(&dst[0], &p[0][0], &p[1][0], &p[2][0], &p[3][0], &p[4][0], &p[5][0], &p[6][0], &p[7][0], n)
		return n
	}
	unshuffle8AVX2(&dst[0], &p[0][0], &p[1][0], &p[2][0], &p[3][0], &p[4][0], &p[5][0], &p[6][0], &p[7][0], n)
	return n
}
