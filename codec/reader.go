package codec

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"
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
//
// With WithDecoderConcurrency(n), n > 1, frames are decoded by up to n
// goroutines while the caller's goroutine reads the next ones: ReadTensor
// decodes the chunks of a tensor in parallel, each straight into its
// place in the tensor, with up to 2n chunks read and n decoding; Next
// reads up to n-1 frames ahead of the one it returns, but only frames
// whose first bytes have already arrived, so a peer that waits for an
// answer is never waited for. Results and errors
// come in stream order. The goroutines end with the frames they decode;
// a Reader needs no Close. When the input is a file, a bytes.Reader, a
// strings.Reader or an io.SectionReader (positioned reads, io.ReaderAt),
// ReadTensor's and NextJoined's workers also read the payloads of large
// frames (64 KiB or more) themselves, each at its offset, so that the one
// goroutine reading the stream does not copy them; those calls wait for
// their workers before they return, so no worker reads the input between
// calls. Next copies every payload on the caller's goroutine, as for any
// other input.
type Reader struct {
	br      *bufio.Reader
	own     *bufio.Reader // the Reader's own buffered reader, when src needs one
	at      positioned    // src, when its payloads can be read at their offsets
	lim     Limits
	workers int
	alloc   func(n int) []byte // WithTensorBuffers; nil: AlignedBytes
	hdrBuf  []byte
	payBuf  []byte // one worker: the payload buffer, reused
	off     int64  // stream offset of the next frame

	last int64 // stream offset of the frame returned last
	err  error // sticky: after an error every call returns it

	hello     *Hello
	frames    uint64 // data frames since the hello or the last end frame
	decoded   uint64 // their decoded bytes
	expectEnd bool   // a hello was read and its end frame was not
	helloAt   int64  // stream offset of that hello
	run       chunkRun

	ahead []*pending // frames read ahead by Next, in stream order
	asm   assembly   // the tensor NextJoined is joining
	queue []*Tensor  // tensors of a tensors frame not yet returned
	rest  []byte     // unread bytes of the current bytes frame

	pays chan *[]byte  // payload buffers of frames decoded by workers, kept across garbage collections
	sem  chan struct{} // a token for each frame being decoded by a worker: at most workers at once

	stats ReaderStats
}

// pending is a frame read from the stream and being (or to be) decoded.
type pending struct {
	start  int64        // stream offset
	h      *FrameHeader // nil with err
	raw    []byte       // payload and its CRC
	at     int64        // with atLen > 0: the payload is atLen bytes at this offset of Reader.at, not read yet
	atLen  int64
	pooled *[]byte // raw's buffer, from Reader.pays
	f      *Frame
	err    error // read or decode error, located at start
	// readFailed: err was set by readFrame (the reading goroutine reads
	// this; err is the worker's to write once the frame is dispatched).
	readFailed bool
	done       chan struct{} // closed once decoded by a worker; nil: decoded already
	took       time.Duration // decode time
}

// ReaderStats counts what a Reader has read since it was made.
type ReaderStats struct {
	Frames     uint64        // data frames (tensor, tensors, bytes)
	WireBytes  uint64        // their bytes in the stream, headers included
	RawBytes   uint64        // their decoded bytes
	DecodeTime time.Duration // time spent checking and decoding payloads, summed over workers, without waiting for input
}

// Stats returns the Reader's counters.
func (r *Reader) Stats() ReaderStats { return r.stats }

// NewReader returns a Reader of the frames in src. It fails only on a bad
// option.
func NewReader(src io.Reader, opts ...DOption) (*Reader, error) {
	cfg, err := newDConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.decoderOnly != "" {
		return nil, fmt.Errorf("codec: NewReader: %s applies to a Decoder (DecodeAdd), not a Reader", cfg.decoderOnly)
	}
	r := &Reader{lim: cfg.lim, workers: cfg.concurrency, alloc: cfg.alloc}
	if r.workers > 1 {
		r.pays = make(chan *[]byte, window*r.workers+2)
		r.sem = make(chan struct{}, r.workers)
	}
	r.setSource(src)
	return r, nil
}

