package lossy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/view"
)

// blockRecipes are one recipe per blockwise stage and a few block sizes.
var blockRecipes = []string{
	"int8(8)", "int8(64)", "int8",
	"nf4(8)", "nf4", "nf4(4096)",
	"fp4(16)", "fp4", "fp4(4096)",
	"qsgd(127,64)", "qsgd", "qsgd(1,64,seed=3)", "qsgd(4,4096,seed=7)",
	"sign(8)", "sign(64)", "sign",
	"ternary(8)", "ternary(64)", "ternary",
}

// mustBlockOp parses a one-op recipe such as "nf4(64)".
func mustBlockOp(t testing.TB, text string) *blockOp {
	t.Helper()
	r, err := codec.ParseRecipe(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Steps) != 1 || len(r.Steps[0].Ops) != 1 {
		t.Fatalf("%q: want one op", text)
	}
	o, ok := r.Steps[0].Ops[0].(*blockOp)
	if !ok {
		t.Fatalf("%q: op %T is not a blockwise quantizer", text, r.Steps[0].Ops[0])
	}
	return o
}

// quantBounder is implemented by lossy ops that state a worst-case error
// per block.
type quantBounder interface {
	codec.Op
	codec.BlockSizer
	errorBound(block []float32) float64
}

// quantBoundStats summarises a checkQuantBound run.
type quantBoundStats struct {
	MaxErr   float64 // largest |x - x^|
	MaxRatio float64 // largest |x - x^| / bound over elements with a non-zero bound
	RMSE     float64
	Bytes    int // q and scale bytes
}

// quantRoundTrip runs op's Encode and Decode on x as the "data" segment
// of a float32 tensor named "w", and returns x^ and the encoded parts.
func quantRoundTrip(t testing.TB, op codec.Op, x []float32) ([]float32, []codec.Segment) {
	t.Helper()
	src := view.Bytes(4 * len(x))
	copy(src, view.Of(x))
	tensor := &codec.Tensor{Name: "w", DType: codec.F32, Shape: []int64{int64(len(x))}}
	ctx := &codec.Ctx{Tensor: tensor, Arena: &codec.Arena{}}
	in := codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.F32, Len: len(src)}, Data: src}
	want, err := op.Outputs(in.SegInfo)
	if err != nil {
		t.Fatalf("%s: Outputs: %v", op, err)
	}
	outs, err := op.Encode(ctx, in)
	if err != nil {
		t.Fatalf("%s: Encode of %d elements: %v", op, len(x), err)
	}
	if len(outs) != len(want) {
		t.Fatalf("%s: %d segments, declared %d", op, len(outs), len(want))
	}
	for i := range outs {
		if outs[i].Name != want[i].Name || len(outs[i].Data) != want[i].Len || outs[i].Elem != want[i].Elem {
			t.Fatalf("%s: segment %d is %q %v of %d bytes, declared %q %v of %d", op, i,
				outs[i].Name, outs[i].Elem, len(outs[i].Data), want[i].Name, want[i].Elem, want[i].Len)
		}
	}
	parts := make([]codec.Segment, len(outs))
	for i, s := range outs {
		parts[i] = codec.Segment{SegInfo: s.SegInfo, Data: bytes.Clone(s.Data)}
	}
	if !bytes.Equal(src, view.Of(x)) {
		t.Fatalf("%s: Encode changed its input", op)
	}
	dst := view.Bytes(len(src) + 8)[:0]
	out, err := op.Decode(ctx, dst, parts, in.SegInfo)
	if err != nil {
		t.Fatalf("%s: Decode of %d elements: %v", op, len(x), err)
	}
	if len(out) != len(src) {
		t.Fatalf("%s: Decode gave %d bytes, want %d", op, len(out), len(src))
	}
	xh, ok := view.As[float32](out)
	if !ok {
		t.Fatal("misaligned output")
	}
	return xh, parts
}

// checkQuantBound quantizes x with op (a lossy op that states its error
// bound per block: every blockwise stage of this package), dequantizes it,
// and fails t when an element's error |x - x^| exceeds the bound of its
// block or x^ is not finite. It returns the error statistics. Use it on
// any data: random tensors here, real model weights elsewhere.
func checkQuantBound(t testing.TB, op codec.Op, x []float32) quantBoundStats {
	t.Helper()
	qb, ok := op.(quantBounder)
	if !ok {
		t.Fatalf("%s (%T) states no error bound", op, op)
	}
	xh, parts := quantRoundTrip(t, op, x)
	var st quantBoundStats
	for _, p := range parts {
		st.Bytes += len(p.Data)
	}
	B := qb.BlockElems()
	fails := 0
	var sq float64
	for lo := 0; lo < len(x); lo += B {
		hi := min(lo+B, len(x))
		bound := qb.errorBound(x[lo:hi])
		for i := lo; i < hi; i++ {
			e := math.Abs(float64(x[i]) - float64(xh[i]))
			sq += e * e
			if math.IsNaN(e) || math.IsInf(float64(xh[i]), 0) || e > bound {
				if fails++; fails <= 5 {
					t.Errorf("%s: element %d (block %d): x = %g (%#08x), x^ = %g: error %g > bound %g",
						op, i, lo/B, x[i], math.Float32bits(x[i]), xh[i], e, bound)
				}
				continue
			}
			st.MaxErr = max(st.MaxErr, e)
			if bound > 0 {
				st.MaxRatio = max(st.MaxRatio, e/bound)
			}
		}
	}
	if fails > 5 {
		t.Errorf("%s: %d elements outside the bound", op, fails)
	}
	if len(x) > 0 {
		st.RMSE = math.Sqrt(sq / float64(len(x)))
	}
	return st
}

