package lossy

import (
	"math"

	"github.com/tensorpress/tensorpress/codec"
)

// The nf4 and fp4 stages quantize blocks of B elements (default 64) to
// 4-bit codes of a fixed codebook, with one absmax scale per block, as
// bitsandbytes' 4-bit blockwise quantization (QLoRA) does. Per block, in
// float32 arithmetic:
//
//	absmax = max |x|
//	inv    = float32(1) / absmax
//	y      = float32(x*inv)                  in [-1, 1]
//
// (blocks with absmax < 2^-100 are scaled by 2^100 first; see "Tiny
// blocks" in block.go).
//
// nf4 (4-bit NormalFloat): the codebook c_0..c_15 is QLoRA's, ascending
// from -1 to 1 with c_7 = 0 (nf4Codebook). The code of y is the number of
// midpoints m_i = float32(float32(c_i + c_{i+1}) * 0.5) with y > m_i: the
// nearest entry, a tie going to the lower code as in bitsandbytes'
// comparison tree. A block with absmax 0 gets code 7 throughout.
// x^ = float32(c_code) * absmax.
//
// fp4: bitsandbytes' FP4 (E2M1) values divided by 12, magnitudes
// ascending [0, 0.0625, 2, 3, 4, 6, 8, 12]/12 as float32 (fp4Magnitudes).
// code = s<<3 | k, s the sign bit of x (-0.0 included), k the number of
// midpoints between consecutive magnitudes (computed as for nf4) that |y|
// exceeds. A block with absmax 0 gets code 0 throughout.
// x^ = float32(mag_k) * absmax, negated when s is set.
//
// Wire: params uvarint(B). Segment q (codec.Byte) packs two codes per
// byte, element 2i in the low nibble and 2i+1 in the high one, ceil(n/2)
// bytes; the high nibble after an odd last element is zero (a decoder
// refuses a segment where it is not). Segment scale: float32 absmax per
// block.
//
// Error bound, float32 rounding included: for x in a block with absmax a,
//
//	nf4: |x - x^| <= a*(0.15190363 + 2^-21) + 2^-140
//	fp4: |x - x^| <= a*(0.16666669 + 2^-21) + 2^-140
//
// where 0.1519036 = (1 - 0.6961928)/2 (the gap between -1 and c_1; the
// positive end's (1 - 0.7229568)/2 = 0.1385 is smaller) and 0.1666667 =
// (1 - 8/12)/2 are the largest distances from a codebook entry to the
// midpoints around it (nf4Gap, fp4Gap: computed from the float32 tables),
// and 2^-21 covers the roundings of inv, x*inv and c*a. Recipe text: nf4,
// nf4(64), nf4(block=64); the same for fp4.

var nf4Kind = blockKind{
	id:       NF4ID,
	name:     "nf4",
	defBlock: 64,
	bits:     4,
	elem:     codec.Byte,
	reads:    "an f32 or f64 segment",
	writes:   "q (4-bit codes, two per byte) and scale (f32 absmax per block); s.q and s.scale on a segment s",
	doc: "blockwise 4-bit NormalFloat (QLoRA NF4 codebook) with an absmax scale per block of B (default 64); " +
		"|x - x^| <= 0.1520*absmax; nf4(B)",
	quantize:   nf4Quantize,
	dequantize: dequantize4,
	bound:      nf4Bound,

	quantizeFast:   nf4QuantizeFast,
	dequantizeFast: dequant4Fast,
}

var fp4Kind = blockKind{
	id:       FP4ID,
	name:     "fp4",
	defBlock: 64,
	bits:     4,
	elem:     codec.Byte,
	reads:    "an f32 or f64 segment",
	writes:   "q (4-bit codes, two per byte) and scale (f32 absmax per block); s.q and s.scale on a segment s",
	doc: "blockwise 4-bit float (bitsandbytes FP4 codebook / 12) with an absmax scale per block of B (default 64); " +
		"|x - x^| <= 0.1667*absmax; fp4(B)",
	quantize:   fp4Quantize,
	dequantize: dequantize4,
	bound:      fp4Bound,

	quantizeFast:   fp4QuantizeFast,
	dequantizeFast: dequant4Fast,
}

func init() {
	registerBlock(&nf4Kind)
	registerBlock(&fp4Kind)
}

// nf4Codebook is QLoRA's NF4 codebook (bitsandbytes), as float32.
var nf4Codebook = [16]float32{
	-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
	-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
	0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
	0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
}

// fp4Magnitudes are bitsandbytes' FP4 magnitudes divided by 12.
var fp4Magnitudes = [8]float32{0, 0.0625 / 12, 2.0 / 12, 3.0 / 12, 4.0 / 12, 6.0 / 12, 8.0 / 12, 1}

// nf4Mid[i] is the float32 midpoint between codes i and i+1 (15 of them;
// the 16th entry is +Inf, never read); fp4Mid likewise between magnitudes
// (7 and a +Inf). nf4Gap and fp4Gap are the largest distance from an
// entry to a midpoint next to it, in float64.
var (
	nf4Mid, nf4Gap = midpoints(nf4Codebook[:])
	fp4Mid, fp4Gap = midpoints8(fp4Magnitudes)
)

