package autotune

import (
	"fmt"
	"math"
	"time"

	"github.com/tensorpress/tensorpress/codec"
)

// decide chooses the recipe of the class's next frame and returns the
// switch it made, if any: the cost model's prediction for every candidate
// at the link's bandwidth (or an unlimited one, for a probe), the best of
// them, and a switch when it promises enough over the current recipe.
func (t *Tuner) decide(c Class, rs *ruleSet, fi *codec.FrameInfo, st *classState) *Decision {
	est := t.link.Estimate()
	bw := planningBandwidth(&est, t.initialBW)
	now := time.Now()
	probe := t.probeDue(est, now)
	if probe {
		// The current recipe has not filled the link for a while: try
		// the fastest pipeline, as if the link were unlimited. If the
		// link is as slow as before, the writer is held back at once,
		// the rate is measured again and the Tuner comes back.
		bw = math.Inf(1)
	}
	preds := t.predictAll(c, rs, fi, bw)
	best, bestThr := bestPrediction(preds, st.cur)
	cur := preds[st.cur].Throughput
	fresh := st.fresh
	st.fresh = false
	if best == st.cur || !fresh && !t.worthSwitch(rs.cands[st.cur], st, cur, bestThr, bw) {
		return nil
	}
	t.noteProbe(probe, now)
	d := Decision{
		Seq: fi.Seq, Class: c, From: rs.cands[st.cur].name, To: rs.cands[best].name,
		Estimate: est, Bandwidth: bw, Predictions: preds,
		Reason: switchReason(est, bw, cur, bestThr, fresh, probe),
		Probe:  probe,
	}
	st.cur, st.since = best, 0
	t.switches++
	t.link.Restart(fi.Seq)
	return &d
}

// planningBandwidth is the bandwidth the cost model plans with: the
// estimate's; the initial guess (a wide-area link) when nothing was
// measured yet, which it notes as est's source; unlimited while the link
// has not held the writer back.
func planningBandwidth(est *Estimate, initial float64) float64 {
	bw := est.Bandwidth
	switch {
	case bw <= 0 && est.Source == "":
		bw = initial
		est.Source = "initial guess"
	case est.Bound || bw <= 0:
		bw = math.Inf(1)
	}
	return bw
}

// probeDue keeps the probe state up to date with est and reports whether
// this frame should probe for a faster link: the rate was measured while
// held back longer than the probe interval ago, the last probe is as old,
// and enough frames came since.
func (t *Tuner) probeDue(est Estimate, now time.Time) bool {
	if t.probing && now.Sub(t.lastProbe) > probeMax {
		t.probing = false // the probe found a faster link and stayed
	}
	if !est.Kept {
		return false
	}
	if t.knownBW > 0 && math.Abs(est.Bandwidth/t.knownBW-1) > 0.25 {
		t.probeEvery = t.probeMin // the link changed: probe again soon
	}
	t.knownBW = est.Bandwidth
	return now.Sub(est.At) > t.probeEvery && now.Sub(t.lastProbe) > t.probeEvery &&
		t.sinceProbe >= probeFrames*max(t.minFrames, 1)
}

// predictAll runs the cost model for every candidate of rs at bandwidth
// bw. A candidate the frame may not use, or whose error is not known to
// be within the budget, predicts 0; one that does not shrink the data
// more than storing it raw predicts less than raw.
func (t *Tuner) predictAll(c Class, rs *ruleSet, fi *codec.FrameInfo, bw float64) []Prediction {
	preds := make([]Prediction, len(rs.cands))
	raw := -1
	for i, cd := range rs.cands {
		preds[i] = t.predict(c, cd, bw)
		switch {
		case !t.usable(rs, cd, fi, c):
			preds[i].Throughput = 0
		case !t.withinBudget(c, cd, rs):
			preds[i].Throughput, preds[i].Limit = 0, "error"
		}
		if cd.r == nil {
			raw = i
		}
	}
	// A recipe that does not shrink the data cannot beat storing it raw,
	// whatever its measured speed: the difference is noise, and raw costs
	// the least CPU.
	if raw >= 0 && preds[raw].Stats.Ratio > 0 {
		for i := range preds {
			if i != raw && preds[i].Stats.Ratio <= 1.01*preds[raw].Stats.Ratio {
				preds[i].Throughput = min(preds[i].Throughput, 0.99*preds[raw].Throughput)
			}
		}
	}
	return preds
}

// bestPrediction returns the index and throughput of the first highest
// prediction; cur when none predicts more than -1.
func bestPrediction(preds []Prediction, cur int) (int, float64) {
	best, bestThr := cur, -1.0
	for i, p := range preds {
		if p.Throughput > bestThr {
			best, bestThr = i, p.Throughput
		}
	}
	return best, bestThr
}

// worthSwitch reports whether a class that is not on its first frame
// leaves its current recipe now (predicting cur) for one predicting
// bestThr: the current one has had its minimum of frames (or cannot code
// the frame at all), and the gain beats the hysteresis.
func (t *Tuner) worthSwitch(current candidate, st *classState, cur, bestThr, bw float64) bool {
	h := wornHysteresis(t.hysteresis, st.since, t.minFrames)
	if current.r == nil && bw > fastLink && !math.IsInf(bw, 1) {
		// Leaving raw on a link faster than 2 Gbit/s: there the rate
		// measured moves with the CPU (a link between two processes of
		// one machine is the CPU), which coding takes from it.
		h = max(h, fastHysteresis)
	}
	held := st.since < t.minFrames && cur > 0
	return !held && bestThr > cur*(1+h)
}

// wornHysteresis is the gain a switch must promise after since frames on
// the current recipe: h at first, then less as the estimates behind the
// choice keep saying the same (h over 1 + since/minFrames), down to
// minHysteresis, so that a gain smaller than h that lasts (a plane recipe
// 8% smaller than zstd on a slow link) is taken after a while, and one
// switch back needs h again.
func wornHysteresis(h float64, since, minFrames int) float64 {
	if h <= minHysteresis {
		return h
	}
	return max(h/(1+float64(since)/float64(max(minFrames, 1))), minHysteresis)
}

// minHysteresis is the least gain that moves a class off a recipe it has
// kept a long time: above the noise of ratio estimates from samples.
const minHysteresis = 0.02

// noteProbe records a switch: the start of a probe, or the return from
// one that found the link as slow as before, after which the Tuner waits
// long enough that probing stays within its share of the time.
func (t *Tuner) noteProbe(probe bool, now time.Time) {
	switch {
	case probe:
		t.lastProbe, t.probing = now, true
		t.probes++
		t.sinceProbe = 0
	case t.probing:
		t.probing = false
		t.probeEvery = min(max(time.Duration(float64(now.Sub(t.lastProbe))/t.probeShare), t.probeMin), probeMax)
	}
}

// switchReason explains a switch from a recipe predicting cur to one
// predicting bestThr at bandwidth bw.
func switchReason(est Estimate, bw, cur, bestThr float64, fresh, probe bool) string {
	reason := fmt.Sprintf("predicted %s against %s (+%.0f%%)", rate(bestThr), rate(cur), 100*(bestThr/max(cur, 1e-9)-1))
	switch {
	case fresh:
		return "first frame of its class: the best for " + est.Source + " " + rate(bw)
	case probe:
		return reason + fmt.Sprintf("; probe: the link rate %s was measured %v ago and the current recipe does not fill it", rate(est.Bandwidth), time.Since(est.At).Round(time.Millisecond))
	case est.Bound || est.Bandwidth <= 0:
		return reason + "; link not yet the bottleneck: fastest pipeline first"
	}
	return reason
}
