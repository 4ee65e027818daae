package lossy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/view"
)

// Blockwise quantizers.
//
// int8, nf4, fp4, qsgd, sign and ternary share one shape, implemented in
// this file; each stage's own file holds its definition, its kernels and
// its error bound.
//
// Input. A segment of float32 or float64 elements (any other element type
// is refused by Outputs). float64 elements are first rounded to float32
// (round to nearest even) and quantized as float32; dequantization gives
// back the segment's own element type. A NaN or an infinity in the input,
// or a float64 beyond the float32 range, is refused with an error wrapping
// ErrNonFinite that names the element (its index in the tensor when the
// segment is "data"): these quantizers have no code for it, and a scale
// computed over it would wreck the whole block.
//
// Blocks. The n elements are cut into consecutive blocks of B elements
// (the recipe parameter "block", a multiple of 8 in [8, 1<<20]); the last
// block may be shorter. Every block is coded on its own, with one float32
// scale. The stages are codec.Block granular and implement
// codec.BlockSizer, so a Writer cuts tensors into chunks on block edges and
// chunked encoding gives the same bytes as encoding the tensor whole.
//
// Output. Dequantized values that would round beyond the float32 range
// (only possible when a scale is within a few ulps of math.MaxFloat32)
// blockSaturate to ±math.MaxFloat32.
//
// Segments. On an input segment called "data" a stage writes "q" (the
// codes) and "scale" (one little-endian float32 per block, ceil(n/B)*4
// bytes); on a segment called s it writes "s.q" and "s.scale". Both
// lengths follow from n alone, so the frame's plan knows them exactly and
// later steps can select them: "nf4(64) | scale:int8(256)" quantizes the
// block scales of nf4 again (QLoRA's double quantization), and
// "int8(4096) | q:huff0" entropy-codes the int8 codes. Codes are packed
// LSB first: element i of a block of b-bit codes sits in byte i*b/8 at bit
// (i*b)%8. As B is a multiple of 8, every full block fills whole bytes.
// Padding bits after the last code (4-, 2- and 1-bit codes) are zero; a
// decoder refuses a segment whose padding is not (codec.ErrCorrupt), so
// that every valid segment has one meaning.
//
// Wire parameters: uvarints, the block size (qsgd: levels, block size,
// seed), in minimal form; Load refuses anything else with
// codec.ErrCorrupt. Decode checks both part lengths against the length
// the frame gives for the input, and refuses a scale that is NaN,
// infinite or negative, and codes that the stage never writes.
//
// Error bounds. Each stage documents the largest |x - x^| it can give for
// an element x of a block (x^ the dequantized value), including float32
// rounding; blockOp.errorBound computes it for a block, and block_test.go's
// checkQuantBound asserts it on random data and on the reference model's
// weights and gradients. For float64 input add the rounding of x to
// float32, at most 2^-24*|x|.
//
// Nested blocks. A blockwise step on a segment other than "data" (the
// scales of "nf4(64) | scale:int8(256)") cuts that segment into blocks of
// its own, counted from the start of the chunk. codec.Recipe.Granularity
// aligns chunks to the largest block of the recipe (256 elements here),
// not to the 64*256 elements one scale block covers, so such a recipe
// gives other (equally bounded) values when a tensor is chunked than when
// it is coded whole, unless the chunk size is a multiple of the product.
//
// Speed. On amd64 with AVX2 (block_amd64.go) the int8, nf4 and fp4
// kernels run whole runs of blocks whose size is a multiple of 32, and
// sign, ternary and qsgd have AVX2 loops inside each block; every kernel
// has a Go twin with the same results (block_kernel_test.go).
const (
	minBlock = 8
	maxBlock = 1 << 20
)

// ErrNonFinite is wrapped by the errors of the blockwise quantizers for an
// input element that is NaN, infinite, or a float64 beyond the float32
// range.
var ErrNonFinite = errors.New("lossy: non-finite value")

// errBlockNonFinite is a kernel's report that its block holds a non-finite
// value; Encode finds the element and builds the error the caller sees.
var errBlockNonFinite = errors.New("non-finite value in block")