// Test data.

func quantRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

func quantNormals(n int, sigma float64, seed uint64) []float32 {
	r := quantRand(seed)
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * sigma)
	}
	return x
}

// quantInputs are named inputs of several lengths and distributions.
func quantInputs() map[string][]float32 {
	in := map[string][]float32{}
	lengths := []int{1, 2, 3, 7, 8, 9, 15, 63, 64, 65, 100, 129, 4095, 4097, 3*4096 + 100}
	for _, n := range lengths {
		in[fmt.Sprintf("N(0,1)/%d", n)] = quantNormals(n, 1, uint64(n))
		in[fmt.Sprintf("N(0,0.02)/%d", n)] = quantNormals(n, 0.02, uint64(n)+1)
	}
	r := quantRand(7)
	cauchy := make([]float32, 10000)
	for i := range cauchy {
		cauchy[i] = float32(r.NormFloat64() / (math.Abs(r.NormFloat64()) + 1e-30))
	}
	in["cauchy"] = cauchy
	student := make([]float32, 8193)
	for i := range student { // Student's t with 3 degrees of freedom
		z := r.NormFloat64()
		a, b, c := r.NormFloat64(), r.NormFloat64(), r.NormFloat64()
		c = a*a + b*b + c*c
		student[i] = float32(z / math.Sqrt(c/3))
	}
	in["student3"] = student
	zeros := quantNormals(3*4096+37, 0.5, 11)
	for i := 64; i < 128; i++ {
		zeros[i] = 0
	}
	for i := 4096; i < 8192; i++ {
		zeros[i] = 0
	}
	in["zero-blocks"] = zeros
	in["all-zero"] = make([]float32, 1000)
	negz := make([]float32, 301)
	for i := range negz {
		negz[i] = float32(math.Copysign(0, -1))
	}
	in["all-negzero"] = negz
	mixed := quantNormals(5000, 1, 12)
	for i := 0; i < len(mixed); i += 3 {
		mixed[i] = float32(math.Copysign(0, -1))
	}
	in["negzero-mixed"] = mixed
	out := quantNormals(9000, 0.02, 13)
	out[4321] = 1e30
	out[17] = -3e6
	in["outlier"] = out
	in["huge"] = quantScaled(quantNormals(5000, 1, 14), 1e35)
	in["tiny-normal"] = quantScaled(quantNormals(5000, 1, 15), 1e-33)
	in["tiny-1e-40"] = quantScaled(quantNormals(777, 1, 16), 1e-40) // subnormals: the 2^-100 path
	sub := make([]float32, 200)
	for i := range sub {
		sub[i] = math.Float32frombits(uint32(i % 5)) // 0 .. 4 * 2^-149
		if i%2 == 1 {
			sub[i] = -sub[i]
		}
	}
	in["subnormal-min"] = sub
	maxish := quantNormals(640, 1, 17)
	for i := range maxish {
		maxish[i] = float32(math.Copysign(math.MaxFloat32/float64(1+i%7), float64(maxish[i])))
	}
	in["near-max"] = maxish
	// absmax > 2^126: float32(1)/absmax is subnormal, and y = x*inv may
	// fall a few ulps outside [-1, 1] (found by FuzzBlockRoundTrip).
	bigInv := make([]float32, 200)
	for i := range bigInv {
		bigInv[i] = math.Float32frombits(0x30303030)
		if i%24 == 4 {
			bigInv[i] = math.Float32frombits(0xff633030 + uint32(i))
		}
	}
	in["subnormal-inv"] = bigInv
	cst := make([]float32, 4100)
	for i := range cst {
		cst[i] = 0.3
		if i%5 == 0 {
			cst[i] = -0.3
		}
	}
	in["constant"] = cst
	ramp := make([]float32, 4096*2)
	for i := range ramp {
		ramp[i] = float32(i%256-128) / 127
	}
	in["ramp"] = ramp
	return in
}

func quantScaled(x []float32, f float64) []float32 {
	for i := range x {
		x[i] = float32(float64(x[i]) * f)
	}
	return x
}

// TestBlockBounds checks every stage's documented bound on every input.
func TestBlockBounds(t *testing.T) {
	inputs := quantInputs()
	for _, text := range blockRecipes {
		op := mustBlockOp(t, text)
		t.Run(text, func(t *testing.T) {
			worst := 0.0
			for name, x := range inputs {
				if op.kind.id == QSGDID && (name == "near-max" || name == "subnormal-inv") {
					continue // the block norm overflows float32: TestQSGDNormOverflow
				}
				st := checkQuantBound(t, op, x)
				worst = max(worst, st.MaxRatio)
			}
			t.Logf("%s: worst error / bound = %.4f", op, worst)
		})
	}
}

// TestBlockBoundsTight checks that the bounds are not loose for the
// stages whose bound is a half step: the measured worst case on a dense
// input reaches most of it.
func TestBlockBoundsTight(t *testing.T) {
	x := quantNormals(1<<16, 1, 99)
	for text, want := range map[string]float64{"int8(64)": 0.99, "nf4(64)": 0.8, "fp4(64)": 0.8, "qsgd(127,64)": 0.5} {
		st := checkQuantBound(t, mustBlockOp(t, text), x)
		if st.MaxRatio < want {
			t.Errorf("%s: worst error is %.3f of the bound, want >= %.2f: is the bound loose?", text, st.MaxRatio, want)
		}
	}
}

