package session

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/profile"
	"github.com/tensorpress/tensorpress/transport"
)

// Session is a tensor session on a transport.Conn: the Conn's byte stream,
// tensors and deadlines (its methods are the Session's), with WriteTensor
// applying a profile's rules and sending gradient updates whose error
// feedback is committed when the peer reports their frames received.
//
// Its methods are safe for concurrent use. Close (the Conn's) ends the
// updates: what the peer did not acknowledge stays in the residuals.
type Session struct {
	*transport.Conn
	o     options
	specs map[*profile.Rule]*gradient.Spec // the first gradient compressor of each rule that lists one
	dc    DensityChooser                   // the Conn's policy, where it chooses densities
	upd   updates
}

// DensityChooser is implemented by policies that choose the density of
// gradient updates (autotune.Tuner): Density returns the density of the
// next update of a tensor, the largest whose frame reaches the peer
// within the given time on the measured link (ok false: keep the
// compressor's own), and ObserveDensity learns from each frame sent.
type DensityChooser interface {
	Density(name string, dtype codec.DType, elements int64, tags codec.Tags, within time.Duration) (density float64, ok bool)
	ObserveDensity(density float64, elements int64, frameBytes int)
}

// Option configures a Session.
type Option func(*options) error

type options struct {
	conn    []transport.Option
	profile *profile.Profile // WriteTensor's rules
	peers   *gradient.Peers  // gradient updates' state per peer ID, across connections
	within  time.Duration    // the time a gradient update should take to arrive
}

// WithConn passes options to the transport.Conn under the Session (its
// policy, recipe, limits, peer ID, ...). A policy that is a
// DensityChooser chooses the density of gradient updates.
func WithConn(opts ...transport.Option) Option {
	return func(o *options) error { o.conn = append(o.conn, opts...); return nil }
}

// WithProfile gives WriteTensor the profile's rules: a tensor whose rule
// requires lossless coding is tagged lossless (no policy may then choose a
// lossy recipe for it), and a tensor whose rule lists gradient compressors
// is sent as a gradient update with error feedback (see WriteTensor), on
// the device the profile names (gradient.UseDevice). The recipes
// themselves are the policy's choice (an autotune.Tuner made with the same
// profile). Wrap refuses a profile whose gradient compressors do not
// parse.
func WithProfile(p *profile.Profile) Option {
	return func(o *options) error {
		if p == nil {
			return fmt.Errorf("session: nil profile")
		}
		o.profile = p
		return nil
	}
}

// WithPeers keeps the error-feedback state of gradient updates in p, per
// peer ID (the ID in the peer's hello), so that a connection to a peer
// that was connected before resumes with its residuals. Give the same
// Peers to every Session of a process. A peer without an ID, or a Session
// without WithPeers, gets state of its own that ends with the Session.
func WithPeers(p *gradient.Peers) Option {
	return func(o *options) error {
		if p == nil {
			return fmt.Errorf("session: nil peers")
		}
		o.peers = p
		return nil
	}
}

// WithUpdateDeadline sets the time a gradient update should take to reach
// the peer. With a policy that chooses densities (a DensityChooser, such
// as autotune.Tuner) each update's density is the largest the profile
// rule allows whose frame arrives within d on the measured link. 0 (the
// default) keeps each compressor's own density.
func WithUpdateDeadline(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("session: negative update deadline %v", d)
		}
		o.within = d
		return nil
	}
}

// Wrap returns a Session over c (transport.Wrap with the options given by
// WithConn). The peer wraps its end with Wrap or transport.Wrap. Close
// the Session, not c.
func Wrap(c net.Conn, opts ...Option) (*Session, error) {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	s := &Session{o: o}
	if o.profile != nil {
		specs, err := gradientSpecs(o.profile)
		if err != nil {
			return nil, fmt.Errorf("session: %w", err)
		}
		s.specs = specs
	}
	s.upd.cond = sync.NewCond(&s.upd.mu)
	s.upd.ended = make(chan struct{})
	tc, err := transport.Wrap(c, append(slices.Clip(o.conn), transport.WithAckObserver(observer{s}))...)
	if err != nil {
		return nil, err
	}
	s.Conn = tc
	s.dc, _ = tc.Policy().(DensityChooser)
	return s, nil
}

// gradientSpecs parses the first gradient compressor of each rule of p
// that lists one (the one WriteTensor uses), after checking them all.
func gradientSpecs(p *profile.Profile) (map[*profile.Rule]*gradient.Spec, error) {
	if err := p.CheckGradients(func(s string) error { _, err := gradient.Parse(s); return err }); err != nil {
		return nil, err
	}
	specs := map[*profile.Rule]*gradient.Spec{}
	for i := range p.Rules {
		if r := &p.Rules[i]; len(r.Gradients) > 0 {
			s, err := gradient.Parse(r.Gradients[0].Text)
			if err != nil {
				return nil, err
			}
			specs[r] = s
		}
	}
	return specs, nil
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
// keeps all of it, and the next update of the tensor, on this Session or
// on the next one to the same peer (WithPeers), carries it. So an update
// is never lost, and the next update of a tensor waits until the peer has
// acknowledged the one before (about one round trip plus the feedback
// interval), or until the write deadline.
func (s *Session) WriteTensor(t *codec.Tensor) error {
	if t == nil {
		return fmt.Errorf("session: WriteTensor of a nil tensor")
	}
	tt := *t
	if p := s.o.profile; p != nil {
		r := p.Match(t.Name, t.DType, int64(len(t.Data)), t.Tags)
		tt.Tags.Lossless = tt.Tags.Lossless || r.RequireLossless
		if spec := s.specs[r]; spec != nil {
			return s.writeUpdate(&tt, spec)
		}
	}
	return s.Conn.WriteTensor(&tt)
}
