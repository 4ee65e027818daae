package lossless

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/tensorpress/tensorpress/codec"
)

// The floatrank stage codes the same segments as floatcm with a lighter
// model: on real weights 0.2-0.5% larger, at 1.4-5.6 times floatcm's speed
// (docs/BENCHMARKS.md, "floatrank"):
//
//   - the exponent by its rank among the segment's exponents (by count,
//     the counts halving when one reaches 64), as a binary tree of 4 levels
//     under the exponent before; rank 15 escapes to the exponent itself;
//   - the sign and the mantissa's top bits as floatcm codes them, the
//     rest of a float16's or bfloat16's mantissa as it is (their low bits
//     are near uniform in weights), packed apart from the range coder; a
//     float32's as floatcm codes it;
//   - the exponents in one range-coded stream, the rest in another, so
//     that the decoder's two chains of steps overlap.
//
// docs/FORMAT.md ("Float rank model") specifies it to the bit. Wire
// parameters: none. Recipe: "floatrank". A Coder, like floatcm.
var floatrankStage = &codec.Stage{
	ID:         FloatrankID,
	Name:       "floatrank",
	Kind:       codec.Coder,
	SlowDecode: true,
	Reads:      "a segment of float32, bfloat16 or float16 elements",
	Writes:     "two range-coded streams, exponents by rank under the exponent before and signs and mantissas, then float16's and bfloat16's low mantissa bits packed",
	Doc:        "floats through a light context model and a range coder: near floatcm's ratio, tens of MB/s",
	New: func(args []codec.Arg) (codec.Op, error) {
		if len(args) != 0 {
			return nil, fmt.Errorf("%w: floatrank takes no arguments", codec.ErrRecipe)
		}
		return floatcmOp{model: floatcmRank}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 0 {
			return nil, fmt.Errorf("%w: floatrank params %x: want none", codec.ErrCorrupt, p)
		}
		return floatcmOp{model: floatcmRank}, nil
	},
}

// fcmRankStart is the counters of a rank tree at the start: by level,
// from the root, the probability of a 0 of ranks falling off as 0.7^rank
// (0.94, 0.78, 0.67, 0.59), and a count of 3, as if learned already, so
// that a short segment pays less for learning (frames of 16 KiB of real
// weights 0.4-0.6% smaller; docs/BENCHMARKS.md, "floatrank").
var fcmRankStart = func() (t [1 << fcmRankBits]fcmCounter) {
	level := [fcmRankBits]uint16{61603, 51118, 43909, 38666}
	for node := 1; node < len(t); node++ {
		t[node] = fcmCounter{p: level[bits.Len(uint(node))-1], n: 3}
	}
	return t
}()

// promote counts exponent ex and moves it up the ranks past those
// counted less often (ties keep their order). When its count reaches
// fcmRankHalve, every count halves (rounding down), so that the ranks
// follow the exponents of the last few hundred elements.
func (m *fcm) promote(ex uint32) {
	c := m.cnt[ex] + 1
	m.cnt[ex] = c
	r := m.rank[ex]
	for r > 0 {
		o := m.order[r-1]
		if m.cnt[o] >= c {
			break
		}
		m.order[r], m.rank[o] = o, r
		r--
	}
	m.order[r], m.rank[ex] = uint8(ex), r
	if c == fcmRankHalve {
		// Halving keeps the order (counts at least equal stay so).
		for i := range m.cnt[:1<<m.f.eb] {
			m.cnt[i] >>= 1
		}
	}
}

