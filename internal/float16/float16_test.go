package float16

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"testing"
)

// The tests check the conversions against independent definitions: the
// value of a 16-bit pattern from its fields with math.Ldexp, and for
// narrowing the interval of inputs that must round to each result, from
// the midpoints between neighbouring values (exact in float64), so that a
// sweep over all 2^32 float32 inputs needs two comparisons per input.

// f16Value is the value of the fp16 pattern h (NaN as math.NaN), from its
// fields.
func f16Value(h uint16) float64 {
	s, e, m := h>>15, int(h>>10&0x1f), int(h&0x3ff)
	var v float64
	switch e {
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		v = math.Inf(1)
	case 0:
		v = math.Ldexp(float64(m), -24)
	default:
		v = math.Ldexp(float64(1024+m), e-25)
	}
	if s == 1 {
		v = -v
	}
	return v
}

// bf16Value is the value of the bfloat16 pattern h, from its fields.
func bf16Value(h uint16) float64 {
	s, e, m := h>>15, int(h>>7&0xff), int(h&0x7f)
	var v float64
	switch e {
	case 0xff:
		if m != 0 {
			return math.NaN()
		}
		v = math.Inf(1)
	case 0:
		v = math.Ldexp(float64(m), -133)
	default:
		v = math.Ldexp(float64(128+m), e-134)
	}
	if s == 1 {
		v = -v
	}
	return v
}

// bounds holds, for each non-negative finite 16-bit pattern h, the
// interval [lo[h], hi[h]] of inputs that round to h (the midpoints to its
// neighbours; a tie goes to the even pattern). Inputs at or above
// hi[maxFinite] round to Inf.
type bounds struct {
	lo, hi    []float64
	maxFinite uint16
}

func newBounds(value func(uint16) float64, maxFinite uint16) *bounds {
	b := &bounds{lo: make([]float64, maxFinite+1), hi: make([]float64, maxFinite+1), maxFinite: maxFinite}
	for h := 0; h <= int(maxFinite); h++ {
		v := value(uint16(h))
		if h > 0 {
			b.lo[h] = (value(uint16(h-1)) + v) / 2
		}
		// Above the largest finite value, the next value of an unbounded
		// exponent: one more ulp.
		next := value(uint16(h + 1))
		if h == int(maxFinite) {
			next = 2*v - value(uint16(h-1))
		}
		b.hi[h] = (v + next) / 2
	}
	return b
}

// check reports whether h is the correct round-to-nearest-even result for
// the non-NaN input x (exact in float64), the sign included.
func (b *bounds) check(x float64, h uint16) bool {
	if math.Signbit(x) != (h&0x8000 != 0) {
		return false
	}
	a := math.Abs(x)
	h &= 0x7fff
	if h > b.maxFinite {
		return h == b.maxFinite+1 && a >= b.hi[b.maxFinite] // Inf
	}
	lo, hi := b.lo[h], b.hi[h]
	switch {
	case a < lo || a > hi:
		return false
	case a == lo || a == hi:
		return h&1 == 0 || h == 0 && a == 0
	}
	return true
}

var (
	f16Bounds  = newBounds(f16Value, 0x7bff)
	bf16Bounds = newBounds(bf16Value, 0x7f7f)
)

func TestBounds(t *testing.T) {
	if got := f16Bounds.hi[0x7bff]; got != OverflowF16 {
		t.Errorf("fp16 overflow threshold %v, want %v", got, OverflowF16)
	}
	if got := f16Value(0x7bff); got != MaxF16 {
		t.Errorf("fp16 max %v, want %v", got, MaxF16)
	}
	if got, want := bf16Bounds.hi[0x7f7f], 0x1.ffp127; got != want {
		t.Errorf("bf16 overflow threshold %x, want %x", got, want)
	}
}

