package lossless

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/tensorpress/tensorpress/codec"
)

// The shuffle stage splits a segment of w-byte elements into w byte
// planes: plane k holds byte k of every element, in element order (tensor
// data is little-endian, so the last plane of a float holds its sign and
// the top of its exponent). Coders then see each plane on its own; on
// float weights the exponent plane shrinks by half or more while the
// mantissa planes stay noise.
//
// Wire parameters: 1 byte, the width w in [2, 255], or 0 for "the element
// size of the input segment". The encoder resolves "shuffle" (no width)
// through shuffleOp.Bind (codec.Binder) before it records the step, so
// frames carry the resolved width; 0 is still accepted and resolved from
// the element type that the frame's plan carries.
//
// Recipe text: "shuffle(w)" or "shuffle(width=w)", with the aliases
// shuffle2, shuffle4 and shuffle8; "shuffle" takes the width from the
// element type and refuses byte segments. Ops print as "shuffle4" (widths
// 2, 4, 8), "shuffle(w)" (other widths) or "shuffle".
//
// Segments: an input of n bytes gives planes plane0..plane{w-1} of n/w
// bytes each and, when n%w != 0, a segment "tail" with the last n%w bytes
// as they were. On an input not called "data" the names take its name as a
// prefix: "val" gives "val.plane0" ... and "val.tail". All outputs are
// byte segments.
const (
	shuffleMinWidth = 2
	shuffleMaxWidth = 255
)

var shuffleStage = &codec.Stage{
	ID:     ShuffleID,
	Name:   "shuffle",
	Kind:   codec.Split,
	Reads:  "any segment whose length is a whole number of elements (or any, with a tail)",
	Writes: "plane0..plane{w-1} (byte planes) and tail (the n%w bytes left over)",
	Doc:    "byte-shuffle: split w-byte elements into w byte planes (shuffle2, shuffle4, shuffle8, shuffle(w); plain shuffle takes w from the element type)",
	New: func(args []codec.Arg) (codec.Op, error) {
		if err := codec.CheckArgs("shuffle", args, 1, "width"); err != nil {
			return nil, err
		}
		w, err := codec.IntArg("shuffle", args, 0, "width", 0, shuffleMinWidth, shuffleMaxWidth)
		if err != nil {
			return nil, err
		}
		return shuffleOp{width: uint8(w)}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 1 || p[0] == 1 {
			return nil, fmt.Errorf("%w: shuffle params %x: want one byte, a width in [%d, %d] or 0", codec.ErrCorrupt, p, shuffleMinWidth, shuffleMaxWidth)
		}
		return shuffleOp{width: p[0]}, nil
	},
}

func init() {
	codec.Register(shuffleStage)
	for _, w := range []string{"2", "4", "8"} {
		codec.RegisterAlias("shuffle"+w, ShuffleID, codec.Arg{Value: w})
	}
}

// shuffleOp is the shuffle stage at one width; width 0 takes the element
// size of the segment it meets.
type shuffleOp struct{ width uint8 }

var _ codec.Op = shuffleOp{}

func (shuffleOp) Stage() *codec.Stage { return shuffleStage }

func (o shuffleOp) String() string {
	switch o.width {
	case 0:
		return "shuffle"
	case 2, 4, 8:
		return "shuffle" + strconv.Itoa(int(o.width))
	}
	return "shuffle(" + strconv.Itoa(int(o.width)) + ")"
}

func (o shuffleOp) AppendParams(dst []byte) []byte { return append(dst, o.width) }

// Bind returns the op with its width resolved for a segment like in, so
// that a frame records "shuffle" with the width it used (codec.Binder).
func (o shuffleOp) Bind(in codec.SegInfo) (codec.Op, error) {
	w, err := o.resolve(in)
	if err != nil {
		return nil, err
	}
	return shuffleOp{width: uint8(w)}, nil
}

// resolve gives the width the op uses on in.
func (o shuffleOp) resolve(in codec.SegInfo) (int, error) {
	if o.width != 0 {
		return int(o.width), nil
	}
	w := in.Elem.Size()
	if w < shuffleMinWidth {
		return 0, fmt.Errorf("shuffle: segment %q has %d-byte %v elements; give a width: shuffle2, shuffle4, shuffle8 or shuffle(w)", in.Name, w, in.Elem)
	}
	return w, nil
}

// shufflePlaneNames are the output names on a segment called "data".
var shufflePlaneNames = func() (s [shuffleMaxWidth]string) {
	for k := range s {
		s[k] = "plane" + strconv.Itoa(k)
	}
	return s
}()

