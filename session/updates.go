package session

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
)

// updates is a Session's state of the gradient updates it sends.
type updates struct {
	send   sync.Mutex // held by the update being sent
	mu     sync.Mutex
	cond   *sync.Cond // signalled when an update is accepted or aborted, and when updates end
	ob     *gradient.Outbox
	shared bool          // ob is held from the Session's Peers under id
	id     string        // the peer's ID
	seqs   []uint64      // per pending update, in order: the frame count its frame completes
	acked  uint64        // data frames the peer reported received
	over   error         // updates can no longer be acknowledged: the stream ended
	ended  chan struct{} // closed with over
	buf    []byte        // frame buffer, reused
}

// writeUpdate sends t as a gradient update compressed per spec: one
// update at a time, so that frames go out in the order of the Outbox's
// pending updates; u.mu is not held while writing, so that the Conn can
// report acknowledgements meanwhile.
func (s *Session) writeUpdate(t *codec.Tensor, spec *gradient.Spec) error {
	if err := s.AwaitPeer(); err != nil {
		return err
	}
	ob, err := s.outbox()
	if err != nil {
		return err
	}
	s.upd.send.Lock()
	defer s.upd.send.Unlock()
	frame, density, err := s.stage(ob, t, spec)
	if err != nil {
		return err
	}
	seq, err := s.Conn.WriteEncoded(frame)
	return s.settle(ob, seq, err, density, int64(len(t.Data)/4), len(frame))
}

// stage compresses t into a frame, pending in ob, once the tensor's
// previous update is settled.
func (s *Session) stage(ob *gradient.Outbox, t *codec.Tensor, spec *gradient.Spec) (frame []byte, density float64, err error) {
	u := &s.upd
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := s.awaitSettledLocked(ob, t.Name); err != nil {
		return nil, 0, err
	}
	density = s.density(t)
	frame, err = ob.Append(u.buf[:0], t, spec, density)
	if err != nil {
		return nil, 0, err
	}
	u.buf = frame
	if err := s.Decodable(frame); err != nil {
		ob.AbortLast()
		return nil, 0, fmt.Errorf("session: gradient update of %q with %s: %w", t.Name, spec, err)
	}
	return frame, density, nil
}

// awaitSettledLocked waits, under u.mu, until the previous update of the
// tensor called name is accepted or aborted (the compensation takes its
// residual): until the updates end, or the write deadline.
func (s *Session) awaitSettledLocked(ob *gradient.Outbox, name string) error {
	u := &s.upd
	if ob.IsPending(name) {
		stop := s.wakeAtDeadline()
		defer stop()
	}
	for u.over == nil && ob.IsPending(name) && !isClosed(s.WriteExpired()) {
		u.cond.Wait()
	}
	switch {
	case u.over != nil:
		return u.over
	case ob.IsPending(name):
		return os.ErrDeadlineExceeded
	}
	return nil
}

// density returns the density the policy chooses for update t, or 0 (the
// compressor's own).
func (s *Session) density(t *codec.Tensor) float64 {
	if s.dc == nil || s.o.within <= 0 {
		return 0
	}
	if d, ok := s.dc.Density(t.Name, t.DType, int64(len(t.Data)/4), t.Tags, s.o.within); ok {
		return d
	}
	return 0
}

// settle records the update just written (its frame completes seq data
// frames of the stream) as pending acknowledgement, or, where writing
// failed, aborts every pending update: the stream is broken.
func (s *Session) settle(ob *gradient.Outbox, seq uint64, err error, density float64, elements int64, frameBytes int) error {
	u := &s.upd
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
	s.acceptLocked()
	if density > 0 {
		s.dc.ObserveDensity(density, elements, frameBytes)
	}
	return nil
}

