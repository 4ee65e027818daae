package gradient

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/topk"
	"github.com/tensorpress/tensorpress/internal/view"
)

// The selection stages keep a subset of a float32 tensor's elements:
//
//	topk(r) / topk(k=N)   the k = ceil(r*n) (or N) largest magnitudes, exact
//	thresh(t)             every element with |x| >= |t|
//	dgc(r)                about ceil(r*n) elements by DGC's sampled threshold
//
// Each splits data into idx (uint32 positions, strictly increasing, relative
// to the frame's first element) and val (the float32 values at those
// positions); decoding puts the values back and zeros elsewhere. The three
// differ only in how the encoder selects: their wire layout is the same,
// and a decoder checks that the positions increase and stay inside the
// chunk. Code idx with "idx:delta,bitpack" (or varint) and val with any
// float stage ("val:fp16", "val:shuffle | *:huff0").
//
// Ratios are stored as float32 bits, counts as uvarints. Selection is by
// magnitude bits (the sign bit cleared), so a NaN counts as larger than
// +Inf; ties go to the lower index.

var topkStage = &codec.Stage{
	ID: TopKID, Name: "topk", Kind: codec.Split, Granularity: codec.RangePartitionable, Lossy: true,
	Reads:  "an f32 segment",
	Writes: "idx (uint32 positions, increasing) and val (f32 values)",
	Doc:    "exact top-k by magnitude: topk(r) keeps ceil(r*n) elements (r in (0,1]), topk(k=N) keeps N; the rest decode as zeros",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("topk", args, 1, "ratio", "k"); err != nil {
			return nil, err
		}
		if err := noRepeats("topk", args, "ratio"); err != nil {
			return nil, err
		}
		var o selectOp
		o.stage = TopKID
		for i, a := range args {
			switch {
			case a.Key == "k":
				k, err := codec.IntArg("topk", args[i:i+1], -1, "k", 0, 1, math.MaxInt32)
				if err != nil {
					return nil, err
				}
				o.count = k
			default:
				r, err := ratioArg("topk", a.Value)
				if err != nil {
					return nil, err
				}
				o.ratio = r
			}
		}
		if (o.count == 0) == (o.ratio == 0) {
			return nil, fmt.Errorf("%w: topk takes a ratio or k=N (one of them)", codec.ErrRecipe)
		}
		return o, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		o := selectOp{stage: TopKID}
		if len(p) == 0 {
			return nil, fmt.Errorf("%w: topk: no parameters", codec.ErrCorrupt)
		}
		switch p[0] {
		case 0:
			if len(p) != 5 {
				return nil, fmt.Errorf("%w: topk params %x", codec.ErrCorrupt, p)
			}
			r := math.Float32frombits(binary.LittleEndian.Uint32(p[1:]))
			if !(r > 0 && r <= 1) {
				return nil, fmt.Errorf("%w: topk ratio %v", codec.ErrCorrupt, r)
			}
			o.ratio = r
		case 1:
			k, n := binary.Uvarint(p[1:])
			if n <= 0 || 1+n != len(p) || k == 0 || k > math.MaxInt32 {
				return nil, fmt.Errorf("%w: topk params %x", codec.ErrCorrupt, p)
			}
			o.count = int(k)
		default:
			return nil, fmt.Errorf("%w: topk params %x", codec.ErrCorrupt, p)
		}
		return o, nil
	},
}

var thresholdStage = &codec.Stage{
	ID: ThresholdID, Name: "thresh", Kind: codec.Split, Granularity: codec.Elementwise, Lossy: true,
	Reads:  "an f32 segment",
	Writes: "idx (uint32 positions, increasing) and val (f32 values)",
	Doc:    "threshold sparsification: thresh(t) keeps every element with |x| >= t; the rest decode as zeros",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("thresh", args, 1, "t"); err != nil {
			return nil, err
		}
		if len(args) != 1 {
			return nil, fmt.Errorf("%w: thresh takes one threshold", codec.ErrRecipe)
		}
		t, err := strconv.ParseFloat(args[0].Value, 32)
		if err != nil || !(t >= 0) || math.IsInf(t, 0) {
			return nil, fmt.Errorf("%w: thresh: threshold %q: want a finite number >= 0", codec.ErrRecipe, args[0].Value)
		}
		return selectOp{stage: ThresholdID, thresh: float32(t)}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 4 {
			return nil, fmt.Errorf("%w: thresh params %x", codec.ErrCorrupt, p)
		}
		t := math.Float32frombits(binary.LittleEndian.Uint32(p))
		if !(t >= 0) || math.IsInf(float64(t), 0) {
			return nil, fmt.Errorf("%w: thresh threshold %v", codec.ErrCorrupt, t)
		}
		return selectOp{stage: ThresholdID, thresh: t}, nil
	},
}

