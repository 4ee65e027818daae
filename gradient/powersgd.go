package gradient

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/view"
)

// The powersgd stage codes a float32 tensor, viewed as a matrix M of
// rows = shape[0] by cols = n/rows (a vector is n by 1), as two factors:
// p (rows by r) and q (cols by r), both row-major float32, decoding to
// p·qᵀ. r is the rank parameter, clamped to min(rows, cols). It works on
// whole tensors only.
//
// As a recipe stage, powersgd(r, seed) makes one power iteration from a
// random q (normal, drawn from seed): p = M·q, orthonormalised, then
// q = Mᵀ·p. The PowerSGD compressor (error feedback, q kept between steps
// as a warm start) gives better factors through the same wire format.
//
// Wire: params uvarint(r) uvarint(seed); segments p and q.

const maxRank = 1024

var powersgdStage = &codec.Stage{
	ID: PowerSGDID, Name: "powersgd", Kind: codec.Split, Granularity: codec.WholeTensor, Lossy: true,
	Reads:  "an f32 tensor (data, whole)",
	Writes: "p (f32 rows×r) and q (f32 cols×r), decoding to p·qᵀ",
	Doc:    "PowerSGD's low-rank factors: the tensor as a shape[0]×rest matrix, one power iteration of rank r; powersgd(r, seed)",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("powersgd", args, 2, "rank", "seed"); err != nil {
			return nil, err
		}
		if err := noRepeats("powersgd", args, "rank", "seed"); err != nil {
			return nil, err
		}
		r, err := rankArg(args)
		if err != nil {
			return nil, err
		}
		o := &powersgdOp{rank: r}
		for i, a := range args {
			if a.Key == "seed" || a.Key == "" && i == 1 {
				if o.seed, err = strconv.ParseUint(a.Value, 10, 64); err != nil {
					return nil, fmt.Errorf("%w: powersgd: seed %q", codec.ErrRecipe, a.Value)
				}
			}
		}
		return o, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		r, n := binary.Uvarint(p)
		if n <= 0 || r == 0 || r > maxRank {
			return nil, fmt.Errorf("%w: powersgd params %x", codec.ErrCorrupt, p)
		}
		s, m := binary.Uvarint(p[n:])
		if m <= 0 || n+m != len(p) {
			return nil, fmt.Errorf("%w: powersgd params %x", codec.ErrCorrupt, p)
		}
		return &powersgdOp{rank: int(r), seed: s}, nil
	},
}

func init() { codec.Register(powersgdStage) }

// rankArg is the required rank argument (first, or rank=r) of the stage
// and the compressor.
func rankArg(args []codec.Arg) (int, error) {
	r, err := codec.IntArg("powersgd", args, 0, "rank", 0, 1, maxRank)
	if err == nil && r == 0 {
		err = fmt.Errorf("%w: powersgd needs a rank", codec.ErrRecipe)
	}
	return r, err
}

type powersgdOp struct {
	rank int
	seed uint64
	p, q []float32 // factors computed by the compressor, or nil
}

var (
	_ codec.Op         = (*powersgdOp)(nil)
	_ codec.AddDecoder = (*powersgdOp)(nil)
)

func (*powersgdOp) Stage() *codec.Stage { return powersgdStage }

func (o *powersgdOp) String() string {
	if o.seed != 0 {
		return "powersgd(" + strconv.Itoa(o.rank) + ",seed=" + strconv.FormatUint(o.seed, 10) + ")"
	}
	return "powersgd(" + strconv.Itoa(o.rank) + ")"
}

func (o *powersgdOp) AppendParams(dst []byte) []byte {
	return binary.AppendUvarint(binary.AppendUvarint(dst, uint64(o.rank)), o.seed)
}

// matrix is the rows×cols view of a tensor and the clamped rank.
func matrix(t *codec.Tensor, rank int) (rows, cols, r int, err error) {
	if t == nil || t.DType != codec.F32 {
		return 0, 0, 0, fmt.Errorf("powersgd: want an f32 tensor")
	}
	n := t.NumElements()
	if n <= 0 || n > math.MaxInt32 {
		return 0, 0, 0, fmt.Errorf("powersgd: tensor of %d elements", n)
	}
	rows = int(n)
	if len(t.Shape) >= 2 {
		rows = int(t.Shape[0])
	}
	cols = int(n) / rows
	return rows, cols, min(rank, rows, cols), nil
}

