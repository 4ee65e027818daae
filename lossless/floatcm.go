package lossless

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/tensorpress/tensorpress/codec"
)

// The floatcm stage codes float32, bfloat16 and float16 segments with an
// adaptive context model and a binary range coder: the densest lossless
// coding of model weights here, at tens of MB/s (docs/BENCHMARKS.md,
// "Float context model"). Each element's fields are coded in turn:
//
//   - the exponent, bit by bit from the top, each bit's probability the
//     logistic mix of three adaptive models (no context, the exponent
//     before, the two before), so that it follows both the drift of
//     exponents along a tensor and their order-2 context;
//   - the sign, given the exponent and the sign before;
//   - the mantissa's top two bits, given the exponent and sign (all of it
//     for a zero exponent field of a 2-byte float: zeros and subnormals);
//   - below them, the number of trailing zero bits (given the number the
//     element before had: values stored at a lower precision, such as
//     float16 or bfloat16 values in float32, end in runs of zeros) and
//     the bits above them, as they are (near uniform).
//
// Every bit pattern codes exactly (NaN payloads, -0, subnormals). The
// models start afresh in every segment, so frames decode on their own.
// docs/FORMAT.md ("Float context model") specifies the model to the bit.
//
// Wire parameters: 1 byte, the model (1). Recipe: "floatcm". A Coder: it
// ends the segment's pipeline and takes whole elements only.
var floatcmStage = &codec.Stage{
	ID:         FloatcmID,
	Name:       "floatcm",
	Kind:       codec.Coder,
	SlowDecode: true,
	Reads:      "a segment of float32, bfloat16 or float16 elements",
	Writes:     "one range-coded stream: exponents, signs and top mantissa bits under adaptive context models, trailing zeros counted",
	Doc:        "floats through an adaptive context model and a range coder: the best ratio on weights, some MB/s",
	New: func(args []codec.Arg) (codec.Op, error) {
		if len(args) != 0 {
			return nil, fmt.Errorf("%w: floatcm takes no arguments", codec.ErrRecipe)
		}
		return floatcmOp{model: floatcmMix}, nil
	},
	Load: func(p []byte) (codec.Op, error) {
		if len(p) != 1 || p[0] != floatcmMix {
			return nil, fmt.Errorf("%w: floatcm params %x: want one byte, model %d", codec.ErrCorrupt, p, floatcmMix)
		}
		return floatcmOp{model: floatcmMix}, nil
	},
}

func init() {
	codec.Register(floatcmStage)
	codec.Register(floatrankStage)
}

// The models: floatcm's mixes three predictions of each exponent bit;
// floatrank's codes exponents by rank.
const (
	floatcmMix  = 1 // floatcm's model number on the wire
	floatcmRank = 2
)

// floatcmOp is floatcm (model floatcmMix) or floatrank (floatcmRank).
type floatcmOp struct{ model uint8 }

var _ codec.Op = floatcmOp{}

func (o floatcmOp) Stage() *codec.Stage {
	if o.model == floatcmRank {
		return floatrankStage
	}
	return floatcmStage
}

func (o floatcmOp) String() string { return o.Stage().Name }

func (o floatcmOp) AppendParams(dst []byte) []byte {
	if o.model == floatcmRank {
		return dst
	}
	return append(dst, floatcmMix)
}

func (floatcmOp) Outputs(in codec.SegInfo) ([]codec.SegInfo, error) {
	f, ok := floatFieldsOf(in.Elem)
	if !ok {
		return nil, fmt.Errorf("floatcm: segment %q holds %v; it takes float32, bfloat16 or float16", in.Name, in.Elem)
	}
	if in.Len >= 0 && in.Len%f.size != 0 {
		return nil, fmt.Errorf("floatcm: segment %q of %d bytes is not whole %v elements", in.Name, in.Len, in.Elem)
	}
	return []codec.SegInfo{{Name: in.Name, Elem: codec.Byte, Len: -1}}, nil
}

