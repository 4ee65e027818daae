package sparse

import (
	"encoding/binary"
	"fmt"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/view"
)

// The coo stage and the index codecs as stages of their own.
//
//	coo      data -> idx (uint32 positions, increasing) + val (the non-zeros)
//	delta    uint32 segment -> uint32 differences of consecutive values
//	varint   uint32 segment -> LEB128 bytes
//	bitpack  uint32 segment -> blocks of 128 values at a fixed width each
//
// "coo | idx:delta,bitpack | val:shuffle | *:huff0" spells out with stages
// what "sparse(gaps)" does in one; TopK and the other gradient
// compressors code their own idx segments with delta, varint and bitpack.
// None of them takes parameters.

var cooStage = &codec.Stage{
	ID:     COOID,
	Name:   "coo",
	Kind:   codec.Split,
	Reads:  "a segment of 1, 2, 4 or 8-byte elements",
	Writes: "idx (uint32 positions of the non-zero elements, increasing) and val (those elements)",
	Doc:    "coordinate list: positions of the non-zero elements (bitwise test) and their values; code idx with delta and bitpack or varint",
	New:    noArgs("coo", cooOp{}),
	Load:   noParams("coo", cooOp{}),
}

var deltaStage = &codec.Stage{
	ID:     DeltaID,
	Name:   "delta",
	Kind:   codec.Filter,
	Reads:  "a uint32 segment (idx)",
	Writes: "the same segment: first value, then wrapping differences of consecutive values",
	Doc:    "delta coding of a uint32 segment: increasing positions become small gaps",
	New:    noArgs("delta", deltaOp{}),
	Load:   noParams("delta", deltaOp{}),
}

var varintStage = &codec.Stage{
	ID:     VarintID,
	Name:   "varint",
	Kind:   codec.Filter,
	Reads:  "a uint32 segment (idx)",
	Writes: "the same segment as LEB128 varint bytes",
	Doc:    "LEB128 varints of a uint32 segment (1 byte for values below 128)",
	New:    noArgs("varint", varintOp{}),
	Load:   noParams("varint", varintOp{}),
}

var bitpackStage = &codec.Stage{
	ID:     BitpackID,
	Name:   "bitpack",
	Kind:   codec.Filter,
	Reads:  "a uint32 segment (idx)",
	Writes: "the same segment as bitpack blocks (a width byte, then 128 values of that many bits)",
	Doc:    "bit packing of a uint32 segment in blocks of 128 values, each block at the width of its largest value",
	New:    noArgs("bitpack", bitpackOp{}),
	Load:   noParams("bitpack", bitpackOp{}),
}

func init() {
	codec.Register(cooStage)
	codec.Register(deltaStage)
	codec.Register(varintStage)
	codec.Register(bitpackStage)
}

func noArgs(name string, op codec.Op) func([]codec.Arg) (codec.Op, error) {
	return func(args []codec.Arg) (codec.Op, error) {
		if len(args) != 0 {
			return nil, fmt.Errorf("%w: %s takes no arguments", codec.ErrRecipe, name)
		}
		return op, nil
	}
}

func noParams(name string, op codec.Op) func([]byte) (codec.Op, error) {
	return func(p []byte) (codec.Op, error) {
		if len(p) != 0 {
			return nil, fmt.Errorf("%w: %s has no parameters, got %x", codec.ErrCorrupt, name, p)
		}
		return op, nil
	}
}

type cooOp struct{}

func (cooOp) Stage() *codec.Stage            { return cooStage }
func (cooOp) String() string                 { return "coo" }
func (cooOp) AppendParams(dst []byte) []byte { return dst }

func (cooOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if _, err := elemWidth(in); err != nil {
		return nil, err
	}
	return []codec.SegInfo{
		{Name: codec.OutputName(in.Name, "idx"), Elem: codec.U32, Len: -1},
		{Name: codec.OutputName(in.Name, "val"), Elem: in.Elem, Len: -1},
	}, nil
}

func (cooOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	w, err := elemWidth(in.SegInfo)
	if err != nil {
		return nil, err
	}
	n := in.Len / w
	pos, val := scratchU32(ctx, n), ctx.Arena.Alloc(in.Len)[:0]
	pos, val = gather(in.Data, w, pos, val)
	return []codec.Segment{
		{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "idx"), Elem: codec.U32}, Data: view.Of(pos)},
		{SegInfo: codec.SegInfo{Name: codec.OutputName(in.Name, "val"), Elem: in.Elem}, Data: val},
	}, nil
}