var dgcStage = &codec.Stage{
	ID: DGCID, Name: "dgc", Kind: codec.Split, Granularity: codec.RangePartitionable, Lossy: true,
	Reads:  "an f32 segment",
	Writes: "idx (uint32 positions, increasing) and val (f32 values)",
	Doc: "Deep Gradient Compression's selection: dgc(r) keeps at most ceil(r*n) elements above a threshold " +
		"estimated on a strided sample (sample=0.01 of the elements); the rest decode as zeros",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("dgc", args, 1, "ratio", "sample"); err != nil {
			return nil, err
		}
		if err := noRepeats("dgc", args, "ratio"); err != nil {
			return nil, err
		}
		o := selectOp{stage: DGCID, sample: defaultSample}
		for _, a := range args {
			r, err := ratioArg("dgc", a.Value)
			if err != nil {
				return nil, err
			}
			if a.Key == "sample" {
				o.sample = r
			} else {
				o.ratio = r
			}
		}
		if o.ratio == 0 {
			return nil, fmt.Errorf("%w: dgc takes a ratio", codec.ErrRecipe)
		}
		return o, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 8 {
			return nil, fmt.Errorf("%w: dgc params %x", codec.ErrCorrupt, p)
		}
		r := math.Float32frombits(binary.LittleEndian.Uint32(p))
		s := math.Float32frombits(binary.LittleEndian.Uint32(p[4:]))
		if !(r > 0 && r <= 1) || !(s > 0 && s <= 1) {
			return nil, fmt.Errorf("%w: dgc params %x", codec.ErrCorrupt, p)
		}
		return selectOp{stage: DGCID, ratio: r, sample: s}, nil
	},
}

const defaultSample = 0.01

func init() {
	codec.Register(topkStage)
	codec.Register(thresholdStage)
	codec.Register(dgcStage)
}

// ratioArg parses a ratio in (0, 1].
func ratioArg(stage, s string) (float32, error) {
	r, err := strconv.ParseFloat(s, 32)
	if err != nil || !(r > 0 && r <= 1) {
		return 0, fmt.Errorf("%w: %s: ratio %q: want a number in (0, 1]", codec.ErrRecipe, stage, s)
	}
	return float32(r), nil
}

// noRepeats refuses an argument given twice: by name twice, or by position
// and by name (pos[i] names positional argument i). Call it after
// codec.CheckArgs, which bounds the positional ones.
func noRepeats(stage string, args []codec.Arg, pos ...string) error {
	seen := make(map[string]bool, len(args))
	for i, a := range args {
		k := a.Key
		if k == "" && i < len(pos) {
			k = pos[i]
		}
		if seen[k] {
			return fmt.Errorf("%w: %s: %s given twice", codec.ErrRecipe, stage, k)
		}
		seen[k] = true
	}
	return nil
}

func formatRatio(r float32) string { return strconv.FormatFloat(float64(r), 'g', -1, 32) }

// selectOp is a configured selection stage. pre, when not nil, is a
// selection made by a Compressor (positions increasing, inside the
// segment): Encode then gathers those elements instead of selecting.
type selectOp struct {
	stage  codec.StageID
	ratio  float32 // topk, dgc
	count  int     // topk(k=N)
	thresh float32 // thresh
	sample float32 // dgc
	pre    []uint32
	preVal []float32 // with pre: the values, when the input is not read (Preselected)
}

var (
	_ codec.Op         = selectOp{}
	_ codec.AddDecoder = selectOp{}
)

func (o selectOp) Stage() *codec.Stage {
	switch o.stage {
	case ThresholdID:
		return thresholdStage
	case DGCID:
		return dgcStage
	}
	return topkStage
}

func (o selectOp) String() string {
	switch o.stage {
	case ThresholdID:
		return "thresh(" + strconv.FormatFloat(float64(o.thresh), 'g', -1, 32) + ")"
	case DGCID:
		if o.sample != defaultSample {
			return "dgc(" + formatRatio(o.ratio) + ",sample=" + formatRatio(o.sample) + ")"
		}
		return "dgc(" + formatRatio(o.ratio) + ")"
	}
	if o.count > 0 {
		return "topk(k=" + strconv.Itoa(o.count) + ")"
	}
	return "topk(" + formatRatio(o.ratio) + ")"
}