func TestBlockFloat64(t *testing.T) {
	for _, text := range blockRecipes {
		op := mustBlockOp(t, text)
		x64 := make([]float64, 1000)
		r := quantRand(3)
		for i := range x64 {
			x64[i] = r.NormFloat64()
		}
		x64[3] = math.Copysign(0, -1)
		src := view.Of(x64)
		in := codec.Segment{SegInfo: codec.SegInfo{Name: "val", Elem: codec.F64, Len: len(src)}, Data: src}
		ctx := &codec.Ctx{Arena: &codec.Arena{}}
		outs, err := op.Encode(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if outs[0].Name != "val.q" || outs[1].Name != "val.scale" {
			t.Fatalf("%s: segments %q, %q on val", op, outs[0].Name, outs[1].Name)
		}
		// The same codes as the float32-rounded input.
		x32 := make([]float32, len(x64))
		for i, v := range x64 {
			x32[i] = float32(v)
		}
		_, parts32 := quantRoundTrip(t, op, x32)
		for i := range outs {
			if !bytes.Equal(outs[i].Data, parts32[i].Data) {
				t.Fatalf("%s: float64 input codes differ from float32 ones in %s", op, outs[i].Name)
			}
		}
		out, err := op.Decode(ctx, make([]byte, 0, len(src)), outs, in.SegInfo)
		if err != nil {
			t.Fatal(err)
		}
		for lo := 0; lo < len(x64); lo += op.block {
			hi := min(lo+op.block, len(x64))
			bound := op.errorBound(x32[lo:hi])
			for i := lo; i < hi; i++ {
				got := math.Float64frombits(binary.LittleEndian.Uint64(out[8*i:]))
				// Plus the rounding of x to float32.
				if e := math.Abs(got - x64[i]); !(e <= bound+math.Abs(x64[i]-float64(x32[i]))) {
					t.Fatalf("%s: float64 element %d: %g -> %g, error %g > %g", op, i, x64[i], got, e, bound)
				}
			}
		}
	}
}

// TestBlockMisaligned runs Encode and Decode on buffers that are not
// aligned for float32.
func TestBlockMisaligned(t *testing.T) {
	x := quantNormals(777, 1, 5)
	for _, text := range blockRecipes {
		op := mustBlockOp(t, text)
		want, parts := quantRoundTrip(t, op, x)
		buf := make([]byte, 4*len(x)+1)
		src := buf[1:]
		copy(src, view.Of(x))
		in := codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.F32, Len: len(src)}, Data: src}
		ctx := &codec.Ctx{Tensor: &codec.Tensor{Name: "w"}, Arena: &codec.Arena{}}
		outs, err := op.Encode(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for i := range outs {
			if !bytes.Equal(outs[i].Data, parts[i].Data) {
				t.Fatalf("%s: misaligned input gives other codes in %s", op, outs[i].Name)
			}
		}
		dbuf := make([]byte, 3, 3+len(src))
		out, err := op.Decode(ctx, dbuf, parts, in.SegInfo)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out[3:], view.Of(want)) {
			t.Fatalf("%s: misaligned output differs", op)
		}
	}
}

func TestBlockNonFinite(t *testing.T) {
	for _, text := range blockRecipes {
		op := mustBlockOp(t, text)
		for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			x := quantNormals(200, 1, 1)
			x[137] = float32(bad)
			src := view.Of(x)
			tensor := &codec.Tensor{Name: "w", Offset: 1000}
			in := codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.F32, Len: len(src)}, Data: src}
			_, err := op.Encode(&codec.Ctx{Tensor: tensor}, in)
			if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "tensor element 1137") {
				t.Errorf("%s with %v: err %v, want ErrNonFinite naming tensor element 1137", op, bad, err)
			}
		}
		// float64 beyond the float32 range.
		x64 := []float64{1, 2, 1e300, 4}
		in := codec.Segment{SegInfo: codec.SegInfo{Name: "v", Elem: codec.F64, Len: 32}, Data: view.Of(x64)}
		_, err := op.Encode(nil, in)
		if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), `element 2 of segment "v"`) {
			t.Errorf("%s with 1e300: err %v", op, err)
		}
	}
}

func TestQSGDNormOverflow(t *testing.T) {
	x := []float32{math.MaxFloat32, math.MaxFloat32, 1, 2}
	op := mustBlockOp(t, "qsgd")
	_, err := op.Encode(nil, codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.F32, Len: 16}, Data: view.Of(x)})
	if err == nil || !errors.Is(err, errNormOverflow) {
		t.Fatalf("err %v, want the norm overflow", err)
	}
}

func TestBlockRefusesOtherTypes(t *testing.T) {
	for _, text := range blockRecipes {
		op := mustBlockOp(t, text)
		for _, dt := range []codec.DType{codec.Byte, codec.F16, codec.BF16, codec.I8, codec.I32, codec.U8} {
			_, err := op.Outputs(codec.SegInfo{Name: "data", Elem: dt, Len: 64})
			if err == nil || !strings.Contains(err.Error(), "f32 or f64") {
				t.Errorf("%s on %v: err %v", op, dt, err)
			}
		}
		if _, err := op.Outputs(codec.SegInfo{Name: "data", Elem: codec.F32, Len: 6}); err == nil {
			t.Errorf("%s accepts 6 bytes of f32", op)
		}
		if _, err := op.Outputs(codec.SegInfo{Name: "data", Elem: codec.F32, Len: -1}); err == nil {
			t.Errorf("%s accepts an unknown length", op)
		}
	}
}

