package codec

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"

	"github.com/tensorpress/tensorpress/internal/view"
)

// Frame is a decoded frame.
type Frame struct {
	Header  *FrameHeader
	Tensors []*Tensor // tensor and tensors frames: each owns its Data
	Bytes   []byte    // bytes frames
	Control []byte    // control frames: the payload (Header.Control is the kind)
}

// Decoder decodes frames held in memory. It is safe for concurrent use.
type Decoder struct {
	lim    Limits // zero: DefaultLimits
	finite bool   // DecodeAdd refuses non-finite values (WithFiniteAdd)
}

var defaultLimits = DefaultLimits()

// limits returns the Decoder's limits (the zero Decoder's are the defaults).
func (d *Decoder) limits() *Limits {
	if d.lim.MaxHeaderSize == 0 {
		return &defaultLimits
	}
	return &d.lim
}

// NewDecoder returns a Decoder. It takes WithLimits (default
// DefaultLimits) and refuses the options that only a Reader uses.
func NewDecoder(opts ...DOption) (*Decoder, error) {
	cfg, err := newDConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.streamOnly != "" {
		return nil, fmt.Errorf("codec: NewDecoder: %s applies to a Reader, not a Decoder", cfg.streamOnly)
	}
	return &Decoder{lim: cfg.lim, finite: cfg.finite}, nil
}

// DecodeFrame decodes the frame at the start of src and returns it with
// the number of bytes it took. A frame cut short gives io.ErrUnexpectedEOF.
// The decoded data is freshly allocated and owned by the caller.
func (d *Decoder) DecodeFrame(src []byte) (*Frame, int, error) {
	return d.DecodeFrameInto(nil, src)
}

// DecodeFrameInto is DecodeFrame, decoding into buf's memory when buf has
// the capacity for every entry (each entry's data starts 8-byte aligned
// when buf does; AlignedBytes makes such a buffer). The returned tensors
// and bytes then alias buf: reusing buf for the next frame saves the
// allocation and page faults of a fresh buffer per frame.
func (d *Decoder) DecodeFrameInto(buf []byte, src []byte) (*Frame, int, error) {
	h, err := parseFrameHeader(src, d.limits())
	if err != nil {
		return nil, 0, err
	}
	end := h.FrameLen()
	if end > int64(len(src)) {
		return nil, 0, io.ErrUnexpectedEOF
	}
	a := getArena()
	var into func(int) []byte
	if need := alignedTotal(h); buf != nil && int64(cap(buf)) >= need {
		buf = buf[:0]
		into = func(i int) []byte {
			off := (len(buf) + 7) &^ 7
			buf = buf[:off+int(h.Entries[i].RawLen)]
			return buf[off:off:len(buf)]
		}
	}
	f, err := decodePayload(h, src[h.HeaderLen:end], d.limits(), a, into)
	putArena(a)
	if err != nil {
		return nil, 0, err
	}
	return f, int(end), nil
}

// alignedTotal is the room DecodeFrameInto needs: every entry's decoded
// length, each rounded up to 8 bytes.
func alignedTotal(h *FrameHeader) int64 {
	var n int64
	for _, e := range h.Entries {
		n += (e.RawLen + 7) &^ 7
	}
	return n
}

// decodePayload checks the payload CRC and decodes every entry, with
// scratch from arena (reset before it returns). raw is the payload
// followed by its CRC when the header says so. When into is
// not nil it returns, for entry i, the buffer to decode into (len 0, cap
// at least the entry's RawLen), or nil to allocate one.
func decodePayload(h *FrameHeader, raw []byte, lim *Limits, arena *Arena, into func(i int) []byte) (*Frame, error) {
	payload := raw
	if h.PayloadCRC {
		payload = raw[:len(raw)-4]
		want := binary.LittleEndian.Uint32(raw[len(raw)-4:])
		if got := crc32.Checksum(payload, castagnoli); got != want {
			return nil, fmt.Errorf("%w: payload CRC %08x, computed %08x", ErrChecksum, want, got)
		}
	}
	f := &Frame{Header: h}
	switch h.Type {
	case FrameControl:
		f.Control = append([]byte(nil), payload...)
		return f, nil
	case FrameHello, FrameEnd:
		return f, nil
	}
	for i := range h.Entries {
		e := &h.Entries[i]
		seg := payload[:e.Payload]
		payload = payload[e.Payload:]
		var dst []byte
		if into != nil {
			dst = into(i)
		}
		if dst == nil {
			dst = AlignedBytes(int(e.RawLen))[:0]
		}
		t := e.Tensor
		out, err := decodeEntry(&Ctx{Tensor: &t, Arena: arena, Limits: lim}, e, seg, dst)
		arena.Reset()
		if err != nil {
			if e.Tensor.Name != "" {
				return nil, fmt.Errorf("tensor %q: %w", e.Tensor.Name, err)
			}
			return nil, err
		}
		if h.Type == FrameBytes {
			f.Bytes = out
			continue
		}
		t.Data = out
		f.Tensors = append(f.Tensors, &t)
	}
	return f, nil
}

