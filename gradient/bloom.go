package gradient

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/inthash"
	"github.com/tensorpress/tensorpress/internal/topk"
	"github.com/tensorpress/tensorpress/internal/view"
)

// The bloom stage sends the positions of a top-k selection as a Bloom
// filter, as DeepReduce does (Kostopoulou et al., NeurIPS 2021):
//
//	bloom(r[,fpr=F][,policy=leftmost|p0][,seed=S][,hashes=H])
//
// splits an f32 segment of n elements (a tensor or a chunk) into
//
//	bloom  the filter: m bits in m/8 bytes; bit b is bit b&7 (LSB first)
//	       of byte b>>3
//	val    the f32 values at the positions the receiver reconstructs,
//	       in increasing position order
//
// Encoder. k = K(r, n). The target false-positive rate is F, by default
// DeepReduce's 0.1*k/n (about 0.1*k false positives over the whole chunk),
// clamped to [1e-7, 0.5]. With L = log2(1/F), the filter has
// h = ceil(L) hash functions (clamped to [1, 32]; hashes=H overrides it)
// and m = ceil(L*k/ln 2) bits, rounded up to whole bytes, at least 8. The
// positions of the exact top-k (internal/topk.Exact, ties to the lower
// index) are inserted; then every position 0..n-1 is queried, giving the
// positives P in increasing order (a superset of the top-k). The policy
// chooses from P:
//
//	leftmost  the first k positives (DeepReduce's PyTorch code). A true
//	          top-k position past them is not sent; error feedback keeps it.
//	p0        every positive (DeepReduce's TF policy_zero).
//
// The values are read from the input at the chosen positions ("false
// positive aware"), so they always belong to the positions the receiver
// finds.
//
// Hashing (part of the wire format). With offset the chunk's first element
// in its tensor (0 for a whole tensor), inthash.Mix64 splitmix64's output function
// (randk.go) and g = 0x9e3779b97f4a7c15, in uint64 arithmetic:
//
//	key = inthash.Mix64(seed ^ offset*g)
//	z   = inthash.Mix64(key + (p+1)*g)      (splitmix64's output p+1 from state key)
//	a   = uint32(z), b = uint32(z >> 32) | 1
//
// and position p (relative to the chunk) sets or tests the bits
//
//	bit_j = uint32((uint64(a + j*b) * m) >> 32),   j = 0 .. h-1
//
// where a + j*b wraps at 32 bits (double hashing, mapped to [0, m) by a
// multiply-shift). A position is positive when all h of its bits are set.
//
// Wire: params ratio (f32 bits), h (uvarint, 1..32), policy (1 byte:
// 0 leftmost, 1 p0), seed (uvarint). The filter size m is 8 times the
// length of the bloom segment (at most 2^29-1 bytes); F is not sent. The
// decoder queries positions 0..n-1 (n = the chunk's elements) in order:
// leftmost takes the first len(val)/4 positives (fewer positives than
// values is corrupt); p0 takes every positive, whose count must equal
// len(val)/4. Decoding tests every position against the filter: O(n*h)
// work in the worst case (a filter of set bits), about n hashes and 4n
// probes for a filter filled as sized (half its bits set), whatever k is:
// around 10 ns an element, against a few ns a kept element for topk's
// delta-coded positions.

var bloomStage = &codec.Stage{
	ID: BloomID, Name: "bloom", Kind: codec.Split, Granularity: codec.RangePartitionable, Lossy: true,
	Reads:  "an f32 segment",
	Writes: "bloom (a Bloom filter of the top-k positions) and val (f32 values at the filter's positives)",
	Doc: "DeepReduce's Bloom-filter index coding: bloom(r) sends the top ceil(r*n) positions as a Bloom filter " +
		"(fpr=F, default 0.1*k/n) and the values at the positions the filter reports (policy=leftmost: the first k; " +
		"p0: all of them); the rest decode as zeros",
	New:  newBloom,
	Load: loadBloom,
}

func init() { codec.Register(bloomStage) }

// Bloom filter policies (the params byte).
const (
	bloomLeftmost = 0
	bloomP0       = 1
)

const (
	maxBloomHashes = 32
	maxBloomBytes  = 1<<29 - 1 // m = 8*bytes must fit in uint32
	minBloomFPR    = 1e-7
	maxBloomFPR    = 0.5
)

// bloomOp is a configured bloom stage. hashes is 0 until the op is bound
// to a segment (codec.Binder) or loaded from a frame.
type bloomOp struct {
	ratio  float32
	fpr    float32 // recipe only: the target false-positive rate; 0 for 0.1*k/n
	hashes int
	policy uint8
	seed   uint64
}