// TestWidenAll checks the four widening conversions on all 65536
// patterns against the values from the fields, and the NaN bits.
func TestWidenAll(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		if v := f16Value(h); math.IsNaN(v) {
			want32 := uint32(h&0x8000)<<16 | 0x7fc00000 | uint32(h&0x3ff)<<13
			if got := math.Float32bits(F16ToF32(h)); got != want32 {
				t.Fatalf("F16ToF32(%#04x) = %#08x, want %#08x", h, got, want32)
			}
			want64 := uint64(h&0x8000)<<48 | 0x7ff8<<48 | uint64(h&0x3ff)<<42
			if got := math.Float64bits(F16ToF64(h)); got != want64 {
				t.Fatalf("F16ToF64(%#04x) = %#016x, want %#016x", h, got, want64)
			}
		} else {
			if got := F16ToF32(h); math.Float64bits(float64(got)) != math.Float64bits(v) {
				t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, got, v)
			}
			if got := F16ToF64(h); math.Float64bits(got) != math.Float64bits(v) {
				t.Fatalf("F16ToF64(%#04x) = %v, want %v", h, got, v)
			}
		}
		if got, want := math.Float32bits(BF16ToF32(h)), uint32(h)<<16; got != want {
			t.Fatalf("BF16ToF32(%#04x) = %#08x, want %#08x", h, got, want)
		}
		if v := bf16Value(h); math.IsNaN(v) {
			want64 := uint64(h&0x8000)<<48 | 0x7ff8<<48 | uint64(h&0x7f)<<45
			if got := math.Float64bits(BF16ToF64(h)); got != want64 {
				t.Fatalf("BF16ToF64(%#04x) = %#016x, want %#016x", h, got, want64)
			}
		} else {
			if float64(BF16ToF32(h)) != v && !(v == 0) {
				t.Fatalf("BF16ToF32(%#04x) = %v, want %v", h, BF16ToF32(h), v)
			}
			if got := BF16ToF64(h); math.Float64bits(got) != math.Float64bits(v) {
				t.Fatalf("BF16ToF64(%#04x) = %v, want %v", h, got, v)
			}
		}
	}
}

// TestRoundTrip16 checks that every pattern survives widening and
// narrowing again: exactly for numbers; NaNs become NaNF16 with their sign
// and NaNBF16.
func TestRoundTrip16(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		want := h
		if math.IsNaN(f16Value(h)) {
			want = h&0x8000 | NaNF16
		}
		if got := F16FromF32(F16ToF32(h)); got != want {
			t.Fatalf("F16FromF32(F16ToF32(%#04x)) = %#04x, want %#04x", h, got, want)
		}
		if got := F16FromF64(F16ToF64(h)); got != want {
			t.Fatalf("F16FromF64(F16ToF64(%#04x)) = %#04x, want %#04x", h, got, want)
		}
		want = h
		if math.IsNaN(bf16Value(h)) {
			want = NaNBF16
		}
		if got := BF16FromF32(BF16ToF32(h)); got != want {
			t.Fatalf("BF16FromF32(BF16ToF32(%#04x)) = %#04x, want %#04x", h, got, want)
		}
		if got := BF16FromF64(BF16ToF64(h)); got != want {
			t.Fatalf("BF16FromF64(BF16ToF64(%#04x)) = %#04x, want %#04x", h, got, want)
		}
	}
}

// edges32 returns, for each non-negative finite pattern h of b, the
// float32 bits of the midpoint above it (exact in float32), then
// 0x7f800000 (+Inf) as the edge of Inf, so that a walk over the float32
// patterns in order knows the result each must have.
func (b *bounds) edges32(t *testing.T) []uint32 {
	e := make([]uint32, len(b.hi)+1)
	for h, m := range b.hi {
		if float64(float32(m)) != m {
			t.Fatalf("midpoint %g above %#04x is not a float32", m, h)
		}
		e[h] = math.Float32bits(float32(m))
	}
	e[len(b.hi)] = 0x7f800000
	return e
}