// blockKind describes one blockwise stage: its registration data and its
// kernels.
type blockKind struct {
	id       codec.StageID
	name     string
	defBlock int
	bits     int         // bits per code: 8, 4, 2 or 1
	elem     codec.DType // element type of the q segment
	reads    string
	writes   string
	doc      string

	// quantize codes one block x (1 <= len(x) <= B) into q, which has
	// exactly the bytes of len(x) codes (padding bits included, to be
	// written as zeros), and returns the block's scale. idx is the index
	// of x[0] in the tensor (in the segment when it is not "data"). It
	// returns errBlockNonFinite when x holds a NaN or an infinity.
	quantize func(o *blockOp, q []byte, x []float32, idx uint64) (float32, error)
	// dequantize decodes one block: x from its codes q (len(x) codes,
	// padding included) and its scale, finite and >= 0. It reports codes
	// the stage never writes, and non-zero padding, as false.
	dequantize func(o *blockOp, x []float32, q []byte, scale float32) bool
	// bound is the documented worst-case |x - x^| over the elements of
	// the block x, for tests and error budgets.
	bound func(o *blockOp, x []float32) float64

	// quantizeFast and dequantizeFast, where set, are accelerated
	// multi-block kernels (block_amd64.go), used when blockHasAVX2 and the
	// input is aligned float32: they run quantize (dequantize) over whole
	// blocks from the start of x, with the same results, and return how
	// many elements they did. They stop before a block that needs the
	// general path (absmax 0 or tiny, a non-finite value; a scale that is
	// not in [0, 2^127)), which then runs for that one block. ok false
	// (dequantizeFast) reports an invalid code somewhere: the general path
	// then redoes the segment and locates it.
	quantizeFast   func(o *blockOp, q, scale []byte, x []float32) int
	dequantizeFast func(o *blockOp, x []float32, q, scale []byte) (done int, ok bool)

	stage *codec.Stage // set by registerBlock
}

// registerBlock makes k's stage and registers it with codec.
func registerBlock(k *blockKind) {
	k.stage = &codec.Stage{
		ID:          k.id,
		Name:        k.name,
		Kind:        codec.Split,
		Granularity: codec.Block,
		Block:       k.defBlock,
		Lossy:       true,
		Bits:        k.bits,
		Reads:       k.reads,
		Writes:      k.writes,
		Doc:         k.doc,
		New:         func(args []codec.Arg) (codec.Op, error) { return newBlockOp(k, args) },
		Load:        func(p []byte) (codec.Op, error) { return loadBlockOp(k, p) },
	}
	codec.Register(k.stage)
}

// blockOp is a configured blockwise quantizer. It is immutable and safe
// for concurrent use.
type blockOp struct {
	kind   *blockKind
	block  int
	levels int    // qsgd: s, the number of levels
	seed   uint64 // qsgd: the seed of the dither
}

var (
	_ codec.Op         = (*blockOp)(nil)
	_ codec.BlockSizer = (*blockOp)(nil)
)

func (o *blockOp) Stage() *codec.Stage { return o.kind.stage }

// BlockElems is the block size in elements (codec.BlockSizer).
func (o *blockOp) BlockElems() int { return o.block }

func (o *blockOp) String() string {
	if o.kind.id == QSGDID {
		s := o.kind.name + "(" + strconv.Itoa(o.levels) + "," + strconv.Itoa(o.block)
		if o.seed != 0 {
			s += ",seed=" + strconv.FormatUint(o.seed, 10)
		}
		return s + ")"
	}
	return o.kind.name + "(" + strconv.Itoa(o.block) + ")"
}

// AppendParams appends uvarint(block), or for qsgd uvarint(levels)
// uvarint(block) uvarint(seed).
func (o *blockOp) AppendParams(dst []byte) []byte {
	if o.kind.id == QSGDID {
		dst = binary.AppendUvarint(dst, uint64(o.levels))
		dst = binary.AppendUvarint(dst, uint64(o.block))
		return binary.AppendUvarint(dst, o.seed)
	}
	return binary.AppendUvarint(dst, uint64(o.block))
}

