package codec

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Writer encodes tensors and byte streams into frames on an io.Writer.
//
// Tensors are cut into chunks of the configured size and encoded by a
// pipeline of WithEncoderConcurrency workers while earlier frames are written;
// frames leave in order. WriteTensor returns once every chunk of the tensor
// is encoded, so the caller may reuse the tensor's data then; the frames
// themselves may still be in flight until Flush or Close. Write copies p.
//
// A Writer is not safe for concurrent use by several goroutines; Close must
// be called to write the end-of-stream frame and stop the workers. After an
// error, every later call returns the same error.
type Writer struct {
	cfg   econfig
	dst   io.Writer
	enc   *Encoder
	jobs  chan *job
	order chan *job
	done  chan struct{} // closed when the output goroutine exits
	wg    sync.WaitGroup

	mu     sync.Mutex
	err    error // first error (sticky)
	frames uint64
	bytes  uint64

	seq      uint64
	inflight atomic.Int64 // jobs queued and not yet through the output goroutine
	pending  []byte       // buffered byte-stream data, up to chunkSize
	cutter   Cutter       // the policy, when it cuts byte streams into frames
	frameCap int          // the next bytes frame's largest size (WithStartFrame; 0: the chunk size)
	started  bool
	closed   bool
}

type job struct {
	info    FrameInfo
	recipe  *Recipe
	tensor  *Tensor   // chunk view of the caller's tensor (tensor frames)
	data    []byte    // chunk (bytes frames)
	buf     *chunkBuf // the Writer's pooled buffer data lies in (nil: borrowed from the caller)
	out     []byte    // encoded frame (or its head, when raw is set)
	raw     []byte    // a raw frame's payload, written after out without a copy
	tail    []byte    // what follows raw (its payload CRC)
	stats   []SegmentStat
	encode  time.Duration
	err     error
	ready   chan struct{} // closed once encoded
	encoded *sync.WaitGroup
	flushed chan struct{} // barrier: closed when all earlier frames are written
	data0   bool          // a data frame (counted in the end frame)
	foreign bool          // a data frame encoded elsewhere (WriteEncoded): counted, observed as Foreign
	inline  bool          // encoded on the caller's goroutine (WriteFrame)
}

// chunkBuf is a pooled buffer of byte-stream data that the frames cut from
// it share: it goes back to the pool when the last of them is done.
type chunkBuf struct {
	b    []byte
	refs atomic.Int32
}

// release drops j's hold on its pooled buffer.
func (w *Writer) release(j *job) {
	if j.buf != nil && j.buf.refs.Add(-1) == 0 {
		w.putBuf(j.buf.b)
	}
	j.buf = nil
}

// NewWriter returns a Writer that writes frames to w.
func NewWriter(w io.Writer, opts ...EOption) (*Writer, error) {
	cfg, err := newEConfig(opts)
	if err != nil {
		return nil, err
	}
	wr := &Writer{
		cfg:   cfg,
		dst:   w,
		enc:   &Encoder{cfg: cfg},
		jobs:  make(chan *job, cfg.concurrency),
		order: make(chan *job, window*cfg.concurrency),
		done:  make(chan struct{}),
	}
	wr.cutter, _ = cfg.policy.(Cutter)
	wr.frameCap = cfg.startFrame
	for range cfg.concurrency {
		wr.wg.Add(1)
		go wr.worker()
	}
	go wr.output()
	return wr, nil
}

func (w *Writer) worker() {
	defer w.wg.Done()
	for j := range w.jobs {
		w.encodeJob(j)
		if j.encoded != nil {
			j.encoded.Done()
		}
		close(j.ready)
	}
}

