package fl

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/testvectors"
)

var (
	dataOnce            sync.Once
	dataTrain, dataTest *Dataset
	dataErr             error
	dataTime            time.Duration
)

// raceTrain is the number of training samples the tests load under the
// race detector: as many as TestTrainFashion uses.
const raceTrain = 6000

// fashion returns the Fashion-MNIST sets, loaded once, or skips the test
// when they are not installed. Under the race detector train is only the
// first raceTrain samples.
func fashion(tb testing.TB) (train, test *Dataset) {
	tb.Helper()
	if _, err := os.Stat(DefaultDir); err != nil {
		tb.Skipf("Fashion-MNIST not installed in %s (apt-get install dataset-fashion-mnist)", DefaultDir)
	}
	dataOnce.Do(func() {
		start := time.Now()
		if raceEnabled {
			dataTrain, dataErr = trainPrefix(raceTrain)
			if dataErr == nil {
				dataTest, dataErr = LoadIDX(filepath.Join(DefaultDir, testImages), filepath.Join(DefaultDir, testLabels))
			}
		} else {
			dataTrain, dataTest, dataErr = LoadFashionMNIST(DefaultDir)
		}
		dataTime = time.Since(start)
	})
	if dataErr != nil {
		tb.Fatal(dataErr)
	}
	return dataTrain, dataTest
}

// trainPrefix reads the first n training samples, without the loader's
// checks of the whole file.
func trainPrefix(n int) (*Dataset, error) {
	read := func(name string, header, size int) ([]byte, error) {
		f, err := os.Open(filepath.Join(DefaultDir, name))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, err
		}
		b := make([]byte, header+size)
		_, err = io.ReadFull(zr, b)
		return b[header:], err
	}
	pix, err := read(trainImages, 16, n*ImageSize)
	if err != nil {
		return nil, err
	}
	labels, err := read(trainLabels, 8, n)
	if err != nil {
		return nil, err
	}
	return &Dataset{X: pixels(pix), Y: labels, N: n}, nil
}

// synthetic returns n learnable samples that need no download: each class
// lights a band of pixels, plus noise; about half the pixels are zero.
func synthetic(n int, seed uint64) *Dataset {
	r := rand.New(rand.NewPCG(seed, 99))
	d := &Dataset{X: make([]float32, n*ImageSize), Y: make([]uint8, n), N: n}
	for i := range n {
		c := uint8(r.IntN(NumClasses))
		d.Y[i] = c
		x := d.X[i*ImageSize : (i+1)*ImageSize]
		for j := range x {
			if r.IntN(2) == 0 {
				continue
			}
			v := r.Float32() * 0.5
			if j/78 == int(c) {
				v += 0.5
			}
			x[j] = v
		}
	}
	return d
}

func TestLoadFashionMNIST(t *testing.T) {
	train, test := fashion(t)
	t.Logf("loaded in %v", dataTime)
	for _, c := range []struct {
		name        string
		d           *Dataset
		n           int
		first       []uint8
		perClassLen int
	}{
		{"train", train, 60000, []uint8{9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9}, 6000},
		{"test", test, 10000, []uint8{9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5}, 1000},
	} {
		if err := c.d.Validate(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.d.Y[:len(c.first)], c.first) {
			t.Errorf("%s: first labels %v, want %v", c.name, c.d.Y[:len(c.first)], c.first)
		}
		step := 1
		if c.d.N != c.n {
			if raceEnabled && c.d == train {
				t.Logf("race detector: the training set is checked without -race")
				continue
			}
			t.Fatalf("%s: N = %d, want %d", c.name, c.d.N, c.n)
		}
		if raceEnabled {
			step = 13 // a sample of the pixels
		}
		var hist [NumClasses]int
		for _, y := range c.d.Y {
			hist[y]++
		}
		for k, h := range hist {
			if h != c.perClassLen {
				t.Errorf("%s: class %d has %d samples, want %d", c.name, k, h, c.perClassLen)
			}
		}
		zeros := 0
		for i := 0; i < len(c.d.X); i += step {
			v := c.d.X[i]
			b := math.Round(float64(v) * 255)
			if v != float32(b)/255 || b < 0 || b > 255 {
				t.Fatalf("%s: pixel %v is not byte/255", c.name, v)
			}
			if v == 0 {
				zeros++
			}
		}
		t.Logf("%s: %d samples, %.1f%% zero pixels", c.name, c.d.N, 100*float64(zeros)/float64((len(c.d.X)+step-1)/step))
	}
}

func TestLoadMissing(t *testing.T) {
	dir := t.TempDir()
	_, _, err := LoadFashionMNIST(filepath.Join(dir, "nope"))
	if err == nil || !strings.Contains(err.Error(), "apt-get install dataset-fashion-mnist") {
		t.Errorf("missing dir: %v", err)
	}
	_, _, err = LoadFashionMNIST(dir) // exists, but empty
	if err == nil || !strings.Contains(err.Error(), "train-images-idx3-ubyte.gz not found") ||
		!strings.Contains(err.Error(), "apt-get") {
		t.Errorf("missing files: %v", err)
	}
}

