package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Test stages registered by this package's tests only, under experimental
// IDs. xorStage is a filter that XORs every byte with a key; halveStage
// splits a segment into two halves (lo, hi); shrinkStage is a coder that
// drops a fixed prefix of zero bytes and is lossy when told so.
const (
	xorID    StageID = 200
	halveID  StageID = 201
	shrinkID StageID = 202
	lossyID  StageID = 203
	blockID  StageID = 204
	failID   StageID = 205
	slowID   StageID = 206
	addID    StageID = 207
)

func init() {
	Register(&Stage{ID: xorID, Name: "xor", Kind: Filter,
		New: func(args []Arg) (Op, error) {
			if err := CheckArgs("xor", args, 1, "key"); err != nil {
				return nil, err
			}
			k, err := IntArg("xor", args, 0, "key", 0x5a, 0, 255)
			return xorOp(k), err
		},
		Load: func(p []byte) (Op, error) {
			if len(p) != 1 {
				return nil, fmt.Errorf("%w: xor params", ErrCorrupt)
			}
			return xorOp(p[0]), nil
		}})
	Register(&Stage{ID: halveID, Name: "halve", Kind: Split,
		New:  func(args []Arg) (Op, error) { return halveOp{}, CheckArgs("halve", args, 0) },
		Load: func(p []byte) (Op, error) { return halveOp{}, nil }})
	Register(&Stage{ID: shrinkID, Name: "zeros", Kind: Coder,
		New:  func(args []Arg) (Op, error) { return zerosOp{}, CheckArgs("zeros", args, 0) },
		Load: func(p []byte) (Op, error) { return zerosOp{}, nil }})
	Register(&Stage{ID: lossyID, Name: "lossy", Kind: Filter, Lossy: true,
		New:  func(args []Arg) (Op, error) { return lossyOp{}, nil },
		Load: func(p []byte) (Op, error) { return lossyOp{}, nil }})
	Register(&Stage{ID: failID, Name: "fail", Kind: Filter,
		New:  func(args []Arg) (Op, error) { return failOp{}, nil },
		Load: func(p []byte) (Op, error) { return failOp{}, nil }})
	Register(&Stage{ID: slowID, Name: "slowxor", Kind: Filter, SlowDecode: true,
		New:  func(args []Arg) (Op, error) { return slowXorOp{}, CheckArgs("slowxor", args, 0) },
		Load: func(p []byte) (Op, error) { return slowXorOp{}, nil }})
	Register(&Stage{ID: addID, Name: "halveadd", Kind: Split,
		New:  func(args []Arg) (Op, error) { return halveAddOp{}, CheckArgs("halveadd", args, 0) },
		Load: func(p []byte) (Op, error) { return halveAddOp{}, nil }})
	Register(&Stage{ID: blockID, Name: "blocky", Kind: Filter, Granularity: Block, Block: 3,
		New:  func(args []Arg) (Op, error) { return blockyOp{}, nil },
		Load: func(p []byte) (Op, error) { return blockyOp{}, nil }})
}

type xorOp byte

func (o xorOp) Stage() *Stage                  { s, _ := Lookup(xorID); return s }
func (o xorOp) String() string                 { return fmt.Sprintf("xor(%d)", byte(o)) }
func (o xorOp) AppendParams(dst []byte) []byte { return append(dst, byte(o)) }
func (o xorOp) Outputs(in SegInfo) ([]SegInfo, error) {
	return []SegInfo{in}, nil
}
func (o xorOp) Encode(ctx *Ctx, in Segment) ([]Segment, error) {
	out := ctx.Arena.Alloc(len(in.Data))
	for i, c := range in.Data {
		out[i] = c ^ byte(o)
	}
	return []Segment{{in.SegInfo, out}}, nil
}
func (o xorOp) Decode(ctx *Ctx, dst []byte, parts []Segment, in SegInfo) ([]byte, error) {
	for _, c := range parts[0].Data {
		dst = append(dst, c^byte(o))
	}
	return dst, nil
}

// slowXorOp is xor(0x5a) under a stage that says it decodes at some MB/s
// (SlowDecode), for the limits on such bytes.
type slowXorOp struct{ xorOp }

func (slowXorOp) Stage() *Stage                  { s, _ := Lookup(slowID); return s }
func (slowXorOp) String() string                 { return "slowxor" }
func (slowXorOp) AppendParams(dst []byte) []byte { return dst }
func (o slowXorOp) Encode(ctx *Ctx, in Segment) ([]Segment, error) {
	return xorOp(0x5a).Encode(ctx, in)
}
func (o slowXorOp) Decode(ctx *Ctx, dst []byte, parts []Segment, in SegInfo) ([]byte, error) {
	return xorOp(0x5a).Decode(ctx, dst, parts, in)
}

