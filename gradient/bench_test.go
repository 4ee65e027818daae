package gradient

import (
	"sync"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// benchN is the element count of the selection benchmarks: 25 Mi float32
// (100 MiB), the size the targets are stated for.
const benchN = 25 << 20

var (
	benchOnce sync.Once
	benchG    []float32
)

func benchGrad() []float32 {
	benchOnce.Do(func() { benchG = normal(benchN, 42, 1) })
	return benchG
}

// BenchmarkDGCCompensate times DGC's momentum correction alone:
// u = m*u + g, c = residual + u, over 25 Mi elements with a residual.
func BenchmarkDGCCompensate(b *testing.B) {
	g := benchGrad()
	st := &State{res: make([]float32, len(g))}
	in := &Input{G: g, C: make([]float32, len(g)), State: st}
	d := NewDGC(0.001)
	b.SetBytes(int64(4 * len(g)))
	b.ReportAllocs()
	for b.Loop() {
		st.abortPrivate() // the staged momentum becomes a spare: no allocation
		d.Compensate(in)
	}
}

// BenchmarkDGCCompress times DGC's selection and momentum masking (the
// op it returns gathers the values when the frame is encoded).
func BenchmarkDGCCompress(b *testing.B) {
	g := benchGrad()
	st := &State{}
	in := &Input{G: g, C: g, State: st}
	d := NewDGC(0.001)
	b.SetBytes(int64(4 * len(g)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Compress(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSender times a whole DGC or TopK update of 25 Mi elements:
// compensation, selection, framing with the default tail, and the
// residual update (decoding the frame into the residual).
func BenchmarkSender(b *testing.B) {
	g := benchGrad()
	t := codec.FromFloat32("g", g, int64(len(g)))
	for _, c := range []Compressor{NewDGC(0.001), TopK{Ratio: 0.01}} {
		b.Run(c.String(), func(b *testing.B) {
			s, err := NewSender(c)
			if err != nil {
				b.Fatal(err)
			}
			var frame []byte
			b.SetBytes(int64(4 * len(g)))
			b.ReportAllocs()
			for b.Loop() {
				if frame, err = s.Append(frame[:0], t); err != nil {
					b.Fatal(err)
				}
				s.Commit()
			}
			b.ReportMetric(float64(4*len(g))/float64(len(frame)), "x")
		})
	}
}

// BenchmarkReceiverAdd times adding one TopK 1% frame of 25 Mi elements
// into an accumulator, the aggregator's work per peer.
func BenchmarkReceiverAdd(b *testing.B) {
	g := benchGrad()
	s, _ := NewSender(TopK{Ratio: 0.01})
	frame, err := s.Append(nil, codec.FromFloat32("g", g, int64(len(g))))
	if err != nil {
		b.Fatal(err)
	}
	r, err := NewReceiver()
	if err != nil {
		b.Fatal(err)
	}
	acc := make([]float32, len(g))
	b.SetBytes(int64(4 * len(g)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Add(frame, 0.5, func(string, []int64) ([]float32, error) { return acc, nil }); err != nil {
			b.Fatal(err)
		}
	}
}
