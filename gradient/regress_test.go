package gradient

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// A DGC built as a struct literal leaves Sample at 0, documented as the
// default 0.01; it used to put sample ratio 0 into the frame, which every
// decoder (the Sender's own first) refuses, so every Append failed.
func TestDGCZeroSampleIsDefault(t *testing.T) {
	g := normal(4000, 1, 1)
	lit, _ := NewSender(&DGC{Ratio: 0.01, Momentum: 0.9})
	a, err := lit.Append(nil, codec.FromFloat32("w", g, 40, 100))
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := NewSender(NewDGC(0.01))
	b, err := ref.Append(nil, codec.FromFloat32("w", g, 40, 100))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("DGC{Sample: 0} codes differently from the default sample ratio")
	}
	d := &DGC{Ratio: 0.01, Momentum: 0.9}
	if c, err := New(d.String()); err != nil || c.String() != d.String() {
		t.Fatalf("%q does not parse back: %v", d.String(), err)
	}
}

// Compressors built as struct literals with values their stages refuse
// are errors (ErrRecipe) before anything is encoded, not a panic
// (PowerSGD{} panicked in BLAS) or a frame the Sender cannot read back;
// the tensor's state stays usable.
func TestCompressorConfigErrors(t *testing.T) {
	for _, c := range []Compressor{
		TopK{}, TopK{Ratio: 2}, TopK{Ratio: float32(math.NaN())}, RandK{}, RandK{Ratio: -1},
		Threshold{T: -1}, Threshold{T: float32(math.Inf(1))}, Threshold{T: float32(math.NaN())},
		&PowerSGD{}, &PowerSGD{Rank: maxRank + 1}, &PowerSGD{Rank: 2, MinRate: math.NaN()},
		&DGC{Ratio: 0}, &DGC{Ratio: 0.1, Sample: 2}, &DGC{Ratio: 0.1, Momentum: 0.9, Sample: -1},
	} {
		m := NewMemory()
		snd, _ := NewSender(c, WithMemory(m))
		g := normal(2000, 3, 1)
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%#v: panic %v", c, r)
				}
			}()
			out, err := snd.Append([]byte("x"), codec.FromFloat32("w", g, 40, 50))
			if !errors.Is(err, codec.ErrRecipe) || string(out) != "x" {
				t.Fatalf("%#v: %q, %v; want ErrRecipe and dst unchanged", c, out, err)
			}
		}()
		snd.Commit()
		st := m.Get("w")
		if st.Residual() != nil || st.Step() != 0 || len(st.priv) != 0 {
			t.Fatalf("%#v: a failed Append changed the state", c)
		}
		ok, _ := NewSender(TopK{Ratio: 0.1}, WithMemory(m))
		if _, err := ok.Append(nil, codec.FromFloat32("w", g, 40, 50)); err != nil {
			t.Fatalf("%#v: the tensor is stuck after a failed Append: %v", c, err)
		}
	}
}

// PowerSGD sends empty matrices dense instead of failing on them.
func TestPowerSGDEmptyMatrix(t *testing.T) {
	for _, shape := range [][]int64{{0, 10}, {10, 0}, {0, 0, 3}} {
		snd, _ := NewSender(&PowerSGD{Rank: 2, MinRate: 2})
		f, err := snd.Append(nil, codec.FromFloat32("w", nil, shape...))
		if err != nil {
			t.Fatalf("%v: %v", shape, err)
		}
		snd.Commit()
		if got := decodeAll(t, f); len(got) != 0 {
			t.Fatalf("%v: decoded %d elements", shape, len(got))
		}
	}
}

