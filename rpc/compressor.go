package rpc

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/sniff"
	"google.golang.org/grpc/encoding"
)

// Name is the name tensorpress frames travel under in grpc-encoding.
const Name = "tensorpress"

// DefaultChunkSize is the largest frame a Compressor makes of a message:
// small enough that a receiver needs little memory per message, large
// enough that the frame header is noise.
const DefaultChunkSize = 1 << 20

// DefaultLimits are the limits a Compressor decodes messages with: a frame
// may claim at most 8 MiB decoded (a sender's chunk, with room), so a
// small message that claims a huge one is refused before anything is
// allocated. gRPC bounds the message as a whole (its receive limit). No
// byte of a frame may decode through the stages of some MB/s (floatcm,
// floatrank: a frame of 8 MiB of zeros is under 24 KB and takes 0.5-1.2 s
// of a core): they code typed tensors, and a Compressor's frames hold
// bytes.
func DefaultLimits() codec.Limits {
	return codec.Limits{MaxHeaderSize: 64 << 10, MaxFrameSize: 8 << 20, MaxDecodedSize: 8 << 20, MaxTensorSize: 8 << 20, MaxSlowDecoded: 1}
}

func init() {
	c, err := NewCompressor()
	if err != nil {
		panic(err) // no options: cannot fail
	}
	encoding.RegisterCompressor(c)
	registerZstd()
}

// Compressor is a gRPC encoding.Compressor whose messages are format-v1
// bytes frames (docs/FORMAT.md): each message is cut into frames of at
// most the chunk size, each frame coded by the recipe its policy chooses.
// It is registered under Name at init with the default settings (a recipe
// per frame from the kind of data the frame holds); NewCompressor with
// WithName makes others, for instance with an autotuner on a live link.
//
// Memory is bounded by the chunk size on both sides: the sender buffers
// at most one chunk, the receiver decodes one frame at a time into a
// buffer of its own and refuses a frame that claims more than its limits
// before allocating. A Compressor is safe for concurrent use.
type Compressor struct {
	config
	cutter codec.Cutter
	enc    *codec.Encoder

	// A stateful policy (one that is not ByClass) is asked from one
	// goroutine at a time, Cut and Choose together (codec.Policy's
	// contract), and sees frame numbers that grow across the messages of
	// all calls, as a Writer's do.
	choose sync.Mutex
	seq    atomic.Uint64

	writers sync.Pool // *msgWriter
	readers sync.Pool // *msgReader
}

// config is what a Compressor and a TensorCodec are made with.
type config struct {
	name   string
	chunk  int
	policy codec.Policy
	lim    codec.Limits
}

// Option configures a Compressor or a TensorCodec.
type Option func(*config) error

// WithName sets the name the Compressor or TensorCodec registers under
// (default Name, or TensorCodecName).
func WithName(name string) Option {
	return func(c *config) error {
		if name == "" {
			return errors.New("rpc: empty name")
		}
		c.name = name
		return nil
	}
}

// WithChunkSize sets the largest frame of a message, or the chunk size
// tensors are cut into (default DefaultChunkSize, within
// codec.MinChunkSize and codec.MaxChunkSize). Receivers refuse frames
// above their limits (WithLimits).
func WithChunkSize(n int) Option {
	return func(c *config) error {
		if n < codec.MinChunkSize || n > codec.MaxChunkSize {
			return fmt.Errorf("rpc: chunk size %d outside [%d, %d]", n, codec.MinChunkSize, codec.MaxChunkSize)
		}
		c.chunk = n
		return nil
	}
}

// WithPolicy lets p choose each frame's recipe and observe the result
// (default: ByClass). An autotune.Tuner is a policy that also cuts frames
// where the kind of data changes; for it to measure the link, give it the
// connection (Tuner.UseConn from a dialer), or set the rate it measures
// (Link.SetRate), since writes into gRPC's buffers never block. A policy
// other than ByClass is asked (Cut, then Choose) from one goroutine at a
// time, whatever the number of concurrent messages, with frame numbers
// that grow across messages.
func WithPolicy(p codec.Policy) Option {
	return func(c *config) error {
		if p == nil {
			return errors.New("rpc: nil policy")
		}
		c.policy = p
		return nil
	}
}

// WithLimits sets the limits messages are decoded with (zero fields: the
// defaults, DefaultLimits for a Compressor and codec.DefaultLimits for a
// TensorCodec).
func WithLimits(l codec.Limits) Option {
	return func(c *config) error {
		if c.name == Name && l.MaxTensorSize <= 0 && l.MaxDecodedSize > 0 {
			l.MaxTensorSize = l.MaxDecodedSize // a message's frames hold byte data: no larger tensors
		}
		c.lim = l.Fill(c.lim)
		return nil
	}
}

// apply sets c from opts over its defaults.
func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("rpc: nil option")
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// NewCompressor returns a Compressor; register it with
// encoding.RegisterCompressor at init time (gRPC's rule).
func NewCompressor(opts ...Option) (*Compressor, error) {
	c := &Compressor{config: config{name: Name, chunk: DefaultChunkSize, policy: ByClass{}, lim: DefaultLimits()}}
	if err := c.apply(opts); err != nil {
		return nil, err
	}
	c.cutter, _ = c.policy.(codec.Cutter)
	enc, err := codec.NewEncoder()
	if err != nil {
		return nil, err
	}
	c.enc = enc
	return c, nil
}

// Name implements encoding.Compressor.
func (c *Compressor) Name() string { return c.name }

