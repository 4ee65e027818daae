package lossy

import (
	"math"

	"github.com/tensorpress/tensorpress/codec"
)

// The int8 stage quantizes blocks of B elements (default 4096) to int8
// with one absmax scale per block, as bitsandbytes' blockwise absmax
// quantization does. Per block, in float32 arithmetic:
//
//	absmax = max |x|                       (0: every q is 0)
//	inv    = float32(127) / absmax
//	q      = clamp(roundHalfEven(float32(x*inv)), -127, 127)
//	x^     = float32(q) * (absmax / float32(127))
//
// (blocks with absmax < 2^-100 are scaled by 2^100 first; see "Tiny
// blocks" in block.go). The clamp never acts: |x*inv| <= 127.0000x.
//
// Wire: params uvarint(B). Segments q (codec.I8, one byte per element,
// -128 never written: a decoder refuses it) and scale (float32 absmax per
// block).
//
// Error bound, float32 rounding included: for x in a block with absmax a,
//
//	|x - x^| <= a*(1/254 + 2^-21) + 2^-140
//
// (half a step of a/127, plus four float32 roundings of at most 2^-24
// relative each: inv, x*inv, a/127 and q*(a/127); the absolute term covers
// subnormal a/127). Recipe text: int8, int8(64), int8(block=64).

var int8Kind = blockKind{
	id:       Int8ID,
	name:     "int8",
	defBlock: 4096,
	bits:     8,
	elem:     codec.I8,
	reads:    "an f32 or f64 segment",
	writes:   "q (i8 codes) and scale (f32 absmax per block); s.q and s.scale on a segment s",
	doc: "blockwise absmax int8 (bitsandbytes): q = round(x*127/absmax) per block of B (default 4096); " +
		"|x - x^| <= absmax*(1/254 + 2^-21); int8(B)",
	quantize:   int8Quantize,
	dequantize: int8Dequantize,
	bound:      int8Bound,

	quantizeFast:   int8QuantizeFast,
	dequantizeFast: int8DequantizeFast,
}

func init() { registerBlock(&int8Kind) }

// rneMagic is 1.5*2^23: for |y| < 2^22, the float32 sum y + rneMagic has
// an ulp of 1, so rounding it rounds y to an integer, half to even (the
// magic is even), and that integer is the low bits of the sum.
const (
	rneMagic     = float32(0x1.8p23)
	rneMagicBits = 0x4b400000
)

// roundClamp127 is clamp(roundHalfEven(y), -127, 127) for |y| < 2^22.
func roundClamp127(y float32) int32 {
	r := int32(math.Float32bits(y+rneMagic)) - rneMagicBits
	return max(-127, min(127, r))
}

func int8Quantize(_ *blockOp, q []byte, x []float32, _ uint64) (float32, error) {
	m := absmaxBits(x)
	if m >= nonFiniteBits {
		return 0, errBlockNonFinite
	}
	if m == 0 {
		clear(q)
		return 0, nil
	}
	a := math.Float32frombits(m)
	if m < tinyBits {
		inv := float32(127) / float32(a*tinyScale)
		q = q[:len(x)]
		for i, v := range x {
			q[i] = byte(roundClamp127(float32(float32(v*tinyScale) * inv)))
		}
		return a, nil
	}
	quantI8(q, x, float32(127)/a)
	return a, nil
}

// quantI8 sets q[i] = roundClamp127(float32(x[i]*inv)), four ways. It
// is the reference loop of the AVX2 kernel quantI8BlocksAVX2.
func quantI8(q []byte, x []float32, inv float32) {
	q = q[:len(x)]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		d := q[i : i+4 : i+4]
		d[0] = byte(roundClamp127(float32(v[0] * inv)))
		d[1] = byte(roundClamp127(float32(v[1] * inv)))
		d[2] = byte(roundClamp127(float32(v[2] * inv)))
		d[3] = byte(roundClamp127(float32(v[3] * inv)))
	}
	for ; i < len(x); i++ {
		q[i] = byte(roundClamp127(float32(x[i] * inv)))
	}
}

func int8Dequantize(_ *blockOp, x []float32, q []byte, scale float32) bool {
	return dequantI8(x, q, scale/127, 127)
}

// dequantI8 sets x[i] = float32(int8(q[i])) * s, four ways, and reports
// whether every |int8(q[i])| <= maxLevel (int8: 127, so -128 is refused;
// qsgd: s). It is the reference loop of the AVX2 kernel
// dequantI8BlocksAVX2.
func dequantI8(x []float32, q []byte, s float32, maxLevel uint8) bool {
	q = q[:len(x)]
	var m uint8 // the largest |q[i]|, -128 giving 128
	i := 0
	for ; i+4 <= len(x); i += 4 {
		c := q[i : i+4 : i+4]
		d := x[i : i+4 : i+4]
		c0, c1, c2, c3 := int8(c[0]), int8(c[1]), int8(c[2]), int8(c[3])
		d[0] = float32(c0) * s
		d[1] = float32(c1) * s
		d[2] = float32(c2) * s
		d[3] = float32(c3) * s
		m = max(m, absInt8(c0), absInt8(c1), absInt8(c2), absInt8(c3))
	}
	for ; i < len(x); i++ {
		c := int8(q[i])
		x[i] = float32(c) * s
		m = max(m, absInt8(c))
	}
	return m <= maxLevel
}

// absInt8 is |c| as a byte (128 for -128), as VPABSB gives it.
func absInt8(c int8) uint8 {
	n := c >> 7
	return uint8((c ^ n) - n)
}

func int8Bound(_ *blockOp, x []float32) float64 {
	a := float64(math.Float32frombits(absmaxBits(x)))
	return a*(1.0/254+0x1p-21) + absSlack
}
