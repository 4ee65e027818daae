package lossless

import (
	"fmt"

	"github.com/klauspost/compress/s2"

	"github.com/tensorpress/tensorpress/codec"
)

// The s2 stage codes a segment as one S2 block (klauspost/compress/s2, a
// Snappy extension): LZ77 without entropy coding, the fastest coder here,
// for data with repeats (sparse indices, integer ids, bitmaps) rather
// than for float mantissas.
//
// Wire parameters: 1 byte, the encoder mode: 0 s2.Encode, 1
// s2.EncodeBetter (smaller, about half as fast). Decoding is the same for
// both. Recipe text: "s2" or "s2(better)" (also "s2(default)",
// "s2(mode=better)").
//
// Segment layout: one S2 block, which starts with the uvarint of its
// decoded length (s2.Decode's format, not the framed stream format).
// Decode refuses a block whose stated length is not the segment's length
// before decoding anything.
var s2Stage = &codec.Stage{
	ID:     S2ID,
	Name:   "s2",
	Kind:   codec.Coder,
	Reads:  "any byte segment",
	Writes: "one S2 block",
	Doc:    "S2 block (klauspost s2, LZ77 at GB/s); s2(better) for EncodeBetter",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("s2", args, 1, "mode"); err != nil {
			return nil, err
		}
		if len(args) > 1 {
			return nil, fmt.Errorf("%w: s2 takes one argument, the mode", codec.ErrRecipe)
		}
		for i, a := range args {
			if a.Key == "mode" || (a.Key == "" && i == 0) {
				switch a.Value {
				case "default":
					return s2Op{}, nil
				case "better":
					return s2Op{better: true}, nil
				}
				return nil, fmt.Errorf("%w: s2: mode %q: want default or better", codec.ErrRecipe, a.Value)
			}
		}
		return s2Op{}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 1 || p[0] > 1 {
			return nil, fmt.Errorf("%w: s2 params %x: want one byte, 0 or 1", codec.ErrCorrupt, p)
		}
		return s2Op{better: p[0] == 1}, nil
	},
}

func init() { codec.Register(s2Stage) }

type s2Op struct{ better bool }

var _ codec.Op = s2Op{}

func (s2Op) Stage() *codec.Stage { return s2Stage }

func (o s2Op) String() string {
	if o.better {
		return "s2(better)"
	}
	return "s2"
}

func (o s2Op) AppendParams(dst []byte) []byte {
	if o.better {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func (s2Op) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	return []codec.SegInfo{{Name: in.Name, Elem: codec.Byte, Len: -1}}, nil
}

// Encode codes in into ctx.Arena. Inputs too large for one S2 block (4 GiB)
// come back unchanged and are stored raw.
func (o s2Op) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	bound := s2.MaxEncodedLen(len(in.Data))
	if bound < 0 {
		return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte, Len: len(in.Data)}, Data: in.Data}}, nil
	}
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	dst := a.Alloc(bound)
	var out []byte
	if o.better {
		out = s2.EncodeBetter(dst, in.Data)
	} else {
		out = s2.Encode(dst, in.Data)
	}
	return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte, Len: len(out)}, Data: out}}, nil
}

// Decode checks the block's stated length against in.Len, then decodes
// straight into dst.
func (s2Op) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	if len(parts) != 1 || in.Len < 0 {
		return nil, fmt.Errorf("%w: s2: want one segment and a length", codec.ErrCorrupt)
	}
	src := parts[0].Data
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, fmt.Errorf("%w: s2: %v", codec.ErrCorrupt, err)
	}
	if n != in.Len {
		return nil, fmt.Errorf("%w: s2 block of %d bytes, want %d", codec.ErrCorrupt, n, in.Len)
	}
	if cap(dst)-len(dst) < n {
		return nil, fmt.Errorf("codec: s2: destination has room for %d bytes, want %d", cap(dst)-len(dst), n)
	}
	start := len(dst)
	out, err := s2.Decode(dst[start:start+n:start+n], src)
	if err != nil {
		return nil, fmt.Errorf("%w: s2: %v", codec.ErrCorrupt, err)
	}
	if len(out) != n {
		return nil, fmt.Errorf("%w: s2 decoded %d bytes, want %d", codec.ErrCorrupt, len(out), n)
	}
	return dst[:start+n], nil
}
