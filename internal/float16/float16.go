// Package float16 holds the scalar, bit-level conversions between float32
// or float64 and the two 16-bit float formats that tensorpress ships:
// IEEE 754 binary16 ("fp16", 1 sign, 5 exponent, 10 mantissa bits) and
// bfloat16 ("bf16", 1 sign, 8 exponent, 7 mantissa bits: the top half of
// a float32).
//
// These functions are the reference that the vectorized kernels of
// package lossy are specified by and tested against. They are pure, safe
// for concurrent use, and do not depend on the floating-point environment.
//
// Narrowing (F16FromF32, F16FromF64, BF16FromF32, BF16FromF64) rounds once,
// to nearest with ties to even, with gradual underflow (subnormal results
// are exact roundings, not flushed to zero) and overflow to ±Inf: fp16 gives
// ±Inf from |x| >= 65520 (65504 is its largest finite value, 65520 the
// midpoint to the next power of two), bf16 only from |x| >= 0x1.ffp127
// (2^128 - 2^119, the midpoint above its largest finite value
// 0x1.fep127): float32 inputs from bits 0x7f7f8000 up to MaxFloat32 round
// to Inf, as IEEE rounding says. ±0 and ±Inf are kept exactly; subnormal
// inputs that are too small give ±0 with their sign.
//
// NaN: the results are the bit patterns PyTorch (1.13, x86-64, AVX2; see
// testvectors/reference/fp) produces for whole tensors,
// tensor.to(torch.float16 / torch.bfloat16). fp16 gives NaNF16 with the
// input's sign (0x7e00 or 0xfe00): the payload is dropped, as on every torch
// path. bf16 gives NaNBF16 (0xffff) for every NaN, whatever its sign and
// payload: that is the constant torch's AVX2 kernel blends in; its scalar
// path (0-d and strided tensors) gives 0x7fc0 instead (see NaNBF16).
// Widening (F16ToF32, BF16ToF32 and the float64 variants) is exact for
// every non-NaN value; a NaN keeps its sign and payload, and widening fp16
// sets the quiet bit (signalling NaNs become quiet, as with torch and
// VCVTPH2PS), while bf16 widening to float32 is a plain shift that keeps
// every bit (as torch does).
package float16

import "math"

// Bit layouts.
const (
	f16SignMask = 0x8000
	f16ExpMask  = 0x7c00
	f16ManMask  = 0x03ff

	f32SignMask = 0x80000000
	f32ExpMask  = 0x7f800000
	f32Quiet    = 0x00400000

	f64SignMask = 1 << 63
	f64ExpMask  = 0x7ff << 52
	f64Quiet    = 1 << 51
)

// NaNBF16 is the bfloat16 pattern BF16FromF32 and BF16FromF64 give for
// every NaN input: PyTorch's vectorized CPU kernel (cvtfp32_bf16 in
// ATen's vec256_bfloat16.h) blends 0xffff into NaN lanes. Its scalar
// conversion (c10::BFloat16's round_to_nearest_even) returns 0x7fc0
// instead; torch uses that one for single values and for the elements of
// a tensor that are left over after its vector loop, so a torch tensor
// may hold both. Both are NaN; tensorpress always writes 0xffff.
const NaNBF16 = 0xffff

// NaNF16 is the fp16 pattern F16FromF32 and F16FromF64 give for a NaN
// with the sign bit clear; with it set they give NaNF16 | 0x8000. Torch
// drops the payload on every path; the F16C instruction VCVTPS2PH would
// keep its top 9 bits (the kernels of package lossy clear them).
const NaNF16 = 0x7e00

// MaxF16 is the largest finite fp16 value, 65504. Inputs whose magnitude
// is at least OverflowF16 (65520, the midpoint between MaxF16 and 2^16)
// round to ±Inf.
const (
	MaxF16      = 65504
	OverflowF16 = 65520
)

// F16FromF32 rounds x to the nearest fp16 value, ties to even, and
// returns its bits. See the package comment for overflow and NaN.
func F16FromF32(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & f16SignMask
	a := b &^ f32SignMask
	if a-0x38800000 < 0x477ff000-0x38800000 {
		// 2^-14 <= |x| < 65520: a normal result. Rebias the exponent
		// (127 -> 15) and round the 23-bit mantissa to 10 bits: adding
		// 0xfff plus the lowest kept bit carries into the kept bits
		// exactly when the dropped bits exceed half, or equal it with the
		// kept value odd. A carry out of the mantissa bumps the exponent,
		// which is the right result (65504 at most, below 65520).
		a -= (127 - 15) << 23
		a += 0xfff + (a>>13)&1
		return sign | uint16(a>>13)
	}
	return sign | f16FromF32Rare(a)
}

// f16FromF32Rare is F16FromF32 of the magnitude a outside the normal
// range: NaN, overflow, subnormal results and zero.
func f16FromF32Rare(a uint32) uint16 {
	switch {
	case a > f32ExpMask: // NaN: the payload is dropped
		return NaNF16
	case a >= 0x477ff000: // |x| >= 65520 (and Inf)
		return f16ExpMask
	case a <= 0x33000000: // |x| <= 2^-25: 0 (2^-25 is a tie, to even 0)
		return 0
	}
	// Subnormal result: value = m * 2^(e-150) in units of 2^-24 is
	// m >> (126 - e), rounded to nearest even. 2^-25 < |x| < 2^-14 means
	// 102 <= e <= 112, so the shift is 14..24. A result of 0x400 is the
	// smallest normal, correctly encoded.
	e := a >> 23
	m := a&0x7fffff | 0x800000
	return uint16(roundShift(uint64(m), uint(126-e)))
}

