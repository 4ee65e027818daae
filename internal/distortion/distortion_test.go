package distortion

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/float16"
)

func f32(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestStats(t *testing.T) {
	var e Stats
	// x = (3, 4), y = (3, 4.5): ||x-y|| = 0.5, ||x|| = 5.
	if err := e.Add(codec.F32, f32(3, 4), f32(3, 4.5)); err != nil {
		t.Fatal(err)
	}
	if got := e.RelL2(); math.Abs(got-0.1) > 1e-12 || e.MaxAbs != 0.5 {
		t.Fatalf("rel %v max %v, want 0.1 and 0.5", got, e.MaxAbs)
	}
	// Matching NaNs are exact; a NaN that comes back as a number is not.
	var n Stats
	nan := float32(math.NaN())
	if err := n.Add(codec.F32, f32(nan, 1), f32(nan, 1)); err != nil || n.RelL2() != 0 {
		t.Fatalf("matching NaN: %v %v", n.RelL2(), err)
	}
	if err := n.Add(codec.F32, f32(nan), f32(0)); err != nil || !math.IsInf(n.RelL2(), 1) {
		t.Fatalf("NaN decoded as 0: %v %v", n.RelL2(), err)
	}
	// Half precision goes through float16.
	var h Stats
	w := make([]byte, 4)
	binary.LittleEndian.PutUint16(w, float16.F16FromF64(2))
	binary.LittleEndian.PutUint16(w[2:], float16.F16FromF64(-1))
	if err := h.Add(codec.F16, w, w); err != nil || h.RelL2() != 0 {
		t.Fatalf("f16: %v %v", h.RelL2(), err)
	}
	// Lengths that differ and integer dtypes are errors.
	if err := h.Add(codec.F32, f32(1), f32(1, 2)); err == nil {
		t.Error("lengths 4 and 8 accepted")
	}
	if err := h.Add(codec.I32, f32(1), f32(1)); err == nil {
		t.Error("int32 accepted")
	}
}