func midpoints(c []float32) (mid [16]float32, gap float64) {
	for i := range mid {
		mid[i] = float32(math.Inf(1))
	}
	for i := 0; i+1 < len(c); i++ {
		mid[i] = float32(float32(c[i]+c[i+1]) * 0.5)
		gap = max(gap, float64(mid[i])-float64(c[i]), float64(c[i+1])-float64(mid[i]))
	}
	return mid, gap
}

func midpoints8(c [8]float32) (mid [8]float32, gap float64) {
	m, g := midpoints(c[:])
	copy(mid[:], m[:8])
	return mid, g
}

// Codes by table. nf4Code and fp4Code find the number of midpoints
// below y (|y| for fp4) with one table lookup and one comparison: t =
// y + 6 (|y| + 2 for fp4) lies in one binade, [4, 8) ([2, 4)), for every
// y the quantizers make (|y| <= 1, or a few ulps more when absmax >
// 2^126 makes float32(1)/absmax subnormal), and there the top 8 mantissa
// bits of t, b(y), grow with y. For a midpoint m, y > m when b(y) > b(m),
// y <= m when b(y) < b(m), and a comparison decides when b(y) = b(m). No
// two midpoints share a b, so
//
//	code = base[b(y)] + (y > thr[b(y)])
//
// with base[b] the number of midpoints m with b(m) < b, and thr[b] the
// midpoint with b(m) = b (+Inf when there is none). The comparison is
// made on order-preserving integer keys, without a branch. It gives the
// same codes as counting midpoints (block_test.go checks every midpoint,
// its neighbours and values beyond ±1).
type codeTable struct {
	base [256]uint8
	thr  [256]int32 // orderKey of the threshold
}

var (
	nf4Table = newCodeTable(nf4Mid[:15], 6)
	fp4Table = newCodeTable(fp4Mid[:7], 2)
)

// codeBucket is b(y) for offset off.
func codeBucket(y, off float32) uint32 { return math.Float32bits(y+off) >> 15 & 255 }

// orderKey maps a float32 (not NaN) to an int32 that orders as the float
// does, -0 just below +0.
func orderKey(f float32) int32 {
	b := int32(math.Float32bits(f))
	return b ^ int32(uint32(b>>31)>>1)
}

func newCodeTable(mids []float32, off float32) *codeTable {
	t := &codeTable{}
	inf := orderKey(float32(math.Inf(1)))
	for i := range t.thr {
		t.thr[i] = inf
	}
	for i, m := range mids {
		b := codeBucket(m, off)
		if t.thr[b] != inf || (i > 0 && codeBucket(mids[i-1], off) >= b) {
			panic("lossy: two midpoints share a code bucket")
		}
		t.thr[b] = orderKey(m)
		for j := b + 1; j < 256; j++ {
			t.base[j]++
		}
	}
	return t
}

// code is base[b(y)] + (y > thr[b(y)]).
func (t *codeTable) code(y, off float32) uint8 {
	b := codeBucket(y, off)
	gt := uint64(int64(t.thr[b])-int64(orderKey(y))) >> 63
	return t.base[b] + uint8(gt)
}

// nf4Code is the nf4 code of y in [-2, 2]: the number of nf4 midpoints
// below y.
func nf4Code(y float32) uint8 { return nf4Table.code(y, 6) }

// fp4Code is the fp4 code of y in [-2, 2]: its sign bit and the number of
// fp4 midpoints below |y|.
func fp4Code(y float32) uint8 {
	b := math.Float32bits(y)
	return fp4Table.code(math.Float32frombits(b&0x7fffffff), 2) | uint8(b>>31)<<3
}

// scaleInv returns the float32 multiplier that maps the block onto the
// codebook's range (num/absmax), and the factor to apply to x first: 1,
// or 2^100 for tiny blocks.
func scaleInv(num float32, m uint32) (inv, pre float32) {
	a := math.Float32frombits(m)
	if m < tinyBits {
		return num / float32(a*tinyScale), tinyScale
	}
	return num / a, 1
}

func nf4Quantize(_ *blockOp, q []byte, x []float32, _ uint64) (float32, error) {
	m := absmaxBits(x)
	if m >= nonFiniteBits {
		return 0, errBlockNonFinite
	}
	if m == 0 {
		fillCodes4(q, len(x), 0x77)
		return 0, nil
	}
	inv, pre := scaleInv(1, m)
	if pre != 1 {
		quant4Tiny(q, x, inv, pre, nf4Code)
	} else {
		quantNF4(q, x, inv)
	}
	return math.Float32frombits(m), nil
}

func fp4Quantize(_ *blockOp, q []byte, x []float32, _ uint64) (float32, error) {
	m := absmaxBits(x)
	if m >= nonFiniteBits {
		return 0, errBlockNonFinite
	}
	if m == 0 {
		clear(q)
		return 0, nil
	}
	inv, pre := scaleInv(1, m)
	if pre != 1 {
		quant4Tiny(q, x, inv, pre, fp4Code)
	} else {
		quantFP4(q, x, inv)
	}
	return math.Float32frombits(m), nil
}

