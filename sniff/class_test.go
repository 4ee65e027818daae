package sniff

import (
	"math/rand/v2"
	"testing"
)

// scan.add is specified by the reference loop below, byte by byte: zero
// elements of each width, bytes equal to the byte 8 before and not zero,
// and non-zero bytes after a zero byte (a run start; never at the first
// byte), each by position in the word. Strips of up to 600 words cross
// the counters' flush at 255 words.
func TestScanReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 2000 {
		n := 8 * (1 + rng.IntN(600))
		b := make([]byte, n+rng.IntN(8)) // a partial word at the end is not read
		for i := range b {
			if rng.IntN(3) == 0 {
				b[i] = byte(rng.IntN(4)) * byte(1+rng.IntN(60))
			}
		}
		var s scan
		s.add(b)
		var zero [4]int
		var match, start [8]int
		for k, w := range []int{1, 2, 4, 8} {
			for i := 0; i+w <= n; i += w {
				z := true
				for _, x := range b[i : i+w] {
					z = z && x == 0
				}
				if z {
					zero[k]++
				}
			}
		}
		for i := 8; i < n; i++ {
			if b[i] == b[i-8] && b[i] != 0 {
				match[i%8]++
			}
		}
		for i := 1; i < n; i++ {
			if b[i] != 0 && b[i-1] == 0 {
				start[i%8]++
			}
		}
		if s.words != n/8 || zero != s.zero || match != s.match || start != s.start {
			t.Fatalf("case %d (%d bytes): words %d, zero %v want %v, match %v want %v, start %v want %v",
				iter, len(b), s.words, s.zero, zero, s.match, match, s.start, start)
		}
	}
}