// idx builds an IDX file of unsigned bytes.
func idx(dims []uint32, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0x800|uint32(len(dims)))
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, data...)
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func TestReadIDX(t *testing.T) {
	good := idx([]uint32{2, 3}, []byte{1, 2, 3, 4, 5, 6})
	dims, data, err := readIDX(bytes.NewReader(good), 0x802, 0)
	if err != nil || !slices.Equal(dims, []int{2, 3}) || !slices.Equal(data, []byte{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("good file: %v %v %v", dims, data, err)
	}
	// The head: the first item only, the rest unread.
	dims, data, err = readIDX(bytes.NewReader(append(slices.Clone(good), 9)), 0x802, 1)
	if err != nil || !slices.Equal(dims, []int{1, 3}) || !slices.Equal(data, []byte{1, 2, 3}) {
		t.Fatalf("head 1: %v %v %v", dims, data, err)
	}
	if _, _, err := readIDX(bytes.NewReader(good[:10]), 0x802, 1); err == nil {
		t.Fatal("a truncated head: no error")
	}
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "magic"},
		{"short magic", good[:3], "magic"},
		{"wrong magic", idx([]uint32{6}, []byte{1, 2, 3, 4, 5, 6}), "magic 0x00000801, want 0x00000802"},
		{"float type", append([]byte{0, 0, 0x0d, 2}, good[4:]...), "magic"},
		{"short dims", good[:9], "dimensions"},
		{"zero dim", idx([]uint32{0, 3}, nil), "dimension 0 is 0"},
		{"huge", idx([]uint32{1 << 16, 1 << 16}, nil), "more than"},
		{"truncated", good[:len(good)-1], "truncated: 5 of 6"},
		{"trailing", append(slices.Clone(good), 0), "trailing"},
	} {
		_, _, err := readIDX(bytes.NewReader(c.in), 0x802, 0)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}

