package lossy

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	_ "github.com/tensorpress/tensorpress/lossless" // huff0, zstd
)

// quantE2ERecipes are the recipes the end-to-end tests run through codec.
var quantE2ERecipes = []string{
	"int8(64)",
	"int8(4096) | q:huff0",
	"nf4(64) | scale:int8(256)",
	"fp4(64)",
	"qsgd(127,4096,seed=7)",
	"sign",
	"ternary(64)",
	"nf4(64) | q:zstd(3) | scale:int8(256) | scale.q:huff0",
}

// quantRecipeBound returns the documented bound for element i of x under the
// recipe r: the bound of its first (blockwise) op, and for a second
// blockwise op on "scale" (double quantization) the error that the
// dequantized scale adds.
func quantRecipeBound(t *testing.T, r *codec.Recipe, x []float32) []float64 {
	t.Helper()
	first, ok := r.Steps[0].Ops[0].(*blockOp)
	if !ok {
		t.Fatalf("%s: first op is not blockwise", r)
	}
	B := first.block
	nb := (len(x) + B - 1) / B
	bound := make([]float64, len(x))
	scales := make([]float32, nb)
	for b := range nb {
		blk := x[b*B : min(b*B+B, len(x))]
		e := first.errorBound(blk)
		for i := range blk {
			bound[b*B+i] = e
		}
		scales[b] = math.Float32frombits(quantAbsmaxRef(blk))
	}
	var second *blockOp
	for _, st := range r.Steps[1:] {
		for _, op := range st.Ops {
			if bo, ok := op.(*blockOp); ok && st.Sel.Matches("scale") {
				second = bo
			}
		}
	}
	if second == nil {
		return bound
	}
	if first.kind.id != NF4ID && first.kind.id != FP4ID {
		t.Fatalf("%s: no composite bound for %s", r, first)
	}
	// x^ = fl(c*a^) against fl(c*a), |c| <= 1: the scale's own error
	// |a - a^| plus a rounding of each product.
	S := second.block
	for g := 0; g < nb; g += S {
		grp := scales[g:min(g+S, nb)]
		es := second.errorBound(grp)
		A := float64(math.Float32frombits(quantAbsmaxRef(grp)))
		for b := g; b < g+len(grp); b++ {
			extra := es + 0x1p-24*(float64(scales[b])+A*(1+1.0/127))
			for i := b * B; i < min(b*B+B, len(x)); i++ {
				bound[i] += extra
			}
		}
	}
	return bound
}

// quantE2EInput is N(0, 0.02) with a zero block, a -0.0 and outliers.
func quantE2EInput() []float32 {
	x := quantNormals(3*4096+100, 0.02, 1234)
	for i := 128; i < 192; i++ {
		x[i] = 0
	}
	x[5] = float32(math.Copysign(0, -1))
	x[300] = 1.5
	x[9000] = -40
	return x
}

func TestBlockThroughCodec(t *testing.T) {
	x := quantE2EInput()
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	dec := new(codec.Decoder)
	for _, text := range quantE2ERecipes {
		r := codec.MustParseRecipe(text)
		tensor := codec.FromFloat32("layer.w", x, 4, int64(len(x)/4))
		frame, stats, err := enc.AppendTensorsStats(nil, nil, []*codec.Tensor{tensor}, []*codec.Recipe{r})
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		f, n, err := dec.DecodeFrame(frame)
		if err != nil {
			t.Fatalf("%s: decode: %v", text, err)
		}
		if n != len(frame) || len(f.Tensors) != 1 {
			t.Fatalf("%s: decoded %d of %d bytes, %d tensors", text, n, len(frame), len(f.Tensors))
		}
		xh, err := codec.View[float32](f.Tensors[0])
		if err != nil {
			t.Fatal(err)
		}
		bound := quantRecipeBound(t, r, x)
		worst := 0.0
		for i := range x {
			e := math.Abs(float64(x[i]) - float64(xh[i]))
			if !(e <= bound[i]) {
				t.Fatalf("%s: element %d: %g -> %g, error %g > bound %g", text, i, x[i], xh[i], e, bound[i])
			}
			if bound[i] > 0 {
				worst = max(worst, e/bound[i])
			}
		}
		// A single blockwise op gives the same values through codec as
		// when called directly.
		if !quantizesScales(r) {
			direct, _ := quantRoundTrip(t, r.Steps[0].Ops[0], x)
			if !quantEqualBits(direct, xh) {
				t.Errorf("%s: codec and the op disagree", text)
			}
		}
		var segs []string
		for _, s := range stats {
			segs = append(segs, fmt.Sprintf("%s:%s=%d", s.Name, s.Coder, s.StoredLen))
		}
		t.Logf("%-55s frame %6d bytes (%.4f of fp32), worst error/bound %.3f, %v", text, len(frame), float64(len(frame))/float64(4*len(x)), worst, segs)
	}
}