var (
	_ codec.Op         = bloomOp{}
	_ codec.AddDecoder = bloomOp{}
	_ codec.Binder     = bloomOp{}
)

func newBloom(args []codec.Arg) (codec.Op, error) {
	if err := codec.CheckArgs("bloom", args, 1, "ratio", "fpr", "policy", "seed", "hashes"); err != nil {
		return nil, err
	}
	var o bloomOp
	seen := map[string]bool{}
	for i, a := range args {
		key := a.Key
		if key == "" {
			key = "ratio"
		}
		if seen[key] {
			return nil, fmt.Errorf("%w: bloom: %s given twice", codec.ErrRecipe, key)
		}
		seen[key] = true
		switch key {
		case "ratio":
			r, err := ratioArg("bloom", a.Value)
			if err != nil {
				return nil, err
			}
			o.ratio = r
		case "fpr":
			f, err := strconv.ParseFloat(a.Value, 32)
			if err != nil || !(f >= minBloomFPR && f <= maxBloomFPR) {
				return nil, fmt.Errorf("%w: bloom: fpr %q: want a number in [%g, %g]", codec.ErrRecipe, a.Value, minBloomFPR, maxBloomFPR)
			}
			o.fpr = float32(f)
		case "policy":
			switch a.Value {
			case "leftmost":
				o.policy = bloomLeftmost
			case "p0":
				o.policy = bloomP0
			default:
				return nil, fmt.Errorf("%w: bloom: policy %q: want leftmost or p0", codec.ErrRecipe, a.Value)
			}
		case "seed":
			s, err := strconv.ParseUint(a.Value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: bloom: seed %q", codec.ErrRecipe, a.Value)
			}
			o.seed = s
		case "hashes":
			h, err := codec.IntArg("bloom", args[i:i+1], -1, "hashes", 0, 1, maxBloomHashes)
			if err != nil {
				return nil, err
			}
			o.hashes = h
		}
	}
	if o.ratio == 0 {
		return nil, fmt.Errorf("%w: bloom takes a ratio", codec.ErrRecipe)
	}
	return o, nil
}

func loadBloom(p []byte) (codec.Op, error) {
	bad := func() (codec.Op, error) { return nil, fmt.Errorf("%w: bloom params %x", codec.ErrCorrupt, p) }
	if len(p) < 7 {
		return bad()
	}
	o := bloomOp{ratio: math.Float32frombits(binary.LittleEndian.Uint32(p))}
	h, n := binary.Uvarint(p[4:])
	if !(o.ratio > 0 && o.ratio <= 1) || n <= 0 || h < 1 || h > maxBloomHashes {
		return bad()
	}
	o.hashes = int(h)
	rest := p[4+n:]
	if len(rest) < 2 || rest[0] > bloomP0 {
		return bad()
	}
	o.policy = rest[0]
	s, n := binary.Uvarint(rest[1:])
	if n <= 0 || 1+n != len(rest) {
		return bad()
	}
	o.seed = s
	return o, nil
}

func (bloomOp) Stage() *codec.Stage { return bloomStage }

func (o bloomOp) String() string {
	s := "bloom(" + formatRatio(o.ratio)
	if o.fpr != 0 {
		s += ",fpr=" + formatRatio(o.fpr)
	}
	if o.hashes != 0 {
		s += ",hashes=" + strconv.Itoa(o.hashes)
	}
	if o.policy == bloomP0 {
		s += ",policy=p0"
	}
	if o.seed != 0 {
		s += ",seed=" + strconv.FormatUint(o.seed, 10)
	}
	return s + ")"
}

// AppendParams writes the bound parameters (an unbound op writes h = 0,
// which no decoder accepts; the encoder always binds first).
func (o bloomOp) AppendParams(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(o.ratio))
	dst = binary.AppendUvarint(dst, uint64(o.hashes))
	dst = append(dst, o.policy)
	return binary.AppendUvarint(dst, o.seed)
}

// size returns the false-positive rate and the filter size in bits for k
// of n elements.
func (o bloomOp) size(k, n int) (fpr float64, m int) {
	fpr = float64(o.fpr)
	if fpr == 0 {
		fpr = maxBloomFPR
		if n > 0 {
			fpr = 0.1 * float64(k) / float64(n)
		}
	}
	fpr = min(max(fpr, minBloomFPR), maxBloomFPR)
	bits := math.Ceil(-math.Log2(fpr) * float64(k) / math.Ln2)
	m = (int(min(bits, 8*maxBloomBytes+8)) + 7) &^ 7
	return fpr, max(m, 8)
}

