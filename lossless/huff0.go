package lossless

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/klauspost/compress/huff0"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/entropy"
)

// The huff0 stage codes a segment with order-0 Huffman codes
// (klauspost/compress/huff0, the literal coder of zstd): no matches, no
// window, only a table per block. It is the coder for byte planes whose
// bytes are skewed but not repetitive, such as the sign/exponent plane of
// float weights after shuffle4 (2.71 bits per byte against an order-0
// entropy of 2.68 on N(0, 0.02) weights); here it codes such a plane at
// about 600 MB/s and decodes it at about 1 GB/s.
//
// Wire parameters: none. Recipe text: "huff0".
//
// Before coding, Encode estimates the order-0 entropy of a sample of the
// segment (huff0Estimate); when the estimated saving is under 1/32 of the
// input it returns the input unchanged, so the segment is stored raw
// without paying for a Huffman pass that would not pay off.
//
// Segment layout. The input is cut into blocks of huff0Block bytes (the
// last one shorter). huff0 blocks hold at most huff0.BlockSizeMax bytes
// (256 KiB - 1), so a 256 KiB plane of a 1 MiB chunk makes two blocks. The
// number of blocks follows from the segment's decoded length, which the
// frame gives the decoder, so it is not stored. Each block is
//
//	uvarint(len<<2 | kind) payload
//
//	kind 0  raw:    len 0; the block's bytes follow as they are
//	kind 1  rle:    len 0; one byte follows, repeated over the block
//	kind 2  table:  len bytes follow: a huff0 table, then a huff0 4X
//	                stream (huff0.Compress4X output)
//	kind 3  reuse:  len bytes follow: a huff0 4X stream coded with the
//	                table of the last kind-2 block of this segment
//
// and nothing follows the last block; a block header is a minimal uvarint.
// huff0b (below) is this layout with another block size.
//
// 4X streams rather than 1X: huff0 decodes the four interleaved streams
// of a 4X block about 2.5 times as fast here (about 1 GB/s against 0.4 on
// the exponent plane) and codes them as fast. 128 KiB blocks keep the table
// cost (30-60 bytes) under 0.05% of a coded block.
const (
	huff0Block = 128 << 10

	huff0Raw   = 0
	huff0RLE   = 1
	huff0Table = 2
	huff0Reuse = 3

	// huff0MinGain is the estimated saving, as a shift of the input size,
	// under which Encode does not try: 5 means 1/32, about 3%.
	huff0MinGain = 5
)

var huff0Stage = &codec.Stage{
	ID:     Huff0ID,
	Name:   "huff0",
	Kind:   codec.Coder,
	Reads:  "any byte segment (best: a skewed byte plane)",
	Writes: "huff0 blocks of 128 KiB (4X streams, raw and RLE blocks)",
	Doc:    "order-0 Huffman (klauspost huff0); skips segments whose sampled entropy promises under 3%",
	New: func(args []codec.Arg) (codec.Op, error) {
		if len(args) != 0 {
			return nil, fmt.Errorf("%w: huff0 takes no arguments", codec.ErrRecipe)
		}
		return huff0Op{}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 0 {
			return nil, fmt.Errorf("%w: huff0 params %x: want none", codec.ErrCorrupt, p)
		}
		return huff0Op{}, nil
	},
}

// huff0b is huff0 with blocks of 2^p bytes, p its parameter (12..17):
// the same block layout, each block with its own table or the one before.
// Small blocks follow a skewed segment whose histogram drifts, such as the
// exponents of a model's weights tensor by tensor (fsplit's exp): 16 KiB
// blocks code human-bf16's exponents in about 5% fewer bytes than 128 KiB
// ones, tables (30-60 bytes each) included.
const (
	Huff0bMinLog = 12
	Huff0bMaxLog = 17
)

var huff0bStage = &codec.Stage{
	ID:     Huff0bID,
	Name:   "huff0b",
	Kind:   codec.Coder,
	Reads:  "any byte segment (best: a skewed one whose histogram drifts)",
	Writes: "huff0 blocks of 2^p bytes (4X streams, raw and RLE blocks)",
	Doc:    "huff0 with blocks of 2^p bytes, p in 12..17 (huff0's are 2^17)",
	New:    blockLogNew("huff0b", Huff0bMinLog, Huff0bMaxLog, func(p uint8) codec.Op { return huff0Op{log2: p} }),
	Load:   blockLogLoad("huff0b", Huff0bMinLog, Huff0bMaxLog, func(p uint8) codec.Op { return huff0Op{log2: p} }),
}

// blockLogNew and blockLogLoad are New and Load of a coder whose one
// parameter is p, a block size's log2 in [lo, hi] (14 by default); mk
// makes the op.
func blockLogNew(name string, lo, hi int, mk func(p uint8) codec.Op) func([]codec.Arg) (codec.Op, error) {
	return func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs(name, args, 1, "p"); err != nil {
			return nil, err
		}
		p, err := codec.IntArg(name, args, 0, "p", 14, lo, hi)
		if err != nil {
			return nil, err
		}
		return mk(uint8(p)), nil
	}
}