func shufflePlaneName(in string, k int) string {
	if in == "data" {
		return shufflePlaneNames[k]
	}
	return in + "." + shufflePlaneNames[k]
}

func shuffleTailName(in string) string {
	if in == "data" {
		return "tail"
	}
	return in + ".tail"
}

func (o shuffleOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	w, err := o.resolve(in)
	if err != nil {
		return nil, err
	}
	if in.Len < 0 {
		return nil, fmt.Errorf("shuffle: segment %q has no known length", in.Name)
	}
	m, r := in.Len/w, in.Len%w
	outs := make([]codec.SegInfo, w, w+1)
	for k := range outs {
		outs[k] = codec.SegInfo{Name: shufflePlaneName(in.Name, k), Elem: codec.Byte, Len: m}
	}
	if r != 0 {
		outs = append(outs, codec.SegInfo{Name: shuffleTailName(in.Name), Elem: codec.Byte, Len: r})
	}
	return outs, nil
}

// Encode writes the planes into one buffer from ctx.Arena; the tail
// aliases the input.
func (o shuffleOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	w, err := o.resolve(in.SegInfo)
	if err != nil {
		return nil, err
	}
	n := len(in.Data)
	m, r := n/w, n%w
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	buf := a.Alloc(m * w)
	outs := make([]codec.Segment, w, w+1)
	var small [8][]byte
	planes := small[:0]
	if w > len(small) {
		planes = make([][]byte, 0, w)
	}
	for k := range outs {
		p := buf[k*m : (k+1)*m : (k+1)*m]
		planes = append(planes, p)
		outs[k] = codec.Segment{SegInfo: codec.SegInfo{Name: shufflePlaneName(in.Name, k), Elem: codec.Byte, Len: m}, Data: p}
	}
	shuffle(planes, in.Data[:m*w])
	if r != 0 {
		outs = append(outs, codec.Segment{SegInfo: codec.SegInfo{Name: shuffleTailName(in.Name), Elem: codec.Byte, Len: r}, Data: in.Data[m*w : n : n]})
	}
	return outs, nil
}

// Decode interleaves the planes (and appends the tail) straight into dst.
// The parts are only read: stored planes alias the frame payload.
func (o shuffleOp) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	w, err := o.resolve(in)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", codec.ErrCorrupt, err)
	}
	if in.Len < 0 {
		return nil, fmt.Errorf("%w: shuffle: no length", codec.ErrCorrupt)
	}
	m, r := in.Len/w, in.Len%w
	want := w
	if r != 0 {
		want++
	}
	if len(parts) != want {
		return nil, fmt.Errorf("%w: shuffle(%d) of %d bytes: %d segments, want %d", codec.ErrCorrupt, w, in.Len, len(parts), want)
	}
	var small [8][]byte
	planes := small[:0]
	if w > len(small) {
		planes = make([][]byte, 0, w)
	}
	for k := range w {
		if len(parts[k].Data) != m {
			return nil, fmt.Errorf("%w: shuffle(%d): plane %d holds %d bytes, want %d", codec.ErrCorrupt, w, k, len(parts[k].Data), m)
		}
		planes = append(planes, parts[k].Data)
	}
	if r != 0 && len(parts[w].Data) != r {
		return nil, fmt.Errorf("%w: shuffle(%d): tail holds %d bytes, want %d", codec.ErrCorrupt, w, len(parts[w].Data), r)
	}
	if cap(dst)-len(dst) < in.Len {
		return nil, fmt.Errorf("codec: shuffle: destination has room for %d bytes, want %d", cap(dst)-len(dst), in.Len)
	}
	start := len(dst)
	out := dst[start : start+in.Len]
	unshuffle(out[:m*w], planes)
	if r != 0 {
		copy(out[m*w:], parts[w].Data)
	}
	return dst[:start+in.Len], nil
}

// Kernels.
//
// shuffle and unshuffle are specified by these reference loops, with
// w = len(planes) and m = len(planes[k]) for every k:
//
//	shuffle:   for i := range m { for k := range w { planes[k][i] = src[i*w+k] } }
//	unshuffle: for i := range m { for k := range w { dst[i*w+k] = planes[k][i] } }
//
// len(src) and len(dst) are exactly m*w. Widths 2, 4 and 8 have fast
// paths: AVX2 on amd64 for whole groups of 32 elements (shuffle_amd64.s),
// then SWAR transposes in uint64 registers (shuffle2Go, shuffle4Go,
// shuffle8Go and their inverses) for groups of 8 elements, then the
// reference loop for the last few. Other widths take shuffleGeneric, the
// reference loop blocked so that the source stays in L1 across the w
// passes. shuffle_test.go checks each path against the reference loop.

