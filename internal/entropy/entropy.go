// Package entropy computes order-0 entropy figures used to put measured
// compression ratios next to what a per-byte-plane coder could reach at
// best. Its functions are pure and safe for concurrent use; Order0 does not
// allocate.
package entropy

import "math"

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

// Order1 returns the order-1 empirical entropy of b in bits per byte: the
// first byte at 8 bits, each later byte at the entropy of the bytes that
// follow its predecessor's value (the bits a static order-1 model of b
// itself needs, its tables not counted). 0 for empty input; at most
// Order0(b) plus 8 bits over len(b).
func Order1(b []byte) float64 {
	if len(b) == 0 {
		return 0
	}
	pairs := make([]int32, 256*256)
	var ctx [256]int
	for i := 1; i < len(b); i++ {
		pairs[int(b[i-1])<<8|int(b[i])]++
		ctx[b[i-1]]++
	}
	bits := 8.0
	for c, n := range ctx {
		if n == 0 {
			continue
		}
		fn := float64(n)
		for _, k := range pairs[c<<8 : c<<8+256] {
			if k != 0 {
				bits -= float64(k) * math.Log2(float64(k)/fn)
			}
		}
	}
	return bits / float64(len(b))
}