func blockLogLoad(name string, lo, hi int, mk func(p uint8) codec.Op) func([]byte) (codec.Op, error) {
	return func(p []byte) (codec.Op, error) {
		if len(p) != 1 || int(p[0]) < lo || int(p[0]) > hi {
			return nil, fmt.Errorf("%w: %s params %x: want one byte, a block log2 in [%d, %d]", codec.ErrCorrupt, name, p, lo, hi)
		}
		return mk(p[0]), nil
	}
}

func init() {
	codec.Register(huff0Stage)
	codec.Register(huff0bStage)
}

// huff0Op is the huff0 stage (block 0: huff0Block bytes) or huff0b (block:
// 2^log2 bytes, its parameter).
type huff0Op struct{ log2 uint8 }

var _ codec.Op = huff0Op{}

func (o huff0Op) Stage() *codec.Stage {
	if o.log2 != 0 {
		return huff0bStage
	}
	return huff0Stage
}

func (o huff0Op) String() string {
	if o.log2 != 0 {
		return fmt.Sprintf("huff0b(%d)", o.log2)
	}
	return "huff0"
}

func (o huff0Op) AppendParams(dst []byte) []byte {
	if o.log2 != 0 {
		return append(dst, o.log2)
	}
	return dst
}

// block is the op's block size in bytes.
func (o huff0Op) block() int {
	if o.log2 != 0 {
		return 1 << o.log2
	}
	return huff0Block
}

func (huff0Op) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	return []codec.SegInfo{{Name: in.Name, Elem: codec.Byte, Len: -1}}, nil
}

// huff0Scratches pools huff0 state: tables, histograms and output buffers
// (a few KiB plus one block of output each).
var huff0Scratches = sync.Pool{New: func() any { return &huff0.Scratch{} }}

// huff0ReusePolicy is the table policy from the second block of a segment
// on: a block keeps the previous table (kind 3, no table bytes) when huff0
// estimates that it codes the block in no more bytes than a table built
// for the block would. Blocks drawn from one distribution mostly reuse;
// on float exponent planes a later block often holds a rare exponent the
// previous table has no code for and gets a table of its own (about 40
// bytes, 0.05% of a coded 128 KiB block).
const huff0ReusePolicy = huff0.ReusePolicyAllow

// Encode codes in into ctx.Arena. It returns in unchanged (so that the
// segment is stored raw) when the sampled entropy promises too little or
// the coded blocks come out no smaller than the input.
func (o huff0Op) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	src := in.Data
	n := len(src)
	unchanged := func() []codec.Segment {
		return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte, Len: n}, Data: src}}
	}
	if n == 0 || huff0Estimate(src) > n-n>>huff0MinGain {
		return unchanged(), nil
	}
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	out, err := huff0AppendBlocks(a.Alloc(n)[:0], src, o.block(), n)
	if err != nil {
		return nil, err
	}
	if out == nil {
		return unchanged(), nil // not smaller: store raw
	}
	return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte, Len: len(out)}, Data: out}}, nil
}

// huff0AppendBlocks appends src to dst in the block layout above, in
// blocks of bs bytes, the first with a table of its own. It gives up and
// returns nil when dst would grow by limit bytes or more.
func huff0AppendBlocks(dst, src []byte, bs, limit int) ([]byte, error) {
	s := huff0Scratches.Get().(*huff0.Scratch)
	defer huff0Scratches.Put(s)
	s.Reuse = huff0.ReusePolicyNone // forget tables from earlier segments
	start := len(dst)
	for off := 0; off < len(src); off += bs {
		prev := len(dst)
		var err error
		var payload int
		if dst, payload, err = huff0AppendBlock(dst, src[off:min(off+bs, len(src))], s); err != nil {
			return nil, fmt.Errorf("huff0: block at %d: %w", off, err)
		}
		if prev-start+binary.MaxVarintLen64+payload >= limit {
			return nil, nil
		}
	}
	return dst, nil
}

// huff0AppendBlock appends one block (header and payload) coding blk with
// s, whose table the block may reuse, and leaves s ready for the next
// block (which may reuse this block's table). It returns the payload's
// length beside dst.
func huff0AppendBlock(dst, blk []byte, s *huff0.Scratch) ([]byte, int, error) {
	var tag uint64
	var payload []byte
	comp, reused, err := huff0.Compress4X(blk, s)
	switch {
	case err == nil && reused:
		tag, payload = uint64(len(comp))<<2|huff0Reuse, comp
	case err == nil:
		tag, payload = uint64(len(comp))<<2|huff0Table, comp
	case errors.Is(err, huff0.ErrUseRLE):
		tag, payload = huff0RLE, blk[:1]
	case errors.Is(err, huff0.ErrIncompressible):
		tag, payload = huff0Raw, blk
	default:
		return nil, 0, err
	}
	dst = binary.AppendUvarint(dst, tag)
	dst = append(dst, payload...)
	s.Reuse = huff0ReusePolicy
	return dst, len(payload), nil
}