func TestLoadIDX(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pix := make([]byte, 2*ImageSize)
	for i := range pix {
		pix[i] = byte(i)
	}
	img := write("img.gz", gz(idx([]uint32{2, 28, 28}, pix)))
	lab := write("lab.gz", gz(idx([]uint32{2}, []byte{7, 0})))
	d, err := LoadIDX(img, lab)
	if err != nil {
		t.Fatal(err)
	}
	if d.N != 2 || !slices.Equal(d.Y, []uint8{7, 0}) || d.X[255] != 1 || d.X[1] != float32(1)/255 || d.X[256] != 0 {
		t.Fatalf("loaded %d samples, labels %v", d.N, d.Y)
	}
	plain := write("img", idx([]uint32{2, 28, 28}, pix)) // not gzip'd
	if _, err := LoadIDX(plain, lab); err != nil {
		t.Fatal(err)
	}
	// A whole (tiny) dataset directory.
	write(trainImages, gz(idx([]uint32{2, 28, 28}, pix)))
	write(trainLabels, gz(idx([]uint32{2}, []byte{7, 0})))
	write(testImages, gz(idx([]uint32{1, 28, 28}, pix[:ImageSize])))
	write(testLabels, gz(idx([]uint32{1}, []byte{3})))
	tr, te, err := LoadFashionMNIST(dir)
	if err != nil || tr.N != 2 || te.N != 1 || te.Y[0] != 3 || te.X[300] != float32(300%256)/255 {
		t.Fatalf("LoadFashionMNIST: %v", err)
	}
	write(testLabels, gz(idx([]uint32{1}, []byte{11})))
	if _, _, err := LoadFashionMNIST(dir); err == nil || !strings.Contains(err.Error(), "label 11") {
		t.Fatalf("bad test set: %v", err)
	}
	for _, c := range []struct {
		name     string
		img, lab string
		want     string
	}{
		{"wrong size", write("i1.gz", gz(idx([]uint32{2, 14, 56}, pix))), lab, "14×56"},
		{"count mismatch", img, write("l1.gz", gz(idx([]uint32{3}, []byte{1, 2, 3}))), "3 labels"},
		{"label 10", img, write("l2.gz", gz(idx([]uint32{2}, []byte{1, 10}))), "label 10 of sample 1"},
		{"labels as images", lab, img, "magic"},
		{"not gzip", write("i2.gz", idx([]uint32{2, 28, 28}, pix)), lab, "i2.gz: gzip"},
		{"corrupt gzip", write("i3.gz", corrupt(gz(idx([]uint32{2, 28, 28}, pix)))), lab, "i3.gz"},
		{"missing", filepath.Join(dir, "none.gz"), lab, "none.gz not found"},
	} {
		_, err := LoadIDX(c.img, c.lab)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}

func corrupt(b []byte) []byte {
	b = slices.Clone(b)
	b[len(b)-6] ^= 0xff // the CRC-32
	return b
}

func FuzzReadIDX(f *testing.F) {
	f.Add(idx([]uint32{2, 3}, []byte{1, 2, 3, 4, 5, 6}))
	f.Add(idx([]uint32{1, 1 << 20}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		dims, data, err := readIDX(bytes.NewReader(b), 0x802, 0)
		if err == nil && len(data) != dims[0]*dims[1] {
			t.Fatalf("%v dims with %d bytes", dims, len(data))
		}
	})
}

func TestDataset(t *testing.T) {
	d := synthetic(5, 1)
	s, err := d.Subset([]int{4, 0, 4})
	if err != nil {
		t.Fatal(err)
	}
	if s.N != 3 || s.Y[0] != d.Y[4] || s.Y[1] != d.Y[0] || !slices.Equal(s.X[:ImageSize], d.X[4*ImageSize:]) {
		t.Error("subset has the wrong samples")
	}
	s.X[0] = 42
	if d.X[4*ImageSize] == 42 {
		t.Error("subset shares memory")
	}
	if _, err := d.Subset([]int{5}); err == nil {
		t.Error("out-of-range subset accepted")
	}
	if _, err := d.Subset([]int{-1}); err == nil {
		t.Error("negative subset index accepted")
	}
	for _, bad := range []*Dataset{
		nil,
		{X: d.X, Y: d.Y, N: 4},
		{X: d.X[:10], Y: d.Y, N: 5},
		{X: make([]float32, ImageSize), Y: []uint8{10}, N: 1},
	} {
		if bad.Validate() == nil {
			t.Errorf("malformed dataset %+v accepted", bad)
		}
		if _, err := bad.Subset(nil); err == nil {
			t.Error("subset of a malformed dataset")
		}
	}
}

func TestParams(t *testing.T) {
	m := NewMLP(7)
	ps := m.Params()
	want := []struct {
		name  string
		shape []int64
	}{
		{"fc1.weight", []int64{128, 784}}, {"fc1.bias", []int64{128}},
		{"fc2.weight", []int64{64, 128}}, {"fc2.bias", []int64{64}},
		{"fc3.weight", []int64{10, 64}}, {"fc3.bias", []int64{10}},
	}
	total := 0
	for i, p := range ps {
		if p.Name != want[i].name || !slices.Equal(p.Shape, want[i].shape) {
			t.Errorf("param %d is %s %v, want %s %v", i, p.Name, p.Shape, want[i].name, want[i].shape)
		}
		n := 1
		for _, s := range p.Shape {
			n *= int(s)
		}
		if len(p.W) != n || len(p.G) != n || &p.W[0] != &m.Weights()[total] || &p.G[0] != &m.Grads()[total] {
			t.Errorf("%s is not a view at %d of the flat storage", p.Name, total)
		}
		// U(-1/√fan_in, 1/√fan_in), with a spread that fills it.
		bound := float32(1 / math.Sqrt(float64(want[i&^1].shape[1])))
		lo, hi := slices.Min(p.W), slices.Max(p.W)
		if lo < -bound || hi > bound || n >= 64 && (lo > -0.8*bound || hi < 0.8*bound) {
			t.Errorf("%s spans [%v, %v], want U(±%v)", p.Name, lo, hi, bound)
		}
		total += n
	}
	if total != NumParams || NumParams != 109386 {
		t.Errorf("%d parameters, NumParams %d", total, NumParams)
	}
	ps[0].Shape[0] = 1
	if m.Params()[0].Shape[0] != 128 {
		t.Error("Params shares its shapes")
	}
	if !slices.Equal(NewMLP(7).Weights(), m.Weights()) {
		t.Error("same seed, different weights")
	}
	if slices.Equal(NewMLP(8).Weights()[:100], m.Weights()[:100]) {
		t.Error("different seeds, same weights")
	}
}

func TestLoadSnapshot(t *testing.T) {
	a, b := NewMLP(1), NewMLP(2)
	snap := a.Snapshot()
	if err := b.Load(snap); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Weights(), b.Weights()) {
		t.Fatal("snapshot round trip changed the weights")
	}
	a.Weights()[0]++
	if v, _ := codec.View[float32](snap[0]); v[0] == a.Weights()[0] {
		t.Error("snapshot aliases the model")
	}
	for i, ts := range snap {
		if err := ts.Validate(); err != nil || ts.Name != a.Params()[i].Name {
			t.Errorf("snapshot tensor %d %q: %v", i, ts.Name, err)
		}
	}
	wrongShape := slices.Clone(snap)
	wrongShape[2] = codec.FromFloat32("fc2.weight", make([]float32, 64*128), 128, 64)
	wrongType := slices.Clone(snap)
	wrongType[5] = codec.NewTensor("fc3.bias", codec.F64, 10)
	unknown := append(slices.Clone(snap), codec.FromFloat32("fc4.bias", make([]float32, 10)))
	twice := append(slices.Clone(snap), snap[1])
	for name, c := range map[string]struct {
		ts   []*codec.Tensor
		want string
	}{
		"missing":     {snap[:5], `"fc3.bias" missing`},
		"wrong shape": {wrongShape, "fc2.weight is"},
		"wrong type":  {wrongType, "fc3.bias is"},
		"unknown":     {unknown, `unknown parameter "fc4.bias"`},
		"twice":       {twice, "twice"},
		"nil":         {[]*codec.Tensor{nil}, "nil"},
	} {
		err := b.Load(c.ts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, c.want)
		}
	}
}

