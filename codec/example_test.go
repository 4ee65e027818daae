package codec_test

import (
	"bytes"
	"fmt"
	"io"
	"log"

	"github.com/tensorpress/tensorpress/codec"
	_ "github.com/tensorpress/tensorpress/lossless" // registers shuffle, zstd, s2, xz, huff0, bytedelta
)

// Stream tensors through a Writer and read them back with a Reader that
// needs no configuration.
func Example() {
	var wire bytes.Buffer
	w, err := codec.NewWriter(&wire, codec.WithRecipe(codec.MustParseRecipe("shuffle4 | plane3:huff0 | *:zstd(1)")))
	if err != nil {
		log.Fatal(err)
	}
	weights := codec.FromFloat32("layer0.weight", make([]float32, 4096), 64, 64)
	weights.Tags.Lossless = true
	if err := w.WriteTensor(weights); err != nil {
		log.Fatal(err)
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	r, err := codec.NewReader(&wire)
	if err != nil {
		log.Fatal(err)
	}
	t, err := r.ReadTensor()
	if err != nil {
		log.Fatal(err)
	}
	v, _ := codec.View[float32](t)
	fmt.Println(t.Name, t.DType, t.Shape, len(v), t.Tags.Lossless)
	_, err = r.ReadTensor()
	fmt.Println(err == io.EOF)
	// Output:
	// layer0.weight f32 [64 64] 4096 true
	// true
}

// Parse a recipe and print it back in canonical form.
func ExampleParseRecipe() {
	r, err := codec.ParseRecipe("shuffle4 | plane3 : huff0 | plane0..2:raw")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r)
	_, err = codec.ParseRecipe("shuffle4 | plane3:nosuch")
	fmt.Println(err != nil)
	// Output:
	// shuffle4 | plane3:huff0 | plane0..2:raw
	// true
}

// Encode one frame in memory and decode it.
func ExampleEncoder() {
	enc, _ := codec.NewEncoder()
	v := make([]float32, 1024)
	for i := range v {
		v[i] = []float32{0.5, -1, 2, 0}[i%4]
	}
	x := codec.FromFloat32("bias", v)
	frame, segs, err := enc.AppendTensorsStats(nil, nil, []*codec.Tensor{x}, []*codec.Recipe{codec.MustParseRecipe("shuffle4 | *:zstd(1)")})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range segs {
		fmt.Println(s.Name, s.Coder, s.StoredLen < s.RawLen)
	}
	f, n, err := new(codec.Decoder).DecodeFrame(frame)
	if err != nil {
		log.Fatal(err)
	}
	back, _ := codec.View[float32](f.Tensors[0])
	fmt.Println(n == len(frame), len(frame) < 4096, back[:4])
	// Output:
	// plane0 zstd true
	// plane1 zstd true
	// plane2 zstd true
	// plane3 zstd true
	// true true [0.5 -1 2 0]
}

// Carry an opaque byte stream (protobuf, .npy, anything) in the same format.
func ExampleWriter_Write() {
	var wire bytes.Buffer
	w, _ := codec.NewWriter(&wire, codec.WithRecipe(codec.MustParseRecipe("*:zstd(3)")))
	io.WriteString(w, "any bytes at all, any bytes at all, any bytes at all")
	w.Close()
	rd, err := codec.NewReader(&wire)
	if err != nil {
		log.Fatal(err)
	}
	back, err := io.ReadAll(rd)
	fmt.Println(string(back), err)
	// Output: any bytes at all, any bytes at all, any bytes at all <nil>
}
