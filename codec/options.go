package codec

import (
	"fmt"
	"runtime"
)

// Options come in two types, as in klauspost/compress/zstd: EOption
// configures an Encoder or a Writer, DOption a Decoder or a Reader. Each is
// checked where it is applied, so a bad value makes the constructor fail;
// an option that concerns only the streaming type (a Writer's chunk size,
// a Reader's concurrency) is refused by the in-memory type with an error
// rather than ignored.
//
// Defaults, all set in newEConfig and newDConfig:
//
//	Writer/Encoder                         Reader/Decoder
//	chunk size      DefaultChunkSize (1 MiB)   limits          DefaultLimits()
//	start frame     0 (every frame a chunk)    concurrency     1 (decode on the caller's goroutine)
//	concurrency     min(4, GOMAXPROCS)         tensor buffers  a new AlignedBytes per joined tensor
//	recipe          nil (store raw)
//	policy          none (the recipe)
//	payload CRC     CRCAlways
//	hello           on, no peer ID

// EOption configures an Encoder or a Writer.
type EOption func(*econfig) error

// DOption configures a Decoder or a Reader.
type DOption func(*dconfig) error

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

// MinChunkSize and MaxChunkSize bound the chunk size a Writer accepts.
const (
	MinChunkSize = 64
	MaxChunkSize = 64 << 20
)

// MaxConcurrency bounds WithEncoderConcurrency and WithDecoderConcurrency.
const MaxConcurrency = 256

type econfig struct {
	chunkSize   int
	startFrame  int
	concurrency int
	recipe      *Recipe
	policy      Policy
	payloadCRC  CRCMode
	hello       bool
	peer        string

	streamOnly string // the first Writer-only option applied, for NewEncoder's error
}

