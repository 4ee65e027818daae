//go:build amd64 && !noasm && gc

package lossy

import (
	"encoding/binary"
	"math/bits"

	"github.com/tensorpress/tensorpress/internal/cpufeature"
)

// This file and block_amd64.s hold the AVX2 kernels of the blockwise
// quantizers int8, nf4 and fp4, quantize and dequantize. Without AVX2 (or
// in noasm and gccgo builds: block_noasm.go) the reference loops of
// block.go, int8.go and fourbit.go do all the work, with the same
// results: the kernels compute the same float32 operations (VDIVSS for
// the block's inv, VMULPS, VCVTPS2DQ rounding half to even as
// roundClamp127 does) and find the same codes (a binary search over the
// midpoints, equal to counting them). Blocks whose size is not a multiple
// of 32, and blocks the kernels stop before (see blockKind.quantizeFast),
// take the Go loops. The wrappers check every length before a kernel
// touches memory.

// blockHasAVX2 reports whether the CPU and the OS support AVX2.
var blockHasAVX2 = cpufeature.AVX2

// Search tables of nf4 and fp4 (searchTables): row 0 is the first
// threshold repeated 8 times, row L (L >= 1) the thresholds of level L+1
// of the binary search, indexed by the code bits found so far.
var (
	nf4Search = searchTables(nf4Mid[:15])
	fp4Search = searchTables(fp4Mid[:7])
)

// searchTables lays out the 2^k-1 ascending midpoints for a k-level binary
// search that finds the number of midpoints below y: level L (1-based)
// compares y with the midpoint p*2^(k-L+1) + 2^(k-L) - 1, p being the
// L-1 code bits found before it, and appends bit (y > that midpoint).
// For nf4: 7, then 3 or 11, then 1, 5, 9 or 13, then 0, 2, ..., 14; the
// result equals the count of midpoints below y (nf4Code, fp4Code).
func searchTables(mids []float32) (t [4][8]float32) {
	k := bits.Len(uint(len(mids)))
	for L := 1; L <= k; L++ {
		for p := range 1 << (L - 1) {
			t[L-1][p] = mids[p<<(k-L+1)+1<<(k-L)-1]
		}
	}
	for j := range t[0] {
		t[0][j] = t[0][0]
	}
	return t
}

// Multi-block kernels: each runs over nblk blocks of blk elements (blk a
// multiple of 32). The dequantizers check each block's scale and return
// how many blocks they did, stopping before a block that the general path
// must take (see blockKind.dequantizeFast); the quantizers get blocks
// whose absmax is known to suit them (quantBlocksFast).

//go:noescape
func absmaxBlocksAVX2(x *float32, nblk, blk int, scale *byte)

//go:noescape
func quantI8BlocksAVX2(q *byte, x *float32, scale *byte, nblk, blk int)

//go:noescape
func dequantI8BlocksAVX2(x *float32, q *byte, scale *byte, nblk, blk int, div float32) (done int, maxAbs uint32)

//go:noescape
func quantNF4BlocksAVX2(q *byte, x *float32, scale *byte, nblk, blk int, search *[4][8]float32)

//go:noescape
func quantFP4BlocksAVX2(q *byte, x *float32, scale *byte, nblk, blk int, search *[4][8]float32)

//go:noescape
func dequant4BlocksAVX2(x *float32, q *byte, scale *byte, nblk, blk int, codebook *[16]float32) (done int)

// blocksFor returns the number of whole blocks of x that the multi-block
// kernels take, and checks that q (bits per code) and scale hold them.
func blocksFor(x []float32, q, scale []byte, blk, bits int) int {
	if blk%32 != 0 || len(x) < blk {
		return 0
	}
	nb := len(x) / blk
	_, _ = q[nb*blk*bits/8-1], scale[4*nb-1]
	return nb
}

// quantFastChunk is the input the absmax-based quantizers take per pass:
// absmaxBlocksAVX2 writes the scales of up to this many bytes of blocks,
// and the quantize kernel then reads them again from L1.
const quantFastChunk = 16 << 10

// quantBlocksFast runs the absmax-based kernel quant over whole blocks of
// x, a chunk at a time: the absmax of every block of the chunk first
// (written to scale), then quant over the blocks before the first one
// whose absmax is 0, tiny or not finite (where it stops, leaving that
// block to the general path). Splitting the two keeps the division that
// starts each block off the critical path of the one before.
func quantBlocksFast(o *blockOp, q, scale []byte, x []float32, bits int,
	quant func(q *byte, x *float32, scale *byte, nblk, blk int)) int {
	B := o.block
	nb := blocksFor(x, q, scale, B, bits)
	per := max(1, quantFastChunk/(4*B))
	for b := 0; b < nb; {
		c := min(per, nb-b)
		absmaxBlocksAVX2(&x[b*B], c, B, &scale[4*b])
		p := 0
		for ; p < c; p++ {
			if m := binary.LittleEndian.Uint32(scale[4*(b+p):]); m < tinyBits || m >= nonFiniteBits {
				break
			}
		}
		if p > 0 {
			quant(&q[b*B*bits/8], &x[b*B], &scale[4*b], p, B)
		}
		if b += p; p < c {
			return b * B
		}
	}
	return nb * B
}

