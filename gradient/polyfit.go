package gradient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/gonum/mat"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/view"
)

// The polyfit stage codes a segment of float32 values, normally the val of
// topk or bloom, by DeepReduce's PolyFit (Kostopoulou et al., NeurIPS
// 2021): sorted, the values of a sparse gradient form a smooth curve, so a
// few polynomials describe them and only the sort order must be sent.
//
//	polyfit[(d)]   d: the polynomial degree, 0..8, default 5
//
// splits a segment s of k f32 values into
//
//	s.perm  k uint32: perm[i] is the input index of the i-th value in the
//	        sort order (code it with bitpack: ceil(log2 k) bits a value)
//	s.coef  bytes: uvarint P, then float32 coefficients (little endian)
//
// Sort order: descending by value, in the total order
// +NaN > +Inf > ... > +0 > -0 > ... > -Inf > -NaN (IEEE bits), equal bits
// by increasing input index. P is the number of values whose sign bit is
// clear: the first P in the order form the non-negative part, the other
// k-P the negative part.
//
// Segments: a part of N values is cut, in order, into segments of lengths
// given by DeepReduce's get_segments: s_d = floor(N/d) for d in 5, 10, 30,
// 100, 300, 1000, 3000, 10^4, 3*10^4, 10^5, keeping those above 30 (a
// prefix, the s_d decrease); the layout is the kept lengths in reverse, then
// N - 2*sum(kept) (always above 0.3*N), then the kept lengths: short
// segments at the steep ends, one long middle. No segment is kept for
// N < 155, giving the single segment [N]; a part of 0 values has no
// segments. (DeepReduce computes int(N*(1/d)) in floating point; floor(N/d)
// is the same but for rare roundings and is exact.)
//
// Coefficients: segment j of length L has degree e = min(d, L-1) and
// e+1 coefficients c_0..c_e (increasing powers) of the least-squares
// polynomial through (x_i, y_i), x_i = i/(L-1) (x_0 = 0 when L = 1), y_i
// its i-th value; the fit is a QR least-squares solve in float64 (gonum),
// rounded to float32. The coef segment holds the segments of the
// non-negative part, then those of the negative part, each segment's
// coefficients c_0 first, and nothing else: its length is exactly
// len(uvarint(P)) + 4*sum(e_j+1).
//
// Decoding: value i of a segment is float32 of the float64 Horner sum
// y = c_e; y = round(y*x_i) + c_{j} for j = e-1..0, with x_i =
// float64(i)/float64(L-1) and every product rounded to float64 (no fused
// multiply-add), so every platform decodes the same bits; y is then kept
// to its part's sign: max(y, 0) in the non-negative part, min(y, 0) in the
// negative part (Go's max and min: a NaN stays NaN), which can only bring
// it closer to the value it stands for. The r-th value of the order
// (segments in sequence) goes to output position perm[r]. A
// decoder checks that perm is a permutation of 0..k-1, that P <= k and its
// uvarint is minimal, and the exact coef length.
//
// The decoded values are not the input's: the fit error goes to error
// feedback like any other compression error. Values that are NaN or
// infinite make the coefficients of their segment NaN.

var polyfitStage = &codec.Stage{
	ID: PolyFitID, Name: "polyfit", Kind: codec.Split, Granularity: codec.Elementwise, Lossy: true,
	Reads:  "an f32 segment (the val of a selection)",
	Writes: "perm (uint32 sort permutation) and coef (piecewise polynomial coefficients)",
	Doc: "DeepReduce's PolyFit value coding: polyfit(d) sorts the values, fits polynomials of degree d (default 5) " +
		"to segments of the sorted curve and sends the coefficients and the permutation (code perm with bitpack)",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("polyfit", args, 1, "degree"); err != nil {
			return nil, err
		}
		d, err := codec.IntArg("polyfit", args, 0, "degree", defaultPolyDegree, 0, maxPolyDegree)
		if err != nil {
			return nil, err
		}
		return polyfitOp{degree: d}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 1 || p[0] > maxPolyDegree {
			return nil, fmt.Errorf("%w: polyfit params %x", codec.ErrCorrupt, p)
		}
		return polyfitOp{degree: int(p[0])}, nil
	},
}