// wakeAtDeadline wakes the updates' waiters when the write deadline
// passes; the returned function stops it.
func (s *Session) wakeAtDeadline() (stop func()) {
	done := make(chan struct{})
	expired := s.WriteExpired()
	go func() {
		select {
		case <-expired:
			s.upd.mu.Lock()
			s.upd.cond.Broadcast()
			s.upd.mu.Unlock()
		case <-done:
		}
	}()
	return func() { close(done) }
}

// outbox returns the Outbox of the peer's updates, acquiring it on the
// first update: from the Session's Peers under the peer's ID, or a
// Session's own; on the profile's device.
func (s *Session) outbox() (*gradient.Outbox, error) {
	u := &s.upd
	u.mu.Lock()
	if u.ob != nil || u.over != nil {
		defer u.mu.Unlock()
		return u.ob, u.over
	}
	u.mu.Unlock()
	id := ""
	if h := s.Peer(); h != nil {
		id = h.Peer
	}
	shared := s.o.peers != nil && id != ""
	ob, err := s.acquire(shared, id)
	if err != nil {
		return nil, err
	}
	release := func() {
		if shared {
			s.o.peers.Release(id, ob)
		} else {
			ob.Close()
		}
	}
	if err := s.useDevice(ob); err != nil {
		release()
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.over != nil || u.ob != nil {
		// The stream ended (or another Write acquired one) meanwhile.
		release()
		return u.ob, u.over
	}
	u.ob, u.shared, u.id = ob, shared, id
	return ob, nil
}

// acquire returns the peer's Outbox from the Peers (waiting for the
// peer's previous Session to end, or for this one to, or for the write
// deadline), or a new one of the Session's own.
func (s *Session) acquire(shared bool, id string) (*gradient.Outbox, error) {
	if !shared {
		return gradient.NewOutbox(nil), nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.upd.ended:
		case <-s.WriteExpired():
		case <-ctx.Done():
		}
		cancel()
	}()
	ob, err := s.o.peers.Acquire(ctx, id)
	cancel()
	if err != nil {
		if isClosed(s.upd.ended) {
			s.upd.mu.Lock()
			defer s.upd.mu.Unlock()
			return nil, s.upd.over
		}
		if isClosed(s.WriteExpired()) {
			return nil, fmt.Errorf("%w: %v", os.ErrDeadlineExceeded, err)
		}
		return nil, err
	}
	return ob, nil
}

// useDevice lets ob compress on a device where the profile says device:
// auto or a backend's name (gradient.UseDevice: the program links the
// backend, package gpu for cuda); with a name, a Session without it
// fails.
func (s *Session) useDevice(ob *gradient.Outbox) error {
	if p := s.o.profile; p != nil {
		if err := gradient.UseDevice(ob, string(p.Device)); err != nil {
			return fmt.Errorf("session: %w", err)
		}
	}
	return nil
}

// acceptLocked accepts, under u.mu, the pending updates the peer reported.
func (s *Session) acceptLocked() {
	u := &s.upd
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

// observer is the Session's transport.AckObserver.
type observer struct{ s *Session }

// Acked records that the peer received frames data frames, and accepts
// the updates they complete.
func (o observer) Acked(frames uint64) {
	u := &o.s.upd
	u.mu.Lock()
	u.acked = max(u.acked, frames)
	o.s.acceptLocked()
	u.mu.Unlock()
}

// Ended ends the Session's updates: pending ones are aborted (their
// residuals keep them whole); a shared Outbox goes back to the Peers, a
// Session's own is closed. Later updates fail with why.
func (o observer) Ended(why error) {
	u := &o.s.upd
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.over != nil {
		return
	}
	if why != net.ErrClosed {
		why = fmt.Errorf("session: gradient updates: %w", why)
	}
	u.over = why
	close(u.ended)
	if u.ob != nil {
		u.ob.Abort()
		if u.shared {
			o.s.o.peers.Release(u.id, u.ob)
		} else {
			u.ob.Close() // its device memory, if any
		}
		u.ob = nil
	}
	u.seqs = nil
	u.cond.Broadcast()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
