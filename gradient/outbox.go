package gradient

import (
	"context"
	"fmt"
	"sync"

	"github.com/tensorpress/tensorpress/codec"
)

// Outbox sends gradient updates to one peer with error feedback that is
// committed update by update, when the transport knows the update's frame
// arrived.
//
// Each update is coded by a Sender for its compressor spec; the Senders
// share the Outbox's Memory (one residual per tensor name, whatever the
// compressor, so a change of compressor or density keeps it). Append leaves
// the update pending. Frames arrive in the order they were sent, so
// Accept(n) commits the n oldest pending updates; Abort returns every
// pending update to its residual, whole (their frames are lost: the next
// update of each tensor carries them). A tensor with an update pending
// is not appended again before that update is accepted or aborted.
//
// An Outbox is not safe for concurrent use.
type Outbox struct {
	mem     *Memory
	senders map[*Spec]*Sender
	pending []*State // in Append order
	epoch   float64
}

// NewOutbox returns an Outbox whose error-feedback state is m (nil: a new
// Memory).
func NewOutbox(m *Memory) *Outbox {
	if m == nil {
		m = NewMemory()
	}
	return &Outbox{mem: m, senders: map[*Spec]*Sender{}}
}

// Memory returns the Outbox's error-feedback state (committed updates
// only; MarshalBinary saves it).
func (o *Outbox) Memory() *Memory { return o.mem }

// SetEpoch tells the compressors' schedules (DGC's warm-up) where training
// is.
func (o *Outbox) SetEpoch(e float64) { o.epoch = e }

// Pending returns the number of updates appended and neither accepted nor
// aborted.
func (o *Outbox) Pending() int { return len(o.pending) }

// IsPending reports whether tensor name has an update pending.
func (o *Outbox) IsPending(name string) bool {
	st, ok := o.mem.states[name]
	return ok && st.busy
}

// Append compresses t (float32, whole) with spec's compressor, at density
// when density is in (0, 1] and the compressor has one (AtDensity), and
// appends its frame to dst. The update stays pending until Accept or
// Abort.
func (o *Outbox) Append(dst []byte, t *codec.Tensor, spec *Spec, density float64) ([]byte, error) {
	if spec == nil {
		return dst, fmt.Errorf("gradient: Outbox.Append: nil spec")
	}
	s := o.senders[spec]
	if s == nil {
		var err error
		if s, err = spec.NewSender(WithMemory(o.mem)); err != nil {
			return dst, err
		}
		o.senders[spec] = s
	}
	c := spec.Compressor
	if density > 0 {
		if cd, ok := AtDensity(c, float32(density)); ok {
			c = cd
		}
	}
	s.SetCompressor(c)
	s.SetEpoch(o.epoch)
	out, err := s.Append(dst, t)
	if err != nil {
		return dst, err
	}
	// The Sender staged one state; the Outbox commits it on its own.
	o.pending = append(o.pending, s.pending...)
	s.pending = s.pending[:0]
	return out, nil
}

// AbortLast returns the newest pending update to its residual: its frame
// is not going to be sent (the caller decided against it).
func (o *Outbox) AbortLast() {
	if n := len(o.pending); n > 0 {
		o.pending[n-1].abort()
		o.pending = o.pending[:n-1]
	}
}

// Accept commits the n oldest pending updates: their frames arrived.
func (o *Outbox) Accept(n int) {
	n = min(n, len(o.pending))
	for _, st := range o.pending[:n] {
		st.commit()
	}
	o.pending = append(o.pending[:0], o.pending[n:]...)
}

// Abort returns every pending update to its residual: their frames did
// not arrive (or may not have).
func (o *Outbox) Abort() {
	for _, st := range o.pending {
		st.abort()
	}
	o.pending = o.pending[:0]
}

// Peers keeps an Outbox per peer ID across connections, so that a peer
// that reconnects resumes with its residuals. A connection acquires its
// peer's Outbox for its own use and releases it when it ends; a second
// connection of the same peer waits until then.
//
// Peers is safe for concurrent use.
type Peers struct {
	mu sync.Mutex
	m  map[string]*peerSlot
}

type peerSlot struct {
	ob   *Outbox
	held chan struct{} // one token: taken by the connection using ob
}

// NewPeers returns an empty Peers.
func NewPeers() *Peers { return &Peers{m: map[string]*peerSlot{}} }

// Acquire returns the Outbox of peer id for the caller's exclusive use,
// waiting while another connection holds it, until ctx ends.
func (p *Peers) Acquire(ctx context.Context, id string) (*Outbox, error) {
	p.mu.Lock()
	s := p.m[id]
	if s == nil {
		s = &peerSlot{ob: NewOutbox(nil), held: make(chan struct{}, 1)}
		p.m[id] = s
	}
	p.mu.Unlock()
	select {
	case s.held <- struct{}{}:
		return s.ob, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("gradient: peer %q: waiting for its previous connection to end: %w", id, ctx.Err())
	}
}

// Release ends the caller's use of peer id's Outbox. Updates still
// pending are aborted: what is not known to have arrived stays residual.
func (p *Peers) Release(id string, ob *Outbox) {
	p.mu.Lock()
	s := p.m[id]
	p.mu.Unlock()
	if s == nil || s.ob != ob {
		panic("gradient: Peers.Release of an Outbox that was not acquired")
	}
	ob.Abort()
	<-s.held
}

// Memory returns peer id's error-feedback state (nil for a peer never
// acquired): committed updates, for inspection or to save. Do not use it
// while a connection holds the peer.
func (p *Peers) Memory(id string) *Memory {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.m[id]; s != nil {
		return s.ob.mem
	}
	return nil
}