// Compress implements encoding.Compressor: what is written to the returned
// writer goes to w as frames, at the latest on Close.
func (c *Compressor) Compress(w io.Writer) (io.WriteCloser, error) {
	mw, _ := c.writers.Get().(*msgWriter)
	if mw == nil {
		mw = &msgWriter{c: c}
	}
	mw.w, mw.err = w, nil
	return mw, nil
}

// msgWriter buffers up to a chunk of a message and writes its frames.
type msgWriter struct {
	c   *Compressor
	w   io.Writer
	buf []byte // pending message bytes, less than a chunk
	out []byte // frame buffer
	err error
}

func (m *msgWriter) Write(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	n := len(p)
	for len(p) > 0 {
		if len(m.buf) == 0 && len(p) >= m.c.chunk {
			// A whole chunk in the caller's buffer: no copy.
			k := m.frame(p[:m.c.chunk])
			p = p[k:]
			continue
		}
		k := min(len(p), m.c.chunk-len(m.buf))
		m.buf = append(m.buf, p[:k]...)
		p = p[k:]
		if len(m.buf) == m.c.chunk {
			m.flushBuf()
		}
		if m.err != nil {
			return 0, m.err
		}
	}
	return n, m.err
}

// flushBuf writes the buffered bytes as frames.
func (m *msgWriter) flushBuf() {
	data := m.buf
	for len(data) > 0 && m.err == nil {
		data = data[m.frame(data):]
	}
	m.buf = m.buf[:0]
}

// frame writes one frame of a prefix of data (where the policy cuts, or
// all of it) and returns the prefix's length.
func (m *msgWriter) frame(data []byte) int {
	_, stateless := m.c.policy.(ByClass)
	if !stateless {
		m.c.choose.Lock()
	}
	if m.c.cutter != nil {
		if k := m.c.cutter.Cut(data); k > 0 && k < len(data) {
			data = data[:k]
		}
	}
	info := codec.FrameInfo{Seq: m.c.seq.Add(1) - 1, Type: codec.FrameBytes, DType: codec.Byte, Len: len(data), First: true, Data: data}
	r := m.c.policy.Choose(info)
	if !stateless {
		m.c.choose.Unlock()
	}
	if r.Lossy() {
		r = nil // messages are bytes: always lossless
	}
	t0 := time.Now()
	var stats []codec.SegmentStat
	m.out, stats, m.err = m.c.enc.AppendBytesStats(m.out[:0], nil, data, r)
	enc := time.Since(t0)
	if m.err == nil {
		t0 = time.Now()
		_, m.err = m.w.Write(m.out)
	}
	info.Data = nil
	m.c.policy.Observe(codec.FrameStats{Info: info, Recipe: r, RawBytes: len(data), FrameBytes: len(m.out),
		Segments: stats, Encode: enc, Blocked: time.Since(t0), Err: m.err, Inline: true})
	return len(data)
}

// Close writes what is buffered and returns the writer to its pool.
func (m *msgWriter) Close() error {
	if m.err == nil && len(m.buf) > 0 {
		m.flushBuf()
	}
	err := m.err
	m.w, m.buf = nil, m.buf[:0]
	if cap(m.out) > 2*m.c.chunk {
		m.out = nil
	}
	m.c.writers.Put(m)
	return err
}

// Decompress implements encoding.Compressor: the returned reader decodes
// the frames of r one at a time, within the Compressor's limits. gRPC
// closes it, which returns it to its pool.
func (c *Compressor) Decompress(r io.Reader) (io.Reader, error) {
	mr, _ := c.readers.Get().(*msgReader)
	if mr == nil {
		cr, err := codec.NewReader(r, codec.WithLimits(c.lim))
		if err != nil {
			return nil, err
		}
		mr = &msgReader{c: c, r: cr}
	} else {
		mr.r.Reset(r)
	}
	return mr, nil
}

// msgReader reads the content of a message's bytes frames, each decoded
// into one buffer that is reused.
type msgReader struct {
	c    *Compressor
	r    *codec.Reader
	buf  []byte
	rest []byte
}

func (m *msgReader) Read(p []byte) (int, error) {
	for len(m.rest) == 0 {
		f, err := m.r.NextInto(func(h *codec.FrameHeader, i int) []byte {
			if n := int(h.Entries[i].RawLen); h.Type == codec.FrameBytes && cap(m.buf) >= n {
				return m.buf[:0]
			}
			return nil
		})
		if err != nil {
			if err != io.EOF {
				err = fmt.Errorf("rpc: %s message: %w", m.c.name, err)
			}
			return 0, err
		}
		switch f.Header.Type {
		case codec.FrameBytes:
			m.rest = f.Bytes
			if cap(f.Bytes) > cap(m.buf) {
				m.buf = f.Bytes[:0] // the Reader made a larger buffer: keep it
			}
		case codec.FrameEnd:
			return 0, io.EOF
		case codec.FrameTensor, codec.FrameTensors:
			return 0, fmt.Errorf("%w: rpc: a tensor frame in a %s message", codec.ErrCorrupt, m.c.name)
		}
	}
	n := copy(p, m.rest)
	m.rest = m.rest[n:]
	return n, nil
}

// Close returns the reader to its pool (gRPC calls it once).
func (m *msgReader) Close() error {
	m.rest = nil
	m.r.Reset(nil)
	m.c.readers.Put(m)
	return nil
}

// ByClass is the default policy of a Compressor (sniff.ByClass): the
// recipe of each frame from the kind of data in it, the same on every
// link; use an autotune.Tuner to choose by the link.
type ByClass = sniff.ByClass
