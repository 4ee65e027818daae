package topk

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// refExact is the specification: sort by (magnitude desc, index asc), take
// k, return ascending.
func refExact(x []float32, k int) []uint32 {
	return refTake(refOrder(x), k)
}

// refOrder returns the indices of x by (magnitude desc, index asc).
func refOrder(x []float32) []uint32 {
	idx := make([]uint32, len(x))
	for i := range idx {
		idx[i] = uint32(i)
	}
	slices.SortFunc(idx, func(a, b uint32) int {
		ma, mb := mag(x[a]), mag(x[b])
		if ma != mb {
			if ma > mb {
				return -1
			}
			return 1
		}
		return int(a) - int(b)
	})
	return idx
}

func refTake(order []uint32, k int) []uint32 {
	k = max(0, min(k, len(order)))
	idx := slices.Clone(order[:k])
	slices.Sort(idx)
	return idx
}

func refThreshold(x []float32, t float32) []uint32 {
	var out []uint32
	for i, v := range x {
		if math.Abs(float64(v)) >= math.Abs(float64(t)) || mag(v) >= mag(t) {
			if mag(v) < mag(t) {
				panic("abs and magnitude bits disagree")
			}
			out = append(out, uint32(i))
		}
	}
	return out
}

// Test data generators: name -> fill.
var kinds = []struct {
	name string
	gen  func(r *rand.Rand, x []float32)
}{
	{"normal", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
	}},
	{"negative", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = -float32(math.Abs(r.NormFloat64()))
		}
	}},
	{"equal", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = 1.5
		}
	}},
	{"signed-equal", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = []float32{1.5, -1.5}[r.IntN(2)]
		}
	}},
	{"few", func(r *rand.Rand, x []float32) {
		vals := []float32{0, -1, 1, 2, -2, 3, 0.5}
		for i := range x {
			x[i] = vals[r.IntN(len(vals))]
		}
	}},
	{"zeros", func(r *rand.Rand, x []float32) {
		negz := float32(math.Copysign(0, -1))
		for i := range x {
			x[i] = 0
			if r.IntN(2) == 0 {
				x[i] = negz
			}
		}
	}},
	{"sparse", func(r *rand.Rand, x []float32) { // mostly ±0, a few values
		negz := float32(math.Copysign(0, -1))
		for i := range x {
			switch r.IntN(64) {
			case 0:
				x[i] = float32(r.NormFloat64())
			case 1:
				x[i] = negz
			default:
				x[i] = 0
			}
		}
	}},
	{"subnormal", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = math.Float32frombits(r.Uint32()&0x807fffff | uint32(r.IntN(2))<<23*0)
			if r.IntN(8) == 0 {
				x[i] = math.Float32frombits(r.Uint32() & 0x8000000f) // tiny, many ties
			}
		}
	}},
	{"special", func(r *rand.Rand, x []float32) {
		vals := []float32{
			float32(math.Inf(1)), float32(math.Inf(-1)),
			float32(math.NaN()), math.Float32frombits(0xffc00001), math.Float32frombits(0x7f800001),
			math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 0, 1, -1,
		}
		for i := range x {
			if r.IntN(3) == 0 {
				x[i] = vals[r.IntN(len(vals))]
			} else {
				x[i] = float32(r.NormFloat64() * 1e3)
			}
		}
	}},
	{"bits", func(r *rand.Rand, x []float32) { // every float32 pattern
		for i := range x {
			x[i] = math.Float32frombits(r.Uint32())
		}
	}},
	{"narrow", func(r *rand.Rand, x []float32) { // one top-bits bucket
		for i := range x {
			x[i] = math.Float32frombits(0x3f800000 | r.Uint32()&0x3ff)
		}
	}},
	{"ramp", func(r *rand.Rand, x []float32) { // sorted: worst for branches
		for i := range x {
			x[i] = float32(i) - float32(len(x))/2
		}
	}},
}

func testKs(r *rand.Rand, n int) []int {
	ks := []int{-1, 0, 1, 2, 3, n / 1000, n / 100, n/8 - 1, n / 8, n/8 + 1, n / 2, n - 1, n, n + 1, r.IntN(n + 1)}
	return ks
}