// fillCodes4 fills the codes of n elements with the byte v (two equal
// codes), the padding nibble after an odd n with zero.
func fillCodes4(q []byte, n int, v byte) {
	q = q[:(n+1)/2]
	for i := range q {
		q[i] = v
	}
	if n%2 != 0 {
		q[n/2] = v & 15
	}
}

// quant4Tiny codes a tiny block: code(float32(float32(x*pre) * inv)).
func quant4Tiny(q []byte, x []float32, inv, pre float32, code func(float32) uint8) {
	q = q[:(len(x)+1)/2]
	for i := range q {
		c := code(float32(float32(x[2*i]*pre) * inv))
		if 2*i+1 < len(x) {
			c |= code(float32(float32(x[2*i+1]*pre)*inv)) << 4
		}
		q[i] = c
	}
}

// quantNF4 packs nf4Code(float32(x[i]*inv)) two per byte; it is the
// reference loop of the AVX2 kernel quantNF4BlocksAVX2:
//
//	for i := range x { q[i/2] |= nf4Code(float32(x[i]*inv)) << (4*(i%2)) }
//
// on a zeroed q.
func quantNF4(q []byte, x []float32, inv float32) {
	q = q[:(len(x)+1)/2]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		c0 := nf4Code(float32(v[0] * inv))
		c1 := nf4Code(float32(v[1] * inv))
		c2 := nf4Code(float32(v[2] * inv))
		c3 := nf4Code(float32(v[3] * inv))
		q[i/2] = c0 | c1<<4
		q[i/2+1] = c2 | c3<<4
	}
	for ; i < len(x); i += 2 {
		c := nf4Code(float32(x[i] * inv))
		if i+1 < len(x) {
			c |= nf4Code(float32(x[i+1]*inv)) << 4
		}
		q[i/2] = c
	}
}

// quantFP4 packs fp4Code(float32(x[i]*inv)) two per byte (as quantNF4);
// it is the reference loop of the AVX2 kernel quantFP4BlocksAVX2.
func quantFP4(q []byte, x []float32, inv float32) {
	q = q[:(len(x)+1)/2]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		c0 := fp4Code(float32(v[0] * inv))
		c1 := fp4Code(float32(v[1] * inv))
		c2 := fp4Code(float32(v[2] * inv))
		c3 := fp4Code(float32(v[3] * inv))
		q[i/2] = c0 | c1<<4
		q[i/2+1] = c2 | c3<<4
	}
	for ; i < len(x); i += 2 {
		c := fp4Code(float32(x[i] * inv))
		if i+1 < len(x) {
			c |= fp4Code(float32(x[i+1]*inv)) << 4
		}
		q[i/2] = c
	}
}

// fp4Codebook is the fp4 value of each code: fp4Magnitudes, then their
// negations.
var fp4Codebook = func() (c [16]float32) {
	for k, v := range fp4Magnitudes {
		c[k], c[k+8] = v, -v
	}
	return c
}()

// codebook4 is the codebook of a 4-bit stage.
func codebook4(o *blockOp) *[16]float32 {
	if o.kind.id == FP4ID {
		return &fp4Codebook
	}
	return &nf4Codebook
}

// dequantize4 is the dequantize of nf4 and fp4: x^ = codebook[code] *
// scale (for fp4, -(m*scale) = (-m)*scale exactly).
func dequantize4(o *blockOp, x []float32, q []byte, scale float32) bool {
	var lut [16]float32
	for c, v := range codebook4(o) {
		lut[c] = v * scale
	}
	return dequant4(x, q, &lut)
}

// dequant4 sets x[i] = lut[code i] and reports whether the padding nibble
// (odd len(x)) is zero; it is the reference loop of the AVX2 kernel
// dequant4BlocksAVX2:
//
//	for i := range x { x[i] = lut[q[i/2]>>(4*(i%2))&15] }
func dequant4(x []float32, q []byte, lut *[16]float32) bool {
	q = q[:(len(x)+1)/2]
	i := 0
	for ; i+4 <= len(x); i += 4 {
		d := x[i : i+4 : i+4]
		b0, b1 := q[i/2], q[i/2+1]
		d[0] = lut[b0&15]
		d[1] = lut[b0>>4]
		d[2] = lut[b1&15]
		d[3] = lut[b1>>4]
	}
	for ; i < len(x); i += 2 {
		b := q[i/2]
		x[i] = lut[b&15]
		if i+1 < len(x) {
			x[i+1] = lut[b>>4]
		} else if b>>4 != 0 {
			return false
		}
	}
	return true
}

func nf4Bound(_ *blockOp, x []float32) float64 {
	a := float64(math.Float32frombits(absmaxBits(x)))
	return a*(nf4Gap+0x1p-21) + absSlack
}

func fp4Bound(_ *blockOp, x []float32) float64 {
	a := float64(math.Float32frombits(absmaxBits(x)))
	return a*(fp4Gap+0x1p-21) + absSlack
}