func int8QuantizeFast(o *blockOp, q, scale []byte, x []float32) int {
	return quantBlocksFast(o, q, scale, x, 8, quantI8BlocksAVX2)
}

// int8DequantizeFast serves int8 (scale/127, codes in [-127, 127]) and
// qsgd (scale/s, codes in [-s, s]).
func int8DequantizeFast(o *blockOp, x []float32, q, scale []byte) (int, bool) {
	nb := blocksFor(x, q, scale, o.block, 8)
	if nb == 0 {
		return 0, true
	}
	levels := 127
	if o.kind.id == QSGDID {
		levels = o.levels
	}
	done, maxAbs := dequantI8BlocksAVX2(&x[0], &q[0], &scale[0], nb, o.block, float32(levels))
	return o.block * done, maxAbs <= uint32(levels)
}

func nf4QuantizeFast(o *blockOp, q, scale []byte, x []float32) int {
	return quantBlocksFast(o, q, scale, x, 4, func(q *byte, x *float32, scale *byte, nblk, blk int) {
		quantNF4BlocksAVX2(q, x, scale, nblk, blk, &nf4Search)
	})
}

func fp4QuantizeFast(o *blockOp, q, scale []byte, x []float32) int {
	return quantBlocksFast(o, q, scale, x, 4, func(q *byte, x *float32, scale *byte, nblk, blk int) {
		quantFP4BlocksAVX2(q, x, scale, nblk, blk, &fp4Search)
	})
}

func dequant4Fast(o *blockOp, x []float32, q, scale []byte) (int, bool) {
	nb := blocksFor(x, q, scale, o.block, 4)
	if nb == 0 {
		return 0, true
	}
	return o.block * dequant4BlocksAVX2(&x[0], &q[0], &scale[0], nb, o.block, codebook4(o)), true
}

// Kernels of sign, ternary and qsgd, called per block on the largest
// multiple of 16 (sums16AVX2, sumAboveAVX2) or 32 elements they can take;
// the Go loops finish the rest.

//go:noescape
func sums16AVX2(x *float32, n int, sq bool, acc *[16]float64) (maxBits uint32)

//go:noescape
func sumAboveAVX2(x *float32, n int, tb uint32, acc *[16]float64) (count int)

//go:noescape
func packSignsAVX2(q *byte, x *float32, n int)

//go:noescape
func packTernaryAVX2(q *byte, x *float32, n int, tb uint32)

//go:noescape
func quantQSGDAVX2(q *byte, x *float32, n int, k float32, key, j0, s uint32)

func sums16Asm(x []float32, sq bool, acc *[16]float64) (int, uint32) {
	n := len(x) &^ 15
	if !blockHasAVX2 || n == 0 {
		return 0, 0
	}
	return n, sums16AVX2(&x[0], n, sq, acc)
}

func sumAboveAsm(x []float32, tb uint32, acc *[16]float64) (int, int) {
	n := len(x) &^ 15
	if !blockHasAVX2 || n == 0 {
		return 0, 0
	}
	return n, sumAboveAVX2(&x[0], n, tb, acc)
}

func packSignsAsm(q []byte, x []float32) int {
	n := len(x) &^ 31
	if !blockHasAVX2 || n == 0 {
		return 0
	}
	_ = q[n/8-1]
	packSignsAVX2(&q[0], &x[0], n)
	return n
}

func packTernaryAsm(q []byte, x []float32, tb uint32) int {
	n := len(x) &^ 31
	if !blockHasAVX2 || n == 0 {
		return 0
	}
	_ = q[n/4-1]
	packTernaryAVX2(&q[0], &x[0], n, tb)
	return n
}

func quantQSGDAsm(q []byte, x []float32, k float32, key, j0, s uint32) int {
	n := len(x) &^ 31
	if !blockHasAVX2 || n == 0 {
		return 0
	}
	_ = q[n-1]
	quantQSGDAVX2(&q[0], &x[0], n, k, key, j0, s)
	return n
}

//go:noescape
func signDequantAVX2(x *float32, q *byte, n int, sbits uint32)

//go:noescape
func ternaryDequantAVX2(x *float32, q *byte, n int, lut *[8]uint32) (bad uint32)

func signDequantAsm(x []float32, q []byte, sbits uint32) int {
	n := len(x) &^ 31
	if !blockHasAVX2 || n == 0 {
		return 0
	}
	_ = q[n/8-1]
	signDequantAVX2(&x[0], &q[0], n, sbits)
	return n
}

func ternaryDequantAsm(x []float32, q []byte, lut *[8]uint32) (int, bool) {
	n := len(x) &^ 31
	if !blockHasAVX2 || n == 0 {
		return 0, true
	}
	_ = q[n/4-1]
	bad := ternaryDequantAVX2(&x[0], &q[0], n, lut)
	return n, bad == 0
}
