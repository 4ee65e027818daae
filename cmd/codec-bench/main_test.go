package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// cli runs the command line and returns its exit status and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// mustCLI runs the command line and fails the test unless it succeeds.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := cli(t, args...)
	if code != 0 {
		t.Fatalf("codec-bench %q: exit %d\n%s", args, code, errs)
	}
	return out
}

// weightsFile writes n N(0, 0.02) float32 values and returns the path and
// the bytes.
func weightsFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(r.NormFloat64()*0.02)))
	}
	return writeFile(t, "weights.f32", b), b
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// registered reports whether spec parses in this build (the lossless
// stages may not all exist yet).
func registered(spec string) bool {
	_, err := codec.ParseRecipe(spec)
	return err == nil
}

func TestRunJSON(t *testing.T) {
	in, data := weightsFile(t, 16<<10)
	out := mustCLI(t, "run", "--input", in, "--dtype", "f32", "--format", "json",
		"--min-time", "1ms", "--reps", "1", "--no-external", "--chunk", "16384")
	var rows []row
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	for _, r := range rows {
		if r.Tensor != "weights.f32" || r.DType != "f32" || r.External != "" || r.BytesIn != int64(len(data)) || r.Frames != 4 {
			t.Errorf("row %+v", r)
		}
		if r.BytesOut <= 0 || math.Abs(r.Ratio-float64(r.BytesIn)/float64(r.BytesOut)) > 1e-9 {
			t.Errorf("%q: ratio %v for %d -> %d bytes", r.Chain, r.Ratio, r.BytesIn, r.BytesOut)
		}
		if r.Lossy && strings.HasPrefix(r.Chain, "topk(") {
			// A sparsifier drops 99% of the elements: the error is most of
			// the tensor (bounded by its largest element, about 5 sd) and
			// the frames are small.
			if r.MaxAbsErr <= 0 || r.MaxAbsErr > 0.1 || r.RelL2Err < 0.5 || r.RelL2Err >= 1 || r.Ratio < 30 {
				t.Errorf("%q: max error %v, relative L2 %v, ratio %v", r.Chain, r.MaxAbsErr, r.RelL2Err, r.Ratio)
			}
			continue
		}
		if r.Lossy {
			// Lossy chains: their error is reported, and bounded by the
			// coarsest of them (nf4: half its largest codebook gap times
			// the block maximum, under 0.14 * 5 sd).
			if r.MaxAbsErr <= 0 || r.MaxAbsErr > 0.14*0.1 || r.RelL2Err <= 0 || r.RelL2Err > 0.2 {
				t.Errorf("%q: max error %v, relative L2 %v", r.Chain, r.MaxAbsErr, r.RelL2Err)
			}
			continue
		}
		if r.MaxAbsErr != 0 || r.RelL2Err != 0 {
			t.Errorf("%q: lossless chain with error %v, %v", r.Chain, r.MaxAbsErr, r.RelL2Err)
		}
		// N(0, 0.02) float32 is nearly incompressible: no lossless chain
		// beats the per-plane bound by much or loses more than the headers.
		if r.Ratio < 0.99 || r.Ratio > 1.25 {
			t.Errorf("%q: ratio %v", r.Chain, r.Ratio)
		}
		if r.Chain == "" && r.Ratio > 1 {
			t.Errorf("raw chain: ratio %v", r.Ratio)
		}
		if math.Abs(r.EntropyBound-1.2) > 0.02 || len(r.PlaneBits) != 4 {
			t.Errorf("%q: entropy bound %v, plane bits %v", r.Chain, r.EntropyBound, r.PlaneBits)
		}
		if !(r.CompressMBps > 0) || !(r.DecompressMBps > 0) {
			t.Errorf("%q: speeds %v, %v", r.Chain, r.CompressMBps, r.DecompressMBps)
		}
		// The chain of a row is a spec encode accepts as it is.
		enc := filepath.Join(t.TempDir(), "out.tp")
		mustCLI(t, "encode", "--chain", r.Chain, "--dtype", "f32", in, enc)
		if got := mustCLI(t, "decode", enc, "-"); got != string(data) {
			t.Errorf("%q: encode/decode round trip differs", r.Chain)
		}
	}
}