// appendRank codes the elements of src (whole ones) with floatrank's
// model and returns the segment: the uvarint lengths of the exponents'
// stream and of the signs' and mantissas' stream, the two streams, and the
// low mantissa bits of 2-byte floats as they are.
func (m *fcm) appendRank(a *codec.Arena, info codec.SegInfo, src []byte) []codec.Segment {
	f := m.f
	var x, e rcEncoder
	x.reset(m.xbuf[:0])
	e.reset(m.rbuf[:0])
	w := bitWriter{out: m.lbuf[:0]}
	for i := range len(src) / f.size {
		v := f.load(src, i)
		ex := v >> f.mb & (1<<f.eb - 1)
		r := min(uint32(m.rank[ex]), fcmRankEsc)
		x.tree(m.ro1[uint8(m.e1)][:], r, fcmRankBits, fcmExpLimit)
		if r == fcmRankEsc {
			x.tree(m.o0[:], ex, f.eb, fcmExpLimit)
		}
		m.promote(ex)
		if m.rawLow {
			m.encodeRest16(&e, &w, v)
		} else {
			m.encodeRest(&e, v)
		}
	}
	xs, rest, lows := x.finish(), e.finish(), w.finish()
	m.xbuf, m.rbuf, m.lbuf = xs[:0], rest[:0], lows[:0]
	data := a.Alloc(2*binary.MaxVarintLen64 + len(xs) + len(rest) + len(lows))[:0]
	data = binary.AppendUvarint(data, uint64(len(xs)))
	data = binary.AppendUvarint(data, uint64(len(rest)))
	data = append(append(append(data, xs...), rest...), lows...)
	info.Len = len(data)
	return []codec.Segment{{SegInfo: info, Data: data}}
}

// encodeRest16 is encodeRest for float16 and bfloat16 in floatrank: the
// sign and the top 2 mantissa bits with e, the low bits into w.
func (m *fcm) encodeRest16(e *rcEncoder, w *bitWriter, v uint32) {
	eb, mb, lb := m.f.eb&15, m.f.mb&15, m.low&15
	ex := v >> mb & (1<<eb - 1)
	s := v >> ((eb + mb) & 31) & 1
	c := &m.sign[(ex<<1|m.s1)&511]
	rng, low := rcEncBit(e.rng, e.low, uint32(c.p), s)
	c.update(s, fcmBitLimit)
	if rng < 1<<24 {
		rng, low = e.normalize2(rng, low)
	}
	m.e2, m.e1, m.s1 = m.e1, ex, s
	mant := v & (1<<mb - 1)
	if ex == 0 {
		e.rng, e.low = rng, low
		e.tree(m.mz[s<<mb:(s+1)<<mb], mant, mb, fcmBitLimit)
		return
	}
	t := (*[1 << fcmTopBits]fcmCounter)(m.mant[(ex<<1|s)<<fcmTopBits:])
	b := mant >> (lb + 1) & 1
	c = &t[1]
	rng, low = rcEncBit(rng, low, uint32(c.p), b)
	c.update(b, fcmBitLimit)
	if rng < 1<<24 {
		rng, low = e.normalize2(rng, low)
	}
	c = &t[2|b]
	b = mant >> lb & 1
	rng, low = rcEncBit(rng, low, uint32(c.p), b)
	c.update(b, fcmBitLimit)
	if rng < 1<<24 {
		rng, low = e.normalize2(rng, low)
	}
	e.rng, e.low = rng, low
	w.put(mant&(1<<lb-1), lb)
}

// decodeRank decodes floatrank's segment src into out, whole elements.
func (m *fcm) decodeRank(out, src []byte) error {
	f := m.f
	n := len(out) / f.size
	var lens [2]int
	for j := range lens {
		l, k := binary.Uvarint(src)
		if k <= 0 || k != uvarintLen(l) || l > uint64(len(src)-k) {
			return fmt.Errorf("%w: floatrank: a segment of %d bytes does not start with its streams' lengths", codec.ErrCorrupt, len(src))
		}
		lens[j], src = int(l), src[k:]
	}
	if lens[0]+lens[1] > len(src) {
		return fmt.Errorf("%w: floatrank: streams of %d and %d bytes in %d", codec.ErrCorrupt, lens[0], lens[1], len(src))
	}
	var x, d rcDecoder
	if !x.reset(src[:lens[0]]) || !d.reset(src[lens[0]:lens[0]+lens[1]]) {
		return fmt.Errorf("%w: floatrank: streams of %d and %d bytes do not start as the range coder's", codec.ErrCorrupt, lens[0], lens[1])
	}
	lr := bitReader{src: src[lens[0]+lens[1]:]}
	for i := range n {
		var ex uint32
		if r := x.tree(m.ro1[uint8(m.e1)][:], fcmRankBits, fcmExpLimit); r < fcmRankEsc {
			ex = uint32(m.order[r])
		} else {
			ex = x.tree(m.o0[:], f.eb, fcmExpLimit)
			if m.rank[ex] < fcmRankEsc {
				return fmt.Errorf("%w: floatrank: element %d of %d: an escape for an exponent of rank %d", codec.ErrCorrupt, i, n, m.rank[ex])
			}
		}
		m.promote(ex)
		var v uint32
		var ok bool
		if m.rawLow {
			v, ok = m.decodeRest16(&d, &lr, ex)
		} else {
			v, ok = m.decodeRest(&d, ex)
		}
		if !ok || x.overrun || d.overrun {
			return fmt.Errorf("%w: floatrank: the streams end or go out of range at element %d of %d", codec.ErrCorrupt, i, n)
		}
		f.store(out, i, v)
	}
	if !x.done() || !d.done() || !lr.done() {
		return fmt.Errorf("%w: floatrank: the streams do not end after %d elements", codec.ErrCorrupt, n)
	}
	return nil
}

