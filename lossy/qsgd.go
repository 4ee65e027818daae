package lossy

import (
	"errors"
	"math"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/inthash"
)

// The qsgd stage is QSGD (Alistarh et al., 2017) with buckets: per block
// of B elements (default 4096) it keeps the L2 norm and, per element, a
// level l in 0..s (s the parameter "levels", 1..127, default 127) chosen
// by stochastic rounding, so that the dequantized block is an unbiased
// estimate of the input (up to the roundings below). Per block:
//
//	norm = sqrt(sum x^2), the sum in float64 in the order of sums16 and
//	       reduce16 (block.go), rounded up to float32 (so |x| <= norm)
//	k    = float32(s) / norm                        float32
//	v    = float32(|x| * k)                         in [0, s(1+2^-23)]
//	V    = uint32(int32(v * 2^24))                  v in 24-bit fixed point, truncated
//	l    = min((V + U) >> 24, s)                    U a 24-bit dither
//	q    = -l if the sign bit of x is set, else l   (codec.I8)
//	x^   = float32(q) * (norm / float32(s))         float32
//
// (blocks with norm < 2^-100 compute v = float32(float32(|x|*2^100) *
// (float32(s) / float32(norm*2^100))), the "tiny blocks" rule of block.go).
// U is uniform on 0..2^24-1, so E[l] = V/2^24 exactly: l is unbiased for
// v up to the truncation to 24 fraction bits (2^-24 of a level) and v for
// |x|*s/norm up to two float32 roundings (2^-23 relative).
//
// The dither comes from a counter-based generator, so that a frame (which
// carries the seed) is reproducible and chunked encoding gives the codes
// of whole-tensor encoding: U = h>>8 with
//
//	h = inthash.Lowbias32(uint32(j) + key),  key = uint32(inthash.Mix64(seed + (j>>32 + 1)*0x9e3779b97f4a7c15) >> 32)
//
// where inthash.Lowbias32 is Wellons' 32-bit integer hash (x ^= x>>16; x *=
// 0x7feb352d; x ^= x>>15; x *= 0x846ca68b; x ^= x>>16), inthash.Mix64 splitmix64's
// output function, and j the element's index in the tensor when the
// segment is "data" (Ctx.Tensor.Offset plus its position), its position in
// the segment otherwise. The seed is explicit: the default 0 is a fixed
// seed like any other, and every tensor coded with one seed sees the same
// dither at the same index; give each tensor or round its own seed when
// that matters. A block with norm 0 gets q = 0.
//
// Wire: params uvarint(s) uvarint(B) uvarint(seed). Segments q (codec.I8,
// one byte per element, |q| <= s: a decoder refuses larger codes) and
// scale (the float32 norm per block).
//
// Error bound, float32 rounding included: for x in a block with norm N,
//
//	|x - x^| <= N*(1/s + 2^-21) + 2^-140
//
// (less than one level, N/s, plus the roundings of v, N/s and q*(N/s)).
// Recipe text: qsgd, qsgd(s), qsgd(s,B), qsgd(s,B,seed=7),
// qsgd(levels=s,block=B,seed=7).
const (
	qsgdDefLevels = 127
	qsgdMinLevels = 1
	qsgdMaxLevels = 127
)

var qsgdKind = blockKind{
	id:       QSGDID,
	name:     "qsgd",
	defBlock: 4096,
	bits:     8,
	elem:     codec.I8,
	reads:    "an f32 or f64 segment",
	writes:   "q (i8 levels -s..s) and scale (f32 L2 norm per block); s.q and s.scale on a segment s",
	doc: "QSGD: stochastic rounding to s levels (default 127) of |x|/norm per block of B (default 4096), " +
		"seeded (default seed 0) and unbiased; |x - x^| <= norm/s; qsgd(s,B,seed=n)",
	quantize:   qsgdQuantize,
	dequantize: qsgdDequantize,
	bound:      qsgdBound,

	dequantizeFast: int8DequantizeFast,
}

func init() { registerBlock(&qsgdKind) }

var errNormOverflow = errors.New("qsgd: block norm overflows float32")

