package entropy

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

func TestOrder0(t *testing.T) {
	all := make([]byte, 256*4)
	for i := range all {
		all[i] = byte(i)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want float64
	}{
		{"empty", nil, 0},
		{"constant", []byte("aaaaaaaa"), 0},
		{"two symbols", []byte("abababab"), 1},
		{"1:3", []byte("abbb"), 2 - 0.75*math.Log2(3)},
		{"uniform", all, 8},
	} {
		if got := Order0(tc.in); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: Order0 = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestOrder1(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want float64 // bits in all
	}{
		{"empty", nil, 0},
		{"one byte", []byte("a"), 8},
		{"alternating", []byte("abababab"), 8}, // each byte follows from the one before
		{"constant", []byte("aaaa"), 8},
		// After a: b, c (1 bit each); after b: a; after c: a.
		{"abaca", []byte("abaca"), 8 + 2},
	} {
		if got := Order1(tc.in) * float64(len(tc.in)); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: Order1 x n = %v bits, want %v", tc.name, got, tc.want)
		}
	}
	// Random bytes: order 1 is no better than order 0 but for the tables
	// it leaves out (about 255 x 255 / (2 ln 2) bits of bias).
	rng := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if o0, o1 := Order0(b), Order1(b); o1 > o0 || o0-o1 > 0.06 {
		t.Fatalf("random: order 0 %.4f, order 1 %.4f bits a byte", o0, o1)
	}
}

func TestPlaneBound(t *testing.T) {
	// Plane 0 uniform over 256 values, plane 1 constant, plane 2 two values.
	data := make([]byte, 0, 3*512)
	for i := range 512 {
		data = append(data, byte(i), 7, byte(i&1))
	}
	data = append(data, 1, 2) // a partial element is ignored
	bits, ratio := PlaneBound(data, 3)
	want := []float64{8, 0, 1}
	for i := range want {
		if math.Abs(bits[i]-want[i]) > 1e-12 {
			t.Fatalf("plane bits %v, want %v", bits, want)
		}
	}
	if math.Abs(ratio-24.0/9) > 1e-12 {
		t.Fatalf("ratio %v, want %v", ratio, 24.0/9)
	}
	if b, r := PlaneBound(nil, 4); len(b) != 4 || r != 1 {
		t.Fatalf("empty: %v %v", b, r)
	}
	if _, r := PlaneBound(make([]byte, 64), 4); !math.IsInf(r, 1) {
		t.Fatalf("zeros: ratio %v, want +Inf", r)
	}
	// Width 1 is Order0.
	if _, r := PlaneBound([]byte("abababab"), 1); r != 8 {
		t.Fatalf("width 1: ratio %v, want 8", r)
	}
}

// N(0, 0.02) float32 weights: the design notes quote 8.00/8.00/7.97/2.68
// bits and a bound of about 1.20x.
func TestPlaneBoundWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 4<<18)
	for i := 0; i < len(data); i += 4 {
		binary.LittleEndian.PutUint32(data[i:], math.Float32bits(float32(rng.NormFloat64()*0.02)))
	}
	bits, ratio := PlaneBound(data, 4)
	if bits[0] < 7.99 || bits[1] < 7.99 || math.Abs(bits[3]-2.68) > 0.05 || math.Abs(ratio-1.20) > 0.01 {
		t.Fatalf("plane bits %.3f, ratio %.4f", bits, ratio)
	}
}

func BenchmarkPlaneBound(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	b.Run("order0", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			Order0(data)
		}
	})
	for _, w := range []int{1, 2, 4} {
		b.Run("width="+strconv.Itoa(w), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				PlaneBound(data, w)
			}
		})
	}
}

// TestOrder2: hand-counted strings, and bytes that the two before them
// set.
func TestOrder2(t *testing.T) {
	if Order2(nil) != 0 {
		t.Error("empty: want 0, as documented")
	}
	if got := Order2([]byte("ab")) * 2; got != 16 {
		t.Errorf("ab: %v bits, want 16", got)
	}
	// Hand-checked: "abaab": contexts ab->a (once), ba->a, aa->b: 0 bits
	// after the first two.
	if got := Order2([]byte("abaab")) * 5; math.Abs(got-16) > 1e-9 {
		t.Errorf("abaab: %v bits, want 16", got)
	}
	// "aabaac": aa->b, ab->a, ba->a, aa->c: after aa, b and c (1 bit each).
	if got := Order2([]byte("aabaac")) * 6; math.Abs(got-18) > 1e-9 {
		t.Errorf("aabaac: %v bits, want 18", got)
	}
	// A byte set by the two before it costs nothing past them.
	b := make([]byte, 1<<16)
	b[0], b[1] = 1, 2
	for i := 2; i < len(b); i++ {
		b[i] = b[i-1]*3 + b[i-2]
	}
	if got := Order2(b) * float64(len(b)); math.Abs(got-16) > 1e-6 {
		t.Errorf("recurrence: %v bits, want 16", got)
	}
}

// TestCond: b that follows from ctx costs nothing; under a constant ctx,
// Order0(b).
func TestCond(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	b, ctx := make([]byte, 1<<16), make([]byte, 1<<16)
	for i := range b {
		ctx[i] = byte(rng.Uint32())
		b[i] = ctx[i] ^ 0x5a
	}
	if got := Cond(b, ctx); got != 0 {
		t.Errorf("b a function of ctx: %v bits a byte, want 0", got)
	}
	if got, want := Cond(ctx, make([]byte, len(ctx))), Order0(ctx); math.Abs(got-want) > 1e-9 {
		t.Errorf("constant ctx: %v, want Order0 %v", got, want)
	}
	if Cond(nil, nil) != 0 {
		t.Error("empty: want 0")
	}
}
