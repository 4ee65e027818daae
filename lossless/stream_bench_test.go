package lossless

import (
	"bytes"
	"flag"
	"io"
	"runtime"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// Streaming throughput against the number of workers: a Writer with
// WithEncoderConcurrency(GOMAXPROCS) and a Reader with
// WithDecoderConcurrency(GOMAXPROCS) over -stream.mib MiB of N(0, 0.02)
// float32 (one tensor, 1 MiB chunks), beside a plain copy of the same
// bytes and a single-goroutine loop of Reader.Next over the same frames.
// Vary the workers with -cpu:
//
//	go test -run '^$' -bench 'Stream' -cpu 1,2,4,8,16 -benchtime 5x ./lossless
//
// "next" decodes every frame into a fresh buffer and drops it (what the
// frames allow); "tensor" is ReadTensor joining the chunks into the whole
// tensor, one buffer sized once.

var streamMiB = flag.Int("stream.mib", 64, "MiB of float32 in the streaming benchmarks")

var streamRecipes = []struct{ name, recipe string }{
	{"plane", "shuffle4 | plane3:huff0 | plane0..2:raw"},
	{"zstd1", "*:zstd(1)"},
}

func streamTensor() *codec.Tensor {
	data := chainData()
	if n := *streamMiB << 20; n <= len(data) {
		data = data[:n]
	} else {
		data = fastTestFloats(n/4, 1)
	}
	return &codec.Tensor{Name: "w", DType: codec.F32, Shape: []int64{int64(len(data) / 4)}, Data: data}
}

// writeStream writes t through a Writer with r and GOMAXPROCS workers.
func writeStream(b *testing.B, dst io.Writer, t *codec.Tensor, r *codec.Recipe) {
	w, err := codec.NewWriter(dst, codec.WithRecipe(r), codec.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		b.Fatal(err)
	}
	if err := w.WriteTensor(t); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

func streamFrames(b *testing.B, t *codec.Tensor, recipe string) []byte {
	var buf bytes.Buffer
	writeStream(b, &buf, t, codec.MustParseRecipe(recipe))
	return buf.Bytes()
}

func BenchmarkStreamCopy(b *testing.B) {
	t := streamTensor()
	dst := make([]byte, len(t.Data))
	b.SetBytes(int64(len(t.Data)))
	b.ReportAllocs()
	for b.Loop() {
		copy(dst, t.Data)
	}
}

func BenchmarkStreamWriter(b *testing.B) {
	t := streamTensor()
	for _, rc := range streamRecipes {
		b.Run(rc.name, func(b *testing.B) {
			r := codec.MustParseRecipe(rc.recipe)
			var wire int
			b.SetBytes(int64(len(t.Data)))
			b.ReportAllocs()
			for b.Loop() {
				var cw countWriter
				writeStream(b, &cw, t, r)
				wire = cw.n
			}
			b.ReportMetric(float64(len(t.Data))/float64(wire), "ratio")
		})
	}
}

func BenchmarkStreamReader(b *testing.B) {
	t := streamTensor()
	for _, rc := range streamRecipes {
		stream := streamFrames(b, t, rc.recipe)
		b.Run(rc.name+"/next", func(b *testing.B) {
			b.SetBytes(int64(len(t.Data)))
			b.ReportAllocs()
			for b.Loop() {
				r, err := codec.NewReader(bytes.NewReader(stream))
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					f, err := r.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					for _, x := range f.Tensors {
						n += len(x.Data)
					}
				}
				if n != len(t.Data) {
					b.Fatalf("decoded %d bytes of %d", n, len(t.Data))
				}
			}
		})
		b.Run(rc.name+"/tensor", func(b *testing.B) {
			b.SetBytes(int64(len(t.Data)))
			b.ReportAllocs()
			for b.Loop() {
				r, err := codec.NewReader(bytes.NewReader(stream), codec.WithDecoderConcurrency(runtime.GOMAXPROCS(0)))
				if err != nil {
					b.Fatal(err)
				}
				got, err := r.ReadTensor()
				if err != nil {
					b.Fatal(err)
				}
				if len(got.Data) != len(t.Data) {
					b.Fatalf("decoded %d bytes of %d", len(got.Data), len(t.Data))
				}
			}
		})
	}
}

type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}
