//go:build amd64 && !noasm && gc

package lossless

// This file and huff0p_amd64.s hold huff0p's AVX2 expansion of 4-bit
// codes; without AVX2 (or in noasm and gccgo builds: huff0p_noasm.go) the
// pure-Go loop of huff0pDecodeBlock does all the work, with the same
// results.

//go:noescape
func huff0pExpandAVX2(dst, pairs *byte, tab *[16]byte, k int, mask *uint32, n int)

//go:noescape
func huff0pPackAVX2(pairs, src *byte, bc *[32][32]byte, mask *uint32, n int)

// huff0pPackAsm writes the pairs of codes of src's bytes (code[b] for the
// k values of syms, 15 for the others) to pairs and sets bit j%32 of
// mask[j/32] where byte j's code is 15, for the largest multiple of 32
// bytes of src it can. It returns how many bytes it did.
func huff0pPackAsm(pairs, src []byte, syms []byte, mask []uint32) int {
	n := len(src) &^ 31
	if !shuffleHasAVX2 || n == 0 {
		return 0
	}
	_, _ = pairs[n/2-1], mask[n/32-1]
	var bc [32][32]byte
	for i, v := range syms[:min(len(syms), 16)] {
		for j := range 32 {
			bc[2*i][j], bc[2*i+1][j] = v, byte(i)^15
		}
	}
	huff0pPackAVX2(&pairs[0], &src[0], &bc, &mask[0], n)
	return n
}

// huff0pExpandAsm writes tab[c] to dst[j] for the code c of each byte j
// (pairs[j/2]'s high nibble for even j, low for odd) and sets bit j%32 of
// mask[j/32] where c >= k (an escape: dst[j] is then tab[c&15], to be
// overwritten), for the largest multiple of 32 bytes of dst it can. It
// returns how many bytes it did; the caller does the rest.
func huff0pExpandAsm(dst, pairs []byte, tab *[16]byte, k int, mask []uint32) int {
	n := len(dst) &^ 31
	if !shuffleHasAVX2 || n == 0 {
		return 0
	}
	_, _ = pairs[n/2-1], mask[n/32-1]
	huff0pExpandAVX2(&dst[0], &pairs[0], tab, k, &mask[0], n)
	return n
}
