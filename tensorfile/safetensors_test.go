package tensorfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

func f32Bytes(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// TestSafetensorsReferenceGolden checks the writer against the bytes the
// reference implementation's own tests expect (huggingface/safetensors,
// safetensors/src/tensor.rs: test_serialization, test_empty,
// test_serialization_forced_alignement).
func TestSafetensorsReferenceGolden(t *testing.T) {
	data := f32Bytes(0, 1, 2, 3, 4, 5)
	cases := []struct {
		name    string
		tensors []*codec.Tensor
		meta    map[string]string
		n       uint64
		header  string
		data    []byte
	}{
		{"serialization", []*codec.Tensor{{Name: "attn.0", DType: codec.F32, Shape: []int64{1, 2, 3}, Data: data}}, nil,
			64, `{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`, data},
		{"empty", nil, nil, 8, `{}      `, nil},
		{"empty-metadata", nil, map[string]string{"framework": "pt"},
			40, `{"__metadata__":{"framework":"pt"}}     `, nil},
		{"forced-alignment", []*codec.Tensor{{Name: "attn0", DType: codec.F32, Shape: []int64{1, 1, 2, 3}, Data: data}}, nil,
			72, `{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       `, data},
	}
	for _, c := range cases {
		want := binary.LittleEndian.AppendUint64(nil, c.n)
		want = append(want, c.header...)
		want = append(want, c.data...)
		var buf bytes.Buffer
		if err := WriteSafetensors(&buf, c.tensors, c.meta); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("%s: wrote\n%q\nwant\n%q", c.name, buf.Bytes(), want)
		}
		s, err := OpenSafetensors(bytes.NewReader(want), int64(len(want)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !s.Canonical() {
			t.Errorf("%s: reference output not canonical", c.name)
		}
		if s.Len() != len(c.tensors) {
			t.Fatalf("%s: %d tensors, want %d", c.name, s.Len(), len(c.tensors))
		}
		for i, tt := range c.tensors {
			got, err := s.ReadIndex(i)
			if err != nil {
				t.Fatal(err)
			}
			sameTensor(t, c.name, tt, got)
		}
	}
}

// TestSafetensorsReferenceOrder checks the layout rule of the reference
// writer: dtype descending in enum order, then name.
func TestSafetensorsReferenceOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var in []*codec.Tensor
	// Names chosen so that name order and dtype order disagree.
	for i, dt := range allDTypes {
		in = append(in, randTensor(rng, fmt.Sprintf("t%02d", len(allDTypes)-i), dt, 3))
		in = append(in, randTensor(rng, fmt.Sprintf("a%02d", i), dt, 2))
	}
	in = append(in, randTensor(rng, "B", codec.F32, 1), randTensor(rng, "b", codec.F32, 1), randTensor(rng, "é", codec.F32, 1))
	var buf bytes.Buffer
	if err := WriteSafetensors(&buf, in, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSafetensors(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	wantDTypes := []codec.DType{codec.U64, codec.I64, codec.F64, codec.F32, codec.U32, codec.I32,
		codec.BF16, codec.F16, codec.U16, codec.I16, codec.I8, codec.U8, codec.Bool}
	var got []string
	prev := codec.DType(255)
	di := -1
	for _, ti := range s.Tensors() {
		if ti.DType != prev {
			di++
			prev = ti.DType
			if di >= len(wantDTypes) || ti.DType != wantDTypes[di] {
				t.Fatalf("dtype order: %v at group %d", ti.DType, di)
			}
		}
		if ti.DType == codec.F32 {
			got = append(got, ti.Name)
		}
	}
	if want := []string{"B", "a09", "b", "t04", "é"}; !slices.Equal(got, want) {
		t.Fatalf("F32 names in order %q, want %q", got, want)
	}
	if !s.Canonical() {
		t.Fatal("writer output not canonical")
	}
}

// TestSafetensorsRoundTrip writes every dtype in several shapes, reads the
// file back and writes it again: tensors and bytes must be identical.
func TestSafetensorsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	metas := []map[string]string{nil, {}, {"format": "pt"}, {"b": "2", "a": "1", "quote\"\n": "\x01é/<>&\u2028"}}
	for mi, meta := range metas {
		var in []*codec.Tensor
		for _, dt := range allDTypes {
			for si, shape := range testShapes {
				in = append(in, randTensor(rng, fmt.Sprintf("%v/%d", dt, si), dt, shape...))
			}
		}
		for _, keep := range []bool{false, true} {
			what := fmt.Sprintf("meta %d keep %v", mi, keep)
			var buf bytes.Buffer
			if err := WriteSafetensors(&buf, in, meta, WithKeepOrder(keep)); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			file := buf.Bytes()
			if binary.LittleEndian.Uint64(file)%8 != 0 {
				t.Fatalf("%s: header not padded to 8", what)
			}
			s, err := OpenSafetensors(bytes.NewReader(file), int64(len(file)))
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if s.Canonical() == keep {
				t.Fatalf("%s: Canonical() = %v", what, s.Canonical())
			}
			if got := s.Metadata(); (got == nil) != (meta == nil) || len(got) != len(meta) {
				t.Fatalf("%s: metadata %v, want %v", what, got, meta)
			}
			for k, v := range meta {
				if s.Metadata()[k] != v {
					t.Fatalf("%s: metadata[%q] = %q, want %q", what, k, s.Metadata()[k], v)
				}
			}
			var back []*codec.Tensor
			for i := range s.Len() {
				got, err := s.ReadIndex(i)
				if err != nil {
					t.Fatal(err)
				}
				want := in[slices.IndexFunc(in, func(x *codec.Tensor) bool { return x.Name == got.Name })]
				sameTensor(t, what, want, got)
				byName, err := s.Read(got.Name)
				if err != nil {
					t.Fatal(err)
				}
				sameTensor(t, what+" by name", want, byName)
				back = append(back, got)
			}
			if keep {
				for i, x := range in {
					if back[i].Name != x.Name {
						t.Fatalf("%s: order not kept at %d: %q", what, i, back[i].Name)
					}
				}
			}
			var again bytes.Buffer
			if err := WriteSafetensors(&again, back, s.Metadata(), WithKeepOrder(keep)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again.Bytes(), file) {
				t.Fatalf("%s: rewrite differs", what)
			}
			if !keep {
				// The reference order does not depend on the input order.
				slices.Reverse(back)
				again.Reset()
				if err := WriteSafetensors(&again, back, s.Metadata()); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again.Bytes(), file) {
					t.Fatalf("%s: rewrite of reversed input differs", what)
				}
			}
			rawCopy(t, s, file)
		}
	}
}

// rawCopy writes s back from its raw header and sections and checks the
// result is file.
func rawCopy(t *testing.T, s *Safetensors, file []byte) {
	t.Helper()
	var out bytes.Buffer
	sw, err := NewSafetensorsWriterFromHeader(&out, s.RawHeader())
	if err != nil {
		t.Fatal(err)
	}
	for i := range s.Len() {
		sec, err := s.Section(i)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(sw, sec); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), file) {
		t.Fatalf("raw-header copy differs:\n%q\n%q", out.Bytes(), file)
	}
}

