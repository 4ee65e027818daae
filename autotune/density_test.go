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

// The bytes an element kept costs are learned per density: a dense
// update's frames (the value alone) do not make a sparse update look
// dearer, nor a sparse one's (value and position at 30%, but fewer bytes
// each after entropy coding) make a dense update look cheaper.
func TestDensityKeptPerDensity(t *testing.T) {
	tu := profileTuner(t, `version: 1
rules:
  - gradient: ["topk(0.01)"]
    densities: [0.3, 1]
`, WithLink(NewLink(1e6)))
	const n = 1_000_000
	density := func(name string, within time.Duration) float64 {
		t.Helper()
		d, ok := tu.Density(name, codec.F32, n, codec.Tags{}, within)
		if !ok {
			t.Fatalf("no density for %s", name)
		}
		return d
	}
	// Unmeasured, a dense update costs its 4 MB: 4 s at 1 MB/s.
	if got := density("a", 5*time.Second); got != 1 {
		t.Errorf("within 5 s: %v, want 1", got)
	}
	if got := density("b", 3*time.Second); got != 0.3 {
		t.Errorf("within 3 s: %v, want 0.3", got)
	}
	for range 20 {
		tu.ObserveDensity(0.3, n, 3*n/10*3/2) // 1.5 bytes an element kept
		tu.ObserveDensity(1, n, 4*n+40)
	}
	// Dense still takes 4 s, 30% 450 ms.
	if got := density("c", 2*time.Second); got != 0.3 {
		t.Errorf("after frames of both, within 2 s: %v, want 0.3 (dense takes 4 s)", got)
	}
	if got := density("d", 4100*time.Millisecond); got != 1 {
		t.Errorf("after frames of both, within 4.1 s: %v, want 1", got)
	}
}

// With nothing measured, a dense update waits for a measurement: the
// largest sparse density goes first; once the link is known to carry a
// dense update in time, it is taken.
func TestDensityDenseNeedsMeasurement(t *testing.T) {
	tu := profileTuner(t, `version: 1
rules:
  - gradient: ["topk(0.01)"]
    densities: [1, 0.01, 0.3]
`)
	const n = 100_000
	if d, _ := tu.Density("a", codec.F32, n, codec.Tags{}, time.Second); d != 0.3 {
		t.Errorf("link unknown: %v, want 0.3", d)
	}
	tu.Link().SetRate(125e6, "upload") // 1 Gbit/s: 400 kB in 3.2 ms
	if d, _ := tu.Density("b", codec.F32, n, codec.Tags{}, time.Second); d != 1 {
		t.Errorf("at 1 Gbit/s: %v, want 1", d)
	}
	tu.Link().SetRate(250e3, "upload") // 2 Mbit/s: 400 kB in 1.6 s
	if d, _ := tu.Density("c", codec.F32, n, codec.Tags{}, time.Second); d != 0.3 {
		t.Errorf("at 2 Mbit/s: %v, want 0.3", d)
	}
}

// profileTuner is a Tuner with the profile of the YAML text, and opts.
func profileTuner(t *testing.T, yaml string, opts ...Option) *Tuner {
	t.Helper()
	p, err := profile.Load([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	tu, err := New(append([]Option{WithProfile(p)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return tu
}