func (o *powersgdOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if err := checkF32("powersgd", in); err != nil {
		return nil, err
	}
	if in.Name != "data" {
		return nil, fmt.Errorf("powersgd: works on a whole tensor (data), not on %q", in.Name)
	}
	return []codec.SegInfo{{Name: "p", Elem: codec.F32, Len: -1}, {Name: "q", Elem: codec.F32, Len: -1}}, nil
}

func (o *powersgdOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	rows, cols, r, err := matrix(ctx.Tensor, o.rank)
	if err != nil {
		return nil, err
	}
	if !ctx.Tensor.IsWhole() || in.Len != 4*rows*cols {
		return nil, fmt.Errorf("powersgd: needs the whole tensor in one frame")
	}
	p, q := o.p, o.q
	if p == nil {
		m := asF32(ctx, in.Data)
		q = make([]float32, cols*r)
		rng := rand.New(rand.NewPCG(o.seed, 0x5eed))
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		p = make([]float32, rows*r)
		powerStep(m, rows, cols, r, p, q)
	}
	if len(p) != rows*r || len(q) != cols*r {
		return nil, fmt.Errorf("powersgd: factors of %d and %d elements for %d×%d at rank %d", len(p), len(q), rows, cols, r)
	}
	return []codec.Segment{
		{SegInfo: codec.SegInfo{Name: "p", Elem: codec.F32}, Data: view.Of(p)},
		{SegInfo: codec.SegInfo{Name: "q", Elem: codec.F32}, Data: view.Of(q)},
	}, nil
}

// powerStep is one step of PowerSGD's power iteration on the rows×cols
// matrix m from q (cols×r, overwritten): p = m·q, p orthonormalised
// (Householder QR in float64, gonum's LAPACK), q = mᵀ·p.
func powerStep(m []float32, rows, cols, r int, p, q []float32) {
	M := blas32.General{Rows: rows, Cols: cols, Stride: cols, Data: m}
	P := blas32.General{Rows: rows, Cols: r, Stride: r, Data: p}
	Q := blas32.General{Rows: cols, Cols: r, Stride: r, Data: q}
	blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, M, Q, 0, P)
	orthonormalize(p, rows, r)
	blas32.Gemm(blas.Trans, blas.NoTrans, 1, M, P, 0, Q)
}

// orthonormalize replaces the columns of the rows×r matrix p (r <= rows)
// by an orthonormal basis of their span (completed arbitrarily when they
// are dependent), as the thin Q of a QR factorisation.
func orthonormalize(p []float32, rows, r int) {
	a := blas64.General{Rows: rows, Cols: r, Stride: r, Data: make([]float64, rows*r)}
	bad := false
	for i, v := range p {
		a.Data[i] = float64(v)
		bad = bad || math.IsNaN(a.Data[i]) || math.IsInf(a.Data[i], 0)
	}
	if bad { // LAPACK would spread the NaN anyway; start from the identity
		clear(a.Data)
		for j := range r {
			a.Data[j*r+j] = 1
		}
	}
	tau := make([]float64, r)
	work := make([]float64, 1)
	lapack64.Geqrf(a, tau, work, -1)
	work = make([]float64, max(int(work[0]), r))
	lapack64.Geqrf(a, tau, work, len(work))
	lapack64.Orgqr(a, tau, work, len(work))
	for i, v := range a.Data {
		p[i] = float32(v)
	}
}

func (o *powersgdOp) factors(ctx *codec.Ctx, parts []codec.Segment, in codec.SegInfo) (blas32.General, blas32.General, int, int, error) {
	var P, Q blas32.General
	rows, cols, r, err := matrix(ctx.Tensor, o.rank)
	if err == nil && in.Len != 4*rows*cols {
		err = fmt.Errorf("powersgd: %d bytes for a %d×%d tensor", in.Len, rows, cols)
	}
	if err == nil && (len(parts) != 2 || len(parts[0].Data) != 4*rows*r || len(parts[1].Data) != 4*cols*r) {
		err = fmt.Errorf("powersgd: factors do not match a %d×%d tensor at rank %d", rows, cols, r)
	}
	if err != nil {
		return P, Q, 0, 0, fmt.Errorf("%w: %v", codec.ErrCorrupt, err)
	}
	P = blas32.General{Rows: rows, Cols: r, Stride: r, Data: asF32(ctx, parts[0].Data)}
	Q = blas32.General{Rows: cols, Cols: r, Stride: r, Data: asF32(ctx, parts[1].Data)}
	return P, Q, rows, cols, nil
}

