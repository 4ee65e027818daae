package lossless

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/tensorpress/tensorpress/codec"
)

// The lenbits stage codes a segment of w-byte unsigned little-endian
// integers (w = 2, 4 or 8) that are mostly small but spread over many
// values, such as the zigzag-coded differences between two versions of a
// model's weights (docs/FORMAT.md, "Delta updates"): each element as its
// bit length L (0 for zero, else the position of its leading one plus
// one) and the L-1 bits below its leading one, as they are. The lengths
// carry the information a coder can model; the bits below the leading one
// are close to uniform, and no byte plane or match finder does better than
// storing them. The lengths are Huffman-coded (klauspost huff0) in the
// context of the element before's length: neighbouring weights move by
// similar amounts. On the deltas between FedAvg rounds this codes 2.3%
// fewer bytes than shuffle4 | *:zstd(1) (docs/BENCHMARKS.md, "Model hub:
// lossless deltas"; 4% as bfloat16, 8% as float16, 20% as float64
// holding float32 values), at a fifth
// to a sixth of its speed (about 180 MB/s coding, 250 decoding, on one
// core here): each length's context is the one before, so decoding walks
// the elements one at a time.
//
// Wire parameters: 1 byte, the width w: 2, 4 or 8. Recipe text:
// "lenbits(w)" or "lenbits(width=w)"; "lenbits" takes w from the element
// type (through Bind, so frames carry the width). A Coder: it ends the
// segment's pipeline.
//
// Segment layout, for an input of n elements of w bytes and t = len%w
// bytes after them (K = 8w+1 contexts, a context being the bit length of
// the element before, 0 for the first element):
//
//	u8 s                         bits every element repeats, 0..8w-1: the
//	                             low s bits of each element equal its bit
//	                             s; the elements are coded shifted right by
//	                             s. The hub's zigzag deltas of values of
//	                             half their width (bfloat16 values in
//	                             float32, float32 in float64) repeat their
//	                             low half: s = 8w/2
//	uvarint k                    contexts listed, 1..K
//	uvarint count[c], c < k      elements coded in context c (others: 0);
//	                             they sum to n
//	streams                      one for each context with count at least
//	                             lenbitsMinCtx, in order of c, then one for
//	                             the rest (the pool) when they hold any:
//	                             uvarint(size<<1 | kind), then size bytes
//	                             holding the stream's lengths (one byte
//	                             each, in element order; the pool's context
//	                             by context, in order of c): kind 0 in huff0's
//	                             block layout (128 KiB blocks, see huff0),
//	                             kind 1 as one zstd frame (as the zstd
//	                             stage's segment; for streams that are
//	                             mostly one length, lenbitsRuns)
//	bits                         ceil(B/8) bytes, B the sum of max(L-1, 0):
//	                             each element's L-1 bits below its leading
//	                             one, least significant first, packed from
//	                             the least significant bit of each byte;
//	                             the padding bits of the last byte are zero
//	tail                         the t bytes, as they are
//
// The decoder rejects a shift of 8w or more, a count that is not the
// number of elements in its context, a length above 8w-s, a stream that
// runs out or decodes to another length, and any byte left over.
const (
	lenbitsMinCtx = 512 // contexts with fewer elements share the pool's stream
	lenbitsMaxK   = 65
)

var lenbitsStage = &codec.Stage{
	ID:     LenbitsID,
	Name:   "lenbits",
	Kind:   codec.Coder,
	Reads:  "w-byte unsigned integers, mostly small (zigzag deltas), w = 2, 4 or 8",
	Writes: "bit lengths (huff0, in the context of the length before) and the bits below each leading one",
	Doc:    "each integer as its bit length (Huffman-coded given the previous one's) and the bits below its leading one (lenbits(w); plain lenbits takes w from the element type)",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("lenbits", args, 1, "width"); err != nil {
			return nil, err
		}
		w, err := codec.IntArg("lenbits", args, 0, "width", 0, 2, 8)
		if err != nil {
			return nil, err
		}
		if w != 0 && w != 2 && w != 4 && w != 8 {
			return nil, fmt.Errorf("%w: lenbits: width %d: want 2, 4 or 8", codec.ErrRecipe, w)
		}
		return lenbitsOp{width: uint8(w)}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 1 || (p[0] != 2 && p[0] != 4 && p[0] != 8) {
			return nil, fmt.Errorf("%w: lenbits params %x: want one byte, a width of 2, 4 or 8", codec.ErrCorrupt, p)
		}
		return lenbitsOp{width: p[0]}, nil
	},
}

