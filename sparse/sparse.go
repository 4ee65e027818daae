package sparse

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sort"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/view"
)

// Layout is how the sparse stage records where the non-zero elements are.
// The chosen layout is the first byte of the idx segment.
type Layout uint8

const (
	Auto   Layout = iota // choose the smallest by measurement (recipe parameter only)
	Dense                // no index: val holds every element
	Bitmap               // one bit per element, least significant bit first
	Gaps                 // zeros skipped before each non-zero, bitpacked (AppendBitpack)
	Varint               // the same gaps as LEB128 varints
	Runs                 // pairs (zero run, non-zero run) as varints; zeros after the last pair
	numLayouts
)

var layoutNames = [...]string{"auto", "dense", "bitmap", "gaps", "varint", "runs"}

func (l Layout) String() string {
	if l < numLayouts {
		return layoutNames[l]
	}
	return fmt.Sprintf("layout(%d)", uint8(l))
}

// ParseLayout parses a layout name.
func ParseLayout(s string) (Layout, error) {
	for i, n := range layoutNames {
		if n == s {
			return Layout(i), nil
		}
	}
	return 0, fmt.Errorf("sparse: unknown layout %q (known: auto, dense, bitmap, gaps, varint, runs)", s)
}

var sparseStage = &codec.Stage{
	ID:     SparseID,
	Name:   "sparse",
	Kind:   codec.Split,
	Reads:  "a segment of 1, 2, 4 or 8-byte elements",
	Writes: "idx (layout byte + index bytes) and val (the non-zero elements, same element type)",
	Doc:    "lossless sparse split: non-zero elements (bitwise test, so -0.0 is kept) into val, their positions into idx as a bitmap, bitpacked or varint gaps, or zero runs; layout=auto picks the smallest by measured density and entropy, dense when nothing pays",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("sparse", args, 1, "layout"); err != nil {
			return nil, err
		}
		op := sparseOp{}
		for i, a := range args {
			if a.Key == "layout" || (a.Key == "" && i == 0) {
				l, err := ParseLayout(a.Value)
				if err != nil {
					return nil, fmt.Errorf("%w: %v", codec.ErrRecipe, err)
				}
				op.layout = l
			}
		}
		return op, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 1 || Layout(p[0]) >= numLayouts {
			return nil, fmt.Errorf("%w: sparse params %x: want one layout byte below %d", codec.ErrCorrupt, p, numLayouts)
		}
		return sparseOp{layout: Layout(p[0])}, nil
	},
}

func init() { codec.Register(sparseStage) }

// sparseOp is the sparse stage with a requested layout (Auto: measured).
type sparseOp struct{ layout Layout }

var _ codec.Op = sparseOp{}

func (sparseOp) Stage() *codec.Stage { return sparseStage }

func (o sparseOp) String() string {
	if o.layout == Auto {
		return "sparse"
	}
	return "sparse(" + o.layout.String() + ")"
}

func (o sparseOp) AppendParams(dst []byte) []byte { return append(dst, byte(o.layout)) }

func (o sparseOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if _, err := elemWidth(in); err != nil {
		return nil, err
	}
	return []codec.SegInfo{
		{Name: codec.OutputName(in.Name, "idx"), Elem: codec.Byte, Len: -1},
		{Name: codec.OutputName(in.Name, "val"), Elem: in.Elem, Len: -1},
	}, nil
}