func init() { codec.Register(polyfitStage) }

const (
	defaultPolyDegree = 5
	maxPolyDegree     = 8
)

var polyDivisors = [...]int{5, 10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000}

// maxPolySegments is the most segments the two parts of a segment make.
const maxPolySegments = 2 * (2*len(polyDivisors) + 1)

// polySegments appends the segment lengths of a part of n values.
func polySegments(dst []int, n int) []int {
	if n <= 0 {
		return dst
	}
	var kept [len(polyDivisors)]int
	nk, sum := 0, 0
	for _, d := range polyDivisors {
		s := n / d
		if s <= 30 {
			break
		}
		kept[nk] = s
		nk++
		sum += s
	}
	for i := nk - 1; i >= 0; i-- {
		dst = append(dst, kept[i])
	}
	dst = append(dst, n-2*sum) // > 0.3*n: the 1/d sum to less than 0.35
	return append(dst, kept[:nk]...)
}

type polyfitOp struct{ degree int }

var _ codec.Op = polyfitOp{}

func (polyfitOp) Stage() *codec.Stage { return polyfitStage }

func (o polyfitOp) String() string {
	if o.degree == defaultPolyDegree {
		return "polyfit"
	}
	return "polyfit(" + strconv.Itoa(o.degree) + ")"
}

func (o polyfitOp) AppendParams(dst []byte) []byte { return append(dst, byte(o.degree)) }

func (o polyfitOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if err := checkF32("polyfit", in); err != nil {
		return nil, err
	}
	return []codec.SegInfo{
		{Name: codec.OutputName(in.Name, "perm"), Elem: codec.U32, Len: in.Len},
		{Name: codec.OutputName(in.Name, "coef"), Elem: codec.Byte, Len: -1},
	}, nil
}

// coefCount is the number of coefficients of the layout segs.
func (o polyfitOp) coefCount(segs []int) int {
	n := 0
	for _, l := range segs {
		n += min(o.degree, l-1) + 1
	}
	return n
}

// sortKey maps float bits to a key that orders like the values, NaNs
// outermost: ascending keys are ascending values.
func sortKey(b uint32) uint32 {
	if b>>31 != 0 {
		return ^b
	}
	return b | 1<<31
}

func (o polyfitOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	if err := checkF32("polyfit", in.SegInfo); err != nil {
		return nil, err
	}
	k := in.Len / 4
	v := asF32(ctx, in.Data)
	// Descending values, ties by index: ascending (^key, index).
	keys, _ := view.As[uint64](ctx.Arena.Alloc(8 * k))
	npos := 0
	for i, x := range v {
		b := math.Float32bits(x)
		npos += int(b>>31) ^ 1
		keys[i] = uint64(^sortKey(b))<<32 | uint64(i)
	}
	slices.Sort(keys)
	perm, _ := view.As[uint32](ctx.Arena.Alloc(4 * k))
	y, _ := view.As[float64](ctx.Arena.Alloc(8 * k))
	for i, key := range keys {
		perm[i] = uint32(key)
		y[i] = float64(v[perm[i]])
	}

	var sbuf [maxPolySegments]int
	segs := polySegments(polySegments(sbuf[:0], npos), k-npos)
	coef := ctx.Arena.Alloc(binary.MaxVarintLen64 + 4*o.coefCount(segs))[:0]
	coef = binary.AppendUvarint(coef, uint64(npos))
	var fit polyFitter
	start := 0
	for _, l := range segs {
		var err error
		if coef, err = fit.appendFit(coef, y[start:start+l], min(o.degree, l-1)); err != nil {
			return nil, fmt.Errorf("polyfit: %w", err)
		}
		start += l
	}
	return []codec.Segment{
		{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "perm"), Elem: codec.U32}, Data: view.Of(perm)},
		{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "coef"), Elem: codec.Byte}, Data: coef},
	}, nil
}

