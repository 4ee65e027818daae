package lossless

import (
	"encoding/binary"
	"fmt"

	"github.com/tensorpress/tensorpress/codec"
)

// The bytedelta stage replaces each byte by its difference from the byte
// before it, modulo 256 (blosc's bytedelta filter). After a shuffle, the
// bytes of a plane are one field of successive elements, and on smooth or
// clustered data their differences are small and skewed: a coder after it
// sees a narrower histogram.
//
// Wire parameters: none. Recipe text: "bytedelta".
//
// Segments: one segment in, the same name out, as bytes of the same
// length: out[0] = in[0] and out[i] = in[i] - in[i-1] (mod 256). Decoding
// is the running sum.
var byteDeltaStage = &codec.Stage{
	ID:     ByteDeltaID,
	Name:   "bytedelta",
	Kind:   codec.Filter,
	Reads:  "any segment (usually a byte plane after shuffle)",
	Writes: "the same segment, as byte differences",
	Doc:    "bytewise delta: out[i] = in[i] - in[i-1] mod 256 (blosc bytedelta); follows shuffle",
	New: func(args []codec.Arg) (codec.Op, error) {
		if len(args) != 0 {
			return nil, fmt.Errorf("%w: bytedelta takes no arguments", codec.ErrRecipe)
		}
		return byteDeltaOp{}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 0 {
			return nil, fmt.Errorf("%w: bytedelta params %x: want none", codec.ErrCorrupt, p)
		}
		return byteDeltaOp{}, nil
	},
}

func init() { codec.Register(byteDeltaStage) }

type byteDeltaOp struct{}

var _ codec.Op = byteDeltaOp{}

func (byteDeltaOp) Stage() *codec.Stage            { return byteDeltaStage }
func (byteDeltaOp) String() string                 { return "bytedelta" }
func (byteDeltaOp) AppendParams(dst []byte) []byte { return dst }

func (byteDeltaOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	return []codec.SegInfo{{Name: in.Name, Elem: codec.Byte, Len: in.Len}}, nil
}

// Encode writes the differences into ctx.Arena.
func (byteDeltaOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	out := a.Alloc(len(in.Data))
	byteDeltaEncode(out, in.Data)
	return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte, Len: len(out)}, Data: out}}, nil
}

// Decode appends the running sum of the differences to dst.
func (byteDeltaOp) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	if len(parts) != 1 || in.Len < 0 || len(parts[0].Data) != in.Len {
		return nil, fmt.Errorf("%w: bytedelta: want one segment of %d bytes", codec.ErrCorrupt, in.Len)
	}
	if cap(dst)-len(dst) < in.Len {
		return nil, fmt.Errorf("codec: bytedelta: destination has room for %d bytes, want %d", cap(dst)-len(dst), in.Len)
	}
	start := len(dst)
	byteDeltaDecode(dst[start:start+in.Len], parts[0].Data)
	return dst[:start+in.Len], nil
}

// Kernels, specified by their reference loops (len(dst) == len(src)):
//
//	encode: prev := byte(0); for i, b := range src { dst[i] = b - prev; prev = b }
//	decode: prev := byte(0); for i, d := range src { prev += d; dst[i] = prev }
//
// Both work on 8 bytes at a time in uint64 registers (SWAR), then finish
// with the reference loop; bytedelta_test.go checks them against it.

const (
	bdLow  = 0x00ff00ff00ff00ff // the low byte of each 16-bit lane
	bdHigh = 0x8080808080808080 // the top bit of each byte
	bdLane = 0x0001000100010001
)

// byteDeltaEncode is the encode reference loop. Word i is x = src[8i:8i+8]
// and y = the same bytes one position earlier; the bytewise difference
// x - y comes from Hacker's Delight's SWAR subtraction, which keeps
// borrows inside each byte.
func byteDeltaEncode(dst, src []byte) {
	n := len(src)
	dst = dst[:n]
	i := 0
	if n >= 8 {
		x := binary.LittleEndian.Uint64(src)
		binary.LittleEndian.PutUint64(dst, bdSub(x, x<<8))
		for i = 8; i+8 <= n; i += 8 {
			x := binary.LittleEndian.Uint64(src[i:])
			y := binary.LittleEndian.Uint64(src[i-1:])
			binary.LittleEndian.PutUint64(dst[i:], bdSub(x, y))
		}
	}
	prev := byte(0)
	if i > 0 {
		prev = src[i-1]
	}
	for ; i < n; i++ {
		b := src[i]
		dst[i] = b - prev
		prev = b
	}
}

// bdSub subtracts each byte of y from the byte of x at the same place,
// modulo 256.
func bdSub(x, y uint64) uint64 {
	return ((x | bdHigh) - (y &^ bdHigh)) ^ ((x ^ ^y) & bdHigh)
}

// byteDeltaDecode is the decode reference loop, 8 bytes at a time. The
// even and the odd bytes of a word are spread into 16-bit lanes, where one
// multiplication by 0x0001000100010001 sums each lane with all the lanes
// below it without overflowing (4 x 255 < 65536): e(k) sums the even bytes
// 0, 2, ..., 2k and o(k) the odd bytes 1, 3, ..., 2k+1. Byte 2k of the
// result is then prev + e(k) + o(k-1) and byte 2k+1 is prev + e(k) + o(k),
// mod 256, where prev is the running sum before the word. The only
// dependency from word to word is an 8-bit add to prev.
func byteDeltaDecode(dst, src []byte) {
	n := len(src)
	dst = dst[:n]
	prev := byte(0)
	i := 0
	for ; i+8 <= n; i += 8 {
		d := binary.LittleEndian.Uint64(src[i:])
		e := (d & bdLow) * bdLane
		o := (d >> 8 & bdLow) * bdLane
		s := e + o
		p := uint64(prev) * bdLane
		binary.LittleEndian.PutUint64(dst[i:], (e+o<<16+p)&bdLow|((s+p)&bdLow)<<8)
		prev += byte(s >> 48)
	}
	for ; i < n; i++ {
		prev += src[i]
		dst[i] = prev
	}
}
