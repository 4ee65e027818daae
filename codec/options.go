package codec

import (
	"fmt"
	"runtime"
)

// Option configures a Writer or an Encoder. Options are checked when
// applied: a bad value makes NewWriter or NewEncoder fail.
type Option func(*config) error

// CRCMode says when frames carry a payload CRC.
type CRCMode uint8

const (
	// CRCAlways puts a payload CRC-32C on every frame with a payload.
	CRCAlways CRCMode = iota
	// CRCOmitRaw leaves it off frames whose segments are all stored as
	// they are (a trusted fast path: the header keeps its CRC).
	CRCOmitRaw
)

// DefaultChunkSize is the decoded size of the frames a Writer cuts tensors
// and byte streams into: large enough that the per-frame header is noise
// (under 0.01%) and the coders see their best ratio, small enough that a
// pipeline of a few chunks stays in cache-friendly memory.
const DefaultChunkSize = 1 << 20

// MaxChunkSize is the largest chunk size a Writer accepts.
const MaxChunkSize = 64 << 20

type config struct {
	chunkSize   int
	startFrame  int
	concurrency int
	recipe      *Recipe
	policy      Policy
	payloadCRC  CRCMode
	hello       bool
	peer        string
}

func newConfig(opts []Option) (config, error) {
	c := config{
		chunkSize:   DefaultChunkSize,
		concurrency: min(4, runtime.GOMAXPROCS(0)),
		payloadCRC:  CRCAlways,
		hello:       true,
	}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithChunkSize sets the decoded bytes per frame (default DefaultChunkSize,
// at most MaxChunkSize). Tensors are cut on element boundaries (on block
// boundaries for block stages); whole-tensor stages ignore it.
func WithChunkSize(n int) Option {
	return func(c *config) error {
		if n < 64 || n > MaxChunkSize {
			return fmt.Errorf("codec: chunk size %d outside [64, %d]", n, MaxChunkSize)
		}
		c.chunkSize = n
		return nil
	}
}

// WithStartFrame makes the first frames of a byte stream small: the first
// holds at most n bytes, each next at most twice as many as the one
// before, up to the chunk size (default 0: every frame up to the chunk
// size). A receiver decodes whole frames, so on a slow link the first
// byte of a stream cut into 1 MiB frames arrives after the whole first
// megabyte; transport.Wrap starts at 16 KiB. Tensor frames are not
// affected.
func WithStartFrame(n int) Option {
	return func(c *config) error {
		if n < 0 || n > MaxChunkSize {
			return fmt.Errorf("codec: start frame %d outside [0, %d]", n, MaxChunkSize)
		}
		c.startFrame = n
		return nil
	}
}

// WithConcurrency sets how many chunks are encoded at once (default
// min(4, GOMAXPROCS)). Frames always leave in order; memory is about
// (n+2) times the chunk size. 1 still overlaps encoding with writing.
func WithConcurrency(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 256 {
			return fmt.Errorf("codec: concurrency %d outside [1, 256]", n)
		}
		c.concurrency = n
		return nil
	}
}

// WithRecipe sets a fixed recipe for every frame (default: store raw).
// WithPolicy overrides it.
func WithRecipe(r *Recipe) Option {
	return func(c *config) error {
		c.recipe = r
		return nil
	}
}

// WithPolicy lets p choose the recipe of each frame and observe the result.
func WithPolicy(p Policy) Option {
	return func(c *config) error {
		if p == nil {
			return fmt.Errorf("codec: nil policy")
		}
		c.policy = p
		return nil
	}
}

// WithPayloadCRC sets when frames carry a payload CRC (default CRCAlways).
func WithPayloadCRC(m CRCMode) Option {
	return func(c *config) error {
		if m > CRCOmitRaw {
			return fmt.Errorf("codec: unknown CRC mode %d", m)
		}
		c.payloadCRC = m
		return nil
	}
}

// WithHello sets whether a Writer opens the stream with a hello frame
// (default true) and the peer ID it announces.
func WithHello(on bool, peer string) Option {
	return func(c *config) error {
		c.hello, c.peer = on, peer
		return nil
	}
}