func init() {
	codec.Register(lenbitsStage)
}

// lenbitsOp is the lenbits stage at one width; width 0 takes the element
// size of the segment it meets.
type lenbitsOp struct{ width uint8 }

var _ codec.Op = lenbitsOp{}

func (lenbitsOp) Stage() *codec.Stage { return lenbitsStage }

func (o lenbitsOp) String() string {
	if o.width == 0 {
		return "lenbits"
	}
	return fmt.Sprintf("lenbits(%d)", o.width)
}

func (o lenbitsOp) AppendParams(dst []byte) []byte { return append(dst, o.width) }

// Bind resolves the width from in's element type (codec.Binder).
func (o lenbitsOp) Bind(in codec.SegInfo) (codec.Op, error) {
	w, err := o.resolve(in)
	if err != nil {
		return nil, err
	}
	return lenbitsOp{width: uint8(w)}, nil
}

func (o lenbitsOp) resolve(in codec.SegInfo) (int, error) {
	if o.width != 0 {
		return int(o.width), nil
	}
	switch w := in.Elem.Size(); w {
	case 2, 4, 8:
		return w, nil
	default:
		return 0, fmt.Errorf("lenbits: segment %q has %d-byte %v elements; give a width: lenbits(2), lenbits(4) or lenbits(8)", in.Name, w, in.Elem)
	}
}

func (o lenbitsOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	if _, err := o.resolve(in); err != nil {
		return nil, err
	}
	return []codec.SegInfo{{Name: in.Name, Elem: codec.Byte, Len: -1}}, nil
}

// lenOf is the bit length of v: 0 for 0, else the position of its leading
// one plus one.
func lenOf(v uint64) uint8 { return uint8(bits.Len64(v)) }