func (o sparseOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	w, err := elemWidth(in.SegInfo)
	if err != nil {
		return nil, err
	}
	n := in.Len / w
	idxName, valName := codec.OutputName(in.Name, "idx"), codec.OutputName(in.Name, "val")
	dense := func() []codec.Segment {
		return []codec.Segment{
			{SegInfo: codec.SegInfo{Name: idxName, Elem: codec.Byte}, Data: []byte{byte(Dense)}},
			{SegInfo: codec.SegInfo{Name: valName, Elem: in.Elem}, Data: in.Data},
		}
	}
	if o.layout == Dense {
		return dense(), nil
	}
	pos, val := scratchU32(ctx, n), ctx.Arena.Alloc(in.Len)[:0]
	pos, val = gather(in.Data, w, pos, val)
	l := o.layout
	if l == Auto {
		l = choose(n, w, pos, val)
	}
	var idx []byte
	switch l {
	case Dense:
		return dense(), nil
	case Bitmap:
		idx = ctx.Arena.Alloc(1 + (n+7)/8)
		idx[0] = byte(Bitmap)
		bm := idx[1:]
		clear(bm)
		for _, p := range pos {
			bm[p>>3] |= 1 << (p & 7)
		}
	case Gaps:
		ToGaps(pos, pos)
		idx = append(ctx.Arena.Alloc(1 + BitpackLen(pos))[:0], byte(Gaps))
		idx = AppendBitpack(idx, pos)
	case Varint:
		ToGaps(pos, pos)
		idx = append(ctx.Arena.Alloc(1 + 5*len(pos))[:0], byte(Varint))
		idx = AppendVarints(idx, pos)
	case Runs:
		idx = append(ctx.Arena.Alloc(1 + runsLen(pos))[:0], byte(Runs))
		idx = appendRuns(idx, pos)
	}
	return []codec.Segment{
		{SegInfo: codec.SegInfo{Name: idxName, Elem: codec.Byte}, Data: idx},
		{SegInfo: codec.SegInfo{Name: valName, Elem: in.Elem}, Data: val},
	}, nil
}

// scratchU32 returns an empty []uint32 with room for n values.
func scratchU32(ctx *codec.Ctx, n int) []uint32 {
	s, _ := view.As[uint32](ctx.Arena.Alloc(4 * n))
	return s[:0]
}

// forRuns calls f for every maximal run of consecutive positions: z zeros
// before it, m non-zero elements in it.
func forRuns(pos []uint32, f func(z, m uint32)) {
	next := uint32(0)
	for i := 0; i < len(pos); {
		j := i + 1
		for j < len(pos) && pos[j] == pos[j-1]+1 {
			j++
		}
		f(pos[i]-next, uint32(j-i))
		next = pos[j-1] + 1
		i = j
	}
}

func runsLen(pos []uint32) int {
	n := 0
	forRuns(pos, func(z, m uint32) { n += VarintLen(z) + VarintLen(m) })
	return n
}

func appendRuns(dst []byte, pos []uint32) []byte {
	forRuns(pos, func(z, m uint32) {
		dst = binary.AppendUvarint(dst, uint64(z))
		dst = binary.AppendUvarint(dst, uint64(m))
	})
	return dst
}

