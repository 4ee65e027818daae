package gradient

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tensorpress/tensorpress/codec"
)

// Outbox sends gradient updates to one peer with error feedback that is
// committed update by update, when the transport knows the update's frame
// arrived.
//
// Each update is coded by a Sender for its compressor spec (one per spec
// text: specs parsed from the same text share it); the Senders
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
	senders map[specKey]*Sender
	pending []pendingUpdate // in Append order
	epoch   float64

	// Senders on a device (SetDevice): per spec, and the tensors whose
	// state lives there.
	newDev   func(Compressor, *codec.Recipe) (DeviceSender, error)
	handle   Device // UseDevice's, closed by Close
	logf     func(format string, args ...any)
	dev      map[specKey]DeviceSender
	cpuOnly  map[specKey]bool
	onDevice map[string]DeviceSender

	plan plans // topk(r,model=on)'s densities (Plan)
}

// specKey identifies a spec's Sender in an Outbox: its text where Parse
// made it (specs of the same text, parsed by each connection or upload,
// share one Sender and its device state), else the pointer.
type specKey struct {
	text string
	p    *Spec
}

func (s *Spec) key() specKey {
	if s.text != "" {
		return specKey{text: s.text}
	}
	return specKey{p: s}
}

// pendingUpdate is an update appended and neither accepted nor aborted:
// its State (the CPU's Senders), or its tensor on a DeviceSender.
type pendingUpdate struct {
	st   *State
	dev  DeviceSender
	name string
}

func (p pendingUpdate) commit() error {
	if p.dev != nil {
		return p.dev.CommitTensor(p.name)
	}
	p.st.commit()
	return nil
}

func (p pendingUpdate) abort() error {
	if p.dev != nil {
		return p.dev.AbortTensor(p.name)
	}
	p.st.abort()
	return nil
}

// DeviceSender is a Sender whose state lives on a device (package gpu's
// Sender): the same frames for the same updates, with each tensor's
// update committed or aborted on its own.
type DeviceSender interface {
	SetCompressor(c Compressor) error
	SetEpoch(e float64)
	Append(dst []byte, t *codec.Tensor) ([]byte, error)
	CommitTensor(name string) error
	AbortTensor(name string) error
	Pending(name string) bool
	Close() error
}

// SetDevice makes the Outbox send through senders newSender makes on a
// device (gpu.Device.OutboxSender), one per spec, for the tensors that
// have no error-feedback state on the CPU yet; their residuals then stay
// on the device (Memory does not hold them). Where newSender refuses a
// compressor (codec.ErrUnsupported: it runs on the CPU only) or fails
// (the device is out of memory, say), and where the device fails a
// tensor's first update, the CPU's Sender takes it, and logf (nil: no
// log) says so once per spec or tensor. Close frees the device senders.
func (o *Outbox) SetDevice(newSender func(c Compressor, tail *codec.Recipe) (DeviceSender, error), logf func(format string, args ...any)) {
	o.newDev, o.logf = newSender, logf
	o.dev, o.cpuOnly, o.onDevice = map[specKey]DeviceSender{}, map[specKey]bool{}, map[string]DeviceSender{}
}

// useDevice is SetDevice with the senders of an open device handle d,
// which Close gives back.
func (o *Outbox) useDevice(d Device, logf func(format string, args ...any)) {
	o.SetDevice(d.NewSender, logf)
	o.handle = d
}

// HasDevice reports whether SetDevice (or UseDevice) was called.
func (o *Outbox) HasDevice() bool { return o.newDev != nil }

func (o *Outbox) log(format string, args ...any) {
	if o.logf != nil {
		o.logf(format, args...)
	}
}

// Close frees what the Outbox holds on a device (SetDevice); its pending
// updates there are aborted first. A device that UseDevice opened is given
// back (the Outbox then sends on the CPU, until UseDevice again).
func (o *Outbox) Close() error {
	var errs []error
	for _, p := range o.pending {
		if p.dev != nil {
			errs = append(errs, p.dev.AbortTensor(p.name))
		}
	}
	for spec, ds := range o.dev {
		errs = append(errs, ds.Close())
		delete(o.dev, spec)
	}
	clear(o.onDevice)
	if o.handle != nil {
		errs = append(errs, o.handle.Close())
		o.handle, o.newDev = nil, nil
	}
	return errors.Join(errs...)
}

