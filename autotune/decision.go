package autotune

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
)

// Decision explains one switch of recipe.
type Decision struct {
	// Tensor is set for a density decision (Tuner.Density): From and To
	// are densities, Seq and Class are not used.
	Tensor      string
	Seq         uint64
	Class       Class
	From, To    string
	Estimate    Estimate
	Bandwidth   float64 // the bandwidth the cost model used (+Inf: unknown, assumed unlimited)
	Predictions []Prediction
	Reason      string
	Probe       bool // a probe for a faster link: the Tuner returns unless it finds one
	// Chosen is set when the frame went out with another recipe than
	// the one the Tuner chose (To is what was sent): the chosen one.
	Chosen string
}

// Prediction is the cost model's figure for one candidate.
type Prediction struct {
	Recipe     string
	Throughput float64 // decoded bytes per second through the whole pipeline
	Limit      string  // what bounds it: "encode", "link" or "decode"; "error" over the error budget
	Stats      Stats
}

func (d Decision) String() string {
	var b strings.Builder
	if d.Tensor != "" {
		fmt.Fprintf(&b, "tensor %s: %s -> %s: %s; bandwidth %s (%s)", d.Tensor, d.From, d.To, d.Reason, rate(d.Bandwidth), d.Estimate.Source)
		return b.String()
	}
	fmt.Fprintf(&b, "frame %d (%v): %s -> %s: %s; bandwidth %s (%s)", d.Seq, d.Class, d.From, d.To, d.Reason, rate(d.Bandwidth), d.Estimate.Source)
	if d.Chosen != "" {
		fmt.Fprintf(&b, "; sent as %s, chosen %s", d.To, d.Chosen)
	}
	for _, p := range d.Predictions {
		fmt.Fprintf(&b, "; %s %s (%s-bound, ratio %.3f", p.Recipe, rate(p.Throughput), p.Limit, p.Stats.Ratio)
		if p.Stats.ErrorSamples > 0 {
			fmt.Fprintf(&b, ", error %.2g", p.Stats.Error)
		}
		b.WriteByte(')')
	}
	return b.String()
}

func rate(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "unbounded"
	case v >= 1e9:
		return fmt.Sprintf("%.2f GB/s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.2f MB/s", v/1e6)
	}
	return fmt.Sprintf("%.1f kB/s", v/1e3)
}

// report explains a switch once its frame was sent, with the recipe sent.
func (t *Tuner) report(d Decision) {
	t.lastDec, t.hasDec = d, true
	if t.explain != nil {
		t.explain(d)
	}
	if t.log != nil && t.log.Enabled(context.Background(), slog.LevelDebug) {
		t.log.Debug("autotune: switch", "frame", d.Seq, "class", d.Class.String(), "from", d.From, "to", d.To,
			"chosen", d.Chosen, "bandwidth", rate(d.Bandwidth), "source", d.Estimate.Source, "reason", d.Reason)
	}
}