func newEConfig(opts []EOption) (econfig, error) {
	c := econfig{
		chunkSize:   DefaultChunkSize,
		concurrency: min(4, runtime.GOMAXPROCS(0)),
		payloadCRC:  CRCAlways,
		hello:       true,
	}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("codec: nil option")
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// writerOnly marks c as configured by the Writer-only option name.
func (c *econfig) writerOnly(name string) {
	if c.streamOnly == "" {
		c.streamOnly = name
	}
}

type dconfig struct {
	lim         Limits
	finite      bool
	concurrency int
	alloc       func(n int) []byte

	streamOnly  string // the first Reader-only option applied, for NewDecoder's error
	decoderOnly string // the first Decoder-only option applied, for NewReader's error
}

func newDConfig(opts []DOption) (dconfig, error) {
	c := dconfig{lim: DefaultLimits(), concurrency: 1}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("codec: nil option")
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithChunkSize sets the decoded bytes per frame (default DefaultChunkSize,
// at most MaxChunkSize). Tensors are cut on element boundaries (on block
// boundaries for block stages); whole-tensor stages ignore it. Writer only.
func WithChunkSize(n int) EOption {
	return func(c *econfig) error {
		if n < MinChunkSize || n > MaxChunkSize {
			return fmt.Errorf("codec: chunk size %d outside [%d, %d]", n, MinChunkSize, MaxChunkSize)
		}
		c.chunkSize = n
		c.writerOnly("WithChunkSize")
		return nil
	}
}

// WithStartFrame makes the first frames of a byte stream small: the first
// holds at most n bytes, each next at most twice as many as the one
// before, up to the chunk size (default 0: every frame up to the chunk
// size). A receiver decodes whole frames, so on a slow link the first
// byte of a stream cut into 1 MiB frames arrives after the whole first
// megabyte; transport.Wrap starts at 16 KiB. Tensor frames are not
// affected. Writer only.
func WithStartFrame(n int) EOption {
	return func(c *econfig) error {
		if n < 0 || n > MaxChunkSize {
			return fmt.Errorf("codec: start frame %d outside [0, %d]", n, MaxChunkSize)
		}
		c.startFrame = n
		c.writerOnly("WithStartFrame")
		return nil
	}
}

// WithEncoderConcurrency sets how many chunks a Writer encodes at once
// (default min(4, GOMAXPROCS), at most MaxConcurrency). Frames always
// leave in order, up to 2n of them encoded or being encoded while the
// oldest is written; memory is about (2n+2) times the chunk size. 1 still
// overlaps encoding with writing. Writer only: an Encoder encodes on the
// caller's goroutine and is safe for concurrent use.
func WithEncoderConcurrency(n int) EOption {
	return func(c *econfig) error {
		if n < 1 || n > MaxConcurrency {
			return fmt.Errorf("codec: concurrency %d outside [1, %d]", n, MaxConcurrency)
		}
		c.concurrency = n
		c.writerOnly("WithEncoderConcurrency")
		return nil
	}
}

// WithRecipe sets a fixed recipe for every frame (default: store raw).
// WithPolicy overrides it. Writer only: an Encoder takes a recipe per call.
func WithRecipe(r *Recipe) EOption {
	return func(c *econfig) error {
		c.recipe = r
		c.writerOnly("WithRecipe")
		return nil
	}
}

// WithPolicy lets p choose the recipe of each frame and observe the
// result. Writer only.
func WithPolicy(p Policy) EOption {
	return func(c *econfig) error {
		if p == nil {
			return fmt.Errorf("codec: nil policy")
		}
		c.policy = p
		c.writerOnly("WithPolicy")
		return nil
	}
}

// WithPayloadCRC sets when frames carry a payload CRC (default CRCAlways).
func WithPayloadCRC(m CRCMode) EOption {
	return func(c *econfig) error {
		if m > CRCOmitRaw {
			return fmt.Errorf("codec: unknown CRC mode %d", m)
		}
		c.payloadCRC = m
		return nil
	}
}

// WithHello sets whether a Writer opens the stream with a hello frame
// (default true). Writer only.
func WithHello(on bool) EOption {
	return func(c *econfig) error {
		c.hello = on
		c.writerOnly("WithHello")
		return nil
	}
}

// WithPeerID sets the peer ID a Writer's hello announces (default none;
// at most DefaultLimits().MaxNameLen bytes). Writer only.
func WithPeerID(id string) EOption {
	return func(c *econfig) error {
		if limit := DefaultLimits().MaxNameLen; len(id) > limit {
			return fmt.Errorf("codec: peer ID of %d bytes (readers accept %d by default)", len(id), limit)
		}
		c.peer = id
		c.writerOnly("WithPeerID")
		return nil
	}
}

// WithLimits sets the decoding limits: its zero fields keep the values
// set before, DefaultLimits' or an earlier WithLimits' (so a package that
// hands out options with its own limits first keeps those the caller does
// not set).
func WithLimits(l Limits) DOption {
	return func(c *dconfig) error {
		c.lim = l.Fill(c.lim)
		return nil
	}
}

// WithFiniteAdd makes DecodeAdd refuse an entry that would add a NaN or
// an infinity (a value, or a value times alpha, past float32's range) to
// its accumulator: the error wraps ErrNonFinite and the accumulator is
// left as it was (default false). An aggregator of peers' updates wants
// it: one NaN in one update would otherwise make the sum of every update
// counted before it NaN for good. Finite values whose sum passes
// float32's range (values near 3.4e38) are not caught. Decoder only.
func WithFiniteAdd(on bool) DOption {
	return func(c *dconfig) error {
		c.finite = on
		if c.decoderOnly == "" {
			c.decoderOnly = "WithFiniteAdd"
		}
		return nil
	}
}

// WithTensorBuffers makes ReadTensor (and NextJoined) take the buffer of
// each tensor it joins from chunks from alloc: alloc(n) returns a slice of
// at least n bytes, 8-byte aligned so that View works (AlignedBytes), whose
// contents will be overwritten. A receiver that gets the same tensors
// again and again (a model every round) can hand back the buffers of the
// previous round, which saves the allocation, its zeroing and its page
// faults (default: a new AlignedBytes). Reader only.
func WithTensorBuffers(alloc func(n int) []byte) DOption {
	return func(c *dconfig) error {
		if alloc == nil {
			return fmt.Errorf("codec: nil tensor buffer function")
		}
		c.alloc = alloc
		if c.streamOnly == "" {
			c.streamOnly = "WithTensorBuffers"
		}
		return nil
	}
}

// WithDecoderConcurrency sets how many frames a Reader decodes at once
// (default 1: on the caller's goroutine; at most MaxConcurrency). With
// n > 1 a goroutine reads frames ahead and n workers decode them while the
// caller consumes earlier ones; results come in stream order, errors at
// the frame where they happened. Memory is bounded by about 2n frames
// (each within the limits). Reader only.
func WithDecoderConcurrency(n int) DOption {
	return func(c *dconfig) error {
		if n < 1 || n > MaxConcurrency {
			return fmt.Errorf("codec: concurrency %d outside [1, %d]", n, MaxConcurrency)
		}
		c.concurrency = n
		if c.streamOnly == "" {
			c.streamOnly = "WithDecoderConcurrency"
		}
		return nil
	}
}
