package codec

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"time"
)

// Reader decodes a stream of frames from an io.Reader. It needs no
// configuration: every frame says how to decode itself. Limits (WithLimits)
// bound what it accepts.
//
// Next returns frames one at a time; ReadTensor returns whole tensors,
// joining chunks; Read returns the content of bytes frames as a byte
// stream. Each keeps its own read-ahead (the rest of a bytes frame, the
// tensors of a tensors frame), so use one of them per stretch of the
// stream. After an error other than io.EOF every call returns that error.
// A Reader is not safe for concurrent use.
type Reader struct {
	br     *bufio.Reader
	lim    Limits
	hdrBuf []byte
	payBuf []byte
	arena  Arena
	off    int64 // stream offset of the next frame

	last int64 // stream offset of the frame returned last
	err  error // sticky: after an error every call returns it

	hello     *Hello
	frames    uint64 // data frames since the hello or the last end frame
	decoded   uint64 // their decoded bytes
	expectEnd bool   // a hello was read and its end frame was not
	helloAt   int64  // stream offset of that hello
	run       chunkRun

	queue []*Tensor // tensors of a tensors frame not yet returned
	rest  []byte    // unread bytes of the current bytes frame

	stats ReaderStats
}

// ReaderStats counts what a Reader has read since it was made.
type ReaderStats struct {
	Frames     uint64        // data frames (tensor, tensors, bytes)
	WireBytes  uint64        // their bytes in the stream, headers included
	RawBytes   uint64        // their decoded bytes
	DecodeTime time.Duration // time spent checking and decoding payloads, without waiting for input
}

// Stats returns the Reader's counters.
func (r *Reader) Stats() ReaderStats { return r.stats }

// ReaderOption configures a Reader.
type ReaderOption func(*Reader)

// WithLimits sets the decoding limits (zero fields keep their defaults).
func WithLimits(l Limits) ReaderOption {
	return func(r *Reader) { r.lim = l.withDefaults() }
}

