package lossless

import (
	"bytes"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// End-to-end figures for lossless chains on float32 weights, through the
// codec layer the way a Writer with one worker uses it: 64 MiB of
// N(0, 0.02) float32 (math/rand/v2 PCG(1, 2), NormFloat64()*0.02, the
// same bytes as /tmp/probe/w.f32) cut into chunks of
// codec.DefaultChunkSize, each coded by Encoder.AppendTensor and decoded
// by Decoder.DecodeFrame (a fresh buffer per frame) or DecodeFrameInto (one
// buffer reused, as a Reader does). For one-core figures run with -cpu 1
// (the garbage collector then shares the core). Compare with `zstd -b1 -e1 -T1` on the
// same file in the same session:
//
//	go test -run '^$' -bench '^BenchmarkChain$' -benchtime 20x -cpu 1 ./lossless
//	zstd -b1 -e1 -T1 /tmp/probe/w.f32
//
// The "ratio" metric is input bytes over frame bytes (headers and CRCs
// included); MB/s are of input bytes.

var chainData = sync.OnceValue(func() []byte {
	const n = 64 << 20
	if b, err := os.ReadFile("/tmp/probe/w.f32"); err == nil && len(b) == n {
		return b
	}
	return fastTestFloats(n/4, 1)
})

// chainChunks cuts data, the float32 tensor "w", into chunk tensors.
func chainChunks(data []byte) []*codec.Tensor {
	shape := []int64{int64(len(data) / 4)}
	var ts []*codec.Tensor
	for off := 0; off < len(data); off += codec.DefaultChunkSize {
		end := min(off+codec.DefaultChunkSize, len(data))
		ts = append(ts, &codec.Tensor{Name: "w", DType: codec.F32, Shape: shape, Offset: int64(off / 4), Data: data[off:end]})
	}
	return ts
}

var chainRecipes = []struct{ name, recipe string }{
	{"stored", ""},
	{"shuffle4+huff0-plane3", "shuffle4 | plane3:huff0 | plane0..2:raw"},
	{"shuffle4+huff0-all", "shuffle4 | *:huff0"},
	{"shuffle4+s2-all", "shuffle4 | *:s2"},
}

func BenchmarkChain(b *testing.B) {
	for _, rc := range chainRecipes {
		b.Run(rc.name, func(b *testing.B) { chainBench(b, rc.recipe) })
	}
}

func chainBench(b *testing.B, recipe string) {
	data := chainData()
	chunks := chainChunks(data)
	r := codec.MustParseRecipe(recipe)
	enc, err := codec.NewEncoder()
	if err != nil {
		b.Fatal(err)
	}
	frames := make([]byte, 0, len(data)+len(data)/64)
	encodeAll := func() {
		frames = frames[:0]
		for _, t := range chunks {
			var err error
			if frames, err = enc.AppendTensor(frames, t, r); err != nil {
				b.Fatal(err)
			}
		}
	}
	encodeAll()
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			encodeAll()
		}
		b.ReportMetric(float64(len(data))/float64(len(frames)), "ratio")
	})
	dec := new(codec.Decoder)
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			for src := frames; len(src) > 0; {
				_, n, err := dec.DecodeFrame(src)
				if err != nil {
					b.Fatal(err)
				}
				src = src[n:]
			}
		}
	})
	b.Run("decode-into", func(b *testing.B) {
		buf := codec.AlignedBytes(codec.DefaultChunkSize)
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			for src := frames; len(src) > 0; {
				_, n, err := dec.DecodeFrameInto(buf, src)
				if err != nil {
					b.Fatal(err)
				}
				src = src[n:]
			}
		}
	})
	// Check the round trip once, outside the timings.
	off := 0
	for src := frames; len(src) > 0; {
		f, n, err := dec.DecodeFrame(src)
		if err != nil {
			b.Fatal(err)
		}
		got := f.Tensors[0].Data
		if !bytes.Equal(got, data[off:off+len(got)]) {
			b.Fatalf("%q: chunk at %d differs", recipe, off)
		}
		src, off = src[n:], off+len(got)
	}
	if off != len(data) {
		b.Fatalf("%q: decoded %d of %d bytes", recipe, off, len(data))
	}
}

// TestChainRatio checks the ratio of the float32 chain on a few chunks of
// the benchmark's data: the per-plane order-0 bound is about 1.201x.
func TestChainRatio(t *testing.T) {
	n := 4 << 20
	if testing.Short() {
		n = 1 << 20
	}
	data := fastTestFloats(n/4, 1)
	enc, _ := codec.NewEncoder()
	r := codec.MustParseRecipe("shuffle4 | plane3:huff0 | plane0..2:raw")
	var frames []byte
	for _, c := range chainChunks(data) {
		var err error
		if frames, err = enc.AppendTensor(frames, c, r); err != nil {
			t.Fatal(err)
		}
	}
	ratio := float64(len(data)) / float64(len(frames))
	if ratio < 1.19 {
		t.Errorf("ratio %.4f, want at least 1.19", ratio)
	}
	t.Logf("ratio %.4f, per-plane order-0 bound %.4f", ratio, chainPlaneBound(data, 4))
}

// chainPlaneBound is the best ratio a coder of each byte plane on its own
// with a static order-0 model reaches: 8*w over the sum of the planes'
// entropies in bits per byte.
func chainPlaneBound(data []byte, w int) float64 {
	sum := 0.0
	for k := range w {
		var hist [256]int
		n := 0
		for i := k; i < len(data); i += w {
			hist[data[i]]++
			n++
		}
		for _, c := range hist {
			if c != 0 {
				p := float64(c) / float64(n)
				sum -= p * math.Log2(p)
			}
		}
	}
	return float64(8*w) / sum
}