// The built-in set, scaled down, in CSV.
func TestRunDefaultSet(t *testing.T) {
	out := mustCLI(t, "--elems", "1024", "--min-time", "1ms", "--reps", "2", "--no-external", "--format", "csv")
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 2 || recs[0][0] != "tensor" || recs[0][2] != "chain" {
		t.Fatalf("csv: %q", recs)
	}
	seen := map[string]bool{}
	for _, rec := range recs[1:] {
		seen[rec[0]+"/"+rec[1]] = true
		if rec[0] == "int8" && strings.Contains(rec[2], "shuffle") {
			t.Errorf("shuffle chain on int8: %q", rec)
		}
	}
	for _, want := range []string{"weights/f32", "gradients/f32", "sparse99/f32", "int8/i8", "bf16/bf16", "bias/f32", "layernorm/f32", "scalar/f32", "mlp.fc1.weight/f32", "mlp.fc1.grad/f32"} {
		if !seen[want] {
			t.Errorf("no rows for %s", want)
		}
	}
}

func mustSamples(t *testing.T, n int) []sample {
	t.Helper()
	s, err := defaultSamples(n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDefaultSamples(t *testing.T) {
	for _, s := range mustSamples(t, 4096) {
		if n := elements(s.shape) * s.dtype.Size(); n != len(s.data) {
			t.Errorf("%s: %d bytes for shape %v of %v", s.name, len(s.data), s.shape, s.dtype)
		}
		if s.name == "sparse99" {
			zeros := 0
			for i := 0; i < len(s.data); i += 4 {
				if binary.LittleEndian.Uint32(s.data[i:]) == 0 {
					zeros++
				}
			}
			if f := float64(zeros) / 4096; f < 0.98 || f > 0.995 {
				t.Errorf("sparse99: %.3f zeros", f)
			}
		}
	}
	a, b := mustSamples(t, 1024), mustSamples(t, 1024)
	for i := range a {
		if !bytes.Equal(a[i].data, b[i].data) {
			t.Errorf("%s is not deterministic", a[i].name)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	chains := []string{"", "*:raw"}
	for _, c := range []string{"*:zstd(1)", "shuffle4 | plane3:zstd(1)", "shuffle | bytedelta | *:zstd(1)", "shuffle4 | plane3:huff0 | plane0..2:raw", "*:s2"} {
		if registered(c) {
			chains = append(chains, c)
		}
	}
	in, data := weightsFile(t, 10000) // not a multiple of the chunk
	text := bytes.Repeat([]byte("tensorpress compresses tensor traffic. "), 3000)
	stream := writeFile(t, "stream.bin", text)
	dir := t.TempDir()
	for _, c := range chains {
		enc, dec := filepath.Join(dir, "t.tp"), filepath.Join(dir, "t.out")
		mustCLI(t, "encode", "--chain", c, "--dtype", "float32", "--chunk", "4096", "--name", "w", in, enc)
		mustCLI(t, "decode", enc, dec)
		if got, _ := os.ReadFile(dec); !bytes.Equal(got, data) {
			t.Errorf("tensor, chain %q: round trip differs", c)
		}
		if strings.Contains(c, "shuffle") {
			continue // a byte stream has 1-byte elements
		}
		// Byte stream, flags after the arguments, output to stdout.
		out := mustCLI(t, "encode", stream, "-", "--chain", c, "--chunk", "1000")
		enc = writeFile(t, "s.tp", []byte(out))
		if got := mustCLI(t, "decode", enc, "-"); got != string(text) {
			t.Errorf("bytes, chain %q: round trip differs", c)
		}
	}
}

func TestInspect(t *testing.T) {
	spec := "shuffle4 | plane3:zstd(1)"
	if !registered(spec) {
		spec = "*:raw"
	}
	in, _ := weightsFile(t, 10000)
	enc := filepath.Join(t.TempDir(), "w.tp")
	mustCLI(t, "encode", "--chain", spec, "--dtype", "f32", "--chunk", "16000", in, enc)
	st, err := os.Stat(enc)
	if err != nil {
		t.Fatal(err)
	}
	var doc inspectDoc
	if err := json.Unmarshal([]byte(mustCLI(t, "inspect", enc)), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Size != st.Size() || doc.Error != "" {
		t.Fatalf("size %d of %d, error %q", doc.Size, st.Size(), doc.Error)
	}
	if n := len(doc.Frames); n != 5 || doc.Frames[0].Type != "hello" || doc.Frames[n-1].Type != "end" {
		t.Fatalf("frames: %+v", doc.Frames)
	}
	var at int64
	for i, f := range doc.Frames {
		if f.Offset != at {
			t.Fatalf("frame %d at %d, want %d", i, f.Offset, at)
		}
		crc := int64(0)
		if f.PayloadCRC {
			crc = 4
		}
		seg := f.Offset + int64(f.HeaderLen)
		for _, e := range f.Entries {
			if e.Name != "weights.f32" || e.DType != "f32" || len(e.Shape) != 1 || e.Shape[0] != 10000 || e.ChunkOffset != int64(4000*(i-1)) {
				t.Errorf("frame %d: entry %+v", i, e)
			}
			for _, s := range e.Segments {
				if s.Offset != seg {
					t.Fatalf("frame %d: segment %q at %d, want %d", i, s.Name, s.Offset, seg)
				}
				seg += s.Length
			}
			for _, s := range e.Steps {
				if !registered(s.Params) {
					t.Errorf("step params %q do not parse", s.Params)
				}
			}
			if spec != "*:raw" && (len(e.Steps) == 0 || e.Steps[0].Params != "shuffle4" || len(e.Segments) != 4) {
				t.Errorf("frame %d: steps %+v segments %+v", i, e.Steps, e.Segments)
			}
		}
		if seg+crc != f.Offset+f.TotalLen || f.HeaderLen+int(f.PayloadLen)+int(crc) != int(f.TotalLen) {
			t.Fatalf("frame %d: segments end at %d, crc %d, frame ends at %d", i, seg, crc, f.Offset+f.TotalLen)
		}
		at += f.TotalLen
	}
	if at != st.Size() {
		t.Fatalf("frames add up to %d bytes, file has %d", at, st.Size())
	}

	// Truncated files, in a frame and at a frame boundary before the end
	// frame: the frames read so far, an error, exit status 1.
	b, _ := os.ReadFile(enc)
	endLen := int(doc.Frames[len(doc.Frames)-1].TotalLen)
	for _, cut := range []int{1, endLen, endLen + 1, len(b) - 20} {
		short := writeFile(t, "short.tp", b[:len(b)-cut])
		code, out, errs := cli(t, "inspect", short)
		if code != 1 || !strings.Contains(out, `"error"`) || !strings.Contains(errs, "unexpected EOF") {
			t.Errorf("cut %d bytes: exit %d, stderr %q", cut, code, errs)
		}
	}
}

func TestErrors(t *testing.T) {
	in, _ := weightsFile(t, 100)
	odd := writeFile(t, "odd.bin", []byte{1, 2, 3, 4, 5})
	garbage := writeFile(t, "garbage.tp", []byte("this is not a frame stream"))
	missing := filepath.Join(t.TempDir(), "missing")
	enc := filepath.Join(t.TempDir(), "ok.tp")
	mustCLI(t, "encode", "--chain", "", "--dtype", "f32", in, enc)
	b, _ := os.ReadFile(enc)
	truncated := writeFile(t, "trunc.tp", b[:len(b)-7])
	// The last 16 of 100 float32 elements of a tensor, on their own.
	x := codec.NewTensor("w", codec.F32, 100)
	x.Data, x.Offset = x.Data[84*4:], 84
	enc0, _ := codec.NewEncoder()
	last, err := enc0.AppendTensor(nil, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	lastChunk := writeFile(t, "last.tp", last)
	out := filepath.Join(t.TempDir(), "out")

	for _, tc := range []struct {
		code int
		args []string
		want string // in stderr
	}{
		{2, []string{"nosuch"}, "unknown command"},
		{2, []string{"run", "--format", "xml"}, "xml"},
		{2, []string{"run", "--chains", "nosuch(1)"}, "unknown stage"},
		{2, []string{"run", "--chains", " ; "}, "no spec"},
		{2, []string{"run", "--reps", "0"}, "reps"},
		{2, []string{"run", "--chunk", "10"}, "chunk"},
		{2, []string{"run", "--dtype", "f32"}, "--input"},
		{2, []string{"run", "--input", in, "--dtype", "f33"}, "unknown dtype"},
		{2, []string{"run", "--bogus"}, "bogus"},
		{2, []string{"run", "extra"}, "argument"},
		{1, []string{"run", "--input", missing, "--dtype", "f32", "--no-external"}, "no such file"},
		{1, []string{"run", "--input", odd, "--dtype", "f32", "--no-external"}, "not a whole number"},
		{2, []string{"encode", in, out}, "--chain is required"},
		{2, []string{"encode", "--chain", "raw(", in, out}, "bad recipe"},
		{2, []string{"encode", "--chain", "", in}, "argument"},
		{2, []string{"encode", "--chain", "", "--name", "x", in, out}, "--name needs --dtype"},
		{1, []string{"encode", "--chain", "", missing, out}, "no such file"},
		{1, []string{"encode", "--chain", "", "--dtype", "f32", odd, out}, "not a whole number"},
		{1, []string{"encode", "--chain", "", in, in}, "also the input"},
		{1, []string{"decode", garbage, out}, "not a tensorpress stream"},
		{1, []string{"decode", lastChunk, out}, "not the start"},
		{1, []string{"decode", truncated, out}, "unexpected EOF"},
		{1, []string{"decode", missing, out}, "no such file"},
		{1, []string{"inspect", garbage}, "not a tensorpress stream"},
		{2, []string{"inspect"}, "argument"},
		{2, []string{"stages", "x"}, "argument"},
	} {
		code, _, errs := cli(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed command left %s behind", out)
	}
	if b2, _ := os.ReadFile(in); len(b2) != 400 {
		t.Errorf("encode onto its input damaged it: %d bytes", len(b2))
	}
	for _, c := range []string{"-h", "help", "run -h", "encode -h", "decode -h", "inspect -h", "stages -h", "help inspect"} {
		if code, _, errs := cli(t, strings.Fields(c)...); code != 0 || !strings.Contains(errs, "Usage") {
			t.Errorf("%q: exit %d, stderr %q", c, code, errs)
		}
	}
}

func TestStages(t *testing.T) {
	out := mustCLI(t, "stages")
	if !strings.Contains(out, "raw") || !strings.Contains(out, "coder") {
		t.Fatalf("stages:\n%s", out)
	}
}

func TestParseZstdBench(t *testing.T) {
	out := "Loading w.raw...       \r\r |-w.raw :  16777216 -> \r |-w.raw :  16777216 ->  15528674 (x1.080),  340.6 MB/s \r" +
		" =-w.raw :  16777216 ->  15528674 (x1.080),  341.2 MB/s, 1037.6 MB/s\r 1#\n"
	in, n, c, d, err := parseZstdBench([]byte(out))
	if err != nil || in != 16777216 || n != 15528674 || c != 341.2 || d != 1037.6 {
		t.Fatalf("got %d %d %v %v %v", in, n, c, d, err)
	}
	if _, _, _, _, err := parseZstdBench([]byte("zstd: error 9")); err == nil {
		t.Fatal("no error for output without a result")
	}
}

// jsonRows parses --format json output.
func jsonRows(t *testing.T, out string) []row {
	t.Helper()
	var rows []row
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	return rows
}

// TestRunTensorFiles: --input takes .npy and .safetensors files (every
// tensor, filtered by --tensors), reports density, and lossy chains
// report their error.
func TestRunTensorFiles(t *testing.T) {
	dir := t.TempDir()
	w := make([]float32, 4096)
	for i := range w {
		if i%10 == 0 {
			w[i] = float32(i%7+1) * 0.01
		}
	}
	a := codec.FromFloat32("layer.a", w, 64, 64)
	b := codec.FromFloat32("layer.b", w[:100], 100)
	c := codec.FromFloat32("other", w[:10], 10)
	st := filepath.Join(dir, "m.safetensors")
	f, err := os.Create(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := tensorfile.WriteSafetensors(f, []*codec.Tensor{a, b, c}, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	npy := filepath.Join(dir, "w.npy")
	if f, err = os.Create(npy); err != nil {
		t.Fatal(err)
	}
	if err := tensorfile.WriteNpy(f, a); err != nil {
		t.Fatal(err)
	}
	f.Close()

	chains := "*:zstd(1); sparse | val:shuffle | *:huff0"
	lossy := registered("fp16")
	if lossy {
		chains += "; fp16"
	}
	rows := jsonRows(t, mustCLI(t, "run", "--input", st, "--tensors", "layer.*", "--chains", chains,
		"--format", "json", "--min-time", "1ms", "--reps", "1", "--no-external"))
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.Tensor]++
		if r.Density < 0.099 || r.Density > 0.101 {
			t.Errorf("%s: density %g, want about 0.1", r.Tensor, r.Density)
		}
		if r.Lossy != (r.Chain == "fp16") {
			t.Errorf("%s %q: lossy %v", r.Tensor, r.Chain, r.Lossy)
		}
		if r.Lossy && (r.MaxAbsErr <= 0 || r.MaxAbsErr > 0.06*0x1p-11 || r.RelL2Err <= 0 || r.RelL2Err > 0x1p-11) {
			t.Errorf("%s %q: max error %g, relative L2 %g", r.Tensor, r.Chain, r.MaxAbsErr, r.RelL2Err)
		}
	}
	if seen["other"] != 0 || seen["layer.a"] == 0 || seen["layer.b"] == 0 {
		t.Errorf("rows per tensor: %v", seen)
	}
	rows = jsonRows(t, mustCLI(t, "run", "--input", npy, "--chains", "sparse", "--format", "json", "--min-time", "1ms", "--reps", "1", "--no-external"))
	if len(rows) != 1 || rows[0].Tensor != "w" || rows[0].BytesIn != 4*4096 || rows[0].DType != "f32" {
		t.Errorf("npy rows: %+v", rows)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--input", npy, "--dtype", "f32"}, "carry their own"},
		{[]string{"run", "--input", st, "--tensors", "nomatch*", "--no-external"}, "matches no tensor"},
		{[]string{"run", "--input", filepath.Join(dir, "raw.bin")}, "--dtype"},
	} {
		if code, _, errs := cli(t, tc.args...); code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %q", tc.args, code, errs, tc.want)
		}
	}
	bad := filepath.Join(dir, "bad.npy")
	os.WriteFile(bad, []byte("\x93NUMPY\x01\x00\x10\x00{'descr': '>f4'}"), 0o644)
	if code, _, errs := cli(t, "run", "--input", bad, "--no-external"); code != 1 || !strings.Contains(errs, "bad.npy") {
		t.Errorf("bad npy: exit %d, stderr %q", code, errs)
	}
}

// A lossy chain needs the element type: on a byte stream (no --dtype) it
// is refused, not stored raw; --lossless refuses lossy chains and tags the
// tensor lossless.
func TestEncodeLossyChecks(t *testing.T) {
	in, data := weightsFile(t, 1000)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.tp")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"encode", "--chain", "fp16", in, out}, "need the element type: give --dtype"},
		{[]string{"encode", "--chain", "int8(4096) | *:zstd(1)", in, out}, "lossy stages (int8)"},
		{[]string{"encode", "--chain", "topk(0.01) | idx:delta,bitpack | *:zstd(1)", in, out}, "--dtype"},
		{[]string{"encode", "--lossless", "--dtype", "f32", "--chain", "fp16", in, out}, `--lossless: --chain "fp16" has lossy stages (fp16)`},
		{[]string{"encode", "--lossless", "--chain", "nf4(64) | scale:int8(256)", in, out}, "lossy stages (nf4, int8)"},
	} {
		code, _, errs := cli(t, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Fatalf("%q: a refused command wrote %s", tc.args, out)
		}
	}

	// --lossless with a lossless chain: the frames carry the lossless tag
	// and decode to the input.
	mustCLI(t, "encode", "--lossless", "--dtype", "f32", "--chain", "shuffle4 | plane3:huff0 | plane0..2:raw", in, out)
	var doc inspectDoc
	if err := json.Unmarshal([]byte(mustCLI(t, "inspect", out)), &doc); err != nil {
		t.Fatal(err)
	}
	entries := 0
	for _, f := range doc.Frames {
		for _, e := range f.Entries {
			entries++
			if !e.Lossless {
				t.Errorf("frame at %d: entry %q not tagged lossless", f.Offset, e.Name)
			}
		}
	}
	if entries == 0 {
		t.Error("no tensor entries")
	}
	if got := mustCLI(t, "decode", out, "-"); got != string(data) {
		t.Error("--lossless round trip differs")
	}
	// A lossy chain with --dtype still works without --lossless.
	if registered("fp16") {
		mustCLI(t, "encode", "--dtype", "f32", "--chain", "fp16", in, out)
		if got := mustCLI(t, "decode", out, "-"); len(got) != len(data) {
			t.Errorf("fp16 decoded to %d bytes, want %d", len(got), len(data))
		}
	}
}

// decode and inspect of a file that is not a tensorpress stream say so
// (codec tells from the lead byte, docs/FORMAT.md).
func TestDecodeNotStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"text.tp", []byte("this is not a frame stream")},
		{"gzip.tp", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3}},
		{"zstd.tp", []byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, 4, 0x21, 0, 0, 'a', 'b', 'c', 'd'}},
		{"v2-no-crc.tp", append([]byte{2 << 5, 30, 'T', 'P', 'R', 'S'}, make([]byte, 40)...)},
	} {
		in := writeFile(t, tc.name, tc.data)
		for _, args := range [][]string{{"decode", in, filepath.Join(t.TempDir(), "out")}, {"inspect", in}} {
			code, _, errs := cli(t, args...)
			if code != 1 || !strings.Contains(errs, "not a tensorpress stream") {
				t.Errorf("%s %s: exit %d, stderr %q; want exit 1 and \"not a tensorpress stream\"", args[0], tc.name, code, errs)
			}
		}
	}
}

