package codec

import (
	"fmt"
	"strconv"
	"strings"
)

// StageID is a stage's permanent wire ID. An ID never changes meaning; a
// retired stage keeps its ID reserved. Ranges: 1-31 lossless, 32-63 sparse,
// 64-95 lossy quantizers, 96-127 gradient compressors, 128+ experimental.
type StageID uint32

// Kind says how a stage relates its input segment to its outputs.
type Kind uint8

const (
	// Filter maps one segment to one segment of the same name (delta,
	// bytedelta, a quantizer that only changes the element type).
	Filter Kind = iota + 1
	// Split maps one segment to several named segments (shuffle into byte
	// planes, TopK into idx and val).
	Split
	// Coder is an entropy coder or store (zstd, s2, xz, huff0, raw). It ends
	// the segment's pipeline: later steps do not touch a coded segment. When
	// a coder's output is not smaller than its input, the segment is stored
	// as it was and the frame records no step for it.
	Coder
)

func (k Kind) String() string {
	switch k {
	case Filter:
		return "filter"
	case Split:
		return "split"
	case Coder:
		return "coder"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Granularity says where a tensor may be cut into chunks for a stage.
type Granularity uint8

const (
	// Elementwise stages accept any chunking on element boundaries; the
	// recipe may change at any chunk.
	Elementwise Granularity = iota
	// Block stages need chunk edges on multiples of Stage.Block elements.
	Block
	// RangePartitionable stages compute global statistics once (threshold,
	// scale, seed: carried in their parameters) and then encode each element
	// range on its own with chunk-relative indices.
	RangePartitionable
	// WholeTensor stages see the whole tensor in one frame.
	WholeTensor
)

func (g Granularity) String() string {
	return [...]string{"elementwise", "block", "range", "whole"}[min(int(g), 3)]
}

// SegInfo describes a segment without its bytes.
type SegInfo struct {
	Name string // slot name: "data", "plane0", "val", "val.plane1", ...
	Elem DType  // element type of the bytes
	Len  int    // length in bytes; -1 when only known after encoding
}

// OutputName names output part of a split of segment in, as recipes
// address it: part itself on the root segment "data" ("idx", "plane3"),
// in.part on any other ("val.idx", "val.plane3").
func OutputName(in, part string) string {
	if in == "data" {
		return part
	}
	return in + "." + part
}

// Segment is a named run of bytes with an element type.
type Segment struct {
	SegInfo
	Data []byte
}

// Stage describes a registered stage: its permanent ID, its names, what it
// reads and writes, and how to build configured instances (Ops) from recipe
// text or from wire parameters.
type Stage struct {
	ID          StageID
	Name        string // canonical recipe name
	Kind        Kind
	Granularity Granularity
	Block       int  // elements per block, for Granularity == Block
	Lossy       bool // true when Decode(Encode(x)) may differ from x
	// Bits is the width of a quantizer's codes in bits per value (16 for
	// fp16 and bf16, 8 for int8 and qsgd, 4 for nf4 and fp4, 2 for
	// ternary, 1 for sign), as profiles list them (a rule's bits); 0 for
	// stages that do not quantize values, the sparsifying ones included.
	Bits int
	// SlowDecode marks a stage whose decoder works at some MB/s whatever
	// its input's size (a context model, such as floatcm): a few bytes
	// may claim megabytes of output, each costing the decoder about as
	// much time. Limits.MaxSlowDecoded bounds the bytes a frame decodes
	// through such stages.
	SlowDecode bool
	// Reads and Writes document the slots (for docs and `codec-bench
	// stages`): for example "any byte segment" and "plane0..plane{w-1}".
	Reads, Writes string
	Doc           string

	// New builds an Op from recipe arguments (nil for none). Aliases such
	// as shuffle4 reach it with their implied arguments.
	New func(args []Arg) (Op, error)
	// Load builds an Op from the parameter bytes stored in a frame. It must
	// reject malformed parameters with ErrCorrupt, never panic.
	Load func(params []byte) (Op, error)
}

// Bits returns the narrowest quantizer width among r's ops (Stage.Bits):
// 16, 8, 4, 2 or 1 bits per value, or 0 when r has no quantizer (a
// lossless recipe, or one whose only lossy stages sparsify) or is nil.
func (r *Recipe) Bits() int {
	if r == nil {
		return 0
	}
	bits := 0
	for _, st := range r.Steps {
		for _, op := range st.Ops {
			if w := op.Stage().Bits; w > 0 && (bits == 0 || w < bits) {
				bits = w
			}
		}
	}
	return bits
}

// Ctx carries what a stage may need beyond its input: the tensor the
// segment belongs to (nil for byte streams) and a scratch arena.
type Ctx struct {
	Tensor *Tensor // metadata of the tensor being coded; Data not to be used
	Arena  *Arena
	Limits *Limits // decoding only
	// Finite asks an AddDecoder to refuse (CheckFinite) what would add a
	// NaN or an infinity, before it changes the accumulator
	// (WithFiniteAdd).
	Finite bool
}

// Op is a configured stage: a stage plus its parameters. Ops are immutable
// and safe for concurrent use; heavy state (encoder contexts) is pooled
// inside the implementation.
type Op interface {
	Stage() *Stage
	// String is the recipe text of the op, such as "zstd(3)" or "shuffle4".
	// Parsing it gives back an equal op.
	String() string
	// AppendParams appends the op's wire parameters to dst.
	AppendParams(dst []byte) []byte
	// Outputs describes the segments Encode makes from in (Len -1 where the
	// size depends on the data). It fails when the op cannot apply to in.
	Outputs(in SegInfo) ([]SegInfo, error)
	// Encode transforms in. Output bytes may live in ctx.Arena or alias in.
	Encode(ctx *Ctx, in Segment) ([]Segment, error)
	// Decode inverts Encode: parts are Encode's outputs (already decoded,
	// read-only), in describes the original input with its exact length.
	// Decode appends exactly in.Len bytes to dst, which has room for them
	// (cap(dst)-len(dst) >= in.Len), and returns the result. It reports bad input with ErrCorrupt
	// and never writes more than in.Len bytes.
	Decode(ctx *Ctx, dst []byte, parts []Segment, in SegInfo) ([]byte, error)
}

// Binder is implemented by ops whose parameters depend on the segment they
// meet (shuffle without a width takes the element size). The encoder calls
// Bind before Outputs and records the bound op's parameters, so frames
// always carry resolved parameters.
type Binder interface {
	Bind(in SegInfo) (Op, error)
}

// BlockSizer is implemented by block-granular ops whose block size is a
// parameter (int8(64), nf4(4096)): BlockElems is the block in elements,
// and it overrides Stage.Block for chunking.
type BlockSizer interface {
	BlockElems() int
}

// Seeder is implemented by ops that draw random numbers (QSGD's dither):
// WithSeed returns the op with its seed replaced. Gradient compressors give
// every step a seed of its own, so that dithering errors do not repeat.
type Seeder interface {
	WithSeed(seed uint64) Op
}

// Arg is one recipe argument: a bare value ("3") or key=value ("level=3").
type Arg struct {
	Key, Value string
}

func (a Arg) String() string {
	if a.Key == "" {
		return a.Value
	}
	return a.Key + "=" + a.Value
}

// IntArg finds the argument named key, or the positional argument at pos
// (pos < 0: none), and parses it as an integer in [lo, hi]. It returns def
// when the argument is absent.
// Giving the argument twice (by position and by name, or by name twice) is
// an error.
func IntArg(stage string, args []Arg, pos int, key string, def, lo, hi int) (int, error) {
	v, found := def, false
	for i, a := range args {
		if a.Key == key || (a.Key == "" && i == pos) {
			if found {
				return 0, fmt.Errorf("%w: %s: %s given twice", ErrRecipe, stage, key)
			}
			n, err := strconv.Atoi(a.Value)
			if err != nil || n < lo || n > hi {
				return 0, fmt.Errorf("%w: %s: %s=%q: want an integer in [%d, %d]", ErrRecipe, stage, key, a.Value, lo, hi)
			}
			v, found = n, true
		}
	}
	return v, nil
}

// CheckArgs rejects arguments other than the positional ones (at most
// npos) and the named keys.
func CheckArgs(stage string, args []Arg, npos int, keys ...string) error {
	for i, a := range args {
		if a.Key == "" {
			if i >= npos {
				return fmt.Errorf("%w: %s takes at most %d positional argument(s), got %q", ErrRecipe, stage, npos, a.Value)
			}
			continue
		}
		ok := false
		for _, k := range keys {
			ok = ok || a.Key == k
		}
		if !ok {
			return fmt.Errorf("%w: %s has no parameter %q (known: %s)", ErrRecipe, stage, a.Key, strings.Join(keys, ", "))
		}
	}
	return nil
}
