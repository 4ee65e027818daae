package lossy

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/float16"
	"github.com/tensorpress/tensorpress/internal/view"
)

// The fp16 and bf16 stages narrow floats to 16 bits.
//
// fp16 rounds each element of an f32 or f64 segment to IEEE 754 binary16
// (round to nearest, ties to even, gradual underflow); bf16 rounds it to
// bfloat16 (the top 16 bits of a float32, rounded to nearest even). A
// float64 element is rounded once, straight to 16 bits (not through
// float32). The output is a segment of the same name with element type
// codec.F16 or codec.BF16 and half the input's length (a quarter for f64),
// two little-endian bytes per element; decoding widens it back to the
// input's element type, exactly (every fp16 and bf16 value is a float32
// and a float64). Any other element type is refused by Outputs. The
// stages are elementwise: any chunking gives the same bytes.
//
// Wire parameters: none; Load refuses non-empty parameters with
// codec.ErrCorrupt. Recipe text: "fp16", "bf16" (no arguments).
//
// Error bounds, for a finite input x and its decoded value x^:
//
//	fp16, |x| < 65520:
//	    |x - x^| <= 2^-11 * |x|   when |x| >= 2^-14 (normal results)
//	    |x - x^| <= 2^-25         when |x| <  2^-14 (subnormal results)
//	fp16, |x| >= 65520: x^ = ±Inf (overflow; 65504 is the largest fp16,
//	    and 65504 <= |x| < 65520 gives ±65504 within the relative bound)
//	bf16, |x| < 0x1.ffp127:
//	    |x - x^| <= 2^-8 * |x|    when |x| >= 2^-126 (normal results)
//	    |x - x^| <= 2^-134        when |x| <  2^-126
//	bf16, |x| >= 0x1.ffp127 (2^128 - 2^119): x^ = ±Inf; of the float32
//	    values only those from bits 0x7f7f8000 to MaxFloat32 overflow.
//
// fp16 is for data known to be in range: weights and activations usually
// are, but the relative bound ends at 2^-14 (6.1e-5) and magnitudes up to
// 2^-25 (3.0e-8) become ±0, which is why mixed-precision training scales
// gradients before casting them to fp16; bf16 keeps float32's range at
// a lower precision.
//
// ±0 (with its sign) and ±Inf are kept exactly; NaN stays NaN. NaN bit
// patterns are the ones PyTorch (x86-64, AVX2) writes for whole tensors:
// fp16 0x7e00 | sign (payload dropped), bf16 0xffff for every NaN (torch's
// scalar path would give 0x7fc0; see internal/float16). Decoding widens
// fp16 NaNs with their payload and the quiet bit set, and bf16 NaNs bit
// for bit, as torch does.
var (
	fp16Stage = &codec.Stage{
		ID:          FP16ID,
		Name:        "fp16",
		Kind:        codec.Filter,
		Granularity: codec.Elementwise,
		Lossy:       true,
		Bits:        16,
		Reads:       "an f32 or f64 segment",
		Writes:      "the same segment as f16 (IEEE binary16)",
		Doc: "IEEE float16, round to nearest even: |x - x^| <= 2^-11*|x| (normal), <= 2^-25 (|x| < 2^-14); " +
			"|x| >= 65520 overflows to ±Inf: for data known to be in range",
		New:  func(args []codec.Arg) (codec.Op, error) { return newHalfOp(false, args) },
		Load: func(p []byte) (codec.Op, error) { return loadHalfOp(false, p) },
	}
	bf16Stage = &codec.Stage{
		ID:          BF16ID,
		Name:        "bf16",
		Kind:        codec.Filter,
		Granularity: codec.Elementwise,
		Lossy:       true,
		Bits:        16,
		Reads:       "an f32 or f64 segment",
		Writes:      "the same segment as bf16 (bfloat16)",
		Doc:         "bfloat16, round to nearest even: |x - x^| <= 2^-8*|x| (normal); float32's range",
		New:         func(args []codec.Arg) (codec.Op, error) { return newHalfOp(true, args) },
		Load:        func(p []byte) (codec.Op, error) { return loadHalfOp(true, p) },
	}
)

func init() {
	codec.Register(fp16Stage)
	codec.Register(bf16Stage)
}

func newHalfOp(bf bool, args []codec.Arg) (codec.Op, error) {
	o := halfOp{bf: bf}
	if len(args) != 0 {
		return nil, fmt.Errorf("%w: %s takes no arguments, got %q", codec.ErrRecipe, o, args[0])
	}
	return o, nil
}