func (cooOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	w, err := elemWidth(in)
	if err != nil {
		return nil, fmt.Errorf("%w: coo: %v", codec.ErrCorrupt, err)
	}
	if len(parts) != 2 {
		return nil, fmt.Errorf("%w: coo: %d parts", codec.ErrCorrupt, len(parts))
	}
	idx, val := parts[0].Data, parts[1].Data
	n, nnz := in.Len/w, len(idx)/4
	if len(idx)%4 != 0 || len(val) != nnz*w {
		return nil, fmt.Errorf("%w: coo: %d index bytes and %d value bytes do not match %d-byte elements", codec.ErrCorrupt, len(idx), len(val), w)
	}
	pos := u32s(ctx, idx)
	for i, p := range pos {
		if int64(p) >= int64(n) || i > 0 && p <= pos[i-1] {
			return nil, fmt.Errorf("%w: coo: position %d (%d) is out of order or past %d elements", codec.ErrCorrupt, i, p, n)
		}
	}
	out := dst[len(dst) : len(dst)+in.Len]
	clear(out)
	scatter(out, w, pos, val)
	return dst[:len(dst)+in.Len], nil
}

// u32s views b (little-endian uint32s) as []uint32, copying it into
// aligned scratch when it is not 4-byte aligned.
func u32s(ctx *codec.Ctx, b []byte) []uint32 { return view.AsCopy[uint32](b, ctx.Arena.Alloc) }

// u32Filter checks that a filter's input is a uint32 segment.
func u32Filter(name string, in codec.SegInfo) error {
	if in.Elem != codec.U32 && in.Elem != codec.I32 {
		return fmt.Errorf("%s: segment %q holds %v; it takes uint32 or int32 (an idx segment)", name, in.Name, in.Elem)
	}
	if in.Len >= 0 && in.Len%4 != 0 {
		return fmt.Errorf("%s: segment %q of %d bytes is not whole uint32s", name, in.Name, in.Len)
	}
	return nil
}

type deltaOp struct{}

func (deltaOp) Stage() *codec.Stage            { return deltaStage }
func (deltaOp) String() string                 { return "delta" }
func (deltaOp) AppendParams(dst []byte) []byte { return dst }

func (deltaOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if err := u32Filter("delta", in); err != nil {
		return nil, err
	}
	return []codec.SegInfo{in}, nil
}

func (deltaOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	src := u32s(ctx, in.Data)
	d, _ := view.As[uint32](ctx.Arena.Alloc(len(in.Data)))
	prev := uint32(0)
	for i, x := range src {
		d[i] = x - prev
		prev = x
	}
	return []codec.Segment{{SegInfo: in.SegInfo, Data: view.Of(d)}}, nil
}

func (deltaOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	if len(parts) != 1 || len(parts[0].Data) != in.Len || in.Len%4 != 0 {
		return nil, fmt.Errorf("%w: delta: segment does not hold %d bytes of uint32", codec.ErrCorrupt, in.Len)
	}
	d := u32s(ctx, parts[0].Data)
	acc := uint32(0)
	for _, x := range d {
		acc += x
		dst = binary.LittleEndian.AppendUint32(dst, acc)
	}
	return dst, nil
}

type varintOp struct{}

func (varintOp) Stage() *codec.Stage            { return varintStage }
func (varintOp) String() string                 { return "varint" }
func (varintOp) AppendParams(dst []byte) []byte { return dst }

func (varintOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if err := u32Filter("varint", in); err != nil {
		return nil, err
	}
	return []codec.SegInfo{{Name: in.Name, Elem: codec.Byte, Len: -1}}, nil
}

func (varintOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	src := u32s(ctx, in.Data)
	out := AppendVarints(ctx.Arena.Alloc(5 * len(src))[:0], src)
	return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte}, Data: out}}, nil
}

func (varintOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	return decodeU32s(ctx, dst, parts, in, "varint", DecodeVarints)
}

type bitpackOp struct{}

func (bitpackOp) Stage() *codec.Stage            { return bitpackStage }
func (bitpackOp) String() string                 { return "bitpack" }
func (bitpackOp) AppendParams(dst []byte) []byte { return dst }

func (bitpackOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if err := u32Filter("bitpack", in); err != nil {
		return nil, err
	}
	return []codec.SegInfo{{Name: in.Name, Elem: codec.Byte, Len: -1}}, nil
}

func (bitpackOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	src := u32s(ctx, in.Data)
	out := AppendBitpack(ctx.Arena.Alloc(BitpackLen(src))[:0], src)
	return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte}, Data: out}}, nil
}

func (bitpackOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	return decodeU32s(ctx, dst, parts, in, "bitpack", DecodeBitpack)
}

// decodeU32s decodes in.Len/4 uint32s with dec from the one part, which
// must be used up, and appends them to dst.
func decodeU32s(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo, name string, dec func([]uint32, []byte) (int, error)) ([]byte, error) {
	if len(parts) != 1 || in.Len%4 != 0 {
		return nil, fmt.Errorf("%w: %s: %d bytes is not whole uint32s", codec.ErrCorrupt, name, in.Len)
	}
	v, _ := view.As[uint32](ctx.Arena.Alloc(in.Len))
	used, err := dec(v, parts[0].Data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if used != len(parts[0].Data) {
		return nil, fmt.Errorf("%w: %s: %d bytes left after %d values", codec.ErrCorrupt, name, len(parts[0].Data)-used, len(v))
	}
	for _, x := range v {
		dst = binary.LittleEndian.AppendUint32(dst, x)
	}
	return dst, nil
}