// TestPyTorchReference checks the model against PyTorch: the gradients of
// the reference weights on the first 128 training images, the loss, and
// the reference's test accuracy.
func TestPyTorchReference(t *testing.T) {
	train, test := fashion(t)
	ws, err := testvectors.ModelWeights()
	if err != nil {
		t.Fatal(err)
	}
	gs, err := testvectors.ModelGrads()
	if err != nil {
		t.Fatal(err)
	}
	m := newMLP()
	if err := m.Load(ws); err != nil {
		t.Fatal(err)
	}
	loss, err := m.Gradient(train.X[:128*ImageSize], train.Y[:128])
	if err != nil {
		t.Fatal(err)
	}
	const torchLoss = 0.32900869846343994
	if math.Abs(loss-torchLoss) > 1e-6*torchLoss {
		t.Errorf("loss %.9g, PyTorch %.9g", loss, torchLoss)
	}
	for i, p := range m.Params() {
		if gs[i].Name != p.Name+".grad" {
			t.Fatalf("reference gradient %d is %s, want %s.grad", i, gs[i].Name, p.Name)
		}
		want, err := codec.View[float32](gs[i])
		if err != nil {
			t.Fatal(err)
		}
		var num, den float64
		for j, g := range p.G {
			d := float64(g) - float64(want[j])
			num += d * d
			den += float64(want[j]) * float64(want[j])
		}
		rel := math.Sqrt(num / den)
		t.Logf("%-10s relative L2 error %.2g", p.Name, rel)
		if !(rel < 1e-5) {
			t.Errorf("%s: relative L2 error %.3g against PyTorch", p.Name, rel)
		}
	}
	acc, err := m.Evaluate(test)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(acc-0.8402) > 0.0002 {
		t.Errorf("test accuracy %.4f, PyTorch 0.8402", acc)
	}
}

// TestGradientNumeric compares the gradient with central differences of
// the loss, on synthetic data (no download needed).
func TestGradientNumeric(t *testing.T) {
	d := synthetic(16, 3)
	m := NewMLP(3)
	if _, err := m.Gradient(d.X, d.Y); err != nil {
		t.Fatal(err)
	}
	g := slices.Clone(m.Grads())
	probe := newMLP()
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range m.Params() {
		// The largest gradient of each tensor and a few random ones.
		off := offsetOf(m.Weights(), p.W)
		js := []int{off + argmaxAbs(p.G)}
		for range 3 {
			js = append(js, off+r.IntN(len(p.W)))
		}
		for _, j := range js {
			const h = 1e-2
			probe.CopyFrom(m)
			probe.w[j] += h
			lp, _ := probe.Gradient(d.X, d.Y)
			probe.w[j] -= 2 * h
			lm, _ := probe.Gradient(d.X, d.Y)
			num := (lp - lm) / (2 * h)
			if math.Abs(num-float64(g[j])) > 2e-3*max(1, math.Abs(num)) {
				t.Errorf("%s element %d: gradient %v, numeric %v", p.Name, j-off, g[j], num)
			}
		}
	}
}

func offsetOf(flat, view []float32) int {
	for i := range flat {
		if &flat[i] == &view[0] {
			return i
		}
	}
	panic("not a view")
}

func argmaxAbs(v []float32) int {
	best := 0
	for i, x := range v {
		if math.Abs(float64(x)) > math.Abs(float64(v[best])) {
			best = i
		}
	}
	return best
}

func TestGradientErrors(t *testing.T) {
	m := NewMLP(1)
	d := synthetic(2, 1)
	if _, err := m.Gradient(d.X[:ImageSize], d.Y); err == nil {
		t.Error("short images accepted")
	}
	if _, err := m.Gradient(nil, nil); err == nil {
		t.Error("empty batch accepted")
	}
	if _, err := m.Gradient(d.X, []uint8{1, 10}); err == nil {
		t.Error("label 10 accepted")
	}
	if _, err := m.Evaluate(&Dataset{}); err == nil {
		t.Error("empty test set accepted")
	}
	if _, err := m.Evaluate(&Dataset{X: d.X, Y: d.Y, N: 3}); err == nil {
		t.Error("malformed test set accepted")
	}
	if _, err := m.Evaluate(nil); err == nil {
		t.Error("nil test set accepted")
	}
}

func TestSGD(t *testing.T) {
	// PyTorch: g' = g + wd·w; v = g' on the first step, m·v + g' later;
	// w -= lr·v.
	// Computed one rounding at a time, as PyTorch does.
	w := []float32{1, -2}
	v := make([]float32, 2)
	sgd(w, []float32{0.5, 0.25}, v, 0.1, 0.9, 0.01, false)
	d := float32(0.5) + float32(0.01)*1
	if v[0] != d || w[0] != 1-float32(0.1)*d {
		t.Fatalf("first step: w %v v %v", w, v)
	}
	w1, v1 := w[1], v[1]
	sgd(w, []float32{0.5, 0.25}, v, 0.1, 0.9, 0.01, false)
	d = float32(0.25) + float32(0.01)*w1
	want := float32(0.9)*v1 + d
	if v[1] != want || w[1] != w1-float32(0.1)*want {
		t.Fatalf("second step: w %v v %v, want w %v v %v", w, v, w1-float32(0.1)*want, want)
	}
	// Without momentum, v is not used.
	w = []float32{1}
	sgd(w, []float32{2}, nil, 0.5, 0, 0, false)
	if w[0] != 0 {
		t.Fatalf("plain step: w %v", w)
	}
	// Nesterov (PyTorch): v = m·v + g; w -= lr·(g + m·v).
	w, v = []float32{1}, []float32{0.5}
	sgd(w, []float32{2}, v, 0.1, 0.9, 0, true)
	vn := 0.9*0.5 + 2.0
	if wn := 1 - 0.1*(2+0.9*vn); math.Abs(float64(w[0])-wn) > 1e-6 || math.Abs(float64(v[0])-vn) > 1e-6 {
		t.Fatalf("nesterov step: w %v v %v, want %v %v", w[0], v[0], wn, vn)
	}
}

