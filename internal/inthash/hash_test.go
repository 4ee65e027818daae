package inthash

import "testing"

// Known values: splitmix64 seeded with 0 first outputs
// 0xe220a8397b1dcdaf (Mix64 of the seed plus Gamma); lowbias32 fixes 0.
func TestKnownValues(t *testing.T) {
	if got := Mix64(Gamma); got != 0xe220a8397b1dcdaf {
		t.Errorf("Mix64(Gamma) = %#x", got)
	}
	if Lowbias32(0) != 0 || Mix64(0) != 0 {
		t.Error("zero is not a fixed point")
	}
	if got := Lowbias32(1); got == 1 || got == 0 {
		t.Errorf("Lowbias32(1) = %#x", got)
	}
}