func (o sparseOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	w, err := elemWidth(in)
	if err != nil {
		return nil, fmt.Errorf("%w: sparse: %v", codec.ErrCorrupt, err)
	}
	if len(parts) != 2 || len(parts[0].Data) == 0 {
		return nil, fmt.Errorf("%w: sparse: no index layout byte", codec.ErrCorrupt)
	}
	idx, val := parts[0].Data[1:], parts[1].Data
	n := in.Len / w
	if len(val)%w != 0 || len(val) > in.Len {
		return nil, fmt.Errorf("%w: sparse: %d value bytes for %d elements of %d bytes", codec.ErrCorrupt, len(val), n, w)
	}
	nnz := len(val) / w
	l := Layout(parts[0].Data[0])
	if l == Dense {
		if len(idx) != 0 || len(val) != in.Len {
			return nil, fmt.Errorf("%w: sparse: dense layout with %d index and %d value bytes for %d", codec.ErrCorrupt, len(idx), len(val), in.Len)
		}
		return append(dst, val...), nil
	}
	out := dst[len(dst) : len(dst)+in.Len]
	var pos []uint32
	switch l {
	case Bitmap:
		if len(idx) != (n+7)/8 {
			return nil, fmt.Errorf("%w: sparse: bitmap of %d bytes for %d elements", codec.ErrCorrupt, len(idx), n)
		}
		if r := n & 7; r != 0 && idx[len(idx)-1]>>r != 0 {
			return nil, fmt.Errorf("%w: sparse: bitmap has bits past element %d", codec.ErrCorrupt, n)
		}
		ones := 0
		for _, b := range idx {
			ones += bits.OnesCount8(b)
		}
		if ones != nnz {
			return nil, fmt.Errorf("%w: sparse: bitmap marks %d elements, %d values", codec.ErrCorrupt, ones, nnz)
		}
		pos = scratchU32(ctx, nnz)
		for i, b := range idx {
			for b != 0 {
				pos = append(pos, uint32(i*8+bits.TrailingZeros8(b)))
				b &= b - 1
			}
		}
	case Gaps, Varint:
		pos = scratchU32(ctx, nnz)[:nnz]
		var used int
		if l == Gaps {
			used, err = DecodeBitpack(pos, idx)
		} else {
			used, err = DecodeVarints(pos, idx)
		}
		if err != nil {
			return nil, fmt.Errorf("sparse: %w", err)
		}
		if used != len(idx) {
			return nil, fmt.Errorf("%w: sparse: %d index bytes after %d positions", codec.ErrCorrupt, len(idx)-used, nnz)
		}
		if err := FromGaps(pos, pos, n); err != nil {
			return nil, fmt.Errorf("sparse: %w", err)
		}
	case Runs:
		pos = scratchU32(ctx, nnz)
		next := 0
		for p := 0; p < len(idx); {
			z, k := uvarint32(idx[p:])
			if k <= 0 || int64(z) > int64(n-next) {
				return nil, fmt.Errorf("%w: sparse: bad zero run at index byte %d", codec.ErrCorrupt, p)
			}
			p += k
			start := next + int(z)
			m, k := uvarint32(idx[p:])
			if k <= 0 || m == 0 || int64(m) > int64(n-start) || int64(m) > int64(nnz-len(pos)) {
				return nil, fmt.Errorf("%w: sparse: bad run of non-zeros at index byte %d", codec.ErrCorrupt, p)
			}
			p += k
			for e := start; e < start+int(m); e++ {
				pos = append(pos, uint32(e))
			}
			next = start + int(m)
		}
		if len(pos) != nnz {
			return nil, fmt.Errorf("%w: sparse: runs cover %d values, %d given", codec.ErrCorrupt, len(pos), nnz)
		}
	default:
		return nil, fmt.Errorf("%w: sparse: unknown layout %d", codec.ErrCorrupt, uint8(l))
	}
	clear(out)
	scatter(out, w, pos, val)
	return dst[:len(dst)+in.Len], nil
}

// uvarint32 reads a minimal uvarint below 2^32 from b: the value and its
// length, or a length <= 0 when b does not start with one.
func uvarint32(b []byte) (uint32, int) {
	x, k := binary.Uvarint(b)
	if k <= 0 || x > 1<<32-1 || k != VarintLen(uint32(x)) {
		return 0, -1
	}
	return uint32(x), k
}

// Cost model of the automatic choice. The values and the index are
// assumed to be entropy coded per byte plane afterwards (the documented
// recipe "sparse | val:shuffle | *:huff0"), so each part is priced at the
// length of an optimal Huffman code for its byte histogram plus the code
// table, or stored (8 bits a byte) when coding would save under 3%, as
// huff0 does.

// codedBytes prices n bytes with byte counts hist (scaled counts are
// fine): the Huffman-coded size and a table of half a byte per symbol for
// every 128 KiB block, or n when that saves less than 3%.
func codedBytes(hist *[256]float64, n float64) float64 {
	if n == 0 {
		return 0
	}
	h := 0.0
	for _, c := range hist {
		if c > 0 {
			p := c / n
			h -= p * math.Log2(p)
		}
	}
	if h > 8*0.97 {
		return n // even the entropy bound saves too little
	}
	bits, syms := huffmanBits(hist)
	c := bits/8 + math.Ceil(n/(128<<10))*(float64(syms)/2+4)
	return min(c, n)
}

// huffmanBits returns the total length in bits of an optimal prefix code
// for symbols with weights w (the sum of weight times code length; a lone
// symbol costs nothing, as huff0 stores it as a run) and the number of
// symbols with a weight.
func huffmanBits(w *[256]float64) (float64, int) {
	var h [256]float64
	k := 0
	for _, x := range w {
		if x > 0 {
			h[k] = x
			k++
		}
	}
	if k < 2 {
		return 0, k
	}
	q := h[:k]
	sort.Float64s(q)
	// Two queues: the sorted leaves and the merged nodes (which come out
	// sorted too); the total length is the sum of all merged weights.
	merged := make([]float64, 0, k)
	total := 0.0
	pop := func() float64 {
		if len(merged) == 0 || len(q) > 0 && q[0] <= merged[0] {
			x := q[0]
			q = q[1:]
			return x
		}
		x := merged[0]
		merged = merged[1:]
		return x
	}
	for range k - 1 {
		s := pop() + pop()
		total += s
		merged = append(merged, s)
	}
	return total, k
}

