package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
)

// Tensors on a Conn. A stream carries byte data (Write, Read), tensors
// (WriteTensor, ReadTensor) or both, in the order they were written; each
// kind is read by its own method, and a method that meets the other kind
// returns ErrTensorNext or ErrBytesNext without consuming it.

var (
	// ErrTensorNext is returned by Read when the next item of the stream is
	// a tensor: read it with ReadTensor.
	ErrTensorNext = errors.New("transport: the next item is a tensor (use ReadTensor)")
	// ErrBytesNext is returned by ReadTensor when the next item of the
	// stream is byte data: read it with Read.
	ErrBytesNext = errors.New("transport: the next item is byte data (use Read)")
)

// DensityChooser is implemented by policies that choose the density of
// gradient updates (autotune.Tuner): Density returns the density of the
// next update of a tensor, the largest whose frame reaches the peer
// within the given time on the measured link (ok false: keep the
// compressor's own), and ObserveDensity learns from each frame sent.
type DensityChooser interface {
	Density(name string, dtype codec.DType, elements int64, tags codec.Tags, within time.Duration) (density float64, ok bool)
	ObserveDensity(density float64, elements int64, frameBytes int)
}

// item is what the background reader hands to Read and ReadTensor.
type item struct {
	b []byte        // decoded byte data (a pooled buffer)
	t *codec.Tensor // or a whole tensor
}

// updates is a Conn's state of the gradient updates it sends.
type updates struct {
	send   sync.Mutex // held by the update being sent
	mu     sync.Mutex
	cond   *sync.Cond // signalled when an update is accepted or aborted, and when updates end
	ob     *gradient.Outbox
	shared bool     // ob is held from the Conn's Peers under id
	id     string   // the peer's ID
	seqs   []uint64 // per pending update, in order: the frame count its frame completes
	acked  uint64   // data frames the peer reported received
	over   error    // updates can no longer be acknowledged: the stream ended
	buf    []byte   // frame buffer, reused
}

