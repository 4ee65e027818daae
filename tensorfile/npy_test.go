package tensorfile

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// npyDTypes are the dtypes .npy can hold (all but BF16).
var npyDTypes = slices.DeleteFunc(slices.Clone(allDTypes), func(d codec.DType) bool { return d == codec.BF16 })

// TestNpyHeaderBytes checks the preamble against numpy's, written out by
// hand from numpy.lib.format: dict, growth padding, alignment to 64.
func TestNpyHeaderBytes(t *testing.T) {
	pad := func(s string, total int) string {
		return s + strings.Repeat(" ", total-len(s)-1) + "\n"
	}
	cases := []struct {
		dt    codec.DType
		shape []int64
		major int
		want  string
	}{
		{codec.F32, []int64{3, 4}, 0, "\x93NUMPY\x01\x00\x76\x00" + pad("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 118)},
		{codec.F64, nil, 0, "\x93NUMPY\x01\x00\x76\x00" + pad("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 118)},
		{codec.U8, []int64{100000}, 0, "\x93NUMPY\x01\x00\x76\x00" + pad("{'descr': '|u1', 'fortran_order': False, 'shape': (100000,), }", 118)},
		{codec.Bool, []int64{3, 4}, 2, "\x93NUMPY\x02\x00\x74\x00\x00\x00" + pad("{'descr': '|b1', 'fortran_order': False, 'shape': (3, 4), }", 116)},
		{codec.I16, []int64{3, 5}, 3, "\x93NUMPY\x03\x00\x74\x00\x00\x00" + pad("{'descr': '<i2', 'fortran_order': False, 'shape': (3, 5), }", 116)},
		// 14 dimensions: the growth padding (20 spaces) pushes the header
		// from 128 to 192 bytes, as numpy's does.
		{codec.F32, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, 0, "\x93NUMPY\x01\x00\xb6\x00" +
			pad("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14), }", 182)},
	}
	for _, c := range cases {
		got, err := AppendNpyHeader([]byte("prefix"), c.dt, c.shape, c.major)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "prefix"+c.want {
			t.Errorf("%v %v v%d:\n%q\nwant\n%q", c.dt, c.shape, c.major, got[6:], c.want)
		}
		if (len(got)-6)%64 != 0 {
			t.Errorf("%v %v: preamble of %d bytes", c.dt, c.shape, len(got)-6)
		}
	}
	// A header that does not fit version 1.0 moves to 2.0 automatically,
	// and is refused when 1.0 is asked for.
	long := make([]int64, 30000)
	if _, err := AppendNpyHeader(nil, codec.U8, long, 1); !errors.Is(err, codec.ErrLimit) {
		t.Fatalf("v1 with a long header: %v", err)
	}
	got, err := AppendNpyHeader(nil, codec.U8, long, 0)
	if err != nil || got[6] != 2 || len(got)%64 != 0 {
		t.Fatalf("automatic version for a long header: %v, version %d", err, got[6])
	}
	if _, err := AppendNpyHeader(nil, codec.BF16, nil, 0); !errors.Is(err, codec.ErrUnsupported) {
		t.Fatalf("bf16: %v", err)
	}
}

// TestNpyHeaderGolden compares AppendNpyHeader with the preambles numpy
// 1.24 writes (testdata/numpy_headers.tsv, made by gen_numpy_headers.py),
// and reads each back.
func TestNpyHeaderGolden(t *testing.T) {
	golden, err := os.ReadFile("testdata/numpy_headers.tsv")
	if err != nil {
		t.Fatal(err)
	}
	big := WithLimits(Limits{MaxDims: 1 << 20, MaxNpyHeaderSize: 1 << 20})
	n := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(golden)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			t.Fatalf("golden line %q", line)
		}
		dt, err := npyDType(f[0])
		if err != nil {
			t.Fatal(err)
		}
		shape := []int64{}
		if d, count, ok := strings.Cut(f[1], "*"); ok {
			var v, c int64
			fmt.Sscan(d, &v)
			fmt.Sscan(count, &c)
			for range c {
				shape = append(shape, v)
			}
		} else if f[1] != "-" {
			for s := range strings.SplitSeq(f[1], ",") {
				var v int64
				fmt.Sscan(s, &v)
				shape = append(shape, v)
			}
		}
		major := 0
		if f[2] != "auto" {
			fmt.Sscan(f[2], &major)
		}
		got, err := AppendNpyHeader(nil, dt, shape, major)
		if _, ok := byteSize(dt, shape); !ok {
			// No such array can exist (numpy refuses to make one); only the
			// header could be written.
			if !errors.Is(err, codec.ErrCorrupt) {
				t.Errorf("%s %s: overflowing shape gave %v", f[0], f[1], err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s %s v%s: %v", f[0], f[1], f[2], err)
		}
		sum := sha256.Sum256(got)
		if fmt.Sprint(len(got)) != f[3] || hex.EncodeToString(sum[:]) != f[4] {
			t.Errorf("%s %s v%s: %d bytes %x, numpy's: %s bytes %s\n%q", f[0], f[1], f[2], len(got), sum, f[3], f[4], got[:min(len(got), 200)])
			continue
		}
		h, err := ReadNpyHeader(bytes.NewReader(got), big)
		if err != nil || !h.Canonical || h.DType != dt || !slices.Equal(h.Shape, shape) || h.DataOffset() != int64(len(got)) {
			t.Errorf("%s %s v%s: read back %+v, %v", f[0], f[1], f[2], h, err)
		}
		n++
	}
	if n < 300 {
		t.Fatalf("only %d golden headers", n)
	}
}

// TestNpyRoundTrip writes every dtype in several shapes and versions, reads
// it back and writes it again.
func TestNpyRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, dt := range npyDTypes {
		for _, shape := range testShapes {
			for _, major := range []int{0, 1, 2, 3} {
				what := fmt.Sprintf("%v %v v%d", dt, shape, major)
				in := randTensor(rng, "", dt, shape...)
				var buf bytes.Buffer
				if err := WriteNpy(&buf, in, WithNpyVersion(major)); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				file := buf.Bytes()
				h, err := ReadNpyHeader(bytes.NewReader(file))
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if wantMajor := max(major, 1); int(h.Major) != wantMajor || !h.Canonical || h.DataOffset()%64 != 0 {
					t.Fatalf("%s: header %+v", what, h)
				}
				if h.DataOffset()+h.DataSize() != int64(len(file)) {
					t.Fatalf("%s: offset %d + size %d != %d", what, h.DataOffset(), h.DataSize(), len(file))
				}
				got, err := ReadNpy(bytes.NewReader(file))
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				sameTensor(t, what, in, got)
				var again bytes.Buffer
				if err := WriteNpy(&again, got, WithNpyVersion(int(h.Major))); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again.Bytes(), file) {
					t.Fatalf("%s: rewrite differs", what)
				}
			}
		}
	}
}

// TestNpyStream reads arrays back to back from one stream: ReadNpy must not
// read past an array, and a clean end gives io.EOF from ReadNpyHeader.
func TestNpyStream(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var in []*codec.Tensor
	var buf bytes.Buffer
	for i, dt := range npyDTypes {
		x := randTensor(rng, "", dt, int64(i), 3)
		in = append(in, x)
		if err := WriteNpy(&buf, x); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	for i, x := range in {
		got, err := ReadNpy(r)
		if err != nil {
			t.Fatalf("array %d: %v", i, err)
		}
		sameTensor(t, "stream", x, got)
	}
	if _, err := ReadNpyHeader(r); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	_, err := ReadNpy(r)
	checkErr(t, "empty", err, []error{io.ErrUnexpectedEOF}, "empty input")
}

// TestNpyReadGrowing reads data larger than the first allocation through a
// reader that returns small pieces.
func TestNpyReadGrowing(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	in := randTensor(rng, "", codec.U8, npyFirstRead*2+12345)
	var buf bytes.Buffer
	if err := WriteNpy(&buf, in); err != nil {
		t.Fatal(err)
	}
	got, err := ReadNpy(io.LimitReader(&buf, int64(buf.Len())))
	if err != nil {
		t.Fatal(err)
	}
	sameTensor(t, "growing", in, got)
	// Truncated large data reports how much arrived.
	buf.Reset()
	_ = WriteNpy(&buf, in)
	_, err = ReadNpy(bytes.NewReader(buf.Bytes()[:buf.Len()-1]))
	checkErr(t, "truncated large", err, []error{io.ErrUnexpectedEOF}, fmt.Sprintf("%d of %d bytes", len(in.Data)-1, len(in.Data)))
}

// TestNpyAccepts reads headers numpy accepts but does not write.
func TestNpyAccepts(t *testing.T) {
	four := []byte{1, 2, 3, 4}
	cases := []struct {
		name, dict string
		major      byte
		dt         codec.DType
		shape      []int64
	}{
		{"key order", "{'shape': (2,), 'descr': '<i2', 'fortran_order': False}", 1, codec.I16, []int64{2}},
		{"no trailing comma, 16-byte alignment", "{'descr': '<u2', 'fortran_order': False, 'shape': (2,)}      \n", 1, codec.U16, []int64{2}},
		{"double quotes", `{"descr": "|u1", "fortran_order": False, "shape": (2, 2)}`, 1, codec.U8, []int64{2, 2}},
		{"native order", "{'descr': '=f4', 'fortran_order': False, 'shape': ()}", 1, codec.F32, []int64{}},
		{"no order", "{'descr': 'i4', 'fortran_order': False, 'shape': (1,)}", 1, codec.I32, []int64{1}},
		{"not-applicable order on f4", "{'descr': '|f4', 'fortran_order': False, 'shape': (1,)}", 1, codec.F32, []int64{1}},
		{"little u1", "{'descr': '<u1', 'fortran_order': False, 'shape': (4,)}", 1, codec.U8, []int64{4}},
		{"big-endian byte", "{'descr': '>i1', 'fortran_order': False, 'shape': (4,)}", 1, codec.I8, []int64{4}},
		{"tuple trailing comma", "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 2,), }", 2, codec.I16, []int64{1, 2}},
		{"python 2 long", "{'descr': '<i2', 'fortran_order': False, 'shape': (2L,), }", 1, codec.I16, []int64{2}},
		{"whitespace", "\t{ 'descr' :'<i2' ,\n'fortran_order':False,'shape':( 2 , ) , }\r\n", 3, codec.I16, []int64{2}},
		{"no padding newline", "{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }", 1, codec.I16, []int64{2}},
	}
	for _, c := range cases {
		file := npyFile(c.major, c.dict, four)
		h, err := ReadNpyHeader(bytes.NewReader(file))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if h.DType != c.dt || !slices.Equal(h.Shape, c.shape) || h.Canonical {
			t.Fatalf("%s: got %v %v canonical %v", c.name, h.DType, h.Shape, h.Canonical)
		}
		got, err := ReadNpy(bytes.NewReader(file))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(got.Data, four[:got.NumBytes()]) || got.Name != "" {
			t.Fatalf("%s: data %v", c.name, got.Data)
		}
	}
}

// TestNpyMalformed checks that each malformed file gives its error.
func TestNpyMalformed(t *testing.T) {
	dict := func(descr, fortran, shape string) string {
		return fmt.Sprintf("{'descr': %s, 'fortran_order': %s, 'shape': %s, }", descr, fortran, shape)
	}
	okDict := dict("'<f4'", "False", "(2,)")
	good := npyFile(1, okDict, make([]byte, 8))
	corrupt := []error{codec.ErrCorrupt}
	unsup := []error{codec.ErrUnsupported}
	cases := []struct {
		name string
		file []byte
		opts []Option
		want []error
		sub  string
	}{
		{"empty", nil, nil, []error{io.ErrUnexpectedEOF}, "empty input"},
		{"short magic", []byte("\x93NUM"), nil, []error{io.ErrUnexpectedEOF}, "in the magic string (4 of 8 bytes)"},
		{"bad magic", []byte("\x93NUMPZ\x01\x00\x00\x00"), nil, corrupt, "not an npy file"},
		{"version 4.0", npyFile(4, okDict, nil), nil, unsup, "format version 4.0"},
		{"version 1.1", append([]byte("\x93NUMPY\x01\x01"), good[8:]...), nil, unsup, "format version 1.1"},
		{"short length", good[:9], nil, []error{io.ErrUnexpectedEOF}, "in the header length (1 of 2 bytes)"},
		{"header over limit", []byte("\x93NUMPY\x02\x00\x00\x00\x10\x00"), nil, []error{codec.ErrLimit}, "header of 1048576 bytes is over the limit of 65536"},
		{"header over a set limit", good, []Option{WithLimits(Limits{MaxNpyHeaderSize: 16})}, []error{codec.ErrLimit}, "over the limit of 16"},
		{"truncated header", good[:40], nil, []error{io.ErrUnexpectedEOF}, "in the header (30 of"},
		{"truncated data", good[:len(good)-3], nil, []error{io.ErrUnexpectedEOF}, "input ends in the data: 5 of 8 bytes"},
		{"big-endian", npyFile(1, dict("'>f4'", "False", "(2,)"), nil), nil, unsup, `big-endian dtype ">f4"`},
		{"fortran", npyFile(1, dict("'<f4'", "True", "(2,)"), nil), nil, unsup, "np.ascontiguousarray"},
		{"object", npyFile(1, dict("'|O'", "False", "(2,)"), nil), nil, unsup, `object dtype (pickled Python objects) "|O"`},
		{"structured", npyFile(1, dict("[('a', '<i4'), ('b', '<f4')]", "False", "(2,)"), nil), nil, unsup, "structured dtype"},
		{"complex", npyFile(1, dict("'<c8'", "False", "(2,)"), nil), nil, unsup, `complex dtype "<c8"`},
		{"unicode", npyFile(1, dict("'<U5'", "False", "(2,)"), nil), nil, unsup, `unicode string dtype "<U5"`},
		{"bytes", npyFile(1, dict("'|S3'", "False", "(2,)"), nil), nil, unsup, "byte string dtype"},
		{"datetime", npyFile(1, dict("'<M8[ns]'", "False", "(2,)"), nil), nil, unsup, "datetime dtype"},
		{"long double", npyFile(1, dict("'<f16'", "False", "(2,)"), nil), nil, unsup, `float dtype of this size "<f16"`},
		{"empty descr", npyFile(1, dict("''", "False", "(2,)"), nil), nil, unsup, `dtype "" is not supported`},
		{"descr not a string", npyFile(1, dict("4", "False", "(2,)"), nil), nil, corrupt, "want a string"},
		{"missing colon", npyFile(1, "{'descr' '<f4'}", nil), nil, corrupt, `want ':'`},
		{"missing brace", npyFile(1, "'descr': '<f4'", nil), nil, corrupt, `want '{'`},
		{"unterminated", npyFile(1, "{'descr': '<f4", nil), nil, corrupt, "unterminated string"},
		{"escape", npyFile(1, `{'descr': '<f\4'}`, nil), nil, corrupt, "escape"},
		{"unclosed dict", npyFile(1, "{'descr': '<f4', ", nil), nil, corrupt, "want a string"},
		{"missing comma", npyFile(1, "{'descr': '<f4' 'shape': ()}", nil), nil, corrupt, "want ',' or '}'"},
		{"unknown key", npyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", nil), nil, corrupt, `unexpected key "x"`},
		{"duplicate key", npyFile(1, "{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': ()}", nil), nil, corrupt, "duplicate key 'descr'"},
		{"missing shape", npyFile(1, "{'descr': '<f4', 'fortran_order': False}", nil), nil, corrupt, "no 'shape' key"},
		{"missing descr", npyFile(1, "{'fortran_order': False, 'shape': ()}", nil), nil, corrupt, "no 'descr' key"},
		{"fortran 0", npyFile(1, dict("'<f4'", "0", "(2,)"), nil), nil, corrupt, `fortran_order is "", want True or False`},
		{"fortran lowercase", npyFile(1, dict("'<f4'", "false", "(2,)"), nil), nil, corrupt, `fortran_order is "false"`},
		{"shape not a tuple", npyFile(1, dict("'<f4'", "False", "(5)"), nil), nil, corrupt, "shape (5) is not a tuple; a 1-d shape is written (5,)"},
		{"shape list", npyFile(1, dict("'<f4'", "False", "[5]"), nil), nil, corrupt, "shape is not a tuple"},
		{"shape bad separator", npyFile(1, dict("'<f4'", "False", "(5; 2)"), nil), nil, corrupt, "want ',' or ')' in shape"},
		{"shape empty element", npyFile(1, dict("'<f4'", "False", "(,)"), nil), nil, corrupt, "want an integer"},
		{"negative dim", npyFile(1, dict("'<f4'", "False", "(2, -3)"), nil), nil, corrupt, "negative dimension -3"},
		{"leading zero", npyFile(1, dict("'<f4'", "False", "(02,)"), nil), nil, corrupt, "leading zero"},
		{"dim overflow", npyFile(1, dict("'<f4'", "False", "(99999999999999999999,)"), nil), nil, corrupt, "does not fit in 63 bits"},
		{"shape overflow", npyFile(1, dict("'<f8'", "False", "(4611686018427387904, 8)"), nil), nil, corrupt, "overflows"},
		{"long suffix in v3", npyFile(3, dict("'<f4'", "False", "(2L,)"), nil), nil, corrupt, "want ',' or ')' in shape"},
		{"too many dims", npyFile(1, dict("'<f4'", "False", "(1, 1, 1)"), nil), []Option{WithLimits(Limits{MaxDims: 2})}, []error{codec.ErrLimit}, "more than 2 dimensions"},
		{"trailing characters", npyFile(1, okDict+" x", nil), nil, corrupt, "trailing characters after the dict"},
		{"NUL padding", npyFile(1, okDict+"\x00\x00", nil), nil, corrupt, "trailing characters"},
		{"data over limit", npyFile(1, dict("'<f4'", "False", "(1099511627776,)"), nil), nil, []error{codec.ErrLimit}, "data of 4398046511104 bytes"},
		{"data over a set limit", good, []Option{WithLimits(Limits{MaxTensorBytes: 7})}, []error{codec.ErrLimit}, "over the limit of 7"},
		{"v3 not UTF-8", npyFile(3, "{'descr': '<f4\xff', 'fortran_order': False, 'shape': (), }", nil), nil, corrupt, "not valid UTF-8"},
	}
	for _, c := range cases {
		tt, err := ReadNpy(bytes.NewReader(c.file), c.opts...)
		if tt != nil {
			t.Errorf("%s: got a tensor with the error", c.name)
		}
		checkErr(t, c.name, err, c.want, c.sub)
	}
}

func TestNpyWriteErrors(t *testing.T) {
	if err := WriteNpy(io.Discard, nil); err == nil {
		t.Fatal("nil tensor accepted")
	}
	if err := WriteNpy(io.Discard, codec.NewTensor("", codec.BF16, 2)); !errors.Is(err, codec.ErrUnsupported) {
		t.Fatalf("bf16: %v", err)
	}
	if err := WriteNpy(io.Discard, &codec.Tensor{DType: codec.F32, Shape: []int64{2}, Data: make([]byte, 4)}); err == nil {
		t.Fatal("short data accepted")
	}
	if err := WriteNpy(io.Discard, &codec.Tensor{DType: codec.F32, Shape: []int64{-2}}); !errors.Is(err, codec.ErrCorrupt) {
		t.Fatalf("negative shape: %v", err)
	}
	if err := WriteNpy(io.Discard, codec.NewTensor("", codec.F32, 2), WithNpyVersion(4)); err == nil {
		t.Fatal("version 4 accepted")
	}
	if err := WriteNpy(&errWriter{n: 10}, codec.NewTensor("", codec.F32, 2)); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("write error: %v", err)
	}
	if err := WriteNpy(&errWriter{n: 130}, codec.NewTensor("", codec.F32, 2)); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("data write error: %v", err)
	}
}

// referenceNpyDir holds .npy files written by numpy itself
// (testvectors/reference/gen.py) and their MANIFEST.tsv.
const referenceNpyDir = "../testvectors/reference/npy"

// TestNpyReference walks the manifest of numpy-written files: each "ok"
// file must load with the manifest's descr, shape and SHA-256 of its C-order
// data, and WriteNpy must reproduce it byte for byte; each "error" file must
// be refused with an error (never a panic).
func TestNpyReference(t *testing.T) {
	manifest, err := os.ReadFile(filepath.Join(referenceNpyDir, "MANIFEST.tsv"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no reference vectors in " + referenceNpyDir)
	}
	if err != nil {
		t.Fatal(err)
	}
	var nOK, nErr int
	for line := range strings.SplitSeq(strings.TrimSpace(string(manifest)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 3 {
			t.Fatalf("manifest line %q", line)
		}
		file, err := os.ReadFile(filepath.Join(referenceNpyDir, f[0]))
		if err != nil {
			t.Fatal(err)
		}
		switch f[1] {
		case "ok":
			if len(f) != 5 {
				t.Fatalf("manifest line %q", line)
			}
			nOK++
			h, err := ReadNpyHeader(bytes.NewReader(file))
			if err != nil {
				t.Errorf("%s: %v", f[0], err)
				continue
			}
			x, err := ReadNpy(bytes.NewReader(file))
			if err != nil {
				t.Errorf("%s: %v", f[0], err)
				continue
			}
			sum := sha256.Sum256(x.Data)
			if h.Descr != f[2] || shapeString(x.Shape) != f[3] || hex.EncodeToString(sum[:]) != f[4] {
				t.Errorf("%s: got %s %s %x, manifest says %s %s %s", f[0], h.Descr, shapeString(x.Shape), sum, f[2], f[3], f[4])
			}
			if !h.Canonical {
				t.Errorf("%s: numpy's header is not canonical", f[0])
			}
			var out bytes.Buffer
			if err := WriteNpy(&out, x, WithNpyVersion(int(h.Major))); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), file) {
				t.Errorf("%s: WriteNpy differs from numpy:\n%q\n%q", f[0], out.Bytes()[:min(out.Len(), 160)], file[:min(len(file), 160)])
			}
			if h.Major == 1 {
				// Automatic version picks 1.0 as np.save does.
				out.Reset()
				if err := WriteNpy(&out, x); err != nil || !bytes.Equal(out.Bytes(), file) {
					t.Errorf("%s: WriteNpy with the automatic version differs", f[0])
				}
			}
		case "error":
			nErr++
			_, err := ReadNpy(bytes.NewReader(file))
			if err == nil {
				t.Errorf("%s (%s): read without error", f[0], f[2])
				continue
			}
			if !wrapsSentinel(err) {
				t.Errorf("%s (%s): error %v wraps no sentinel", f[0], f[2], err)
			}
			want := codec.ErrUnsupported
			if strings.Contains(f[2], "truncated") {
				want = io.ErrUnexpectedEOF
			}
			if !errors.Is(err, want) {
				t.Errorf("%s (%s): error %v, want %v", f[0], f[2], err, want)
			}
			t.Logf("%s (%s): %v", f[0], f[2], err)
		default:
			t.Fatalf("manifest line %q: status %q", line, f[1])
		}
	}
	if nOK == 0 || nErr == 0 {
		t.Fatalf("manifest has %d ok and %d error files", nOK, nErr)
	}
}