func checkExact(t *testing.T, x []float32, k int, s *Scratch, want []uint32) {
	t.Helper()
	prefix := []uint32{7, 9}
	got := Exact(slices.Clip(prefix), x, k, s)
	if !slices.Equal(got[:2], prefix) {
		t.Fatalf("n=%d k=%d: dst prefix clobbered", len(x), k)
	}
	if !slices.Equal(got[2:], want) {
		i := 0
		for i < min(len(want), len(got)-2) && got[2+i] == want[i] {
			i++
		}
		t.Fatalf("n=%d k=%d: got %d indices, want %d; first difference at %d", len(x), k, len(got)-2, len(want), i)
	}
}

func TestExact(t *testing.T) {
	sizes := []int{0, 1, 2, 3, 5, 31, 47, 48, 49, 64, 65, 100, 640, 1000, 4097, 8192}
	if !raceEnabled {
		sizes = append(sizes, 65537, 1<<17-1, 1<<17, 300_001)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var s Scratch // shared: dirty scratch must not matter
	for _, kind := range kinds {
		for _, n := range sizes {
			x := make([]float32, n)
			kind.gen(r, x)
			ks := testKs(r, n)
			if n > 70000 {
				ks = []int{0, 1, n / 1000, n / 100, n/8 + 1, n / 2, n - 1}
			}
			order := refOrder(x)
			for _, k := range ks {
				checkExact(t, x, k, &s, refTake(order, k))
			}
			if n <= 65 {
				for k := range n + 1 {
					checkExact(t, x, k, nil, refTake(order, k))
				}
			}
		}
		t.Logf("%s ok", kind.name)
	}
}

// TestExactTies: all-equal magnitudes, -0 and +0, NaN payloads, at every
// route (sort, 11-bit, 16-bit; sparse and dense cut).
func TestExactTies(t *testing.T) {
	negz := float32(math.Copysign(0, -1))
	nan1, nan2 := math.Float32frombits(0x7fc00000), math.Float32frombits(0xffc00000)
	for _, n := range []int{10, 100, 5000, 20000, 1 << 17} {
		if raceEnabled && n > 10000 {
			continue
		}
		x := make([]float32, n)
		for i := range x {
			switch i % 5 {
			case 0:
				x[i] = negz
			case 1:
				x[i] = nan2
			case 2:
				x[i] = nan1
			}
		}
		for _, k := range []int{1, n / 5, n/5 + 1, 2 * n / 5, 2*n/5 + 3, n - 1} {
			want := refExact(x, k)
			checkExact(t, x, k, nil, want)
			// The NaNs (same magnitude) come first, then ±0 by index.
			if k <= 2*n/5 {
				for _, i := range want {
					if i%5 != 1 && i%5 != 2 {
						t.Fatalf("n=%d k=%d: index %d is not a NaN", n, k, i)
					}
				}
			}
		}
	}
}

func TestExactSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations differ under -race")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{10, 640, 8192, 100352, 300000} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for _, k := range []int{n / 100, n / 2} {
			var s Scratch
			dst := make([]uint32, 0, k+1)
			allocs := testing.AllocsPerRun(5, func() {
				dst = Exact(dst[:0], x, k, &s)
			})
			if allocs != 0 {
				t.Errorf("n=%d k=%d: %v allocations per call", n, k, allocs)
			}
			allocs = testing.AllocsPerRun(5, func() {
				dst = Sampled(dst[:0], x, n/1000+1, &s, SampleOptions{})
			})
			if allocs != 0 {
				t.Errorf("Sampled n=%d: %v allocations per call", n, allocs)
			}
		}
	}
}

func TestThreshold(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ts := []float32{0, float32(math.Copysign(0, -1)), 1e-40, 0.5, -0.5, 1, 1.5, -1.5, 2, 3, 1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(0x7f800001),
		math.Float32frombits(0xffffffff), math.Float32frombits(1)}
	for _, kind := range kinds {
		for _, n := range []int{0, 1, 2, 3, 15, 16, 17, 31, 32, 33, 47, 1000, 4097, 65537} {
			if raceEnabled && n > 5000 {
				continue
			}
			x := make([]float32, n)
			kind.gen(r, x)
			for _, th := range ts {
				var want []uint32
				for i, v := range x {
					if mag(v) >= mag(th) {
						want = append(want, uint32(i))
					}
				}
				got := Threshold([]uint32{42}, x, th)
				if got[0] != 42 || !slices.Equal(got[1:], want) {
					t.Fatalf("%s n=%d t=%v: got %d indices, want %d", kind.name, n, th, len(got)-1, len(want))
				}
				// For non-NaN values the magnitude bits order like |x|.
				if !math.IsNaN(float64(th)) && kind.name != "bits" && kind.name != "special" {
					if ref := refThreshold(x, th); !slices.Equal(ref, want) {
						t.Fatalf("%s n=%d t=%v: |x| and magnitude bits disagree", kind.name, n, th)
					}
				}
			}
		}
	}
}

