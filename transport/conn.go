package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/loopback"
)

// ErrWriteClosed is returned by Write after CloseWrite.
var ErrWriteClosed = errors.New("transport: write side closed")

// Conn is a net.Conn that sends what is written to it as format v1 frames
// and reads the frames its peer sends. Both ends must be wrapped.
//
// Each end opens its stream with a hello that lists the stages it decodes;
// a Write waits for the peer's hello, and a recipe that uses a stage the
// peer lacks is replaced by raw storage. A background goroutine reads the
// peer's frames: decoded data waits for Read in a queue of a few frames
// (then the peer is held back by the network, as without the wrapper), and
// control frames are handled as they arrive, so the receiver feedback
// (bytes received, decode time; a lower bound of the link rate for the
// sender's autotuner) flows even while the application is busy.
//
// Write sends its data before it returns (the frames are flushed; a large
// Write is encoded in chunks while earlier chunks are sent). Write, Read
// and the other methods are safe for concurrent use; concurrent Writes are
// sent one after the other, each contiguous.
//
// Deadlines: a write deadline is passed to the underlying connection; as
// with crypto/tls, once a Write has timed out the stream is broken and every
// later Write fails. A read deadline applies to Read only (the background
// reader keeps the stream); a timed-out Read can be retried.
//
// Close sends the end-of-stream frame (within the close timeout) unless a
// Write is in progress, then closes the underlying connection; the peer's
// Read returns io.EOF after the last data. CloseWrite sends the end frame
// and half-closes the underlying connection when it can.
type Conn struct {
	raw net.Conn
	o   options

	// Write side.
	wmu      sync.Mutex
	w        *codec.Writer
	endOnce  sync.Once    // the AckObserver told of the end
	shut     bool         // the Writer was closed (CloseWrite or Close); under wmu
	writers  atomic.Int32 // application Writes in progress
	wdl      deadline     // the write deadline, mirrored to bound waiting for the hello
	policy   *peerPolicy
	lastSent Feedback // under wmu

	// Read side.
	rmu      sync.Mutex
	rest     []byte        // unread part of the current chunk; under rmu
	cur      []byte        // the current chunk's buffer, back to bufs once read; under rmu
	bufs     sync.Pool     // *[]byte: decoded chunk buffers
	data     chan item     // decoded chunks and tensors from the pump
	tnext    *codec.Tensor // a tensor taken from data that Read met; under rmu
	rerr     error         // why the pump stopped; written before pumpDone closes
	pumpDone chan struct{}
	rdl      deadline
	consumed atomic.Uint64
	rstats   atomic.Pointer[codec.ReaderStats]

	peer      atomic.Pointer[codec.Hello]
	peerHello chan struct{} // closed when the peer's hello arrived

	kick      chan struct{} // asks the control goroutine for a feedback frame or the ack
	ackWanted atomic.Bool   // the peer's end frame arrived: acknowledge it
	ackSent   bool          // under wmu
	endSent   atomic.Bool   // our end frame went out
	acked     chan struct{} // closed when the peer acknowledged our end frame
	ackOnce   sync.Once
	discard   chan struct{} // closed by Close: data that arrives is dropped

	closing   atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error
	done      sync.WaitGroup
}

// Wrap returns a Conn speaking tensorpress frames over c. The peer must
// wrap its end too. Wrap does no I/O itself: the hello goes out from a
// background goroutine at once, and Read and Write work as soon as it
// returns. Close the Conn, not c.
func Wrap(c net.Conn, opts ...Option) (*Conn, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	tc := &Conn{
		raw:       c,
		o:         o,
		data:      make(chan item, o.readAhead),
		pumpDone:  make(chan struct{}),
		peerHello: make(chan struct{}),
		kick:      make(chan struct{}, 1),
		acked:     make(chan struct{}),
		discard:   make(chan struct{}),
		closed:    make(chan struct{}),
		wdl:       makeDeadline(),
		rdl:       makeDeadline(),
	}
	tc.policy = &peerPolicy{c: tc, inner: o.policy, fixed: o.recipe, ok: map[*codec.Recipe]bool{}}
	if u, ok := o.policy.(ConnUser); ok {
		u.UseConn(c)
	}
	// The first frames are small (16 KiB, doubling): the receiver decodes
	// whole frames, and the link's rate is not known yet.
	copts := []codec.EOption{codec.WithStartFrame(startFrame)}
	if loopback.Conn(c) {
		// A trusted fast path: raw frames carry no payload CRC (the
		// header keeps its own). Options given with WithCodec come after.
		copts = append(copts, codec.WithPayloadCRC(codec.CRCOmitRaw))
	}
	copts = append(append(copts, o.codec...), codec.WithPolicy(tc.policy), codec.WithHello(true), codec.WithPeerID(o.peerID))
	w, err := codec.NewWriter(c, copts...)
	if err != nil {
		return nil, err
	}
	tc.w = w
	tc.done.Add(2)
	go tc.pump()
	go tc.control()
	return tc, nil
}