func (o floatcmOp) Encode(ctx *codec.Ctx, in codec.Segment) ([]codec.Segment, error) {
	outs, err := o.Outputs(in.SegInfo)
	if err != nil {
		return nil, err
	}
	f, _ := floatFieldsOf(in.Elem)
	var a *codec.Arena
	if ctx != nil {
		a = ctx.Arena
	}
	m := getFCM(f, o.model)
	defer fcmPool.Put(m)
	n := len(in.Data) / f.size
	if m.model != floatcmRank {
		var e rcEncoder
		// Incompressible input grows by well under 1%; the arena slice
		// only saves the first allocation.
		e.reset(a.Alloc(len(in.Data) + len(in.Data)/64 + 16)[:0])
		for i := range n {
			m.encode(&e, f.load(in.Data, i))
		}
		data := e.finish()
		outs[0].Len = len(data)
		return []codec.Segment{{SegInfo: outs[0], Data: data}}, nil
	}
	return m.appendRank(a, outs[0], in.Data[:n*f.size]), nil
}

func (o floatcmOp) Decode(_ *codec.Ctx, dst []byte, parts []codec.Segment, in codec.SegInfo) ([]byte, error) {
	f, ok := floatFieldsOf(in.Elem)
	if len(parts) != 1 || !ok || in.Len < 0 || in.Len%f.size != 0 {
		return nil, fmt.Errorf("%w: %v: want 1 segment and whole float elements", codec.ErrCorrupt, o)
	}
	src := parts[0].Data
	m := getFCM(f, o.model)
	defer fcmPool.Put(m)
	start := len(dst)
	dst = slices.Grow(dst, in.Len)[:start+in.Len]
	if o.model == floatcmRank {
		if err := m.decodeRank(dst[start:], src); err != nil {
			return nil, err
		}
		return dst, nil
	}
	var d rcDecoder
	if !d.reset(src) {
		return nil, fmt.Errorf("%w: floatcm: a stream of %d bytes does not start as the range coder's", codec.ErrCorrupt, len(src))
	}
	out := dst[start:]
	n := in.Len / f.size
	for i := range n {
		v, ok := m.decode(&d)
		if !ok {
			return nil, fmt.Errorf("%w: floatcm: element %d of %d out of range", codec.ErrCorrupt, i, n)
		}
		if d.overrun {
			return nil, fmt.Errorf("%w: floatcm: the stream ends at element %d of %d", codec.ErrCorrupt, i, n)
		}
		f.store(out, i, v)
	}
	if !d.done() {
		return nil, fmt.Errorf("%w: floatcm: the stream of %d bytes does not end after %d elements (read %d)", codec.ErrCorrupt, len(src), n, d.pos)
	}
	return dst, nil
}

func (f floatFields) load(b []byte, i int) uint32 {
	if f.size == 4 {
		return binary.LittleEndian.Uint32(b[4*i:])
	}
	return uint32(binary.LittleEndian.Uint16(b[2*i:]))
}

func (f floatFields) store(b []byte, i int, v uint32) {
	if f.size == 4 {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	} else {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	}
}

// Model constants (docs/FORMAT.md, "Float context model"); changing any
// of them changes the model, and needs a new model number.
const (
	fcmTopBits   = 2                  // mantissa bits under the exponent's context
	fcmExpLimit  = 6                  // adaptation limits (shift) of the counters
	fcmBitLimit  = 6                  // sign and mantissa
	fcmTZLimit   = 7                  // trailing zeros
	fcmDiffClass = 4                  // order 2: e2-e1 clamped to [-4, 3]
	fcmMaxDirect = 16                 // direct bits coded at once
	fcmRankBits  = 4                  // floatrank: exponent ranks coded as a tree of 4 levels
	fcmRankEsc   = 1<<fcmRankBits - 1 // the escape: ranks from 15 on
	fcmRankHalve = 64                 // floatrank: counts halve when one reaches it
)

// fcmCounter is an adaptive probability: p is the probability of a 0 bit
// in 1/65536, n the number of updates while below the counter's limit.
type fcmCounter struct {
	p, n uint16
}

func (c *fcmCounter) update(bit uint32, limit uint16) {
	r := c.n + 1
	if r >= limit {
		r = limit
	} else {
		c.n++
	}
	// Without a branch on the bit: p + d0 for a 0, p - d1 for a 1. (r is
	// at most 16: the mask spares the compiler's check for shifts past 31.)
	p := uint32(c.p)
	d0, d1 := (65536-p)>>(r&31), p>>(r&31)
	c.p = uint16(p + d0 - (d0+d1)&-bit)
}