type halveOp struct{}

func (halveOp) Stage() *Stage                  { s, _ := Lookup(halveID); return s }
func (halveOp) String() string                 { return "halve" }
func (halveOp) AppendParams(dst []byte) []byte { return dst }
func (halveOp) Outputs(in SegInfo) ([]SegInfo, error) {
	lo := in.Len / 2
	return []SegInfo{{in.Name + ".lo", Byte, lo}, {in.Name + ".hi", Byte, in.Len - lo}}, nil
}
func (halveOp) Encode(ctx *Ctx, in Segment) ([]Segment, error) {
	lo := len(in.Data) / 2
	return []Segment{{SegInfo{in.Name + ".lo", Byte, lo}, in.Data[:lo]}, {SegInfo{in.Name + ".hi", Byte, len(in.Data) - lo}, in.Data[lo:]}}, nil
}
func (halveOp) Decode(ctx *Ctx, dst []byte, parts []Segment, in SegInfo) ([]byte, error) {
	return append(append(dst, parts[0].Data...), parts[1].Data...), nil
}

// zerosOp codes a segment as uvarint-free "count of leading zeros" (1..255)
// followed by the rest.
type zerosOp struct{}

func (zerosOp) Stage() *Stage                  { s, _ := Lookup(shrinkID); return s }
func (zerosOp) String() string                 { return "zeros" }
func (zerosOp) AppendParams(dst []byte) []byte { return dst }
func (zerosOp) Outputs(in SegInfo) ([]SegInfo, error) {
	return []SegInfo{{in.Name, Byte, -1}}, nil
}
func (zerosOp) Encode(ctx *Ctx, in Segment) ([]Segment, error) {
	n := 0
	for n < len(in.Data) && n < 255 && in.Data[n] == 0 {
		n++
	}
	out := append([]byte{byte(n)}, in.Data[n:]...)
	return []Segment{{SegInfo{in.Name, Byte, len(out)}, out}}, nil
}
func (zerosOp) Decode(ctx *Ctx, dst []byte, parts []Segment, in SegInfo) ([]byte, error) {
	p := parts[0].Data
	if len(p) == 0 || int(p[0])+len(p)-1 != in.Len {
		return nil, fmt.Errorf("%w: zeros", ErrCorrupt)
	}
	for range int(p[0]) {
		dst = append(dst, 0)
	}
	return append(dst, p[1:]...), nil
}

type lossyOp struct{}

func (lossyOp) Stage() *Stage                         { s, _ := Lookup(lossyID); return s }
func (lossyOp) String() string                        { return "lossy" }
func (lossyOp) AppendParams(dst []byte) []byte        { return dst }
func (lossyOp) Outputs(in SegInfo) ([]SegInfo, error) { return []SegInfo{in}, nil }
func (lossyOp) Encode(ctx *Ctx, in Segment) ([]Segment, error) {
	return []Segment{in}, nil
}
func (lossyOp) Decode(ctx *Ctx, dst []byte, parts []Segment, in SegInfo) ([]byte, error) {
	return append(dst, parts[0].Data...), nil
}

type blockyOp struct{ lossyOp }

func (blockyOp) Stage() *Stage  { s, _ := Lookup(blockID); return s }
func (blockyOp) String() string { return "blocky" }

// failOp fails to encode.
type failOp struct{ lossyOp }

func (failOp) Stage() *Stage  { s, _ := Lookup(failID); return s }
func (failOp) String() string { return "fail" }
func (failOp) Encode(ctx *Ctx, in Segment) ([]Segment, error) {
	return nil, fmt.Errorf("fail stage: refusing %d bytes", len(in.Data))
}

// halveAddOp is halve with an AddDecoder that knows nothing of
// Ctx.Finite: it adds whatever the halves hold.
type halveAddOp struct{ halveOp }

func (halveAddOp) Stage() *Stage  { s, _ := Lookup(addID); return s }
func (halveAddOp) String() string { return "halveadd" }
func (halveAddOp) DecodeAdd(ctx *Ctx, acc []float32, alpha float32, parts []Segment, in SegInfo) error {
	b := append(append([]byte(nil), parts[0].Data...), parts[1].Data...)
	for i := range acc {
		acc[i] += alpha * math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}