func TestBlockOutputs(t *testing.T) {
	for _, tc := range []struct {
		recipe, seg string
		n           int
		q, scale    int
		qName, sNam string
	}{
		{"int8(64)", "data", 100, 100, 8, "q", "scale"},
		{"nf4(64)", "data", 129, 65, 12, "q", "scale"},
		{"fp4(8)", "val", 9, 5, 8, "val.q", "val.scale"},
		{"sign(64)", "data", 65, 9, 8, "q", "scale"},
		{"ternary(8)", "scale", 13, 4, 8, "scale.q", "scale.scale"},
		{"qsgd(127,4096)", "data", 4097, 4097, 8, "q", "scale"},
	} {
		op := mustBlockOp(t, tc.recipe)
		outs, err := op.Outputs(codec.SegInfo{Name: tc.seg, Elem: codec.F32, Len: 4 * tc.n})
		if err != nil {
			t.Fatal(err)
		}
		if outs[0].Name != tc.qName || outs[0].Len != tc.q || outs[1].Name != tc.sNam || outs[1].Len != tc.scale || outs[1].Elem != codec.F32 {
			t.Errorf("%s on %d elements of %q: %+v", tc.recipe, tc.n, tc.seg, outs)
		}
	}
}

func TestBlockParams(t *testing.T) {
	for _, tc := range []struct{ in, out string }{
		{"int8", "int8(4096)"}, {"int8(64)", "int8(64)"}, {"int8(block=64)", "int8(64)"},
		{"nf4", "nf4(64)"}, {"fp4(block=4096)", "fp4(4096)"},
		{"sign", "sign(4096)"}, {"ternary(64)", "ternary(64)"},
		{"qsgd", "qsgd(127,4096)"}, {"qsgd(4)", "qsgd(4,4096)"},
		{"qsgd(127,4096,seed=7)", "qsgd(127,4096,seed=7)"}, {"qsgd(levels=3,block=8,seed=18446744073709551615)", "qsgd(3,8,seed=18446744073709551615)"},
		{"qsgd(2,64,9)", "qsgd(2,64,seed=9)"},
	} {
		op := mustBlockOp(t, tc.in)
		if op.String() != tc.out {
			t.Errorf("%q prints as %q, want %q", tc.in, op, tc.out)
		}
		again := mustBlockOp(t, op.String())
		if *again != *op {
			t.Errorf("%q: reparsed %+v != %+v", tc.in, again, op)
		}
		p := op.AppendParams(nil)
		loaded, err := op.Stage().Load(p)
		if err != nil {
			t.Fatalf("%q: Load(%x): %v", tc.in, p, err)
		}
		if *loaded.(*blockOp) != *op {
			t.Errorf("%q: loaded %+v != %+v", tc.in, loaded, op)
		}
		if g, b := codec.MustParseRecipe(tc.in).Granularity(); g != codec.Block || b != op.block {
			t.Errorf("%q: granularity %v %d", tc.in, g, b)
		}
		if !op.Stage().Lossy || op.Stage().Kind != codec.Split {
			t.Errorf("%q: stage %+v", tc.in, op.Stage())
		}
	}
	for _, bad := range []string{
		"int8(0)", "int8(4)", "int8(12)", "int8(2097152)", "int8(64,64)", "int8(levels=3)", "int8(x)",
		"nf4(-8)", "sign(block=9)", "qsgd(0)", "qsgd(128)", "qsgd(127,100)", "qsgd(127,64,seed=-1)",
		"qsgd(127,64,seed=x)", "qsgd(1,64,2,3)", "qsgd(3,levels=3)", "qsgd(3,64,1,seed=1)",
	} {
		if _, err := codec.ParseRecipe(bad); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("%q: err %v, want ErrRecipe", bad, err)
		}
	}
}

func TestBlockLoadRefuses(t *testing.T) {
	uv := func(v ...uint64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.AppendUvarint(b, x)
		}
		return b
	}
	for _, tc := range []struct {
		id codec.StageID
		p  []byte
	}{
		{Int8ID, nil}, {Int8ID, uv(0)}, {Int8ID, uv(4)}, {Int8ID, uv(12)}, {Int8ID, uv(1<<20 + 8)},
		{Int8ID, uv(64, 1)}, {Int8ID, []byte{0xc0, 0x80, 0x00}}, {Int8ID, []byte{0x80}},
		{NF4ID, uv(1 << 40)}, {FP4ID, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{SignID, uv(7)}, {TernaryID, uv(64, 64)},
		{QSGDID, uv(127, 64)}, {QSGDID, uv(0, 64, 0)}, {QSGDID, uv(128, 64, 0)}, {QSGDID, uv(127, 63, 0)},
		{QSGDID, append(uv(127, 64), 0x80, 0x00)}, {QSGDID, uv(127, 64, 0, 0)},
	} {
		s, _ := codec.Lookup(tc.id)
		if _, err := s.Load(tc.p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("%s Load(%x): err %v, want ErrCorrupt", s.Name, tc.p, err)
		}
	}
}