func (o selectOp) AppendParams(dst []byte) []byte {
	switch o.stage {
	case ThresholdID:
		return binary.LittleEndian.AppendUint32(dst, math.Float32bits(o.thresh))
	case DGCID:
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(o.ratio))
		return binary.LittleEndian.AppendUint32(dst, math.Float32bits(o.sample))
	}
	if o.count > 0 {
		return binary.AppendUvarint(append(dst, 1), uint64(o.count))
	}
	return binary.LittleEndian.AppendUint32(append(dst, 0), math.Float32bits(o.ratio))
}

func checkF32(stage string, in codec.SegInfo) error {
	if in.Elem != codec.F32 || in.Len%4 != 0 {
		return fmt.Errorf("%s: want an f32 segment, got %v of %d bytes", stage, in.Elem, in.Len)
	}
	// Positions (idx, randk's and bloom's, polyfit's perm) are uint32.
	if uint64(in.Len/4) > math.MaxUint32 {
		return fmt.Errorf("%s: a segment of %d elements: at most 2^32-1", stage, in.Len/4)
	}
	return nil
}

func (o selectOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if err := checkF32(o.Stage().Name, in); err != nil {
		return nil, err
	}
	return []codec.SegInfo{
		{Name: codec.OutputName(in.Name, "idx"), Elem: codec.U32, Len: -1},
		{Name: codec.OutputName(in.Name, "val"), Elem: codec.F32, Len: -1},
	}, nil
}

// K is how many elements a ratio r keeps of n: ceil(r*n), at least 1 when
// n > 0 (the rounding of DGC's reference implementation). The product is
// taken with a relative tolerance of 1e-6, so that a ratio stored as
// float32 keeps its decimal meaning (0.1 of 100 is 10, not 11).
//
// K is part of the wire format (docs/FORMAT.md, "Gradient stages"): randk's
// decoder computes the count from the ratio, so the rule cannot change
// without one. From r·n = 1e6 on the tolerance can take whole elements off
// (K(1, 2000000) is 1999998).
func K(r float32, n int) int {
	if n == 0 {
		return 0
	}
	x := float64(r) * float64(n)
	k := int(math.Ceil(x - x*1e-6))
	return min(max(k, 1), n)
}

// selectInto appends the positions o selects in x to dst.
func (o selectOp) selectInto(dst []uint32, x []float32, s *topk.Scratch) []uint32 {
	switch o.stage {
	case ThresholdID:
		return topk.Threshold(dst, x, o.thresh)
	case DGCID:
		return topk.Sampled(dst, x, K(o.ratio, len(x)), s, topk.SampleOptions{SampleRatio: float64(o.sample)})
	}
	k := o.count
	if k == 0 {
		k = K(o.ratio, len(x))
	}
	return topk.Exact(dst, x, min(k, len(x)), s)
}

func (o selectOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	if err := checkF32(o.Stage().Name, in.SegInfo); err != nil {
		return nil, err
	}
	x, ok := view.As[float32](in.Data)
	if !ok {
		x, _ = view.As[float32](ctx.Arena.Alloc(in.Len))
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(in.Data[4*i:]))
		}
	}
	pos := o.pre
	if pos == nil {
		// Room for the expected count; a threshold that keeps more
		// grows the slice on the heap.
		want := len(x)/64 + 16
		if o.stage != ThresholdID {
			want = min(len(x), max(o.count, K(o.ratio, len(x))))
		}
		buf, _ := view.As[uint32](ctx.Arena.Alloc(4 * want))
		var s topk.Scratch
		pos = o.selectInto(buf[:0], x, &s)
	} else if err := checkPositions(pos, len(x)); err != nil {
		return nil, fmt.Errorf("%s: preselected %w", o, err)
	}
	val := o.preVal
	if val == nil {
		val, _ = view.As[float32](ctx.Arena.Alloc(4 * len(pos)))
		for i, p := range pos {
			val[i] = x[p]
		}
	} else if len(val) != len(pos) {
		return nil, fmt.Errorf("%s: %d preselected values for %d positions", o, len(val), len(pos))
	}
	return []codec.Segment{
		{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "idx"), Elem: codec.U32}, Data: view.Of(pos)},
		{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "val"), Elem: codec.F32}, Data: view.Of(val)},
	}, nil
}

// checkPositions reports positions that do not increase or reach n.
func checkPositions(pos []uint32, n int) error {
	prev := int64(-1)
	for i, p := range pos {
		if int64(p) <= prev || int64(p) >= int64(n) {
			return fmt.Errorf("position %d (%d) is out of order or past %d elements", i, p, n)
		}
		prev = int64(p)
	}
	return nil
}

