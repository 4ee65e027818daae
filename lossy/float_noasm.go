//go:build !amd64 || noasm || !gc

package lossy

// The pure-Go twin of float_amd64.go: no accelerated kernels, so the Go
// loops of float.go do all the work, with the same results.

const halfHasAVX2, halfHasF16C = false, false

func fp16EncodeAsm(dst, src []byte) int { return 0 }
func fp16DecodeAsm(dst, src []byte) int { return 0 }
func bf16EncodeAsm(dst, src []byte) int { return 0 }
func bf16DecodeAsm(dst, src []byte) int { return 0 }

// halfNTMin is unused here: there are no non-temporal kernels.
var halfNTMin = 4 << 20