// setSource reads from src: straight from it when it is a large enough
// bufio.Reader, else through the Reader's own.
func (r *Reader) setSource(src io.Reader) {
	r.at = nil
	if r.workers > 1 {
		switch src.(type) {
		case *os.File, *bytes.Reader, *strings.Reader, *io.SectionReader:
			// Their ReadAt and Seek agree on offsets, and ReadAt may run
			// in parallel; a file that cannot seek (a pipe) is read as a stream.
			if at := src.(positioned); canSeek(at) {
				r.at = at
			}
		}
	}
	if br, ok := src.(*bufio.Reader); ok && br.Size() >= 64<<10 {
		r.br = br
		return
	}
	if r.own == nil {
		r.own = bufio.NewReaderSize(src, 64<<10)
	} else {
		r.own.Reset(src)
	}
	r.br = r.own
}

// Reset makes r read a new input, src, from its start, as a new Reader
// with the same options would, keeping r's buffers (a pool of Readers
// saves their allocation per message). Frames still being decoded are
// waited for first.
func (r *Reader) Reset(src io.Reader) {
	for _, p := range r.ahead {
		r.wait(p)
	}
	r.asm.drain()
	clear(r.ahead)
	clear(r.queue)
	r.ahead, r.queue, r.rest = r.ahead[:0], r.queue[:0], nil
	r.asm = assembly{}
	r.off, r.last, r.err = 0, 0, nil
	r.hello, r.frames, r.decoded, r.expectEnd, r.helloAt = nil, 0, 0, false, 0
	r.run = chunkRun{}
	r.stats = ReaderStats{}
	r.setSource(src)
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
// a copy. With WithDecoderConcurrency, into is called on the caller's
// goroutine for frames read ahead too, before the earlier ones are
// returned.
func (r *Reader) NextInto(into func(h *FrameHeader, i int) []byte) (*Frame, error) {
	return r.next(into)
}

func (r *Reader) next(into func(h *FrameHeader, i int) []byte) (*Frame, error) {
	if r.err != nil {
		return nil, r.err
	}
	var p *pending
	if r.workers == 1 && len(r.ahead) == 0 {
		p = r.readFrame(into, false)
		r.decode(p, entryInto(p, into))
	} else {
		r.readAhead(into)
		p = r.ahead[0]
		r.ahead[0] = nil
		r.ahead = r.ahead[1:]
	}
	return r.finish(p)
}

// readAhead fills r.ahead up to the number of workers, dispatching each
// frame to a worker. It reads a frame beyond the first only when its first
// bytes have arrived, and stops after an error.
func (r *Reader) readAhead(into func(h *FrameHeader, i int) []byte) {
	for len(r.ahead) < r.workers {
		if n := len(r.ahead); n > 0 && (r.ahead[n-1].readFailed || r.br.Buffered() == 0) {
			return
		}
		p := r.readFrame(into, false)
		p.readFailed = p.err != nil
		r.dispatch(p, entryInto(p, into))
		r.ahead = append(r.ahead, p)
	}
}

// finish waits for p, counts it and records it as the frame returned last.
func (r *Reader) finish(p *pending) (*Frame, error) {
	r.wait(p)
	if p.err != nil {
		if p.err != io.EOF {
			r.err = p.err
		}
		return nil, p.err
	}
	r.stats.DecodeTime += p.took
	r.last = p.start
	return p.f, nil
}

// entryInto adapts a NextInto callback to p's header; a bytes frame
// stored raw that readFrame already read into the caller's buffer needs
// none.
func entryInto(p *pending, into func(h *FrameHeader, i int) []byte) func(int) []byte {
	if into == nil || p.err != nil || p.f != nil {
		return nil
	}
	return func(i int) []byte { return into(p.h, i) }
}

// readFrame reads the next frame's header and payload, without decoding
// the payload, and keeps the stream's accounting (hello, end, counts),
// which depends on headers only. Errors are returned in p.err. With
// positioned, a caller that waits for the frame's worker before it
// returns (assembly.next) may leave a large payload of a positioned input
// to the worker to read (Reader.at).
func (r *Reader) readFrame(into func(h *FrameHeader, i int) []byte, positioned bool) *pending {
	start := r.off
	p := &pending{start: start}
	h, hb, err := ReadFrameHeader(r.br, r.br, r.lim, r.hdrBuf)
	r.hdrBuf = hb
	if err != nil {
		switch {
		case err != io.EOF:
			p.err = r.wrapAt(start, err, "frame header")
		case r.run.atEOF() != nil:
			p.err = r.wrapAt(start, r.run.atEOF(), "end of input")
		case r.expectEnd:
			p.err = r.wrapAt(start, io.ErrUnexpectedEOF, "stream ends without an end frame")
		default:
			p.err = io.EOF
		}
		return p
	}
	if err := r.checkOrder(h, start); err != nil {
		p.err = r.wrapAt(start, err, fmt.Sprintf("%v frame out of order", h.Type))
		return p
	}
	p.h = h
	n := h.FrameLen() - int64(h.HeaderLen)
	var dst []byte
	if into != nil && h.Type == FrameBytes && len(h.Entries) == 1 && !h.Entries[0].Coded {
		dst = into(h, 0)
	}
	if dst != nil && int64(cap(dst)) >= h.Entries[0].RawLen {
		// The caller's buffer has the room: no allocation by what the
		// header claims, and no copy.
		t0 := time.Now()
		if p.f, err = r.readRawBytes(h, dst); err != nil {
			p.err = r.wrapAt(start, err, fmt.Sprintf("%v frame payload of %d bytes", h.Type, n))
			return p
		}
		p.took = time.Since(t0)
	} else {
		if r.workers > 1 {
			select {
			case p.pooled = <-r.pays:
			default:
				p.pooled = new([]byte)
			}
			if positioned && r.at != nil && n >= atMin && h.Type != FrameHello && h.Type != FrameEnd && h.Type != FrameControl {
				// The worker reads the payload; here it is stepped over.
				p.at, p.atLen, err = r.skipPayload(n)
			} else {
				p.raw, err = readPayload(r.br, *p.pooled, n)
				*p.pooled = p.raw
			}
		} else {
			p.raw, err = readPayload(r.br, r.payBuf, n)
			r.payBuf = p.raw
		}
		if err != nil {
			p.err = r.wrapAt(start, unexpected(err), fmt.Sprintf("%v frame payload of %d bytes", h.Type, n))
			return p
		}
	}
	switch h.Type {
	case FrameHello:
		r.hello, r.expectEnd, r.helloAt, r.frames, r.decoded = h.Hello, true, start, 0, 0
	case FrameEnd:
		if r.hello != nil && (h.End.Frames != r.frames || h.End.Bytes != r.decoded) {
			p.err = r.wrapAt(start, ErrCorrupt, fmt.Sprintf("end frame counts %d frames and %d bytes, received %d and %d",
				h.End.Frames, h.End.Bytes, r.frames, r.decoded))
			return p
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
	r.off = start + h.FrameLen()
	return p
}

// dispatch decodes p on a goroutine of its own when the Reader has workers
// and p carries data; otherwise on the caller's.
func (r *Reader) dispatch(p *pending, into func(int) []byte) {
	if r.workers == 1 || p.err != nil || p.f != nil || p.h.Type == FrameHello || p.h.Type == FrameEnd || p.h.Type == FrameControl {
		r.decode(p, into)
		return
	}
	if into != nil {
		// The caller's callback runs on the caller's goroutine.
		dsts := make([][]byte, len(p.h.Entries))
		for i := range dsts {
			dsts[i] = into(i)
		}
		into = func(i int) []byte { return dsts[i] }
	}
	p.done = make(chan struct{})
	go func() {
		r.sem <- struct{}{}
		r.decode(p, into)
		<-r.sem
		close(p.done)
	}()
}

// window is how many frames per worker the Writer keeps behind the oldest
// one and ReadTensor and NextJoined keep in flight: one being coded, one
// waiting for a worker, so that a worker done before the oldest frame
// takes the next at once rather than waiting for that frame (a chunk
// being joined holds its payload only; it is decoded in place).
const window = 2

// wait waits until p is decoded.
func (r *Reader) wait(p *pending) {
	if p.done != nil {
		<-p.done
	}
}

// decode checks and decodes p's payload (unless that is done or failed).
// It touches no Reader state but its pools, so workers may run it.
func (r *Reader) decode(p *pending, into func(int) []byte) {
	if p.err != nil || p.f != nil {
		return
	}
	if p.atLen > 0 {
		var err error
		p.raw, err = readPayload(io.NewSectionReader(r.at, p.at, p.atLen), *p.pooled, p.atLen)
		*p.pooled = p.raw
		if err != nil {
			p.err = r.wrapAt(p.start, unexpected(err), fmt.Sprintf("%v frame payload of %d bytes", p.h.Type, p.atLen))
			r.putPayload(p)
			return
		}
	}
	a := getArena()
	t0 := time.Now()
	f, err := decodePayload(p.h, p.raw, &r.lim, a, into)
	p.took = time.Since(t0)
	putArena(a)
	r.putPayload(p)
	if err != nil {
		p.err = r.wrapAt(p.start, err, fmt.Sprintf("%v frame", p.h.Type))
		return
	}
	p.f = f
}

// putPayload gives p's payload buffer back to the Reader's list.
func (r *Reader) putPayload(p *pending) {
	if p.pooled != nil {
		select {
		case r.pays <- p.pooled:
		default: // more in flight than the list holds: let it go
		}
		p.pooled, p.raw = nil, nil
	}
}

// atMin is the payload size from which a worker reads a payload at its
// offset (Reader.at): smaller ones are in the buffer already, or nearly.
const atMin = 64 << 10

// positioned is a source whose payloads can be read at their offsets.
type positioned interface {
	io.ReaderAt
	io.Seeker
}

// canSeek reports whether the source's position can be read: a pipe's
// cannot.
func canSeek(s io.Seeker) bool {
	_, err := s.Seek(0, io.SeekCurrent)
	return err == nil
}

// skipPayload steps over the n bytes of payload that start at the
// buffered reader's position, returning their offset in r.at for a
// worker to read: the bytes buffered already are dropped, the rest
// seeked over. A payload that runs past the end of the input is
// io.ErrUnexpectedEOF here, as reading it would be, so that the frame is
// not counted as read.
func (r *Reader) skipPayload(n int64) (off, length int64, err error) {
	pos, err := r.at.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, 0, err
	}
	b := int64(r.br.Buffered())
	off = pos - b
	if n <= b {
		_, err = r.br.Discard(int(n))
		return off, n, err
	}
	end, err := r.at.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, 0, err
	}
	if end-off < n {
		// Leave the input where a read of the payload would have.
		r.br.Discard(int(b))
		r.at.Seek(end, io.SeekStart)
		return 0, 0, io.ErrUnexpectedEOF
	}
	if _, err := r.br.Discard(int(b)); err != nil {
		return 0, 0, err
	}
	if _, err := r.at.Seek(off+n, io.SeekStart); err != nil {
		return 0, 0, err
	}
	return off, n, nil
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
		if got, want := crc32.Checksum(dst, castagnoli), binary.LittleEndian.Uint32(c[:]); got != want {
			return nil, fmt.Errorf("%w: payload CRC %08x, computed %08x", ErrChecksum, want, got)
		}
	}
	return &Frame{Header: h, Bytes: dst}, nil
}