var fuzzScratch = sync.Pool{New: func() any { return new(Scratch) }}

// FuzzExact compares Exact with the reference for arbitrary float32 data
// (the bytes, little-endian) and k.
func FuzzExact(f *testing.F) {
	f.Add([]byte{}, 0)
	f.Add([]byte{0, 0, 0x80, 0x7f, 0, 0, 0xc0, 0xff, 0, 0, 0, 0x80, 0, 0, 0, 0}, 2)
	b := make([]byte, 4*600)
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 600 {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(r.NormFloat64())))
	}
	f.Add(b, 6)
	f.Add(b, 300)
	f.Fuzz(func(t *testing.T, data []byte, k int) {
		x := make([]float32, len(data)/4)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		if k < -1 || k > len(x)+1 {
			k = int(uint(k) % uint(len(x)+2))
		}
		s := fuzzScratch.Get().(*Scratch) // reused: dirty scratch must not matter
		defer fuzzScratch.Put(s)
		got := Exact(nil, x, k, s)
		if want := refExact(x, k); !slices.Equal(got, want) {
			t.Fatalf("n=%d k=%d: got %v, want %v", len(x), k, got, want)
		}
	})
}

func normal(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 99))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// checkSampled checks what Sampled promises for its final threshold thr:
// if more than k magnitudes reach thr the result is Exact's, else it is
// exactly the indices that reach thr.
func checkSampled(t *testing.T, x []float32, k int, got []uint32, thr float32) {
	t.Helper()
	checkSampledOrder(t, x, nil, k, got, thr)
}

// checkSampledOrder is checkSampled with x's refOrder, or nil.
func checkSampledOrder(t *testing.T, x []float32, order []uint32, k int, got []uint32, thr float32) {
	t.Helper()
	k = max(0, min(k, len(x)))
	if len(got) > k {
		t.Fatalf("n=%d k=%d: %d indices", len(x), k, len(got))
	}
	pass := Threshold(nil, x, thr)
	want := pass
	if len(pass) > k {
		if order == nil {
			order = refOrder(x)
		}
		want = refTake(order, k)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("n=%d k=%d thr=%v: got %d indices, want %d (%d pass thr)", len(x), k, thr, len(got), len(want), len(pass))
	}
}

func TestSampledNormal(t *testing.T) {
	n := 1 << 20
	if raceEnabled || testing.Short() {
		n = 1 << 17
	}
	x := normal(11, n)
	order := refOrder(x)
	var s Scratch
	for _, density := range []float64{0.001, 0.01, 0.1} {
		k := int(float64(n) * density)
		low, dev := 0, 0.0
		const steps = 20
		for step := range steps {
			got := Sampled(nil, x, k, &s, SampleOptions{Start: uint64(step) * 7919})
			checkSampledOrder(t, x, order, k, got, s.thresh)
			if len(got) < int(0.8*float64(k)) {
				low++
			}
			// The smallest selected magnitude is close to Exact's.
			ex := refTake(order, k)
			minMag := func(idx []uint32) float64 {
				m := math.Inf(1)
				for _, i := range idx {
					m = min(m, math.Abs(float64(x[i])))
				}
				return m
			}
			dev = max(dev, math.Abs(minMag(got)/minMag(ex)-1))
		}
		t.Logf("density %v: k=%d, %d/%d runs below 0.8k, max relative deviation of the smallest magnitude %.4f", density, k, low, steps, dev)
		if low > 0 || dev > 0.1 {
			t.Errorf("density %v: %d runs below 0.8k, deviation %.4f", density, low, dev)
		}
	}
}