func newBlockOp(k *blockKind, args []codec.Arg) (codec.Op, error) {
	o := &blockOp{kind: k}
	var err error
	if k.id == QSGDID {
		if err := codec.CheckArgs(k.name, args, 3, "levels", "block", "seed"); err != nil {
			return nil, err
		}
		if o.levels, err = codec.IntArg(k.name, args, 0, "levels", qsgdDefLevels, qsgdMinLevels, qsgdMaxLevels); err != nil {
			return nil, err
		}
		if o.block, err = codec.IntArg(k.name, args, 1, "block", k.defBlock, minBlock, maxBlock); err != nil {
			return nil, err
		}
		if o.seed, err = seedArg(k.name, args, 2); err != nil {
			return nil, err
		}
	} else {
		if err := codec.CheckArgs(k.name, args, 1, "block"); err != nil {
			return nil, err
		}
		if o.block, err = codec.IntArg(k.name, args, 0, "block", k.defBlock, minBlock, maxBlock); err != nil {
			return nil, err
		}
	}
	if o.block%8 != 0 {
		return nil, fmt.Errorf("%w: %s: block=%d: want a multiple of 8", codec.ErrRecipe, k.name, o.block)
	}
	return o, nil
}

// seedArg parses the argument "seed" (or positional pos) as a uint64; 0
// when absent.
func seedArg(stage string, args []codec.Arg, pos int) (uint64, error) {
	var v uint64
	found := false
	for i, a := range args {
		if a.Key == "seed" || (a.Key == "" && i == pos) {
			if found {
				return 0, fmt.Errorf("%w: %s: seed given twice", codec.ErrRecipe, stage)
			}
			n, err := strconv.ParseUint(a.Value, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: %s: seed=%q: want an integer in [0, %d]", codec.ErrRecipe, stage, a.Value, uint64(math.MaxUint64))
			}
			v, found = n, true
		}
	}
	return v, nil
}

func loadBlockOp(k *blockKind, p []byte) (codec.Op, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s params %x: %s", codec.ErrCorrupt, k.name, p, why)
	}
	var vals [3]uint64
	want := 1
	if k.id == QSGDID {
		want = 3
	}
	rest := p
	for i := range want {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return nil, bad("truncated or overlong uvarint")
		}
		vals[i], rest = v, rest[n:]
	}
	if len(rest) != 0 {
		return nil, bad("trailing bytes")
	}
	o := &blockOp{kind: k}
	blk := vals[0]
	if k.id == QSGDID {
		if vals[0] < qsgdMinLevels || vals[0] > qsgdMaxLevels {
			return nil, bad(fmt.Sprintf("levels %d outside [%d, %d]", vals[0], qsgdMinLevels, qsgdMaxLevels))
		}
		o.levels, blk, o.seed = int(vals[0]), vals[1], vals[2]
	}
	if blk < minBlock || blk > maxBlock || blk%8 != 0 {
		return nil, bad(fmt.Sprintf("block %d: want a multiple of 8 in [%d, %d]", blk, minBlock, maxBlock))
	}
	o.block = int(blk)
	// One meaning, one encoding: refuse non-minimal uvarints.
	if string(o.AppendParams(nil)) != string(p) {
		return nil, bad("non-minimal uvarint")
	}
	return o, nil
}

// qLen is the byte length of n codes.
func (o *blockOp) qLen(n int) int { return (n*o.kind.bits + 7) / 8 }

// numBlocks is the number of blocks of n elements.
func (o *blockOp) numBlocks(n int) int { return (n + o.block - 1) / o.block }

// elems checks that in holds float32 or float64 elements and returns their
// number and size.
func (o *blockOp) elems(in codec.SegInfo) (n, esz int, err error) {
	if in.Elem != codec.F32 && in.Elem != codec.F64 {
		return 0, 0, fmt.Errorf("%s: segment %q holds %v elements; %s quantizes f32 or f64 (convert other types first)", o.kind.name, in.Name, in.Elem, o.kind.name)
	}
	esz = in.Elem.Size()
	if in.Len < 0 {
		return 0, 0, fmt.Errorf("%s: segment %q has no known length", o.kind.name, in.Name)
	}
	if in.Len%esz != 0 {
		return 0, 0, fmt.Errorf("%s: segment %q of %d bytes is not a whole number of %v elements", o.kind.name, in.Name, in.Len, in.Elem)
	}
	return in.Len / esz, esz, nil
}

// Outputs gives "q" (or "s.q") with the codes and "scale" (or "s.scale")
// with one float32 per block; both lengths are exact.
func (o *blockOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	n, _, err := o.elems(in)
	if err != nil {
		return nil, err
	}
	return []codec.SegInfo{
		{Name: codec.OutputName(in.Name, "q"), Elem: o.kind.elem, Len: o.qLen(n)},
		{Name: codec.OutputName(in.Name, "scale"), Elem: codec.F32, Len: 4 * o.numBlocks(n)},
	}, nil
}

