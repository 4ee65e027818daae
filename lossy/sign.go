package lossy

import (
	"math"

	"github.com/tensorpress/tensorpress/codec"
)

// The sign stage keeps one bit per element, the sign, and one scale per
// block of B elements (default 4096): the mean magnitude, as signSGD with
// a scale (EF-signSGD's ||x||_1/d). Per block:
//
//	scale = min(float32(sum |x| / n), absmax)   n the block length
//	bit   = the sign bit of x                   (-0.0 counts as negative)
//	x^    = -scale if the bit is set, else +scale
//
// (the min only guards float rounding: the mean never exceeds absmax).
// Sums are float64, in the order of sums16 and reduce16 (block.go): 16
// partial sums over the elements i%16 = 0..15, then added pairwise. An
// all-zero block gets scale 0 and gives back signed zeros.
//
// Wire: params uvarint(B). Segment q (codec.Byte): the bits LSB first,
// element i in bit i%8 of byte i/8, ceil(n/8) bytes; padding bits after
// the last element are zero (a decoder refuses a segment where they are
// not). Segment scale: float32 per block.
//
// Error bound: |x - x^| <= max(|x|, scale) <= absmax of the block (x and
// x^ have the same sign, and scale <= absmax). Recipe text: sign,
// sign(64), sign(block=64).
//
// The ternary stage (ternary weight networks, Li et al.) keeps two bits
// per element. Per block of B elements (default 4096):
//
//	mean = float32(sum |x| / n)                sums as for sign
//	t    = float32(0.7 * float64(mean))
//	s    = min(float32(sum_{|x|>t} |x| / count), absmax)   0 when no |x| > t
//	code = 0 when |x| <= t; else 1 (x^ = +s) or 2 (x^ = -s) by the sign bit of x
//
// Wire: params uvarint(B). Segment q (codec.Byte): the codes four per
// byte, LSB first (element i in bits 2*(i%4) of byte i/4), ceil(n/4)
// bytes; code 3 is never written and padding codes after the last element
// are 0 (a decoder refuses a segment that breaks either rule). Segment
// scale: float32 s per block.
//
// Error bound: |x - x^| <= absmax of the block (|x| for a zeroed element,
// ||x| - s| <= max(|x|, s) for the others). Recipe text: ternary,
// ternary(64), ternary(block=64).

var signKind = blockKind{
	id:       SignID,
	name:     "sign",
	defBlock: 4096,
	bits:     1,
	elem:     codec.Byte,
	reads:    "an f32 or f64 segment",
	writes:   "q (sign bits, 8 per byte) and scale (f32 mean |x| per block); s.q and s.scale on a segment s",
	doc: "sign with a scale: 1 bit per element, x^ = ±mean|x| per block of B (default 4096); " +
		"|x - x^| <= absmax of the block; sign(B)",
	quantize:   signQuantize,
	dequantize: signDequantize,
	bound:      absmaxBound,
}

var ternaryKind = blockKind{
	id:       TernaryID,
	name:     "ternary",
	defBlock: 4096,
	bits:     2,
	elem:     codec.Byte,
	reads:    "an f32 or f64 segment",
	writes:   "q (2-bit codes, 4 per byte) and scale (f32 per block); s.q and s.scale on a segment s",
	doc: "ternary {-s, 0, +s} per block of B (default 4096), threshold 0.7*mean|x| (TWN); " +
		"|x - x^| <= absmax of the block; ternary(B)",
	quantize:   ternaryQuantize,
	dequantize: ternaryDequantize,
	bound:      absmaxBound,
}

func init() {
	registerBlock(&signKind)
	registerBlock(&ternaryKind)
}

func absmaxBound(_ *blockOp, x []float32) float64 {
	return float64(math.Float32frombits(absmaxBits(x)))
}

// meanScale is min(float32(sum/n), the float32 with bits m).
func meanScale(sum float64, n int, m uint32) float32 {
	return min(float32(sum/float64(n)), math.Float32frombits(m))
}

func signQuantize(_ *blockOp, q []byte, x []float32, _ uint64) (float32, error) {
	var acc [16]float64
	m := sums16(x, false, &acc)
	if m >= nonFiniteBits {
		return 0, errBlockNonFinite
	}
	packSigns(q, x)
	return meanScale(reduce16(&acc), len(x), m), nil
}

// packSigns sets bit i%8 of q[i/8] to the sign bit of x[i], padding bits
// to zero. Reference loop (on a zeroed q):
//
//	for i, v := range x { q[i/8] |= byte(math.Float32bits(v)>>31) << (i%8) }
func packSigns(q []byte, x []float32) {
	q = q[:(len(x)+7)/8]
	i := packSignsAsm(q, x)
	for ; i+8 <= len(x); i += 8 {
		v := x[i : i+8 : i+8]
		q[i/8] = byte(math.Float32bits(v[0])>>31 | math.Float32bits(v[1])>>31<<1 |
			math.Float32bits(v[2])>>31<<2 | math.Float32bits(v[3])>>31<<3 |
			math.Float32bits(v[4])>>31<<4 | math.Float32bits(v[5])>>31<<5 |
			math.Float32bits(v[6])>>31<<6 | math.Float32bits(v[7])>>31<<7)
	}
	if i < len(x) {
		var b uint32
		for j, v := range x[i:] {
			b |= math.Float32bits(v) >> 31 << j
		}
		q[i/8] = byte(b)
	}
}

