package autotune

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tensorpress/tensorpress/codec"
)

// defaultKeptBytes is the wire bytes per element kept that Density
// assumes before ObserveDensity measures it: a float32 value and a
// delta-coded, bit-packed position.
const defaultKeptBytes = 6.0

// densityState is the density chosen last for the updates of one tensor.
type densityState struct {
	cur float64
}

// maxDensityStates bounds the tensors whose density is remembered; past
// it the choices start afresh.
const maxDensityStates = 1 << 16

// Density chooses the density (the share of elements kept) of the next
// update of a gradient tensor of the given name, dtype, elements and tags,
// among the densities its profile rule allows: the largest whose frame
// reaches the receiver within d at the measured bandwidth, the most
// accurate update that arrives in time, else the smallest. A density once
// chosen for the tensor is kept while its frame takes no more than d plus
// the hysteresis, and a larger one is taken only when its frame takes
// less than d less the hysteresis, so the choice does not flap. Where the
// link never held the writer back (a lower bound) or is loopback it takes
// the largest density; with nothing measured yet, the largest below 1
// where the rule has one (a dense update waits for a measurement). ok is
// false when the Tuner has no profile or the rule lists no densities; the
// caller keeps its compressor's own.
func (t *Tuner) Density(name string, dtype codec.DType, elements int64, tags codec.Tags, d time.Duration) (density float64, ok bool) {
	if t.prof2 == nil || elements <= 0 || d <= 0 {
		return 0, false
	}
	r := t.prof2.Match(name, dtype, elements*int64(max(dtype.Size(), 1)), tags)
	if len(r.Densities) == 0 {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.densities == nil || len(t.densities) >= maxDensityStates {
		t.densities = map[string]*densityState{}
	}
	st := t.densities[name]
	est := t.link.Estimate()
	bw := est.Bandwidth
	if est.Bound || bw <= 0 {
		bw = math.Inf(1)
	}
	took := func(x float64) time.Duration {
		return time.Duration(math.Ceil(x*float64(elements)) * t.keptLocked(x, dtype) / bw * float64(time.Second))
	}
	// The largest density that arrives in time, else the smallest. With
	// the link unknown, a dense update (density 1) is left out where
	// there is a sparse one: it is the choice that costs most when the
	// link turns out slow, and it is taken once a measurement says it
	// fits.
	best, fits := slices.Min(r.Densities), false
	skipDense := !(est.Bandwidth > 0) && best < 1
	for _, x := range r.Densities {
		if took(x) <= d && (!fits || x > best) && !(skipDense && x >= 1) {
			best, fits = x, true
		}
	}
	h := 1 + t.hysteresis
	switch {
	case st == nil:
		st = &densityState{cur: best}
		t.densities[name] = st
	case best > st.cur && float64(took(best))*h > float64(d):
		// A larger density would only just fit: stay.
	case best < st.cur && float64(took(st.cur)) <= float64(d)*h:
		// The current one is only just too slow: stay.
	case best != st.cur:
		dec := Decision{
			Tensor: name, From: fmt.Sprintf("density %g", st.cur), To: fmt.Sprintf("density %g", best),
			Estimate: est, Bandwidth: bw,
			Reason: fmt.Sprintf("%d elements at %g take %v, within %v", elements, best, took(best).Round(time.Microsecond), d),
		}
		st.cur = best
		t.densitySwitches++
		if t.explain != nil {
			t.explain(dec)
		}
		if t.log != nil {
			t.log.Debug("autotune: density", "tensor", name, "from", dec.From, "to", dec.To, "reason", dec.Reason)
		}
	}
	return st.cur, true
}

// ObserveDensity records the frame of an update sent at density x:
// its elements and its size on the wire teach Density the bytes each
// element kept at x costs. The cost is learned per density: an element
// of a dense update costs its value alone, one of a sparse update its
// value and its position, and positions cost less the denser the update.
func (t *Tuner) ObserveDensity(x float64, elements int64, frameBytes int) {
	k := math.Ceil(min(x, 1) * float64(elements))
	if k <= 0 || frameBytes <= 0 {
		return
	}
	v := float64(frameBytes) / k
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.kept == nil || len(t.kept) >= maxKeptDensities {
		t.kept = map[float64]float64{}
	}
	if old, ok := t.kept[x]; ok {
		v = (1-ewma)*old + ewma*v
	}
	t.kept[x] = v
}

// maxKeptDensities bounds the densities whose cost is remembered (a
// profile lists a few).
const maxKeptDensities = 64

// keptLocked is the wire bytes an element kept at density x costs: as
// measured at x, else at the nearest sparse density measured (for x < 1),
// else the value alone for a dense update and defaultKeptBytes for a
// sparse one.
func (t *Tuner) keptLocked(x float64, dtype codec.DType) float64 {
	if v, ok := t.kept[x]; ok {
		return v
	}
	if x >= 1 {
		return float64(max(dtype.Size(), 1))
	}
	best, gap := defaultKeptBytes, math.Inf(1)
	for d, v := range t.kept {
		if g := math.Abs(math.Log(d / x)); d < 1 && (g < gap || g == gap && d < x) {
			best, gap = v, g
		}
	}
	return best
}

// DensitySwitches returns how many times Density changed a tensor's
// density.
func (t *Tuner) DensitySwitches() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.densitySwitches
}
