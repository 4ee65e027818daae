//go:build amd64 && !noasm && gc

package lossless

// This file and fsplit_amd64.s hold fsplit's AVX2 kernels on bfloat16;
// without AVX2 (or in noasm and gccgo builds: fsplit_noasm.go) the
// pure-Go loops of fsplit.go do all the work, with the same results. Each
// *Asm function handles the largest multiple of 32 elements it can and
// returns how many elements it did; the caller finishes the rest.

//go:noescape
func fsplitBF16AVX2(exp, sm, src *byte, n int)

//go:noescape
func fjoinBF16AVX2(dst, exp, sm *byte, n int)

// The wrappers check every length before the kernels touch memory.

func fsplitBF16Asm(exp, sm, src []byte) int {
	n := len(exp) &^ 31
	if !shuffleHasAVX2 || n == 0 {
		return 0
	}
	_, _ = sm[n-1], src[2*n-1]
	fsplitBF16AVX2(&exp[0], &sm[0], &src[0], n)
	return n
}

func fjoinBF16Asm(dst, exp, sm []byte) int {
	n := len(exp) &^ 31
	if !shuffleHasAVX2 || n == 0 {
		return 0
	}
	_, _ = sm[n-1], dst[2*n-1]
	fjoinBF16AVX2(&dst[0], &exp[0], &sm[0], n)
	return n
}