// NetConn returns the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.raw }

// Peer returns the peer's hello, or nil before it arrived.
func (c *Conn) Peer() *codec.Hello { return c.peer.Load() }

// LocalAddr returns the underlying connection's local address.
func (c *Conn) LocalAddr() net.Addr { return c.raw.LocalAddr() }

// RemoteAddr returns the underlying connection's remote address.
func (c *Conn) RemoteAddr() net.Addr { return c.raw.RemoteAddr() }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the deadline for Read. It does not touch the
// underlying connection, which the background reader keeps reading.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the deadline for Write on the underlying
// connection. A Write that times out breaks the stream. While the
// deadline has passed, the connection sends no feedback or end-ack
// frames of its own (they would time out and break the stream too).
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wdl.set(t)
	err := c.raw.SetWriteDeadline(t)
	c.poke() // control frames held back by a passed deadline may go now
	return err
}

// Write encodes p into frames and sends them before it returns.
func (c *Conn) Write(p []byte) (int, error) {
	c.writers.Add(1)
	defer c.writers.Add(-1)
	if c.closing.Load() {
		return 0, net.ErrClosed
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.shut {
		if c.closing.Load() {
			return 0, net.ErrClosed
		}
		return 0, ErrWriteClosed
	}
	if err := c.awaitPeer(); err != nil {
		return 0, err
	}
	// p is sent before Write returns, so the frames may borrow it: raw
	// chunks go out without a copy. One frame's worth is encoded and sent
	// right here; more go through the Writer's pipeline (chunk k+1 is
	// encoded while chunk k is sent).
	if len(p) <= c.w.ChunkSize() {
		if err := c.w.WriteFrame(p); err != nil {
			return 0, c.writeErr(err)
		}
		return len(p), nil
	}
	if _, err := c.w.WriteBorrowed(p); err != nil {
		return 0, c.writeErr(err)
	}
	if err := c.w.Flush(); err != nil {
		return 0, c.writeErr(err)
	}
	return len(p), nil
}

// WriteControl sends a control frame of the given kind (1024 and up are
// the application's; the peer's WithControlHandler receives it).
func (c *Conn) WriteControl(kind uint64, payload []byte) error {
	if kind < 1024 {
		return fmt.Errorf("transport: control kind %d is reserved (applications use 1024 and up)", kind)
	}
	if c.closing.Load() {
		return net.ErrClosed
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.shut {
		return ErrWriteClosed
	}
	if err := c.w.WriteControl(kind, payload); err != nil {
		return c.writeErr(err)
	}
	return c.writeErr(c.w.Flush())
}

// awaitPeer waits, under wmu, for the peer's hello: the recipes chosen
// from now on may use only the stages it decodes. It sends the local hello
// first.
func (c *Conn) awaitPeer() error {
	select {
	case <-c.peerHello:
		return nil
	default:
	}
	if err := c.w.Flush(); err != nil { // the hello
		return c.writeErr(err)
	}
	select {
	case <-c.peerHello:
		return nil
	case <-c.pumpDone:
		return fmt.Errorf("transport: no hello from the peer: %w", c.rerr)
	case <-c.closed:
		return net.ErrClosed
	case <-c.wdl.wait():
		return os.ErrDeadlineExceeded
	}
}

// writeErr returns the network error under a Writer's error where there
// is one (callers test for timeouts with net.Error), else err.
func (c *Conn) writeErr(err error) error {
	if err == nil {
		return nil
	}
	if c.closing.Load() {
		return net.ErrClosed
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return ne
	}
	return err
}

// Read reads decoded data. It returns io.EOF after the peer's end frame.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closing.Load() {
		return 0, net.ErrClosed
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := c.fill(); err != nil {
		return 0, err
	}
	n := copy(p, c.rest)
	c.consumed.Add(uint64(n))
	c.advance(n)
	return n, nil
}

// fill waits, under rmu, until c.rest holds unread data.
func (c *Conn) fill() error {
	for len(c.rest) == 0 {
		if c.tnext != nil {
			return ErrTensorNext
		}
		select {
		case it, ok := <-c.data:
			if !ok {
				return c.readErr()
			}
			if it.t != nil {
				c.tnext = it.t
				return ErrTensorNext
			}
			c.rest, c.cur = it.b, it.b
		case <-c.closed:
			return net.ErrClosed
		case <-c.rdl.wait():
			return os.ErrDeadlineExceeded
		}
	}
	return nil
}

// advance consumes n bytes of c.rest; a chunk read to its end goes back
// to the pool and asks for a feedback report.
func (c *Conn) advance(n int) {
	c.rest = c.rest[n:]
	if len(c.rest) == 0 {
		c.putBuf(c.cur)
		c.rest, c.cur = nil, nil
		c.wantFeedback()
	}
}

// WriteTo writes the decoded data to w until the peer's end frame (io.Copy
// uses it): each chunk goes to w as it is, without a copy into a read
// buffer. It returns nil at the end of the stream.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closing.Load() {
		return 0, net.ErrClosed
	}
	var total int64
	for {
		if err := c.fill(); err != nil {
			if err == io.EOF {
				err = nil
			}
			return total, err
		}
		n, err := w.Write(c.rest)
		total += int64(n)
		c.consumed.Add(uint64(n))
		c.advance(n)
		if err != nil {
			return total, err
		}
	}
}

