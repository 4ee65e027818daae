package lossless

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// Streaming throughput against the number of workers: a Writer with
// WithEncoderConcurrency(w) and a Reader with WithDecoderConcurrency(w)
// over -stream.mib MiB of N(0, 0.02) float32 (one tensor, 1 MiB chunks),
// for each w in -stream.workers (default: 1, 2, 4, ... up to GOMAXPROCS),
// beside a plain copy of the same bytes and a single-goroutine loop of
// Reader.Next over the same frames:
//
//	go test -run '^$' -bench 'Stream' -benchtime 20x ./lossless
//	go test -run '^$' -bench 'Stream' -benchtime 20x -stream.workers 1,2,4,8,16 ./lossless
//
// The workers are explicit rather than -cpu's: with sub-benchmarks, Go's
// testing package ran the -cpu 1 round at the full GOMAXPROCS (Go 1.26),
// which made one worker look as fast as two. GOMAXPROCS stays as it is.
//
// "next" decodes every frame into a fresh buffer and drops it (what the
// frames allow, one goroutine); "tensor" is ReadTensor joining the chunks
// into the whole tensor, one buffer sized once, each chunk decoded in
// place; "tensor-reused" the same into one buffer reused from run to run
// (WithTensorBuffers), as a receiver of a model every round can.

var (
	streamMiB     = flag.Int("stream.mib", 64, "MiB of float32 in the streaming benchmarks")
	streamWorkers = flag.String("stream.workers", "", "comma-separated worker counts of the streaming benchmarks (default: 1, 2, 4, ... up to GOMAXPROCS)")
)

// workerCounts returns the worker counts to measure.
func workerCounts(b *testing.B) []int {
	if *streamWorkers == "" {
		var ws []int
		for w := 1; w <= runtime.GOMAXPROCS(0); w *= 2 {
			ws = append(ws, w)
		}
		return ws
	}
	var ws []int
	for _, f := range strings.Split(*streamWorkers, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 || w > codec.MaxConcurrency {
			b.Fatalf("-stream.workers: %q", f)
		}
		ws = append(ws, w)
	}
	return ws
}

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

// writeStream writes t through a Writer with r and the given workers.
func writeStream(b *testing.B, dst io.Writer, t *codec.Tensor, r *codec.Recipe, workers int) {
	w, err := codec.NewWriter(dst, codec.WithRecipe(r), codec.WithEncoderConcurrency(workers))
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
	writeStream(b, &buf, t, codec.MustParseRecipe(recipe), runtime.GOMAXPROCS(0))
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
		r := codec.MustParseRecipe(rc.recipe)
		for _, workers := range workerCounts(b) {
			b.Run(fmt.Sprintf("%s/workers=%d", rc.name, workers), func(b *testing.B) {
				var wire int
				b.SetBytes(int64(len(t.Data)))
				b.ReportAllocs()
				for b.Loop() {
					var cw countWriter
					writeStream(b, &cw, t, r, workers)
					wire = cw.n
				}
				b.ReportMetric(float64(len(t.Data))/float64(wire), "ratio")
			})
		}
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
		reused := codec.AlignedBytes(len(t.Data))
		for _, workers := range workerCounts(b) {
			for _, reuse := range []bool{false, true} {
				name := fmt.Sprintf("%s/tensor/workers=%d", rc.name, workers)
				opts := []codec.DOption{codec.WithDecoderConcurrency(workers)}
				if reuse {
					name = fmt.Sprintf("%s/tensor-reused/workers=%d", rc.name, workers)
					opts = append(opts, codec.WithTensorBuffers(func(n int) []byte { return reused[:n] }))
				}
				b.Run(name, func(b *testing.B) { readTensorBench(b, stream, len(t.Data), opts) })
			}
		}
	}
}

// readTensorBench reads the one tensor of stream with ReadTensor.
func readTensorBench(b *testing.B, stream []byte, size int, opts []codec.DOption) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		r, err := codec.NewReader(bytes.NewReader(stream), opts...)
		if err != nil {
			b.Fatal(err)
		}
		got, err := r.ReadTensor()
		if err != nil {
			b.Fatal(err)
		}
		if len(got.Data) != size {
			b.Fatalf("decoded %d bytes of %d", len(got.Data), size)
		}
	}
}

type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}