// TestSampledSmall: below the cutoffs Sampled is Exact.
func TestSampledSmall(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 13))
	var s Scratch
	for _, kind := range kinds {
		for _, n := range []int{0, 1, 2, 3, 31, 1000, sampledMinN - 1} {
			if raceEnabled && n > 5000 && kind.name != "normal" && kind.name != "few" {
				continue
			}
			x := make([]float32, n)
			kind.gen(r, x)
			order := refOrder(x)
			for _, k := range testKs(r, n) {
				got := Sampled(nil, x, k, &s, SampleOptions{})
				if want := refTake(order, k); !slices.Equal(got, want) {
					t.Fatalf("%s n=%d k=%d: differs from Exact", kind.name, n, k)
				}
			}
		}
	}
	// k <= 2 (n <= ceil(2n/k)) and SampleRatio 1: Exact at any size.
	x := normal(14, 200_000)
	for _, c := range []struct {
		k   int
		opt SampleOptions
	}{{1, SampleOptions{}}, {2, SampleOptions{}}, {500, SampleOptions{SampleRatio: 1}}} {
		got := Sampled(nil, x, c.k, &s, c.opt)
		if want := refExact(x, c.k); !slices.Equal(got, want) {
			t.Fatalf("k=%d %+v: differs from Exact", c.k, c.opt)
		}
	}
}

// modelSampled is the reference's _sparsify spelled out with a full scan
// per selection, and an exact top-k at the end where more than k pass.
// order is x's refOrder (or nil).
func modelSampled(x []float32, order []uint32, k int, opt SampleOptions) ([]uint32, float32) {
	n := len(x)
	if k >= n {
		return refExact(x, k), 0
	}
	exact := func() []uint32 {
		if order == nil {
			order = refOrder(x)
		}
		return refTake(order, k)
	}
	ratio := min(max(opt.SampleRatio, 0.01), 1)
	stride, num, ks := SampleParams(n, k, ratio)
	if stride == 0 {
		return exact(), 0
	}
	var smp []uint32
	for i := opt.Start % stride; i < uint64(n); i += stride {
		smp = append(smp, mag(x[i]))
	}
	if uint64(len(smp)) < num {
		panic("short sample")
	}
	slices.Sort(smp)
	thr := math.Float32frombits(smp[len(smp)-int(ks)])
	upper, lower, iters := 1.3, 0.8, 10
	if opt.UpperBound != 0 {
		upper = opt.UpperBound
	}
	if opt.LowerBound != 0 {
		lower = opt.LowerBound
	}
	if opt.MaxIters != 0 {
		iters = max(opt.MaxIters, 0)
	}
	idx := Threshold(nil, x, thr)
	for range iters {
		if len(idx) > k {
			if float64(len(idx)) > float64(k)*upper {
				if !opt.NoResample {
					return exact(), thr
				}
				thr *= float32(upper)
			} else {
				break
			}
		} else if float64(len(idx)) < lower*float64(k) {
			thr *= float32(lower)
		} else {
			break
		}
		idx = Threshold(nil, x, thr)
	}
	if len(idx) > k {
		return exact(), thr
	}
	return idx, thr
}

// TestSampledAdapt drives the adaptation both ways with data whose sampled
// positions mislead, and compares with the model.
func TestSampledAdapt(t *testing.T) {
	n := 200_003
	k := 300
	if raceEnabled {
		n, k = 50_000, 100
	}
	r := rand.New(rand.NewPCG(15, 16))
	var s Scratch
	for _, c := range []struct {
		name string
		opt  SampleOptions
		// value at the sampled positions (relative), elsewhere normal
		scale float32
	}{
		{"high", SampleOptions{}, 4},
		{"high-few-iters", SampleOptions{MaxIters: 2}, 4},
		{"low", SampleOptions{}, 0.6},
		{"low-noresample", SampleOptions{NoResample: true}, 0.6},
		{"noresample", SampleOptions{NoResample: true}, 1},
		{"noadapt", SampleOptions{MaxIters: -1}, 4},
		{"wide", SampleOptions{UpperBound: 3, LowerBound: 0.2, SampleRatio: 0.05}, 1.5},
		{"zeros", SampleOptions{}, 0},
		{"zeros-noresample", SampleOptions{NoResample: true}, 0},
	} {
		for _, start := range []uint64{0, 5, 1 << 40} {
			if raceEnabled && start != 5 {
				continue
			}
			opt := c.opt
			opt.Start = start
			stride, _, _ := SampleParams(n, k, min(max(opt.SampleRatio, 0.01), 1))
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64())
				if uint64(i)%stride == start%stride {
					x[i] *= c.scale
				}
			}
			got := Sampled(nil, x, k, &s, opt)
			want, thr := modelSampled(x, nil, k, opt)
			if s.thresh != thr || !slices.Equal(got, want) {
				t.Fatalf("%s start=%d: got %d indices at threshold %v, model %d at %v", c.name, start, len(got), s.thresh, len(want), thr)
			}
			checkSampled(t, x, k, got, thr)
			t.Logf("%s start=%d: %d of k=%d at threshold %v", c.name, start, len(got), k, thr)
		}
	}
}