// Bind fixes the hash count for the segment (codec.Binder), so that the
// frame records it.
func (o bloomOp) Bind(in codec.SegInfo) (codec.Op, error) {
	if err := checkF32("bloom", in); err != nil {
		return nil, err
	}
	if o.hashes == 0 {
		n := in.Len / 4
		fpr, _ := o.size(K(o.ratio, n), n)
		o.hashes = min(max(int(math.Ceil(-math.Log2(fpr))), 1), maxBloomHashes)
	}
	return o, nil
}

func (o bloomOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if err := checkF32("bloom", in); err != nil {
		return nil, err
	}
	return []codec.SegInfo{
		{Name: codec.OutputName(in.Name, "bloom"), Elem: codec.Byte, Len: -1},
		{Name: codec.OutputName(in.Name, "val"), Elem: codec.F32, Len: -1},
	}, nil
}

// bloomFilter is a filter of m bits with h hashes keyed for one chunk.
type bloomFilter struct {
	bits []byte
	m, h uint32
	key  uint64
}

func newBloomFilter(bits []byte, h int, seed uint64, offset int64) bloomFilter {
	return bloomFilter{bits: bits, m: uint32(8 * len(bits)), h: uint32(h), key: inthash.Mix64(seed ^ uint64(offset)*inthash.Gamma)}
}

// hash returns the double-hashing pair of position p.
func (f *bloomFilter) hash(p uint32) (a, b uint32) {
	z := inthash.Mix64(f.key + (uint64(p)+1)*inthash.Gamma)
	return uint32(z), uint32(z>>32) | 1
}

func (f *bloomFilter) add(p uint32) {
	a, b := f.hash(p)
	for range f.h {
		bit := uint32(uint64(a) * uint64(f.m) >> 32)
		f.bits[bit>>3] |= 1 << (bit & 7)
		a += b
	}
}

// positives appends to dst the positives among positions 0..n-1 in
// increasing order. It stops after want of them when stop is set; else it
// returns false as soon as it meets one more than want.
//
// This is the decoder's hot loop: it steps the splitmix64 state instead of
// multiplying, and tests the first (up to) four bits without branching, so
// that the half of the negatives that fail at each bit cost no
// mispredicted branch; about one position in 16 goes on to the rest.
func (f *bloomFilter) positives(dst []uint32, n, want int, stop bool) ([]uint32, bool) {
	if stop && want == 0 {
		return dst, true
	}
	bits, m, h := f.bits, uint64(f.m), f.h
	pre := min(h, 4)
	s := f.key
	for p := range uint32(n) {
		s += inthash.Gamma
		z := inthash.Mix64(s)
		a, b := uint32(z), uint32(z>>32)|1
		var hit byte
		if h >= 4 {
			a1, a2, a3 := a+b, a+2*b, a+3*b
			b0 := uint32(uint64(a) * m >> 32)
			b1 := uint32(uint64(a1) * m >> 32)
			b2 := uint32(uint64(a2) * m >> 32)
			b3 := uint32(uint64(a3) * m >> 32)
			hit = bits[b0>>3] >> (b0 & 7) & (bits[b1>>3] >> (b1 & 7)) & (bits[b2>>3] >> (b2 & 7)) & (bits[b3>>3] >> (b3 & 7))
			a += 4 * b
		} else {
			hit = 1
			for range pre {
				bit := uint32(uint64(a) * m >> 32)
				hit &= bits[bit>>3] >> (bit & 7)
				a += b
			}
		}
		if hit&1 == 0 {
			continue
		}
		for j := pre; j < h; j++ {
			bit := uint32(uint64(a) * m >> 32)
			hit &= bits[bit>>3] >> (bit & 7)
			a += b
		}
		if hit&1 == 0 {
			continue
		}
		if len(dst) == want && !stop {
			return dst, false
		}
		dst = append(dst, p)
		if stop && len(dst) == want {
			break
		}
	}
	return dst, true
}

