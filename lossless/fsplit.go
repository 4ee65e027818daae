package lossless

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tensorpress/tensorpress/codec"
)

// The fsplit stage splits floats into their fields, so that the exponent,
// the only part of a weight with much to gain from an entropy coder, gets
// a segment of its own (DFloat11's and ZipNN's observation):
//
//	fsplit   data -> exp (one byte per element: the biased exponent field)
//	                 sm  (sign and mantissa per element: float32 3 bytes,
//	                      s<<23 | m, little-endian; bfloat16 1 byte, s<<7 | m;
//	                      float16 2 bytes, s<<10 | m, little-endian)
//
// It takes float32, bfloat16 and float16 segments. Every bit pattern
// splits and joins exactly (NaN payloads, -0, subnormals: the fields are
// only bits). Decoding refuses fields out of range (a float16 exponent
// of 32 or more, sign and mantissa of 2^11 or more) and lengths that are
// not n and n times the sm size. The outputs are stored in that order,
// exp then sm. Recipe: "fsplit"; e.g. for bfloat16 weights
// "fsplit | exp:huff0b(14)" (sm, near random, stays as it is).
var fsplitStage = &codec.Stage{
	ID:     FsplitID,
	Name:   "fsplit",
	Kind:   codec.Split,
	Reads:  "a segment of float32, bfloat16 or float16 elements",
	Writes: "exp (the exponent field, a byte each) and sm (sign and mantissa: 3, 1 or 2 bytes each)",
	Doc:    "float fields apart: exponents (code them with huff0b) and sign+mantissa (near random: store)",
	New: func(args []codec.Arg) (codec.Op, error) {
		if len(args) != 0 {
			return nil, fmt.Errorf("%w: fsplit takes no arguments", codec.ErrRecipe)
		}
		return fsplitOp{}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 0 {
			return nil, fmt.Errorf("%w: fsplit params %x: want none", codec.ErrCorrupt, p)
		}
		return fsplitOp{}, nil
	},
}

func init() { codec.Register(fsplitStage) }

type fsplitOp struct{}

var _ codec.Op = fsplitOp{}

func (fsplitOp) Stage() *codec.Stage            { return fsplitStage }
func (fsplitOp) String() string                 { return "fsplit" }
func (fsplitOp) AppendParams(dst []byte) []byte { return dst }

// floatFields is the layout of a float type that fsplit and floatcm take:
// a sign bit, eb exponent bits, mb mantissa bits.
type floatFields struct {
	size   int  // bytes per element
	eb, mb uint // exponent and mantissa bits
}

func floatFieldsOf(dt codec.DType) (floatFields, bool) {
	switch dt {
	case codec.F32:
		return floatFields{4, 8, 23}, true
	case codec.BF16:
		return floatFields{2, 8, 7}, true
	case codec.F16:
		return floatFields{2, 5, 10}, true
	}
	return floatFields{}, false
}

// fsplitSM is the bytes of sign and mantissa per element of dt (3, 1 and
// 2), 0 when fsplit does not take dt.
func fsplitSM(dt codec.DType) int {
	f, ok := floatFieldsOf(dt)
	if !ok {
		return 0
	}
	return int(f.mb+1+7) / 8
}

func (fsplitOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	smb := fsplitSM(in.Elem)
	if smb == 0 {
		return nil, fmt.Errorf("fsplit: segment %q holds %v; it takes float32, bfloat16 or float16", in.Name, in.Elem)
	}
	n := -1
	if in.Len >= 0 {
		if in.Len%in.Elem.Size() != 0 {
			return nil, fmt.Errorf("fsplit: segment %q of %d bytes is not whole %v elements", in.Name, in.Len, in.Elem)
		}
		n = in.Len / in.Elem.Size()
	}
	sm := -1
	if n >= 0 {
		sm = n * smb
	}
	return []codec.SegInfo{
		{Name: codec.OutputName(in.Name, "exp"), Elem: codec.Byte, Len: n},
		{Name: codec.OutputName(in.Name, "sm"), Elem: codec.Byte, Len: sm},
	}, nil
}

func (o fsplitOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	outs, err := o.Outputs(codec.SegInfo{Name: in.Name, Elem: in.Elem, Len: len(in.Data)})
	if err != nil {
		return nil, err
	}
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	src := in.Data
	n := outs[0].Len
	exp, sm := a.Alloc(n), a.Alloc(outs[1].Len)
	switch in.Elem {
	case codec.F32:
		for i := range n {
			v := binary.LittleEndian.Uint32(src[4*i:])
			exp[i] = byte(v >> 23)
			s := v>>8&0x800000 | v&0x7fffff
			sm[3*i], sm[3*i+1], sm[3*i+2] = byte(s), byte(s>>8), byte(s>>16)
		}
	case codec.BF16:
		fsplitBF16(exp, sm, src)
	case codec.F16:
		for i := range n {
			v := binary.LittleEndian.Uint16(src[2*i:])
			exp[i] = byte(v >> 10 & 0x1f)
			binary.LittleEndian.PutUint16(sm[2*i:], v>>5&0x400|v&0x3ff)
		}
	}
	outs[0].Len, outs[1].Len = len(exp), len(sm)
	return []codec.Segment{{SegInfo: outs[0], Data: exp}, {SegInfo: outs[1], Data: sm}}, nil
}