// polyFitter holds the Vandermonde matrix memory across segments.
type polyFitter struct {
	a  []float64
	qr mat.QR
}

// appendFit appends the float32 coefficients of the least-squares
// polynomial of degree e through (i/(len(y)-1), y[i]).
func (f *polyFitter) appendFit(dst []byte, y []float64, e int) ([]byte, error) {
	l, w := len(y), e+1
	if cap(f.a) < l*w {
		f.a = make([]float64, l*w)
	}
	a := f.a[:l*w]
	for i := range l {
		x := 0.0
		if l > 1 {
			x = float64(i) / float64(l-1)
		}
		p := 1.0
		for j := range w {
			a[i*w+j] = p
			p *= x
		}
	}
	f.qr.Factorize(mat.NewDense(l, w, a))
	var c mat.VecDense
	if err := f.qr.SolveVecTo(&c, false, mat.NewVecDense(l, y)); err != nil {
		var cond mat.Condition
		if !errors.As(err, &cond) {
			return dst, err
		}
		// Ill-conditioned (not for e <= 8 on distinct points in [0,1]):
		// the solution is still the best the QR gives.
	}
	for j := range w {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(c.AtVec(j))))
	}
	return dst, nil
}

func (o polyfitOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	if err := checkF32("polyfit", in); err != nil {
		return nil, fmt.Errorf("%w: %v", codec.ErrCorrupt, err)
	}
	if len(parts) != 2 {
		return nil, fmt.Errorf("%w: polyfit: %d parts", codec.ErrCorrupt, len(parts))
	}
	pb, coef := parts[0].Data, parts[1].Data
	k := in.Len / 4
	if len(pb) != in.Len {
		return nil, fmt.Errorf("%w: polyfit: %d permutation bytes for %d values", codec.ErrCorrupt, len(pb), k)
	}
	npos, nb := binary.Uvarint(coef)
	var vb [binary.MaxVarintLen64]byte
	if nb <= 0 || npos > uint64(k) || len(binary.AppendUvarint(vb[:0], npos)) != nb {
		return nil, fmt.Errorf("%w: polyfit: bad count of non-negative values for %d values", codec.ErrCorrupt, k)
	}
	var sbuf [maxPolySegments]int
	segs := polySegments(sbuf[:0], int(npos))
	nsegPos := len(segs)
	segs = polySegments(segs, k-int(npos))
	nc := o.coefCount(segs)
	if len(coef) != nb+4*nc {
		return nil, fmt.Errorf("%w: polyfit: %d coefficient bytes, want %d", codec.ErrCorrupt, len(coef)-nb, 4*nc)
	}
	perm := asU32(ctx, pb)
	seen := ctx.Arena.Alloc((k + 7) / 8)
	clear(seen)
	for i, p := range perm {
		if p >= uint32(k) || seen[p>>3]&(1<<(p&7)) != 0 {
			return nil, fmt.Errorf("%w: polyfit: perm[%d] = %d: not a permutation of %d values", codec.ErrCorrupt, i, p, k)
		}
		seen[p>>3] |= 1 << (p & 7)
	}
	out := dst[len(dst) : len(dst)+in.Len]
	cb := coef[nb:]
	r := 0
	var c [maxPolyDegree + 1]float64
	for si, l := range segs {
		e := min(o.degree, l-1)
		for j := range e + 1 {
			c[j] = float64(math.Float32frombits(binary.LittleEndian.Uint32(cb[4*j:])))
		}
		cb = cb[4*(e+1):]
		for i := range l {
			x := 0.0
			if l > 1 {
				x = float64(i) / float64(l-1)
			}
			y := c[e]
			for j := e - 1; j >= 0; j-- {
				y = float64(y*x) + c[j] // the conversion forbids fusing
			}
			if si < nsegPos {
				y = max(y, 0)
			} else {
				y = min(y, 0)
			}
			binary.LittleEndian.PutUint32(out[4*perm[r]:], math.Float32bits(float32(y)))
			r++
		}
	}
	return dst[:len(dst)+in.Len], nil
}