// encodeJob encodes a job's frame.
func (w *Writer) encodeJob(j *job) {
	t0 := time.Now()
	vectored := j.tensor == nil && j.recipe == nil && len(j.data) >= vectorMin
	out := w.getBuf()
	need := MaxEncodedLen(j.info.Len)
	if j.tensor != nil {
		need = MaxTensorLen(j.tensor)
	}
	if vectored {
		need = 64 // the head only
	}
	if cap(out) < need {
		out = make([]byte, 0, need)
	}
	switch {
	case j.tensor != nil:
		j.out, j.stats, j.err = w.enc.AppendTensorsStats(out, nil, []*Tensor{j.tensor}, []*Recipe{j.recipe})
	case vectored:
		// Stored raw: the head and tail go around the data itself
		// in one vectored write, with no copy of the data.
		j.out, j.tail = w.enc.AppendRawBytesHead(out, j.data)
		j.raw = j.data
		j.stats = []SegmentStat{{Name: "data", RawLen: len(j.data), StoredLen: len(j.data)}}
	default:
		j.out, j.stats, j.err = w.enc.AppendBytesStats(out, nil, j.data, j.recipe)
	}
	j.encode = time.Since(t0)
	if j.data != nil && j.raw == nil {
		w.release(j)
		j.data = nil
	}
}

func (w *Writer) output() {
	defer close(w.done)
	for j := range w.order {
		<-j.ready
		w.writeJob(j)
		w.inflight.Add(-1)
		if j.flushed != nil {
			close(j.flushed)
		}
	}
}

// writeJob writes an encoded job to the destination and reports it.
func (w *Writer) writeJob(j *job) {
	if j.flushed != nil {
		return
	}
	if err := w.Err(); err != nil {
		return // drain: after an error nothing more is written
	}
	if j.err != nil {
		w.setErr(j.err)
		w.observe(j, 0, j.err)
		return
	}
	t0 := time.Now()
	var n, want int64
	var err error
	if j.raw != nil {
		want = int64(len(j.out) + len(j.raw) + len(j.tail))
		bufs := net.Buffers{j.out, j.raw, j.tail}
		n, err = bufs.WriteTo(w.dst) // writev on sockets
	} else {
		var k int
		k, err = w.dst.Write(j.out)
		n, want = int64(k), int64(len(j.out))
	}
	blocked := time.Since(t0)
	if err == nil && n != want {
		err = io.ErrShortWrite
	}
	if err != nil {
		err = fmt.Errorf("codec: write: %w", err)
		w.setErr(err)
	} else if j.data0 || j.foreign {
		w.mu.Lock()
		w.frames++
		w.bytes += uint64(j.info.Len)
		w.mu.Unlock()
	}
	w.observe(j, blocked, err)
	w.putBuf(j.out[:0])
	if j.raw != nil {
		w.release(j)
	}
	j.raw, j.data = nil, nil
}

// vectorMin is the smallest raw chunk sent without a copy: below it, one
// copy into the frame costs less than a write of three buffers.
const vectorMin = 64 << 10

func (w *Writer) observe(j *job, blocked time.Duration, err error) {
	if w.cfg.policy == nil || !j.data0 && !j.foreign {
		return
	}
	info := j.info
	info.Data = nil
	w.cfg.policy.Observe(FrameStats{
		Info: info, Recipe: j.recipe, RawBytes: info.Len, FrameBytes: len(j.out) + len(j.raw) + len(j.tail),
		Segments: j.stats, Encode: j.encode, Blocked: blocked, Err: err, Foreign: j.foreign, Inline: j.inline,
	})
}

// frameBufs holds the frame and chunk buffers of every Writer, so that a
// Writer made per message does not allocate its own.
var frameBufs sync.Pool // *[]byte

func (w *Writer) getBuf() []byte {
	if b, ok := frameBufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return nil
}

func (w *Writer) putBuf(b []byte) {
	if cap(b) == 0 || cap(b) > 2*MaxChunkSize {
		return
	}
	b = b[:0]
	frameBufs.Put(&b)
}

// Err returns the first error the Writer met, if any.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Writer) setErr(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

// enqueue hands a job to the workers (when it needs encoding) and to the
// output goroutine, in order.
func (w *Writer) enqueue(j *job, encode bool) {
	if j.ready == nil {
		j.ready = make(chan struct{})
	}
	w.inflight.Add(1)
	w.order <- j
	if encode {
		w.jobs <- j
	} else {
		close(j.ready)
	}
}

