package gradient

import (
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/topk"
)

// DGC is Deep Gradient Compression (Lin et al., ICLR 2018) on the sender:
//
//   - local gradient clipping: g is scaled to L2 norm Clip when larger
//     (0: off; DGC scales the global threshold by N^-1/2 for N workers);
//   - momentum correction: u = m*u + g, v = v + u (Nesterov: u = m*(u+g),
//     v = v + u + g), where u is private and v is the Memory's residual;
//   - selection of about Ratio*n elements of v by a threshold estimated on
//     a strided sample (Sample of the elements), adjusted, and cut to
//     exactly k when more pass (the reference implementation's method);
//   - momentum factor masking: u and v are cleared where v was sent (v by
//     error feedback: the residual keeps what the receiver does not see);
//     on Abort neither is, u and v keeping the step's momentum;
//   - warm-up: during the first Warmup epochs the density falls
//     exponentially, 25%, 6.25%, 1.5625%, 0.39% (a quarter of the warm-up
//     each), then Ratio.
//
// The receiver sums the sparse updates and applies them without momentum
// (the momentum is already in them).
type DGC struct {
	Ratio    float32 // final density, e.g. 0.001
	Momentum float32 // default 0.9 when built by New
	Nesterov bool
	Clip     float32 // max L2 norm of a tensor's gradient; 0: no clipping
	Warmup   float64 // epochs of warm-up; 0: none
	Sample   float32 // sample ratio for the threshold estimate, in (0, 1]; 0 means 0.01
}

// sample is the sample ratio in effect: Sample, or 0.01 when it is 0.
func (d *DGC) sample() float32 {
	if d.Sample == 0 {
		return defaultSample
	}
	return d.Sample
}

// NewDGC returns DGC at density ratio with the reference implementation's
// defaults: momentum 0.9, sample 1%, no warm-up, no clipping.
func NewDGC(ratio float32) *DGC {
	return &DGC{Ratio: ratio, Momentum: 0.9, Sample: defaultSample}
}