// A committed q whose length does not match the tensor at this rank (a
// Memory shared with a PowerSGD of another rank, or restored from such an
// image) is no warm start: PowerSGD draws q afresh, as on a first step.
// It used to start from a zero q, whose power step sends only the first
// r rows of the matrix.
func TestPowerSGDReseedsMismatchedQ(t *testing.T) {
	g := normal(2000, 1, 1)
	m := NewMemory()
	r2, _ := NewSender(&PowerSGD{Rank: 2, MinRate: 1}, WithMemory(m))
	if _, err := r2.Append(nil, codec.FromFloat32("w", make([]float32, 2000), 40, 50)); err != nil {
		t.Fatal(err)
	}
	r2.Commit() // residual 0, q of 50×2
	if q := m.Get("w").Committed("q"); len(q) != 100 {
		t.Fatalf("q of %d", len(q))
	}
	img, _ := m.MarshalBinary()
	restored := NewMemory()
	if err := restored.UnmarshalBinary(img); err != nil {
		t.Fatal(err)
	}
	fresh, _ := NewSender(&PowerSGD{Rank: 4, MinRate: 1})
	want, err := fresh.Append(nil, codec.FromFloat32("w", g, 40, 50))
	if err != nil {
		t.Fatal(err)
	}
	for what, mem := range map[string]*Memory{"shared": m, "restored": restored} {
		r4, _ := NewSender(&PowerSGD{Rank: 4, MinRate: 1}, WithMemory(mem))
		got, err := r4.Append(nil, codec.FromFloat32("w", g, 40, 50))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			d := decodeAdd(t, got, 2000)
			t.Fatalf("%s memory: rank 4 after rank 2 differs from a first step (rows 4.. decode to zero: %v)",
				what, !slices.ContainsFunc(d[4*50:], func(v float32) bool { return v != 0 }))
		}
		r4.Commit()
		if q := mem.Get("w").Committed("q"); len(q) != 200 {
			t.Fatalf("%s: q of %d after commit", what, len(q))
		}
	}
}

// A memory image whose private buffers do not fit the tensor (wrong
// lengths, NaNs) restores, and every compressor then runs on it without
// panicking and with finite frames.
func TestRestoredMismatchedBuffers(t *testing.T) {
	var b []byte
	b = append(b, "TPEF\x01\x01"...)
	b = appendStr(b, "w")
	b = append(b, 2, 6, 8) // shape [6, 8]
	b = append(b, 3)       // step
	b = appendFloats(b, normal(48, 2, 1))
	b = append(b, 2)
	b = appendStr(b, "q")
	b = appendFloats(b, []float32{float32(math.NaN()), 1, 2})
	b = appendStr(b, "u")
	b = appendFloats(b, make([]float32, 5))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	m := NewMemory()
	if err := m.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Compressor{&PowerSGD{Rank: 2, MinRate: 0}, NewDGC(0.1), TopK{Ratio: 0.1}, &PowerSGD{Rank: 3, MinRate: 0}} {
		snd, _ := NewSender(c, WithMemory(m))
		f, err := snd.Append(nil, codec.FromFloat32("w", normal(48, 4, 1), 6, 8))
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		for i, v := range decodeAdd(t, f, 48) {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%v: element %d decodes to %v", c, i, v)
			}
		}
		snd.Commit()
	}
}

// The Sender reads back its own frames with limits that accept whatever
// its encoder writes; with a default decoder's 256 MiB it refused every
// tensor above 64M elements.
func TestSenderLargeTensor(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 1 GB")
	}
	n := 256<<20/4 + 1024
	g := make([]float32, n)
	for i := 0; i < n; i += 4096 {
		g[i] = float32(i)
	}
	snd, _ := NewSender(TopK{Ratio: 0.0001})
	f, err := snd.Append(nil, codec.FromFloat32("w", g, int64(n)))
	if err != nil {
		t.Fatal(err)
	}
	snd.Commit()
	if len(f) > 8*n/1000 {
		t.Fatalf("frame of %d bytes", len(f))
	}
}