// elem reads the w-byte little-endian element at b.
func elem(b []byte, w int) uint64 {
	switch w {
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

func (o lenbitsOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	w, err := o.resolve(in.SegInfo)
	if err != nil {
		return nil, err
	}
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	src := in.Data
	n := len(src) / w
	// sh: the low bits that every element repeats (s in the layout above):
	// bit i of v ^ v>>1 is 0 where bits i and i+1 of v are equal.
	var rep uint64
	for i := range n {
		v := elem(src[i*w:], w)
		rep |= v ^ v>>1
	}
	sh := uint(0)
	if rep != 0 {
		sh = uint(bits.TrailingZeros64(rep))
	}
	lens := a.Alloc(n)
	// The bits below each leading one go to bitBuf as the lengths are
	// found: at most 32 at a time, so that the accumulator (under 32 bits
	// between writes) never overflows.
	bitBuf := a.Alloc(len(src) + 8)
	nb := 0 // bytes of bitBuf written
	var acc uint64
	var na uint
	var count [lenbitsMaxK]int
	prev := uint8(0)
	for i := range n {
		v := elem(src[i*w:], w) >> sh
		l := lenOf(v)
		lens[i] = l
		count[prev]++
		prev = l
		if l < 2 {
			continue
		}
		b := uint(l - 1)
		v &^= 1 << b // the leading one
		if b > 32 {
			acc |= (v & math.MaxUint32) << na
			binary.LittleEndian.PutUint32(bitBuf[nb:], uint32(acc))
			nb += 4
			acc >>= 32
			v, b = v>>32, b-32
		}
		acc |= v << na
		na += b
		if na >= 32 {
			binary.LittleEndian.PutUint32(bitBuf[nb:], uint32(acc))
			nb += 4
			acc >>= 32
			na -= 32
		}
	}
	for ; na > 0; na -= min(na, 8) {
		bitBuf[nb] = byte(acc)
		nb++
		acc >>= 8
	}
	// Streams: the lengths grouped by context, each group in element order.
	k := 1
	for c := range 8*w + 1 {
		if count[c] > 0 {
			k = c + 1
		}
	}
	start, poolStart := lenbitsRanges(&count, k)
	syms := a.Alloc(n)
	next := start
	prev = 0
	for _, l := range lens {
		syms[next[prev]] = l
		next[prev]++
		prev = l
	}
	out := a.Alloc(len(src) + 16*lenbitsMaxK)[:0]
	out = append(out, byte(sh))
	out = binary.AppendUvarint(out, uint64(k))
	for c := range k {
		out = binary.AppendUvarint(out, uint64(count[c]))
	}
	scratch := a.Alloc(n + n/8 + 64)[:0]
	emit := func(s []byte) error {
		blocks, err := huff0AppendBlocks(scratch[:0], s, huff0Block, math.MaxInt)
		if err != nil {
			return fmt.Errorf("lenbits: %w", err)
		}
		kind := uint64(0)
		if lenbitsRuns(s) {
			zs, err := (zstdOp{level: 1}).Encode(&codec.Ctx{Arena: a}, codec.Segment{Data: s})
			if err != nil {
				return fmt.Errorf("lenbits: %w", err)
			}
			if len(zs[0].Data) < len(blocks) {
				blocks, kind = zs[0].Data, 1
			}
		}
		out = binary.AppendUvarint(out, uint64(len(blocks))<<1|kind)
		out = append(out, blocks...)
		return nil
	}
	for c := range k {
		if count[c] >= lenbitsMinCtx {
			if err := emit(syms[start[c] : start[c]+count[c]]); err != nil {
				return nil, err
			}
		}
	}
	if poolStart < n {
		if err := emit(syms[poolStart:n]); err != nil {
			return nil, err
		}
	}
	out = append(out, bitBuf[:nb]...)
	out = append(out, src[n*w:]...)
	return []codec.Segment{{SegInfo: codec.SegInfo{Name: in.Name, Elem: codec.Byte, Len: len(out)}, Data: out}}, nil
}

// lenbitsRanges gives where each context's lengths start in the streams'
// order, given the counts of the k contexts listed: first the contexts
// with streams of their own, then those of the pool (which starts at
// pool), each group in order of context.
func lenbitsRanges(count *[lenbitsMaxK]int, k int) (start [lenbitsMaxK]int, pool int) {
	at := 0
	for _, own := range []bool{true, false} {
		if !own {
			pool = at
		}
		for c := range k {
			if (count[c] >= lenbitsMinCtx) == own {
				start[c] = at
				at += count[c]
			}
		}
	}
	return start, pool
}

// lenbitsRuns reports whether a stream of bit lengths is worth trying
// with zstd: when one length makes three quarters of it, such as the
// zeros of elements that did not change, Huffman codes still cost a bit
// each, where zstd codes their runs as matches.
func lenbitsRuns(s []byte) bool {
	var hist [lenbitsMaxK]int
	for _, l := range s {
		hist[l]++
	}
	return 4*slices.Max(hist[:]) > 3*len(s)
}

func (o lenbitsOp) Decode(ctx *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	if len(parts) != 1 || in.Len < 0 {
		return nil, fmt.Errorf("%w: lenbits: want one segment and a length", codec.ErrCorrupt)
	}
	w := int(o.width)
	if w != 2 && w != 4 && w != 8 {
		return nil, fmt.Errorf("%w: lenbits: width %d", codec.ErrCorrupt, w)
	}
	if cap(dst)-len(dst) < in.Len {
		return nil, fmt.Errorf("codec: lenbits: destination has room for %d bytes, want %d", cap(dst)-len(dst), in.Len)
	}
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	src := parts[0].Data
	n, tail := in.Len/w, in.Len%w
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: lenbits: "+format, append([]any{codec.ErrCorrupt}, args...)...)
	}
	// uv reads a minimal uvarint of at most max.
	uv := func(what string, max int) (int, error) {
		v, m := binary.Uvarint(src)
		if m <= 0 || m != uvarintLen(v) {
			return 0, corrupt("%s: bad, non-minimal or missing uvarint", what)
		}
		if v > uint64(max) {
			return 0, corrupt("%s: %d, at most %d", what, v, max)
		}
		src = src[m:]
		return int(v), nil
	}
	if len(src) < 1 || int(src[0]) >= 8*w {
		return nil, corrupt("no shift, or a shift of %d bits or more", 8*w)
	}
	sh := uint(src[0])
	src = src[1:]
	maxLen := 8*w - int(sh) // the elements shifted right by sh
	k, err := uv("context count", 8*w+1)
	if err != nil {
		return nil, err
	}
	if k < 1 || k > 8*w+1 {
		return nil, corrupt("%d contexts, want 1 to %d", k, 8*w+1)
	}
	var count [lenbitsMaxK]int
	total := 0
	for c := range k {
		if count[c], err = uv("count", n); err != nil {
			return nil, err
		}
		if total += count[c]; total > n {
			return nil, corrupt("counts sum past the %d elements", n)
		}
	}
	if total != n {
		return nil, corrupt("counts sum to %d, want %d", total, n)
	}
	// The streams, decoded into syms in the encoder's order; next and end
	// delimit each context's lengths.
	syms := a.Alloc(n)
	next, pool := lenbitsRanges(&count, k)
	var end [lenbitsMaxK]int
	for c := range k {
		end[c] = next[c] + count[c]
	}
	stream := func(lo, hi int) error {
		tag, err := uv("stream size", 2*len(src)+1)
		if err != nil {
			return err
		}
		kind, size := tag&1, tag>>1
		if size > len(src) {
			return corrupt("stream of %d bytes, %d left", size, len(src))
		}
		if kind == 1 {
			if _, err := (zstdOp{level: 1}).Decode(nil, syms[lo:lo], []codec.Segment{{Data: src[:size]}}, codec.SegInfo{Len: hi - lo}); err != nil {
				return fmt.Errorf("lenbits: %w", err)
			}
		} else if err := huff0DecodeBlocks(syms[lo:hi], src[:size], huff0Block); err != nil {
			return fmt.Errorf("lenbits: %w", err)
		}
		src = src[size:]
		return nil
	}
	for c := range k {
		if count[c] >= lenbitsMinCtx {
			if err := stream(next[c], end[c]); err != nil {
				return nil, err
			}
		}
	}
	if pool < n {
		if err := stream(pool, n); err != nil {
			return nil, err
		}
	}
	// The bits below the leading ones, then the tail.
	nb := 0
	for _, l := range syms {
		if int(l) > maxLen {
			return nil, corrupt("a bit length of %d in %d-bit elements shifted by %d", l, 8*w, sh)
		}
		nb += max(int(l)-1, 0)
	}
	nbytes := (nb + 7) / 8
	if len(src) != nbytes+tail {
		return nil, corrupt("%d bytes after the streams, want %d bits (%d bytes) and a tail of %d", len(src), nb, nbytes, tail)
	}
	bitsSrc := src[:nbytes]
	if nb%8 != 0 && bitsSrc[nbytes-1]>>(nb%8) != 0 {
		return nil, corrupt("padding bits set")
	}
	start := len(dst)
	out := dst[start : start+in.Len]
	// The bit reader: acc holds na bits not yet taken (and, above them,
	// copies of the bits that follow, from a wide load, which the next
	// load ORs in again unchanged). The lengths add up to exactly nb bits,
	// so it never runs out.
	var acc uint64
	var na uint
	pos := 0
	get := func(k uint) uint64 { // k <= 32
		if na < k {
			if pos+8 <= len(bitsSrc) {
				acc |= binary.LittleEndian.Uint64(bitsSrc[pos:]) << na
				adv := (63 - na) >> 3
				pos += int(adv)
				na += adv << 3
			} else {
				for na <= 56 && pos < len(bitsSrc) {
					acc |= uint64(bitsSrc[pos]) << na
					pos++
					na += 8
				}
			}
		}
		v := acc & (1<<k - 1)
		acc >>= k
		na -= k
		return v
	}
	// Each context reads its own range: one that runs out means counts
	// that are not the elements' contexts (and as they sum to n, none is
	// left over when none runs out).
	prev := uint8(0)
	for i := range n {
		j := next[prev]
		if j >= end[prev] {
			return nil, corrupt("element %d: context %d has no length left", i, prev)
		}
		l := syms[j]
		next[prev] = j + 1
		prev = l
		var v uint64
		if l > 0 {
			b := uint(l - 1)
			if b > 32 {
				v = get(32)
				v |= get(b-32) << 32
			} else {
				v = get(b)
			}
			v |= 1 << b
			if sh != 0 {
				v = v<<sh | -(v&1)&(1<<sh-1)
			}
		}
		switch w {
		case 2:
			binary.LittleEndian.PutUint16(out[i*2:], uint16(v))
		case 4:
			binary.LittleEndian.PutUint32(out[i*4:], uint32(v))
		default:
			binary.LittleEndian.PutUint64(out[i*8:], v)
		}
	}
	copy(out[n*w:], src[nbytes:])
	return dst[:start+in.Len], nil
}
