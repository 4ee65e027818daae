//go:build !amd64 || noasm || !gc

package lossless

// The pure-Go twin of fsplit_amd64.go: the loops of fsplit.go do all the
// work.

func fsplitBF16Asm(exp, sm, src []byte) int { return 0 }
func fjoinBF16Asm(dst, exp, sm []byte) int  { return 0 }