func (o *powersgdOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	P, Q, rows, cols, err := o.factors(ctx, parts, in)
	if err != nil {
		return nil, err
	}
	out := dst[len(dst) : len(dst)+in.Len]
	c, ok := view.As[float32](out)
	if !ok {
		c, _ = view.As[float32](ctx.Arena.Alloc(in.Len))
	}
	blas32.Gemm(blas.NoTrans, blas.Trans, 1, P, Q, 0, blas32.General{Rows: rows, Cols: cols, Stride: cols, Data: c})
	if !ok {
		for i, v := range c {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	}
	return dst[:len(dst)+in.Len], nil
}

// ChecksFinite: DecodeAdd honours ctx.Finite (codec.FiniteAddDecoder).
func (*powersgdOp) ChecksFinite() {}

func (o *powersgdOp) DecodeAdd(ctx *codec.Ctx, acc []float32, alpha float32, parts []codec.Segment, in codec.SegInfo) error {
	P, Q, rows, cols, err := o.factors(ctx, parts, in)
	if err != nil {
		return err
	}
	if len(acc) != rows*cols {
		return fmt.Errorf("%w: powersgd: accumulator of %d for %d×%d", codec.ErrCorrupt, len(acc), rows, cols)
	}
	if ctx.Finite {
		if err := finiteProduct(alpha, P, Q); err != nil {
			return fmt.Errorf("powersgd: %w", err)
		}
	}
	blas32.Gemm(blas.NoTrans, blas.Trans, alpha, P, Q, 1, blas32.General{Rows: rows, Cols: cols, Stride: cols, Data: acc})
	return nil
}

// finiteProduct returns an error wrapping codec.ErrNonFinite unless every
// element of alpha·P·Qᵀ is finite: P and Q finite, and their largest
// magnitudes times the rank, and times alpha where it is over 1, within
// float32's range, so that no sum of products can pass it (gonum sums the
// products in float32, then scales by alpha). A NaN or an infinity in a
// factor makes its largest magnitude one, and the bound a NaN or +Inf.
func finiteProduct(alpha float32, P, Q blas32.General) error {
	maxAbs := func(v []float32) float64 {
		m := float32(0)
		for _, x := range v {
			m = max(m, x, -x) // max is NaN where x is
		}
		return float64(m)
	}
	p, q := maxAbs(P.Data), maxAbs(Q.Data)
	if b := p * q * float64(P.Cols) * max(1, math.Abs(float64(alpha))); !(b <= math.MaxFloat32) {
		return fmt.Errorf("%w: factors of magnitude %g and %g at rank %d times %g may pass float32's range", codec.ErrNonFinite, p, q, P.Cols, alpha)
	}
	return nil
}

// PowerSGD (Vogels et al., NeurIPS 2019) sends rank-Rank factors of each
// matrix-shaped tensor (shape[0] by the rest), with error feedback and q
// kept between steps as a warm start: per step p = M·q, orthonormalised,
// q = Mᵀ·p, and the receiver adds p·qᵀ. Vectors (biases) and matrices
// that the factors would not shrink MinRate times are sent dense, as the
// reference hook does (its min_compression_rate, default 2).
//
// With Warmup, the rank falls over the first Warmup epochs as TopK's
// density does in its warm-up: it starts at From (default 4×Rank) and
// halves in equal stages down to Rank; the first columns of the larger
// rank's q are the warm start of the smaller.
type PowerSGD struct {
	Rank    int
	MinRate float64 // default 2
	Seed    uint64  // for the first q
	Iters   int     // power iterations per step (0 and 1: one, as the reference hook)
	Warmup  float64 // epochs of warm-up (Sender.SetEpoch); 0: none
	From    int     // the rank the warm-up starts at (0: 4×Rank)
}

// RankAt is the rank of the factors at epoch e.
func (c *PowerSGD) RankAt(e float64) int {
	from := c.From
	if from == 0 {
		from = 4 * c.Rank
	}
	if c.Warmup <= 0 || e >= c.Warmup || from <= c.Rank {
		return c.Rank
	}
	stages := 0
	for r := from; r > c.Rank; r = (r + 1) / 2 {
		stages++
	}
	r := from
	for range int(float64(stages) * max(e, 0) / c.Warmup) {
		r = (r + 1) / 2
	}
	return max(r, c.Rank)
}

func parsePowerSGD(args []codec.Arg) (*PowerSGD, error) {
	if err := codec.CheckArgs("powersgd", args, 1, "rank", "min", "seed", "iters", "warmup", "from"); err != nil {
		return nil, err
	}
	if err := noRepeats("powersgd", args, "rank"); err != nil {
		return nil, err
	}
	r, err := rankArg(args)
	if err != nil {
		return nil, err
	}
	c := &PowerSGD{Rank: r, MinRate: 2}
	for _, a := range args {
		switch a.Key {
		case "min":
			if c.MinRate, err = floatArg("powersgd", a, 0, 1e9); err != nil {
				return nil, err
			}
		case "seed":
			if c.Seed, err = strconv.ParseUint(a.Value, 10, 64); err != nil {
				return nil, fmt.Errorf("%w: powersgd: seed %q", codec.ErrRecipe, a.Value)
			}
		case "iters":
			if c.Iters, err = codec.IntArg("powersgd", []codec.Arg{a}, -1, "iters", 1, 1, 16); err != nil {
				return nil, err
			}
		case "warmup":
			if c.Warmup, err = floatArg("powersgd", a, 0, 1e6); err != nil {
				return nil, err
			}
		case "from":
			if c.From, err = codec.IntArg("powersgd", []codec.Arg{a}, -1, "from", 0, 1, maxRank); err != nil {
				return nil, err
			}
		}
	}
	if c.From != 0 && c.From < c.Rank {
		return nil, fmt.Errorf("%w: powersgd: from=%d is below the rank %d (the warm-up starts at the larger rank)", codec.ErrRecipe, c.From, c.Rank)
	}
	if c.From != 0 && c.Warmup == 0 {
		return nil, fmt.Errorf("%w: powersgd: from=%d without warmup=", codec.ErrRecipe, c.From)
	}
	return c, nil
}

func (c *PowerSGD) String() string {
	s := "powersgd(" + strconv.Itoa(c.Rank)
	if c.MinRate != 2 {
		s += ",min=" + strconv.FormatFloat(c.MinRate, 'g', -1, 64)
	}
	if c.Seed != 0 {
		s += ",seed=" + strconv.FormatUint(c.Seed, 10)
	}
	if c.Iters > 1 {
		s += ",iters=" + strconv.Itoa(c.Iters)
	}
	if c.Warmup != 0 {
		s += ",warmup=" + strconv.FormatFloat(c.Warmup, 'g', -1, 64)
	}
	if c.From != 0 {
		s += ",from=" + strconv.Itoa(c.From)
	}
	return s + ")"
}

// Compress implements Compressor.
func (c *PowerSGD) Compress(in *Input) (codec.Op, error) {
	if c.Rank < 1 || c.Rank > maxRank || !(c.MinRate >= 0) || c.Iters < 0 || c.Iters > 16 || c.From < 0 || c.From > maxRank {
		return nil, fmt.Errorf("%w: powersgd: rank %d (want 1 to %d), min rate %v, iters %d (want 0 to 16), from %d", codec.ErrRecipe, c.Rank, maxRank, c.MinRate, c.Iters, c.From)
	}
	if len(in.Shape) < 2 || len(in.C) == 0 {
		return nil, nil // vectors, and empty matrices, go dense
	}
	t := &codec.Tensor{DType: codec.F32, Shape: in.Shape}
	rows, cols, r, err := matrix(t, min(c.RankAt(in.Epoch), maxRank))
	if err != nil {
		return nil, err
	}
	if float64(rows)*float64(cols) < c.MinRate*float64(r)*float64(rows+cols) {
		return nil, nil
	}
	// A committed q of another length (a restored image, another rank or
	// an earlier compressor's buffer) is no warm start: draw a new one,
	// as on the first step, rather than start from zeros.
	old := in.State.Committed("q")
	first := len(old) != cols*r
	q := in.State.Private("q", cols*r)
	if was := len(old) / cols; first && was > r && len(old) == cols*was {
		// The warm-up's larger rank: its first r columns (the
		// directions found first) start the smaller.
		for i := range cols {
			copy(q[i*r:(i+1)*r], old[i*was:i*was+r])
		}
		first = false
	}
	if first {
		rng := rand.New(rand.NewPCG(c.Seed, stepSeed(c.Seed, in.Name, 0)))
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
	}
	p := make([]float32, rows*r)
	for range max(1, c.Iters) {
		powerStep(in.C, rows, cols, r, p, q)
	}
	return &powersgdOp{rank: r, p: p, q: q}, nil
}
