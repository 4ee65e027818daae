// Package distortion measures how far decoded float values are from the
// values encoded: the largest absolute difference and the relative L2
// error ||x - y|| / ||x||, the error lossy recipes are judged by.
package distortion

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/float16"
)

// Stats accumulates the error of decoded float values against the
// input: the largest absolute difference and the sums for the relative
// L2 error ||x - y|| / ||x||. Matching NaNs and equal infinities count as
// exact; any other non-finite mismatch makes the maximum +Inf.
type Stats struct {
	nonFinite   bool    // a non-finite value came back different
	MaxAbs      float64 // largest absolute difference
	sumSqErr    float64
	sumSqSignal float64
}

// Add adds the values of want (the input) and got (decoded) of dtype dt;
// only float dtypes have an error.
func (e *Stats) Add(dt codec.DType, want, got []byte) error {
	if len(want) != len(got) {
		return fmt.Errorf("distortion: %d bytes decoded for %d", len(got), len(want))
	}
	var x, y []float64
	switch dt {
	case codec.F32:
		x, y = make([]float64, len(want)/4), make([]float64, len(got)/4)
		for i := range x {
			x[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(want[4*i:])))
			y[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])))
		}
	case codec.F64:
		x, y = make([]float64, len(want)/8), make([]float64, len(got)/8)
		for i := range x {
			x[i] = math.Float64frombits(binary.LittleEndian.Uint64(want[8*i:]))
			y[i] = math.Float64frombits(binary.LittleEndian.Uint64(got[8*i:]))
		}
	case codec.F16, codec.BF16:
		conv := float16.F16ToF64
		if dt == codec.BF16 {
			conv = float16.BF16ToF64
		}
		x, y = make([]float64, len(want)/2), make([]float64, len(got)/2)
		for i := range x {
			x[i] = conv(binary.LittleEndian.Uint16(want[2*i:]))
			y[i] = conv(binary.LittleEndian.Uint16(got[2*i:]))
		}
	default:
		return fmt.Errorf("lossy chain on %v data: errors are measured on floats only", dt)
	}
	for i := range x {
		a, b := x[i], y[i]
		switch {
		case math.IsNaN(a) && math.IsNaN(b), a == b:
			e.sumSqSignal += sq(a)
			continue
		case math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0):
			e.MaxAbs, e.nonFinite = math.Inf(1), true
			continue
		}
		d := math.Abs(a - b)
		e.MaxAbs = max(e.MaxAbs, d)
		e.sumSqErr += d * d
		e.sumSqSignal += a * a
	}
	return nil
}

func sq(a float64) float64 {
	if math.IsNaN(a) || math.IsInf(a, 0) {
		return 0
	}
	return a * a
}

// RelL2 is ||x - y|| / ||x|| (0 for an all-zero input decoded exactly).
func (e *Stats) RelL2() float64 {
	if e.nonFinite {
		return math.Inf(1)
	}
	if e.sumSqSignal == 0 {
		if e.sumSqErr == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Sqrt(e.sumSqErr / e.sumSqSignal)
}