// A gradient holding NaNs and infinities: an update whose frame would
// carry one fails with ErrNonFinite (receivers refuse such frames) and
// changes no state: the residual is the one before, the tensor may be
// appended again. One whose frame carries none drops them from the
// residual (kept, the NaN made every later update of its element NaN, and
// now would make every later frame that takes it refused). Either way the
// finite gradients after it go through, and an aborted update whose
// compensated gradient held them leaves a finite residual too.
func TestNonFiniteResidual(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	finite := func(v []float32) bool { return !slices.ContainsFunc(v, func(x float32) bool { return x-x != 0 }) }
	refused, sent := 0, 0
	for _, c := range []Compressor{TopK{Ratio: 0.1}, NewDGC(0.1), Threshold{T: 1}, RandK{Ratio: 0.1, Seed: 1}, &PowerSGD{Rank: 2, MinRate: 1}} {
		snd, _ := NewSender(c)
		if _, err := snd.Append(nil, codec.FromFloat32("w", normal(100, 1, 0.1), 10, 10)); err != nil {
			t.Fatal(err)
		}
		snd.Commit()
		before := slices.Clone(snd.Memory().Get("w").Residual())
		g := normal(100, 2, 0.1)
		g[5], g[17], g[60] = inf, nan, -inf
		f, err := snd.Append(nil, codec.FromFloat32("w", g, 10, 10))
		switch {
		case errors.Is(err, codec.ErrNonFinite):
			refused++
			if len(f) != 0 || !slices.Equal(snd.Memory().Get("w").Residual(), before) {
				t.Fatalf("%v: a refused update returned %d bytes and changed the residual", c, len(f))
			}
		case err != nil:
			t.Fatalf("%v: %v", c, err)
		default:
			sent++
			if !finite(decodeAdd(t, f, 100)) {
				t.Fatalf("%v: a frame carries a NaN or an infinity", c)
			}
			snd.Commit()
		}
		if res := snd.Memory().Get("w").Residual(); !finite(res) {
			t.Fatalf("%v: residual %v", c, res)
		}
		for step := range 20 {
			f, err = snd.Append(nil, codec.FromFloat32("w", normal(100, uint64(step+3), 0.1), 10, 10))
			if err != nil {
				t.Fatalf("%v: finite step %d: %v", c, step, err)
			}
			snd.Commit()
		}
		if res := snd.Memory().Get("w").Residual(); !finite(res) {
			t.Fatalf("%v: residual after finite steps %v", c, res)
		}
		// Aborted: the compensated gradient is the residual, less what no
		// frame may carry.
		g = normal(100, 30, 0.001)
		g[41] = nan // small values around: left unsent by the selections
		if _, err := snd.Append(nil, codec.FromFloat32("w", g, 10, 10)); err == nil {
			snd.Abort()
			if res := snd.Memory().Get("w").Residual(); !finite(res) {
				t.Fatalf("%v: residual after an abort %v", c, res)
			}
		}
	}
	if refused == 0 || sent == 0 {
		t.Errorf("%d updates refused, %d sent: both ways untested", refused, sent)
	}
}

// An argument given twice (by name, or by position and by name) is a
// recipe error, for the stages and the compressor specs alike; so are an
// empty tail after '|' and a tail on none, which were silently ignored.
func TestRepeatedArgs(t *testing.T) {
	for _, s := range []string{
		"topk(0.1,ratio=0.2)", "topk(k=3,k=4)", "dgc(0.1,ratio=0.2)", "dgc(0.1,sample=0.1,sample=0.2)",
		"randk(0.1,ratio=0.3)", "randk(0.1,2,seed=3)", "randk(0.1,seed=1,seed=2)", "powersgd(2,3,seed=4)",
	} {
		if _, err := codec.ParseRecipe(s); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("recipe %q: %v, want ErrRecipe", s, err)
		}
	}
	for _, s := range []string{
		"topk(0.1,ratio=0.2)", "randk(0.1,ratio=0.2)", "randk(0.1,seed=1,seed=2)", "topk(0.1,ef=off,ef=on)",
		"powersgd(2,min=1,min=3)", "powersgd(2,rank=3)", "dgc(0.1,momentum=0.5,momentum=0.6)", "dgc(0.1,ratio=0.2)",
		"thresh(1,t=2)", "topk(0.1) |", "topk(0.1) | ", "none | *:zstd(1)",
		"topk(ef=off,0.1)", "powersgd(dense1d=on,4)", "dgc(ef=on,0.001)",
	} {
		if _, err := Parse(s); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("spec %q: %v, want ErrRecipe", s, err)
		}
	}
	for _, s := range []string{"topk(k=3)", "topk(ratio=0.1)", "randk(0.1,5)", "randk(ratio=0.1,seed=5)", "powersgd(2,7)", "dgc(0.1,sample=0.5)"} {
		if _, err := codec.ParseRecipe(s); err != nil {
			t.Errorf("recipe %q: %v", s, err)
		}
	}
}

