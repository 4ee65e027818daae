package gradient

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/inthash"
)

// TopK sends the k = ceil(Ratio*n) largest magnitudes of each tensor
// (exact selection) as idx and val segments. With Warmup, the density
// falls over the first Warmup epochs as DGC's does (25%, 6.25%, 1.5625%,
// 0.39%, never below Ratio), so that the first updates, the largest, are
// not held back in the residual.
//
// With Model (topk(r,model=on)), k is taken over the whole update, not
// per tensor: Outbox.Plan ranks the compensated values (update plus
// residual) of every tensor of the update together and gives each tensor
// its share of the model's ceil(r*N) largest, at least one element. The
// layers whose updates are large for their size (an output layer, the
// biases) then get more than r of their elements, the large layers less.
// The frames are the same as per-tensor TopK's at the densities planned.
type TopK struct {
	Ratio  float32
	Warmup float64 // epochs of warm-up (Sender.SetEpoch); 0: none
	Model  bool    // k over the whole update (Outbox.Plan), not per tensor
}

func (c TopK) String() string {
	s := "topk(" + formatRatio(c.Ratio)
	if c.Warmup != 0 {
		s += ",warmup=" + strconv.FormatFloat(c.Warmup, 'g', -1, 64)
	}
	if c.Model {
		s += ",model=on"
	}
	return s + ")"
}

// Density is the fraction of elements TopK sends at epoch e.
func (c TopK) Density(e float64) float32 { return warmupDensity(c.Ratio, c.Warmup, e) }

// Compress implements Compressor.
func (c TopK) Compress(in *Input) (codec.Op, error) {
	if err := checkRatio("topk", c.Ratio); err != nil {
		return nil, err
	}
	return selectOp{stage: TopKID, ratio: c.Density(in.Epoch)}, nil
}

// warmupDensity is the density at epoch e of a warm-up of warmup epochs
// toward ratio: 0.25^(s+1) in its quarter s, never below ratio; ratio
// from the end of the warm-up on (or without one).
func warmupDensity(ratio float32, warmup, e float64) float32 {
	if warmup <= 0 || e >= warmup {
		return ratio
	}
	stage := max(0, int(4*e/warmup))
	return max(float32(math.Pow(0.25, float64(stage+1))), ratio)
}

// checkRatio refuses a compressor's ratio outside (0, 1] (a struct
// literal's zero value among them) before anything is encoded.
func checkRatio(name string, r float32) error {
	if !(r > 0 && r <= 1) {
		return fmt.Errorf("%w: %s: ratio %v: want a number in (0, 1]", codec.ErrRecipe, name, r)
	}
	return nil
}

// RandK sends k = ceil(Ratio*n) elements at positions drawn from a seed
// that changes every step (derived from Seed, the tensor name and the
// step): the frame carries values only.
type RandK struct {
	Ratio float32
	Seed  uint64
}

func (c RandK) String() string {
	if c.Seed != 0 {
		return "randk(" + formatRatio(c.Ratio) + ",seed=" + strconv.FormatUint(c.Seed, 10) + ")"
	}
	return "randk(" + formatRatio(c.Ratio) + ")"
}

// Compress implements Compressor.
func (c RandK) Compress(in *Input) (codec.Op, error) {
	if err := checkRatio("randk", c.Ratio); err != nil {
		return nil, err
	}
	return randkOp{ratio: c.Ratio, seed: stepSeed(c.Seed, in.Name, in.State.Step())}, nil
}

// stepSeed derives a per-tensor, per-step seed.
func stepSeed(seed uint64, name string, step uint64) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return inthash.Mix64(seed ^ h.Sum64() ^ (step+1)*inthash.Gamma)
}

// Threshold sends every element with |x| >= T.
type Threshold struct{ T float32 }

func (c Threshold) String() string {
	return "thresh(" + strconv.FormatFloat(float64(c.T), 'g', -1, 32) + ")"
}

// Compress implements Compressor.
func (c Threshold) Compress(in *Input) (codec.Op, error) {
	if !(c.T >= 0) || math.IsInf(float64(c.T), 0) {
		return nil, fmt.Errorf("%w: thresh: threshold %v: want a finite number >= 0", codec.ErrRecipe, c.T)
	}
	return selectOp{stage: ThresholdID, thresh: c.T}, nil
}

// Quantize sends every element through a lossy stage (sign for
// EF-signSGD, qsgd, int8, fp16 ...). A qsgd stage gets a new seed every
// step, so that its dither does not repeat.
type Quantize struct {
	op codec.Op
}

// NewQuantize returns a Quantize compressor for a lossy stage's recipe
// text, such as "sign", "qsgd(127)" or "int8(4096)".
func NewQuantize(text string) (*Quantize, error) {
	r, err := codec.ParseRecipe(text)
	if err != nil {
		return nil, err
	}
	if len(r.Steps) != 1 || len(r.Steps[0].Ops) != 1 || r.Steps[0].Sel.Star || len(r.Steps[0].Sel.Slots) != 0 {
		return nil, fmt.Errorf("%w: gradient: %q: want one stage", codec.ErrRecipe, text)
	}
	op := r.Steps[0].Ops[0]
	if st := op.Stage(); st.Kind == codec.Coder || !st.Lossy {
		return nil, fmt.Errorf("%w: gradient: %q is not a lossy transform", codec.ErrRecipe, text)
	}
	return &Quantize{op: op}, nil
}

func (c *Quantize) String() string { return c.op.String() }

// Compress implements Compressor.
func (c *Quantize) Compress(in *Input) (codec.Op, error) {
	if s, ok := c.op.(codec.Seeder); ok {
		return s.WithSeed(stepSeed(0, in.Name, in.State.Step())), nil
	}
	return c.op, nil
}

// None sends every tensor dense and exact: the uncompressed baseline.
type None struct{}

func (None) String() string                    { return "none" }
func (None) Compress(*Input) (codec.Op, error) { return nil, nil }

// DefaultTail is the recipe a Sender applies after c's op when none is
// given: positions as deltas in bit-packed blocks, values byte-shuffled
// with the planes Huffman-coded; quantizer outputs Huffman-coded.
func DefaultTail(c Compressor) *codec.Recipe {
	switch c.(type) {
	case TopK, Threshold, *DGC:
		return codec.MustParseRecipe("idx:delta,bitpack | val:shuffle | *:huff0")
	case RandK:
		return codec.MustParseRecipe("val:shuffle | *:huff0")
	case None:
		return &codec.Recipe{}
	}
	return codec.MustParseRecipe("*:huff0")
}

// AtDensity returns c set to keep the share d of each tensor's elements,
// for the compressors that select by a ratio (TopK, RandK, DGC: the
// others report false). A TopK over the whole model (Model) becomes a
// per-tensor TopK at d. The error-feedback memory does not depend on the
// compressor, and DGC's momentum is kept under the same name whatever its
// ratio, so a Sender may change density between updates (SetCompressor).
func AtDensity(c Compressor, d float32) (Compressor, bool) {
	if !(d > 0 && d <= 1) {
		return c, false
	}
	switch c := c.(type) {
	case TopK:
		return TopK{Ratio: d, Warmup: c.Warmup}, true
	case *TopK:
		return TopK{Ratio: d, Warmup: c.Warmup}, true
	case RandK:
		c.Ratio = d
		return c, true
	case *RandK:
		r := *c
		r.Ratio = d
		return r, true
	case *DGC:
		g := *c
		g.Ratio = d
		return &g, true
	}
	return c, false
}
