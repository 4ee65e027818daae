//go:build !amd64 || noasm || !gc

package lossless

// The pure-Go twin of huff0p_amd64.go: huff0pDecodeBlock's loop does all
// the work.

func huff0pPackAsm(pairs, src []byte, syms []byte, mask []uint32) int            { return 0 }
func huff0pExpandAsm(dst, pairs []byte, tab *[16]byte, k int, mask []uint32) int { return 0 }
