package transport

import (
	"fmt"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/profile"
)

// Option configures a Conn.
type Option func(*options) error

type options struct {
	codec         []codec.EOption
	policy        codec.Policy
	recipe        *codec.Recipe
	limits        codec.Limits
	peerID        string
	readAhead     int
	closeTimeout  time.Duration
	feedbackEvery time.Duration
	onFeedback    func(Feedback)
	onControl     func(kind uint64, payload []byte)

	decoders int // frames decoded at once by the background reader

	profile *profile.Profile                 // WriteTensor's rules
	specs   map[*profile.Rule]*gradient.Spec // the first gradient compressor of each rule that lists one
	peers   *gradient.Peers                  // gradient updates' state per peer ID, across connections
	within  time.Duration                    // the time a gradient update should take to arrive
}

// DefaultCloseTimeout bounds how long Close waits to send the end frame to
// a peer that does not read.
const DefaultCloseTimeout = 5 * time.Second

// startFrame is the largest first frame of a byte stream
// (codec.WithStartFrame; WithCodec may set another).
const startFrame = 16 << 10

// DefaultFeedbackInterval is the shortest time between two feedback frames.
const DefaultFeedbackInterval = 20 * time.Millisecond

func defaultOptions() options {
	return options{readAhead: 4, closeTimeout: DefaultCloseTimeout, feedbackEvery: DefaultFeedbackInterval, decoders: 1}
}

// WithRecipe codes every frame with r (default: stored raw). Frames whose
// recipe the peer cannot decode are stored raw.
func WithRecipe(r *codec.Recipe) Option {
	return func(o *options) error { o.recipe = r; return nil }
}

// WithPolicy lets p choose each frame's recipe (an autotune.Tuner, for
// one). If p implements codec.FeedbackObserver it receives the peer's
// feedback; if it is a ConnUser, Wrap calls UseConn with the underlying
// connection (to read TCP_INFO, or to see that the peer is on loopback).
func WithPolicy(p codec.Policy) Option {
	return func(o *options) error {
		if p == nil {
			return fmt.Errorf("transport: nil policy")
		}
		o.policy = p
		return nil
	}
}

// WithCodec passes Writer options (chunk size, concurrency, payload CRC)
// to the frame writer. A policy or recipe given here is overridden by
// WithPolicy and WithRecipe.
func WithCodec(opts ...codec.EOption) Option {
	return func(o *options) error { o.codec = append(o.codec, opts...); return nil }
}

// WithLimits sets the limits the peer's frames are read with (zero fields
// keep codec's defaults).
func WithLimits(l codec.Limits) Option {
	return func(o *options) error { o.limits = l; return nil }
}

// WithPeerID sets the peer ID announced in the hello.
func WithPeerID(id string) Option {
	return func(o *options) error { o.peerID = id; return nil }
}

// WithReadAhead sets how many decoded frames wait for Read before the
// background reader stops reading the connection (default 4).
func WithReadAhead(frames int) Option {
	return func(o *options) error {
		if frames < 1 || frames > 1024 {
			return fmt.Errorf("transport: read-ahead of %d frames outside [1, 1024]", frames)
		}
		o.readAhead = frames
		return nil
	}
}

// WithCloseTimeout bounds how long Close waits to deliver the end frame
// (default DefaultCloseTimeout). 0 closes at once without it: the peer's
// Read then reports an unexpected EOF rather than io.EOF.
func WithCloseTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("transport: negative close timeout %v", d)
		}
		o.closeTimeout = d
		return nil
	}
}

// WithFeedbackInterval sets the shortest time between two feedback frames
// to the peer (default DefaultFeedbackInterval); a negative interval sends
// none.
func WithFeedbackInterval(d time.Duration) Option {
	return func(o *options) error { o.feedbackEvery = d; return nil }
}

// WithFeedbackHandler calls f with each feedback report from the peer,
// from the goroutine that reads the connection: f must not block.
func WithFeedbackHandler(f func(Feedback)) Option {
	return func(o *options) error { o.onFeedback = f; return nil }
}

// WithControlHandler calls f with each application control frame (kind
// 1024 and up) from the peer, from the goroutine that reads the
// connection: f must not block or keep payload.
func WithControlHandler(f func(kind uint64, payload []byte)) Option {
	return func(o *options) error { o.onControl = f; return nil }
}

// WithDecoderConcurrency sets how many of the peer's frames the
// background reader decodes at once (codec.WithDecoderConcurrency; default
// 1): the chunks of a large tensor are decoded in parallel, each into its
// place. Frames are still delivered in order.
func WithDecoderConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 || n > codec.MaxConcurrency {
			return fmt.Errorf("transport: decoder concurrency %d outside [1, %d]", n, codec.MaxConcurrency)
		}
		o.decoders = n
		return nil
	}
}

// WithProfile gives WriteTensor the profile's rules: a tensor whose rule
// requires lossless coding is tagged lossless (no policy may then choose a
// lossy recipe for it), and a tensor whose rule lists gradient compressors
// is sent as a gradient update with error feedback (see WriteTensor). The
// recipes themselves are the policy's choice (an autotune.Tuner made with
// the same profile).
func WithProfile(p *profile.Profile) Option {
	return func(o *options) error {
		if p == nil {
			return fmt.Errorf("transport: nil profile")
		}
		specs, err := gradientSpecs(p)
		if err != nil {
			return fmt.Errorf("transport: %w", err)
		}
		o.profile, o.specs = p, specs
		return nil
	}
}

// WithPeers keeps the error-feedback state of gradient updates in p, per
// peer ID (the ID in the peer's hello), so that a connection to a peer
// that was connected before resumes with its residuals. Give the same
// Peers to every Conn of a process. A peer without an ID, or a Conn
// without WithPeers, gets state of its own that ends with the Conn.
func WithPeers(p *gradient.Peers) Option {
	return func(o *options) error {
		if p == nil {
			return fmt.Errorf("transport: nil peers")
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
			return fmt.Errorf("transport: negative update deadline %v", d)
		}
		o.within = d
		return nil
	}
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
