package autotune

import (
	"math"
	"time"
)

// Above fastLink bytes per second, a coding recipe must promise
// fastHysteresis more than raw to replace it.
const (
	fastLink       = 250e6
	fastHysteresis = 0.3
)

// Load: loadWindow is the time constant of the encoders' load, and
// minLoad the least load the cost model assumes.
const (
	loadWindow = time.Second
	minLoad    = 0.5
)

// observeLoad adds a frame's encode time to the load figures. Only the
// time of coded frames counts: frames stored raw take no encoder, and a
// stream sent raw says nothing of how busy coding it would keep them (on
// a fast link, all of it: counting the raw frames' time would make coding
// look free and the Tuner swing between the two).
func (t *Tuner) observeLoad(enc time.Duration, coded bool, now time.Time) {
	if !coded {
		t.cpuAt = now
		return
	}
	if !t.cpuAt.IsZero() {
		dt := now.Sub(t.cpuAt).Seconds()
		decay := math.Exp(-dt / loadWindow.Seconds())
		t.cpuBusy = t.cpuBusy*decay + enc.Seconds()
		t.cpuWall = t.cpuWall*decay + dt
	}
	t.cpuAt = now
}

// load is the share of the time the encoders spent encoding lately (1
// when not known): where the link holds the writer back, the encoders
// wait most of the time.
func (t *Tuner) load(cores int) float64 {
	if t.cpuWall <= 0 {
		return 1
	}
	return min(1, t.cpuBusy/(float64(cores)*t.cpuWall))
}

// predict is the cost model: a pipelined writer encodes on t.cores cores
// while earlier frames are on the link, and the receiver decodes on one
// goroutine, so the slowest of the three sets the pace. The encoders'
// speed counts as if the load of the frames lately were all of one
// class: a stream mixes kinds of data, and where the link is the
// bottleneck the encoders wait most of the time, so a class that codes
// slowly but well (zeros between gradients) may take the time they wait;
// its frames' turn on the link is what the other classes wait for. The
// load is taken as at least minLoad.
func (t *Tuner) predict(c Class, cd candidate, bw float64) Prediction {
	s, _ := t.prof.Get(c, cd.name)
	p := Prediction{Recipe: cd.name, Throughput: math.Inf(1), Limit: "encode", Stats: s}
	if cd.r == nil {
		// Stored raw, a frame costs what the same bytes cost without
		// tensorpress: a copy on each side, which a sample's timing of a
		// few KiB overstates many times (0.7 GB/s where memory copies at
		// 10): the link alone sets its pace.
		if s.Samples == 0 {
			p.Throughput = 0
		} else if s.Ratio > 0 {
			p.Throughput, p.Limit = bw*s.Ratio, "link"
		}
		return p
	}
	if enc := s.Encode; enc > 0 {
		if s.Live > 0 {
			// Frames sent show the sample far too optimistic: trust
			// them, with a margin for their waiting for a core.
			enc = min(enc, liveMargin*s.Live)
		}
		cores := t.cores
		if t.inline {
			cores = 1 // the frames are encoded one at a time, as they are written
		}
		p.Throughput = enc * float64(cores) / max(t.load(cores), minLoad)
	}
	if s.Ratio > 0 {
		if v := bw * s.Ratio; v < p.Throughput {
			p.Throughput, p.Limit = v, "link"
		}
	}
	if s.Decode > 0 && s.Decode < p.Throughput {
		p.Throughput, p.Limit = s.Decode, "decode"
	}
	if s.Samples == 0 {
		p.Throughput = 0 // never measured: not chosen
	}
	return p
}
