// Package codectest holds the round-trip checks that the tests of the
// stage packages (lossless, lossy, sparse, gradient) share: a tensor coded
// with a recipe through codec's Encoder and decoded again, or written
// through a Writer and read back. Only tests import it.
//
// The checks fail the test with the recipe and the tensor's dtype and
// length in the message. Frames are decoded with codec's default limits,
// and a decoder must consume the whole frame and return one tensor with
// the input's name, dtype and shape.
package codectest

import (
	"bytes"
	"io"
	"slices"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// TryRoundTrip codes tn with recipe in one frame, decodes it and checks
// the decoded tensor's name, dtype, shape and length. It returns the
// frame and the decoded tensor, or the encoding error (a recipe that does
// not apply to tn); decoding errors fail the test.
func TryRoundTrip(t testing.TB, tn *codec.Tensor, recipe string) (frame []byte, got *codec.Tensor, err error) {
	t.Helper()
	r, err := codec.ParseRecipe(recipe)
	if err != nil {
		t.Fatalf("ParseRecipe(%q): %v", recipe, err)
	}
	enc, err := codec.NewEncoder()
	if err != nil {
		t.Fatal(err)
	}
	frame, err = enc.AppendTensor(nil, tn, r)
	if err != nil {
		return nil, nil, err
	}
	f, n, err := new(codec.Decoder).DecodeFrame(frame)
	if err != nil {
		t.Fatalf("%q on %v x %d: decode: %v", recipe, tn.DType, len(tn.Data), err)
	}
	if n != len(frame) || len(f.Tensors) != 1 {
		t.Fatalf("%q: decoded %d of %d bytes, %d tensors", recipe, n, len(frame), len(f.Tensors))
	}
	got = f.Tensors[0]
	if got.Name != tn.Name || got.DType != tn.DType || !slices.Equal(got.Shape, tn.Shape) || len(got.Data) != len(tn.Data) {
		t.Fatalf("%q: decoded %q %v %v (%d bytes), want %q %v %v (%d bytes)", recipe,
			got.Name, got.DType, got.Shape, len(got.Data), tn.Name, tn.DType, tn.Shape, len(tn.Data))
	}
	return frame, got, nil
}

// RoundTrip is TryRoundTrip for a recipe that must apply: an encoding
// error fails the test. It returns the decoded tensor, for the caller to
// hold against the stage's error bound.
func RoundTrip(t testing.TB, tn *codec.Tensor, recipe string) *codec.Tensor {
	t.Helper()
	_, got, err := TryRoundTrip(t, tn, recipe)
	if err != nil {
		t.Fatalf("%q on %v x %d: encode: %v", recipe, tn.DType, len(tn.Data), err)
	}
	return got
}

// TryLossless is TryRoundTrip for a lossless recipe: the decoded bytes
// must equal tn's. It returns the frame.
func TryLossless(t testing.TB, tn *codec.Tensor, recipe string) ([]byte, error) {
	t.Helper()
	frame, got, err := TryRoundTrip(t, tn, recipe)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(got.Data, tn.Data) {
		t.Fatalf("%q on %v x %d: round trip differs", recipe, tn.DType, len(tn.Data))
	}
	return frame, nil
}

// Lossless is TryLossless for a recipe that must apply. It returns the
// frame.
func Lossless(t testing.TB, tn *codec.Tensor, recipe string) []byte {
	t.Helper()
	frame, err := TryLossless(t, tn, recipe)
	if err != nil {
		t.Fatalf("%q on %v x %d: encode: %v", recipe, tn.DType, len(tn.Data), err)
	}
	return frame
}

// Stream writes tn through a codec.Writer made with opts (a recipe, a
// chunk size), closes it, and reads the stream back with a Reader: the
// tensor, joined from its chunks, must be all the stream holds.
func Stream(t testing.TB, tn *codec.Tensor, opts ...codec.EOption) *codec.Tensor {
	t.Helper()
	var buf bytes.Buffer
	w, err := codec.NewWriter(&buf, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor(tn); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := codec.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadTensor()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadTensor(); err != io.EOF {
		t.Fatalf("after the tensor: %v, want io.EOF", err)
	}
	return got
}