// fcmTree is the counters of an exponent tree, by node (1..2^E-1): arrays
// of 256, indexed by a byte, so that the coder's inner loop does not
// check bounds.
type fcmTree [256]fcmCounter

func (t *fcmTree) start(ne int) {
	for i := range t[:ne] {
		t[i] = fcmCounter{p: 32768}
	}
}

// fcm is the state of the model for one segment.
type fcm struct {
	f              floatFields
	model          uint8
	top, low       uint // mantissa bits modelled under the exponent, bits below them
	o0             fcmTree
	o1, o2         []fcmTree     // by context: e1; e1 and the class of e2-e1
	w              [256][4]int32 // mixer weights by exponent tree node
	sign, mant, mz []fcmCounter
	tz             []fcmCounter
	e1, e2, s1     uint32   // the exponents and sign of the elements before
	tz1            uint32   // trailing zeros of the last element coded with them
	stamp          []uint32 // per context of o1, then o2: the gen that last set it up
	gen            uint32
	st             [3]int32 // the last prediction's stretched inputs
	p1             int32    // and its mixed probability of a 1, in 1/4096

	// Model 2: exponents by rank of their count so far, in unary under
	// the exponent before; low mantissa bits of 2-byte floats as they are.
	cnt         [256]uint8 // counts since the last halving
	order, rank [256]uint8 // exponent by rank, rank by exponent
	ro1         [256][1 << fcmRankBits]fcmCounter
	rawLow      bool   // floatrank's 2-byte floats: encodeRest16, decodeRest16
	xbuf, rbuf  []byte // the encoder's range-coded streams
	lbuf        []byte // and its low mantissa bits
}

var fcmPool sync.Pool

func getFCM(f floatFields, model uint8) *fcm {
	m, _ := fcmPool.Get().(*fcm)
	if m == nil {
		m = new(fcm)
	}
	m.model = model
	m.reset(f)
	return m
}

func fcmCounters(s []fcmCounter, n int) []fcmCounter {
	s = slices.Grow(s[:0], n)[:n]
	for i := range s {
		s[i] = fcmCounter{p: 32768}
	}
	return s
}

func (m *fcm) reset(f floatFields) {
	ne := 1 << f.eb // exponent values, and tree nodes 1..ne-1
	if m.f != f {
		// The context tables start afresh lazily (see expCtx): a segment of
		// a few elements does not pay for clearing them all.
		m.o1 = slices.Grow(m.o1[:0], ne)[:ne]
		m.o2 = slices.Grow(m.o2[:0], ne*2*fcmDiffClass)[:ne*2*fcmDiffClass]
		m.stamp = make([]uint32, ne+ne*2*fcmDiffClass)
		m.gen = 0
	}
	m.gen++
	if m.gen == 0 { // wrapped: no stamp may look current
		clear(m.stamp)
		m.gen = 1
	}
	m.f = f
	m.top = min(fcmTopBits, f.mb)
	m.low = f.mb - m.top
	m.o0.start(ne)
	for i := range ne {
		m.w[i] = [4]int32{1 << 15, 1 << 15, 1 << 15, 0}
	}
	m.sign = fcmCounters(m.sign, 2*ne)
	m.mant = fcmCounters(m.mant, 2*ne<<m.top)
	m.mz = m.mz[:0]
	if f.mb <= 10 { // float32's zero exponents take the common path
		m.mz = fcmCounters(m.mz, 2<<f.mb)
	}
	m.tz = fcmCounters(m.tz, int(m.low)*int(m.low+1))
	m.e1, m.e2, m.s1, m.tz1 = 0, 0, 0, 0
	m.rawLow = m.model == floatcmRank && f.size == 2
	if m.model == floatcmRank {
		for i := range ne {
			m.cnt[i], m.order[i], m.rank[i] = 0, uint8(i), uint8(i)
			m.ro1[i] = fcmRankStart
		}
	}
}