func loadHalfOp(bf bool, p []byte) (codec.Op, error) {
	o := halfOp{bf: bf}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %s params %x: want none", codec.ErrCorrupt, o, p)
	}
	return o, nil
}

// halfOp is the fp16 stage, or the bf16 stage when bf is set.
type halfOp struct{ bf bool }

var _ codec.Op = halfOp{}

func (o halfOp) Stage() *codec.Stage {
	if o.bf {
		return bf16Stage
	}
	return fp16Stage
}

func (o halfOp) String() string {
	if o.bf {
		return "bf16"
	}
	return "fp16"
}

func (halfOp) AppendParams(dst []byte) []byte { return dst }

// elem is the element type of the output.
func (o halfOp) elem() codec.DType {
	if o.bf {
		return codec.BF16
	}
	return codec.F16
}

// Outputs refuses anything but a whole number of f32 or f64 elements.
func (o halfOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if in.Elem != codec.F32 && in.Elem != codec.F64 {
		return nil, fmt.Errorf("%s: segment %q holds %v elements; %s converts f32 and f64 segments", o, in.Name, in.Elem, o)
	}
	sz := in.Elem.Size()
	if in.Len < 0 || in.Len%sz != 0 {
		return nil, fmt.Errorf("%s: segment %q of %d bytes is not a whole number of %v elements", o, in.Name, in.Len, in.Elem)
	}
	return []codec.SegInfo{{Name: in.Name, Elem: o.elem(), Len: in.Len / sz * 2}}, nil
}

// Encode writes the 16-bit patterns into ctx.Arena.
func (o halfOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	info := in.SegInfo
	info.Len = len(in.Data)
	outs, err := o.Outputs(info)
	if err != nil {
		return nil, err
	}
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	out := a.Alloc(outs[0].Len)
	halfEncode(out, in.Data, in.Elem, o.bf)
	return []codec.Segment{{SegInfo: outs[0], Data: out}}, nil
}

// Decode widens the 16-bit patterns straight into dst, to in.Elem.
func (o halfOp) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	outs, err := o.Outputs(in)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", codec.ErrCorrupt, err)
	}
	if len(parts) != 1 || len(parts[0].Data) != outs[0].Len {
		return nil, fmt.Errorf("%w: %s: want one segment of %d bytes for %d bytes of %v", codec.ErrCorrupt, o, outs[0].Len, in.Len, in.Elem)
	}
	if cap(dst)-len(dst) < in.Len {
		return nil, fmt.Errorf("codec: %s: destination has room for %d bytes, want %d", o, cap(dst)-len(dst), in.Len)
	}
	start := len(dst)
	halfDecode(dst[start:start+in.Len], parts[0].Data, in.Elem, o.bf)
	return dst[:start+in.Len], nil
}

// F32ToFP16 writes the fp16 bits of each element of src to dst, rounded
// as the fp16 stage does. It panics if dst is shorter than src.
func F32ToFP16(dst []uint16, src []float32) {
	halfCheckLen("F32ToFP16", len(dst), len(src))
	halfEncode(view.Of(dst[:len(src)]), view.Of(src), codec.F32, false)
}

// FP16ToF32 widens the fp16 patterns of src into dst, exactly. It panics
// if dst is shorter than src.
func FP16ToF32(dst []float32, src []uint16) {
	halfCheckLen("FP16ToF32", len(dst), len(src))
	halfDecode(view.Of(dst[:len(src)]), view.Of(src), codec.F32, false)
}

// F32ToBF16 writes the bfloat16 bits of each element of src to dst,
// rounded as the bf16 stage does. It panics if dst is shorter than src.
func F32ToBF16(dst []uint16, src []float32) {
	halfCheckLen("F32ToBF16", len(dst), len(src))
	halfEncode(view.Of(dst[:len(src)]), view.Of(src), codec.F32, true)
}

// BF16ToF32 widens the bfloat16 patterns of src into dst, exactly. It
// panics if dst is shorter than src.
func BF16ToF32(dst []float32, src []uint16) {
	halfCheckLen("BF16ToF32", len(dst), len(src))
	halfDecode(view.Of(dst[:len(src)]), view.Of(src), codec.F32, true)
}

func halfCheckLen(fn string, dst, src int) {
	if dst < src {
		panic(fmt.Sprintf("lossy: %s: dst has %d elements, src %d", fn, dst, src))
	}
}

