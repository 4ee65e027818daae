package rpc

import (
	"bytes"
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/autotune"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/grpctest"
	"github.com/tensorpress/tensorpress/sniff"
)

// BenchmarkSparseMessage: 8 MiB of float32, 99% zeros, in a message after
// a protobuf field's tag and length, through the compressor with ByClass
// and with a Tuner writing to a link paced at 100 MB/s (as the proxy's
// hop codes). "ratio" is the last message's, "first-ratio" the first's
// (the Tuner's first frames go by its initial guess):
//
//	go test -run '^$' -bench SparseMessage -benchtime 8x ./rpc
func BenchmarkSparseMessage(b *testing.B) {
	msg := grpctest.SparseMessage(2 << 20)
	for _, c := range []struct {
		name string
		pol  func() codec.Policy
		rate float64
	}{
		{"byclass", func() codec.Policy { return sniff.ByClass{} }, 0},
		{"tuner-100MBps", func() codec.Policy {
			tu, err := autotune.New(autotune.WithInitialBandwidth(100e6))
			if err != nil {
				b.Fatal(err)
			}
			return tu
		}, 100e6},
	} {
		b.Run(c.name, func(b *testing.B) {
			comp, err := NewCompressor(WithPolicy(c.pol()))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			var first, last float64
			for b.Loop() {
				var wire bytes.Buffer
				w, err := comp.Compress(&pacedWriter{&wire, c.rate})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.Write(msg); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				last = float64(len(msg)) / float64(wire.Len())
				if first == 0 {
					first = last
				}
			}
			b.ReportMetric(last, "ratio")
			b.ReportMetric(first, "first-ratio")
		})
	}
}

// pacedWriter is a link of rate bytes a second (0: unpaced): each write
// takes its bytes' time.
type pacedWriter struct {
	w    *bytes.Buffer
	rate float64
}

func (p *pacedWriter) Write(b []byte) (int, error) {
	if p.rate > 0 {
		time.Sleep(time.Duration(float64(len(b)) / p.rate * float64(time.Second)))
	}
	return p.w.Write(b)
}
