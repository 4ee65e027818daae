package tensorfile

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// fuzzLimits keep the fuzzers' allocations small; rewriteLimits leave room
// for a rewritten header that grows by its padding.
var (
	fuzzLimits    = WithLimits(Limits{MaxTensorBytes: 1 << 20, MaxHeaderSize: 1 << 20})
	rewriteLimits = WithLimits(Limits{MaxTensorBytes: 1 << 20, MaxHeaderSize: 2 << 20})
)

// stSeeds are valid and malformed safetensors files.
func stSeeds(t testing.TB) [][]byte {
	rng := rand.New(rand.NewPCG(21, 22))
	var seeds [][]byte
	add := func(tensors []*codec.Tensor, meta map[string]string, opts ...Option) {
		var buf bytes.Buffer
		if err := WriteSafetensors(&buf, tensors, meta, opts...); err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, buf.Bytes())
	}
	add(nil, nil)
	add(nil, map[string]string{"format": "pt"})
	var all []*codec.Tensor
	for i, dt := range allDTypes {
		all = append(all, randTensor(rng, fmt.Sprintf("layer.%d.weight", i), dt, testShapes[i%len(testShapes)]...))
	}
	add(all, map[string]string{"a": "1", "b": "x\"y"})
	add(all[:4], nil, WithKeepOrder(true))
	add([]*codec.Tensor{randTensor(rng, "e\u00e9\n", codec.F32, 0)}, map[string]string{})
	u8 := make([]byte, 8)
	for _, h := range []string{
		`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"__metadata__":{"k":"v"}}`,
		`{"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`,
		`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`,
		`{"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}}`,
		`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}}`,
		`{"__metadata__":{"k":1}}`,
		`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`,
		"{\"a\\u00e9\\ud800\":{\"dtype\":\"U8\",\"shape\":[2,4],\"data_offsets\":[0,8]}}  \t\n",
	} {
		seeds = append(seeds, stFile(h, u8))
	}
	return seeds
}

// npySeeds are valid and malformed .npy files, numpy's own among them when
// the reference vectors are there.
func npySeeds(t testing.TB) [][]byte {
	rng := rand.New(rand.NewPCG(23, 24))
	var seeds [][]byte
	for i, dt := range npyDTypes {
		var buf bytes.Buffer
		if err := WriteNpy(&buf, randTensor(rng, "", dt, testShapes[i%len(testShapes)]...), WithNpyVersion(i%4)); err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, buf.Bytes())
	}
	for _, d := range []string{
		"{'shape': (2,), 'descr': '<i2', 'fortran_order': False}",
		"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
		"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
		"{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 1), }",
	} {
		seeds = append(seeds, npyFile(1, d, make([]byte, 16)))
	}
	files, _ := filepath.Glob(filepath.Join(referenceNpyDir, "*.npy"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && len(b) <= 4096 {
			seeds = append(seeds, b)
		}
	}
	return seeds
}

// FuzzSafetensors opens any input. It must not panic, must fail only with
// the package's errors, and what opens must read, copy through the raw
// header byte for byte, rewrite and reopen to the same tensors; a canonical
// file must be what WriteSafetensors writes.
func FuzzSafetensors(f *testing.F) {
	for _, s := range stSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := OpenSafetensors(bytes.NewReader(data), int64(len(data)), fuzzLimits)
		if err != nil {
			if !wrapsSentinel(err) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		tensors := make([]*codec.Tensor, s.Len())
		for i := range tensors {
			if tensors[i], err = s.ReadIndex(i); err != nil {
				t.Fatal(err)
			}
		}
		rawCopy(t, s, data)

		var buf bytes.Buffer
		if err := WriteSafetensors(&buf, tensors, s.Metadata(), WithKeepOrder(true), rewriteLimits); err != nil {
			t.Fatal(err)
		}
		s2, err := OpenSafetensors(bytes.NewReader(buf.Bytes()), int64(buf.Len()), rewriteLimits)
		if err != nil {
			t.Fatalf("rewritten file does not open: %v", err)
		}
		if s2.Len() != len(tensors) || !sameMeta(s.Metadata(), s2.Metadata()) {
			t.Fatalf("rewrite: %d tensors, metadata %q; want %d, %q", s2.Len(), s2.Metadata(), len(tensors), s.Metadata())
		}
		for i, want := range tensors {
			got, err := s2.ReadIndex(i)
			if err != nil {
				t.Fatal(err)
			}
			sameTensor(t, "rewrite", want, got)
		}
		if s.Canonical() {
			buf.Reset()
			if err := WriteSafetensors(&buf, tensors, s.Metadata(), rewriteLimits); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), data) {
				t.Fatalf("canonical file not reproduced:\n%q\n%q", buf.Bytes(), data)
			}
		}
	})
}

func sameMeta(a, b map[string]string) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// FuzzNpy reads any input. It must not panic, must fail only with the
// package's errors, and what reads must re-write and re-read to the same
// tensor; a canonical file must be reproduced byte for byte.
func FuzzNpy(f *testing.F) {
	for _, s := range npySeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := ReadNpy(bytes.NewReader(data), fuzzLimits)
		if err != nil {
			if !wrapsSentinel(err) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		h, err := ReadNpyHeader(bytes.NewReader(data), fuzzLimits)
		if err != nil {
			t.Fatalf("ReadNpy succeeded, ReadNpyHeader failed: %v", err)
		}
		if h.DType != x.DType || !slices.Equal(h.Shape, x.Shape) || int64(len(x.Data)) != h.DataSize() {
			t.Fatalf("header %+v, tensor %v %v %d bytes", h, x.DType, x.Shape, len(x.Data))
		}
		var buf bytes.Buffer
		if err := WriteNpy(&buf, x, WithNpyVersion(int(h.Major))); err != nil {
			t.Fatal(err)
		}
		y, err := ReadNpy(bytes.NewReader(buf.Bytes()), fuzzLimits)
		if err != nil {
			t.Fatalf("rewritten file does not read: %v", err)
		}
		sameTensor(t, "rewrite", x, y)
		if h.Canonical {
			if end := h.DataOffset() + h.DataSize(); !bytes.Equal(buf.Bytes(), data[:end]) {
				t.Fatalf("canonical file not reproduced:\n%q\n%q", buf.Bytes(), data[:end])
			}
		}
	})
}