func TestExact(t *testing.T) {
	sum := [][]float32{{1, 1}, {1}}
	n, err := Exact{}.Send(0, 0, [][]float32{{2, 4}, {8}}, 0.5, sum)
	if err != nil || n != 12 || !slices.Equal(sum[0], []float32{2, 3}) || sum[1][0] != 5 {
		t.Fatalf("Send: %d bytes, sum %v, %v", n, sum, err)
	}
	if _, err := (Exact{}).Send(0, 0, [][]float32{{1}}, 1, sum); err == nil {
		t.Error("tensor count mismatch accepted")
	}
	if _, err := (Exact{}).Send(0, 0, [][]float32{{1}, {1, 2}}, 1, sum); err == nil {
		t.Error("length mismatch accepted")
	}
}

// smallFedAvg and smallSyncSGD train on synthetic data: quick, and no
// download needed.
func smallFedAvg() Config {
	return Config{Mode: FedAvg, Clients: 3, Rounds: 2, LocalEpochs: 2, Batch: 8,
		LR: 0.05, Momentum: 0.9, WeightDecay: 1e-4, Split: Dirichlet, Alpha: 0.5, Seed: 11}
}

func smallSyncSGD() Config {
	return Config{Mode: SyncSGD, Clients: 3, Epochs: 3, Batch: 8,
		LR: 0.2, Momentum: 0.9, WeightDecay: 1e-4, Seed: 12}
}