func (w *Writer) start() error {
	if w.closed {
		return ErrClosed
	}
	if err := w.Err(); err != nil {
		return err
	}
	if !w.started {
		w.started = true
		if w.cfg.hello {
			h := &Hello{Peer: w.cfg.peer, Stages: stageIDs()}
			if _, err := rand.Read(h.Session[:]); err != nil {
				return fmt.Errorf("codec: session ID: %w", err)
			}
			w.enqueue(&job{out: AppendHello(nil, h)}, false)
		}
	}
	return nil
}

func stageIDs() []StageID {
	ss := Stages()
	ids := make([]StageID, len(ss))
	for i, s := range ss {
		ids[i] = s.ID
	}
	return ids
}

func (w *Writer) choose(info FrameInfo) *Recipe {
	if w.cfg.policy != nil {
		return w.cfg.policy.Choose(info)
	}
	return w.cfg.recipe
}

// WriteTensor writes t, cut into chunks. It returns when every chunk is
// encoded (or failed), so t.Data may be reused afterwards. A lossy recipe
// for a tensor tagged lossless is refused with ErrLossy before any frame
// of the tensor is queued.
func (w *Writer) WriteTensor(t *Tensor) error {
	if err := w.start(); err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	if !t.IsWhole() {
		return fmt.Errorf("codec: WriteTensor: %q is a chunk; write whole tensors", t.Name)
	}
	if err := encodable(t); err != nil {
		return err
	}
	// The policy and the pipeline see copies of the caller's metadata: the
	// caller may reuse t as soon as WriteTensor returns.
	shape := slices.Clone(t.Shape)
	tags := Tags{Lossless: t.Tags.Lossless, Extra: slices.Clone(t.Tags.Extra)}
	if err := w.flushPending(); err != nil {
		return err
	}
	esz := t.DType.Size()
	nel := len(t.Data) / esz
	chunkEl := max(1, w.cfg.chunkSize/esz)
	var wg sync.WaitGroup
	var jobs []*job
	var cur *Recipe
	for off := 0; off < nel || (off == 0 && nel == 0); {
		n := min(chunkEl, nel-off)
		info := FrameInfo{
			Seq: w.seq, Type: FrameTensor, Name: t.Name, DType: t.DType, Shape: shape, Tags: tags,
			Offset: int64(off), Len: n * esz, First: off == 0, Data: t.Data[off*esz : (off+n)*esz],
		}
		r := w.choose(info)
		if off == 0 {
			if t.Tags.Lossless && r.Lossy() {
				return fmt.Errorf("%w: tensor %q, recipe %q", ErrLossy, t.Name, r)
			}
			cur = r
			// Re-cut for the recipe's granularity.
			if g, _ := r.Granularity(); g == WholeTensor {
				if limit := DefaultLimits().MaxDecodedSize; int64(len(t.Data)) > limit {
					return fmt.Errorf("%w: recipe %q codes tensor %q whole, and its %d bytes exceed the %d a default reader accepts in one frame",
						ErrRecipe, r, t.Name, len(t.Data), limit)
				}
			}
			chunkEl = r.ChunkElements(esz, nel, w.cfg.chunkSize)
			n = min(chunkEl, nel-off)
			info.Len, info.Data = n*esz, t.Data[off*esz:(off+n)*esz]
		} else if cur.pinned() || r.pinned() || (t.Tags.Lossless && r.Lossy()) {
			r = cur // lossy and non-elementwise recipes change only at tensor boundaries
		} else {
			cur = r
		}
		chunk := &Tensor{Name: t.Name, DType: t.DType, Shape: shape, Tags: tags, Offset: int64(off),
			Version: t.Version, Base: t.Base, Data: info.Data}
		j := &job{info: info, recipe: r, tensor: chunk, encoded: &wg, data0: true}
		wg.Add(1)
		w.seq++
		jobs = append(jobs, j)
		w.enqueue(j, true)
		off += n
		if nel == 0 {
			break
		}
	}
	wg.Wait()
	for _, j := range jobs {
		if j.err != nil {
			w.setErr(j.err)
			return j.err
		}
	}
	return nil
}

