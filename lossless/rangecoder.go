package lossless

// A binary range coder in the manner of LZMA's (docs/FORMAT.md, "Float
// context model"): a 32-bit range, a 64-bit low with a pending byte and a
// count of pending 0xff bytes for carries, probabilities of a 0 bit in
// 16 bits (1..65535), and direct bits coded as uniform values of up to
// 16 bits. The encoder writes exactly the bytes the decoder reads: the
// first is always 0, and the decoder refuses a stream that runs out, one
// with bytes left over, and one whose code is not 0 at its end.

type rcEncoder struct {
	low     uint64
	rng     uint32
	cache   byte
	pending int // bytes held back for a carry: the cache and 0xff bytes after it
	out     []byte
}

func (e *rcEncoder) reset(dst []byte) {
	*e = rcEncoder{rng: 0xffffffff, pending: 1, out: dst}
}

func (e *rcEncoder) shiftLow() {
	if uint32(e.low) < 0xff000000 || e.low>>32 != 0 {
		carry := byte(e.low >> 32)
		b := e.cache
		for ; e.pending > 0; e.pending-- {
			e.out = append(e.out, b+carry)
			b = 0xff
		}
		e.cache = byte(uint32(e.low) >> 24)
	}
	e.pending++
	e.low = uint64(uint32(e.low) << 8)
}

// encode codes bit (0 or 1) with p0, the probability of a 0 in 1/65536
// (1..65535).
func (e *rcEncoder) encode(p0 uint32, bit uint32) {
	e.rng, e.low = rcEncBit(e.rng, e.low, p0, bit)
	if e.rng < 1<<24 {
		e.normalize()
	}
}

// normalize shifts bytes out until the range is 2^24 or more again (out
// of line: about one step in eight).
//
//go:noinline
func (e *rcEncoder) normalize() {
	for e.rng < 1<<24 {
		e.rng <<= 8
		e.shiftLow()
	}
}

// direct codes v, below 2^w (w 1..16), with all 2^w values equally likely.
func (e *rcEncoder) direct(v uint32, w uint) {
	e.rng >>= w
	e.low += uint64(e.rng) * uint64(v)
	for e.rng < 1<<24 {
		e.rng <<= 8
		e.shiftLow()
	}
}

// finish flushes the coder and returns the stream.
func (e *rcEncoder) finish() []byte {
	for range 5 {
		e.shiftLow()
	}
	return e.out
}

type rcDecoder struct {
	code, rng uint32
	src       []byte
	pos       int
	overrun   bool // a read past the end of src
}

func (d *rcDecoder) reset(src []byte) bool {
	*d = rcDecoder{rng: 0xffffffff, src: src}
	if len(src) < 5 || src[0] != 0 {
		return false
	}
	for i := 1; i < 5; i++ {
		d.code = d.code<<8 | uint32(src[i])
	}
	d.pos = 5
	return true
}

func (d *rcDecoder) next() uint32 {
	if d.pos < len(d.src) {
		b := d.src[d.pos]
		d.pos++
		return uint32(b)
	}
	d.overrun = true
	return 0
}

func (d *rcDecoder) decode(p0 uint32) uint32 {
	bit, rng, code := rcBit(d.rng, d.code, p0)
	d.rng, d.code = rng, code
	if rng < 1<<24 {
		d.normalize()
	}
	return bit
}

// normalize shifts bytes in until the range is 2^24 or more again (out of
// line: about one step in eight).
//
//go:noinline
func (d *rcDecoder) normalize() {
	for d.rng < 1<<24 {
		d.rng <<= 8
		d.code = d.code<<8 | d.next()
	}
}

// direct decodes a value coded by rcEncoder.direct with the same w; ok is
// false when the stream holds a value of 2^w or more (corrupt).
func (d *rcDecoder) direct(w uint) (v uint32, ok bool) {
	d.rng >>= w
	v = d.code / d.rng
	if v >= 1<<w {
		return 0, false
	}
	d.code -= v * d.rng
	for d.rng < 1<<24 {
		d.rng <<= 8
		d.code = d.code<<8 | d.next()
	}
	return v, true
}

// done reports whether the stream ended exactly where the encoder's did.
func (d *rcDecoder) done() bool {
	return !d.overrun && d.pos == len(d.src) && d.code == 0
}

// tree decodes nb bits from the top as a binary tree of the counters t
// (by node, from 1; t holds 2^nb of them), updating them under limit: the
// same as nb calls of decode, with the coder's state in registers.
func (d *rcDecoder) tree(t []fcmCounter, nb uint, limit uint16) uint32 {
	rng, code := d.rng, d.code
	node := uint32(1)
	var bit uint32
	for range nb {
		c := &t[node]
		bit, rng, code = rcBit(rng, code, uint32(c.p))
		c.update(bit, limit)
		node = node<<1 | bit
		if rng < 1<<24 {
			rng, code = d.normalize2(rng, code)
		}
	}
	d.rng, d.code = rng, code
	return node - 1<<nb
}

// tree codes v, nb bits from the top, as a binary tree of the counters t
// (by node, from 1) under limit: the same as nb calls of encode.
func (e *rcEncoder) tree(t []fcmCounter, v uint32, nb uint, limit uint16) {
	rng, low := e.rng, e.low
	node := uint32(1)
	for i := int(nb) - 1; i >= 0; i-- {
		b := v >> uint(i) & 1
		c := &t[node]
		rng, low = rcEncBit(rng, low, uint32(c.p), b)
		c.update(b, limit)
		node = node<<1 | b
		if rng < 1<<24 {
			rng, low = e.normalize2(rng, low)
		}
	}
	e.rng, e.low = rng, low
}

// rcBit is one step of decode on a decoder's state (rng, code) held by
// the caller: the bit coded with probability p0 and the new state, which
// the caller normalizes.
func rcBit(rng, code, p0 uint32) (bit, rng1, code1 uint32) {
	// Without a branch on the bit (it is as often as not unpredictable):
	// code < bound is a 0, which keeps [0, bound); a 1 the rest.
	bound := (rng >> 16) * p0
	bit = 1 ^ uint32((uint64(code)-uint64(bound))>>63)
	mask := -bit
	return bit, bound ^ (bound^(rng-bound))&mask, code - bound&mask
}

// normalize2 normalizes a state (rng, code) the caller holds, which one
// step took below 2^24: one or two bytes in.
func (d *rcDecoder) normalize2(rng, code uint32) (uint32, uint32) {
	for rng < 1<<24 {
		rng <<= 8
		code = code<<8 | d.next()
	}
	return rng, code
}

// rcEncBit is one step of encode on an encoder's state (rng, low) held by
// the caller: bit coded with probability p0; the caller normalizes the new
// state (normalize2).
func rcEncBit(rng uint32, low uint64, p0, bit uint32) (uint32, uint64) {
	// Without a branch on the bit: a 0 keeps [low, low+bound), a 1 the rest.
	bound := (rng >> 16) * p0
	mask := -bit
	return bound ^ (bound^(rng-bound))&mask, low + uint64(bound&mask)
}

// normalize2 normalizes a state (rng, low) the caller holds.
func (e *rcEncoder) normalize2(rng uint32, low uint64) (uint32, uint64) {
	e.rng, e.low = rng, low
	e.normalize()
	return e.rng, e.low
}