// Decode decodes the blocks straight into dst. Every length is checked
// against in.Len before use; nothing is allocated per segment beyond the
// pooled huff0 state.
func (o huff0Op) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	if len(parts) != 1 || in.Len < 0 {
		return nil, fmt.Errorf("%w: huff0: want one segment and a length", codec.ErrCorrupt)
	}
	n := in.Len
	if cap(dst)-len(dst) < n {
		return nil, fmt.Errorf("codec: huff0: destination has room for %d bytes, want %d", cap(dst)-len(dst), n)
	}
	start := len(dst)
	out := dst[start : start+n]
	if err := huff0DecodeBlocks(out, parts[0].Data, o.block()); err != nil {
		return nil, err
	}
	return dst[:start+n], nil
}

func huff0DecodeBlocks(out, src []byte, bs int) error {
	s := huff0Scratches.Get().(*huff0.Scratch)
	defer huff0Scratches.Put(s)
	var dec *huff0.Decoder
	n := len(out)
	for off := 0; off < n; off += bs {
		var err error
		if src, err = huff0DecodeBlock(out[off:min(off+bs, n):min(off+bs, n)], src, s, &dec); err != nil {
			return fmt.Errorf("%w: huff0: block at %d: %v", codec.ErrCorrupt, off, err)
		}
	}
	if len(src) != 0 {
		return fmt.Errorf("%w: huff0: %d bytes after the last block", codec.ErrCorrupt, len(src))
	}
	return nil
}

// huff0DecodeBlock decodes one block (header and payload) from the front
// of src into blk, all of it, and returns what follows the block. *dec is
// the table of the last kind-2 block (nil before one); a kind-2 block
// replaces it. Errors are bare: the caller names the block.
func huff0DecodeBlock(blk, src []byte, s *huff0.Scratch, dec **huff0.Decoder) ([]byte, error) {
	tag, k := binary.Uvarint(src)
	if k <= 0 || k != uvarintLen(tag) {
		return nil, errors.New("bad, non-minimal or missing header")
	}
	src = src[k:]
	kind, size := tag&3, tag>>2
	if kind <= huff0RLE && size != 0 || size > uint64(len(src)) {
		return nil, fmt.Errorf("kind %d, %d bytes of %d left", kind, size, len(src))
	}
	switch kind {
	case huff0Raw:
		if len(src) < len(blk) {
			return nil, fmt.Errorf("raw: %d bytes left, want %d", len(src), len(blk))
		}
		copy(blk, src)
		return src[len(blk):], nil
	case huff0RLE:
		if len(src) < 1 {
			return nil, errors.New("RLE without its byte")
		}
		huff0Fill(blk, src[0])
		return src[1:], nil
	}
	stream := src[:size]
	src = src[size:]
	if kind == huff0Table {
		ts, rest, err := huff0.ReadTable(stream, s)
		if err != nil {
			return nil, fmt.Errorf("table: %v", err)
		}
		*dec, stream = ts.Decoder(), rest
	} else if *dec == nil {
		return nil, errors.New("reuses a table, but none came before")
	}
	got, err := (*dec).Decompress4X(blk[:0:len(blk)], stream)
	if err != nil {
		return nil, err
	}
	if len(got) != len(blk) {
		return nil, fmt.Errorf("decoded to %d bytes, want %d", len(got), len(blk))
	}
	return src, nil
}

// uvarintLen is the length of v's minimal uvarint.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// huff0Fill sets every byte of b to v.
func huff0Fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for i := 1; i < len(b); i *= 2 {
		copy(b[i:], b[:i])
	}
}

// Sampling. Inputs up to huff0SampleAll bytes are counted whole; larger
// ones through huff0SampleWindows windows of huff0SampleWindow bytes at
// evenly spaced places (4 KiB in all), which costs a few microseconds
// against the hundreds a Huffman pass over a 256 KiB plane takes.
const (
	huff0SampleAll     = 8 << 10
	huff0SampleWindows = 8
	huff0SampleWindow  = 512
)

// huff0Estimate estimates the size in bytes that order-0 coding gives src:
// the entropy of the byte histogram of a sample (with the Miller-Madow
// correction, as a small sample understates the entropy of nearly uniform
// data) times len(src), plus about half a byte of table per symbol seen.
func huff0Estimate(src []byte) int {
	var hist [256]int
	total := 0
	if len(src) <= huff0SampleAll {
		for _, b := range src {
			hist[b]++
		}
		total = len(src)
	} else {
		step := (len(src) - huff0SampleWindow) / (huff0SampleWindows - 1)
		for w := range huff0SampleWindows {
			for _, b := range src[w*step : w*step+huff0SampleWindow] {
				hist[b]++
			}
		}
		total = huff0SampleWindows * huff0SampleWindow
	}
	seen := 0
	for _, c := range hist {
		if c != 0 {
			seen++
		}
	}
	bits := entropy.FromCounts(&hist, total)
	bits += float64(seen-1) / (2 * float64(total) * math.Ln2)
	return int(bits*float64(len(src))/8) + seen/2
}