func TestBlockDecodeRefuses(t *testing.T) {
	x := quantNormals(101, 1, 8)
	x[0] = 0 // nf4/fp4/sign padding, ternary: a zero code
	for _, text := range blockRecipes {
		op := mustBlockOp(t, text)
		_, parts := quantRoundTrip(t, op, x)
		in := codec.SegInfo{Name: "data", Elem: codec.F32, Len: 4 * len(x)}
		dec := func(parts []codec.Segment, in codec.SegInfo) error {
			_, err := op.Decode(nil, make([]byte, 0, max(in.Len, 0)+64), parts, in)
			return err
		}
		mod := func(k int, f func([]byte) []byte) []codec.Segment {
			p := []codec.Segment{parts[0], parts[1]}
			p[k].Data = f(bytes.Clone(p[k].Data))
			return p
		}
		cases := map[string][]codec.Segment{
			"no parts":       nil,
			"one part":       parts[:1],
			"three parts":    {parts[0], parts[1], parts[1]},
			"short q":        mod(0, func(b []byte) []byte { return b[:len(b)-1] }),
			"long q":         mod(0, func(b []byte) []byte { return append(b, 0) }),
			"short scale":    mod(1, func(b []byte) []byte { return b[:len(b)-1] }),
			"long scale":     mod(1, func(b []byte) []byte { return append(b, 0, 0, 0, 0) }),
			"NaN scale":      mod(1, func(b []byte) []byte { binary.LittleEndian.PutUint32(b, 0x7fc00000); return b }),
			"+Inf scale":     mod(1, func(b []byte) []byte { binary.LittleEndian.PutUint32(b[len(b)-4:], 0x7f800000); return b }),
			"-Inf scale":     mod(1, func(b []byte) []byte { binary.LittleEndian.PutUint32(b, 0xff800000); return b }),
			"negative scale": mod(1, func(b []byte) []byte { binary.LittleEndian.PutUint32(b, math.Float32bits(-1)); return b }),
		}
		switch op.kind.bits {
		case 8:
			cases["code -128"] = mod(0, func(b []byte) []byte { b[50] = 0x80; return b })
		case 4, 1:
			cases["padding"] = mod(0, func(b []byte) []byte { b[len(b)-1] |= 0x80; return b })
		case 2:
			cases["code 3"] = mod(0, func(b []byte) []byte { b[3] |= 3 << 4; return b })
			cases["padding"] = mod(0, func(b []byte) []byte { b[len(b)-1] |= 0x40; return b })
		}
		if op.kind.id == QSGDID && op.levels < 127 {
			cases["level > s"] = mod(0, func(b []byte) []byte { b[7] = byte(op.levels + 1); return b })
			cases["level < -s"] = mod(0, func(b []byte) []byte { b[99] = byte(-int8(op.levels) - 1); return b })
		}
		for name, p := range cases {
			if err := dec(p, in); !errors.Is(err, codec.ErrCorrupt) {
				t.Errorf("%s, %s: err %v, want ErrCorrupt", op, name, err)
			}
		}
		for _, bad := range []codec.SegInfo{
			{Name: "data", Elem: codec.F32, Len: 4*len(x) + 2},
			{Name: "data", Elem: codec.F32, Len: -1},
			{Name: "data", Elem: codec.I32, Len: 4 * len(x)},
			{Name: "data", Elem: codec.F32, Len: 4 * (len(x) + 8)},
		} {
			if err := dec(parts, bad); !errors.Is(err, codec.ErrCorrupt) {
				t.Errorf("%s on %+v: err %v, want ErrCorrupt", op, bad, err)
			}
		}
		// No room in dst: an error, not a panic and no write.
		if _, err := op.Decode(nil, make([]byte, 0, 4*len(x)-1), parts, in); err == nil {
			t.Errorf("%s: decoded into a short buffer", op)
		}
	}
}

// TestBlockChunkIndependent checks that quantizing a tensor in
// block-aligned pieces (as a Writer's chunks) gives the same codes as
// quantizing it whole, QSGD's dither included.
func TestBlockChunkIndependent(t *testing.T) {
	x := quantNormals(5*4096+77, 1, 21)
	for _, text := range blockRecipes {
		op := mustBlockOp(t, text)
		_, whole := quantRoundTrip(t, op, x)
		B := op.block
		step := max(B, 2*4096/B*B)
		var q, sc []byte
		for lo := 0; lo < len(x); lo += step {
			hi := min(lo+step, len(x))
			src := view.Of(x[lo:hi])
			ctx := &codec.Ctx{Tensor: &codec.Tensor{Name: "w", DType: codec.F32, Shape: []int64{int64(len(x))}, Offset: int64(lo)}}
			outs, err := op.Encode(ctx, codec.Segment{SegInfo: codec.SegInfo{Name: "data", Elem: codec.F32, Len: len(src)}, Data: src})
			if err != nil {
				t.Fatal(err)
			}
			q = append(q, outs[0].Data...)
			sc = append(sc, outs[1].Data...)
		}
		if !bytes.Equal(q, whole[0].Data) || !bytes.Equal(sc, whole[1].Data) {
			t.Errorf("%s: chunks of %d elements give other codes than the whole tensor", op, step)
		}
	}
}