// Encode quantizes in into two buffers from ctx.Arena.
func (o *blockOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	info := in.SegInfo
	info.Len = len(in.Data)
	outs, err := o.Outputs(info)
	if err != nil {
		return nil, err
	}
	var a *codec.Arena
	var idx0 uint64
	if ctx != nil {
		a = ctx.Arena
		if ctx.Tensor != nil && in.Name == "data" && ctx.Tensor.Offset > 0 {
			idx0 = uint64(ctx.Tensor.Offset)
		}
	}
	q := a.Alloc(outs[0].Len)
	scale := a.Alloc(outs[1].Len)
	var scratch []float32
	if _, ok := view.As[float32](in.Data); !ok || in.Elem != codec.F32 {
		n := len(in.Data) / in.Elem.Size()
		scratch, _ = view.As[float32](a.Alloc(4 * min(o.block, n)))
	}
	if err := o.encodeInto(q, scale, in.Data, in.Elem, idx0, scratch); err != nil {
		return nil, o.encodeError(err, in, idx0)
	}
	return []codec.Segment{
		{SegInfo: outs[0], Data: q},
		{SegInfo: outs[1], Data: scale},
	}, nil
}

// blockError locates a failed block for encodeError.
type blockError struct {
	lo, hi int // elements of the block in the segment
	err    error
}

func (e *blockError) Error() string { return e.err.Error() }

// encodeInto quantizes src (elements of type elem) into q and scale,
// which have the lengths Outputs gives. scratch holds min(B, n) float32
// when src is float64 or not aligned for float32; it may be nil
// otherwise. idx0 is the tensor index of the first element.
func (o *blockOp) encodeInto(q, scale, src []byte, elem codec.DType, idx0 uint64, scratch []float32) error {
	B := o.block
	bits := o.kind.bits
	var xs []float32
	n := len(src) / elem.Size()
	if elem == codec.F32 {
		xs, _ = view.As[float32](src)
	}
	quantize := o.kind.quantize
	fast := blockHasAVX2 && o.kind.quantizeFast != nil && xs != nil
	for b, lo := 0, 0; lo < n; b, lo = b+1, lo+B {
		if full := (n - lo) / B * B; fast && full > 0 {
			d := o.kind.quantizeFast(o, q[lo*bits/8:], scale[4*b:], xs[lo:lo+full])
			if b, lo = b+d/B, lo+d; lo >= n {
				break
			}
		}
		hi := min(lo+B, n)
		var x []float32
		switch {
		case xs != nil:
			x = xs[lo:hi]
		case elem == codec.F32:
			x = scratch[:hi-lo]
			for i := range x {
				x[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*(lo+i):]))
			}
		default:
			x = scratch[:hi-lo]
			for i := range x {
				x[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*(lo+i):])))
			}
		}
		s, err := quantize(o, q[lo*bits/8:(hi*bits+7)/8], x, idx0+uint64(lo))
		if err != nil {
			return &blockError{lo: lo, hi: hi, err: err}
		}
		binary.LittleEndian.PutUint32(scale[4*b:], math.Float32bits(s))
	}
	return nil
}

// encodeError turns a kernel's error into one that names the element.
func (o *blockOp) encodeError(err error, in codec.Segment, idx0 uint64) error {
	var be *blockError
	if !errors.As(err, &be) {
		return err
	}
	if be.err != errBlockNonFinite {
		return fmt.Errorf("%s: elements [%d, %d) of segment %q: %w", o.kind.name, be.lo, be.hi, in.Name, be.err)
	}
	where := func(i int) string {
		if in.Name == "data" {
			return fmt.Sprintf("tensor element %d", idx0+uint64(i))
		}
		return fmt.Sprintf("element %d of segment %q", i, in.Name)
	}
	for i := be.lo; i < be.hi; i++ {
		if in.Elem == codec.F32 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(in.Data[4*i:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("%w: %s: %s is %v", ErrNonFinite, o.kind.name, where(i), v)
			}
			continue
		}
		v := math.Float64frombits(binary.LittleEndian.Uint64(in.Data[8*i:]))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: %s: %s is %v", ErrNonFinite, o.kind.name, where(i), v)
		}
		if f := float32(v); math.IsInf(float64(f), 0) {
			return fmt.Errorf("%w: %s: %s is %v, beyond the float32 range", ErrNonFinite, o.kind.name, where(i), v)
		}
	}
	return fmt.Errorf("%w: %s: elements [%d, %d) of segment %q", ErrNonFinite, o.kind.name, be.lo, be.hi, in.Name)
}

