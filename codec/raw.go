package codec

import "fmt"

// The raw stage stores a segment as it is and ends its pipeline. It is
// built into codec because it is what every frame falls back to; the
// writer never records it in a frame (a stored segment is one no coder
// step produced), so ID 1 appears on the wire only in frames from other
// writers, where it decodes as a copy.
const RawID StageID = 1

var rawStage = &Stage{
	ID:     RawID,
	Name:   "raw",
	Kind:   Coder,
	Reads:  "any segment",
	Writes: "the same segment, unchanged",
	Doc:    "store the segment as it is",
	New: func(args []Arg) (Op, error) {
		if len(args) != 0 {
			return nil, fmt.Errorf("%w: raw takes no arguments", ErrRecipe)
		}
		return rawOp{}, nil
	},
	Load: func(p []byte) (Op, error) {
		if len(p) != 0 {
			return nil, fmt.Errorf("%w: raw has no parameters", ErrCorrupt)
		}
		return rawOp{}, nil
	},
}

func init() { Register(rawStage) }

type rawOp struct{}

func (rawOp) Stage() *Stage                  { return rawStage }
func (rawOp) String() string                 { return "raw" }
func (rawOp) AppendParams(dst []byte) []byte { return dst }
func (rawOp) Outputs(in SegInfo) ([]SegInfo, error) {
	return []SegInfo{{Name: in.Name, Elem: in.Elem, Len: in.Len}}, nil
}

// Encode returns the input; the encoder sees no gain and stores it as is.
func (rawOp) Encode(_ *Ctx, in Segment) ([]Segment, error) { return []Segment{in}, nil }

func (rawOp) Decode(_ *Ctx, dst []byte, parts []Segment, in SegInfo) ([]byte, error) {
	if len(parts) != 1 || len(parts[0].Data) != in.Len {
		return nil, fmt.Errorf("%w: raw segment does not hold %d bytes", ErrCorrupt, in.Len)
	}
	return append(dst, parts[0].Data...), nil
}