// WriteTensor sends t, a whole tensor, and returns once its frames are
// written to the connection (the peer may not have read them yet).
//
// With a profile (WithProfile), t's rule decides how: a rule that
// requires lossless coding tags t lossless, and a rule that lists gradient
// compressors makes t a gradient update (float32): compensated by the
// residual of the tensor's earlier updates, compressed by the rule's first
// compressor (at the density the policy chooses, with WithUpdateDeadline
// and a DensityChooser policy), and sent as one frame. The update's error
// feedback is committed only when the peer reports that it received the
// frame (its feedback, or its acknowledgement of the end of the stream);
// when the stream fails or ends first, the update is aborted: its residual
// keeps all of it, and the next update of the tensor, on this Conn or on
// the next one to the same peer (WithPeers), carries it. So an update is
// never lost, and the next update of a tensor waits until the peer has
// acknowledged the one before (about one round trip plus the feedback
// interval).
func (c *Conn) WriteTensor(t *codec.Tensor) error {
	if t == nil {
		return fmt.Errorf("transport: WriteTensor of a nil tensor")
	}
	c.writers.Add(1)
	defer c.writers.Add(-1)
	if c.closing.Load() {
		return net.ErrClosed
	}
	tt := *t
	if p := c.o.profile; p != nil {
		r := p.Match(t.Name, t.DType, int64(len(t.Data)), t.Tags)
		tt.Tags.Lossless = tt.Tags.Lossless || r.RequireLossless
		if spec := c.o.specs[r]; spec != nil {
			return c.writeUpdate(&tt, spec)
		}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writable(); err != nil {
		return err
	}
	if err := c.awaitPeer(); err != nil {
		return err
	}
	if err := c.w.WriteTensor(&tt); err != nil {
		return c.writeErr(err)
	}
	return c.writeErr(c.w.Flush())
}

// writable reports, under wmu, why nothing more can be written.
func (c *Conn) writable() error {
	if c.shut {
		if c.closing.Load() {
			return net.ErrClosed
		}
		return ErrWriteClosed
	}
	return nil
}

// writeUpdate sends t as a gradient update compressed per spec.
func (c *Conn) writeUpdate(t *codec.Tensor, spec *gradient.Spec) error {
	c.wmu.Lock()
	err := c.writable()
	if err == nil {
		err = c.awaitPeer()
	}
	c.wmu.Unlock()
	if err != nil {
		return err
	}
	u := &c.upd
	ob, err := c.outbox()
	if err != nil {
		return err
	}
	// One update at a time, so that frames go out in the order of the
	// Outbox's pending updates; u.mu is not held while writing, so that the
	// pump can take in acknowledgements meanwhile.
	u.send.Lock()
	defer u.send.Unlock()
	u.mu.Lock()
	// The tensor's previous update must be accepted or aborted first: the
	// compensation takes its residual. The wait ends at the write deadline.
	if ob.IsPending(t.Name) {
		stop := c.wakeAtDeadline()
		defer stop()
	}
	for u.over == nil && ob.IsPending(t.Name) && !c.closing.Load() && !isClosed(c.wdl.wait()) {
		u.cond.Wait()
	}
	switch {
	case u.over != nil:
		u.mu.Unlock()
		return u.over
	case c.closing.Load():
		u.mu.Unlock()
		return net.ErrClosed
	case ob.IsPending(t.Name):
		u.mu.Unlock()
		return os.ErrDeadlineExceeded
	}
	elements := int64(len(t.Data) / 4)
	density := 0.0
	dc, _ := c.o.policy.(DensityChooser)
	if dc != nil && c.o.within > 0 {
		if d, ok := dc.Density(t.Name, t.DType, elements, t.Tags, c.o.within); ok {
			density = d
		}
	}
	frame, err := ob.Append(u.buf[:0], t, spec, density)
	if err != nil {
		u.mu.Unlock()
		return err
	}
	u.buf = frame
	if err := c.policy.decodable(frame); err != nil {
		ob.AbortLast()
		u.mu.Unlock()
		return fmt.Errorf("transport: gradient update of %q with %s: %w", t.Name, spec, err)
	}
	u.mu.Unlock()

	c.wmu.Lock()
	err = c.writable()
	if err == nil {
		if err = c.w.WriteEncoded(frame); err == nil {
			err = c.w.Flush()
		}
		err = c.writeErr(err)
	}
	seq := c.w.Frames()
	c.wmu.Unlock()

	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ob != ob {
		// The updates ended while the frame was written (and were aborted).
		if err == nil {
			err = u.over
		}
		return err
	}
	if err != nil {
		ob.Abort()
		u.seqs = u.seqs[:0]
		u.cond.Broadcast()
		return err
	}
	u.seqs = append(u.seqs, seq)
	c.acceptLocked()
	if density > 0 {
		dc.ObserveDensity(density, elements, len(frame))
	}
	return nil
}

// wakeAtDeadline wakes the updates' waiters when the write deadline
// passes; the returned function stops it.
func (c *Conn) wakeAtDeadline() (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-c.wdl.wait():
			c.upd.mu.Lock()
			c.upd.cond.Broadcast()
			c.upd.mu.Unlock()
		case <-done:
		}
	}()
	return func() { close(done) }
}