// shuffle splits src into planes (see the reference loop above).
func shuffle(planes [][]byte, src []byte) {
	w := len(planes)
	m := len(planes[0])
	if len(src) != m*w {
		panic("lossless: shuffle: length mismatch")
	}
	done := 0
	switch w {
	case 2:
		done = shuffle2Asm(planes[0], planes[1], src)
		shuffle2Go(planes[0][done:], planes[1][done:m], src[2*done:])
	case 4:
		done = shuffle4Asm(planes[0], planes[1], planes[2], planes[3], src)
		shuffle4Go(planes[0][done:], planes[1][done:m], planes[2][done:m], planes[3][done:m], src[4*done:])
	case 8:
		done = shuffle8Asm((*[8][]byte)(planes), src)
		var rest [8][]byte
		for k := range rest {
			rest[k] = planes[k][done:m]
		}
		shuffle8Go(&rest, src[8*done:])
	default:
		shuffleGeneric(planes, src)
	}
}

// unshuffle interleaves planes into dst (see the reference loop above).
func unshuffle(dst []byte, planes [][]byte) {
	w := len(planes)
	m := len(planes[0])
	if len(dst) != m*w {
		panic("lossless: unshuffle: length mismatch")
	}
	for _, p := range planes {
		if len(p) != m {
			panic("lossless: unshuffle: planes of different lengths")
		}
	}
	done := 0
	switch w {
	case 2:
		done = unshuffle2Asm(dst, planes[0], planes[1])
		unshuffle2Go(dst[2*done:], planes[0][done:], planes[1][done:])
	case 4:
		done = unshuffle4Asm(dst, planes[0], planes[1], planes[2], planes[3])
		unshuffle4Go(dst[4*done:], planes[0][done:], planes[1][done:], planes[2][done:], planes[3][done:])
	case 8:
		done = unshuffle8Asm(dst, (*[8][]byte)(planes))
		var rest [8][]byte
		for k := range rest {
			rest[k] = planes[k][done:]
		}
		unshuffle8Go(dst[8*done:], &rest)
	default:
		unshuffleGeneric(dst, planes)
	}
}

// shuffleBlock is the source bytes the generic loops work on at a time: it
// stays in L1 while they make their w passes over it.
const shuffleBlock = 16 << 10

// shuffleGeneric is the reference loop for any width, blocked, gathering
// 8 bytes of a plane into one 64-bit store.
func shuffleGeneric(planes [][]byte, src []byte) {
	w := len(planes)
	m := len(planes[0])
	blk := max(8, shuffleBlock/w&^7)
	for i0 := 0; i0 < m; i0 += blk {
		i1 := min(i0+blk, m)
		s := src[i0*w : i1*w]
		for k, p := range planes {
			p = p[i0:i1]
			j, i := k, 0
			for ; i+8 <= len(p); i += 8 {
				g := s[j : j+7*w+1]
				v := uint64(g[0]) | uint64(g[w])<<8 | uint64(g[2*w])<<16 | uint64(g[3*w])<<24 |
					uint64(g[4*w])<<32 | uint64(g[5*w])<<40 | uint64(g[6*w])<<48 | uint64(g[7*w])<<56
				binary.LittleEndian.PutUint64(p[i:], v)
				j += 8 * w
			}
			for ; i < len(p); i++ {
				p[i] = s[j]
				j += w
			}
		}
	}
}

// unshuffleGeneric is the reference loop for any width, blocked, reading
// 8 bytes of a plane with one 64-bit load.
func unshuffleGeneric(dst []byte, planes [][]byte) {
	w := len(planes)
	m := len(planes[0])
	blk := max(8, shuffleBlock/w&^7)
	for i0 := 0; i0 < m; i0 += blk {
		i1 := min(i0+blk, m)
		d := dst[i0*w : i1*w]
		for k, p := range planes {
			p = p[i0:i1]
			j, i := k, 0
			for ; i+8 <= len(p); i += 8 {
				v := binary.LittleEndian.Uint64(p[i:])
				g := d[j : j+7*w+1]
				g[0], g[w], g[2*w], g[3*w] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
				g[4*w], g[5*w], g[6*w], g[7*w] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
				j += 8 * w
			}
			for ; i < len(p); i++ {
				d[j] = p[i]
				j += w
			}
		}
	}
}

