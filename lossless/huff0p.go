package lossless

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/klauspost/compress/huff0"

	"github.com/tensorpress/tensorpress/codec"
)

// The huff0p stage codes a byte segment whose bytes take few values, such
// as the exponents of float weights (fsplit's exp), two to a symbol: each
// block names its 15 or 16 most common byte values, every byte becomes a
// 4-bit code (its rank, or 15 for an escape), two codes make a byte, and
// huff0 codes those bytes. A decoder reads half as many Huffman symbols as
// huff0b's (each about twice as long) and turns each into two bytes with a
// table lookup, 32 at a time in AVX2; the pairs also carry what one byte
// says about the next, which huff0's order-0 codes cannot.
//
// Wire parameters: one byte, p in 12..17: blocks of 2^p input bytes.
// Recipe text: "huff0p(p)", p 14 by default.
//
// Segment layout. The input is cut into blocks of 2^p bytes (the last one
// shorter), as many as the segment's decoded length says. Each block of n
// bytes is
//
//	u8 k (1..16), k bytes sym[0..k-1]
//	uvarint e, e escaped bytes
//	when n is odd: the block's last byte, as it is
//	when n > 1: one huff0 block (huff0's layout) of n/2 bytes (rounded down)
//
// Byte i of the huff0 block holds the codes of input bytes 2i (high
// nibble) and 2i+1 (low nibble). A code c < k stands for sym[c]; any
// other code takes the next escaped byte, in order (the encoder writes
// 15). k = 16 allows no escape (e is 0). Every escaped byte is used. The huff0 blocks of a segment share
// tables as huff0's do: a reuse block takes the table of the last block
// that had one.
//
// The encoder ranks a block's byte values by count (ties by value) and
// escapes all but the 15 most common when a block holds more than 16.
const (
	Huff0pMinLog = 12
	Huff0pMaxLog = 17
)

var huff0pStage = &codec.Stage{
	ID:     Huff0pID,
	Name:   "huff0p",
	Kind:   codec.Coder,
	Reads:  "any byte segment (best: one of few values, such as float exponents)",
	Writes: "blocks of 2^p bytes: a table of 15-16 values, escapes, huff0 over 4-bit codes two to a byte",
	Doc:    "huff0 over pairs of 4-bit codes of each block's 15-16 commonest bytes, p in 12..17; decodes exponents faster than huff0b",
	New:    blockLogNew("huff0p", Huff0pMinLog, Huff0pMaxLog, func(p uint8) codec.Op { return huff0pOp{log2: p} }),
	Load:   blockLogLoad("huff0p", Huff0pMinLog, Huff0pMaxLog, func(p uint8) codec.Op { return huff0pOp{log2: p} }),
}

func init() { codec.Register(huff0pStage) }

// huff0pOp is the huff0p stage with blocks of 2^log2 bytes.
type huff0pOp struct{ log2 uint8 }

var _ codec.Op = huff0pOp{}

func (huff0pOp) Stage() *codec.Stage { return huff0pStage }

func (o huff0pOp) String() string { return fmt.Sprintf("huff0p(%d)", o.log2) }

func (o huff0pOp) AppendParams(dst []byte) []byte { return append(dst, o.log2) }

func (huff0pOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	return []codec.SegInfo{{Name: in.Name, Elem: codec.Byte, Len: -1}}, nil
}

// huff0pScratch is a block's pair bytes, escaped bytes (encoder) and
// escape masks (decoder: one bit per input byte), for the largest block;
// pooled.
type huff0pScratch struct {
	pairs [1 << (Huff0pMaxLog - 1)]byte
	esc   [1 << Huff0pMaxLog]byte
	mask  [1 << (Huff0pMaxLog - 5)]uint32
}

var huff0pScratches = sync.Pool{New: func() any { return new(huff0pScratch) }}

// Encode codes in into ctx.Arena. Like huff0, it returns in unchanged (the
// segment is stored raw) when the sampled entropy promises too little or
// the blocks come out no smaller than the input.
func (o huff0pOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
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
	s := huff0Scratches.Get().(*huff0.Scratch)
	defer huff0Scratches.Put(s)
	s.Reuse = huff0.ReusePolicyNone // forget tables from earlier segments
	sc := huff0pScratches.Get().(*huff0pScratch)
	defer huff0pScratches.Put(sc)
	s.TableLog = huff0pTableLog
	defer func() { s.TableLog = 0 }() // back to huff0's default for the pool
	out := a.Alloc(n)[:0]
	bs := 1 << o.log2
	for off := 0; off < n; off += bs {
		var err error
		if out, err = huff0pAppendBlock(out, src[off:min(off+bs, n)], s, sc); err != nil {
			return nil, fmt.Errorf("huff0p: block at %d: %w", off, err)
		}
		if len(out) >= n {
			return unchanged(), nil // not smaller: store raw
		}
	}
	return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte, Len: len(out)}, Data: out}}, nil
}