func TestBlockLosslessTagRefused(t *testing.T) {
	enc, _ := codec.NewEncoder()
	x := quantNormals(1000, 1, 1)
	for _, text := range quantE2ERecipes {
		tensor := codec.FromFloat32("w", x)
		tensor.Tags.Lossless = true
		if _, err := enc.AppendTensor(nil, tensor, codec.MustParseRecipe(text)); !errors.Is(err, codec.ErrLossy) {
			t.Errorf("%s on a lossless tensor: err %v, want ErrLossy", text, err)
		}
		var buf bytes.Buffer
		w, err := codec.NewWriter(&buf, codec.WithRecipe(codec.MustParseRecipe(text)))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteTensor(tensor); !errors.Is(err, codec.ErrLossy) {
			t.Errorf("Writer, %s on a lossless tensor: err %v, want ErrLossy", text, err)
		}
		w.Close()
	}
}

// TestBlockChunked streams a tensor through a Writer with small chunks
// and checks that the Reader assembles the same values as one frame
// gives: chunk edges fall on block edges.
func TestBlockChunked(t *testing.T) {
	x := quantE2EInput()
	x = append(x, quantNormals(64*256*2, 0.02, 5)...) // more than two groups of 256 nf4 scales
	enc, _ := codec.NewEncoder()
	dec := new(codec.Decoder)
	for _, text := range quantE2ERecipes {
		r := codec.MustParseRecipe(text)
		chunk := 4096 // bytes: 1024 elements; block-aligned by the Writer
		if quantizesScales(r) {
			// Double quantization: the scales of a chunk are quantized in
			// blocks of their own, so the chunks must hold whole groups of
			// 64*256 elements for one frame and chunks to agree.
			chunk = 64 * 256 * 4
		}
		tensor := codec.FromFloat32("w", x)
		frame, err := enc.AppendTensor(nil, tensor, r)
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := dec.DecodeFrame(frame)
		if err != nil {
			t.Fatal(err)
		}
		whole, _ := codec.View[float32](f.Tensors[0])

		var buf bytes.Buffer
		w, err := codec.NewWriter(&buf, codec.WithRecipe(r), codec.WithChunkSize(chunk), codec.WithEncoderConcurrency(2))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteTensor(tensor); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		rd, err := codec.NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := rd.ReadTensor()
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		gx, _ := codec.View[float32](got)
		if !quantEqualBits(gx, whole) {
			t.Errorf("%s: chunks of %d bytes decode to other values than one frame", text, chunk)
		}
		if buf.Len() < 2*len(frame)/3 {
			t.Errorf("%s: stream of %d bytes for a frame of %d", text, buf.Len(), len(frame))
		}
	}
}

// quantizesScales reports whether r quantizes the "scale" segment of its
// first op again.
func quantizesScales(r *codec.Recipe) bool {
	for _, st := range r.Steps[1:] {
		for _, op := range st.Ops {
			if _, ok := op.(*blockOp); ok && st.Sel.Matches("scale") {
				return true
			}
		}
	}
	return false
}

func quantEqualBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestBlockSizes logs the frame size of each recipe as a fraction of
// fp32 on N(0, 0.02) data: 4M elements with -v, 64K otherwise.
func TestBlockSizes(t *testing.T) {
	n := 1 << 16
	if testing.Verbose() && !testing.Short() {
		n = 1 << 22
	}
	x := quantNormals(n, 0.02, 4)
	enc, _ := codec.NewEncoder()
	for _, text := range []string{"int8(64)", "int8(4096)", "nf4(64)", "nf4(4096)", "fp4(64)", "nf4(64) | scale:int8(256)",
		"qsgd(127,4096)", "sign", "ternary"} {
		var sizes [2]int
		for k, suffix := range []string{"", " | q:huff0"} {
			frame, err := enc.AppendTensor(nil, codec.FromFloat32("w", x), codec.MustParseRecipe(text+suffix))
			if err != nil {
				t.Fatal(err)
			}
			sizes[k] = len(frame)
		}
		t.Logf("%-28s %.4f of fp32, with | q:huff0 %.4f (%d elements)", text, float64(sizes[0])/float64(4*n), float64(sizes[1])/float64(4*n), n)
	}
}