// expCtx returns the order-1 and order-2 tables of the next exponent,
// setting them to their start the first time a segment uses them.
func (m *fcm) expCtx() (t1, t2 *fcmTree) {
	ne := uint32(1) << m.f.eb
	d := int32(m.e2) - int32(m.e1)
	d = min(max(d, -fcmDiffClass), fcmDiffClass-1) + fcmDiffClass
	c2 := m.e1*2*fcmDiffClass + uint32(d)
	t1, t2 = &m.o1[m.e1], &m.o2[c2]
	if m.stamp[m.e1] != m.gen {
		m.stamp[m.e1] = m.gen
		t1.start(int(ne))
	}
	if m.stamp[ne+c2] != m.gen {
		m.stamp[ne+c2] = m.gen
		t2.start(int(ne))
	}
	return t1, t2
}

// predict mixes the three predictions of an exponent bit at node and
// returns the probability of a 0 as the range coder takes it; learn
// updates the mixer and the counters with the bit.
func (m *fcm) predict(t1, t2 *fcmTree, node uint32) uint32 {
	n := uint8(node)
	w := &m.w[n]
	s0, s1, s2 := fcmStretch(m.o0[n].p), fcmStretch(t1[n].p), fcmStretch(t2[n].p)
	m.st = [3]int32{s0, s1, s2}
	dot := int64(w[0])*int64(s0) + int64(w[1])*int64(s1) + int64(w[2])*int64(s2) + int64(w[3])*256
	m.p1 = min(max(fcmSquash(dot>>16), 1), 4095)
	return uint32(4096-m.p1) << 4
}

func (m *fcm) learn(t1, t2 *fcmTree, node, bit uint32) {
	n := uint8(node)
	w := &m.w[n]
	err := int32(bit)<<12 - m.p1
	w[0] += (m.st[0]*err + 2048) >> 12
	w[1] += (m.st[1]*err + 2048) >> 12
	w[2] += (m.st[2]*err + 2048) >> 12
	w[3] += (256*err + 2048) >> 12
	m.o0[n].update(bit, fcmExpLimit)
	t1[n].update(bit, fcmExpLimit)
	t2[n].update(bit, fcmExpLimit)
}

// encode codes one element with floatcm's model.
func (m *fcm) encode(e *rcEncoder, v uint32) {
	f := m.f
	ex := v >> f.mb & (1<<f.eb - 1)
	t1, t2 := m.expCtx()
	node := uint32(1)
	for i := int(f.eb) - 1; i >= 0; i-- {
		b := ex >> uint(i) & 1
		e.encode(m.predict(t1, t2, node), b)
		m.learn(t1, t2, node, b)
		node = node<<1 | b
	}
	m.encodeRest(e, v)
}

// encodeRest codes the sign and the mantissa of element v, whose
// exponent is coded, and makes it the element before.
func (m *fcm) encodeRest(e *rcEncoder, v uint32) {
	f := m.f
	mant := v & (1<<f.mb - 1)
	ex := v >> f.mb & (1<<f.eb - 1)
	s := v >> (f.mb + f.eb) & 1
	c := &m.sign[ex<<1|m.s1]
	e.encode(uint32(c.p), s)
	c.update(s, fcmBitLimit)
	m.e2, m.e1, m.s1 = m.e1, ex, s

	if ex == 0 && len(m.mz) > 0 {
		t := m.mz[s<<f.mb : (s+1)<<f.mb]
		e.tree(t, mant, f.mb, fcmBitLimit)
		return
	}
	t := m.mant[(ex<<1|s)<<m.top : (ex<<1|s+1)<<m.top]
	e.tree(t, mant>>m.low, m.top, fcmBitLimit)
	if m.low == 0 {
		return
	}
	low := mant & (1<<m.low - 1)
	tz := uint32(m.low)
	if low != 0 {
		tz = uint32(bits.TrailingZeros32(low))
	}
	for j := uint32(0); j < uint32(m.low); j++ {
		c := &m.tz[j*uint32(m.low+1)+m.tz1]
		b := uint32(0)
		if j == tz {
			b = 1
		}
		e.encode(uint32(c.p), b)
		c.update(b, fcmTZLimit)
		if b == 1 {
			break
		}
	}
	m.tz1 = tz
	if tz+1 < uint32(m.low) {
		rest, w := low>>(tz+1), uint(uint32(m.low)-tz-1)
		for w > fcmMaxDirect {
			w -= fcmMaxDirect
			e.direct(rest>>w, fcmMaxDirect)
			rest &= 1<<w - 1
		}
		e.direct(rest, w)
	}
}