// sweep32 checks conv on every float32 pattern (every stride-th with
// stride > 1): the non-negative ones in [0, +Inf] against the result that
// edges says, the negative ones against the same with the sign bit, and
// NaNs against nan. It works in parallel chunks and stops at the first
// failure.
func sweep32(t *testing.T, name string, bf bool, edges []uint32, nan func(uint32) uint16, stride uint32) {
	t.Helper()
	const chunk = 1 << 24
	var (
		mu   sync.Mutex
		fail string
		next uint64
		wg   sync.WaitGroup
	)
	// conv is the function under test, called directly (not through a
	// func value) so that the 2^32 calls stay cheap.
	conv := func(x float32) uint16 {
		if bf {
			return BF16FromF32(x)
		}
		return F16FromF32(x)
	}
	check := func(lo, hi uint32) string {
		// The expected result of lo: the first h whose edge is >= lo.
		h := uint16(sort.Search(len(edges), func(i int) bool { return edges[i] >= lo }))
		for b := lo; b < hi; b += stride {
			if b > 0x7f800000 { // NaN
				for _, s := range [2]uint32{0, 0x80000000} {
					if got, want := conv(math.Float32frombits(b|s)), nan(b|s); got != want {
						return fmt.Sprintf("%s(%#08x) = %#04x, want %#04x", name, b|s, got, want)
					}
				}
				continue
			}
			for b > edges[h] {
				h++
			}
			want := h
			if b == edges[h] && h&1 == 1 {
				want++ // a tie goes to the even neighbour
			}
			if got := conv(math.Float32frombits(b)); got != want {
				return fmt.Sprintf("%s(%#08x = %g) = %#04x, want %#04x", name, b, math.Float32frombits(b), got, want)
			}
			if got := conv(math.Float32frombits(b | 0x80000000)); got != want|0x8000 {
				return fmt.Sprintf("%s(%#08x) = %#04x, want %#04x", name, b|0x80000000, got, want|0x8000)
			}
		}
		return ""
	}
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				lo := next
				next += chunk
				stop := fail != "" || lo >= 1<<31
				mu.Unlock()
				if stop {
					return
				}
				// Start each chunk on the stride's grid.
				first := (lo + uint64(stride) - 1) / uint64(stride) * uint64(stride)
				if msg := check(uint32(first), uint32(lo+chunk)); msg != "" {
					mu.Lock()
					if fail == "" {
						fail = msg
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if fail != "" {
		t.Fatal(fail)
	}
}

var exhaustive = flag.Bool("float16.exhaustive", false,
	"check the float32 narrowings on all 2^32 inputs (15 s to a minute on two cores)")

// sweepStride is 1 (all 2^32 float32 inputs) with -float16.exhaustive,
// else an odd stride (every low-bit pattern is met) for about 8 million
// inputs; -short and -race take fewer. TestNarrowEdges covers the
// neighbourhood of every rounding boundary in every run.
func sweepStride() uint32 {
	switch {
	case *exhaustive:
		return 1
	case testing.Short() || raceEnabled:
		return 65521
	}
	return 509
}

// TestF16FromF32All checks F16FromF32 on every float32 (with
// -float16.exhaustive; a sample otherwise): the result of each input is read off the rounding intervals,
// and NaNs give NaNF16 with their sign.
func TestF16FromF32All(t *testing.T) {
	sweep32(t, "F16FromF32", false, f16Bounds.edges32(t), func(b uint32) uint16 {
		return uint16(b>>16)&0x8000 | NaNF16
	}, sweepStride())
}

// TestBF16FromF32All checks BF16FromF32 on every float32 (with
// -float16.exhaustive; a sample otherwise) in the same way; every NaN
// gives NaNBF16.
func TestBF16FromF32All(t *testing.T) {
	sweep32(t, "BF16FromF32", true, bf16Bounds.edges32(t), func(uint32) uint16 { return NaNBF16 }, sweepStride())
}

// TestNarrowEdges checks both float32 narrowings, both signs, on the
// float32 inputs within 4 ulps of every value and of every rounding
// midpoint of both formats, and around the overflow thresholds: where
// rounding goes wrong if it goes wrong anywhere.
func TestNarrowEdges(t *testing.T) {
	for _, c := range []struct {
		name  string
		conv  func(float32) uint16
		b     *bounds
		value func(uint16) float64
		nan   uint16
	}{
		{"F16FromF32", F16FromF32, f16Bounds, f16Value, NaNF16},
		{"BF16FromF32", BF16FromF32, bf16Bounds, bf16Value, NaNBF16},
	} {
		var centres []uint32
		for h := 0; h <= int(c.b.maxFinite); h++ {
			centres = append(centres, math.Float32bits(float32(c.value(uint16(h)))), math.Float32bits(float32(c.b.hi[h])))
		}
		centres = append(centres, 0x7f800000, 0x7f7fffff)
		n := 0
		for _, m := range centres {
			for d := -4; d <= 4; d++ {
				b := uint32(int64(m) + int64(d))
				if b > 0x7fffffff {
					continue
				}
				for _, s := range [2]uint32{0, 0x80000000} {
					x := math.Float32frombits(b | s)
					h := c.conv(x)
					n++
					if x != x {
						want := c.nan
						if c.nan == NaNF16 {
							want |= uint16(s >> 16) // fp16 NaNs keep their sign
						}
						if h != want {
							t.Fatalf("%s(%#08x) = %#04x, want NaN %#04x", c.name, b|s, h, want)
						}
						continue
					}
					if !c.b.check(float64(x), h) {
						t.Fatalf("%s(%#08x = %g) = %#04x (%g)", c.name, b|s, x, h, c.value(h))
					}
				}
			}
		}
		t.Logf("%s: %d inputs", c.name, n)
	}
}

// roundRef rounds x to p mantissa bits with smallest normal exponent emin
// and largest finite value max, with math.RoundToEven: a third,
// independent definition of the rounding.
func roundRef(x float64, p, emin int, max float64) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	_, exp := math.Frexp(x) // |x| = f * 2^exp, 0.5 <= f < 1
	e := exp - 1
	if e < emin {
		e = emin
	}
	ulp := math.Ldexp(1, e-p)
	r := math.RoundToEven(x/ulp) * ulp
	if math.Abs(r) > max {
		return math.Copysign(math.Inf(1), x)
	}
	return r
}

// f64Inputs returns float64 inputs for the float64 narrowing tests:
// random bit patterns over all exponents, values near every fp16 and bf16
// rounding midpoint (where rounding through float32 first would go wrong),
// and the specials.
func f64Inputs(n int) []float64 {
	r := rand.New(rand.NewPCG(1, 2))
	var xs []float64
	for range n {
		xs = append(xs, math.Float64frombits(r.Uint64()))
		// Exponents where both formats have their values.
		e := r.IntN(300) - 150
		xs = append(xs, math.Ldexp(r.Float64()+0.5, e)*float64(1-2*r.IntN(2)))
	}
	for _, b := range []*bounds{f16Bounds, bf16Bounds} {
		for h := 1; h < len(b.hi); h += 1 + r.IntN(7) {
			m := b.hi[h]
			for _, d := range []float64{0, 1, -1, 0x1p-40, -0x1p-40} {
				xs = append(xs, m+d*math.Ldexp(m, -52), -(m + d*math.Ldexp(m, -30)))
			}
		}
	}
	xs = append(xs, 0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.MaxFloat64, -math.MaxFloat64,
		math.SmallestNonzeroFloat64, 65504, 65519.99, 65520, 65536, 0x1p-24, 0x1p-25, 0x1.0000000001p-25, 0x1p-26,
		math.MaxFloat32, 0x1.ffp127, 0x1.fefffffffp127, 0x1p-133, 0x1p-134, 0x1.00001p-134, 0x1p-135)
	return xs
}

// TestFromF64 checks the float64 narrowings against the rounding
// intervals and roundRef, and that they round once, not through float32.
func TestFromF64(t *testing.T) {
	for _, x := range f64Inputs(1 << 20) {
		if x != x {
			continue // TestSpecials
		}
		h := F16FromF64(x)
		if !f16Bounds.check(x, h) {
			t.Fatalf("F16FromF64(%x) = %#04x (%g)", x, h, f16Value(h))
		}
		if got, want := f16Value(h), roundRef(x, 10, -14, MaxF16); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("F16FromF64(%x) = %g, RoundToEven reference %g", x, got, want)
		}
		h = BF16FromF64(x)
		if !bf16Bounds.check(x, h) {
			t.Fatalf("BF16FromF64(%x) = %#04x (%g)", x, h, bf16Value(h))
		}
		if got, want := bf16Value(h), roundRef(x, 7, -126, 0x1.fep127); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("BF16FromF64(%x) = %g, RoundToEven reference %g", x, got, want)
		}
	}
	// Double rounding: 1 + 2^-11 + 2^-40 rounds to 1 + 2^-11 in float32,
	// a tie that goes to 1; rounded once it is 1 + 2^-10.
	if got, want := F16FromF64(1+0x1p-11+0x1p-40), uint16(0x3c01); got != want {
		t.Errorf("F16FromF64(1+2^-11+2^-40) = %#04x, want %#04x", got, want)
	}
	if got, want := BF16FromF64(1+0x1p-8+0x1p-40), uint16(0x3f81); got != want {
		t.Errorf("BF16FromF64(1+2^-8+2^-40) = %#04x, want %#04x", got, want)
	}
}