// TestQSGDUnbiased averages the dequantized values over many seeds: the
// mean must approach x within a few standard errors. Seeds are fixed, so
// the test cannot flake.
func TestQSGDUnbiased(t *testing.T) {
	x := quantNormals(512, 1, 31)
	x[5] = 0
	x[6] = float32(math.Copysign(0, -1))
	for _, s := range []int{1, 4, 127} {
		const seeds = 400
		sum := make([]float64, len(x))
		var norms [8]float64
		for seed := range seeds {
			op := mustBlockOp(t, fmt.Sprintf("qsgd(%d,64,seed=%d)", s, seed+1))
			xh, parts := quantRoundTrip(t, op, x)
			for i, v := range xh {
				sum[i] += float64(v)
			}
			for b := range norms {
				norms[b] = float64(math.Float32frombits(binary.LittleEndian.Uint32(parts[1].Data[4*b:])))
			}
		}
		worst, meanDev := 0.0, 0.0
		for i := range x {
			step := norms[i/64] / float64(s)
			// Var[x^] <= step^2/4 per draw: the standard error of the mean
			// over the seeds is at most step/(2*sqrt(seeds)).
			se := step / (2 * math.Sqrt(seeds))
			d := (sum[i]/seeds - float64(x[i])) / se
			worst = max(worst, math.Abs(d))
			meanDev += d
		}
		meanDev /= float64(len(x))
		// 512 deviations, each within 6 standard errors (a bound on the
		// standard error, so looser still), and their mean near 0.
		if worst > 6 || math.Abs(meanDev) > 0.3 {
			t.Errorf("qsgd(%d): worst deviation %.2f standard errors, mean %.3f", s, worst, meanDev)
		}
		t.Logf("qsgd(%d): worst deviation %.2f standard errors, mean %.3f", s, worst, meanDev)
	}
}

// TestQSGDSeed checks that the seed changes the codes and the same seed
// gives the same ones.
func TestQSGDSeed(t *testing.T) {
	x := quantNormals(4096, 1, 41)
	_, a := quantRoundTrip(t, mustBlockOp(t, "qsgd(4,4096,seed=1)"), x)
	_, b := quantRoundTrip(t, mustBlockOp(t, "qsgd(4,4096,seed=1)"), x)
	_, c := quantRoundTrip(t, mustBlockOp(t, "qsgd(4,4096,seed=2)"), x)
	if !bytes.Equal(a[0].Data, b[0].Data) || bytes.Equal(a[0].Data, c[0].Data) {
		t.Fatal("the seed does not determine the codes")
	}
	// The key is splitmix64's output: seeded with 0 it starts
	// 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f.
	for hi, z := range []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f} {
		if got := qsgdKey(0, uint64(hi)); got != uint32(z>>32) {
			t.Errorf("key %d: %#x, want %#x", hi, got, uint32(z>>32))
		}
	}
	// lowbias32, written out; and the dither is uniform enough.
	ref := func(x uint32) uint32 {
		x = (x ^ x>>16) * 0x7feb352d
		x = (x ^ x>>15) * 0x846ca68b
		return x ^ x>>16
	}
	var sum float64
	const n = 1 << 20
	for j := uint64(1<<32 - n/2); j < 1<<32+n/2; j++ {
		u := qsgdDither(5, j)
		if want := ref(uint32(j)+qsgdKey(5, j>>32)) >> 8; u != want {
			t.Fatalf("dither %d: %#x, want %#x", j, u, want)
		}
		sum += float64(u)
	}
	if mean := sum / n / (1 << 24); math.Abs(mean-0.5) > 0.002 {
		t.Errorf("dither mean %v", mean)
	}
}

// TestSignTernaryDefinition checks sign and ternary codes and scales
// against their definitions, written plainly.
func TestSignTernaryDefinition(t *testing.T) {
	x := quantNormals(1000, 1, 51)
	x[3] = float32(math.Copysign(0, -1))
	x[4] = 0
	for _, B := range []int{8, 64, 4096} {
		sop := mustBlockOp(t, fmt.Sprintf("sign(%d)", B))
		top := mustBlockOp(t, fmt.Sprintf("ternary(%d)", B))
		sxh, sp := quantRoundTrip(t, sop, x)
		txh, tp := quantRoundTrip(t, top, x)
		for lo := 0; lo < len(x); lo += B {
			blk := x[lo:min(lo+B, len(x))]
			var sum, am float64
			for _, v := range blk {
				sum += math.Abs(float64(v))
				am = max(am, math.Abs(float64(v)))
			}
			mean := float32(sum / float64(len(blk)))
			if got := math.Float32frombits(binary.LittleEndian.Uint32(sp[1].Data[4*(lo/B):])); got != mean {
				t.Fatalf("sign(%d) block %d: scale %v, want %v", B, lo/B, got, mean)
			}
			th := float32(0.7 * float64(mean))
			var ssum float64
			cnt := 0
			for _, v := range blk {
				if float32(math.Abs(float64(v))) > th {
					ssum += math.Abs(float64(v))
					cnt++
				}
			}
			var s float32
			if cnt > 0 {
				s = min(float32(ssum/float64(cnt)), float32(am))
			}
			if got := math.Float32frombits(binary.LittleEndian.Uint32(tp[1].Data[4*(lo/B):])); got != s {
				t.Fatalf("ternary(%d) block %d: scale %v, want %v", B, lo/B, got, s)
			}
			for i, v := range blk {
				neg := math.Signbit(float64(v))
				want := mean
				if neg {
					want = -mean
				}
				if sxh[lo+i] != want || math.Signbit(float64(sxh[lo+i])) != neg {
					t.Fatalf("sign: element %d: %v -> %v, want %v", lo+i, v, sxh[lo+i], want)
				}
				var tw float32
				if float32(math.Abs(float64(v))) > th {
					tw = s
					if neg {
						tw = -s
					}
				}
				if txh[lo+i] != tw {
					t.Fatalf("ternary: element %d: %v -> %v, want %v", lo+i, v, txh[lo+i], tw)
				}
			}
		}
	}
}

