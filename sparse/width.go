package sparse

import (
	"fmt"
	"strconv"

	"github.com/tensorpress/tensorpress/codec"
)

// The width stage reads a byte segment as elements of w bytes (2, 4 or
// 8), so that the stages after it (sparse, coo) take an element, not a
// byte, as their unit: on a byte stream of float32 values that are mostly
// zero, a non-zero float is one position and one value, not up to four
// positions of one byte each.
//
//	width(w)   data -> data.w    (the elements, uint16/uint32/uint64)
//	                   data.rest (u8 phase p, then the p bytes before the
//	                              first element, then the bytes after the last)
//
// A byte stream puts its elements where it likes (a protobuf field's tag
// and length come first), so the encoder finds their phase: where runs of
// non-zero bytes start most often modulo w (an element's first byte), 0
// where there are none. The elements are the (len-p)/w whole ones from p;
// the bytes are unchanged, only cut and typed. Decoding refuses a phase of
// w or more, or parts that do not add up to the segment's length.
var widthStage = &codec.Stage{
	ID:     WidthID,
	Name:   "width",
	Kind:   codec.Split,
	Reads:  "a byte segment",
	Writes: "w (its whole w-byte elements from the phase found) and rest (the phase, the bytes before and after them)",
	Doc:    "reads a byte segment as elements of 2, 4 or 8 bytes at the phase where they start (for sparse on byte streams of floats)",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("width", args, 1, "w"); err != nil {
			return nil, err
		}
		w, err := codec.IntArg("width", args, 0, "w", 4, 2, 8)
		if err != nil {
			return nil, err
		}
		return newWidth(w, codec.ErrRecipe)
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 1 {
			return nil, fmt.Errorf("%w: width params %x: want one byte", codec.ErrCorrupt, p)
		}
		return newWidth(int(p[0]), codec.ErrCorrupt)
	},
}

func init() { codec.Register(widthStage) }

func newWidth(w int, kind error) (codec.Op, error) {
	switch w {
	case 2:
		return widthOp{w: 2, elem: codec.U16}, nil
	case 4:
		return widthOp{w: 4, elem: codec.U32}, nil
	case 8:
		return widthOp{w: 8, elem: codec.U64}, nil
	}
	return nil, fmt.Errorf("%w: width %d: want 2, 4 or 8", kind, w)
}

type widthOp struct {
	w    int
	elem codec.DType
}

var _ codec.Op = widthOp{}

func (o widthOp) Stage() *codec.Stage            { return widthStage }
func (o widthOp) String() string                 { return "width(" + strconv.Itoa(o.w) + ")" }
func (o widthOp) AppendParams(dst []byte) []byte { return append(dst, byte(o.w)) }

func (o widthOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if in.Elem.Size() != 1 {
		return nil, fmt.Errorf("%s: segment %q holds %v; it takes bytes", o, in.Name, in.Elem)
	}
	return []codec.SegInfo{
		{Name: codec.OutputName(in.Name, "w"), Elem: o.elem, Len: -1},
		{Name: codec.OutputName(in.Name, "rest"), Elem: codec.Byte, Len: -1},
	}, nil
}

// runStarts counts the runs of non-zero bytes in b by where they start
// modulo 8. It reads b once, eight zero bytes a step.
func runStarts(b []byte) (starts [8]int) {
	prev := byte(0)
	for i := 0; i < len(b); {
		if prev == 0 && i+8 <= len(b) && b[i]|b[i+1]|b[i+2]|b[i+3]|b[i+4]|b[i+5]|b[i+6]|b[i+7] == 0 {
			i += 8
			continue
		}
		if b[i] != 0 && prev == 0 {
			starts[i%8]++
		}
		prev = b[i]
		i++
	}
	return starts
}

// phaseOf returns the residue modulo w (a power of two, at most 8) at
// which most runs start, the lowest on a tie, and how many start there.
func phaseOf(starts *[8]int, w int) (p, n int) {
	var by [8]int
	for r, c := range starts {
		by[r%w] += c
	}
	for r := 0; r < w; r++ {
		if by[r] > by[p] {
			p = r
		}
	}
	return p, by[p]
}

// Phase returns where w-byte elements start in b: the residue modulo w
// at which runs of non-zero bytes start most often (0 when b has none).
func Phase(b []byte, w int) int {
	starts := runStarts(b)
	p, _ := phaseOf(&starts, w)
	return p
}

// ElementWidth returns the element width of mostly-zero bytes b, read
// from where their runs of non-zero bytes start (an element's first
// byte): the largest of 8, 4 and 2 on one residue of which at least 80%
// of the runs start, once there are 32 runs or more; else 1. It reads the
// whole of b, as a sample of a sparse frame holds too few runs to tell.
func ElementWidth(b []byte) int {
	starts := runStarts(b)
	total := 0
	for _, c := range starts {
		total += c
	}
	if total < 32 {
		return 1
	}
	for _, w := range []int{8, 4, 2} {
		if _, n := phaseOf(&starts, w); 10*n >= 8*total {
			return w
		}
	}
	return 1
}

func (o widthOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	b := in.Data
	p := min(Phase(b, o.w), len(b))
	n := (len(b) - p) / o.w * o.w
	rest := ctx.Arena.Alloc(1 + len(b) - n)[:0]
	rest = append(rest, byte(p))
	rest = append(rest, b[:p]...)
	rest = append(rest, b[p+n:]...)
	return []codec.Segment{
		{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "w"), Elem: o.elem, Len: n}, Data: b[p : p+n]},
		{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "rest"), Elem: codec.Byte, Len: len(rest)}, Data: rest},
	}, nil
}

func (o widthOp) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	if len(parts) != 2 || in.Len < 0 {
		return nil, fmt.Errorf("%w: %s: want 2 segments and a length, got %d and %d", codec.ErrCorrupt, o, len(parts), in.Len)
	}
	w, rest := parts[0].Data, parts[1].Data
	if len(rest) == 0 || int(rest[0]) >= o.w || len(w)%o.w != 0 {
		return nil, fmt.Errorf("%w: %s: bad phase or a part of an element", codec.ErrCorrupt, o)
	}
	p := int(rest[0])
	rest = rest[1:]
	if len(rest) < p || len(rest)-p >= o.w || len(w)+len(rest) != in.Len {
		return nil, fmt.Errorf("%w: %s: %d bytes of elements and %d others for a segment of %d", codec.ErrCorrupt, o, len(w), len(rest), in.Len)
	}
	dst = append(dst, rest[:p]...)
	dst = append(dst, w...)
	return append(dst, rest[p:]...), nil
}
