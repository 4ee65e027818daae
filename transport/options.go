package transport

import (
	"fmt"
	"time"

	"github.com/tensorpress/tensorpress/codec"
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

	acks AckObserver // told what the peer received (a session layer)
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

// WithAckObserver tells a what the peer reports it received of the frames
// this end sent, and when no more reports can come: the hook a session
// layer above the Conn (package session) commits gradient updates on.
func WithAckObserver(a AckObserver) Option {
	return func(o *options) error {
		if a == nil {
			return fmt.Errorf("transport: nil ack observer")
		}
		o.acks = a
		return nil
	}
}