// NewReader returns a Reader of the frames in src.
func NewReader(src io.Reader, opts ...ReaderOption) *Reader {
	r := &Reader{lim: DefaultLimits()}
	if br, ok := src.(*bufio.Reader); ok && br.Size() >= 64<<10 {
		r.br = br
	} else {
		r.br = bufio.NewReaderSize(src, 64<<10)
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Hello returns the stream's hello, once one has been read.
func (r *Reader) Hello() *Hello { return r.hello }

// Next reads and decodes the next frame. It returns io.EOF at the end of
// the input when the input ended at a frame boundary and no hello promised
// an end frame; a stream that opened with a hello and stops before its end
// frame gives io.ErrUnexpectedEOF. Errors carry the frame's stream offset.
func (r *Reader) Next() (*Frame, error) {
	return r.next(nil)
}

// NextInto is Next with the caller's buffers: into returns, for entry i
// of the frame with header h, a buffer (length 0, capacity at least the
// entry's RawLen) to decode the entry into, or nil to allocate one. The
// payload of a bytes frame stored as is is read straight into it, without
// a copy.
func (r *Reader) NextInto(into func(h *FrameHeader, i int) []byte) (*Frame, error) {
	return r.next(into)
}

func (r *Reader) next(into func(h *FrameHeader, i int) []byte) (*Frame, error) {
	if r.err != nil {
		return nil, r.err
	}
	f, err := r.read(into)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return f, err
}

func (r *Reader) read(into func(h *FrameHeader, i int) []byte) (*Frame, error) {
	start := r.off
	h, hb, err := ReadFrameHeader(r.br, r.br, r.lim, r.hdrBuf)
	r.hdrBuf = hb
	if err != nil {
		if err == io.EOF {
			if err := r.run.atEOF(); err != nil {
				return nil, r.wrapAt(start, err, "end of input")
			}
			if r.expectEnd {
				return nil, r.wrapAt(start, io.ErrUnexpectedEOF, "stream ends without an end frame")
			}
			return nil, io.EOF
		}
		return nil, r.wrapAt(start, err, "frame header")
	}
	if err := r.checkOrder(h, start); err != nil {
		return nil, r.wrapAt(start, err, fmt.Sprintf("%v frame out of order", h.Type))
	}
	var f *Frame
	var dst []byte
	if into != nil && h.Type == FrameBytes && len(h.Entries) == 1 && !h.Entries[0].Coded {
		dst = into(h, 0)
	}
	if dst != nil && int64(cap(dst)) >= h.Entries[0].RawLen {
		// The caller's buffer has the room: no allocation by what the
		// header claims, and no copy.
		if f, err = r.readRawBytes(h, dst); err != nil {
			return nil, r.wrapAt(start, err, fmt.Sprintf("%v frame payload of %d bytes", h.Type, h.FrameLen()-int64(h.HeaderLen)))
		}
	} else {
		raw, err := r.readPayload(h.FrameLen() - int64(h.HeaderLen))
		if err != nil {
			return nil, r.wrapAt(start, unexpected(err), fmt.Sprintf("%v frame payload of %d bytes", h.Type, h.FrameLen()-int64(h.HeaderLen)))
		}
		var intoEntry func(int) []byte
		if into != nil {
			intoEntry = func(i int) []byte {
				if i == 0 && dst != nil {
					return dst // already asked for
				}
				return into(h, i)
			}
		}
		t0 := time.Now()
		f, err = decodePayload(h, raw, &r.lim, &r.arena, intoEntry)
		r.stats.DecodeTime += time.Since(t0)
		if err != nil {
			return nil, r.wrapAt(start, err, fmt.Sprintf("%v frame", h.Type))
		}
	}
	switch h.Type {
	case FrameHello:
		r.hello, r.expectEnd, r.helloAt, r.frames, r.decoded = h.Hello, true, start, 0, 0
	case FrameEnd:
		if r.hello != nil && (h.End.Frames != r.frames || h.End.Bytes != r.decoded) {
			return nil, r.wrapAt(start, ErrCorrupt, fmt.Sprintf("end frame counts %d frames and %d bytes, received %d and %d",
				h.End.Frames, h.End.Bytes, r.frames, r.decoded))
		}
		r.expectEnd, r.frames, r.decoded = false, 0, 0
	case FrameTensor, FrameTensors, FrameBytes:
		r.frames++
		r.stats.Frames++
		r.stats.WireBytes += uint64(h.FrameLen())
		for _, e := range h.Entries {
			r.decoded += uint64(e.RawLen)
			r.stats.RawBytes += uint64(e.RawLen)
		}
	}
	r.last, r.off = start, start+h.FrameLen()
	return f, nil
}

// readRawBytes reads the payload of a bytes frame stored as is straight
// into dst, which has the room, and checks its CRC.
func (r *Reader) readRawBytes(h *FrameHeader, dst []byte) (*Frame, error) {
	dst = dst[:h.Entries[0].RawLen]
	if _, err := io.ReadFull(r.br, dst); err != nil {
		return nil, unexpected(err)
	}
	if h.PayloadCRC {
		var c [4]byte
		if _, err := io.ReadFull(r.br, c[:]); err != nil {
			return nil, unexpected(err)
		}
		t0 := time.Now()
		got := crc32.Checksum(dst, castagnoli)
		r.stats.DecodeTime += time.Since(t0)
		if want := binary.LittleEndian.Uint32(c[:]); got != want {
			return nil, fmt.Errorf("%w: payload CRC %08x, computed %08x", ErrChecksum, want, got)
		}
	}
	return &Frame{Header: h, Bytes: dst}, nil
}

// readPayload reads n bytes into the reused payload buffer, growing it as
// the bytes arrive rather than to what the header claims.
func (r *Reader) readPayload(n int64) ([]byte, error) {
	buf := r.payBuf[:0]
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			c := int(min(n, int64(max(2*cap(buf), 64<<10))))
			nb := make([]byte, len(buf), c)
			copy(nb, buf)
			buf = nb
		}
		k := int(min(n-int64(len(buf)), int64(cap(buf)-len(buf))))
		if _, err := io.ReadFull(r.br, buf[len(buf):len(buf)+k]); err != nil {
			return nil, err
		}
		buf = buf[:len(buf)+k]
	}
	r.payBuf = buf
	return buf, nil
}

