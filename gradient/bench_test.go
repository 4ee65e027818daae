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

// BenchmarkReceiverAdd times adding one frame of 25 Mi elements into an
// accumulator, the aggregator's work per peer: a TopK 1% frame and a dense
// one (huff0), each with the Receiver's check for non-finite values
// (finite, the default) and without it (unchecked).
func BenchmarkReceiverAdd(b *testing.B) {
	g := benchGrad()
	s, _ := NewSender(TopK{Ratio: 0.01})
	sparse, err := s.Append(nil, codec.FromFloat32("g", g, int64(len(g))))
	if err != nil {
		b.Fatal(err)
	}
	enc, _ := codec.NewEncoder()
	dense, err := enc.AppendTensor(nil, codec.FromFloat32("g", g, int64(len(g))), codec.MustParseRecipe("*:huff0"))
	if err != nil {
		b.Fatal(err)
	}
	acc := make([]float32, len(g))
	for _, f := range []struct {
		name  string
		frame []byte
	}{{"topk", sparse}, {"dense", dense}} {
		for _, check := range []bool{true, false} {
			name := f.name + "/finite"
			if !check {
				name = f.name + "/unchecked"
			}
			b.Run(name, func(b *testing.B) {
				r, err := NewReceiver(codec.WithFiniteAdd(check))
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(4 * len(g)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := r.Add(f.frame, 0.5, func(string, []int64) ([]float32, error) { return acc, nil }); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkTopKPositions measures what TopK's frames cost per element
// kept (the bits/kept metric) with the positions bit-packed or as varints
// (both huff0-coded after, nf4 values), at densities from a warm-up's 25%
// down to 0.3%, on one 100352-element N(0, 1) tensor (784×128, an MLP's
// first layer).
func BenchmarkTopKPositions(b *testing.B) {
	const n = 100352
	g := normal(n, 7, 1)
	for _, d := range []string{"0.003", "0.01", "0.0625", "0.25"} {
		for _, idx := range []string{"bitpack", "varint"} {
			spec, err := Parse("topk(" + d + ",ef=off) | idx:delta," + idx + " | val:nf4(64) | *:huff0")
			if err != nil {
				b.Fatal(err)
			}
			b.Run(d+"/"+idx, func(b *testing.B) {
				snd, err := spec.NewSender()
				if err != nil {
					b.Fatal(err)
				}
				t := codec.FromFloat32("w", g, n)
				var frame []byte
				b.SetBytes(4 * n)
				b.ReportAllocs()
				for b.Loop() {
					if frame, err = snd.Append(frame[:0], t); err != nil {
						b.Fatal(err)
					}
					snd.Abort() // no feedback: the same update each time
				}
				k := K(spec.Compressor.(TopK).Ratio, n)
				b.ReportMetric(float64(8*len(frame))/float64(k), "bits/kept")
			})
		}
	}
}
