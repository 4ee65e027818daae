package topk

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// benchN is the size of the shared benchmark tensor: 25M float32, 100 MB.
const benchN = 25_000_000

var benchData = sync.OnceValue(func() []float32 {
	r := rand.New(rand.NewPCG(2024, 1))
	x := make([]float32, benchN)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
})

func benchExact(b *testing.B, x []float32, k int) {
	var s Scratch
	dst := Exact(make([]uint32, 0, k+1), x, k, &s) // grow the Scratch
	b.SetBytes(int64(4 * len(x)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		dst = Exact(dst[:0], x, k, &s)
	}
	if len(dst) != k {
		b.Fatal(len(dst))
	}
}

func benchSampled(b *testing.B, x []float32, k int) {
	var s Scratch
	dst := Sampled(make([]uint32, 0, k+1), x, k, &s, SampleOptions{}) // grow the Scratch
	b.SetBytes(int64(4 * len(x)))
	b.ReportAllocs()
	total := 0
	b.ResetTimer()
	for i := range b.N {
		// A different sample per step, as DGC draws one.
		dst = Sampled(dst[:0], x, k, &s, SampleOptions{Start: uint64(i) * 0x9e3779b97f4a7c15})
		total += len(dst)
	}
	b.ReportMetric(float64(total)/float64(b.N)/float64(k), "k-fraction")
}

// BenchmarkExact: k = 1% of 25M N(0,1).
func BenchmarkExact(b *testing.B) {
	x := benchData()
	benchExact(b, x, len(x)/100)
}

// BenchmarkExactDensity: other k on the same tensor (sparse and dense cut).
func BenchmarkExactDensity(b *testing.B) {
	x := benchData()
	for _, d := range []int{1000, 10, 2} {
		b.Run(fmt.Sprintf("k=n/%d", d), func(b *testing.B) { benchExact(b, x, len(x)/d) })
	}
}

// BenchmarkSampled: DGC at density 0.1% of 25M N(0,1).
func BenchmarkSampled(b *testing.B) {
	x := benchData()
	benchSampled(b, x, len(x)/1000)
}

// BenchmarkThreshold keeps about 0.1% of 25M N(0,1) (P(|x| >= 3.2905) = 0.001).
func BenchmarkThreshold(b *testing.B) {
	x := benchData()
	dst := make([]uint32, 0, len(x)/500)
	b.SetBytes(int64(4 * len(x)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		dst = Threshold(dst[:0], x, 3.2905)
	}
}

// BenchmarkThresholdDensity keeps 1% (|x| >= 2.5758) and 50% (|x| >= 0.6745).
func BenchmarkThresholdDensity(b *testing.B) {
	x := benchData()
	for _, c := range []struct {
		name string
		t    float32
	}{{"1%", 2.5758}, {"50%", 0.6745}} {
		b.Run(c.name, func(b *testing.B) {
			dst := make([]uint32, 0, len(x))
			b.SetBytes(int64(4 * len(x)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				dst = Threshold(dst[:0], x, c.t)
			}
		})
	}
}

// BenchmarkCopy is the memory-speed peer: copy the same 100 MB.
func BenchmarkCopy(b *testing.B) {
	x := benchData()
	y := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		copy(y, x)
	}
}

// BenchmarkSortPeer sorts a copy of the magnitudes of the first 2^21
// elements (25M would take seconds per op); MB/s at 2^21 overstates the
// sort at 25M by its log factor, about 15%.
func BenchmarkSortPeer(b *testing.B) {
	x := benchData()[:1<<21]
	m := make([]uint32, len(x))
	b.SetBytes(int64(4 * len(x)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i, v := range x {
			m[i] = mag(v)
		}
		slices.Sort(m)
	}
}

// The layers of a small MLP (784-128-64-10: weights and biases), and the
// sizes around sampledMinN.
var smallSizes = []int{10, 100, 640, 2048, 8192, 100352, 1 << 15, 1 << 17}

func BenchmarkExactSmall(b *testing.B) {
	x := benchData()
	for _, n := range smallSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchExact(b, x[:n], max(1, n/100)) })
	}
}

func BenchmarkSampledSmall(b *testing.B) {
	x := benchData()
	for _, n := range smallSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchSampled(b, x[:n], max(1, n/1000)) })
	}
}
