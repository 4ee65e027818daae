package codec

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

func TestRawRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WithChunkSize(1000))
	if err != nil {
		t.Fatal(err)
	}
	x := NewTensor("w", F32, 10, 100)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range x.Data {
		x.Data[i] = byte(rng.Uint32())
	}
	if err := w.WriteTensor(x); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("hello bytes")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(bytes.NewReader(buf.Bytes()))
	got, err := r.ReadTensor()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Data, x.Data) || got.Name != "w" || len(got.Shape) != 2 {
		t.Fatalf("tensor mismatch: %+v", got.Shape)
	}
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "hello bytes" {
		t.Fatalf("bytes: %q %v", b, err)
	}
}

func TestRecipeErrors(t *testing.T) {
	for _, s := range []string{"nosuch", "raw(1)", "|", "x:", "plane2..1:raw", "raw,"} {
		if _, err := ParseRecipe(s); !errors.Is(err, ErrRecipe) {
			t.Errorf("ParseRecipe(%q) = %v, want ErrRecipe", s, err)
		}
	}
}