// Decode dequantizes parts (codes and scales) straight into dst.
func (o *blockOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	n, _, err := o.elems(in)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", codec.ErrCorrupt, err)
	}
	if len(parts) != 2 {
		return nil, fmt.Errorf("%w: %s: %d segments, want 2", codec.ErrCorrupt, o.kind.name, len(parts))
	}
	if ql, sl := o.qLen(n), 4*o.numBlocks(n); len(parts[0].Data) != ql || len(parts[1].Data) != sl {
		return nil, fmt.Errorf("%w: %s of %d elements: codes of %d bytes and scales of %d, want %d and %d",
			codec.ErrCorrupt, o.kind.name, n, len(parts[0].Data), len(parts[1].Data), ql, sl)
	}
	if cap(dst)-len(dst) < in.Len {
		return nil, fmt.Errorf("codec: %s: destination has room for %d bytes, want %d", o.kind.name, cap(dst)-len(dst), in.Len)
	}
	start := len(dst)
	out := dst[start : start+in.Len]
	var scratch []float32
	if _, ok := view.As[float32](out); !ok || in.Elem != codec.F32 {
		var a *codec.Arena
		if ctx != nil {
			a = ctx.Arena
		}
		scratch, _ = view.As[float32](a.Alloc(4 * min(o.block, n)))
	}
	if err := o.decodeInto(out, parts[0].Data, parts[1].Data, in.Elem, scratch); err != nil {
		return nil, err
	}
	return dst[:start+in.Len], nil
}

// decodeInto dequantizes codes q and scales into out (elements of type
// elem). The lengths are checked by the caller; scratch is as for
// encodeInto.
func (o *blockOp) decodeInto(out, q, scale []byte, elem codec.DType, scratch []float32) error {
	B := o.block
	bits := o.kind.bits
	n := len(out) / elem.Size()
	var xs []float32
	if elem == codec.F32 {
		xs, _ = view.As[float32](out)
	}
	dequantize := o.kind.dequantize
	fast := blockHasAVX2 && o.kind.dequantizeFast != nil && xs != nil
	for b, lo := 0, 0; lo < n; b, lo = b+1, lo+B {
		if full := (n - lo) / B * B; fast && full > 0 {
			d, ok := o.kind.dequantizeFast(o, xs[lo:lo+full], q[lo*bits/8:], scale[4*b:])
			if !ok {
				fast, d = false, 0 // the general path finds the bad code
			}
			if b, lo = b+d/B, lo+d; lo >= n {
				break
			}
		}
		hi := min(lo+B, n)
		s := math.Float32frombits(binary.LittleEndian.Uint32(scale[4*b:]))
		if !(s >= 0) || s > math.MaxFloat32 {
			return fmt.Errorf("%w: %s: block %d has scale %v", codec.ErrCorrupt, o.kind.name, b, s)
		}
		x := scratch
		if xs != nil {
			x = xs[lo:hi]
		} else {
			x = scratch[:hi-lo]
		}
		if !dequantize(o, x, q[lo*bits/8:(hi*bits+7)/8], s) {
			return fmt.Errorf("%w: %s: block %d (elements [%d, %d)) holds codes %s never writes, or non-zero padding",
				codec.ErrCorrupt, o.kind.name, b, lo, hi, o.kind.name)
		}
		if s >= blockSaturateMin {
			blockSaturate(x)
		}
		switch {
		case xs != nil:
		case elem == codec.F32:
			for i, v := range x {
				binary.LittleEndian.PutUint32(out[4*(lo+i):], math.Float32bits(v))
			}
		default:
			for i, v := range x {
				binary.LittleEndian.PutUint64(out[8*(lo+i):], math.Float64bits(float64(v)))
			}
		}
	}
	return nil
}