// Kernels.
//
// halfEncode and halfDecode are specified by these reference loops over
// little-endian bytes, with n = len(dst)/2 (encode) or len(src)/2
// (decode), and the scalar conversions of internal/float16:
//
//	encode f32: for i := range n { dst[2i:] = F16FromF32(src[4i:]) }   (BF16FromF32 for bf16)
//	encode f64: for i := range n { dst[2i:] = F16FromF64(src[8i:]) }   (BF16FromF64)
//	decode f32: for i := range n { dst[4i:] = F16ToF32(src[2i:]) }     (BF16ToF32)
//	decode f64: for i := range n { dst[8i:] = F16ToF64(src[2i:]) }     (BF16ToF64)
//
// Nothing is assumed about alignment: stored segments alias the frame.
// The float32 loops have fast paths: AVX2 (with F16C for fp16) on amd64
// for whole groups of 32 elements (float_amd64.s; outputs of 4 MiB and
// more are written with non-temporal stores), then the Go loops below for
// the rest; float_test.go checks every path against the reference, NaN
// bits included. The float64 loops are the reference loops.

// halfEncode narrows src (elements of type elem, F32 or F64) into dst.
func halfEncode(dst, src []byte, elem codec.DType, bf bool) {
	sz := elem.Size()
	n := len(src) / sz
	dst = dst[:2*n]
	if elem == codec.F64 {
		if bf {
			for i := range n {
				binary.LittleEndian.PutUint16(dst[2*i:], float16.BF16FromF64(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:]))))
			}
		} else {
			for i := range n {
				binary.LittleEndian.PutUint16(dst[2*i:], float16.F16FromF64(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:]))))
			}
		}
		return
	}
	src = src[:4*n]
	if bf {
		done := bf16EncodeAsm(dst, src)
		bf16EncodeGo(dst[2*done:], src[4*done:])
	} else {
		done := fp16EncodeAsm(dst, src)
		fp16EncodeGo(dst[2*done:], src[4*done:])
	}
}

// halfDecode widens the 16-bit patterns of src into dst (elements of type
// elem, F32 or F64).
func halfDecode(dst, src []byte, elem codec.DType, bf bool) {
	n := len(src) / 2
	if elem == codec.F64 {
		dst = dst[:8*n]
		if bf {
			for i := range n {
				binary.LittleEndian.PutUint64(dst[8*i:], math.Float64bits(float16.BF16ToF64(binary.LittleEndian.Uint16(src[2*i:]))))
			}
		} else {
			for i := range n {
				binary.LittleEndian.PutUint64(dst[8*i:], math.Float64bits(float16.F16ToF64(binary.LittleEndian.Uint16(src[2*i:]))))
			}
		}
		return
	}
	dst = dst[:4*n]
	if bf {
		done := bf16DecodeAsm(dst, src)
		bf16DecodeGo(dst[4*done:], src[2*done:])
	} else {
		done := fp16DecodeAsm(dst, src)
		fp16DecodeGo(dst[4*done:], src[2*done:])
	}
}

// The Go loops.
//
// fp16EncodeGo and its kin take bytes, as the kernels do; the work is
// done by the *Words loops below, on typed slices: views of the bytes
// when they are aligned and the host is little-endian (the usual case:
// codec's arenas and decode buffers are 8-byte aligned), else copies made
// a block at a time through aligned buffers on the stack. The *Words loops
// are the reference loops with the scalar conversions of internal/float16
// written out inline, without calls, so that the loop state stays in
// registers (Go has no callee-saved registers: a call anywhere in a loop
// body, even on a path never taken, makes it spill). float_test.go checks
// them against internal/float16 on every fp16 and bf16 pattern, on the
// rounding edges and on random inputs.

// halfBlock is the elements the Go loops stage at a time for unaligned
// buffers.
const halfBlock = 256

// fp16EncodeGo is the f32 encode reference loop for fp16.
func fp16EncodeGo(dst, src []byte) { halfNarrowGo(dst, src, fp16EncodeWords) }

// bf16EncodeGo is the f32 encode reference loop for bf16.
func bf16EncodeGo(dst, src []byte) { halfNarrowGo(dst, src, bf16EncodeWords) }

// fp16DecodeGo is the f32 decode reference loop for fp16.
func fp16DecodeGo(dst, src []byte) { halfWidenGo(dst, src, fp16DecodeWords) }

