//go:build amd64 && !noasm && gc

package lossy

import (
	"unsafe"

	"github.com/tensorpress/tensorpress/internal/cpufeature"
)

// This file and float_amd64.s hold the AVX2 / F16C kernels of the fp16
// and bf16 stages; without those CPU features (or in noasm and gccgo
// builds: float_noasm.go) the Go loops of float.go do all the work, with
// the same results, NaN bits included. Each *Asm function converts all
// but fewer than 32 of the elements, from the start, and returns how many
// it did; the caller finishes the rest.

// halfHasAVX2 reports whether the CPU and the OS support AVX2 (the bf16
// kernels); halfHasF16C whether they also support F16C (the fp16 kernels,
// which fix up NaNs with AVX2 integer instructions).
var halfHasAVX2, halfHasF16C = cpufeature.AVX2, cpufeature.F16C

// halfNTMin is the output size in bytes from which the kernels write
// with non-temporal stores: an output this big would not stay in cache
// anyway, and streaming it saves reading every destination line before
// writing it (runtime.memmove streams from 1 MiB). The output must be
// 4-byte aligned (it always is from codec's arenas and decoders, and for
// the typed wrappers); the Go loops convert the few elements before the
// first 32-byte boundary.
var halfNTMin = 4 << 20

//go:noescape
func fp16EncodeF16C(dst, src *byte, n int)

//go:noescape
func fp16EncodeF16CNT(dst, src *byte, n int)

//go:noescape
func fp16DecodeF16C(dst, src *byte, n int)

//go:noescape
func fp16DecodeF16CNT(dst, src *byte, n int)

//go:noescape
func bf16EncodeAVX2(dst, src *byte, n int)

//go:noescape
func bf16EncodeAVX2NT(dst, src *byte, n int)

//go:noescape
func bf16DecodeAVX2(dst, src *byte, n int)

//go:noescape
func bf16DecodeAVX2NT(dst, src *byte, n int)

// halfKernel is a kernel of float_amd64.s, converting n elements (a
// multiple of 32, not 0) from src to dst.
type halfKernel func(dst, src *byte, n int)

// halfRun converts the largest multiple of 32 elements of src it can into
// dst with k (or nt, from halfNTMin output bytes on, after converting the
// elements before dst's first 32-byte boundary with the Go loop g) and
// returns how many it did. in and out are the bytes per element of src
// and dst. The caller has checked that dst holds as many elements as src.
func halfRun(dst, src []byte, in, out int, k, nt halfKernel, g func(dst, src []byte)) int {
	n := len(src) / in &^ 31
	if n == 0 {
		return 0
	}
	_, _ = src[in*n-1], dst[out*n-1]
	if out*n >= halfNTMin {
		if a := uintptr(unsafe.Pointer(&dst[0])); a%uintptr(out) == 0 {
			head := int(-a%32) / out // elements before the boundary
			g(dst[:out*head], src[:in*head])
			m := (n - head) &^ 31
			if m > 0 {
				nt(&dst[out*head], &src[in*head], m)
			}
			return head + m
		}
	}
	k(&dst[0], &src[0], n)
	return n
}

func fp16EncodeAsm(dst, src []byte) int {
	if !halfHasF16C {
		return 0
	}
	return halfRun(dst, src, 4, 2, fp16EncodeF16C, fp16EncodeF16CNT, fp16EncodeGo)
}

func fp16DecodeAsm(dst, src []byte) int {
	if !halfHasF16C {
		return 0
	}
	return halfRun(dst, src, 2, 4, fp16DecodeF16C, fp16DecodeF16CNT, fp16DecodeGo)
}

func bf16EncodeAsm(dst, src []byte) int {
	if !halfHasAVX2 {
		return 0
	}
	return halfRun(dst, src, 4, 2, bf16EncodeAVX2, bf16EncodeAVX2NT, bf16EncodeGo)
}

func bf16DecodeAsm(dst, src []byte) int {
	if !halfHasAVX2 {
		return 0
	}
	return halfRun(dst, src, 2, 4, bf16DecodeAVX2, bf16DecodeAVX2NT, bf16DecodeGo)
}
