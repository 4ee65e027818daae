package autotune

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/profile"
)

// Option configures a Tuner.
type Option func(*Tuner) error

// WithCandidates sets the recipes to choose among (nil: stored raw).
func WithCandidates(rs ...*codec.Recipe) Option {
	return func(t *Tuner) error {
		if len(rs) == 0 {
			return fmt.Errorf("autotune: no candidate recipes")
		}
		t.cands = t.cands[:0]
		for _, r := range rs {
			t.cands = append(t.cands, candidate{r: r, name: recipeName(r)})
		}
		return nil
	}
}

func recipeName(r *codec.Recipe) string {
	if r == nil {
		return "raw"
	}
	return r.String()
}

// WithErrorBudget sets the largest relative RMS error ||x - y|| / ||x||
// a lossy candidate given by WithCandidates may show on samples of the
// data before the Tuner uses it (default: no limit, the caller chose the
// candidates). 0 keeps to the lossless candidates. Profiles set a budget
// per rule instead (error_budget).
func WithErrorBudget(e float64) Option {
	return func(t *Tuner) error {
		if !(e >= 0) {
			return fmt.Errorf("autotune: error budget %v", e)
		}
		t.budget = e
		return nil
	}
}

// WithCores sets the cores encoding may use (default min(4, GOMAXPROCS),
// the Writer's default concurrency).
func WithCores(n int) Option {
	return func(t *Tuner) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("autotune: %d cores", n)
		}
		t.cores = n
		return nil
	}
}

// WithHysteresis sets the gain a candidate must promise over the current
// recipe to replace it (default 0.10: 10%). The longer a class keeps its
// recipe, the less is asked: h / (1 + frames on it / min frames), never
// below 2% (a hysteresis set below that stays as set).
func WithHysteresis(h float64) Option {
	return func(t *Tuner) error {
		if !(h >= 0 && h <= 10) {
			return fmt.Errorf("autotune: hysteresis %v outside [0, 10]", h)
		}
		t.hysteresis = h
		return nil
	}
}

// WithMinFrames sets how many frames a recipe stays before another switch
// (default 3).
func WithMinFrames(n int) Option {
	return func(t *Tuner) error {
		if n < 0 {
			return fmt.Errorf("autotune: min frames %d", n)
		}
		t.minFrames = n
		return nil
	}
}

// WithExplore sets the time spent trying other recipes on samples, as a
// share of the time the frames sent took (default 0.005, at most 0.05):
// each frame's encoding time, or its time on the link (its size over the
// link's estimated rate) where that is longer, so that a class stored raw
// keeps trying the others. The first frame of each class of data tries
// every candidate once on a sample, whatever the share and outside it
// (a slow candidate's first sample does not hold the next ones back),
// and so does a
// frame after one that came out more than 10% off its recipe's estimate
// (the data changed; at most once per two minimum-frame spans); 0 turns
// both off but the first.
func WithExplore(share float64) Option {
	return func(t *Tuner) error {
		if !(share >= 0 && share <= 0.05) {
			return fmt.Errorf("autotune: explore share %v outside [0, 0.05]", share)
		}
		t.explore = share
		return nil
	}
}

// WithProbeInterval sets how long a bandwidth measured earlier is trusted
// while the current recipe, limited by its own speed, does not fill the
// link (default DefaultProbeInterval). Then the fastest candidate is tried
// for a few frames, to find out whether the link became faster. When it
// did not, the next probe waits 20 times as long as that one took (at
// least d, at most 8 s), so probing stays within 5% of the time: with
// small frames the link is probed every d, with large frames on a slow
// link more seldom. The interval starts again at d when the bandwidth
// changes.
func WithProbeInterval(d time.Duration) Option {
	return func(t *Tuner) error {
		if d <= 0 {
			return fmt.Errorf("autotune: probe interval %v", d)
		}
		t.probeMin = d
		return nil
	}
}

// WithProbeShare sets the share of the time that probes which find no
// faster link may take (default DefaultProbeShare, 5%): after such a
// probe the next waits its duration divided by the share (at least the
// probe interval, at most 8 s). A larger share finds a rise sooner where
// probes are costly (large frames on a slow link).
func WithProbeShare(f float64) Option {
	return func(t *Tuner) error {
		if !(f > 0 && f <= 1) {
			return fmt.Errorf("autotune: probe share %v outside (0, 1]", f)
		}
		t.probeShare = f
		return nil
	}
}

// WithProfile takes the autotune settings of p (cores times the CPU
// budget, exploration share, hysteresis, min frames, link hint) and its
// recipes: each frame's candidates are those of the rule its tensor
// matches (a byte stream matches as an unnamed tensor of dtype bytes and
// unknown size), with the default candidates added where the rule says
// auto. A rule of a profile with autotune off always gets its first
// recipe. Options after WithProfile override its settings.
func WithProfile(p *profile.Profile) Option {
	return func(t *Tuner) error {
		if p == nil {
			return fmt.Errorf("autotune: nil profile")
		}
		a := p.Autotune
		t.prof2 = p
		if a.Cores > 0 {
			t.cores = a.Cores
		}
		if a.CPUBudget > 0 {
			t.cores = max(1, int(math.Round(float64(t.cores)*a.CPUBudget)))
		}
		t.explore = min(a.Explore, 0.05)
		t.hysteresis = a.Hysteresis
		t.minFrames = a.MinFrames
		if a.LinkHint > 0 {
			t.link = NewLink(float64(a.LinkHint))
		}
		return nil
	}
}

// WithInitialBandwidth sets the bandwidth, in bytes per second, assumed
// before any is measured (default DefaultInitialBandwidth).
func WithInitialBandwidth(bw float64) Option {
	return func(t *Tuner) error {
		if !(bw > 0) {
			return fmt.Errorf("autotune: initial bandwidth %v", bw)
		}
		t.initialBW = bw
		return nil
	}
}

// WithLink uses l as the link estimator (to set a hint or TCP_INFO).
func WithLink(l *Link) Option {
	return func(t *Tuner) error { t.link = l; return nil }
}

// WithExplain calls f with every switch and the estimates behind it. f is
// called with the Tuner's lock held: it must not call the Tuner.
func WithExplain(f func(Decision)) Option {
	return func(t *Tuner) error { t.explain = f; return nil }
}

// WithLogger sends a debug line per switch to l (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(t *Tuner) error { t.log = l; return nil }
}