// Saturation. Dequantizing a block whose scale is within a few ulps of
// math.MaxFloat32 can round beyond the float32 range (int8's
// q*(absmax/127), qsgd's q*(norm/s)); such values blockSaturate to
// ±math.MaxFloat32 instead of becoming infinities. Only blocks with a
// scale of 2^127 or more take this pass; it changes nothing else.
const blockSaturateMin = 0x1p127

func blockSaturate(x []float32) {
	for i, v := range x {
		x[i] = max(-math.MaxFloat32, min(math.MaxFloat32, v))
	}
}

// Shared kernels.

// absmaxBits returns the largest of the bits of |x[i]| (the sign bit
// cleared): math.Float32bits(max |x[i]|) when every x[i] is finite, and a
// value >= 0x7f800000 when one is not. Reference loop:
//
//	m := uint32(0)
//	for _, v := range x { m = max(m, math.Float32bits(v)&0x7fffffff) }
//
// It runs four ways; the AVX2 multi-block kernels compute the same.
func absmaxBits(x []float32) uint32 {
	var m0, m1, m2, m3 uint32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		m0 = max(m0, math.Float32bits(v[0])&0x7fffffff)
		m1 = max(m1, math.Float32bits(v[1])&0x7fffffff)
		m2 = max(m2, math.Float32bits(v[2])&0x7fffffff)
		m3 = max(m3, math.Float32bits(v[3])&0x7fffffff)
	}
	for ; i < len(x); i++ {
		m0 = max(m0, math.Float32bits(x[i])&0x7fffffff)
	}
	return max(m0, m1, m2, m3)
}

// sums16 adds f(x[i]) to acc[i%16] in element order, f(x) = |x| (sq
// false) or x*x (sq true), both computed in float64, and returns the bits
// of max |x| (as absmaxBits). A block's sum is then reduce16 of the 16
// partial sums: a fixed order, so that the AVX2 kernel (four vectors of 4
// float64 lanes) and this loop give the same bits. Reference loop:
//
//	for i, v := range x { acc[i%16] += f(float64(v)) }
func sums16(x []float32, sq bool, acc *[16]float64) uint32 {
	i, m := sums16Asm(x, sq, acc)
	a := *acc
	for ; i+16 <= len(x); i += 16 {
		v := (*[16]float32)(x[i : i+16])
		for j := range v {
			b := math.Float32bits(v[j]) & 0x7fffffff
			m = max(m, b)
			f := float64(math.Float32frombits(b))
			if sq {
				f = float64(f * f) // the conversion keeps Go from fusing into an FMA
			}
			a[j] += f
		}
	}
	for ; i < len(x); i++ {
		b := math.Float32bits(x[i]) & 0x7fffffff
		m = max(m, b)
		f := float64(math.Float32frombits(b))
		if sq {
			f = float64(f * f)
		}
		a[i%16] += f
	}
	*acc = a
	return m
}

// reduce16 is the sum of the 16 partial sums of sums16, added pairwise.
func reduce16(acc *[16]float64) float64 {
	var s [8]float64
	for j := range s {
		s[j] = acc[2*j] + acc[2*j+1]
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

// nonFiniteBits is the smallest absolute bit pattern of a non-finite
// float32 (+Inf).
const nonFiniteBits = 0x7f800000

// Tiny blocks. The quantizers compute inv = c/absmax in float32 (c = 127
// for int8, 1 for the 4-bit codes), which overflows when absmax is tiny
// (below about 2^-121 for int8, 2^-128 for the 4-bit codes). For blocks
// with absmax < 2^-100 they compute instead with x and absmax multiplied
// by 2^100 (exact: no overflow, no subnormal loss): y = fl(fl(x*2^100) *
// fl(c/(absmax*2^100))). Wherever c/absmax does not overflow, that gives
// the same y as the plain formula; the dequantized values and bounds are
// unchanged (the bounds carry an absolute 2^-140 for such blocks).
const (
	tinyBits  = (127 - 100) << 23 // 2^-100
	tinyScale = 0x1p100
)

// absSlack is the absolute slack the bounds add for subnormal scales and
// results: far above the 2^-149 granularity of subnormals, far below any
// error a real block sees.
const absSlack = 0x1p-140

// errorBound is the stage's documented worst-case |x - x^| over the
// elements of the block x (float32 rounding included), as a float64.
func (o *blockOp) errorBound(x []float32) float64 { return o.kind.bound(o, x) }