// bf16DecodeGo is the f32 decode reference loop for bf16.
func bf16DecodeGo(dst, src []byte) { halfWidenGo(dst, src, bf16DecodeWords) }

// halfNarrowGo runs the narrowing loop f over the len(dst)/2 elements of
// dst and the float32 bit patterns of src.
func halfNarrowGo(dst, src []byte, f func(dst []uint16, src []uint32)) {
	n := len(dst) / 2
	dst, src = dst[:2*n], src[:4*n]
	if view.LittleEndian {
		d, ok1 := view.As[uint16](dst)
		s, ok2 := view.As[uint32](src)
		if ok1 && ok2 {
			f(d, s)
			return
		}
	}
	var in [halfBlock]uint32
	var out [halfBlock]uint16
	for len(dst) > 0 {
		k := min(len(dst)/2, halfBlock)
		for i := range k {
			in[i] = binary.LittleEndian.Uint32(src[4*i:])
		}
		f(out[:k], in[:k])
		for i := range k {
			binary.LittleEndian.PutUint16(dst[2*i:], out[i])
		}
		dst, src = dst[2*k:], src[4*k:]
	}
}

// halfWidenGo runs the widening loop f over the len(src)/2 16-bit
// patterns of src and the elements of dst.
func halfWidenGo(dst, src []byte, f func(dst []uint32, src []uint16)) {
	n := len(src) / 2
	dst, src = dst[:4*n], src[:2*n]
	if view.LittleEndian {
		d, ok1 := view.As[uint32](dst)
		s, ok2 := view.As[uint16](src)
		if ok1 && ok2 {
			f(d, s)
			return
		}
	}
	var in [halfBlock]uint16
	var out [halfBlock]uint32
	for len(src) > 0 {
		k := min(len(src)/2, halfBlock)
		for i := range k {
			in[i] = binary.LittleEndian.Uint16(src[2*i:])
		}
		f(out[:k], in[:k])
		for i := range k {
			binary.LittleEndian.PutUint32(dst[4*i:], out[i])
		}
		dst, src = dst[4*k:], src[2*k:]
	}
}

// fp16EncodeWords is float16.F16FromF32 on the bit patterns of src.
func fp16EncodeWords(dst []uint16, src []uint32) {
	dst = dst[:len(src)]
	for i, b := range src {
		a := b & 0x7fffffff
		var h uint32
		switch {
		case a-0x38800000 < 0x477ff000-0x38800000: // 2^-14 <= |x| < 65520: normal
			a -= (127 - 15) << 23
			h = (a + 0xfff + (a>>13)&1) >> 13
		case a < 0x38800000: // subnormal or zero
			if a > 0x33000000 { // above 2^-25: a subnormal result (or 0x400)
				m := a&0x7fffff | 0x800000
				s := 126 - a>>23 // 14..24
				h = m >> s
				rem, half := m&(1<<s-1), uint32(1)<<(s-1)
				if rem > half || rem == half && h&1 == 1 {
					h++
				}
			}
		case a > 0x7f800000:
			h = float16.NaNF16
		default: // overflow, Inf
			h = 0x7c00
		}
		dst[i] = uint16(b>>16)&0x8000 | uint16(h)
	}
}

// fp16DecodeWords is float16.F16ToF32 giving the bit patterns.
func fp16DecodeWords(dst []uint32, src []uint16) {
	dst = dst[:len(src)]
	for i, h16 := range src {
		h := uint32(h16)
		a := h & 0x7fff
		var f uint32
		switch {
		case a-0x0400 < 0x7c00-0x0400: // normal
			f = a<<13 + (127-15)<<23
		case a < 0x0400: // subnormal or zero: a * 2^-24, exact
			f = math.Float32bits(float32(a) * 0x1p-24)
		case a == 0x7c00:
			f = 0x7f800000
		default: // NaN, made quiet
			f = 0x7fc00000 | a<<13
		}
		dst[i] = h&0x8000<<16 | f
	}
}

// bf16EncodeWords is float16.BF16FromF32 on the bit patterns of src.
func bf16EncodeWords(dst []uint16, src []uint32) {
	dst = dst[:len(src)]
	for i, b := range src {
		h := (b + 0x7fff + (b>>16)&1) >> 16
		if b&0x7fffffff > 0x7f800000 {
			h = float16.NaNBF16
		}
		dst[i] = uint16(h)
	}
}

// bf16DecodeWords is float16.BF16ToF32 giving the bit patterns.
func bf16DecodeWords(dst []uint32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = uint32(h) << 16
	}
}