// maxPooled is the largest decoded chunk read into a pooled buffer: a
// header's claim is not a reason to allocate more before the bytes come.
const maxPooled = 4 << 20

func (c *Conn) getBuf(n int) []byte {
	if b, ok := c.bufs.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:0]
	}
	return codec.AlignedBytes(n)[:0]
}

func (c *Conn) putBuf(b []byte) {
	if cap(b) == 0 || cap(b) > maxPooled {
		return
	}
	b = b[:0]
	c.bufs.Put(&b)
}

func (c *Conn) readErr() error {
	if c.closing.Load() {
		return net.ErrClosed
	}
	return c.rerr
}

// CloseWrite sends the end-of-stream frame (the peer's Read returns
// io.EOF) and half-closes the underlying connection if it has CloseWrite.
// Reading goes on.
func (c *Conn) CloseWrite() error {
	if c.closing.Load() {
		return net.ErrClosed
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.shut {
		return nil
	}
	c.shut = true
	c.lastControl()
	err := c.writeErr(c.w.Close())
	if err == nil {
		c.endSent.Store(true)
		if cw, ok := c.raw.(interface{ CloseWrite() error }); ok {
			err = cw.CloseWrite()
		}
	}
	return err
}

// Close ends the stream and closes the underlying connection. Blocked
// Reads and Writes return net.ErrClosed. Unless a Write is in progress or
// the stream already failed, the end frame is sent first and Close waits
// for the peer to acknowledge it (about one round trip), both within the
// close timeout (WithCloseTimeout): closing a TCP socket while the peer's
// feedback is still arriving would reset the connection and destroy data
// the peer has not read yet.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Conn) close() error {
	c.closing.Store(true)
	close(c.discard)
	var err error
	if c.writers.Load() == 0 && c.o.closeTimeout > 0 {
		deadline := time.Now().Add(c.o.closeTimeout)
		c.raw.SetWriteDeadline(deadline)
		c.wmu.Lock()
		if !c.shut && c.w.Err() == nil {
			c.shut = true
			c.lastControl()
			if err = c.w.Close(); err == nil {
				c.endSent.Store(true)
				if cw, ok := c.raw.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				}
			}
		}
		c.wmu.Unlock()
		if c.endSent.Load() {
			t := time.NewTimer(time.Until(deadline))
			select {
			case <-c.acked:
			case <-c.pumpDone:
			case <-t.C:
			}
			t.Stop()
		}
	}
	c.ended(net.ErrClosed) // no acknowledgement will come now
	close(c.closed)
	if e := c.raw.Close(); err == nil {
		err = e
	}
	c.wmu.Lock()
	if !c.shut {
		c.shut = true
		c.w.Close() // stops the Writer's goroutines; the stream is cut
	}
	c.wmu.Unlock()
	c.done.Wait()
	return err
}