// readPayload reads n bytes into buf (reused), growing it as the bytes
// arrive rather than to what the header claims.
func readPayload(rd io.Reader, buf []byte, n int64) ([]byte, error) {
	buf = buf[:0]
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			c := int(min(n, int64(max(2*cap(buf), 64<<10))))
			nb := make([]byte, len(buf), c)
			copy(nb, buf)
			buf = nb
		}
		k := int(min(n-int64(len(buf)), int64(cap(buf)-len(buf))))
		if _, err := io.ReadFull(rd, buf[len(buf):len(buf)+k]); err != nil {
			return buf, err
		}
		buf = buf[:len(buf)+k]
	}
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
// the stream it returns io.EOF.
//
// The Reader checks the order of frames for every method (assemble.go):
// the chunks of a tensor come in order, without gaps, overlaps or other
// data frames between them, and an end frame or the end of the input
// inside a tensor is an error (ErrCorrupt and io.ErrUnexpectedEOF).
// The tensor's buffer is allocated once, at the size its shape gives,
// once the first chunk's header has passed its CRC and the limits (the
// shape's bytes are bounded by Limits.MaxTensorSize); each chunk is
// decoded straight into its place, by a worker of its own with
// WithDecoderConcurrency.
func (r *Reader) ReadTensor() (*Tensor, error) {
	if len(r.queue) > 0 {
		t := r.queue[0]
		r.queue = r.queue[1:]
		return t, nil
	}
	for {
		f, err := r.NextJoined(nil)
		if err != nil {
			return nil, err
		}
		switch f.Header.Type {
		case FrameTensor, FrameTensors:
			r.queue = append(r.queue, f.Tensors[1:]...)
			return f.Tensors[0], nil
		case FrameBytes:
			return nil, r.fail(ErrCorrupt, "bytes frame where a tensor was expected")
		case FrameEnd:
			return nil, io.EOF
		}
	}
}