// decodeEntry inverts the entry's steps over its stored segments and
// appends the decoded bytes to dst.
func decodeEntry(ctx *Ctx, e *EntryHeader, payload []byte, dst []byte) ([]byte, error) {
	if !e.Coded {
		return append(dst, payload...), nil
	}
	parts, err := decodeInner(ctx, e, payload)
	if err != nil {
		return nil, err
	}
	s := &e.Steps[0]
	out, err := s.op.Decode(ctx, dst, parts, s.in)
	if err != nil {
		return nil, fmt.Errorf("step 0 (%s): %w", s.op, err)
	}
	if len(out) != len(dst)+s.in.Len {
		return nil, fmt.Errorf("%w: step 0 (%s) decoded %d bytes, want %d", ErrCorrupt, s.op, len(out)-len(dst), s.in.Len)
	}
	return out, nil
}

// decodeInner inverts every step of a coded entry but the first and
// returns the segments the first step reads. They live in payload or in
// ctx.Arena.
func decodeInner(ctx *Ctx, e *EntryHeader, payload []byte) ([]Segment, error) {
	segs := make([]Segment, len(e.Stored))
	for i, s := range e.Stored {
		segs[i] = Segment{SegInfo: s, Data: payload[:s.Len:s.Len]}
		payload = payload[s.Len:]
	}
	for k := len(e.Steps) - 1; k >= 1; k-- {
		s := &e.Steps[k]
		parts := segs[s.Input : s.Input+s.nout]
		buf := ctx.Arena.Alloc(s.in.Len)[:0]
		out, err := s.op.Decode(ctx, buf, parts, s.in)
		if err != nil {
			return nil, fmt.Errorf("step %d (%s): %w", k, s.op, err)
		}
		if len(out) != s.in.Len {
			return nil, fmt.Errorf("%w: step %d (%s) decoded %d bytes, want %d", ErrCorrupt, k, s.op, len(out), s.in.Len)
		}
		segs = slices.Replace(segs, s.Input, s.Input+s.nout, Segment{SegInfo: s.in, Data: out})
	}
	s := &e.Steps[0]
	return segs[s.Input : s.Input+s.nout], nil
}

// AddDecoder is implemented by ops that, as the first step of a recipe,
// can add their decoded float32 tensor into an accumulator without
// materialising it: a sparse selection adds its k values, a low-rank
// product adds P·Qᵀ. DecodeAdd adds alpha times the decoded elements to
// acc, which holds exactly the in.Len/4 elements of the entry. It checks
// parts completely before it changes acc, so on error acc is unchanged;
// with ctx.Finite that includes refusing (CheckFinite) what would add a
// NaN or an infinity.
type AddDecoder interface {
	DecodeAdd(ctx *Ctx, acc []float32, alpha float32, parts []Segment, in SegInfo) error
}

// FiniteAddDecoder is an AddDecoder that honours Ctx.Finite. With
// WithFiniteAdd, DecodeAdd hands an entry to the DecodeAdd of these only:
// another AddDecoder's entry is decoded whole, checked and added, so a
// stage that does not know of the check cannot add what it refuses.
type FiniteAddDecoder interface {
	AddDecoder
	// ChecksFinite marks the implementation; it does nothing.
	ChecksFinite()
}