// pump reads the peer's frames until the stream ends or fails.
func (c *Conn) pump() {
	defer c.done.Done()
	var err error
	defer func() {
		c.rerr = err
		close(c.pumpDone)
		close(c.data)
		// No acknowledgement can come now.
		c.ended(fmt.Errorf("transport: the peer's stream ended: %w", err))
	}()
	r, err := codec.NewReader(c.raw, codec.WithLimits(c.o.limits), codec.WithDecoderConcurrency(c.o.decoders))
	if err != nil {
		return // cannot happen: the options were checked by Wrap
	}
	into := func(h *codec.FrameHeader, i int) []byte {
		if n := h.Entries[i].RawLen; h.Type == codec.FrameBytes && n <= maxPooled {
			return c.getBuf(int(n))
		}
		return nil // larger frames: the Reader's buffers, grown as bytes arrive
	}
	for first := true; ; first = false {
		f, e := r.NextJoined(into)
		if e != nil {
			err = e
			if first && e == io.EOF {
				err = fmt.Errorf("transport: the peer closed before its hello: %w", io.ErrUnexpectedEOF)
			}
			return
		}
		if first && f.Header.Type != codec.FrameHello {
			err = fmt.Errorf("%w: the peer's stream opens with a %v frame, not a hello (is the peer wrapped?)", codec.ErrCorrupt, f.Header.Type)
			return
		}
		switch f.Header.Type {
		case codec.FrameHello:
			if c.peer.Load() == nil {
				c.policy.setPeer(f.Header.Hello)
				c.peer.Store(f.Header.Hello)
				close(c.peerHello)
			}
		case codec.FrameBytes:
			st := r.Stats()
			c.rstats.Store(&st)
			if len(f.Bytes) == 0 {
				c.putBuf(f.Bytes)
				continue
			}
			if !c.deliver(item{b: f.Bytes}) {
				err = net.ErrClosed
				return
			}
			c.wantFeedback()
		case codec.FrameTensor, codec.FrameTensors:
			st := r.Stats()
			c.rstats.Store(&st)
			c.wantFeedback() // the sender may wait for it (a session's updates)
			for _, t := range f.Tensors {
				if !c.deliver(item{t: t}) {
					err = net.ErrClosed
					return
				}
			}
		case codec.FrameEnd:
			c.ackWanted.Store(true)
			c.poke()
			err = io.EOF
			return
		case codec.FrameControl:
			c.onControl(f.Header.Control, f.Control)
		}
	}
}

// deliver queues it for Read or ReadTensor; while closing it drops it
// (the pump keeps reading for the end-ack). It reports false once the
// Conn is closed.
func (c *Conn) deliver(it item) bool {
	select {
	case c.data <- it:
	case <-c.discard:
		c.putBuf(it.b)
	case <-c.closed:
		return false
	}
	return true
}

func (c *Conn) onControl(kind uint64, payload []byte) {
	switch {
	case kind == ControlEndAck:
		c.ackFrames(math.MaxUint64) // the peer read our end frame: every frame before it arrived
		c.ackOnce.Do(func() { close(c.acked) })
	case kind == ControlFeedback:
		fb, err := ParseFeedback(payload)
		if err != nil {
			return // a damaged report is dropped; the next one carries totals
		}
		c.ackFrames(fb.Frames)
		if fo, ok := c.o.policy.(FeedbackObserver); ok {
			fo.ObserveFeedback(fb)
		}
		if c.o.onFeedback != nil {
			c.o.onFeedback(fb)
		}
	case kind >= 1024 && c.o.onControl != nil:
		c.o.onControl(kind, payload)
	}
}

func (c *Conn) wantFeedback() {
	if c.o.feedbackEvery >= 0 {
		c.poke()
	}
}

func (c *Conn) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// control sends the hello at once, then feedback frames when asked, at
// most one per feedback interval, and the acknowledgement of the peer's
// end frame (after which nothing more is sent: the peer may be closing).
func (c *Conn) control() {
	defer c.done.Done()
	c.wmu.Lock()
	if !c.shut {
		c.w.Flush() // the hello; an error is the Writer's and Write reports it
	}
	c.wmu.Unlock()
	for {
		select {
		case <-c.closed:
			return
		case <-c.kick:
		}
		if !c.sendFeedback() {
			return
		}
		// At most one feedback frame per interval; the end-ack does not
		// wait (the peer's Close does).
		t := time.NewTimer(max(c.o.feedbackEvery, 0))
		kicked := false
	wait:
		for {
			select {
			case <-c.closed:
				t.Stop()
				return
			case <-t.C:
				break wait
			case <-c.kick:
				kicked = true
				if c.ackWanted.Load() {
					t.Stop()
					break wait
				}
			}
		}
		if kicked {
			c.poke()
		}
	}
}