// The default chains for byte data (uint8 images, int8 weights, byte
// streams) include a byte delta before zstd and a zstd level above 3, and
// run on such data.
func TestByteDefaults(t *testing.T) {
	cs, err := chainList("", false, defaultChains, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []codec.DType{codec.U8, codec.I8, codec.Byte} {
		var delta, high bool
		for _, c := range cs {
			if c.fits != nil && !c.fits(dt) {
				continue
			}
			delta = delta || c.text == "bytedelta | *:zstd(1)"
			var level int
			if _, err := fmt.Sscanf(c.text, "*:zstd(%d)", &level); err == nil && level > 3 {
				high = true
			}
		}
		if !delta || !high {
			t.Errorf("%v: bytedelta | *:zstd(1) in the defaults: %v, a zstd level above 3: %v", dt, delta, high)
		}
	}

	// An image-like byte file: smooth rows, so the byte delta wins.
	img := make([]byte, 64<<10)
	for i := range img {
		img[i] = byte(i%256/2 + i/4096)
	}
	in := writeFile(t, "img.u8", img)
	rows := jsonRows(t, mustCLI(t, "run", "--input", in, "--dtype", "u8", "--format", "json", "--min-time", "1ms", "--reps", "1", "--no-external"))
	ratio := map[string]float64{}
	for _, r := range rows {
		ratio[r.Chain] = r.Ratio
	}
	if ratio["bytedelta | *:zstd(1)"] <= ratio["*:zstd(1)"] || ratio["*:zstd(9)"] == 0 {
		t.Errorf("ratios %v", ratio)
	}
}

// fieldBounds on bfloat16 whose exponent alternates between two values and
// whose sign and mantissa byte is random: order 0 needs a bit for the
// exponent, order 1 next to nothing (the first exponent of each chunk
// aside), so the bounds are 16/9 and 16/8 of the input (order 2 as order
// 1). With the sign and mantissa byte set by the exponent, order 2 and the
// byte given the exponent need next to nothing past the first two elements
// of a chunk.
func TestFieldBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 1 << 20
	data := make([]byte, 2*n)
	for i := range n {
		e, sm := uint16(120+i%2), uint16(rng.Uint32())
		binary.LittleEndian.PutUint16(data[2*i:], sm&0x80<<8|e<<7|sm&0x7f)
	}
	b0, b1, b2 := fieldBounds(codec.BF16, data, codec.DefaultChunkSize)
	if math.Abs(b0-16.0/9) > 0.01 || math.Abs(b1-2) > 0.01 || math.Abs(b2-2) > 0.01 {
		t.Fatalf("bounds %.4f, %.4f, %.4f: want about %.4f, 2 and 2", b0, b1, b2, 16.0/9)
	}
	for i := range n {
		e := uint16(120 + i%2)
		binary.LittleEndian.PutUint16(data[2*i:], e<<7|e&0x7f)
	}
	// (order 1 pays the byte's bit: two values, alike)
	if _, b1, b2 := fieldBounds(codec.BF16, data, codec.DefaultChunkSize); b2 < 1000 || math.Abs(b1-16) > 0.01 {
		t.Fatalf("the byte set by the exponent: bounds %.4f, %.4f, want about 16 and over 1000", b1, b2)
	}
	if b0, b1, b2 := fieldBounds(codec.I32, data, codec.DefaultChunkSize); b0 != 0 || b1 != 0 || b2 != 0 {
		t.Fatalf("int32: bounds %v, %v, %v, want none", b0, b1, b2)
	}
	// float32 and float16 split their fields as fsplit does: constant
	// data has no entropy, so no bound.
	if b0, _, _ := fieldBounds(codec.F32, make([]byte, 4096), codec.DefaultChunkSize); b0 != 0 {
		t.Fatalf("zeros: bound %v", b0)
	}
}