// Kernels against their reference loops.

// int8Ref is the int8 definition, written plainly with float64 rounding.
func int8Ref(x []float32) ([]int8, float32, []float32) {
	var a float32
	for _, v := range x {
		a = max(a, float32(math.Abs(float64(v))))
	}
	q := make([]int8, len(x))
	d := make([]float32, len(x))
	if a == 0 {
		return q, 0, d
	}
	inv := float32(127) / a
	for i, v := range x {
		y := float32(v * inv)
		q[i] = int8(max(-127, min(127, math.RoundToEven(float64(y)))))
		d[i] = float32(q[i]) * (a / float32(127))
	}
	return q, a, d
}

// nf4Ref and fp4Ref count midpoints, as the definition says.
func nf4Ref(y float32) uint8 {
	var c uint8
	for i := range 15 {
		if y > nf4Mid[i] {
			c++
		}
	}
	return c
}

func fp4Ref(y float32) uint8 {
	var c uint8
	for i := range 7 {
		if float32(math.Abs(float64(y))) > fp4Mid[i] {
			c++
		}
	}
	if math.Signbit(float64(y)) {
		c |= 8
	}
	return c
}

func TestCodebooks(t *testing.T) {
	for i, v := range nf4Codebook {
		if i > 0 && !(v > nf4Codebook[i-1]) {
			t.Fatal("nf4 codebook not ascending")
		}
	}
	if nf4Codebook[7] != 0 || nf4Codebook[0] != -1 || nf4Codebook[15] != 1 {
		t.Fatal("nf4 codebook ends")
	}
	if math.Abs(nf4Gap-(1-0.6961928009986877)/2) > 1e-7 || math.Abs(fp4Gap-(1-8.0/12)/2) > 1e-7 {
		t.Fatalf("gaps %v %v", nf4Gap, fp4Gap)
	}
	for i, v := range []float64{0, 0.0625, 2, 3, 4, 6, 8, 12} {
		if fp4Magnitudes[i] != float32(float32(v)/float32(12)) || fp4Magnitudes[i] != float32(v/12) {
			t.Fatalf("fp4 magnitude %d", i)
		}
	}
	// Every y near a midpoint, and random ones.
	var ys []float32
	for _, m := range append(nf4Mid[:15:15], fp4Mid[:7]...) {
		for _, s := range []float32{1, -1} {
			v := m * s
			ys = append(ys, v, math.Nextafter32(v, 2), math.Nextafter32(v, -2))
		}
	}
	r := quantRand(61)
	for range 100000 {
		ys = append(ys, float32(r.Float64()*2-1))
	}
	ys = append(ys, -1, 1, 0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 1.5, -1.5, 1.999, -1.999)
	for _, v := range []float32{1, -1} { // a few ulps beyond ±1: subnormal inv
		for range 64 {
			v = math.Nextafter32(v, 2*v)
			ys = append(ys, v)
		}
	}
	for _, y := range ys {
		if got, want := nf4Code(y), nf4Ref(y); got != want {
			t.Fatalf("nf4Code(%v) = %d, want %d", y, got, want)
		}
		if got, want := fp4Code(y), fp4Ref(y); got != want {
			t.Fatalf("fp4Code(%v) = %d, want %d", y, got, want)
		}
	}
	// Ties go to the lower code.
	for i := range 15 {
		if c := nf4Code(nf4Mid[i]); c != uint8(i) {
			t.Fatalf("nf4 tie at midpoint %d gives %d", i, c)
		}
	}
}

func TestInt8Definition(t *testing.T) {
	x := quantNormals(10000, 1, 71)
	// Exact ties: x*inv = k + 0.5 with absmax 127 (inv = 1).
	for i := range 300 {
		x[i] = float32(i%255-127) + 0.5
	}
	x[300] = 127
	for _, B := range []int{8, 64, 4096} {
		op := mustBlockOp(t, fmt.Sprintf("int8(%d)", B))
		xh, parts := quantRoundTrip(t, op, x)
		for lo := 0; lo < len(x); lo += B {
			hi := min(lo+B, len(x))
			q, a, d := int8Ref(x[lo:hi])
			if got := math.Float32frombits(binary.LittleEndian.Uint32(parts[1].Data[4*(lo/B):])); got != a {
				t.Fatalf("int8(%d) block %d: absmax %v, want %v", B, lo/B, got, a)
			}
			for i := range q {
				if int8(parts[0].Data[lo+i]) != q[i] || math.Float32bits(xh[lo+i]) != math.Float32bits(d[i]) {
					t.Fatalf("int8(%d): element %d: %v -> %d, %v; want %d, %v", B, lo+i, x[lo+i], int8(parts[0].Data[lo+i]), xh[lo+i], q[i], d[i])
				}
			}
		}
	}
}