// lastControl sends, under wmu before the end frame, what the control
// goroutine has not sent yet: the acknowledgement of the peer's end frame,
// or else the last feedback, so that the peer knows what arrived (its
// gradient updates are committed on it).
func (c *Conn) lastControl() {
	if c.ackWanted.Load() && !c.ackSent {
		c.ackSent = true
		c.w.WriteControl(ControlEndAck, nil)
		return
	}
	if fb := c.Feedback(); fb != c.lastSent && c.o.feedbackEvery >= 0 && !c.ackSent {
		if c.w.WriteControl(ControlFeedback, fb.AppendBinary(nil)) == nil {
			c.lastSent = fb
		}
	}
}

// sendFeedback sends the receive counters unless nothing changed. It
// reports false once the write side is gone.
func (c *Conn) sendFeedback() bool {
	fb := c.Feedback()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.shut || c.w.Err() != nil || c.closing.Load() || c.ackSent {
		return false
	}
	if isClosed(c.wdl.wait()) {
		// The application's write deadline has passed: a frame now would
		// time out and break the stream. SetWriteDeadline pokes again.
		return true
	}
	if c.ackWanted.Load() {
		c.ackSent = true
		if c.w.WriteControl(ControlEndAck, nil) == nil {
			c.w.Flush()
		}
		return false
	}
	if fb == c.lastSent || c.o.feedbackEvery < 0 {
		return true
	}
	if c.w.WriteControl(ControlFeedback, fb.AppendBinary(nil)) != nil || c.w.Flush() != nil {
		return false
	}
	c.lastSent = fb
	return true
}

// Feedback returns the local receive counters: what the next feedback
// frame to the peer will say.
func (c *Conn) Feedback() Feedback {
	var fb Feedback
	if st := c.rstats.Load(); st != nil {
		fb = Feedback{Frames: st.Frames, WireBytes: st.WireBytes, RawBytes: st.RawBytes, DecodeTime: st.DecodeTime}
	}
	fb.Consumed = c.consumed.Load()
	return fb
}

// peerPolicy chooses with the configured policy or recipe, then stores
// raw what the peer could not decode.
type peerPolicy struct {
	c     *Conn
	inner codec.Policy
	fixed *codec.Recipe

	mu     sync.Mutex
	stages map[codec.StageID]bool
	ok     map[*codec.Recipe]bool // recipes checked against stages
}

func (p *peerPolicy) setPeer(h *codec.Hello) {
	p.mu.Lock()
	p.stages = make(map[codec.StageID]bool, len(h.Stages))
	for _, id := range h.Stages {
		p.stages[id] = true
	}
	p.mu.Unlock()
	if po, ok := p.inner.(PeerObserver); ok {
		po.ObservePeer(h)
	}
}

// decodable checks that the peer announced every stage of an encoded
// frame (frames a policy chooses are checked in Choose; frames encoded
// elsewhere, such as gradient updates, here).
func (p *peerPolicy) decodable(frame []byte) error {
	br := bytes.NewReader(frame)
	// Our own frame: limits as wide as the encoder's.
	h, _, err := codec.ReadFrameHeader(br, br, codec.Limits{MaxFrameSize: math.MaxInt64, MaxDecodedSize: math.MaxInt64, MaxSlowDecoded: math.MaxInt64}, nil)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range h.Entries {
		for _, s := range e.Steps {
			if !p.stages[s.Stage] {
				name := fmt.Sprintf("ID %d", s.Stage)
				if op := s.Op(); op != nil {
					name = op.Stage().Name
				}
				return fmt.Errorf("the peer does not decode stage %s (%w)", name, codec.ErrUnsupported)
			}
		}
	}
	return nil
}

// Cut lets the configured policy cut byte streams into frames where it
// is a codec.Cutter.
func (p *peerPolicy) Cut(data []byte) int {
	if c, ok := p.inner.(codec.Cutter); ok {
		return c.Cut(data)
	}
	return len(data)
}

func (p *peerPolicy) Choose(fi codec.FrameInfo) *codec.Recipe {
	r := p.fixed
	if p.inner != nil {
		r = p.inner.Choose(fi)
	}
	if r == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ok, seen := p.ok[r]
	if !seen {
		ok = true
		for _, s := range r.Steps {
			for _, op := range s.Ops {
				ok = ok && p.stages[op.Stage().ID]
			}
		}
		if len(p.ok) > 1024 { // a policy that builds a recipe per frame
			clear(p.ok)
		}
		p.ok[r] = ok
	}
	if !ok {
		return nil
	}
	return r
}

func (p *peerPolicy) Observe(s codec.FrameStats) {
	if p.inner != nil {
		p.inner.Observe(s)
	}
}