// DecodeAdd decodes the tensor frame at the start of src and, for each
// float32 tensor (or chunk) in it, adds alpha times its decoded values
// into the accumulator target returns for that tensor: a slice of exactly
// NumElements elements for the whole tensor (a chunk lands at its Offset).
// target sees the tensor's metadata; Data is nil. Entries whose first step
// is an AddDecoder (gradient compressors) are added without decoding a
// dense copy; others are decoded into scratch memory and added.
//
// It returns the number of bytes the frame took. A frame that is not a
// tensor frame, a tensor that is not float32, or an accumulator of the
// wrong length is an error, and so with WithFiniteAdd is an entry that
// would add a NaN or an infinity (ErrNonFinite); each entry is checked
// before it touches its accumulator, so a failing entry adds nothing
// (earlier entries of a tensors frame stay added).
func (d *Decoder) DecodeAdd(src []byte, alpha float32, target func(t *Tensor) ([]float32, error)) (int, error) {
	h, err := parseFrameHeader(src, d.limits())
	if err != nil {
		return 0, err
	}
	end := h.FrameLen()
	if end > int64(len(src)) {
		return 0, io.ErrUnexpectedEOF
	}
	if h.Type != FrameTensor && h.Type != FrameTensors {
		return 0, fmt.Errorf("%w: DecodeAdd: a %v frame carries no tensor", ErrUnsupported, h.Type)
	}
	raw := src[h.HeaderLen:end]
	payload := raw
	if h.PayloadCRC {
		payload = raw[:len(raw)-4]
		want := binary.LittleEndian.Uint32(raw[len(raw)-4:])
		if got := crc32.Checksum(payload, castagnoli); got != want {
			return 0, fmt.Errorf("%w: payload CRC %08x, computed %08x", ErrChecksum, want, got)
		}
	}
	a := getArena()
	defer putArena(a)
	for i := range h.Entries {
		e := &h.Entries[i]
		seg := payload[:e.Payload]
		payload = payload[e.Payload:]
		t := e.Tensor
		err := addEntry(&Ctx{Tensor: &t, Arena: a, Limits: d.limits(), Finite: d.finite}, e, seg, alpha, target)
		a.Reset()
		if err != nil {
			return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
	}
	return int(end), nil
}

func addEntry(ctx *Ctx, e *EntryHeader, payload []byte, alpha float32, target func(t *Tensor) ([]float32, error)) error {
	t := ctx.Tensor
	if t.DType != F32 {
		return fmt.Errorf("%w: DecodeAdd: dtype %v, want f32", ErrUnsupported, t.DType)
	}
	acc, err := target(t)
	if err != nil {
		return err
	}
	nel := e.RawLen / 4
	if int64(len(acc)) != t.NumElements() || t.Offset+nel > int64(len(acc)) {
		return fmt.Errorf("%w: DecodeAdd: accumulator of %d elements for shape %v (chunk of %d at %d)", ErrRecipe, len(acc), t.Shape, nel, t.Offset)
	}
	acc = acc[t.Offset : t.Offset+nel]
	if !e.Coded {
		return addFloats(ctx, acc, alpha, payload)
	}
	parts, err := decodeInner(ctx, e, payload)
	if err != nil {
		return err
	}
	s := &e.Steps[0]
	if ad, ok := s.op.(AddDecoder); ok && (!ctx.Finite || checksFinite(s.op)) {
		if err := ad.DecodeAdd(ctx, acc, alpha, parts, s.in); err != nil {
			return fmt.Errorf("step 0 (%s): %w", s.op, err)
		}
		return nil
	}
	buf := ctx.Arena.Alloc(s.in.Len)[:0]
	out, err := s.op.Decode(ctx, buf, parts, s.in)
	if err != nil {
		return fmt.Errorf("step 0 (%s): %w", s.op, err)
	}
	if len(out) != s.in.Len {
		return fmt.Errorf("%w: step 0 (%s) decoded %d bytes, want %d", ErrCorrupt, s.op, len(out), s.in.Len)
	}
	return addFloats(ctx, acc, alpha, out)
}

func checksFinite(op Op) bool {
	_, ok := op.(FiniteAddDecoder)
	return ok
}

// addFloats adds alpha times the little-endian float32 values in b to acc
// (len(b) == 4*len(acc)), after checking them when ctx.Finite.
func addFloats(ctx *Ctx, acc []float32, alpha float32, b []byte) error {
	b = b[:4*len(acc)]
	if ctx.Finite {
		if !finiteTimes(maxAbsBits(b), alpha) {
			for i := range acc {
				if x := alpha * math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); x-x != 0 {
					return nonFinite(i, x)
				}
			}
		}
	}
	if v, ok := view.As[float32](b); ok && view.LittleEndian {
		for i, x := range v[:len(acc)] {
			acc[i] += alpha * x
		}
		return nil
	}
	for i := range acc {
		acc[i] += alpha * math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}

// CheckFinite returns an error wrapping ErrNonFinite when alpha times an
// element of v is a NaN or an infinity: what an AddDecoder calls on the
// values it would add when its Ctx asks for Finite.
func CheckFinite(alpha float32, v []float32) error {
	if finiteTimes(maxAbsBits(view.Of(v)), alpha) {
		return nil
	}
	for i, x := range v {
		if x *= alpha; x-x != 0 {
			return nonFinite(i, x)
		}
	}
	return nil
}

// maxAbsBits returns the largest of the bits, sign cleared, of the
// little-endian float32 values in b (four lanes, for a pass at the speed
// of memory).
func maxAbsBits(b []byte) uint32 {
	var m0, m1, m2, m3 uint32
	if u, ok := view.As[uint32](b); ok && view.LittleEndian {
		for len(u) >= 4 {
			m0, m1 = max(m0, u[0]&absMask), max(m1, u[1]&absMask)
			m2, m3 = max(m2, u[2]&absMask), max(m3, u[3]&absMask)
			u = u[4:]
		}
		for _, x := range u {
			m0 = max(m0, x&absMask)
		}
		return max(m0, m1, m2, m3)
	}
	for i := 0; i+4 <= len(b); i += 4 {
		m0 = max(m0, binary.LittleEndian.Uint32(b[i:])&absMask)
	}
	return m0
}

// absMask clears a float32's sign: what is left orders by magnitude, NaNs
// above the infinities.
const absMask = 0x7fffffff

// finiteTimes reports whether alpha times the float32 whose bits, sign
// cleared, are m is finite: m the largest of some values', it says so of
// alpha times each of them.
func finiteTimes(m uint32, alpha float32) bool {
	x := math.Float32frombits(m) * alpha
	return x-x == 0
}

func nonFinite(i int, x float32) error {
	return fmt.Errorf("%w: element %d of the values adds %v", ErrNonFinite, i, x)
}