// The SWAR kernels below move 8 elements per iteration with 64-bit loads
// and stores, transposing bytes inside registers by "delta swaps": for a
// pair of words (x, y), t := (x>>s ^ y) & mask; x ^= t << s; y ^= t
// exchanges the bits of x selected by mask<<s with the bits of y selected
// by mask. Three rounds (s = 32, 16, 8) transpose an 8x8 byte matrix held
// in 8 words; two rounds (16, 8) transpose two 4x4 matrices held in the
// low and high halves of 4 words.

// transpose8x8 transposes the 8x8 byte matrix whose row i is x[i] (byte j
// of row i is bits 8j..8j+7): afterwards byte j of x[i] is byte i of the
// old x[j].
func transpose8x8(x *[8]uint64) {
	for i := range 4 {
		t := (x[i]>>32 ^ x[i+4]) & 0x00000000ffffffff
		x[i] ^= t << 32
		x[i+4] ^= t
	}
	for _, i := range [4]int{0, 1, 4, 5} {
		t := (x[i]>>16 ^ x[i+2]) & 0x0000ffff0000ffff
		x[i] ^= t << 16
		x[i+2] ^= t
	}
	for _, i := range [4]int{0, 2, 4, 6} {
		t := (x[i]>>8 ^ x[i+1]) & 0x00ff00ff00ff00ff
		x[i] ^= t << 8
		x[i+1] ^= t
	}
}

// transpose4x4x2 transposes the two 4x4 byte matrices held in the low and
// the high 32 bits of x[0..3] (row i in x[i]).
func transpose4x4x2(x0, x1, x2, x3 uint64) (uint64, uint64, uint64, uint64) {
	t := (x0>>16 ^ x2) & 0x0000ffff0000ffff
	x0 ^= t << 16
	x2 ^= t
	t = (x1>>16 ^ x3) & 0x0000ffff0000ffff
	x1 ^= t << 16
	x3 ^= t
	t = (x0>>8 ^ x1) & 0x00ff00ff00ff00ff
	x0 ^= t << 8
	x1 ^= t
	t = (x2>>8 ^ x3) & 0x00ff00ff00ff00ff
	x2 ^= t << 8
	x3 ^= t
	return x0, x1, x2, x3
}

// shuffle2Go is the reference loop for width 2.
func shuffle2Go(p0, p1, src []byte) {
	m := len(p0)
	p1 = p1[:m]
	src = src[:2*m]
	i := 0
	for ; i+8 <= m; i += 8 {
		s := src[2*i : 2*i+16]
		a := binary.LittleEndian.Uint64(s)
		b := binary.LittleEndian.Uint64(s[8:])
		// Even bytes to the low 32 bits, odd bytes to the high 32 bits.
		a = shuffleUnzip8(a)
		b = shuffleUnzip8(b)
		binary.LittleEndian.PutUint64(p0[i:], a&0xffffffff|b<<32)
		binary.LittleEndian.PutUint64(p1[i:], a>>32|b&0xffffffff00000000)
	}
	for ; i < m; i++ {
		p0[i], p1[i] = src[2*i], src[2*i+1]
	}
}

// shuffleUnzip8 moves the even bytes of x to its low half and the odd
// bytes to its high half, in order.
func shuffleUnzip8(x uint64) uint64 {
	t := (x>>8 ^ x) & 0x0000ff000000ff00
	x ^= t ^ t<<8
	t = (x>>16 ^ x) & 0x00000000ffff0000
	return x ^ t ^ t<<16
}

// shuffleZip8 inverts shuffleUnzip8.
func shuffleZip8(x uint64) uint64 {
	t := (x>>16 ^ x) & 0x00000000ffff0000
	x ^= t ^ t<<16
	t = (x>>8 ^ x) & 0x0000ff000000ff00
	return x ^ t ^ t<<8
}

// unshuffle2Go is the reference loop for width 2.
func unshuffle2Go(dst, p0, p1 []byte) {
	m := len(p0)
	p1 = p1[:m]
	dst = dst[:2*m]
	i := 0
	for ; i+8 <= m; i += 8 {
		a := binary.LittleEndian.Uint64(p0[i:])
		b := binary.LittleEndian.Uint64(p1[i:])
		d := dst[2*i : 2*i+16]
		binary.LittleEndian.PutUint64(d, shuffleZip8(a&0xffffffff|b<<32))
		binary.LittleEndian.PutUint64(d[8:], shuffleZip8(a>>32|b&0xffffffff00000000))
	}
	for ; i < m; i++ {
		dst[2*i], dst[2*i+1] = p0[i], p1[i]
	}
}