// TestFromF32MatchesF64 checks that the float32 narrowings agree with the
// float64 ones on float32 inputs (exact in float64), NaN included.
func TestFromF32MatchesF64(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 1 << 21 {
		x := math.Float32frombits(r.Uint32())
		if a, b := F16FromF32(x), F16FromF64(float64(x)); a != b {
			t.Fatalf("F16FromF32(%#08x) = %#04x, F16FromF64 = %#04x", math.Float32bits(x), a, b)
		}
		if a, b := BF16FromF32(x), BF16FromF64(float64(x)); a != b {
			t.Fatalf("BF16FromF32(%#08x) = %#04x, BF16FromF64 = %#04x", math.Float32bits(x), a, b)
		}
	}
}

// TestSpecials pins a few values by their bits.
func TestSpecials(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	inf := float32(math.Inf(1))
	for _, c := range []struct {
		x       uint32
		f16, bf uint16
	}{
		{0x00000000, 0x0000, 0x0000},
		{math.Float32bits(negZero), 0x8000, 0x8000},
		{math.Float32bits(1), 0x3c00, 0x3f80},
		{math.Float32bits(-2), 0xc000, 0xc000},
		{math.Float32bits(65504), 0x7bff, 0x477f + 1},
		{math.Float32bits(65519.996), 0x7bff, 0x4780},
		{math.Float32bits(65520), 0x7c00, 0x4780},
		{math.Float32bits(inf), 0x7c00, 0x7f80},
		{math.Float32bits(-inf), 0xfc00, 0xff80},
		{math.Float32bits(0x1p-24), 0x0001, 0x3380},
		{math.Float32bits(0x1p-25), 0x0000, 0x3300},
		{math.Float32bits(0x1.000002p-25), 0x0001, 0x3300},
		{math.Float32bits(0x1.8p-24), 0x0002, 0x33c0},
		{math.Float32bits(0x1p-14), 0x0400, 0x3880},
		{math.Float32bits(math.MaxFloat32), 0x7c00, 0x7f80},
		{0x7f7f7fff, 0x7c00, 0x7f7f},
		{0x7f7f8000, 0x7c00, 0x7f80},
		{0x00000001, 0x0000, 0x0000},
		{0x00008000, 0x0000, 0x0000},
		{0x00008001, 0x0000, 0x0001},
		{0x00018000, 0x0000, 0x0002},
		{0x7fc00000, 0x7e00, NaNBF16},
		{0xffc00000, 0xfe00, NaNBF16},
		{0x7f800001, 0x7e00, NaNBF16},
		{0x7fbfffff, 0x7e00, NaNBF16},
		{0xff802000, 0xfe00, NaNBF16},
	} {
		x := math.Float32frombits(c.x)
		if got := F16FromF32(x); got != c.f16 {
			t.Errorf("F16FromF32(%#08x) = %#04x, want %#04x", c.x, got, c.f16)
		}
		if got := BF16FromF32(x); got != c.bf {
			t.Errorf("BF16FromF32(%#08x) = %#04x, want %#04x", c.x, got, c.bf)
		}
	}
	for _, c := range []struct {
		x       uint64
		f16, bf uint16
	}{
		{0x7ff8000000000000, 0x7e00, NaNBF16},
		{0xfff0000000000001, 0xfe00, NaNBF16},
		{0x7ff4000000000000, 0x7e00, NaNBF16},
		{0xfffffc0000000000, 0xfe00, NaNBF16},
	} {
		x := math.Float64frombits(c.x)
		if got := F16FromF64(x); got != c.f16 {
			t.Errorf("F16FromF64(%#016x) = %#04x, want %#04x", c.x, got, c.f16)
		}
		if got := BF16FromF64(x); got != c.bf {
			t.Errorf("BF16FromF64(%#016x) = %#04x, want %#04x", c.x, got, c.bf)
		}
	}
}

func BenchmarkF16FromF32(b *testing.B) {
	xs := make([]float32, 4096)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range xs {
		xs[i] = float32(r.NormFloat64())
	}
	b.SetBytes(4 * int64(len(xs)))
	var s uint16
	for b.Loop() {
		for _, x := range xs {
			s += F16FromF32(x)
		}
	}
	_ = s
}