func (o bloomOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	if err := checkF32("bloom", in.SegInfo); err != nil {
		return nil, err
	}
	if o.hashes == 0 {
		b, err := o.Bind(in.SegInfo)
		if err != nil {
			return nil, err
		}
		o = b.(bloomOp)
	}
	n := in.Len / 4
	k := K(o.ratio, n)
	_, m := o.size(k, n)
	if m/8 > maxBloomBytes {
		return nil, fmt.Errorf("%w: bloom: a filter of %d bits for %d positions is too large", codec.ErrRecipe, m, k)
	}
	x, ok := view.As[float32](in.Data)
	if !ok {
		x, _ = view.As[float32](ctx.Arena.Alloc(in.Len))
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(in.Data[4*i:]))
		}
	}
	buf, _ := view.As[uint32](ctx.Arena.Alloc(4 * k))
	var s topk.Scratch
	top := topk.Exact(buf[:0], x, k, &s)

	bits := ctx.Arena.Alloc(m / 8)
	clear(bits)
	f := newBloomFilter(bits, o.hashes, o.seed, chunkOffset(ctx))
	for _, p := range top {
		f.add(p)
	}
	var pos []uint32
	if o.policy == bloomLeftmost {
		pos, _ = f.positives(top[:0], n, k, true) // top is inserted: reuse it
	} else {
		fpr, _ := o.size(k, n)
		want := min(n, k+2*int(fpr*float64(n-k))+64)
		pb, _ := view.As[uint32](ctx.Arena.Alloc(4 * want))
		pos, _ = f.positives(pb[:0], n, n, false) // past want: grows on the heap
	}
	val := ctx.Arena.Alloc(4 * len(pos))
	for i, p := range pos {
		copy(val[4*i:4*i+4], in.Data[4*p:])
	}
	return []codec.Segment{
		{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "bloom"), Elem: codec.Byte}, Data: bits},
		{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "val"), Elem: codec.F32}, Data: val},
	}, nil
}

// decodePositions checks the parts against a chunk of in.Len/4 elements
// and returns the positions of the values, increasing.
func (o bloomOp) decodePositions(ctx *codec.Ctx, parts []codec.Segment, in codec.SegInfo) ([]uint32, error) {
	if err := checkF32("bloom", in); err != nil {
		return nil, fmt.Errorf("%w: %v", codec.ErrCorrupt, err)
	}
	if len(parts) != 2 {
		return nil, fmt.Errorf("%w: bloom: %d parts", codec.ErrCorrupt, len(parts))
	}
	bits, val := parts[0].Data, parts[1].Data
	n, c := in.Len/4, len(val)/4
	switch {
	case o.hashes < 1 || o.hashes > maxBloomHashes:
		return nil, fmt.Errorf("%w: bloom: %d hashes", codec.ErrCorrupt, o.hashes)
	case len(bits) == 0 || len(bits) > maxBloomBytes:
		return nil, fmt.Errorf("%w: bloom: filter of %d bytes", codec.ErrCorrupt, len(bits))
	case len(val)%4 != 0 || c > n:
		return nil, fmt.Errorf("%w: bloom: %d value bytes for %d elements", codec.ErrCorrupt, len(val), n)
	}
	f := newBloomFilter(bits, o.hashes, o.seed, chunkOffset(ctx))
	buf, _ := view.As[uint32](ctx.Arena.Alloc(4 * c))
	pos, ok := f.positives(buf[:0], n, c, o.policy == bloomLeftmost)
	if !ok {
		return nil, fmt.Errorf("%w: bloom: the filter reports more than %d positives for %d values", codec.ErrCorrupt, c, c)
	}
	if len(pos) != c {
		return nil, fmt.Errorf("%w: bloom: the filter reports %d positives for %d values", codec.ErrCorrupt, len(pos), c)
	}
	return pos, nil
}

func (o bloomOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	pos, err := o.decodePositions(ctx, parts, in)
	if err != nil {
		return nil, err
	}
	val := parts[1].Data
	out := dst[len(dst) : len(dst)+in.Len]
	clear(out)
	for i, p := range pos {
		copy(out[4*p:4*p+4], val[4*i:])
	}
	return dst[:len(dst)+in.Len], nil
}

// ChecksFinite: DecodeAdd honours ctx.Finite (codec.FiniteAddDecoder).
func (bloomOp) ChecksFinite() {}

func (o bloomOp) DecodeAdd(ctx *codec.Ctx, acc []float32, alpha float32, parts []codec.Segment, in codec.SegInfo) error {
	pos, err := o.decodePositions(ctx, parts, in)
	if err != nil {
		return err
	}
	if len(acc) != in.Len/4 {
		return fmt.Errorf("%w: bloom: accumulator of %d for %d elements", codec.ErrCorrupt, len(acc), in.Len/4)
	}
	val := asF32(ctx, parts[1].Data)
	if ctx.Finite {
		if err := codec.CheckFinite(alpha, val); err != nil {
			return fmt.Errorf("bloom: %w", err)
		}
	}
	for i, p := range pos {
		acc[p] += alpha * val[i]
	}
	return nil
}