// TestSafetensorsNonCanonical reads files the reference accepts but does not
// write, and reproduces them through the raw header.
func TestSafetensorsNonCanonical(t *testing.T) {
	i32 := []byte{1, 0, 0, 0, 2, 0, 0, 0}
	cases := []struct {
		name, header string
		data         []byte
		names        []string
		meta         map[string]string
	}{
		{"whitespace", "{\"a\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [0, 8]}}\n", i32, nil, nil},
		{"name order", `{"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`,
			i32, []string{"a", "b"}, nil},
		{"data order not reference", `{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}}`,
			i32, []string{"a", "b"}, nil},
		{"field order", `{"a":{"shape":[2],"data_offsets":[0,8],"dtype":"I32"}}`, i32, []string{"a"}, nil},
		{"metadata last, unsorted", `{"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"z":"1","a":"\u00e9\/"}}`,
			i32, []string{"a"}, map[string]string{"z": "1", "a": "é/"}},
		{"metadata null", `{"__metadata__":null,"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}`, i32, []string{"a"}, nil},
		{"empty tensors", `{"e2":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"e1":{"dtype":"F64","shape":[3,0],"data_offsets":[0,0]}}`,
			i32, []string{"e1", "a", "e2"}, nil},
		{"NUL-free padding of tabs", "{}\t\t\t\t\t\t", nil, []string{}, nil},
	}
	for _, c := range cases {
		file := stFile(c.header, c.data)
		s, err := OpenSafetensors(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.Canonical() {
			t.Errorf("%s: Canonical() = true", c.name)
		}
		if c.names != nil {
			var names []string
			for _, ti := range s.Tensors() {
				names = append(names, ti.Name)
			}
			if !slices.Equal(names, c.names) && !(len(names) == 0 && len(c.names) == 0) {
				t.Errorf("%s: file order %q, want %q", c.name, names, c.names)
			}
		}
		if c.meta != nil {
			for k, v := range c.meta {
				if s.Metadata()[k] != v {
					t.Errorf("%s: metadata[%q] = %q, want %q", c.name, k, s.Metadata()[k], v)
				}
			}
		} else if s.Metadata() != nil {
			t.Errorf("%s: metadata %v, want nil", c.name, s.Metadata())
		}
		rawCopy(t, s, file)
	}
}

// TestSafetensorsMalformed checks that each malformed file gives its error.
func TestSafetensorsMalformed(t *testing.T) {
	u8x8 := make([]byte, 8)
	ent := func(name, dtype, shape string, b, e int) string {
		return fmt.Sprintf(`%q:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, name, dtype, shape, b, e)
	}
	a8 := ent("a", "U8", "[8]", 0, 8)
	huge := binary.LittleEndian.AppendUint64(nil, 1<<40)
	corrupt := []error{codec.ErrCorrupt}
	cases := []struct {
		name string
		file []byte
		opts []Option
		want []error
		sub  string
	}{
		{"short file", []byte{1, 2, 3}, nil, []error{codec.ErrCorrupt, io.ErrUnexpectedEOF}, "too short"},
		{"header length huge", append(huge, "{}"...), nil, []error{codec.ErrLimit}, "over the limit"},
		{"header length over a set limit", stFile("{}      ", nil), []Option{WithLimits(Limits{MaxHeaderSize: 4})}, []error{codec.ErrLimit}, "over the limit of 4"},
		{"header past end", stFile("{}", nil)[:9], nil, []error{codec.ErrCorrupt, io.ErrUnexpectedEOF}, "past the end of the file"},
		{"empty header", stFile("", nil), nil, corrupt, "empty header"},
		{"not an object", stFile("[1]", nil), nil, corrupt, "does not start with '{'"},
		{"leading space", stFile(" {}", nil), nil, corrupt, "does not start with '{'"},
		{"bad JSON", stFile(`{"a":{"dtype":"U8",}}`, u8x8), nil, corrupt, "bad JSON"},
		{"truncated JSON", stFile(`{"a":{"dtype":"U8"`, nil), nil, corrupt, "ends early"},
		{"invalid UTF-8", stFile("{\"\xff\":1}", nil), nil, corrupt, "UTF-8"},
		{"garbage after JSON", stFile("{"+a8+"} x", u8x8), nil, corrupt, "invalid character 'x'"},
		{"NUL padding", stFile("{"+a8+"}\x00\x00", u8x8), nil, corrupt, "bad JSON"},
		{"second JSON value", stFile("{}{}", nil), nil, corrupt, "after the header object"},
		{"duplicate tensor", stFile("{"+a8+","+a8+"}", u8x8), nil, corrupt, `duplicate tensor "a"`},
		{"duplicate field", stFile(`{"a":{"dtype":"U8","dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, u8x8), nil, corrupt, `tensor "a": duplicate field "dtype"`},
		{"duplicate metadata", stFile(`{"__metadata__":{},"__metadata__":{}}`, nil), nil, corrupt, `duplicate key "__metadata__"`},
		{"duplicate metadata key", stFile(`{"__metadata__":{"k":"1","k":"2"}}`, nil), nil, corrupt, `duplicate __metadata__ key "k"`},
		{"unknown field", stFile(`{"a":{"dtype":"U8","shape":[8],"offsets":[0,8]}}`, u8x8), nil, corrupt, `tensor "a": unknown field "offsets"`},
		{"missing field", stFile(`{"a":{"dtype":"U8","shape":[8]}}`, u8x8), nil, corrupt, `tensor "a" has no data_offsets`},
		{"tensor not an object", stFile(`{"a":[1]}`, nil), nil, corrupt, `tensor "a" is '[', want an object`},
		{"unsupported dtype F8_E4M3", stFile("{"+ent("w", "F8_E4M3", "[8]", 0, 8)+"}", u8x8), nil, []error{codec.ErrUnsupported}, `tensor "w": dtype F8_E4M3 is not supported`},
		{"unknown dtype", stFile("{"+ent("w", "F17", "[8]", 0, 8)+"}", u8x8), nil, []error{codec.ErrUnsupported}, `unknown dtype "F17"`},
		{"dtype not a string", stFile(`{"a":{"dtype":4,"shape":[8],"data_offsets":[0,8]}}`, u8x8), nil, corrupt, "dtype is number 4"},
		{"dtype mismatch", stFile("{"+ent("a", "F32", "[1]", 0, 8)+"}", u8x8), nil, corrupt, `tensor "a": data_offsets [0, 8] hold 8 bytes, but shape [1] of F32 needs 4`},
		{"negative shape", stFile("{"+ent("a", "U8", "[-8]", 0, 8)+"}", u8x8), nil, corrupt, "-8 is negative"},
		{"fractional shape", stFile("{"+ent("a", "U8", "[8.0]", 0, 8)+"}", u8x8), nil, corrupt, "8.0 is not an integer"},
		{"shape not an array", stFile("{"+ent("a", "U8", "8", 0, 8)+"}", u8x8), nil, corrupt, "shape: want ["},
		{"shape overflow", stFile("{"+ent("a", "F32", "[4294967296,4294967296]", 0, 8)+"}", u8x8), nil, corrupt, "overflows"},
		{"huge number", stFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,99999999999999999999]}}`, u8x8), nil, corrupt, "does not fit"},
		{"offsets reversed", stFile("{"+ent("a", "U8", "[0]", 8, 0)+"}", u8x8), nil, corrupt, "end before they begin"},
		{"three offsets", stFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8,8]}}`, u8x8), nil, corrupt, "more than 2 numbers"},
		{"one offset", stFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0]}}`, u8x8), nil, corrupt, "has 1 numbers, want 2"},
		{"offsets past end", stFile("{"+a8+"}", u8x8[:4]), nil, []error{codec.ErrCorrupt, io.ErrUnexpectedEOF}, `tensor "a": data_offsets [0, 8] reach past the end`},
		{"overlap", stFile("{"+a8+","+ent("b", "U8", "[4]", 4, 8)+"}", u8x8), nil, corrupt, `tensor "b" at data_offsets [4, 8] overlaps tensor "a"`},
		{"empty tensor inside another", stFile("{"+a8+","+ent("e", "U8", "[0]", 4, 4)+"}", u8x8), nil, corrupt, `tensor "e" at data_offsets [4, 4] overlaps tensor "a"`},
		{"hole", stFile("{"+ent("a", "U8", "[2]", 0, 2)+","+ent("b", "U8", "[4]", 4, 8)+"}", u8x8), nil, corrupt, `bytes [2, 4) before tensor "b" belong to no tensor`},
		{"hole at start", stFile("{"+ent("b", "U8", "[4]", 4, 8)+"}", u8x8), nil, corrupt, `bytes [0, 4) before tensor "b"`},
		{"trailing garbage", stFile("{"+a8+"}", append(u8x8, 1, 2, 3)), nil, corrupt, "3 bytes after the last tensor"},
		{"data without tensors", stFile("{}", u8x8), nil, corrupt, "8 bytes after the last tensor"},
		{"non-string metadata", stFile(`{"__metadata__":{"k":1}}`, nil), nil, corrupt, `__metadata__ value of "k" is number 1, want a string`},
		{"nested metadata", stFile(`{"__metadata__":{"k":{"x":"y"}}}`, nil), nil, corrupt, `value of "k" is '{'`},
		{"metadata not an object", stFile(`{"__metadata__":"x"}`, nil), nil, corrupt, `__metadata__ is string "x"`},
		{"too many tensors", stFile("{"+a8+","+ent("b", "U8", "[0]", 8, 8)+"}", u8x8), []Option{WithLimits(Limits{MaxTensors: 1})}, []error{codec.ErrLimit}, "more than 1 tensors"},
		{"too many dims", stFile("{"+ent("a", "U8", "[1,1,8]", 0, 8)+"}", u8x8), []Option{WithLimits(Limits{MaxDims: 2})}, []error{codec.ErrLimit}, "more than 2 dimensions"},
		{"name too long", stFile("{"+ent("abcd", "U8", "[8]", 0, 8)+"}", u8x8), []Option{WithLimits(Limits{MaxNameLen: 3})}, []error{codec.ErrLimit}, "tensor name of 4 bytes"},
		{"metadata key too long", stFile(`{"__metadata__":{"abcd":""}}`, nil), []Option{WithLimits(Limits{MaxNameLen: 3})}, []error{codec.ErrLimit}, "key of 4 bytes"},
	}
	for _, c := range cases {
		s, err := OpenSafetensors(bytes.NewReader(c.file), int64(len(c.file)), c.opts...)
		if s != nil {
			t.Errorf("%s: got a Safetensors with the error", c.name)
		}
		checkErr(t, c.name, err, c.want, c.sub)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Format != "safetensors" {
			t.Errorf("%s: %T is not a safetensors FormatError", c.name, err)
		}
		// The same header through the raw-header writer fails too, unless
		// the problem is the data buffer or the length field.
		if n := len(c.file); n >= 8 && c.opts == nil {
			hl := binary.LittleEndian.Uint64(c.file)
			if hl <= uint64(n-8) && !strings.Contains(c.name, "past end") && !strings.Contains(c.name, "trailing") &&
				!strings.Contains(c.name, "data without") {
				if _, err := NewSafetensorsWriterFromHeader(io.Discard, c.file[8:8+hl]); err == nil {
					t.Errorf("%s: NewSafetensorsWriterFromHeader accepted it", c.name)
				}
			}
		}
	}
}

// TestSafetensorsReadLimit checks that a tensor over MaxTensorBytes is
// refused before allocation but can still be streamed.
func TestSafetensorsReadLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	in := randTensor(rng, "big", codec.F32, 64)
	var buf bytes.Buffer
	if err := WriteSafetensors(&buf, []*codec.Tensor{in}, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSafetensors(bytes.NewReader(buf.Bytes()), int64(buf.Len()), WithLimits(Limits{MaxTensorBytes: 255}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Read("big")
	checkErr(t, "read limit", err, []error{codec.ErrLimit}, `tensor "big": 256 bytes is over the limit of 255`)
	sec, err := s.Section(0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(sec)
	if err != nil || !bytes.Equal(got, in.Data) {
		t.Fatalf("section: %v", err)
	}
	if _, err := s.Read("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing tensor: %v", err)
	}
	if _, err := s.ReadIndex(1); err == nil {
		t.Fatal("ReadIndex(1) of 1 tensor succeeded")
	}
	if _, err := s.Section(-1); err == nil {
		t.Fatal("Section(-1) succeeded")
	}
	if s.Index("big") != 0 || s.Index("nope") != -1 {
		t.Fatal("Index")
	}
}

// shortReaderAt claims a size it does not have.
type shortReaderAt struct{ b []byte }

func (r shortReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(r.b)) {
		return 0, io.EOF
	}
	n := copy(p, r.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func TestSafetensorsLyingSize(t *testing.T) {
	file := stFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, make([]byte, 8))
	s, err := OpenSafetensors(shortReaderAt{file[:len(file)-3]}, int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read("a"); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read of a cut file: %v", err)
	}
	if _, err := OpenSafetensors(shortReaderAt{file[:20]}, int64(len(file))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("open of a cut header: %v", err)
	}
	if _, err := OpenSafetensors(shortReaderAt{file}, -1); err == nil {
		t.Fatal("negative size accepted")
	}
}

// TestSafetensorsWriterStreaming writes data in odd-sized pieces across
// tensor boundaries and checks misuse is caught.
func TestSafetensorsWriterStreaming(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	in := []*codec.Tensor{randTensor(rng, "x", codec.F32, 5, 3), randTensor(rng, "y", codec.I16, 7), randTensor(rng, "z", codec.U8, 0)}
	var want bytes.Buffer
	if err := WriteSafetensors(&want, in, map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	infos := []TensorInfo{{Name: "z", DType: codec.U8, Shape: []int64{0}}, {Name: "y", DType: codec.I16, Shape: []int64{7}, Begin: 99, End: 7},
		{Name: "x", DType: codec.F32, Shape: []int64{5, 3}}}
	var out bytes.Buffer
	sw, err := NewSafetensorsWriter(&out, infos, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	for _, ti := range sw.Tensors() {
		data = append(data, in[slices.IndexFunc(in, func(x *codec.Tensor) bool { return x.Name == ti.Name })].Data...)
	}
	if err := sw.WriteTensor(in[1]); err == nil || !strings.Contains(err.Error(), `tensor "y" starts at data offset 60`) {
		t.Fatalf("out-of-order WriteTensor: %v", err)
	}
	for len(data) > 0 {
		n := min(len(data), 7)
		if _, err := sw.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	if _, err := sw.Write([]byte{0}); err == nil {
		t.Fatal("write past the end accepted")
	}
	if err := sw.WriteTensor(in[2]); err != nil { // empty, at the end
		t.Fatal(err)
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sw.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := sw.Write(nil); err == nil {
		t.Fatal("write after Close accepted")
	}
	if !bytes.Equal(out.Bytes(), want.Bytes()) {
		t.Fatal("streamed file differs from WriteSafetensors")
	}

	// Short close names the incomplete tensor.
	sw, err = NewSafetensorsWriter(io.Discard, infos, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Write(make([]byte, 61)); err != nil {
		t.Fatal(err)
	}
	if err := sw.Close(); err == nil || !strings.Contains(err.Error(), `tensor "y" is incomplete`) {
		t.Fatalf("short Close: %v", err)
	}
	// Wrong tensors for WriteTensor.
	sw, _ = NewSafetensorsWriter(io.Discard, infos, nil)
	for _, bad := range []*codec.Tensor{
		{Name: "q", DType: codec.F32, Shape: []int64{1}, Data: make([]byte, 4)},
		{Name: "x", DType: codec.F64, Shape: []int64{5, 3}, Data: make([]byte, 120)},
		{Name: "x", DType: codec.F32, Shape: []int64{5, 3}, Data: make([]byte, 8)},
	} {
		if err := sw.WriteTensor(bad); err == nil {
			t.Errorf("WriteTensor(%q %v %v, %d bytes) accepted", bad.Name, bad.DType, bad.Shape, len(bad.Data))
		}
	}
}

// errWriter fails after n bytes.
type errWriter struct{ n int }

func (w *errWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		n := w.n
		w.n = 0
		return n, errors.New("disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

func TestSafetensorsWriterErrors(t *testing.T) {
	f := func(name string, dt codec.DType, shape ...int64) TensorInfo {
		return TensorInfo{Name: name, DType: dt, Shape: shape}
	}
	cases := []struct {
		name  string
		infos []TensorInfo
		meta  map[string]string
		opts  []Option
		want  []error
		sub   string
	}{
		{"duplicate", []TensorInfo{f("a", codec.U8, 1), f("a", codec.U8, 1)}, nil, nil, []error{codec.ErrCorrupt}, `duplicate tensor "a"`},
		{"metadata name", []TensorInfo{f("__metadata__", codec.U8, 1)}, nil, nil, []error{codec.ErrCorrupt}, `cannot be named "__metadata__"`},
		{"bytes dtype", []TensorInfo{f("a", codec.Byte, 1)}, nil, nil, []error{codec.ErrUnsupported}, "has no safetensors name"},
		{"unknown dtype", []TensorInfo{f("a", codec.DType(200), 1)}, nil, nil, []error{codec.ErrUnsupported}, "has no safetensors name"},
		{"negative shape", []TensorInfo{f("a", codec.U8, -1)}, nil, nil, []error{codec.ErrCorrupt}, "negative or overflows"},
		{"overflow", []TensorInfo{f("a", codec.F64, 1<<31, 1<<31, 4)}, nil, nil, []error{codec.ErrCorrupt}, "negative or overflows"},
		{"total overflow", []TensorInfo{f("a", codec.U8, 1<<62), f("b", codec.U8, 1<<62)}, nil, nil, []error{codec.ErrLimit}, "2^63"},
		{"bad UTF-8 name", []TensorInfo{f("\xff", codec.U8, 1)}, nil, nil, []error{codec.ErrCorrupt}, "not valid UTF-8"},
		{"bad UTF-8 metadata", nil, map[string]string{"k": "\xff"}, nil, []error{codec.ErrCorrupt}, "not valid UTF-8"},
		{"too many tensors", []TensorInfo{f("a", codec.U8, 1), f("b", codec.U8, 1)}, nil, []Option{WithLimits(Limits{MaxTensors: 1})}, []error{codec.ErrLimit}, "2 tensors"},
		{"too many dims", []TensorInfo{f("a", codec.U8, 1, 1, 1)}, nil, []Option{WithLimits(Limits{MaxDims: 2})}, []error{codec.ErrLimit}, "3 dimensions"},
		{"header too big", []TensorInfo{f("a", codec.U8, 1)}, nil, []Option{WithLimits(Limits{MaxHeaderSize: 16})}, []error{codec.ErrLimit}, "header of 56 bytes would be over"},
	}
	for _, c := range cases {
		_, err := NewSafetensorsWriter(io.Discard, c.infos, c.meta, c.opts...)
		checkErr(t, c.name, err, c.want, c.sub)
	}
	if _, err := NewSafetensorsWriter(io.Discard, nil, nil, WithLimits(Limits{MaxTensors: -1})); err == nil {
		t.Fatal("negative limit accepted")
	}
	if _, err := NewSafetensorsWriter(io.Discard, nil, nil, nil); err == nil {
		t.Fatal("nil option accepted")
	}
	// Write errors are reported and sticky.
	if _, err := NewSafetensorsWriter(&errWriter{n: 3}, nil, nil); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("header write error: %v", err)
	}
	sw, err := NewSafetensorsWriter(&errWriter{n: 68}, []TensorInfo{f("a", codec.U8, 8)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Write(make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("data write error: %v", err)
	}
	if err := sw.Close(); err == nil {
		t.Fatal("Close after a failed write succeeded")
	}
	if err := WriteSafetensors(io.Discard, []*codec.Tensor{nil}, nil); err == nil {
		t.Fatal("nil tensor accepted")
	}
	if err := WriteSafetensors(io.Discard, []*codec.Tensor{{Name: "a", DType: codec.U8, Shape: []int64{4}, Data: make([]byte, 3)}}, nil); err == nil {
		t.Fatal("short tensor data accepted")
	}
}

// TestSafetensorsEscaping checks names and metadata needing JSON escapes
// are written as serde_json writes them and read back unchanged.
func TestSafetensorsEscaping(t *testing.T) {
	name := "a\"b\\c/d\x01\x1f\b\t\n\f\r\x7fé\u2028<>&"
	meta := map[string]string{"k\"": "v\x00"}
	in := []*codec.Tensor{{Name: name, DType: codec.U8, Shape: []int64{1}, Data: []byte{7}}}
	var buf bytes.Buffer
	if err := WriteSafetensors(&buf, in, meta); err != nil {
		t.Fatal(err)
	}
	wantHeader := `{"__metadata__":{"k\"":"v\u0000"},"a\"b\\c/d\u0001\u001f\b\t\n\f\r` + "\x7fé\u2028<>&" + `":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`
	if got := string(buf.Bytes()[8 : 8+len(wantHeader)]); got != wantHeader {
		t.Fatalf("header\n%s\nwant\n%s", got, wantHeader)
	}
	s, err := OpenSafetensors(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Read(name)
	if err != nil {
		t.Fatal(err)
	}
	sameTensor(t, "escaped", in[0], got)
	if s.Metadata()["k\""] != "v\x00" || !s.Canonical() {
		t.Fatalf("metadata %q canonical %v", s.Metadata(), s.Canonical())
	}
}

// TestSafetensorsFileConcurrent reads one file from many goroutines (run
// with -race).
func TestSafetensorsFileConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var in []*codec.Tensor
	for i := range 16 {
		in = append(in, randTensor(rng, fmt.Sprintf("w%d", i), allDTypes[i%len(allDTypes)], int64(i+1), 5))
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSafetensors(f, in, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	sf, err := OpenSafetensorsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8*len(in))
	for g := range 8 {
		wg.Go(func() {
			for i := range in {
				x := in[(i+g)%len(in)]
				got, err := sf.Read(x.Name)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got.Data, x.Data) {
					errs <- fmt.Errorf("tensor %q differs", x.Name)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := OpenSafetensorsFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing file opened")
	}
	bad := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(bad, []byte("not a safetensors file"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = OpenSafetensorsFile(bad)
	if !errors.Is(err, codec.ErrLimit) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("bad file: %v", err)
	}
}