// NextJoined is NextInto with the chunks of each tensor joined: a tensor
// sent in chunks comes back as one tensor frame (its Header the first
// chunk's, its Tensors the whole tensor) once its last chunk is read.
// Control frames between the chunks are returned as they come, and the
// tensor goes on being joined at the next call, so that a caller who acts
// on control frames (feedback, acknowledgements) is not held up by a large
// tensor. into is used for frames that are not chunks; chunks are decoded
// into the tensor's buffer (see ReadTensor).
func (r *Reader) NextJoined(into func(h *FrameHeader, i int) []byte) (*Frame, error) {
	if r.err != nil {
		return nil, r.err
	}
	r.asm.r = r
	f, err := r.asm.next(into)
	if err != nil && err != io.EOF {
		r.asm.drain()
		if r.err == nil {
			r.err = err
		}
		return nil, r.err
	}
	return f, err
}

// assembly joins the chunks of one tensor for NextJoined.
type assembly struct {
	r        *Reader
	head     *FrameHeader // the first chunk's header
	acc      *Tensor      // the tensor being joined; nil between tensors
	filled   int64        // bytes of acc.Data placed so far
	inflight []*pending   // chunks being decoded into acc, in stream order
}

func (a *assembly) next(into func(h *FrameHeader, i int) []byte) (*Frame, error) {
	r := a.r
	for {
		var p *pending
		placed := false
		if len(r.ahead) > 0 {
			// Read ahead by Next: decoded into buffers of their own.
			p = r.ahead[0]
			r.ahead[0] = nil
			r.ahead = r.ahead[1:]
		} else {
			p = r.readFrame(into, true)
			if dst := a.place(p); dst != nil {
				r.dispatch(p, func(int) []byte { return dst })
				placed = true
			} else {
				r.dispatch(p, entryInto(p, into))
			}
		}
		if placed {
			a.inflight = append(a.inflight, p)
			a.filled += p.h.Entries[0].RawLen
			if err := a.settle(window * r.workers); err != nil {
				return nil, err
			}
			if a.filled == a.acc.NumBytes() {
				return a.joined()
			}
			continue
		}
		if err := a.settle(0); err != nil {
			return nil, err
		}
		f, err := r.finish(p)
		if err != nil {
			if err == io.EOF && a.acc != nil {
				return nil, r.fail(io.ErrUnexpectedEOF, a.short())
			}
			return nil, err
		}
		if f.Header.Type != FrameTensor || a.acc == nil && f.Tensors[0].IsWhole() {
			// The frame order is checked as frames are read: anything but a
			// control frame inside a tensor has failed already.
			return f, nil
		}
		// A chunk read ahead by Next: copied into place.
		t := f.Tensors[0]
		if a.acc == nil {
			if t.Offset != 0 {
				return nil, r.fail(ErrCorrupt, fmt.Sprintf("tensor %q starts at element %d", t.Name, t.Offset))
			}
			a.start(f.Header, t)
		} else if !sameTensor(a.acc, t) || t.Offset*int64(t.DType.Size()) != a.filled {
			return nil, r.fail(ErrCorrupt, fmt.Sprintf("tensor %q interrupted after %d of %d bytes by %q at element %d",
				a.acc.Name, a.filled, a.acc.NumBytes(), t.Name, t.Offset))
		}
		if a.filled+int64(len(t.Data)) > int64(len(a.acc.Data)) {
			return nil, r.fail(ErrCorrupt, fmt.Sprintf("chunk of tensor %q at element %d runs past its shape", t.Name, t.Offset))
		}
		a.filled += int64(copy(a.acc.Data[a.filled:], t.Data))
		if a.filled == a.acc.NumBytes() {
			return a.joined()
		}
	}
}