// shuffle4Go is the reference loop for width 4. Elements i and i+4 go to
// the low and high halves of x[i], so that after the two 4x4 transposes
// x[k] is plane k of the 8 elements.
func shuffle4Go(p0, p1, p2, p3, src []byte) {
	m := len(p0)
	p1, p2, p3 = p1[:m], p2[:m], p3[:m]
	src = src[:4*m]
	i := 0
	for ; i+8 <= m; i += 8 {
		s := src[4*i : 4*i+32]
		x0 := uint64(binary.LittleEndian.Uint32(s[0:])) | uint64(binary.LittleEndian.Uint32(s[16:]))<<32
		x1 := uint64(binary.LittleEndian.Uint32(s[4:])) | uint64(binary.LittleEndian.Uint32(s[20:]))<<32
		x2 := uint64(binary.LittleEndian.Uint32(s[8:])) | uint64(binary.LittleEndian.Uint32(s[24:]))<<32
		x3 := uint64(binary.LittleEndian.Uint32(s[12:])) | uint64(binary.LittleEndian.Uint32(s[28:]))<<32
		x0, x1, x2, x3 = transpose4x4x2(x0, x1, x2, x3)
		binary.LittleEndian.PutUint64(p0[i:], x0)
		binary.LittleEndian.PutUint64(p1[i:], x1)
		binary.LittleEndian.PutUint64(p2[i:], x2)
		binary.LittleEndian.PutUint64(p3[i:], x3)
	}
	for ; i < m; i++ {
		s := src[4*i : 4*i+4]
		p0[i], p1[i], p2[i], p3[i] = s[0], s[1], s[2], s[3]
	}
}

// unshuffle4Go is the reference loop for width 4 (shuffle4Go backwards).
func unshuffle4Go(dst, p0, p1, p2, p3 []byte) {
	m := len(p0)
	p1, p2, p3 = p1[:m], p2[:m], p3[:m]
	dst = dst[:4*m]
	i := 0
	for ; i+8 <= m; i += 8 {
		x0, x1, x2, x3 := transpose4x4x2(
			binary.LittleEndian.Uint64(p0[i:]), binary.LittleEndian.Uint64(p1[i:]),
			binary.LittleEndian.Uint64(p2[i:]), binary.LittleEndian.Uint64(p3[i:]))
		d := dst[4*i : 4*i+32]
		binary.LittleEndian.PutUint32(d[0:], uint32(x0))
		binary.LittleEndian.PutUint32(d[4:], uint32(x1))
		binary.LittleEndian.PutUint32(d[8:], uint32(x2))
		binary.LittleEndian.PutUint32(d[12:], uint32(x3))
		binary.LittleEndian.PutUint32(d[16:], uint32(x0>>32))
		binary.LittleEndian.PutUint32(d[20:], uint32(x1>>32))
		binary.LittleEndian.PutUint32(d[24:], uint32(x2>>32))
		binary.LittleEndian.PutUint32(d[28:], uint32(x3>>32))
	}
	for ; i < m; i++ {
		d := dst[4*i : 4*i+4]
		d[0], d[1], d[2], d[3] = p0[i], p1[i], p2[i], p3[i]
	}
}

// shuffle8Go is the reference loop for width 8: an 8x8 byte transpose per
// 8 elements.
func shuffle8Go(p *[8][]byte, src []byte) {
	m := len(p[0])
	src = src[:8*m]
	i := 0
	var x [8]uint64
	for ; i+8 <= m; i += 8 {
		s := src[8*i : 8*i+64]
		for j := range x {
			x[j] = binary.LittleEndian.Uint64(s[8*j:])
		}
		transpose8x8(&x)
		for k := range x {
			binary.LittleEndian.PutUint64(p[k][i:i+8], x[k])
		}
	}
	for ; i < m; i++ {
		for k := range p {
			p[k][i] = src[8*i+k]
		}
	}
}

// unshuffle8Go is the reference loop for width 8.
func unshuffle8Go(dst []byte, p *[8][]byte) {
	m := len(p[0])
	dst = dst[:8*m]
	i := 0
	var x [8]uint64
	for ; i+8 <= m; i += 8 {
		for k := range x {
			x[k] = binary.LittleEndian.Uint64(p[k][i : i+8])
		}
		transpose8x8(&x)
		d := dst[8*i : 8*i+64]
		for j := range x {
			binary.LittleEndian.PutUint64(d[8*j:], x[j])
		}
	}
	for ; i < m; i++ {
		for k := range p {
			dst[8*i+k] = p[k][i]
		}
	}
}