// decodeRest16 is decodeRest for float16 and bfloat16 in floatrank: the
// sign and the top 2 mantissa bits from d, the low bits from lr.
func (m *fcm) decodeRest16(d *rcDecoder, lr *bitReader, ex uint32) (v uint32, ok bool) {
	eb, mb := m.f.eb&15, m.f.mb&15
	c := &m.sign[(ex<<1|m.s1)&511]
	s, rng, code := rcBit(d.rng, d.code, uint32(c.p))
	c.update(s, fcmBitLimit)
	if rng < 1<<24 {
		rng, code = d.normalize2(rng, code)
	}
	m.e2, m.e1, m.s1 = m.e1, ex, s
	v = s<<((eb+mb)&31) | ex<<mb
	if ex == 0 {
		// Zeros and subnormals: the whole mantissa under the sign.
		d.rng, d.code = rng, code
		return v | d.tree(m.mz[s<<mb:(s+1)<<mb], mb, fcmBitLimit), true
	}
	// The top 2 bits under the exponent and the sign, the low ones as
	// they are.
	t := (*[1 << fcmTopBits]fcmCounter)(m.mant[(ex<<1|s)<<fcmTopBits:])
	var bit uint32
	c = &t[1]
	bit, rng, code = rcBit(rng, code, uint32(c.p))
	c.update(bit, fcmBitLimit)
	node := 2 | bit
	if rng < 1<<24 {
		rng, code = d.normalize2(rng, code)
	}
	c = &t[node&3]
	bit, rng, code = rcBit(rng, code, uint32(c.p))
	c.update(bit, fcmBitLimit)
	if rng < 1<<24 {
		rng, code = d.normalize2(rng, code)
	}
	d.rng, d.code = rng, code
	low := m.low & 15
	lo, ok := lr.get(low)
	return v | ((node<<1|bit)&3)<<low | lo, ok
}

// bitWriter packs values of a few bits, the first in the lowest bits of
// the first byte.
type bitWriter struct {
	out []byte
	acc uint64
	n   uint // bits in acc
}

func (w *bitWriter) put(v uint32, k uint) {
	w.acc |= uint64(v) << w.n
	w.n += k
	if w.n >= 32 {
		w.out = binary.LittleEndian.AppendUint32(w.out, uint32(w.acc))
		w.acc >>= 32
		w.n -= 32
	}
}

// finish writes the bits left, the last byte padded with zeros.
func (w *bitWriter) finish() []byte {
	for ; w.n > 0; w.n -= min(w.n, 8) {
		w.out = append(w.out, byte(w.acc))
		w.acc >>= 8
	}
	return w.out
}

// bitReader reads what a bitWriter wrote.
type bitReader struct {
	src []byte
	acc uint64
	n   uint // bits in acc
}

// get returns the next k bits (k <= 24); ok is false past the end.
func (r *bitReader) get(k uint) (v uint32, ok bool) {
	if r.n < k {
		if len(r.src) >= 4 {
			r.acc |= uint64(binary.LittleEndian.Uint32(r.src)) << r.n
			r.src = r.src[4:]
			r.n += 32
		} else {
			for r.n < k && len(r.src) > 0 {
				r.acc |= uint64(r.src[0]) << r.n
				r.src = r.src[1:]
				r.n += 8
			}
			if r.n < k {
				return 0, false
			}
		}
	}
	v = uint32(r.acc) & (1<<k - 1)
	r.acc >>= k
	r.n -= k
	return v, true
}

// done reports whether every byte was read and the padding is zeros.
func (r *bitReader) done() bool {
	return len(r.src) == 0 && r.n < 8 && r.acc == 0
}