func signDequantize(_ *blockOp, x []float32, q []byte, scale float32) bool {
	s := math.Float32bits(scale) // scale >= 0: bits of +scale (or of -0.0)
	s &= 0x7fffffff
	q = q[:(len(x)+7)/8]
	i := signDequantAsm(x, q, s)
	for ; i+8 <= len(x); i += 8 {
		b := uint32(q[i/8])
		d := x[i : i+8 : i+8]
		d[0] = math.Float32frombits(s | b<<31)
		d[1] = math.Float32frombits(s | b>>1<<31)
		d[2] = math.Float32frombits(s | b>>2<<31)
		d[3] = math.Float32frombits(s | b>>3<<31)
		d[4] = math.Float32frombits(s | b>>4<<31)
		d[5] = math.Float32frombits(s | b>>5<<31)
		d[6] = math.Float32frombits(s | b>>6<<31)
		d[7] = math.Float32frombits(s | b>>7<<31)
	}
	if i < len(x) {
		b := uint32(q[i/8])
		for j := range x[i:] {
			x[i+j] = math.Float32frombits(s | b>>j<<31)
		}
		if b>>(len(x)-i) != 0 {
			return false
		}
	}
	return true
}

func ternaryQuantize(_ *blockOp, q []byte, x []float32, _ uint64) (float32, error) {
	var acc [16]float64
	m := sums16(x, false, &acc)
	if m >= nonFiniteBits {
		return 0, errBlockNonFinite
	}
	mean := float32(reduce16(&acc) / float64(len(x)))
	tb := math.Float32bits(float32(0.7 * float64(mean)))
	acc = [16]float64{}
	var s float32
	if cnt := sumAbove(x, tb, &acc); cnt > 0 {
		s = meanScale(reduce16(&acc), cnt, m)
	}
	packTernary(q, x, tb)
	return s, nil
}

// sumAbove adds |x[i]| to acc[i%16] (in float64, in element order, as
// sums16) for the x[i] with |x[i]| > t, tb being the bits of t >= 0, and
// returns their number. Bits are compared: for non-negative floats the
// bit patterns order as the values do. Reference loop:
//
//	for i, v := range x { if |v| > t { acc[i%16] += float64(|v|); n++ } }
//
// (adding 0 for the others, which changes no partial sum).
func sumAbove(x []float32, tb uint32, acc *[16]float64) int {
	i, cnt := sumAboveAsm(x, tb, acc)
	for ; i < len(x); i++ {
		b := math.Float32bits(x[i]) & 0x7fffffff
		gt := (tb - b) >> 31 // 1 when b > tb (both < 2^31)
		acc[i%16] += float64(math.Float32frombits(b * gt))
		cnt += int(gt)
	}
	return cnt
}

// packTernary sets the 2-bit codes of x, four per byte LSB first, padding
// codes to zero. Reference loop (on a zeroed q):
//
//	for i, v := range x { q[i/4] |= byte(ternaryCode(v, tb)) << (2*(i%4)) }
func packTernary(q []byte, x []float32, tb uint32) {
	q = q[:(len(x)+3)/4]
	i := packTernaryAsm(q, x, tb)
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		q[i/4] = byte(ternaryCode(v[0], tb) | ternaryCode(v[1], tb)<<2 | ternaryCode(v[2], tb)<<4 | ternaryCode(v[3], tb)<<6)
	}
	if i < len(x) {
		var c uint32
		for j, v := range x[i:] {
			c |= ternaryCode(v, tb) << (2 * j)
		}
		q[i/4] = byte(c)
	}
}

// ternaryCode is 0 when |v| <= t (tb the bits of t), else 1 for a positive
// v and 2 for a negative one.
func ternaryCode(v float32, tb uint32) uint32 {
	b := math.Float32bits(v)
	gt := (tb - b&0x7fffffff) >> 31
	return gt << (b >> 31)
}

func ternaryDequantize(_ *blockOp, x []float32, q []byte, scale float32) bool {
	s := math.Float32bits(scale) & 0x7fffffff
	// lut[c] is the bits of x^ for code c (code 3 is caught below).
	lut := [8]uint32{0, s, s | 1<<31, 0}
	q = q[:(len(x)+3)/4]
	var bad uint32
	i, ok := ternaryDequantAsm(x, q, &lut)
	if !ok {
		return false
	}
	for ; i+4 <= len(x); i += 4 {
		b := uint32(q[i/4])
		d := x[i : i+4 : i+4]
		d[0] = math.Float32frombits(lut[b&3])
		d[1] = math.Float32frombits(lut[b>>2&3])
		d[2] = math.Float32frombits(lut[b>>4&3])
		d[3] = math.Float32frombits(lut[b>>6])
		bad |= b & (b >> 1) & 0x55 // a code 3 has both bits set
	}
	if i < len(x) {
		b := uint32(q[i/4])
		bad |= b & (b >> 1) & 0x55
		for j := range x[i:] {
			x[i+j] = math.Float32frombits(lut[b>>(2*j)&3])
		}
		bad |= b >> (2 * (len(x) - i))
	}
	return bad == 0
}