// NewOutbox returns an Outbox whose error-feedback state is m (nil: a new
// Memory).
func NewOutbox(m *Memory) *Outbox {
	if m == nil {
		m = NewMemory()
	}
	return &Outbox{mem: m, senders: map[specKey]*Sender{}}
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
	if ds, ok := o.onDevice[name]; ok {
		return ds.Pending(name)
	}
	st, ok := o.mem.states[name]
	return ok && st.busy
}

// Append compresses t (float32, whole) with spec's compressor, at density
// when density is in (0, 1] and the compressor has one (AtDensity), else
// at the density Plan set where the compressor selects over the whole
// update (topk(r,model=on)), and appends its frame to dst. The update stays pending until Accept or
// Abort.
func (o *Outbox) Append(dst []byte, t *codec.Tensor, spec *Spec, density float64) ([]byte, error) {
	if spec == nil {
		return dst, fmt.Errorf("gradient: Outbox.Append: nil spec")
	}
	c := spec.Compressor
	if density > 0 {
		if cd, ok := AtDensity(c, float32(density)); ok {
			c = cd
		}
	}
	c, err := o.planned(c, t, spec)
	if err != nil {
		return dst, err
	}
	if out, ok, err := o.appendDevice(dst, t, spec, c); ok || err != nil {
		return out, err
	}
	s := o.senders[spec.key()]
	if s == nil {
		var err error
		if s, err = spec.NewSender(WithMemory(o.mem)); err != nil {
			return dst, err
		}
		o.senders[spec.key()] = s
	}
	s.SetCompressor(c)
	s.SetEpoch(o.epoch)
	out, err := s.Append(dst, t)
	if err != nil {
		return dst, err
	}
	// The Sender staged one state; the Outbox commits it on its own.
	for _, st := range s.pending {
		o.pending = append(o.pending, pendingUpdate{st: st})
	}
	s.pending = s.pending[:0]
	return out, nil
}

// appendDevice appends t's update through a device sender where one takes
// it (ok); err is a device failure on a tensor whose state is there.
func (o *Outbox) appendDevice(dst []byte, t *codec.Tensor, spec *Spec, c Compressor) (out []byte, ok bool, err error) {
	if o.newDev == nil {
		return dst, false, nil
	}
	ds, there := o.onDevice[t.Name]
	if !there {
		if _, onCPU := o.mem.states[t.Name]; onCPU || o.cpuOnly[spec.key()] {
			return dst, false, nil
		}
		if !spec.Feedback || spec.Dense1D {
			o.log("gradient: %v runs on the CPU: the device keeps error feedback for every tensor", spec)
			o.cpuOnly[spec.key()] = true
			return dst, false, nil
		}
		if ds = o.dev[spec.key()]; ds == nil {
			var err error
			if ds, err = o.newDev(c, spec.Tail); err != nil {
				o.log("gradient: %v runs on the CPU: %v", spec, err)
				o.cpuOnly[spec.key()] = true
				return dst, false, nil
			}
			o.dev[spec.key()] = ds
		}
	}
	if err := ds.SetCompressor(c); err != nil {
		return dst, there, err
	}
	ds.SetEpoch(o.epoch)
	out, err = ds.Append(dst, t)
	if err != nil {
		if !there {
			o.log("gradient: tensor %q runs on the CPU: %v", t.Name, err)
			return dst, false, nil
		}
		return dst, true, err
	}
	o.onDevice[t.Name] = ds
	o.pending = append(o.pending, pendingUpdate{dev: ds, name: t.Name})
	return out, true, nil
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

// Close closes the Outbox of every peer (Outbox.Close: what it holds on a
// device is freed, and a device UseDevice opened is given back), when no
// connection holds any: call it once the connections have ended. A peer
// still held is left as it is, and named in the error.
func (p *Peers) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for id, s := range p.m {
		select {
		case s.held <- struct{}{}:
			errs = append(errs, s.ob.Close())
			<-s.held
		default:
			errs = append(errs, fmt.Errorf("gradient: peer %q is still held by a connection", id))
		}
	}
	return errors.Join(errs...)
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
