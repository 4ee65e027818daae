package sparse

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// sparseBytes is n float32 values (density non-zero) as bytes after a
// prefix of pre bytes, as a byte stream holding them would be.
func sparseBytes(pre, n int, density float64, seed uint64) []byte {
	b := make([]byte, pre, pre+4*n)
	for i := range pre {
		b[i] = byte(7 * (i + 1))
	}
	for _, v := range sparseFloats(n, density, seed) {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func TestWidthRoundTrip(t *testing.T) {
	enc, _ := codec.NewEncoder()
	dec := new(codec.Decoder)
	for _, recipe := range []string{"width(4)", "width(2) | sparse", "width(4) | sparse | *:zstd(1)", "width(8) | coo | idx:delta,varint", "width(w=4) | sparse(gaps) | *:huff0"} {
		r := codec.MustParseRecipe(recipe)
		for pre := range 9 {
			for _, n := range []int{0, 1, 2, 3, 100, 5000} {
				for _, d := range []float64{0, 0.01, 0.5} {
					data := sparseBytes(pre, n, d, uint64(n+pre))
					frame, err := enc.AppendBytes(nil, data, r)
					if err != nil {
						t.Fatalf("%s, prefix %d, %d floats: %v", recipe, pre, n, err)
					}
					f, _, err := dec.DecodeFrame(frame)
					if err != nil || !bytes.Equal(f.Bytes, data) {
						t.Fatalf("%s, prefix %d, %d floats at %g: %v", recipe, pre, n, d, err)
					}
				}
			}
		}
	}
	// A tensor of 1-byte elements takes it; wider elements do not.
	u8 := &codec.Tensor{Name: "u", DType: codec.U8, Shape: []int64{12}, Data: make([]byte, 12)}
	if _, err := enc.AppendTensor(nil, u8, codec.MustParseRecipe("width(4) | sparse")); err != nil {
		t.Errorf("uint8 tensor: %v", err)
	}
	f32 := codec.FromFloat32("f", make([]float32, 12), 12)
	if _, err := enc.AppendTensor(nil, f32, codec.MustParseRecipe("width(4)")); err == nil || !strings.Contains(err.Error(), "takes bytes") {
		t.Errorf("float32 tensor: %v, want a refusal", err)
	}
}

// TestWidthFindsThePhase: the elements start where the floats do, after
// any prefix, and a float is then one position: the frame is as small as
// the float32 tensor's.
func TestWidthFindsThePhase(t *testing.T) {
	enc, _ := codec.NewEncoder()
	r := codec.MustParseRecipe("width(4) | sparse | *:zstd(1)")
	tensor := sparseBytes(0, 1<<16, 0.01, 3)
	ref, err := enc.AppendTensor(nil, &codec.Tensor{Name: "data", DType: codec.F32, Shape: []int64{1 << 16}, Data: tensor}, codec.MustParseRecipe("sparse | *:zstd(1)"))
	if err != nil {
		t.Fatal(err)
	}
	for pre := range 8 {
		b := sparseBytes(pre, 1<<16, 0.01, 3)
		if got := Phase(b, 4); got != pre%4 {
			t.Errorf("prefix %d: phase %d, want %d", pre, got, pre%4)
		}
		if w := ElementWidth(b); w != 4 {
			t.Errorf("prefix %d: element width %d, want 4", pre, w)
		}
		frame, err := enc.AppendBytes(nil, b, r)
		if err != nil {
			t.Fatal(err)
		}
		byteWise, _ := enc.AppendBytes(nil, b, codec.MustParseRecipe("sparse | *:zstd(1)"))
		if float64(len(frame)) > 1.03*float64(len(ref)) || len(frame) >= len(byteWise) {
			t.Errorf("prefix %d: %d bytes, float32 tensor %d, bytes as bytes %d", pre, len(frame), len(ref), len(byteWise))
		}
	}
	if w := ElementWidth(make([]byte, 1000)); w != 1 {
		t.Errorf("zeros: width %d, want 1", w)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	text := make([]byte, 4096)
	for i := range text {
		if rng.IntN(10) == 0 {
			text[i] = byte('a' + rng.IntN(26))
		}
	}
	if w := ElementWidth(text); w != 1 {
		t.Errorf("sparse letters: width %d, want 1", w)
	}
}

func TestWidthRefuses(t *testing.T) {
	for _, bad := range []string{"width(3)", "width(1)", "width(16)", "width(4, 2)", "width(x=4)"} {
		if _, err := codec.ParseRecipe(bad); !errors.Is(err, codec.ErrRecipe) {
			t.Errorf("%q: %v, want ErrRecipe", bad, err)
		}
	}
	for _, p := range [][]byte{nil, {3}, {4, 0}, {0}} {
		if _, err := widthStage.Load(p); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("params %x: %v, want ErrCorrupt", p, err)
		}
	}
	op := widthOp{w: 4, elem: codec.U32}
	in := codec.SegInfo{Name: "data", Elem: codec.Byte, Len: 10}
	for _, c := range []struct{ w, rest []byte }{
		{make([]byte, 8), []byte{4, 1, 2}},          // phase of a whole element
		{make([]byte, 8), []byte{1, 1}},             // 2 bytes short
		{make([]byte, 6), []byte{0, 1, 2, 3, 4}},    // part of an element
		{make([]byte, 4), []byte{0, 1, 2, 3, 4, 5}}, // a tail of a whole element
		{make([]byte, 8), nil},                      // no phase
	} {
		if _, err := op.Decode(nil, nil, []codec.Segment{{Data: c.w}, {Data: c.rest}}, in); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("w %d bytes, rest %x: %v, want ErrCorrupt", len(c.w), c.rest, err)
		}
	}
	if out, err := op.Decode(nil, nil, []codec.Segment{{Data: make([]byte, 8)}, {Data: []byte{1, 9, 8}}}, in); err != nil || len(out) != 10 || out[0] != 9 || out[9] != 8 {
		t.Errorf("well formed: %x, %v", out, err)
	}
}