// start begins joining the tensor whose first chunk has header h and
// metadata t: its buffer is allocated at the size of its shape, which the
// header's CRC and the limits have accepted.
func (a *assembly) start(h *FrameHeader, t *Tensor) {
	a.head = h
	a.acc = &Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Tags: t.Tags, Version: t.Version, Base: t.Base}
	n := int(a.acc.NumBytes())
	if a.r.alloc == nil {
		a.acc.Data = AlignedBytes(n)
	} else if b := a.r.alloc(n); len(b) >= n {
		a.acc.Data = b[:n:n]
	} else {
		panic(fmt.Sprintf("codec: WithTensorBuffers: %d bytes for a tensor of %d", len(b), n)) // the caller's function is wrong
	}
	a.filled = 0
}

// joined waits for the last chunks and returns the whole tensor's frame.
func (a *assembly) joined() (*Frame, error) {
	if err := a.settle(0); err != nil {
		return nil, err
	}
	f := &Frame{Header: a.head, Tensors: []*Tensor{a.acc}}
	a.head, a.acc, a.filled = nil, nil, 0
	return f, nil
}

// place returns where p's chunk goes in the tensor being joined (its
// first chunk starts the tensor), or nil when p is not a chunk that
// continues it.
func (a *assembly) place(p *pending) []byte {
	if p.err != nil || p.f != nil || p.h.Type != FrameTensor {
		return nil
	}
	e := &p.h.Entries[0]
	t := &e.Tensor
	if t.IsWhole() {
		return nil
	}
	if a.acc == nil {
		if t.Offset != 0 {
			return nil
		}
		a.start(p.h, t)
	} else if !sameTensor(a.acc, t) || t.Offset*int64(t.DType.Size()) != a.filled {
		return nil
	}
	end := a.filled + e.RawLen
	if end > int64(len(a.acc.Data)) {
		return nil // more than the shape holds: the frame path reports it
	}
	return a.acc.Data[a.filled:a.filled:end]
}

// settle waits until at most n placed chunks are being decoded, and
// returns the first error among the finished ones.
func (a *assembly) settle(n int) error {
	for len(a.inflight) > n {
		p := a.inflight[0]
		a.inflight[0] = nil
		a.inflight = a.inflight[1:]
		if _, err := a.r.finish(p); err != nil {
			return err
		}
	}
	return nil
}

// drain waits for every chunk still being decoded, so that no worker
// writes into a buffer after an error was returned.
func (a *assembly) drain() {
	for _, p := range a.inflight {
		a.r.wait(p)
	}
	a.inflight = nil
}

// short describes a tensor that ended early.
func (a *assembly) short() string {
	return fmt.Sprintf("tensor %q ends after %d of %d bytes", a.acc.Name, a.filled, a.acc.NumBytes())
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