// Write buffers p as part of a byte stream and emits a bytes frame for
// every full chunk. It never retains p.
func (w *Writer) Write(p []byte) (int, error) {
	if err := w.start(); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		if w.pending == nil {
			w.pending = w.getBuf()
			if cap(w.pending) < w.cfg.chunkSize {
				w.pending = make([]byte, 0, w.cfg.chunkSize)
			}
		}
		k := min(len(p), w.cfg.chunkSize-len(w.pending))
		w.pending = append(w.pending, p[:k]...)
		p = p[k:]
		if len(w.pending) == w.cfg.chunkSize {
			if err := w.flushPending(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, w.Err()
}

func (w *Writer) flushPending() error {
	if len(w.pending) == 0 {
		return nil
	}
	buf := &chunkBuf{b: w.pending}
	buf.refs.Store(1) // ours, until every frame cut from it is queued
	for data := w.pending; len(data) > 0; {
		n := w.cut(data)
		buf.refs.Add(1)
		w.emitBytes(data[:n], buf)
		data = data[n:]
	}
	w.pending = nil
	w.release(&job{buf: buf})
	return nil
}

// cut returns how many bytes of data (at most the chunk size) go into the
// next bytes frame: at most the start frame's size while the stream
// starts, then the policy's choice where it is a Cutter, else all.
func (w *Writer) cut(data []byte) int {
	if w.frameCap > 0 && len(data) > 0 {
		data = data[:min(len(data), w.frameCap)]
		if w.frameCap *= 2; w.frameCap >= w.cfg.chunkSize {
			w.frameCap = 0
		}
	}
	if w.cutter == nil || len(data) == 0 {
		return len(data)
	}
	return min(max(w.cutter.Cut(data), 1), len(data))
}

// bytesFrame returns the info of the next bytes frame holding data and
// the recipe the policy chooses for it.
func (w *Writer) bytesFrame(data []byte) (FrameInfo, *Recipe) {
	info := FrameInfo{Seq: w.seq, Type: FrameBytes, DType: Byte, Len: len(data), First: true, Data: data}
	r := w.choose(info)
	if r.Lossy() {
		r = nil // byte streams are always lossless: a lossy choice is stored raw
	}
	w.seq++
	return info, r
}

// emitBytes queues data as one bytes frame; buf holds it when it is the
// Writer's pooled buffer (the frame takes over one reference), nil when
// data is the caller's.
func (w *Writer) emitBytes(data []byte, buf *chunkBuf) {
	info, r := w.bytesFrame(data)
	w.enqueue(&job{info: info, recipe: r, data: data, buf: buf, data0: true}, true)
}

// Frames returns how many data frames (tensor, tensors, bytes, and those
// of WriteEncoded) have been written to the destination: what the end
// frame will count, and what the peer's feedback counts as received.
// After Flush it includes every frame written before.
func (w *Writer) Frames() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.frames
}

// ChunkSize is the decoded bytes per frame the Writer cuts data into.
func (w *Writer) ChunkSize() int { return w.cfg.chunkSize }

// WriteFrame writes p (at most the chunk size) as one bytes frame, or as
// several where the policy cuts it (Cutter), before it returns, encoding
// them on the calling goroutine: for a connection that sends each message
// at once, it saves the pipeline's hand-offs between goroutines, which
// cost more than the encoding of a small message. Data buffered by Write
// and frames still in the pipeline go first. The policy's Observe is
// called from the calling goroutine for such frames.
func (w *Writer) WriteFrame(p []byte) error {
	if len(p) > w.cfg.chunkSize {
		return fmt.Errorf("codec: WriteFrame: %d bytes, more than the chunk size %d", len(p), w.cfg.chunkSize)
	}
	if err := w.start(); err != nil {
		return err
	}
	if err := w.flushPending(); err != nil {
		return err
	}
	if w.inflight.Load() > 0 {
		if err := w.barrier(); err != nil {
			return err
		}
	}
	for first := true; first || len(p) > 0; first = false {
		n := w.cut(p)
		info, r := w.bytesFrame(p[:n])
		j := &job{info: info, recipe: r, data: p[:n], data0: true, inline: true}
		w.encodeJob(j)
		w.writeJob(j)
		if err := w.Err(); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// WriteBorrowed writes p as bytes frames, as Write does, but without
// copying it: p must not change until the next Flush or Close returns.
// Data buffered by Write goes first, in a frame of its own.
func (w *Writer) WriteBorrowed(p []byte) (int, error) {
	if err := w.start(); err != nil {
		return 0, err
	}
	if err := w.flushPending(); err != nil {
		return 0, err
	}
	for off := 0; off < len(p); {
		n := w.cut(p[off:min(off+w.cfg.chunkSize, len(p))])
		w.emitBytes(p[off:off+n], nil)
		off += n
	}
	return len(p), w.Err()
}

// WriteEncoded writes frame, one whole data frame encoded elsewhere (the
// frames of a gradient.Sender), after everything written so far, as part
// of the stream: the end frame counts it. The policy does not choose its
// recipe but observes it (FrameStats.Foreign), so that link estimates
// count its bytes. The frame is copied; a frame that is not one whole tensor, tensors or bytes
// frame is an error, and the stream is left as it was.
func (w *Writer) WriteEncoded(frame []byte) error {
	r := bytes.NewReader(frame)
	// The frame is the caller's own: only its header's shape is checked.
	h, _, err := ReadFrameHeader(r, r, Limits{MaxFrameSize: math.MaxInt64, MaxDecodedSize: math.MaxInt64, MaxSlowDecoded: math.MaxInt64, MaxTensorSize: math.MaxInt64}, nil)
	if err != nil {
		return fmt.Errorf("codec: WriteEncoded: %w", err)
	}
	switch {
	case h.Type != FrameTensor && h.Type != FrameTensors && h.Type != FrameBytes:
		return fmt.Errorf("codec: WriteEncoded: a %v frame, want a data frame", h.Type)
	case h.FrameLen() != int64(len(frame)):
		return fmt.Errorf("codec: WriteEncoded: %d bytes hold a frame of %d", len(frame), h.FrameLen())
	}
	var n int
	for _, e := range h.Entries {
		n += int(e.RawLen)
	}
	if err := w.start(); err != nil {
		return err
	}
	if err := w.flushPending(); err != nil {
		return err
	}
	info := FrameInfo{Seq: w.seq, Type: h.Type, Len: n, First: true}
	w.seq++
	w.enqueue(&job{info: info, out: append(w.getBuf(), frame...), foreign: true}, false)
	return w.Err()
}

// WriteControl writes a control frame after everything written so far.
func (w *Writer) WriteControl(kind uint64, payload []byte) error {
	if err := w.start(); err != nil {
		return err
	}
	if err := w.flushPending(); err != nil {
		return err
	}
	w.enqueue(&job{out: AppendControl(nil, kind, payload)}, false)
	return w.Err()
}

// Flush emits buffered byte-stream data and waits until every frame so far
// has been written to the underlying writer.
func (w *Writer) Flush() error {
	if err := w.start(); err != nil {
		return err
	}
	if err := w.flushPending(); err != nil {
		return err
	}
	return w.barrier()
}

func (w *Writer) barrier() error {
	j := &job{flushed: make(chan struct{})}
	w.enqueue(j, false)
	<-j.flushed
	return w.Err()
}

// Close flushes, writes the end-of-stream frame, waits for everything to
// be written and stops the pipeline. It does not close the underlying
// writer. Close is idempotent.
func (w *Writer) Close() error {
	if w.closed {
		return w.Err()
	}
	err := w.start()
	if err == nil {
		err = w.flushPending()
	}
	if err == nil {
		if err = w.barrier(); err == nil {
			w.mu.Lock()
			end := End{Frames: w.frames, Bytes: w.bytes}
			w.mu.Unlock()
			w.enqueue(&job{out: AppendEnd(nil, end)}, false)
		}
	}
	w.closed = true
	close(w.jobs)
	close(w.order)
	w.wg.Wait()
	<-w.done
	if err != nil {
		return err
	}
	return w.Err()
}