// qsgdNorm is the float32 norm of a block from its float64 sum of
// squares: sqrt rounded up to float32.
func qsgdNorm(sum float64) float32 {
	n64 := math.Sqrt(sum)
	n := float32(n64)
	if float64(n) < n64 {
		n = math.Nextafter32(n, float32(math.Inf(1)))
	}
	return n
}

// qsgdKey is the dither key of the indices j with j>>32 == hi.
func qsgdKey(seed, hi uint64) uint32 { return uint32(inthash.Mix64(seed+(hi+1)*inthash.Gamma) >> 32) }

// qsgdDither is U for index j: 24 uniform bits.
func qsgdDither(seed, j uint64) uint32 { return inthash.Lowbias32(uint32(j)+qsgdKey(seed, j>>32)) >> 8 }

func qsgdQuantize(o *blockOp, q []byte, x []float32, idx uint64) (float32, error) {
	var acc [16]float64
	m := sums16(x, true, &acc)
	if m >= nonFiniteBits {
		return 0, errBlockNonFinite
	}
	norm := qsgdNorm(reduce16(&acc))
	if math.IsInf(float64(norm), 0) {
		return 0, errNormOverflow
	}
	q = q[:len(x)]
	if norm == 0 {
		clear(q)
		return 0, nil
	}
	s := float32(o.levels)
	k, pre := s/norm, float32(1)
	if math.Float32bits(norm) < tinyBits {
		k, pre = s/float32(norm*tinyScale), tinyScale
	}
	quantQSGD(q, x, k, pre, o.seed, idx, uint32(o.levels))
	return norm, nil
}

// quantQSGD sets q[i] to the signed level of x[i] (see the stage comment)
// for v = float32(float32(|x[i]|*pre) * k), the dither of index idx+i.
// Where pre is 1 and the indices share their top 32 bits, AVX2 codes whole
// groups of 32 elements first.
func quantQSGD(q []byte, x []float32, k, pre float32, seed, idx uint64, s uint32) {
	q = q[:len(x)]
	i := 0
	if pre == 1 && (idx>>32) == (idx+uint64(len(x)))>>32 {
		i = quantQSGDAsm(q, x, k, qsgdKey(seed, idx>>32), uint32(idx), s)
	}
	key, hi := qsgdKey(seed, (idx+uint64(i))>>32), (idx+uint64(i))>>32
	for ; i < len(x); i++ {
		j := idx + uint64(i)
		if j>>32 != hi {
			key, hi = qsgdKey(seed, j>>32), j>>32
		}
		b := math.Float32bits(x[i])
		a := math.Float32frombits(b & 0x7fffffff)
		v := float32(float32(a*pre) * k)
		V := uint32(int32(v * 0x1p24))
		l := min((V+inthash.Lowbias32(uint32(j)+key)>>8)>>24, s)
		n := uint32(int32(b) >> 31) // all ones for a negative x
		q[i] = byte((l ^ n) - n)
	}
}

func qsgdDequantize(o *blockOp, x []float32, q []byte, scale float32) bool {
	return dequantI8(x, q, scale/float32(o.levels), uint8(o.levels))
}

func qsgdBound(o *blockOp, x []float32) float64 {
	var acc [16]float64
	sums16(x, true, &acc)
	n := float64(qsgdNorm(reduce16(&acc)))
	return n*(1/float64(o.levels)+0x1p-21) + absSlack
}

// WithSeed implements codec.Seeder: a qsgd op with its dither seed
// replaced (other block quantizers draw nothing and are returned as they
// are).
func (o *blockOp) WithSeed(seed uint64) codec.Op {
	if o.kind != &qsgdKind {
		return o
	}
	c := *o
	c.seed = seed
	return &c
}

// Reseed returns op with its dither seed replaced when op is a qsgd op,
// and false for any other op.
//
// Deprecated: use the codec.Seeder interface.
func Reseed(op codec.Op, seed uint64) (codec.Op, bool) {
	o, ok := op.(*blockOp)
	if !ok || o.kind != &qsgdKind {
		return op, false
	}
	return o.WithSeed(seed), true
}
