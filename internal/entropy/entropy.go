// Package entropy computes empirical entropy figures (order 0, 1 and 2,
// and of bytes given other bytes) used to put measured compression
// ratios next to what static models could reach at best. Its functions are pure and safe for concurrent use; Order0 does not
// allocate.
package entropy

import (
	"math"
	"slices"
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
	return (8 + condBits(pairs, &ctx)) / float64(len(b))
}

// condBits returns the bits of the second bytes of pairs given their
// first: pairs[c<<8|v] counts v after c, and nctx[c] those after c.
func condBits(pairs []int32, nctx *[256]int) float64 {
	bits := 0.0
	for c, n := range nctx {
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
	return bits
}

// Order2 returns the order-2 empirical entropy of b in bits per byte: the
// first two bytes at 8 bits each, each later byte at the entropy of the
// bytes that follow its two predecessors' values (its tables not
// counted). 0 for empty input. It sorts a copy of b's triples: O(n log n)
// time, 4 bytes of memory a byte.
func Order2(b []byte) float64 {
	switch {
	case len(b) == 0:
		return 0
	case len(b) <= 2:
		return 8
	}
	keys := make([]uint32, len(b)-2)
	for i := range keys {
		keys[i] = uint32(b[i])<<16 | uint32(b[i+1])<<8 | uint32(b[i+2])
	}
	slices.Sort(keys)
	bits := 16.0
	for i := 0; i < len(keys); {
		// one context: its symbols' runs, then their count
		j := i
		for j < len(keys) && keys[j]>>8 == keys[i]>>8 {
			j++
		}
		fn := float64(j - i)
		for k := i; k < j; {
			m := k
			for m < j && keys[m] == keys[k] {
				m++
			}
			bits -= float64(m-k) * math.Log2(float64(m-k)/fn)
			k = m
		}
		i = j
	}
	return bits / float64(len(b))
}

// Cond returns the empirical entropy of b given ctx, byte by byte (b[i]
// given ctx[i]), in bits per byte: what a static model of b for each
// value of ctx needs, its tables not counted. b and ctx have one length;
// 0 for empty input.
func Cond(b, ctx []byte) float64 {
	if len(b) == 0 {
		return 0
	}
	pairs := make([]int32, 256*256)
	var nctx [256]int
	for i, c := range ctx[:len(b)] {
		pairs[int(c)<<8|int(b[i])]++
		nctx[c]++
	}
	return condBits(pairs, &nctx) / float64(len(b))
}