// sparseParts checks a selection's idx and val segments against a chunk of
// n elements and returns them as typed slices.
func sparseParts(ctx *codec.Ctx, name string, parts []codec.Segment, in codec.SegInfo) ([]uint32, []float32, error) {
	if err := checkF32(name, in); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", codec.ErrCorrupt, err)
	}
	if len(parts) != 2 {
		return nil, nil, fmt.Errorf("%w: %s: %d parts", codec.ErrCorrupt, name, len(parts))
	}
	idx, val := parts[0].Data, parts[1].Data
	if len(idx)%4 != 0 || len(val) != len(idx) || len(idx) > in.Len {
		return nil, nil, fmt.Errorf("%w: %s: %d index bytes and %d value bytes for %d elements", codec.ErrCorrupt, name, len(idx), len(val), in.Len/4)
	}
	pos := asU32(ctx, idx)
	if err := checkPositions(pos, in.Len/4); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", codec.ErrCorrupt, name, err)
	}
	return pos, asF32(ctx, val), nil
}

func (o selectOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	pos, val, err := sparseParts(ctx, o.Stage().Name, parts, in)
	if err != nil {
		return nil, err
	}
	out := dst[len(dst) : len(dst)+in.Len]
	clear(out)
	for i, p := range pos {
		binary.LittleEndian.PutUint32(out[4*p:], math.Float32bits(val[i]))
	}
	return dst[:len(dst)+in.Len], nil
}

// ChecksFinite: DecodeAdd honours ctx.Finite (codec.FiniteAddDecoder), as
// do RandK's, Bloom's and PowerSGD's: a Receiver adds their updates
// without decoding them dense.
func (selectOp) ChecksFinite() {}

var (
	_ codec.FiniteAddDecoder = selectOp{}
	_ codec.FiniteAddDecoder = randkOp{}
	_ codec.FiniteAddDecoder = bloomOp{}
	_ codec.FiniteAddDecoder = (*powersgdOp)(nil)
)

func (o selectOp) DecodeAdd(ctx *codec.Ctx, acc []float32, alpha float32, parts []codec.Segment, in codec.SegInfo) error {
	pos, val, err := sparseParts(ctx, o.Stage().Name, parts, in)
	if err != nil {
		return err
	}
	if len(acc) != in.Len/4 {
		return fmt.Errorf("%w: %s: accumulator of %d for %d elements", codec.ErrCorrupt, o.Stage().Name, len(acc), in.Len/4)
	}
	if ctx.Finite {
		if err := codec.CheckFinite(alpha, val); err != nil {
			return fmt.Errorf("%s: %w", o.Stage().Name, err)
		}
	}
	for i, p := range pos {
		acc[p] += alpha * val[i]
	}
	return nil
}

// asU32 and asF32 view little-endian bytes as typed elements, copying into
// the arena when b is not aligned.
func asU32(ctx *codec.Ctx, b []byte) []uint32 { return view.AsCopy[uint32](b, ctx.Arena.Alloc) }

func asF32(ctx *codec.Ctx, b []byte) []float32 { return view.AsCopy[float32](b, ctx.Arena.Alloc) }

// Preselected returns the op that compressor c (TopK or *DGC) would put in
// a frame of n elements at epoch epoch had it selected positions pos
// (ascending) whose values are val: with the Sender's tail after it, the
// frame is byte for byte the Sender's for the same selection. For a
// selection made elsewhere (package gpu); the op does not read its input,
// whose length must still be n elements.
func Preselected(c Compressor, n int, epoch float64, pos []uint32, val []float32) (codec.Op, error) {
	if len(val) != len(pos) {
		return nil, fmt.Errorf("gradient: Preselected: %d values for %d positions", len(val), len(pos))
	}
	if err := checkPositions(pos, n); err != nil {
		return nil, fmt.Errorf("gradient: Preselected: %w", err)
	}
	switch c := c.(type) {
	case TopK:
		if err := checkRatio("topk", c.Ratio); err != nil {
			return nil, err
		}
		return selectOp{stage: TopKID, ratio: c.Density(epoch), pre: pos, preVal: val}, nil
	case *DGC:
		return selectOp{stage: DGCID, ratio: c.Density(epoch), sample: c.sample(), pre: pos, preVal: val}, nil
	}
	return nil, fmt.Errorf("%w: gradient: Preselected: %v selects on the CPU only", codec.ErrUnsupported, c)
}