func (fsplitOp) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	smb := fsplitSM(in.Elem)
	size := in.Elem.Size()
	if len(parts) != 2 || smb == 0 || in.Len < 0 || in.Len%size != 0 {
		return nil, fmt.Errorf("%w: fsplit: want 2 segments and whole %v elements", codec.ErrCorrupt, in.Elem)
	}
	n := in.Len / size
	exp, sm := parts[0].Data, parts[1].Data
	if len(exp) != n || len(sm) != n*smb {
		return nil, fmt.Errorf("%w: fsplit: %d exponents and %d bytes of sign and mantissa for %d elements", codec.ErrCorrupt, len(exp), len(sm), n)
	}
	start := len(dst)
	dst = slices.Grow(dst, in.Len)[:start+in.Len]
	out := dst[start:]
	switch in.Elem {
	case codec.F32:
		for i := range n {
			s := uint32(sm[3*i]) | uint32(sm[3*i+1])<<8 | uint32(sm[3*i+2])<<16
			binary.LittleEndian.PutUint32(out[4*i:], s<<8&0x80000000|uint32(exp[i])<<23|s&0x7fffff)
		}
	case codec.BF16:
		fjoinBF16(out, exp, sm)
	case codec.F16:
		for i := range n {
			s := binary.LittleEndian.Uint16(sm[2*i:])
			if exp[i] > 0x1f || s > 0x7ff {
				return nil, fmt.Errorf("%w: fsplit: float16 element %d: exponent %d, sign and mantissa %#x", codec.ErrCorrupt, i, exp[i], s)
			}
			binary.LittleEndian.PutUint16(out[2*i:], s<<5&0x8000|uint16(exp[i])<<10|s&0x3ff)
		}
	}
	return dst, nil
}

// bfloat16 in blocks of fsplitBlock elements: shuffle2 (AVX2 where the
// CPU has it) cuts a block into its low and high byte planes, and byte-lane
// SWAR over 8 bytes a uint64 moves the exponent's low bit between them:
// exp = hi<<1 | lo>>7, sm = hi&0x80 | lo&0x7f; joining runs the same
// backwards, then unshuffle2.
const fsplitBlock = 8 << 10

const (
	bytesTop  = 0x8080808080808080
	bytesLow7 = 0x7f7f7f7f7f7f7f7f
	bytesLow1 = 0x0101010101010101
	bytesHi7  = 0xfefefefefefefefe
)

// fsplitBF16 splits the bfloat16 values of src into exp and sm: the AVX2
// kernel where there is one, fsplitBF16Go for what it leaves.
func fsplitBF16(exp, sm, src []byte) {
	k := fsplitBF16Asm(exp, sm, src)
	fsplitBF16Go(exp[k:], sm[k:], src[2*k:])
}

func fsplitBF16Go(exp, sm, src []byte) {
	var lo, hi [fsplitBlock]byte
	for base := 0; base < len(exp); base += fsplitBlock {
		m := min(fsplitBlock, len(exp)-base)
		shuffle([][]byte{lo[:m], hi[:m]}, src[2*base:2*(base+m)])
		e, s := exp[base:base+m], sm[base:base+m]
		i := 0
		for ; i+8 <= m; i += 8 {
			l, h := binary.LittleEndian.Uint64(lo[i:]), binary.LittleEndian.Uint64(hi[i:])
			binary.LittleEndian.PutUint64(e[i:], h<<1&bytesHi7|l>>7&bytesLow1)
			binary.LittleEndian.PutUint64(s[i:], h&bytesTop|l&bytesLow7)
		}
		for ; i < m; i++ {
			e[i] = hi[i]<<1 | lo[i]>>7
			s[i] = hi[i]&0x80 | lo[i]&0x7f
		}
	}
}

// fjoinBF16 is fsplitBF16 undone.
func fjoinBF16(out, exp, sm []byte) {
	k := fjoinBF16Asm(out, exp, sm)
	fjoinBF16Go(out[2*k:], exp[k:], sm[k:])
}

func fjoinBF16Go(out, exp, sm []byte) {
	var lo, hi [fsplitBlock]byte
	for base := 0; base < len(exp); base += fsplitBlock {
		m := min(fsplitBlock, len(exp)-base)
		e, s := exp[base:base+m], sm[base:base+m]
		i := 0
		for ; i+8 <= m; i += 8 {
			x, y := binary.LittleEndian.Uint64(e[i:]), binary.LittleEndian.Uint64(s[i:])
			binary.LittleEndian.PutUint64(lo[i:], x<<7&bytesTop|y&bytesLow7)
			binary.LittleEndian.PutUint64(hi[i:], y&bytesTop|x>>1&bytesLow7)
		}
		for ; i < m; i++ {
			lo[i] = e[i]<<7 | s[i]&0x7f
			hi[i] = s[i]&0x80 | e[i]>>1
		}
		unshuffle(out[2*base:2*(base+m)], [][]byte{lo[:m], hi[:m]})
	}
}