// roundShift returns m / 2^s rounded to nearest, ties to even, for
// 1 <= s <= 63.
func roundShift(m uint64, s uint) uint64 {
	q := m >> s
	rem := m & (1<<s - 1)
	half := uint64(1) << (s - 1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return q
}

// F16FromF64 rounds x to the nearest fp16 value, ties to even, in one
// step (not through float32, which would round twice), and returns its
// bits. A NaN gives NaNF16 with its sign, like F16FromF32.
func F16FromF64(x float64) uint16 {
	b := math.Float64bits(x)
	sign := uint16(b>>48) & f16SignMask
	if b&^f64SignMask > f64ExpMask {
		return sign | NaNF16
	}
	return sign | uint16(narrowF64(b&^f64SignMask, 10, 15))
}

// BF16FromF32 rounds x to the nearest bfloat16 value, ties to even, and
// returns its bits. Every NaN gives NaNBF16.
func BF16FromF32(x float32) uint16 {
	b := math.Float32bits(x)
	if b&^f32SignMask > f32ExpMask {
		return NaNBF16
	}
	// Round the low 16 bits away, to nearest even; a carry runs into the
	// exponent, and from the largest finite values to Inf, as it should.
	// Subnormals round correctly too: the encoding is monotone.
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// BF16FromF64 rounds x to the nearest bfloat16 value, ties to even, in
// one step, and returns its bits. Every NaN gives NaNBF16.
func BF16FromF64(x float64) uint16 {
	b := math.Float64bits(x)
	if b&^f64SignMask > f64ExpMask {
		return NaNBF16
	}
	return uint16(b>>48)&0x8000 | uint16(narrowF64(b&^f64SignMask, 7, 127))
}

// narrowF64 rounds the non-negative, non-NaN float64 with bits a to a
// format with p mantissa bits and exponent bias bias (its largest biased
// exponent 2*bias+1 is Inf/NaN), to nearest even, and returns the bits of
// the result without sign: Inf on overflow, subnormals and zero below.
func narrowF64(a uint64, p uint, bias int) uint64 {
	inf := uint64(2*bias+1) << p
	e := int(a >> 52)
	if e == 0x7ff { // Inf
		return inf
	}
	if e == 0 { // ±0 and float64 subnormals: far below half the smallest subnormal of both formats
		return 0
	}
	E := e - 1023 // value = M * 2^(E-52), 2^52 <= M < 2^53
	if E > bias+1 {
		return inf
	}
	M := a&(1<<52-1) | 1<<52
	emin := 1 - bias // exponent of the smallest normal
	var shift int
	if E >= emin {
		shift = 52 - int(p)
	} else {
		shift = 52 - int(p) + emin - E
	}
	if shift > 53 { // below half the smallest subnormal
		return 0
	}
	q := roundShift(M, uint(shift))
	var enc uint64
	if E >= emin {
		// q in [2^p, 2^(p+1)]: the implicit bit adds one to the exponent
		// field, and a rounding carry to 2^(p+1) adds another.
		enc = uint64(E+bias-1)<<p + q
	} else {
		enc = q // subnormal, or the smallest normal when q == 2^p
	}
	return min(enc, inf)
}

// F16ToF32 returns the fp16 value with bits h as a float32, exactly. A NaN
// keeps its sign and payload and is made quiet (VCVTPH2PS does the same).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&f16SignMask) << 16
	e := uint32(h&f16ExpMask) >> 10
	m := uint32(h & f16ManMask)
	switch e {
	case 0x1f:
		if m == 0 {
			return math.Float32frombits(sign | f32ExpMask)
		}
		return math.Float32frombits(sign | f32ExpMask | f32Quiet | m<<13)
	case 0:
		// ±0 or subnormal: m * 2^-24, exact in float32.
		return math.Float32frombits(sign | math.Float32bits(float32(m)*0x1p-24))
	}
	return math.Float32frombits(sign | (e+127-15)<<23 | m<<13)
}

// F16ToF64 returns the fp16 value with bits h as a float64, exactly. A NaN
// keeps its sign and payload and is made quiet.
func F16ToF64(h uint16) float64 {
	if h&f16ExpMask == f16ExpMask && h&f16ManMask != 0 {
		return math.Float64frombits(uint64(h&f16SignMask)<<48 | f64ExpMask | f64Quiet | uint64(h&f16ManMask)<<42)
	}
	return float64(F16ToF32(h)) // exact, Inf included
}

// BF16ToF32 returns the bfloat16 value with bits h as a float32: the
// bits shifted into the top half, every value (NaN payloads included)
// kept exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// BF16ToF64 returns the bfloat16 value with bits h as a float64, exactly.
// A NaN keeps its sign and payload (as converting the float32 of
// BF16ToF32 would, made quiet).
func BF16ToF64(h uint16) float64 {
	if h&0x7f80 == 0x7f80 && h&0x7f != 0 {
		return math.Float64frombits(uint64(h&0x8000)<<48 | f64ExpMask | f64Quiet | uint64(h&0x7f)<<45)
	}
	return float64(BF16ToF32(h))
}
