package codec

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"
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
	lim    Limits
	arenas sync.Pool // *Arena
}

// NewDecoder returns a decoder with the given limits (zero fields take
// their defaults).
func NewDecoder(lim Limits) *Decoder { return &Decoder{lim: lim.withDefaults()} }

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
	h, err := parseFrameHeader(src, &d.lim)
	if err != nil {
		return nil, 0, err
	}
	end := h.FrameLen()
	if end > int64(len(src)) {
		return nil, 0, io.ErrUnexpectedEOF
	}
	a, _ := d.arenas.Get().(*Arena)
	if a == nil {
		a = &Arena{}
	}
	var into func(int) []byte
	if need := alignedTotal(h); buf != nil && int64(cap(buf)) >= need {
		buf = buf[:0]
		into = func(i int) []byte {
			off := (len(buf) + 7) &^ 7
			buf = buf[:off+int(h.Entries[i].RawLen)]
			return buf[off:off:len(buf)]
		}
	}
	f, err := decodePayload(h, src[h.HeaderLen:end], &d.lim, a, into)
	d.arenas.Put(a)
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
	segs := make([]Segment, len(e.Stored))
	for i, s := range e.Stored {
		segs[i] = Segment{SegInfo: s, Data: payload[:s.Len:s.Len]}
		payload = payload[s.Len:]
	}
	for k := len(e.Steps) - 1; k >= 0; k-- {
		s := &e.Steps[k]
		parts := segs[s.Input : s.Input+s.nout]
		var buf []byte
		if k == 0 {
			buf = dst
		} else {
			buf = ctx.Arena.Alloc(s.in.Len)[:0]
		}
		out, err := s.op.Decode(ctx, buf, parts, s.in)
		if err != nil {
			return nil, fmt.Errorf("step %d (%s): %w", k, s.op, err)
		}
		if len(out) != len(buf)+s.in.Len {
			return nil, fmt.Errorf("%w: step %d (%s) decoded %d bytes, want %d", ErrCorrupt, k, s.op, len(out)-len(buf), s.in.Len)
		}
		seg := Segment{SegInfo: s.in, Data: out[len(buf):]}
		if k == 0 {
			return out, nil
		}
		segs = slices.Replace(segs, s.Input, s.Input+s.nout, seg)
	}
	return nil, fmt.Errorf("%w: no steps", ErrCorrupt) // unreachable: Coded entries have steps
}
