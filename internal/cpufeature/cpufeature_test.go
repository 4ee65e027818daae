package cpufeature

import "testing"

func TestFeatures(t *testing.T) {
	if F16C && !AVX2 {
		t.Fatal("F16C without AVX2")
	}
	t.Logf("AVX2 %v, F16C %v", AVX2, F16C)
}