// wrapAt locates err at the frame starting at stream offset off.
func (r *Reader) wrapAt(off int64, err error, what string) error {
	return &CorruptError{Offset: off, What: what, Err: err}
}

// fail records a sticky error about the frame returned last.
func (r *Reader) fail(err error, what string) error {
	r.err = r.wrapAt(r.last, err, what)
	return r.err
}

// ReadTensor returns the next whole tensor, joining its chunks. Control
// and hello frames are skipped; a bytes frame is an error. At the end of
// the stream it returns io.EOF. The tensor's size is bounded by
// Limits.MaxTensorSize, and its buffer grows with the chunks received, not
// with what the first header claims.
//
// The Reader checks the order of frames for every method (assemble.go):
// the chunks of a tensor come in order, without gaps, overlaps or other
// data frames between them, and an end frame or the end of the input
// inside a tensor is an error (ErrCorrupt and io.ErrUnexpectedEOF). So each
// tensor frame that follows a first chunk here continues it.
func (r *Reader) ReadTensor() (*Tensor, error) {
	if len(r.queue) > 0 {
		t := r.queue[0]
		r.queue = r.queue[1:]
		return t, nil
	}
	var acc *Tensor // tensor being assembled
	for {
		f, err := r.next(func(h *FrameHeader, i int) []byte {
			if acc == nil || h.Type != FrameTensor {
				return nil
			}
			// The next chunk of acc: decode it in place.
			acc.Data = grow(acc.Data, int(h.Entries[0].RawLen), acc.NumBytes())
			return acc.Data[len(acc.Data):]
		})
		if err != nil {
			return nil, err
		}
		switch f.Header.Type {
		case FrameEnd:
			return nil, io.EOF
		case FrameBytes:
			return nil, r.fail(ErrCorrupt, "bytes frame where a tensor was expected")
		case FrameTensor, FrameTensors:
		default:
			continue
		}
		t := f.Tensors[0]
		if acc == nil {
			if t.IsWhole() {
				r.queue = append(r.queue, f.Tensors[1:]...)
				return t, nil
			}
			acc = t
			continue
		}
		if n := len(acc.Data); cap(acc.Data)-n >= len(t.Data) && len(t.Data) > 0 && &acc.Data[n : n+1][0] == &t.Data[0] {
			acc.Data = acc.Data[:n+len(t.Data)] // decoded in place
		} else {
			acc.Data = append(acc.Data, t.Data...)
		}
		if int64(len(acc.Data)) == acc.NumBytes() {
			acc.Offset = 0
			return acc, nil
		}
	}
}

// grow returns b with room for n more bytes, growing geometrically up to
// total.
func grow(b []byte, n int, total int64) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	c := int64(max(2*cap(b), len(b)+n))
	c = min(c, total)
	c = max(c, int64(len(b)+n))
	nb := AlignedBytes(int(c))[:len(b)]
	copy(nb, b)
	return nb
}

// Read reads the content of bytes frames as one byte stream. It returns
// io.EOF at the end frame or at the end of the input; a tensor frame in
// the stream is an error.
func (r *Reader) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		f, err := r.Next()
		if err != nil {
			return 0, err
		}
		switch f.Header.Type {
		case FrameBytes:
			r.rest = f.Bytes
		case FrameEnd:
			return 0, io.EOF
		case FrameTensor, FrameTensors:
			return 0, r.fail(ErrCorrupt, "tensor frame in a byte stream")
		}
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}
