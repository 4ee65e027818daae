// Package entropy computes order-0 entropy figures used to put measured
// compression ratios next to what a per-byte-plane coder could reach at
// best. Its functions are pure and safe for concurrent use; Order0 does not
// allocate.
package entropy

import (
	"math"
	"sync"
)

// Order0 returns the order-0 (empirical Shannon) entropy of b in bits per
// byte, from exact byte counts: 0 for empty or constant input, 8 at most.
func Order0(b []byte) float64 {
	var counts [256]int
	for _, c := range b {
		counts[c]++
	}
	return FromCounts(&counts, len(b))
}

// FromCounts returns the order-0 entropy, in bits per byte, of n bytes
// whose byte values occurred counts[v] times.
func FromCounts(counts *[256]int, n int) float64 {
	if n == 0 {
		return 0
	}
	h, fn := 0.0, float64(n)
	for _, c := range counts {
		if c != 0 {
			p := float64(c) / fn
			h -= p * math.Log2(p)
		}
	}
	return h
}

// PlaneBound splits data into width byte planes (plane i holds byte i of
// every width-byte element, so on little-endian data plane width-1 holds
// the sign and exponent of a float) and returns the order-0 entropy of each
// plane in bits per byte, and the best compression ratio a coder that codes
// each plane on its own with a static order-0 model can reach:
// 8*width / sum(planeBits). The ratio is +Inf when every plane is constant
// and 1 for empty data. A trailing partial element is ignored. PlaneBound
// panics if width < 1.
func PlaneBound(data []byte, width int) (planeBits []float64, ratio float64) {
	if width < 1 {
		panic("entropy: PlaneBound: width < 1")
	}
	n := len(data) / width
	planeBits = make([]float64, width)
	if n == 0 {
		return planeBits, 1
	}
	sum := 0.0
	var counts [256]int
	for p := range width {
		clear(counts[:])
		for i := p; i < n*width; i += width {
			counts[data[i]]++
		}
		planeBits[p] = FromCounts(&counts, n)
		sum += planeBits[p]
	}
	if sum == 0 {
		return planeBits, math.Inf(1)
	}
	return planeBits, 8 * float64(width) / sum
}

// PlaneRatios returns PlaneBound's ratio for the element widths 1, 2, 4
// and 8 of b's whole 8-byte words (a trailing partial word is left out),
// in one pass: the histograms of the eight byte positions, summed for the
// smaller widths, and a table of c·log2(c) for counts up to 8192 instead
// of a logarithm per symbol. It is what a sniffer that looks for the
// element width of opaque bytes needs, several times faster than four
// calls of PlaneBound.
func PlaneRatios(b []byte) (r [4]float64) {
	b = b[:len(b)&^7]
	var h [8][256]int32
	for i := 0; i+8 <= len(b); i += 8 {
		w := b[i : i+8 : i+8]
		h[0][w[0]]++
		h[1][w[1]]++
		h[2][w[2]]++
		h[3][w[3]]++
		h[4][w[4]]++
		h[5][w[5]]++
		h[6][w[6]]++
		h[7][w[7]]++
	}
	tab := clog2Table()
	for k, w := range []int{1, 2, 4, 8} {
		m := len(b) / w // symbols in each plane
		bits := 0.0
		for p := range w {
			var c [256]int32
			for j := p; j < 8; j += w {
				for x := range c {
					c[x] += h[j][x]
				}
			}
			sum := 0.0
			for _, v := range c {
				if int(v) < len(tab) {
					sum += tab[v]
				} else {
					sum += float64(v) * math.Log2(float64(v))
				}
			}
			bits += math.Log2(float64(m)) - sum/float64(m)
		}
		r[k] = 1
		switch {
		case m == 0:
		case bits <= 0:
			r[k] = math.Inf(1)
		default:
			r[k] = 8 * float64(w) / bits
		}
	}
	return r
}

// clog2Table holds c·log2(c) for small counts.
var clog2Table = sync.OnceValue(func() []float64 {
	t := make([]float64, 8192+1)
	for c := 2; c < len(t); c++ {
		t[c] = float64(c) * math.Log2(float64(c))
	}
	return t
})