// choose returns the layout with the smallest estimated coded size for n
// elements of w bytes with non-zeros at pos (values val). The exact cost
// of bitpacked gaps comes first; the others are priced only when their
// lower bound (one bit a byte: Huffman codes spend no less) could beat it.
func choose(n, w int, pos []uint32, val []byte) Layout {
	nnz := len(pos)
	switch {
	case nnz == n:
		return Dense
	case nnz == 0:
		return Gaps
	}
	// Gaps, bitpacked: priced as stored, exactly. Varint gaps: their
	// bytes' histogram, built on the way.
	var vh [256]float64
	vlen, bplen := 0, 0
	prev := uint32(0)
	var blk [BitpackBlock]uint32
	k := 0
	for _, p := range pos {
		g := p - prev
		prev = p + 1
		blk[k] = g
		if k++; k == BitpackBlock {
			bplen += BitpackLen(blk[:k])
			k = 0
		}
		for ; g >= 0x80; g >>= 7 {
			vh[byte(g)|0x80]++
			vlen++
		}
		vh[g]++
		vlen++
	}
	bplen += BitpackLen(blk[:k])
	best, bestIdx := Gaps, float64(bplen)
	try := func(l Layout, lower float64, cost func() float64) {
		if lower < bestIdx {
			if c := cost(); c < bestIdx {
				best, bestIdx = l, c
			}
		}
	}
	try(Varint, float64(vlen)/8, func() float64 { return codedBytes(&vh, float64(vlen)) })
	// Bitmap: its bytes' histogram, built from the positions.
	bmLen := (n + 7) / 8
	try(Bitmap, float64(bmLen)/8, func() float64 {
		var bh [256]float64
		nb := 0
		for i := 0; i < nnz; {
			b := pos[i] >> 3
			var v byte
			for ; i < nnz && pos[i]>>3 == b; i++ {
				v |= 1 << (pos[i] & 7)
			}
			bh[v]++
			nb++
		}
		bh[0] += float64(bmLen - nb)
		return codedBytes(&bh, float64(bmLen))
	})
	// Runs: varint bytes of the run lengths, at least two a run.
	try(Runs, 2*float64(countRuns(pos))/8, func() float64 {
		var rh [256]float64
		rlen := 0
		add := func(x uint32) {
			for ; x >= 0x80; x >>= 7 {
				rh[byte(x)|0x80]++
				rlen++
			}
			rh[x]++
			rlen++
		}
		forRuns(pos, func(z, m uint32) { add(z); add(m) })
		return codedBytes(&rh, float64(rlen))
	})
	// Dense: the value planes with the zeros added, at least a bit a byte.
	// The values cost at most their bytes: where even then dense cannot
	// win (the sparse data this layout is for), they are not priced.
	if float64(n*w)/8 >= bestIdx+float64(nnz*w)+1 {
		return best
	}
	// Per-plane histograms of the non-zero values, from a sample.
	step := max(1, nnz/65536)
	var hist [8][256]float64
	sampled := 0
	for i := 0; i < nnz; i += step {
		e := val[i*w : i*w+w]
		for p := range w {
			hist[p][e[p]]++
		}
		sampled++
	}
	scaleV := float64(nnz) / float64(sampled)
	valCost := 0.0
	for p := range w {
		for v := range hist[p] {
			hist[p][v] *= scaleV
		}
		valCost += codedBytes(&hist[p], float64(nnz))
	}
	sparseCost := bestIdx + valCost + 1
	if float64(n*w)/8 < sparseCost {
		denseCost := 0.0
		for p := range w {
			hist[p][0] += float64(n - nnz)
			denseCost += codedBytes(&hist[p], float64(n))
		}
		if denseCost <= sparseCost {
			return Dense
		}
	}
	return best
}

// countRuns counts the maximal runs of consecutive positions.
func countRuns(pos []uint32) int {
	if len(pos) == 0 {
		return 0
	}
	r := 1
	for i := 1; i < len(pos); i++ {
		if pos[i] != pos[i-1]+1 {
			r++
		}
	}
	return r
}
