package codec

import (
	"fmt"
	"io"
	"testing"
)

// Per-frame overhead of the codec layer with store-raw recipes, next to a
// plain copy of the same bytes.
func BenchmarkFrame(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10, 1 << 20} {
		x := randTensor("layer.weight", F32, 1, int64(n/4))
		enc, _ := NewEncoder()
		d := new(Decoder)
		frame, _ := enc.AppendTensor(nil, x, nil)
		b.Run(fmt.Sprintf("copy/%d", n), func(b *testing.B) {
			dst := make([]byte, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, x.Data)
			}
		})
		b.Run(fmt.Sprintf("encode/%d", n), func(b *testing.B) {
			buf := make([]byte, 0, len(frame))
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				buf, _ = enc.AppendTensor(buf[:0], x, nil)
			}
		})
		b.Run(fmt.Sprintf("decode/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := d.DecodeFrame(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("decode-into/%d", n), func(b *testing.B) {
			buf := AlignedBytes(n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := d.DecodeFrameInto(buf, frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The Writer's pipeline on 64 MiB in 1 MiB chunks, stored raw.
func BenchmarkWriterRaw(b *testing.B) {
	x := randTensor("big", F32, 1, 16<<20)
	for _, c := range []int{1, 2} {
		b.Run(fmt.Sprintf("concurrency=%d", c), func(b *testing.B) {
			b.SetBytes(int64(len(x.Data)))
			b.ReportAllocs()
			for b.Loop() {
				w, _ := NewWriter(io.Discard, WithEncoderConcurrency(c))
				if err := w.WriteTensor(x); err != nil {
					b.Fatal(err)
				}
				w.Close()
			}
		})
	}
}
