package gradient

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/blas/blas32"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/codectest"
	_ "github.com/tensorpress/tensorpress/lossless"
	_ "github.com/tensorpress/tensorpress/sparse"
)

func normal(n int, seed uint64, sd float64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * sd)
	}
	return v
}

func decodeAll(t *testing.T, frame []byte) []float32 {
	t.Helper()
	f, n, err := new(codec.Decoder).DecodeFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(frame) || len(f.Tensors) != 1 {
		t.Fatalf("frame of %d bytes decoded %d, %d tensors", len(frame), n, len(f.Tensors))
	}
	v, err := codec.View[float32](f.Tensors[0])
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// decodeAdd adds frame into zeros through a Receiver that adds what the
// frame holds, NaNs and infinities too, to check the arithmetic of every
// value (a Receiver refuses those by default: TestReceiverRefusesNonFinite).
func decodeAdd(t *testing.T, frame []byte, n int) []float32 {
	t.Helper()
	acc := make([]float32, n)
	recv, err := NewReceiver(codec.WithFiniteAdd(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recv.Add(frame, 1, func(string, []int64) ([]float32, error) { return acc, nil }); err != nil {
		t.Fatal(err)
	}
	return acc
}

// topRef is the reference top-k: positions of the k largest magnitudes,
// ties to the lower index, increasing.
func topRef(x []float32, k int) []uint32 {
	idx := make([]uint32, len(x))
	for i := range idx {
		idx[i] = uint32(i)
	}
	mag := func(i uint32) uint32 { return math.Float32bits(x[i]) &^ (1 << 31) }
	slices.SortStableFunc(idx, func(a, b uint32) int {
		if ma, mb := mag(a), mag(b); ma != mb {
			if ma > mb {
				return -1
			}
			return 1
		}
		return 0
	})
	sel := idx[:k]
	slices.Sort(sel)
	return sel
}

func nonZeros(v []float32) []uint32 {
	var p []uint32
	for i, x := range v {
		if x != 0 {
			p = append(p, uint32(i))
		}
	}
	return p
}

func TestSelectionStages(t *testing.T) {
	enc, _ := codec.NewEncoder()
	for _, n := range []int{1, 10, 640, 8192, 100352} {
		x := normal(n, uint64(n), 1)
		tt := codec.FromFloat32("g", x, int64(n))
		for _, rs := range []string{
			"topk(0.01) | idx:delta,bitpack | val:shuffle | *:huff0",
			"topk(k=7)",
			"thresh(1.5) | idx:delta,varint",
			"dgc(0.001) | idx:delta,bitpack",
			"randk(0.05,seed=9) | val:shuffle | *:huff0",
		} {
			r := codec.MustParseRecipe(rs)
			frame, err := enc.AppendTensor(nil, tt, r)
			if err != nil {
				t.Fatalf("n=%d %q: %v", n, rs, err)
			}
			got := decodeAll(t, frame)
			if add := decodeAdd(t, frame, n); !slices.Equal(add, got) {
				t.Fatalf("n=%d %q: DecodeAdd differs from Decode", n, rs)
			}
			sel := nonZeros(got)
			for _, p := range sel {
				if got[p] != x[p] {
					t.Fatalf("n=%d %q: element %d decoded %v, want %v", n, rs, p, got[p], x[p])
				}
			}
			op := r.Steps[0].Ops[0]
			switch o := op.(type) {
			case selectOp:
				switch o.stage {
				case TopKID:
					k := o.count
					if k == 0 {
						k = K(o.ratio, n)
					}
					if want := topRef(x, min(k, n)); !slices.Equal(sel, want) {
						t.Fatalf("n=%d %q: kept %v, want %v", n, rs, sel, want)
					}
				case ThresholdID:
					var want []uint32
					for i, v := range x {
						if math.Abs(float64(v)) >= float64(o.thresh) {
							want = append(want, uint32(i))
						}
					}
					if !slices.Equal(sel, want) {
						t.Fatalf("n=%d %q: kept %d elements, want %d", n, rs, len(sel), len(want))
					}
				case DGCID:
					if k := K(o.ratio, n); len(sel) > k || len(sel) < k*8/10 {
						t.Fatalf("n=%d %q: kept %d elements, want about %d", n, rs, len(sel), k)
					}
				}
			case randkOp:
				want := RandKPositions(nil, o.ratio, o.seed, n, 0)
				if len(want) != K(o.ratio, n) {
					t.Fatalf("randk positions: %d, want %d", len(want), K(o.ratio, n))
				}
				if !slices.Equal(sel, want) {
					t.Fatalf("n=%d %q: kept %v, want %v", n, rs, sel, want)
				}
			}
		}
	}
}

func TestRandKChunks(t *testing.T) {
	x := normal(10000, 3, 1)
	got := codectest.Stream(t, codec.FromFloat32("g", x, 10000), codec.WithRecipe(codec.MustParseRecipe("randk(0.1,seed=4)")), codec.WithChunkSize(4000))
	v, _ := codec.View[float32](got)
	kept := 0
	for i := range v {
		if v[i] != 0 {
			kept++
			if v[i] != x[i] {
				t.Fatalf("element %d: %v, want %v", i, v[i], x[i])
			}
		}
	}
	if kept != 3*100+100+0 && (kept < 990 || kept > 1010) {
		t.Fatalf("kept %d of 10000 at 10%%", kept)
	}
}

func TestPowerSGDStage(t *testing.T) {
	// A rank-2 matrix comes back almost exactly at rank 2.
	rows, cols := 50, 30
	a, b := normal(rows*2, 1, 1), normal(cols*2, 2, 1)
	m := make([]float32, rows*cols)
	for i := range rows {
		for j := range cols {
			m[i*cols+j] = a[2*i]*b[2*j] + a[2*i+1]*b[2*j+1]
		}
	}
	enc, _ := codec.NewEncoder()
	frame, err := enc.AppendTensor(nil, codec.FromFloat32("w", m, int64(rows), int64(cols)), codec.MustParseRecipe("powersgd(2)"))
	if err != nil {
		t.Fatal(err)
	}
	got := decodeAll(t, frame)
	if e := relErr(got, m); e > 1e-5 {
		t.Fatalf("rank-2 matrix at rank 2: relative error %g", e)
	}
	if add := decodeAdd(t, frame, rows*cols); relErr(add, got) > 1e-6 {
		t.Fatal("DecodeAdd differs from Decode")
	}
	if len(frame) > 4*(rows+cols)*2+200 {
		t.Fatalf("frame of %d bytes", len(frame))
	}
}

func relErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

// Every compressor with error feedback conserves the gradient: the sum of
// what the receiver decoded plus the final residual equals the sum of the
// gradients.
func TestFeedbackConserves(t *testing.T) {
	for _, spec := range []string{
		"topk(0.01)", "randk(0.02)", "thresh(2)", "dgc(0.01,momentum=0)", "powersgd(2)",
		"efsign", "qsgd(15)", "int8(64)", "topk(0.05) | idx:delta,bitpack | val:fp16 | *:huff0",
	} {
		checkConserves(t, spec, []int64{40, 50}, 20, 0)
	}
}

// checkConserves sends steps N(0, 0.1) gradients of the given shape
// (seeds seed, seed+1, ...) through spec and checks that the sum of the
// gradients equals the sum decoded plus the final residual.
func checkConserves(t *testing.T, spec string, shape []int64, steps int, seed uint64) {
	t.Helper()
	s, err := Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender()
	if err != nil {
		t.Fatal(err)
	}
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	sumG, sumD := make([]float64, n), make([]float64, n)
	for step := range steps {
		g := normal(n, uint64(step)+seed, 0.1)
		for i, v := range g {
			sumG[i] += float64(v)
		}
		frame, err := snd.Append(nil, codec.FromFloat32("w", g, shape...))
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		for i, v := range decodeAdd(t, frame, n) {
			sumD[i] += float64(v)
		}
		snd.Commit()
	}
	res := snd.Memory().Get("w").Residual()
	var worst float64
	for i := range sumG {
		worst = max(worst, math.Abs(sumG[i]-sumD[i]-float64(res[i])))
	}
	if worst > 1e-4 {
		t.Errorf("%s: sum of gradients - decoded - residual reaches %g", spec, worst)
	}
}

func TestAbortKeepsEverything(t *testing.T) {
	snd, err := NewSender(TopK{Ratio: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	g1, g2 := normal(100, 1, 1), normal(100, 2, 1)
	if _, err := snd.Append(nil, codec.FromFloat32("w", g1, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := snd.Append(nil, codec.FromFloat32("w", g1, 100)); err == nil {
		t.Fatal("second Append before Commit accepted")
	}
	snd.Abort()
	if !slices.Equal(snd.Memory().Get("w").Residual(), g1) {
		t.Fatal("Abort did not keep the gradient as residual")
	}
	frame, err := snd.Append(nil, codec.FromFloat32("w", g2, 100))
	if err != nil {
		t.Fatal(err)
	}
	snd.Commit()
	got := decodeAdd(t, frame, 100)
	res := snd.Memory().Get("w").Residual()
	for i := range got {
		if d := g1[i] + g2[i] - got[i] - res[i]; math.Abs(float64(d)) > 1e-6 {
			t.Fatalf("element %d: lost %g", i, d)
		}
	}
	// Without feedback too.
	nf, _ := NewSender(TopK{Ratio: 0.1}, WithoutFeedback())
	nf.Append(nil, codec.FromFloat32("w", g1, 100))
	nf.Abort()
	if !slices.Equal(nf.Memory().Get("w").Residual(), g1) {
		t.Fatal("Abort without feedback dropped the gradient")
	}
	nf.Append(nil, codec.FromFloat32("w", g2, 100))
	nf.Commit()
	for _, r := range nf.Memory().Get("w").Residual() {
		if r != 0 {
			t.Fatal("residual without feedback after Commit")
		}
	}
}

// A restored Memory carries on exactly where the saved one was.
func TestMemoryRestore(t *testing.T) {
	for _, spec := range []string{"dgc(0.01)", "powersgd(3)", "topk(0.02)", "randk(0.1)"} {
		s, _ := Parse(spec)
		a, _ := s.NewSender()
		step := func(snd *Sender, i int) []byte {
			var out []byte
			for _, name := range []string{"w1", "w2"} {
				g := normal(600, uint64(i)*7+uint64(len(name)), 1)
				f, err := snd.Append(nil, codec.FromFloat32(name, g, 20, 30))
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, f...)
			}
			snd.Commit()
			return out
		}
		for i := range 3 {
			step(a, i)
		}
		img, err := a.Memory().MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		m := NewMemory()
		if err := m.UnmarshalBinary(img); err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		b, _ := s.NewSender(WithMemory(m))
		for i := 3; i < 6; i++ {
			if fa, fb := step(a, i), step(b, i); !bytes.Equal(fa, fb) {
				t.Fatalf("%s: step %d differs after restore", spec, i)
			}
		}
		img2, _ := b.Memory().MarshalBinary()
		if img3, _ := a.Memory().MarshalBinary(); !bytes.Equal(img2, img3) {
			t.Fatalf("%s: memories differ", spec)
		}
	}
}

func TestMemoryImageErrors(t *testing.T) {
	snd, _ := NewSender(NewDGC(0.1))
	snd.Append(nil, codec.FromFloat32("w", normal(64, 1, 1), 8, 8))
	snd.Commit()
	img, _ := snd.Memory().MarshalBinary()
	m := NewMemory()
	for i := range img {
		bad := bytes.Clone(img)
		bad[i] ^= 0x40
		if err := m.UnmarshalBinary(bad); !errors.Is(err, ErrMemory) {
			t.Fatalf("flipped byte %d: %v", i, err)
		}
	}
	for i := range img {
		if err := m.UnmarshalBinary(img[:i]); !errors.Is(err, ErrMemory) {
			t.Fatalf("cut at %d: %v", i, err)
		}
	}
	if len(m.Names()) != 0 {
		t.Fatal("a failed restore changed the memory")
	}
}

func TestShapeChecks(t *testing.T) {
	snd, _ := NewSender(TopK{Ratio: 0.1})
	frame, err := snd.Append(nil, codec.FromFloat32("w", normal(100, 1, 1), 10, 10))
	if err != nil {
		t.Fatal(err)
	}
	snd.Commit()
	if _, err := snd.Append(nil, codec.FromFloat32("w", normal(100, 1, 1), 100)); err == nil {
		t.Fatal("a new shape for a known tensor was accepted")
	}
	r, err := NewReceiver()
	if err != nil {
		t.Fatal(err)
	}
	acc := make([]float32, 99)
	if _, err := r.Add(frame, 1, func(string, []int64) ([]float32, error) { return acc, nil }); err == nil {
		t.Fatal("an accumulator of the wrong size was accepted")
	}
	// A damaged position stream is an error (the CRC is recomputed so
	// that the stage itself must notice).
	idx := mustFrame(t, "topk(k=3)", []float32{5, 0, 0, 7, 0, 9, 0, 0})
	for i := range idx {
		bad := bytes.Clone(idx)
		bad[i] ^= 0xff
		a := make([]float32, 8)
		r.Add(bad, 1, func(string, []int64) ([]float32, error) { return a, nil }) // must not panic
	}
}

func mustFrame(t *testing.T, recipe string, x []float32) []byte {
	t.Helper()
	enc, _ := codec.NewEncoder()
	f, err := enc.AppendTensor(nil, codec.FromFloat32("g", x, int64(len(x))), codec.MustParseRecipe(recipe))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestSelectDecodeRefusesBadPositions(t *testing.T) {
	o := selectOp{stage: TopKID, ratio: 0.5}
	in := codec.SegInfo{Name: "data", Elem: codec.F32, Len: 16}
	seg := func(v ...uint32) codec.Segment {
		b := make([]byte, 0, 4*len(v))
		for _, x := range v {
			b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
		}
		return codec.Segment{Data: b}
	}
	ctx := &codec.Ctx{Arena: &codec.Arena{}}
	for _, pos := range [][]uint32{{1, 1}, {2, 1}, {0, 4}, {9}} {
		parts := []codec.Segment{seg(pos...), seg(make([]uint32, len(pos))...)}
		if _, err := o.Decode(ctx, make([]byte, 0, 16), parts, in); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("positions %v: %v", pos, err)
		}
		acc := make([]float32, 4)
		if err := o.DecodeAdd(ctx, acc, 1, parts, in); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("positions %v: DecodeAdd %v", pos, err)
		}
	}
}

func TestParse(t *testing.T) {
	for _, s := range []string{
		"none", "topk(0.01)", "topk(0.01,warmup=8)", "randk(0.01,seed=3)", "thresh(0.5)", "dgc(0.001)",
		"dgc(0.001,momentum=0.5,nesterov=on,clip=1,warmup=2,sample=0.05)", "powersgd(4)", "powersgd(2,min=3,seed=1)", "powersgd(4,iters=2)",
		"powersgd(4,warmup=8)", "powersgd(4,iters=2,warmup=8,from=32)", "sign", "qsgd(127)", "int8(4096)",
	} {
		c, err := New(s)
		if err != nil {
			t.Fatalf("New(%q): %v", s, err)
		}
		c2, err := New(c.String())
		if err != nil || c2.String() != c.String() {
			t.Fatalf("New(%q).String() = %q does not parse back (%v)", s, c.String(), err)
		}
	}
	sp, err := Parse("topk(0.01, ef=off) | idx:delta,varint | *:zstd(1)")
	if err != nil || sp.Feedback || sp.Tail == nil {
		t.Fatalf("Parse with ef and tail: %+v %v", sp, err)
	}
	for _, s := range []string{"", "topk", "topk(2)", "topk(0.01", "topk(x=1)", "dgc(0.1,momentum=2)", "nosuch(1)",
		"zstd(1)", "powersgd(0)", "thresh(-1)", "topk(0.1,ef=maybe)", "shuffle", "topk(0.01,warmup=-1)",
		"topk(0.01,warmup=x)", "topk(0.01,warmup=1,warmup=2)", "powersgd(4,warmup=2,from=2)", "powersgd(4,from=16)",
		"powersgd(4,warmup=-1)", "powersgd(4,warmup=2,from=2000)"} {
		if _, err := Parse(s); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("Parse(%q): %v, want ErrRecipe", s, err)
		}
	}
}

// TestPowerSGDWarmup: the rank halves in equal stages from From to Rank
// over the warm-up; at each smaller rank the larger rank's first columns
// of q start the power iteration, so the factors keep the directions
// found (the frame after a fall is better than a first step's).
func TestPowerSGDWarmup(t *testing.T) {
	c := &PowerSGD{Rank: 4, MinRate: 1, Warmup: 8}
	for _, tc := range []struct {
		e    float64
		want int
	}{{0, 16}, {3.9, 16}, {4, 8}, {7.9, 8}, {8, 4}, {100, 4}, {-1, 16}} {
		if got := c.RankAt(tc.e); got != tc.want {
			t.Errorf("epoch %v: rank %d, want %d", tc.e, got, tc.want)
		}
	}
	if got := (&PowerSGD{Rank: 4, Warmup: 3, From: 12}).RankAt(1.5); got != 6 {
		t.Errorf("from 12, half-way: rank %d, want 6", got)
	}
	// A matrix of rank 4 plus noise: after the warm-up at rank 16, rank
	// 4 warm-started from q's first columns is closer than a cold rank 4.
	const rows, cols = 64, 96
	a, b := normal(rows*4, 3, 1), normal(cols*4, 4, 1)
	g := normal(rows*cols, 5, 0.01)
	for i := range rows {
		for j := range cols {
			for k := range 4 {
				g[i*cols+j] += a[i*4+k] * b[j*4+k] * float32(4-k)
			}
		}
	}
	warm, _ := NewSender(c, WithoutFeedback())
	warm.SetEpoch(0)
	if _, err := warm.Append(nil, codec.FromFloat32("w", g, rows, cols)); err != nil {
		t.Fatal(err)
	}
	warm.Commit()
	warm.SetEpoch(8)
	f, err := warm.Append(nil, codec.FromFloat32("w", g, rows, cols))
	if err != nil {
		t.Fatal(err)
	}
	cold, _ := NewSender(&PowerSGD{Rank: 4, MinRate: 1}, WithoutFeedback())
	f0, err := cold.Append(nil, codec.FromFloat32("w", g, rows, cols))
	if err != nil {
		t.Fatal(err)
	}
	errOf := func(frame []byte) float64 {
		d := decodeAdd(t, frame, rows*cols)
		var e float64
		for i := range d {
			e += float64(d[i]-g[i]) * float64(d[i]-g[i])
		}
		return e
	}
	if len(f) != len(f0) {
		t.Fatalf("rank 4 after the warm-up: %d bytes, a cold rank 4: %d", len(f), len(f0))
	}
	ew, ec := errOf(f), errOf(f0)
	t.Logf("rank 4 after the warm-up: squared error %.3g warm-started, %.3g cold", ew, ec)
	if !(ew < ec) {
		t.Errorf("rank 4 warm-started from rank 16: squared error %v, cold: %v", ew, ec)
	}
}

func TestDGCWarmup(t *testing.T) {
	d := &DGC{Ratio: 0.001, Warmup: 4}
	want := []float32{0.25, 0.0625, 0.015625, 0.00390625, 0.001}
	for e := range 5 {
		if got := d.Density(float64(e)); got != want[e] {
			t.Errorf("epoch %d: density %v, want %v", e, got, want[e])
		}
	}
}

// TestTopKWarmup: TopK's warm-up follows DGC's schedule and the Sender's
// epoch; the selection stays exact (the k largest magnitudes).
func TestTopKWarmup(t *testing.T) {
	c := TopK{Ratio: 0.001, Warmup: 4}
	want := []float32{0.25, 0.0625, 0.015625, 0.00390625, 0.001}
	for e := range 5 {
		if got := c.Density(float64(e)); got != want[e] {
			t.Errorf("epoch %d: density %v, want %v", e, got, want[e])
		}
	}
	if d, ok := AtDensity(c, 0.01); !ok || d != (TopK{Ratio: 0.01, Warmup: 4}) {
		t.Errorf("AtDensity kept %v, %v; want the warm-up kept", d, ok)
	}
	const n = 4096
	snd, err := NewSender(TopK{Ratio: 0.01, Warmup: 2}, WithoutFeedback())
	if err != nil {
		t.Fatal(err)
	}
	g := normal(n, 7, 1)
	for _, tc := range []struct {
		epoch float64
		k     int
	}{{0, K(0.25, n)}, {0.5, K(0.0625, n)}, {1, K(0.015625, n)}, {2, K(0.01, n)}} {
		snd.SetEpoch(tc.epoch)
		frame, err := snd.Append(nil, codec.FromFloat32("w", g, n))
		if err != nil {
			t.Fatal(err)
		}
		snd.Commit()
		got := decodeAdd(t, frame, n)
		var kept int
		minKept := float32(math.Inf(1))
		for _, v := range got {
			if v != 0 {
				kept++
				minKept = min(minKept, float32(math.Abs(float64(v))))
			}
		}
		if kept != tc.k {
			t.Errorf("epoch %v: %d elements sent, want %d", tc.epoch, kept, tc.k)
		}
		var above int
		for _, v := range g {
			if float32(math.Abs(float64(v))) > minKept {
				above++
			}
		}
		if above >= tc.k {
			t.Errorf("epoch %v: %d elements larger than the smallest sent: not the top %d", tc.epoch, above, tc.k)
		}
	}
}

func TestDenseVectors(t *testing.T) {
	s, err := Parse("topk(0.01,dense1d=on)")
	if err != nil || !s.Dense1D {
		t.Fatalf("Parse: %+v %v", s, err)
	}
	snd, _ := s.NewSender()
	b := normal(128, 1, 1)
	frame, err := snd.Append(nil, codec.FromFloat32("fc1.bias", b, 128))
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeAdd(t, frame, 128); !slices.Equal(got, b) {
		t.Fatal("a bias under dense1d=on did not arrive exactly")
	}
	w := normal(1000, 2, 1)
	frame, err = snd.Append(nil, codec.FromFloat32("fc1.weight", w, 10, 100))
	if err != nil {
		t.Fatal(err)
	}
	if nz := len(nonZeros(decodeAdd(t, frame, 1000))); nz != 10 {
		t.Fatalf("matrix: %d elements sent, want 10", nz)
	}
	if _, err := Parse("topk(0.01,dense1d=on,dense1d=off)"); err == nil {
		t.Fatal("dense1d twice accepted")
	}
}

func TestAtDensity(t *testing.T) {
	for _, c := range []struct {
		in   Compressor
		want string
		ok   bool
	}{
		{TopK{Ratio: 0.01}, "topk(0.003)", true},
		{RandK{Ratio: 0.01, Seed: 5}, "randk(0.003,seed=5)", true},
		{NewDGC(0.001), "dgc(0.003)", true},
		{Threshold{T: 0.1}, "", false},
	} {
		got, ok := AtDensity(c.in, 0.003)
		if ok != c.ok || ok && got.String() != c.want {
			t.Errorf("AtDensity(%v, 0.003) = %v, %v; want %s, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	if _, ok := AtDensity(TopK{Ratio: 0.01}, 0); ok {
		t.Error("density 0 accepted")
	}
	// A DGC copy leaves the original alone.
	d := NewDGC(0.001)
	AtDensity(d, 0.5)
	if d.Ratio != 0.001 {
		t.Errorf("original DGC changed: %v", d)
	}
}

// K is part of the wire format (randk's decoder computes it): these
// counts, large products included, must not change.
func TestKFormat(t *testing.T) {
	for _, c := range []struct {
		r    float32
		n, k int
	}{
		{0.1, 100, 10}, {0.3, 1000, 300}, {0.001, 1, 1}, {0.5, 0, 0}, {0.5, 3, 2},
		{1, 1, 1}, {1, 999_999, 999_999}, {1, 1_000_000, 999_999}, {1, 2_000_000, 1_999_998}, {0.5, 4_000_000, 1_999_998},
		{0.1, 1_000_000, 100_000}, {0.3, 100_000_000, 29_999_972},
	} {
		if got := K(c.r, c.n); got != c.k {
			t.Errorf("K(%v, %d) = %d, want %d", c.r, c.n, got, c.k)
		}
	}
}

// TestReceiverSlowLimit: a Receiver decodes at most DefaultSlowDecoded
// bytes of an update through the stages of some MB/s (floatcm) unless its
// limits say more: an update over it is refused with ErrLimit before any
// of it is added.
func TestReceiverSlowLimit(t *testing.T) {
	x := normal(DefaultSlowDecoded/4+1024, 3, 0.02)
	frame := mustFrame(t, "floatcm", x)
	acc := make([]float32, len(x))
	into := func(string, []int64) ([]float32, error) { return acc, nil }
	r, err := NewReceiver()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Add(frame, 1, into); !errors.Is(err, codec.ErrLimit) {
		t.Fatalf("a floatcm update of %d bytes, default limits: %v", 4*len(x), err)
	}
	if slices.ContainsFunc(acc, func(v float32) bool { return v != 0 }) {
		t.Fatal("the refused update was added")
	}
	// Limits that do not set it keep the Receiver's bound.
	r, err = NewReceiver(codec.WithLimits(codec.Limits{MaxTensors: 8}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Add(frame, 1, into); !errors.Is(err, codec.ErrLimit) {
		t.Fatalf("limits without MaxSlowDecoded: %v", err)
	}
	r, err = NewReceiver(codec.WithLimits(codec.Limits{MaxSlowDecoded: 2 * DefaultSlowDecoded}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Add(frame, 1, into); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(acc, x) {
		t.Error("the update added differs")
	}
}

// TestReceiverRefusesNonFinite: an update that would add a NaN or an
// infinity, through every way a Receiver adds (the sparse selections,
// RandK, Bloom, PowerSGD's factors, dense frames raw or coded), or whose
// weight takes a finite value past float32's range, is refused with
// ErrNonFinite and leaves the accumulator as it was; one that adds only
// finite values is added. What an update would add is found by adding it
// into zeros with the check off.
func TestReceiverRefusesNonFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		name   string
		recipe string
		shape  []int64
	}{
		{"topk", "topk(0.1)", []int64{400}},
		{"dgc", "dgc(0.1)", []int64{400}},
		{"threshold", "thresh(0.5)", []int64{400}},
		{"randk", "randk(1,seed=3)", []int64{400}},
		{"bloom", "bloom(0.1)", []int64{400}},
		{"powersgd", "powersgd(2)", []int64{20, 20}},
		{"raw", "", []int64{400}},
		{"huff0", "*:huff0", []int64{400}},
	} {
		refused := 0
		for _, bad := range []struct {
			name   string
			value  float32
			weight float32
		}{{"finite", 2, 1}, {"nan", nan, 1}, {"-inf", -inf, 1}, {"large", 3e38, 4}, {"nan weight", 1, nan}} {
			x := normal(400, 7, 1)
			x[0] = bad.value
			frame := mustShapedFrame(t, c.recipe, x, c.shape)
			plain := make([]float32, 400)
			loose, _ := NewReceiver(codec.WithFiniteAdd(false))
			if _, err := loose.Add(frame, bad.weight, func(string, []int64) ([]float32, error) { return plain, nil }); err != nil {
				t.Fatal(err)
			}
			want := slices.ContainsFunc(plain, func(v float32) bool { return v-v != 0 })
			acc := normal(400, 8, 1)
			before := slices.Clone(acc)
			r, err := NewReceiver()
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.Add(frame, bad.weight, func(string, []int64) ([]float32, error) { return acc, nil })
			switch {
			case want && !errors.Is(err, codec.ErrNonFinite):
				t.Errorf("%s, %s: adds a non-finite value; Add: %v", c.name, bad.name, err)
			case want && !slices.Equal(acc, before):
				t.Errorf("%s, %s: the refused update changed the accumulator", c.name, bad.name)
			case !want && err != nil:
				t.Errorf("%s, %s: adds finite values; Add: %v", c.name, bad.name, err)
			}
			if want {
				refused++
			}
		}
		if refused < 3 {
			t.Errorf("%s: %d of the updates add a non-finite value, want at least 3", c.name, refused)
		}
	}
}

func mustShapedFrame(t *testing.T, recipe string, x []float32, shape []int64) []byte {
	t.Helper()
	enc, _ := codec.NewEncoder()
	var r *codec.Recipe
	if recipe != "" {
		r = codec.MustParseRecipe(recipe)
	}
	f, err := enc.AppendTensor(nil, codec.FromFloat32("g", x, shape...), r)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPowerSGDFiniteBound: factors whose products pass float32's range in
// the dot product are refused even when alpha scales the result back
// under it (the dot product is summed before alpha); honest factors pass.
func TestPowerSGDFiniteBound(t *testing.T) {
	big := blas32.General{Rows: 1, Cols: 2, Stride: 2, Data: []float32{1.5e19, 1.5e19}}
	if err := finiteProduct(0.5, big, big); !errors.Is(err, codec.ErrNonFinite) {
		t.Errorf("|p|=|q|=1.5e19 at rank 2, alpha 0.5: %v", err)
	}
	one := blas32.General{Rows: 1, Cols: 1, Stride: 1, Data: []float32{1e20}}
	if err := finiteProduct(1e-10, one, one); !errors.Is(err, codec.ErrNonFinite) {
		t.Errorf("|p|=|q|=1e20 at rank 1, alpha 1e-10: %v", err)
	}
	ok := blas32.General{Rows: 2, Cols: 2, Stride: 2, Data: []float32{0.6, -0.8, 0.8, 0.6}}
	if err := finiteProduct(1e30, ok, ok); err != nil {
		t.Errorf("unit factors, alpha 1e30: %v", err)
	}
}
