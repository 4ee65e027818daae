package autotune

import (
	"testing"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/profile"
)

// Density takes the largest allowed density whose update arrives in time
// at the link's bandwidth, with hysteresis, and learns the bytes per
// element kept from the frames sent.
func TestDensity(t *testing.T) {
	p, err := profile.Load([]byte(`version: 1
rules:
  - match: {name: ["*.grad"]}
    gradient: ["topk(0.01)"]
    densities: [0.1, 0.001, 0.01]
  - require_lossless: true
`))
	if err != nil {
		t.Fatal(err)
	}
	var ds []Decision
	tu, err := New(WithProfile(p), WithLink(NewLink(1e6)), WithExplain(func(d Decision) { ds = append(ds, d) }))
	if err != nil {
		t.Fatal(err)
	}
	const n = 1_000_000 // at 1 MB/s and 6 bytes a kept element: 0.1 takes 600 ms, 0.01 60 ms, 0.001 6 ms
	density := func(within time.Duration) float64 {
		t.Helper()
		d, ok := tu.Density("fc1.grad", codec.F32, n, codec.Tags{}, within)
		if !ok {
			t.Fatal("no density for fc1.grad")
		}
		return d
	}
	for _, c := range []struct {
		within time.Duration
		want   float64
	}{
		{100 * time.Millisecond, 0.01},
		{time.Second, 0.1},
		{time.Millisecond, 0.001}, // none fits: the smallest
		{100 * time.Millisecond, 0.01},
		// 0.01 takes 60 ms: within 58 ms plus 10% it stays, within 50 ms not.
		{58 * time.Millisecond, 0.01},
		{50 * time.Millisecond, 0.001},
		// 0.01 would fit 62 ms, but not with 10% to spare: 0.001 stays.
		{62 * time.Millisecond, 0.001},
		{70 * time.Millisecond, 0.01},
	} {
		if got := density(c.within); got != c.want {
			t.Fatalf("within %v: density %v, want %v; decisions %v", c.within, got, c.want, ds)
		}
	}
	if got := tu.DensitySwitches(); got != 5 || len(ds) != 5 {
		t.Errorf("%d density switches, %d decisions; want 5", got, len(ds))
	}
	// Frames of 12 bytes per kept element: 0.01 now takes about 78 ms.
	for range 20 {
		tu.ObserveDensity(0.01, n, 12*n/100)
	}
	if got := density(70 * time.Millisecond); got != 0.001 {
		t.Errorf("at 12 bytes per kept element, within 70 ms: %v, want 0.001", got)
	}
	if _, ok := tu.Density("fc1.weight", codec.F32, n, codec.Tags{}, time.Second); ok {
		t.Error("a density for a lossless tensor")
	}
	plain, _ := New()
	if _, ok := plain.Density("fc1.grad", codec.F32, n, codec.Tags{}, time.Second); ok {
		t.Error("a density without a profile")
	}
}