// TestSampledTies: equal magnitudes everywhere (the threshold passes far
// more than the candidate cap), NaNs and Infs.
func TestSampledTies(t *testing.T) {
	var s Scratch
	for _, kind := range kinds {
		r := rand.New(rand.NewPCG(17, 18))
		n, ks := 100_000, []int{3, 100, 5000, 50_000, 99_999, 100_000}
		if raceEnabled {
			n, ks = sampledMinN+100, []int{3, 100, sampledMinN / 2}
		}
		x := make([]float32, n)
		kind.gen(r, x)
		order := refOrder(x)
		for _, k := range ks {
			for _, opt := range []SampleOptions{{}, {NoResample: true}} {
				got := Sampled(nil, x, k, &s, opt)
				want, thr := modelSampled(x, order, k, opt)
				if !slices.Equal(got, want) || mag(s.thresh) != mag(thr) {
					t.Fatalf("%s k=%d %+v: got %d indices at %v, model %d at %v", kind.name, k, opt, len(got), s.thresh, len(want), thr)
				}
			}
		}
	}
}

// TestSampleParams: values worked out by hand from the reference's
// formulas (DGCCompressor.initialize).
func TestSampleParams(t *testing.T) {
	for _, c := range []struct {
		n, k            int
		ratio           float64
		stride, num, ks uint64
	}{
		// pct=250000, cpr=2000: ceil(100/32)*32+1 = 129 -> 121 -> 113 -> 105 -> 97.
		{25_000_000, 25_000, 0.01, 97, 257731, 258},
		// pct=250000, cpr=200: 129 -> ... -> 97; ks = ceil(257731*0.01).
		{25_000_000, 250_000, 0.01, 97, 257731, 2578},
		// pct=1004, cpr=ceil(2*100352/101)=1988: ceil(100352/1988/32)=2 -> 65 -> 57 -> 49 (2048 samples).
		{100352, 101, 0.01, 49, 2048, 3},
		{100352, 2, 0.01, 0, 0, 0},              // n <= cpr: exact
		{100352, 1004, 1, 0, 0, 0},              // ratio 1: exact
		{32767, 327, 0.01, 0, 0, 0},             // below sampledMinN
		{1 << 20, 1 << 10, 0.05, 17, 61680, 61}, // pct=52429, cpr=2048: ceil(20/32)=1 -> 33 -> 25 -> 17
	} {
		stride, num, ks := SampleParams(c.n, c.k, c.ratio)
		if stride != c.stride || num != c.num || ks != c.ks {
			t.Errorf("n=%d k=%d ratio=%v: stride %d, %d samples, top %d; want %d, %d, %d", c.n, c.k, c.ratio, stride, num, ks, c.stride, c.num, c.ks)
		}
	}
}

func TestExactNilScratchAndLayers(t *testing.T) {
	// The layers of a small MLP, one Scratch.
	var s Scratch
	for _, n := range []int{10, 640, 8192, 100352} {
		x := normal(uint64(n), n)
		for _, k := range []int{max(1, n/100), max(1, n/1000)} {
			name := fmt.Sprintf("n=%d/k=%d", n, k)
			want := refExact(x, k)
			if got := Exact(nil, x, k, &s); !slices.Equal(got, want) {
				t.Fatal(name)
			}
			if got := Exact(nil, x, k, nil); !slices.Equal(got, want) {
				t.Fatal(name, "nil scratch")
			}
		}
	}
}

// TestAdapt: one step of the threshold adaptation, as the reference's
// loop takes it.
func TestAdapt(t *testing.T) {
	for _, c := range []struct {
		count      int
		noResample bool
		next       float32
		again      bool
	}{
		{100, false, 2, false}, // within bounds
		{79, false, 2 * float32(0.8), true},
		{200, false, 2, false}, // too many: the exact top k of them
		{200, true, 2 * float32(1.3), true},
		{130, true, 2, false}, // at the upper bound
		{80, false, 2, false}, // at the lower bound
	} {
		next, again := Adapt(2, c.count, 100, 1.3, 0.8, c.noResample)
		if next != c.next || again != c.again {
			t.Errorf("Adapt(2, %d, 100, 1.3, 0.8, %t) = %v, %t; want %v, %t", c.count, c.noResample, next, again, c.next, c.again)
		}
	}
}