func TestDeterminism(t *testing.T) {
	train, test := synthetic(300, 1), synthetic(100, 2)
	for _, cfg := range []Config{smallFedAvg(), smallSyncSGD()} {
		a, err := Run(cfg, train, test, Exact{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(cfg, train, test, Exact{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.History, b.History) || !slices.Equal(a.StepBytes, b.StepBytes) ||
			!slices.Equal(a.ShardSizes, b.ShardSizes) || a.Accuracy != b.Accuracy {
			t.Errorf("%v: results differ:\n%+v\n%+v", cfg.Mode, a, b)
		}
		for i, w := range a.Model.Weights() {
			if math.Float32bits(w) != math.Float32bits(b.Model.Weights()[i]) {
				t.Fatalf("%v: weight %d differs: %v, %v", cfg.Mode, i, w, b.Model.Weights()[i])
			}
		}
		cfg.Seed++
		c, err := Run(cfg, train, test, Exact{})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Equal(a.Model.Weights(), c.Model.Weights()) {
			t.Errorf("%v: another seed gave the same weights", cfg.Mode)
		}
		if a.Accuracy < 0.5 {
			t.Errorf("%v: accuracy %.3f on synthetic data", cfg.Mode, a.Accuracy)
		}
		t.Logf("%v: accuracy %.3f, loss %.4f, %d steps, %d bytes", cfg.Mode, a.Accuracy,
			a.History[len(a.History)-1].Loss, a.Steps, a.UpstreamBytes)
	}
}

// recorder is an uplink that keeps a copy of the updates of one step and
// passes every update to next scaled by scale (1 for an exact link).
type recorder struct {
	step  int
	scale float32
	got   [][]float32 // flat copy per client
	calls []int       // client of each call, in order
}

func (r *recorder) Send(client, step int, update [][]float32, weight float32, sum [][]float32) (int64, error) {
	r.calls = append(r.calls, client)
	if step == r.step {
		var flat []float32
		for _, u := range update {
			flat = append(flat, u...)
		}
		r.got = append(r.got, flat)
	}
	return Exact{}.Send(client, step, update, weight*r.scale, sum)
}

// TestPairing: the split, the initial weights and the minibatch order do
// not depend on the uplink, so the first updates of a lossy and an exact
// run agree.
func TestPairing(t *testing.T) {
	train, test := synthetic(300, 1), synthetic(100, 2)
	for _, cfg := range []Config{smallFedAvg(), smallSyncSGD()} {
		exact, lossy := &recorder{scale: 1}, &recorder{scale: 0.25}
		a, err := Run(cfg, train, test, exact)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(cfg, train, test, lossy)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.ShardSizes, b.ShardSizes) || len(exact.got) != cfg.Clients {
			t.Fatalf("%v: shards %v and %v, %d updates recorded", cfg.Mode, a.ShardSizes, b.ShardSizes, len(exact.got))
		}
		for c := range exact.got {
			if !slices.Equal(exact.got[c], lossy.got[c]) {
				t.Errorf("%v: client %d's first update depends on the uplink", cfg.Mode, c)
			}
		}
		if slices.Equal(a.Model.Weights(), b.Model.Weights()) {
			t.Errorf("%v: the lossy uplink changed nothing", cfg.Mode)
		}
		want := []int{0, 1, 2, 0, 1, 2}
		if !slices.Equal(exact.calls[:6], want) {
			t.Errorf("%v: clients called in order %v", cfg.Mode, exact.calls[:6])
		}
	}
}

// corrector is Exact with momentum correction claimed.
type corrector struct{ Exact }

func (corrector) CorrectsMomentum() bool { return true }

// TestMomentumCorrector: an uplink that corrects momentum gets a server
// step without momentum, which is what an exact link with Momentum 0 gets.
func TestMomentumCorrector(t *testing.T) {
	train, test := synthetic(200, 1), synthetic(50, 2)
	cfg := smallSyncSGD()
	a, err := Run(cfg, train, test, corrector{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Momentum = 0
	b, err := Run(cfg, train, test, Exact{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Model.Weights(), b.Model.Weights()) {
		t.Error("momentum-correcting uplink: the server still applied momentum")
	}
	cfg.Momentum = 0.9
	c, err := Run(cfg, train, test, Exact{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a.Model.Weights(), c.Model.Weights()) {
		t.Error("momentum had no effect")
	}
}

type failing struct{ at, client int }

var errBroken = errors.New("link broken")

func (f failing) Send(client, step int, update [][]float32, weight float32, sum [][]float32) (int64, error) {
	if step == f.at && client == f.client {
		return 0, errBroken
	}
	if f.at < 0 {
		return -1, nil
	}
	return Exact{}.Send(client, step, update, weight, sum)
}

func TestUplinkErrors(t *testing.T) {
	train, test := synthetic(200, 1), synthetic(50, 2)
	for _, cfg := range []Config{smallFedAvg(), smallSyncSGD()} {
		_, err := Run(cfg, train, test, failing{at: 1, client: 2})
		if !errors.Is(err, errBroken) || !strings.Contains(err.Error(), " 1, client 2") {
			t.Errorf("%v: failing uplink: %v", cfg.Mode, err)
		}
		if _, err := Run(cfg, train, test, failing{at: -1}); err == nil || !strings.Contains(err.Error(), "-1 bytes") {
			t.Errorf("%v: negative bytes: %v", cfg.Mode, err)
		}
		if _, err := Run(cfg, train, test, nil); err == nil {
			t.Errorf("%v: nil uplink accepted", cfg.Mode)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	train, test := synthetic(20, 1), synthetic(10, 2)
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no mode", func(c *Config) { c.Mode = 0 }, "Mode"},
		{"bad mode", func(c *Config) { c.Mode = 3 }, "Mode(3)"},
		{"no rounds", func(c *Config) { c.Rounds = 0 }, "Rounds"},
		{"epochs in FedAvg", func(c *Config) { c.Epochs = 2 }, "Epochs is for SyncSGD"},
		{"local epochs < 0", func(c *Config) { c.LocalEpochs = -1 }, "LocalEpochs"},
		{"no epochs", func(c *Config) { *c = smallSyncSGD(); c.Epochs = 0 }, "Epochs > 0"},
		{"rounds in SyncSGD", func(c *Config) { *c = smallSyncSGD(); c.Rounds = 1 }, "for FedAvg"},
		{"no clients", func(c *Config) { c.Clients = 0 }, "Clients"},
		{"no batch", func(c *Config) { c.Batch = 0 }, "Batch"},
		{"server lr < 0", func(c *Config) { c.ServerLR = -1 }, "ServerLR"},
		{"server lr NaN", func(c *Config) { c.ServerLR = float32(math.NaN()) }, "ServerLR"},
		{"server lr in SyncSGD", func(c *Config) { *c = smallSyncSGD(); c.ServerLR = 2 }, "for FedAvg"},
		{"server momentum 1", func(c *Config) { c.ServerMomentum = 1 }, "ServerMomentum"},
		{"server momentum < 0", func(c *Config) { c.ServerMomentum = -0.5 }, "ServerMomentum"},
		{"server momentum in SyncSGD", func(c *Config) { *c = smallSyncSGD(); c.ServerMomentum = 0.5 }, "for FedAvg"},
		{"lr 0", func(c *Config) { c.LR = 0 }, "LR"},
		{"lr NaN", func(c *Config) { c.LR = float32(math.NaN()) }, "LR"},
		{"lr Inf", func(c *Config) { c.LR = float32(math.Inf(1)) }, "LR"},
		{"momentum 1", func(c *Config) { c.Momentum = 1 }, "Momentum"},
		{"momentum < 0", func(c *Config) { c.Momentum = -0.1 }, "Momentum"},
		{"weight decay < 0", func(c *Config) { c.WeightDecay = -1 }, "WeightDecay"},
		{"bad split", func(c *Config) { c.Split = 5 }, "Split(5)"},
		{"alpha 0", func(c *Config) { c.Alpha = 0 }, "Alpha"},
		{"alpha NaN", func(c *Config) { c.Alpha = math.NaN() }, "Alpha"},
		{"alpha with IID", func(c *Config) { c.Split = IID }, "Alpha is for the Dirichlet split"},
		{"train limit < 0", func(c *Config) { c.TrainLimit = -1 }, "TrainLimit"},
		{"train limit > N", func(c *Config) { c.TrainLimit = 21 }, "training limit 21 exceeds the 20"},
		{"test limit > N", func(c *Config) { c.TestLimit = 11 }, "test limit 11"},
		{"eval every < 0", func(c *Config) { c.EvalEvery = -1 }, "EvalEvery"},
		{"too many clients", func(c *Config) { c.Clients = 21 }, "20 training samples cannot give each of 21 clients one"},
	} {
		cfg := smallFedAvg()
		c.edit(&cfg)
		_, err := Run(cfg, train, test, Exact{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
	cfg := smallFedAvg()
	for name, c := range map[string]struct{ train, test *Dataset }{
		"nil train":       {nil, test},
		"nil test":        {train, nil},
		"empty test":      {train, &Dataset{}},
		"malformed train": {&Dataset{X: train.X, Y: train.Y, N: 19}, test},
		"bad label":       {&Dataset{X: make([]float32, 5*ImageSize), Y: []uint8{0, 1, 2, 3, 200}, N: 5}, test},
	} {
		if _, err := Run(cfg, c.train, c.test, Exact{}); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// TestServerLR: the server's step scales the round's sum: one round from
// the same start with ServerLR 2 moves the model twice as far as with 1
// (and 0, the default, as far as 1).
func TestServerLR(t *testing.T) {
	train, test := synthetic(40, 1), synthetic(10, 2)
	moved := func(lr float32) []float32 {
		cfg := smallFedAvg()
		cfg.Rounds, cfg.ServerLR = 1, lr
		res, err := Run(cfg, train, test, Exact{})
		if err != nil {
			t.Fatal(err)
		}
		d := slices.Clone(res.Model.w)
		axpy(-1, NewMLP(cfg.Seed).w, d)
		return d
	}
	one, def, two := moved(1), moved(0), moved(2)
	if !slices.Equal(one, def) {
		t.Error("ServerLR 0 is not the step of ServerLR 1")
	}
	var worst float64
	for i := range one {
		worst = max(worst, math.Abs(float64(two[i])-2*float64(one[i])))
	}
	if worst > 1e-6 {
		t.Errorf("ServerLR 2 moved the model %g away from twice the step of 1", worst)
	}
}

// TestServerMomentum: FedAvgM's first step is plain FedAvg's (the
// momentum starts at zero); its second adds the momentum times the first
// round's sum, so the model moves further than plain FedAvg's.
func TestServerMomentum(t *testing.T) {
	train, test := synthetic(40, 1), synthetic(10, 2)
	run := func(rounds int, beta float32) []float32 {
		cfg := smallFedAvg()
		cfg.Rounds, cfg.ServerMomentum = rounds, beta
		res, err := Run(cfg, train, test, Exact{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Model.w
	}
	if !slices.Equal(run(1, 0), run(1, 0.9)) {
		t.Error("FedAvgM's first step differs from FedAvg's")
	}
	start := NewMLP(smallFedAvg().Seed).w
	dist := func(w []float32) float64 {
		var d float64
		for i := range w {
			d += float64(w[i]-start[i]) * float64(w[i]-start[i])
		}
		return math.Sqrt(d)
	}
	plain, m := dist(run(2, 0)), dist(run(2, 0.9))
	if !(m > plain) {
		t.Errorf("after 2 rounds FedAvgM moved %g, FedAvg %g: want further", m, plain)
	}
}

func TestProgress(t *testing.T) {
	train, test := synthetic(120, 1), synthetic(30, 2)
	cfg := smallSyncSGD()
	cfg.Epochs, cfg.EvalEvery, cfg.TrainLimit, cfg.TestLimit = 5, 2, 100, 20
	var got []Progress
	cfg.Progress = func(p Progress) { got = append(got, p) }
	res, err := Run(cfg, train, test, Exact{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || len(res.History) != 5 {
		t.Fatalf("%d progress calls, %d points", len(got), len(res.History))
	}
	stepsPerEpoch := (34 + cfg.Batch - 1) / cfg.Batch // the largest shard of 100 among 3 is 34
	if res.StepsPerEpoch != stepsPerEpoch || res.Steps != 5*stepsPerEpoch || len(res.StepBytes) != res.Steps {
		t.Errorf("%d steps per epoch, %d steps, %d step byte counts", res.StepsPerEpoch, res.Steps, len(res.StepBytes))
	}
	var total int64
	for _, b := range res.StepBytes {
		if b != 3*4*NumParams {
			t.Errorf("step sent %d bytes, want %d", b, 3*4*NumParams)
		}
		total += b
	}
	for i, p := range got {
		if p.Point != res.History[i] || p.Round != i+1 || p.Rounds != 5 || p.Steps != (i+1)*stepsPerEpoch {
			t.Errorf("progress %d: %+v", i, p)
		}
		if p.Evaluated != (i == 1 || i == 3 || i == 4) {
			t.Errorf("epoch %d evaluated: %v", i+1, p.Evaluated)
		}
		if !(p.Loss > 0) {
			t.Errorf("epoch %d loss %v", i+1, p.Loss)
		}
	}
	if total != res.UpstreamBytes || got[4].UpstreamBytes != total || res.Accuracy != got[4].Accuracy {
		t.Errorf("upstream %d, sum of steps %d, last point %+v", res.UpstreamBytes, total, got[4])
	}
	if !slices.Equal(res.ShardSizes, []int{34, 33, 33}) || res.Params != NumParams {
		t.Errorf("shards %v, %d params", res.ShardSizes, res.Params)
	}
}

func TestShards(t *testing.T) {
	labels := synthetic(6000, 5)
	hist := func(d *Dataset, idx []int) (h [NumClasses]int) {
		for _, i := range idx {
			h[d.Y[i]]++
		}
		return h
	}
	// meanTop is the mean over clients of their most common label's share.
	meanTop := func(d *Dataset, s [][]int) float64 {
		var sum float64
		for _, idx := range s {
			h := hist(d, idx)
			sum += float64(slices.Max(h[:])) / float64(len(idx))
		}
		return sum / float64(len(s))
	}
	check := func(name string, cfg Config, d *Dataset) [][]int {
		t.Helper()
		s, err := Shards(cfg, d)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := d.N
		if cfg.TrainLimit > 0 {
			n = cfg.TrainLimit
		}
		var all []int
		for c, idx := range s {
			if len(idx) == 0 {
				t.Errorf("%s: client %d has no samples", name, c)
			}
			if !slices.IsSorted(idx) {
				t.Errorf("%s: client %d's indices are not sorted", name, c)
			}
			all = append(all, idx...)
		}
		slices.Sort(all)
		if len(all) != n || all[0] != 0 || all[n-1] != n-1 || len(slices.Compact(all)) != n {
			t.Errorf("%s: the shards do not partition the %d samples", name, n)
		}
		again, _ := Shards(cfg, d)
		if !slices.EqualFunc(s, again, slices.Equal) {
			t.Errorf("%s: not deterministic", name)
		}
		return s
	}

	cfg := Config{Mode: FedAvg, Rounds: 1, Clients: 7, Batch: 1, LR: 1, Seed: 3, TrainLimit: 5000}
	iid := check("IID", cfg, labels)
	for _, idx := range iid {
		if len(idx) != 714 && len(idx) != 715 {
			t.Errorf("IID shard of %d samples", len(idx))
		}
	}
	if top := meanTop(labels, iid); top > 0.15 {
		t.Errorf("IID shards skewed: mean top-label share %.2f", top)
	}

	cfg.Split, cfg.Clients, cfg.TrainLimit = Dirichlet, 10, 0
	for _, c := range []struct {
		alpha    float64
		min, max float64 // bounds on the mean top-label share
	}{
		{100, 0.1, 0.2},
		{0.1, 0.6, 1},
	} {
		cfg.Alpha = c.alpha
		s := check("Dirichlet", cfg, labels)
		top := meanTop(labels, s)
		t.Logf("alpha %g: mean top-label share %.2f, first client's labels %v", c.alpha, top, hist(labels, s[0]))
		if top < c.min || top > c.max {
			t.Errorf("alpha %g: mean top-label share %.2f, want in [%g, %g]", c.alpha, top, c.min, c.max)
		}
	}
	// Tiny alpha and as many clients as samples: every class goes to one
	// client, and the fix-up fills all the others.
	cfg.Alpha, cfg.Clients, cfg.TrainLimit = 1e-3, 50, 50
	for seed := range uint64(5) {
		cfg.Seed = seed
		for _, idx := range check("tiny alpha", cfg, labels) {
			if len(idx) != 1 {
				t.Fatalf("50 samples among 50 clients: a shard of %d", len(idx))
			}
		}
	}
	// Extreme concentrations must not break the gamma draws.
	for _, alpha := range []float64{1e-300, math.SmallestNonzeroFloat64, 1e300, math.MaxFloat64} {
		cfg.Alpha = alpha
		check("extreme alpha", cfg, labels)
	}
	cfg.Alpha, cfg.Seed = 1e-3, 4
	a, _ := Shards(cfg, labels)
	cfg.Seed = 5
	if b, _ := Shards(cfg, labels); slices.EqualFunc(a, b, slices.Equal) {
		t.Error("the split ignores the seed")
	}
	if _, err := Shards(Config{}, labels); err == nil {
		t.Error("invalid config accepted")
	}
}

// TestTrainFashion trains both ways on a slice of Fashion-MNIST.
func TestTrainFashion(t *testing.T) {
	train, test := fashion(t)
	for _, cfg := range []Config{
		{Mode: FedAvg, Clients: 4, Rounds: 2, LocalEpochs: 1, Batch: 32, LR: 0.05, Momentum: 0.9,
			Seed: 1, TrainLimit: 6000, TestLimit: 2000},
		{Mode: SyncSGD, Clients: 3, Epochs: 2, Batch: 32, LR: 0.1, Momentum: 0.9,
			Split: Dirichlet, Alpha: 1, Seed: 1, TrainLimit: 4000, TestLimit: 2000},
	} {
		start := time.Now()
		res, err := Run(cfg, train, test, Exact{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v: accuracy %.4f after %d steps, %.1f MB upstream, %v", cfg.Mode, res.Accuracy,
			res.Steps, float64(res.UpstreamBytes)/1e6, time.Since(start).Round(time.Millisecond))
		if res.Accuracy < 0.65 {
			t.Errorf("%v: accuracy %.4f", cfg.Mode, res.Accuracy)
		}
	}
}
