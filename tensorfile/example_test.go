package tensorfile_test

import (
	"bytes"
	"fmt"
	"io"
	"log"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/tensorfile"
)

func ExampleOpenSafetensors() {
	// Write a small file, then open it and read one tensor.
	var buf bytes.Buffer
	w := codec.FromFloat32("w", []float32{1, 2, 3, 4, 5, 6}, 2, 3)
	b := &codec.Tensor{Name: "b", DType: codec.I64, Shape: []int64{2}, Data: make([]byte, 16)}
	if err := tensorfile.WriteSafetensors(&buf, []*codec.Tensor{w, b}, map[string]string{"format": "pt"}); err != nil {
		log.Fatal(err)
	}
	f, err := tensorfile.OpenSafetensors(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		log.Fatal(err)
	}
	for _, ti := range f.Tensors() {
		fmt.Println(ti.Name, ti.DType, ti.Shape, ti.Begin, ti.End)
	}
	t, err := f.Read("w")
	if err != nil {
		log.Fatal(err)
	}
	v, _ := codec.View[float32](t)
	fmt.Println(v, f.Metadata()["format"], f.Canonical())
	// Output:
	// b i64 [2] 0 16
	// w f32 [2 3] 16 40
	// [1 2 3 4 5 6] pt true
}

func ExampleNewSafetensorsWriter() {
	// Stream tensors whose bytes come from elsewhere (here: zeros).
	infos := []tensorfile.TensorInfo{
		{Name: "embed", DType: codec.BF16, Shape: []int64{4, 8}},
		{Name: "norm", DType: codec.F32, Shape: []int64{8}},
	}
	sw, err := tensorfile.NewSafetensorsWriter(io.Discard, infos, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, ti := range sw.Tensors() {
		fmt.Println("write", ti.Name, ti.Size(), "bytes")
		if _, err := sw.Write(make([]byte, ti.Size())); err != nil {
			log.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// write norm 32 bytes
	// write embed 64 bytes
}

func ExampleReadNpy() {
	var buf bytes.Buffer
	if err := tensorfile.WriteNpy(&buf, codec.FromFloat32("", []float32{0.5, -1}, 2)); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", buf.Bytes()[10:70])
	t, err := tensorfile.ReadNpy(&buf)
	if err != nil {
		log.Fatal(err)
	}
	v, _ := codec.View[float32](t)
	fmt.Println(t.DType, t.Shape, v)
	// Output:
	// "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }   "
	// f32 [2] [0.5 -1]
}