// decode decodes one element with floatcm's model; ok is false for a
// corrupt stream.
func (m *fcm) decode(d *rcDecoder) (v uint32, ok bool) {
	t1, t2 := m.expCtx()
	node := uint32(1)
	for range m.f.eb {
		b := d.decode(m.predict(t1, t2, node))
		m.learn(t1, t2, node, b)
		node = node<<1 | b
	}
	return m.decodeRest(d, node-1<<m.f.eb)
}

// decodeRest decodes the sign and the mantissa of an element of exponent
// ex, makes it the element before, and returns it; ok is false for a
// corrupt stream.
func (m *fcm) decodeRest(d *rcDecoder, ex uint32) (v uint32, ok bool) {
	f := m.f
	c := &m.sign[ex<<1|m.s1]
	s := d.decode(uint32(c.p))
	c.update(s, fcmBitLimit)
	m.e2, m.e1, m.s1 = m.e1, ex, s
	head := s<<(f.mb+f.eb) | ex<<f.mb

	if ex == 0 && len(m.mz) > 0 {
		t := m.mz[s<<f.mb : (s+1)<<f.mb]
		return head | d.tree(t, f.mb, fcmBitLimit), true
	}
	t := m.mant[(ex<<1|s)<<m.top : (ex<<1|s+1)<<m.top]
	mant := d.tree(t, m.top, fcmBitLimit) << m.low
	if m.low == 0 {
		return head | mant, true
	}
	tz := uint32(m.low)
	for j := uint32(0); j < uint32(m.low); j++ {
		c := &m.tz[j*uint32(m.low+1)+m.tz1]
		b := d.decode(uint32(c.p))
		c.update(b, fcmTZLimit)
		if b == 1 {
			tz = j
			break
		}
	}
	m.tz1 = tz
	if tz == uint32(m.low) {
		return head | mant, true
	}
	low := uint32(1) << tz
	if tz+1 < uint32(m.low) {
		var rest uint32
		for w := uint(uint32(m.low) - tz - 1); w > 0; {
			k := min(w, fcmMaxDirect)
			w -= k
			r, ok := d.direct(k)
			if !ok {
				return 0, false
			}
			rest = rest<<k | r
		}
		low |= rest << (tz + 1)
	}
	return head | mant | low, true
}

// The logistic functions of the mixer, in integers so that every platform
// mixes alike: squash(d) = 4096/(1+e^(-d/256)) by linear interpolation
// between 33 points, stretch its inverse on 1..4095.
var fcmSquashPoints = [33]int32{1, 2, 4, 6, 10, 17, 27, 45, 74, 120, 194, 311, 488, 747, 1102, 1546,
	2048, 2550, 2994, 3349, 3608, 3785, 3902, 3976, 4022, 4051, 4069, 4079, 4086, 4090, 4092, 4094, 4095}

func fcmSquash(d int64) int32 {
	if d > 2047 {
		return 4095
	}
	if d < -2047 {
		return 1
	}
	x := int32(d)
	w := x & 127
	i := x>>7 + 16
	return (fcmSquashPoints[i]*(128-w) + fcmSquashPoints[i+1]*w + 64) >> 7
}

var fcmStretchTable = func() (t [4096]int16) {
	next := int32(0)
	for x := int32(-2047); x <= 2047; x++ {
		v := fcmSquash(int64(x))
		for ; next <= v; next++ {
			t[next] = int16(x)
		}
	}
	for ; next < 4096; next++ {
		t[next] = 2047
	}
	return t
}()

// fcmStretchP0 is stretch(clamp((65536-p0)>>4, 1, 4095)) by (p0-1)>>4:
// (65536-p0)>>4 = 4095 - (p0-1)>>4 for p0 in 1..65535.
var fcmStretchP0 = func() (t [4096]int16) {
	for i := range t {
		t[i] = fcmStretchTable[max(4095-i, 1)]
	}
	return t
}()

// fcmStretch is the stretched probability of a 1 for a counter whose
// probability of a 0 is p0 (in 1/65536, 1..65535).
func fcmStretch(p0 uint16) int32 {
	return int32(fcmStretchP0[(p0-1)>>4])
}