// TestTinyBlocks checks the 2^-100 path against the plain formula where
// the plain formula does not overflow, and the bound where it does.
func TestTinyBlocks(t *testing.T) {
	x := quantScaled(quantNormals(4096, 1, 81), 0x1p-110)
	q, a, _ := int8Ref(x) // 127/a ~ 2^117: no overflow
	_, parts := quantRoundTrip(t, mustBlockOp(t, "int8(4096)"), x)
	for i := range q {
		if int8(parts[0].Data[i]) != q[i] {
			t.Fatalf("tiny int8: element %d: %d, want %d (absmax %v)", i, int8(parts[0].Data[i]), q[i], a)
		}
	}
	_, parts = quantRoundTrip(t, mustBlockOp(t, "nf4(4096)"), x)
	inv := float32(1) / a
	for i, v := range x {
		if got, want := parts[0].Data[i/2]>>(4*(i%2))&15, nf4Ref(float32(v*inv)); got != want {
			t.Fatalf("tiny nf4: element %d: %d, want %d", i, got, want)
		}
	}
}

func TestKernelsAgainstReference(t *testing.T) {
	r := quantRand(91)
	for n := range 300 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
			if r.IntN(17) == 0 {
				x[i] = float32(math.Copysign(0, -1))
			}
		}
		// absmax, with a NaN and an Inf placed anywhere.
		if got, want := absmaxBits(x), quantAbsmaxRef(x); got != want {
			t.Fatalf("absmaxBits(%d) = %#x, want %#x", n, got, want)
		}
		if n > 0 {
			y := bytes.Clone(view.Of(x))
			yf, _ := view.As[float32](y)
			yf[r.IntN(n)] = float32(math.NaN())
			if absmaxBits(yf) < nonFiniteBits {
				t.Fatalf("absmaxBits(%d) misses a NaN", n)
			}
			yf[r.IntN(n)] = float32(math.Inf(-1))
			if absmaxBits(yf) < nonFiniteBits {
				t.Fatalf("absmaxBits(%d) misses an Inf", n)
			}
		}
		inv := float32(127 / 4.5)
		const guard = 0xa5
		q := bytes.Repeat([]byte{guard}, n+40)
		quantI8(q[:n], x, inv)
		for i, v := range x {
			want := int8(max(-127, min(127, math.RoundToEven(float64(float32(v*inv))))))
			if int8(q[i]) != want {
				t.Fatalf("quantI8(%d): element %d: %d, want %d", n, i, int8(q[i]), want)
			}
		}
		quantCheckGuard(t, "quantI8", q[n:], guard)
		xh := make([]float32, n+8)
		for i := range xh {
			xh[i] = 1234.5
		}
		if !dequantI8(xh[:n], q[:n], 0.25, 127) {
			t.Fatalf("dequantI8(%d) refuses valid codes", n)
		}
		for i := range n {
			if xh[i] != float32(int8(q[i]))*0.25 {
				t.Fatalf("dequantI8(%d): element %d", n, i)
			}
		}
		for i := n; i < len(xh); i++ {
			if xh[i] != 1234.5 {
				t.Fatalf("dequantI8(%d) wrote past its end", n)
			}
		}
		if n > 0 {
			q[r.IntN(n)] = 0x80
			if dequantI8(xh[:n], q[:n], 0.25, 127) {
				t.Fatalf("dequantI8(%d) accepts -128", n)
			}
		}
		// 4-bit codes.
		inv4 := float32(1 / 4.5)
		for _, k := range []struct {
			name  string
			quant func(q []byte, x []float32, inv float32)
			ref   func(float32) uint8
		}{{"nf4", quantNF4, nf4Ref}, {"fp4", quantFP4, fp4Ref}} {
			q4 := bytes.Repeat([]byte{guard}, (n+1)/2+40)
			k.quant(q4[:(n+1)/2], x, inv4)
			for i, v := range x {
				if got, want := q4[i/2]>>(4*(i%2))&15, k.ref(float32(v*inv4)); got != want {
					t.Fatalf("%s(%d): element %d (%v): %d, want %d", k.name, n, i, v, got, want)
				}
			}
			if n%2 == 1 && q4[n/2]>>4 != 0 {
				t.Fatalf("%s(%d): padding nibble set", k.name, n)
			}
			quantCheckGuard(t, k.name, q4[(n+1)/2:], guard)
			var lut [16]float32
			for c := range lut {
				lut[c] = float32(c) - 7.5
			}
			if !dequant4(xh[:n], q4[:(n+1)/2], &lut) {
				t.Fatalf("dequant4(%d) refuses valid codes", n)
			}
			for i := range n {
				if xh[i] != lut[q4[i/2]>>(4*(i%2))&15] {
					t.Fatalf("dequant4(%d): element %d", n, i)
				}
			}
			for i := n; i < len(xh); i++ {
				if xh[i] != 1234.5 {
					t.Fatalf("dequant4(%d) wrote past its end", n)
				}
			}
		}
	}
}

func quantAbsmaxRef(x []float32) uint32 {
	var m uint32
	for _, v := range x {
		m = max(m, math.Float32bits(v)&0x7fffffff)
	}
	return m
}

func quantCheckGuard(t *testing.T, what string, b []byte, guard byte) {
	t.Helper()
	for i, v := range b {
		if v != guard {
			t.Fatalf("%s wrote %d bytes past its end", what, i+1)
		}
	}
}