// Positions are uint32: a segment of more elements is refused by the plan
// (a decoder with raised limits would otherwise truncate positions).
func TestPositionsFitUint32(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("32-bit int")
	}
	in := codec.SegInfo{Name: "data", Elem: codec.F32, Len: 4 << 32}
	for _, op := range []codec.Op{selectOp{stage: TopKID, ratio: 0.1}, randkOp{ratio: 0.1}, bloomOp{ratio: 0.1, hashes: 3}, polyfitOp{degree: 3}} {
		if _, err := op.Outputs(in); err == nil {
			t.Errorf("%v: a segment of 2^32 elements accepted", op)
		}
		if _, err := op.Outputs(codec.SegInfo{Name: "data", Elem: codec.F32, Len: 4 * (1<<32 - 1)}); err != nil {
			t.Errorf("%v: %v", op, err)
		}
	}
}

// PowerSGD on thin and odd shapes, with a rank above min(rows, cols):
// the clamped rank is full, so the stage and the compressor reproduce
// the tensor (up to float32 rounding).
func TestPowerSGDThinShapes(t *testing.T) {
	for _, shape := range [][]int64{{1, 50}, {50, 1}, {3, 5}, {5, 3}, {2, 3, 4}, {}, {7}, {1, 1}} {
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		x := normal(n, 9, 1)
		enc, _ := codec.NewEncoder()
		f, err := enc.AppendTensor(nil, codec.FromFloat32("g", x, shape...), codec.MustParseRecipe("powersgd(8)"))
		if err != nil {
			t.Fatalf("%v: %v", shape, err)
		}
		if e := relErr(decodeAll(t, f), x); e > 1e-6 {
			t.Errorf("%v: stage error %g", shape, e)
		}
		snd, _ := NewSender(&PowerSGD{Rank: 8})
		if f, err = snd.Append(nil, codec.FromFloat32("g", x, shape...)); err != nil {
			t.Fatalf("%v: %v", shape, err)
		}
		if e := relErr(decodeAll(t, f), x); e > 1e-6 {
			t.Errorf("%v: compressor error %g", shape, e)
		}
	}
}

// An aborted DGC update keeps its compensation: the residual becomes
// v + u1 and the momentum u1 = m*u0 + g1 (unmasked), so the next update
// compensates v + u1 + (m*u1 + g2), DGC's own trajectory with nothing
// delivered in between. Abort used to roll u back to u0 while keeping
// v + u1, counting m*u0 twice and dropping m*g1.
func TestDGCAbortKeepsMomentum(t *testing.T) {
	const m = 0.9
	n := 500
	snd, _ := NewSender(NewDGC(0.05))
	mem := snd.Memory()
	g0, g1, g2 := normal(n, 1, 1), normal(n, 2, 1), normal(n, 3, 1)
	if _, err := snd.Append(nil, codec.FromFloat32("w", g0, int64(n))); err != nil {
		t.Fatal(err)
	}
	snd.Commit()
	v0 := slices.Clone(mem.Get("w").Residual())
	u0 := slices.Clone(mem.Get("w").Committed("u"))
	if _, err := snd.Append(nil, codec.FromFloat32("w", g1, int64(n))); err != nil {
		t.Fatal(err)
	}
	snd.Abort()
	u1 := make([]float64, n)
	for i := range u1 {
		u1[i] = m*float64(u0[i]) + float64(g1[i])
		if d := float64(mem.Get("w").Committed("u")[i]) - u1[i]; math.Abs(d) > 1e-5 {
			t.Fatalf("after Abort u[%d] = %v, want %v", i, mem.Get("w").Committed("u")[i], u1[i])
		}
	}
	f, err := snd.Append(nil, codec.FromFloat32("w", g2, int64(n)))
	if err != nil {
		t.Fatal(err)
	}
	snd.Commit()
	sent := decodeAdd(t, f, n)
	res := mem.Get("w").Residual()
	u := mem.Get("w").Committed("u")
	for i := range n {
		u2 := m*u1[i] + float64(g2[i])
		want := float64(v0[i]) + u1[i] + u2
		if got := float64(sent[i]) + float64(res[i]); math.Abs(got-want) > 1e-4 {
			t.Fatalf("element %d: sent + residual = %v, want %v", i, got, want)
		}
		if sent[i] == 0 && math.Abs(float64(u[i])-u2) > 1e-4 {
			t.Fatalf("element %d: momentum %v, want %v", i, u[i], u2)
		}
	}
}