// outbox returns the Outbox of the peer's updates, acquiring it on the
// first update: from the Conn's Peers under the peer's ID, or a Conn's own.
func (c *Conn) outbox() (*gradient.Outbox, error) {
	u := &c.upd
	u.mu.Lock()
	if u.ob != nil || u.over != nil {
		defer u.mu.Unlock()
		return u.ob, u.over
	}
	u.mu.Unlock()
	id := ""
	if h := c.peer.Load(); h != nil {
		id = h.Peer
	}
	var ob *gradient.Outbox
	shared := c.o.peers != nil && id != ""
	if shared {
		// Wait for the peer's previous Conn to end, or for this one to.
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-c.closed:
			case <-c.pumpDone:
			case <-c.wdl.wait():
			case <-ctx.Done():
			}
			cancel()
		}()
		var err error
		ob, err = c.o.peers.Acquire(ctx, id)
		cancel()
		if err != nil {
			if c.closing.Load() {
				return nil, net.ErrClosed
			}
			if isClosed(c.wdl.wait()) {
				return nil, fmt.Errorf("%w: %v", os.ErrDeadlineExceeded, err)
			}
			return nil, err
		}
	} else {
		ob = gradient.NewOutbox(nil)
	}
	if err := c.useDevice(ob); err != nil {
		if shared {
			c.o.peers.Release(id, ob)
		}
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.over != nil || u.ob != nil {
		// The stream ended (or another Write acquired one) meanwhile.
		if shared {
			c.o.peers.Release(id, ob)
		}
		return u.ob, u.over
	}
	u.ob, u.shared, u.id = ob, shared, id
	return ob, nil
}

// acked records, from the pump, that the peer received frames data frames.
func (c *Conn) ackFrames(frames uint64) {
	u := &c.upd
	u.mu.Lock()
	u.acked = max(u.acked, frames)
	c.acceptLocked()
	u.mu.Unlock()
}

// acceptLocked accepts, under u.mu, the pending updates the peer reported.
func (c *Conn) acceptLocked() {
	u := &c.upd
	n := 0
	for n < len(u.seqs) && u.seqs[n] <= u.acked {
		n++
	}
	if n > 0 && u.ob != nil {
		u.ob.Accept(n)
		u.seqs = append(u.seqs[:0], u.seqs[n:]...)
		u.cond.Broadcast()
	}
}

// endUpdates ends the Conn's updates: pending ones are accepted when the
// peer acknowledged everything (all), aborted otherwise; a shared Outbox
// goes back to the Peers. Later updates fail with why.
func (c *Conn) endUpdates(all bool, why error) {
	u := &c.upd
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.over != nil {
		return
	}
	u.over = why
	if u.ob != nil {
		if all {
			u.ob.Accept(u.ob.Pending())
		}
		u.ob.Abort()
		if u.shared {
			c.o.peers.Release(u.id, u.ob)
		} else {
			u.ob.Close() // its device memory, if any
		}
		u.ob = nil
	}
	u.seqs = nil
	u.cond.Broadcast()
}

// ReadTensor returns the next tensor the peer sent, whole (chunks
// joined). It returns io.EOF after the peer's end frame, and ErrBytesNext,
// without consuming it, when byte data comes first.
func (c *Conn) ReadTensor() (*codec.Tensor, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closing.Load() {
		return nil, net.ErrClosed
	}
	if len(c.rest) > 0 {
		return nil, ErrBytesNext
	}
	for c.tnext == nil {
		select {
		case it, ok := <-c.data:
			if !ok {
				return nil, c.readErr()
			}
			if it.t == nil {
				c.rest, c.cur = it.b, it.b
				return nil, ErrBytesNext
			}
			c.tnext = it.t
		case <-c.closed:
			return nil, net.ErrClosed
		case <-c.rdl.wait():
			return nil, os.ErrDeadlineExceeded
		}
	}
	t := c.tnext
	c.tnext = nil
	c.consumed.Add(uint64(len(t.Data)))
	c.wantFeedback()
	return t, nil
}

// useDevice lets ob compress on a device where the profile says device:
// auto or a backend's name (gradient.UseDevice: the program links the
// backend, package gpu for cuda); with a name, a Conn without it fails.
func (c *Conn) useDevice(ob *gradient.Outbox) error {
	if p := c.o.profile; p != nil {
		if err := gradient.UseDevice(ob, string(p.Device)); err != nil {
			return fmt.Errorf("transport: %w", err)
		}
	}
	return nil
}