func parseDGC(args []codec.Arg) (*DGC, error) {
	if err := codec.CheckArgs("dgc", args, 1, "ratio", "momentum", "nesterov", "clip", "warmup", "sample"); err != nil {
		return nil, err
	}
	if err := noRepeats("dgc", args, "ratio"); err != nil {
		return nil, err
	}
	r, err := needRatio("dgc", args)
	if err != nil {
		return nil, err
	}
	d := NewDGC(r)
	for _, a := range args {
		var v float64
		switch a.Key {
		case "momentum":
			v, err = floatArg("dgc", a, 0, 1)
			d.Momentum = float32(v)
		case "nesterov":
			d.Nesterov, err = onOff("dgc", a)
		case "clip":
			v, err = floatArg("dgc", a, 0, math.MaxFloat32)
			d.Clip = float32(v)
		case "warmup":
			d.Warmup, err = floatArg("dgc", a, 0, 1e6)
		case "sample":
			var s float32
			s, err = ratioArg("dgc", a.Value)
			d.Sample = s
		}
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *DGC) String() string {
	s := "dgc(" + formatRatio(d.Ratio)
	if d.Momentum != 0.9 {
		s += ",momentum=" + strconv.FormatFloat(float64(d.Momentum), 'g', -1, 32)
	}
	if d.Nesterov {
		s += ",nesterov=on"
	}
	if d.Clip != 0 {
		s += ",clip=" + strconv.FormatFloat(float64(d.Clip), 'g', -1, 32)
	}
	if d.Warmup != 0 {
		s += ",warmup=" + strconv.FormatFloat(d.Warmup, 'g', -1, 64)
	}
	if d.sample() != defaultSample {
		s += ",sample=" + formatRatio(d.sample())
	}
	return s + ")"
}

// ClipBlock is the block of SumSquares that DGC's clipping uses.
const ClipBlock = 4096

// SumSquares returns the sum of the squares of g in float64, in a fixed
// order: each block of bsize elements summed in element order, then the
// blocks' sums in block order. Package gpu sums the blocks in parallel
// and gets the same bits.
func SumSquares(g []float32, bsize int) float64 {
	var ss float64
	for lo := 0; lo < len(g); lo += bsize {
		var b float64
		for _, x := range g[lo:min(lo+bsize, len(g))] {
			b += float64(float64(x) * float64(x)) // rounded before the sum: no FMA
		}
		ss += b
	}
	return ss
}

// CorrectsMomentum reports that the receiver must not apply momentum
// again: DGC's updates carry it.
func (d *DGC) CorrectsMomentum() bool { return d.Momentum != 0 }

// Density is the fraction of elements DGC sends at epoch e.
func (d *DGC) Density(e float64) float32 { return warmupDensity(d.Ratio, d.Warmup, e) }

// Compensate implements Compensator: clipping and momentum correction.
func (d *DGC) Compensate(in *Input) {
	g, c := in.G, in.C
	scale := float32(1)
	if d.Clip > 0 {
		if norm := math.Sqrt(SumSquares(g, ClipBlock)); norm > float64(d.Clip) {
			scale = float32(float64(d.Clip) / norm)
		}
	}
	res := in.State.Residual()
	if len(res) != len(c) {
		res = nil
	}
	m := d.Momentum
	if m == 0 {
		for i := range c {
			c[i] = float32(scale * g[i])
			if res != nil {
				c[i] += res[i]
			}
		}
		return
	}
	u := in.State.Private("u", len(g))
	for i := range c {
		gi := float32(scale * g[i])
		var v float32
		// float32(m*u[i]) keeps Go from fusing the product and the sum
		// into an FMA (allowed on arm64, say): the GPU kernel rounds
		// each, and so must every CPU.
		if d.Nesterov {
			u[i] = m * (u[i] + gi)
			v = u[i] + gi
		} else {
			u[i] = float32(m*u[i]) + gi
			v = u[i]
		}
		if res != nil {
			v += res[i]
		}
		c[i] = v
	}
}

// SampleOptions are the options of the sampled selection of the update
// of tensor name after step committed steps (the sample's start changes
// every step, as the reference draws it per call).
func (d *DGC) SampleOptions(name string, step uint64) topk.SampleOptions {
	return topk.SampleOptions{SampleRatio: float64(d.sample()), Start: stepSeed(0, name, step)}
}

var scratchPool = sync.Pool{New: func() any { return new(topk.Scratch) }}

// Compress implements Compressor: sampled selection and momentum factor
// masking.
func (d *DGC) Compress(in *Input) (codec.Op, error) {
	if !(d.Ratio > 0 && d.Ratio <= 1) {
		return nil, fmt.Errorf("%w: dgc ratio %v", codec.ErrRecipe, d.Ratio)
	}
	sample := d.sample()
	if !(sample > 0 && sample <= 1) {
		return nil, fmt.Errorf("%w: dgc sample ratio %v", codec.ErrRecipe, d.Sample)
	}
	r := d.Density(in.Epoch)
	k := K(r, len(in.C))
	s := scratchPool.Get().(*topk.Scratch)
	pos := topk.Sampled(make([]uint32, 0, k), in.C, k, s, d.SampleOptions(in.Name, in.State.Step()))
	scratchPool.Put(s)
	if d.Momentum != 0 {
		// Momentum factor masking, undone if the frame is not delivered
		// (Abort): u then stays the momentum Compensate made, as c
		// stays the residual; rolled back to the last committed u, it
		// would count that u's momentum twice in the next update.
		u := in.State.Private("u", len(in.C))
		saved := make([]float32, len(pos))
		for i, p := range pos {
			saved[i], u[p] = u[p], 0
		}
		in.State.keepOnAbort("u", func(u []float32) {
			for i, p := range pos {
				u[p] = saved[i]
			}
		})
	}
	return selectOp{stage: DGCID, ratio: r, sample: sample, pre: pos}, nil
}
