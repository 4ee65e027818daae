//go:build !amd64 || noasm || !gc

package lossless

// The pure-Go twin of shuffle_amd64.go: no accelerated kernels, so the
// kernels of shuffle.go do all the work, with the same results.

const shuffleHasAVX2 = false

func shuffle2Asm(p0, p1, src []byte) int           { return 0 }
func unshuffle2Asm(dst, p0, p1 []byte) int         { return 0 }
func shuffle4Asm(p0, p1, p2, p3, src []byte) int   { return 0 }
func unshuffle4Asm(dst, p0, p1, p2, p3 []byte) int { return 0 }
func shuffle8Asm(p *[8][]byte, src []byte) int     { return 0 }
func unshuffle8Asm(dst []byte, p *[8][]byte) int   { return 0 }

// shuffleNTMin is unused here: there are no non-temporal kernels.
var shuffleNTMin = 8 << 20