// huff0pTableLog caps the pairs' Huffman codes at 10 bits (huff0's default
// is 11): a decoder fills a table of 2^10 entries per block instead of
// 2^11; the cap touches only the rarest pairs' codes.
const huff0pTableLog = 10

// huff0pEscape is the code the encoder writes for an escaped byte.
const huff0pEscape = 15

// huff0pAppendBlock appends blk in the block layout above, building its
// pairs and escapes in sc (AVX2 packs 32 bytes at a time where it can).
func huff0pAppendBlock(dst, blk []byte, s *huff0.Scratch, sc *huff0pScratch) ([]byte, error) {
	hist := huff0pCount(blk)
	var vals [256]byte
	syms := vals[:0]
	for v, c := range hist {
		if c != 0 {
			syms = append(syms, byte(v))
		}
	}
	slices.SortFunc(syms, func(a, b byte) int {
		if c := cmp.Compare(hist[b], hist[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	// 16 values name every byte only when all were counted; with a
	// sample, a 16th value leaves code 15 for the values it missed.
	k := min(len(syms), 16)
	if len(syms) > 16 || k == 16 && len(blk) > huff0pSampleWindows*huff0pSampleWindow {
		k = 15
	}
	var code [256]byte
	for i := range code {
		code[i] = huff0pEscape
	}
	for i, v := range syms[:k] {
		code[v] = byte(i)
	}
	np := len(blk) / 2
	pairs, esc := sc.pairs[:np], sc.esc[:0]
	even := blk[:2*np]
	i := huff0pPackAsm(pairs, even, syms[:k], sc.mask[:])
	if k < 16 {
		for w, mw := range sc.mask[:i/32] {
			for ; mw != 0; mw &= mw - 1 {
				esc = append(esc, even[w*32+bits.TrailingZeros32(mw)])
			}
		}
	}
	for ; i+8 <= len(even); i += 8 {
		v := binary.LittleEndian.Uint64(even[i:])
		w := uint32(code[byte(v)])<<4 | uint32(code[byte(v>>8)]) |
			uint32(code[byte(v>>16)])<<12 | uint32(code[byte(v>>24)])<<8 |
			uint32(code[byte(v>>32)])<<20 | uint32(code[byte(v>>40)])<<16 |
			uint32(code[byte(v>>48)])<<28 | uint32(code[byte(v>>56)])<<24
		binary.LittleEndian.PutUint32(pairs[i/2:], w)
		if k < 16 && w&(w>>1)&(w>>2)&(w>>3)&0x11111111 != 0 { // a nibble of 15: an escape
			for _, b := range even[i : i+8] {
				if code[b] == huff0pEscape {
					esc = append(esc, b)
				}
			}
		}
	}
	for ; i < len(even); i += 2 {
		pairs[i/2] = code[even[i]]<<4 | code[even[i+1]]
		for _, b := range even[i : i+2] {
			if k < 16 && code[b] == huff0pEscape {
				esc = append(esc, b)
			}
		}
	}
	dst = append(dst, byte(k))
	dst = append(dst, syms[:k]...)
	dst = binary.AppendUvarint(dst, uint64(len(esc)))
	dst = append(dst, esc...)
	if len(blk)&1 == 1 {
		dst = append(dst, blk[len(blk)-1])
	}
	if np == 0 {
		return dst, nil
	}
	dst, _, err := huff0AppendBlock(dst, pairs, s)
	return dst, err
}

// huff0pCount counts all of a block up to 8 KiB, else these windows
// spread over it: the ranks need not be exact (a value left out is
// escaped, not lost), so larger blocks are not read twice whole.
const (
	huff0pSampleWindows = 64
	huff0pSampleWindow  = 128
)

// huff0pCount counts the bytes of blk, or of a sample of a larger one, in
// four tables so that runs of one value do not wait on one counter.
func huff0pCount(blk []byte) [256]int {
	var h [4][256]uint32
	if len(blk) <= huff0pSampleWindows*huff0pSampleWindow {
		huff0pCountInto(&h, blk)
	} else {
		step := (len(blk) - huff0pSampleWindow) / (huff0pSampleWindows - 1)
		for w := range huff0pSampleWindows {
			huff0pCountInto(&h, blk[w*step:w*step+huff0pSampleWindow])
		}
	}
	var hist [256]int
	for v := range hist {
		hist[v] = int(h[0][v] + h[1][v] + h[2][v] + h[3][v])
	}
	return hist
}

func huff0pCountInto(h *[4][256]uint32, b []byte) {
	for ; len(b) >= 8; b = b[8:] {
		v := binary.LittleEndian.Uint64(b)
		h[0][byte(v)]++
		h[1][byte(v>>8)]++
		h[2][byte(v>>16)]++
		h[3][byte(v>>24)]++
		h[0][byte(v>>32)]++
		h[1][byte(v>>40)]++
		h[2][byte(v>>48)]++
		h[3][byte(v>>56)]++
	}
	for _, c := range b {
		h[0][c]++
	}
}

// Decode decodes the blocks straight into dst, every length checked
// against in.Len before use.
func (o huff0pOp) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	if len(parts) != 1 || in.Len < 0 {
		return nil, fmt.Errorf("%w: huff0p: want one segment and a length", codec.ErrCorrupt)
	}
	n := in.Len
	if cap(dst)-len(dst) < n {
		return nil, fmt.Errorf("codec: huff0p: destination has room for %d bytes, want %d", cap(dst)-len(dst), n)
	}
	start := len(dst)
	out := dst[start : start+n]
	s := huff0Scratches.Get().(*huff0.Scratch)
	defer huff0Scratches.Put(s)
	sc := huff0pScratches.Get().(*huff0pScratch)
	defer huff0pScratches.Put(sc)
	var dec *huff0.Decoder
	src := parts[0].Data
	bs := 1 << o.log2
	for off := 0; off < n; off += bs {
		var err error
		if src, err = huff0pDecodeBlock(out[off:min(off+bs, n)], src, s, &dec, sc); err != nil {
			return nil, fmt.Errorf("%w: huff0p: block at %d: %v", codec.ErrCorrupt, off, err)
		}
	}
	if len(src) != 0 {
		return nil, fmt.Errorf("%w: huff0p: %d bytes after the last block", codec.ErrCorrupt, len(src))
	}
	return dst[:start+n], nil
}

// huff0pDecodeBlock decodes one block from the front of src into blk, all
// of it, and returns what follows. Errors are bare: the caller names the
// block.
func huff0pDecodeBlock(blk, src []byte, s *huff0.Scratch, dec **huff0.Decoder, sc *huff0pScratch) ([]byte, error) {
	if len(src) == 0 {
		return nil, errors.New("missing")
	}
	k := int(src[0])
	if k < 1 || k > 16 || len(src) < 1+k {
		return nil, fmt.Errorf("%d values in a table of %d bytes left", k, len(src)-1)
	}
	var tab [16]byte
	copy(tab[:], src[1:1+k])
	src = src[1+k:]
	e, m := binary.Uvarint(src)
	if m <= 0 || m != uvarintLen(e) {
		return nil, errors.New("bad, non-minimal or missing escape count")
	}
	src = src[m:]
	if k == 16 && e != 0 || e > uint64(len(blk)) || e > uint64(len(src)) {
		return nil, fmt.Errorf("%d escapes with %d values, %d bytes and %d bytes left", e, k, len(blk), len(src))
	}
	esc := src[:e]
	src = src[e:]
	if len(blk)&1 == 1 {
		if len(src) == 0 {
			return nil, errors.New("no last byte")
		}
		blk[len(blk)-1], src = src[0], src[1:]
		blk = blk[:len(blk)-1]
	}
	pairs := sc.pairs[:len(blk)/2]
	if len(pairs) > 0 {
		var err error
		if src, err = huff0DecodeBlock(pairs, src, s, dec); err != nil {
			return nil, err
		}
	}
	// Codes >= k are escapes: k = 16 allows none.
	done := huff0pExpandAsm(blk, pairs, &tab, k, sc.mask[:])
	used := 0
	for w, mw := range sc.mask[:done/32] {
		for ; mw != 0; mw &= mw - 1 {
			if used == len(esc) {
				return nil, fmt.Errorf("more escape codes than the %d escaped bytes", len(esc))
			}
			blk[w*32+bits.TrailingZeros32(mw)] = esc[used]
			used++
		}
	}
	for j := done; j < len(blk); j++ {
		c := pairs[j>>1] >> (4 - 4*(j&1)) & 15
		if int(c) < k {
			blk[j] = tab[c]
			continue
		}
		if used == len(esc) {
			return nil, fmt.Errorf("more escape codes than the %d escaped bytes", len(esc))
		}
		blk[j] = esc[used]
		used++
	}
	if used != len(esc) {
		return nil, fmt.Errorf("%d escaped bytes, %d escape codes", len(esc), used)
	}
	return src, nil
}
