package tensorfile

import (
	"fmt"
	"math"

	"github.com/tensorpress/tensorpress/codec"
)

// Limits bound what the readers accept, and what the writers produce so that
// their output can be read back with the same limits. A zero field means "use
// the default" (see DefaultLimits); a negative field is refused by WithLimits.
// Every limit is checked before the allocation it protects.
type Limits struct {
	// MaxHeaderSize bounds the JSON header of a safetensors file, and a
	// TensorFlow.js model's JSON, in bytes.
	// Default 100,000,000: the reference implementation's own limit
	// (MAX_HEADER_SIZE in huggingface/safetensors), so every file the
	// reference reads is accepted. A service reading untrusted files may
	// want less: the header is read into memory whole.
	MaxHeaderSize int64
	// MaxNpyHeaderSize bounds the header dict of an .npy file in bytes
	// (the value of its length field). Default 65536, the most a version
	// 1.0 header can hold; numpy itself refuses headers over 10000 bytes
	// by default when reading.
	MaxNpyHeaderSize int
	// MaxTensors bounds the tensors of one safetensors file, the
	// initializers of an ONNX model, and the weights, groups and shard
	// paths of a TensorFlow.js model. Default 262144 (2^18), far above real
	// checkpoints.
	MaxTensors int
	// MaxDims bounds a tensor's rank. Default 64 (numpy 2's NPY_MAXDIMS).
	MaxDims int
	// MaxNameLen bounds a tensor name and a safetensors metadata key, in
	// bytes. Default 4096. Metadata values are bounded by MaxHeaderSize only.
	MaxNameLen int
	// MaxTensorBytes bounds the data that one call allocates for one tensor:
	// Read and ReadIndex of Safetensors, ONNX and TFJS, and ReadNpy.
	// Default 4 GiB. Streaming
	// through Safetensors.Section is not bounded by it.
	MaxTensorBytes int64
}

// DefaultLimits returns the limits used where none are given.
func DefaultLimits() Limits {
	return Limits{
		MaxHeaderSize:    100_000_000,
		MaxNpyHeaderSize: 1 << 16,
		MaxTensors:       1 << 18,
		MaxDims:          64,
		MaxNameLen:       4096,
		MaxTensorBytes:   4 << 30,
	}
}

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxHeaderSize == 0 {
		l.MaxHeaderSize = d.MaxHeaderSize
	}
	if l.MaxNpyHeaderSize == 0 {
		l.MaxNpyHeaderSize = d.MaxNpyHeaderSize
	}
	if l.MaxTensors == 0 {
		l.MaxTensors = d.MaxTensors
	}
	if l.MaxDims == 0 {
		l.MaxDims = d.MaxDims
	}
	if l.MaxNameLen == 0 {
		l.MaxNameLen = d.MaxNameLen
	}
	if l.MaxTensorBytes == 0 {
		l.MaxTensorBytes = d.MaxTensorBytes
	}
	return l
}

// Option configures a reader or a writer of this package. Options are checked
// when applied: a bad value makes the function that was given it fail before
// it reads or writes anything. An option that does not concern a function
// (WithNpyVersion given to OpenSafetensors, say) is ignored by it.
type Option func(*config) error

type config struct {
	limits     Limits
	keepOrder  bool
	npyVersion int // 0: the oldest version that holds the header
}

// newConfig is the one place that sets every default.
func newConfig(opts []Option) (config, error) {
	c := config{limits: DefaultLimits()}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("tensorfile: nil Option")
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithLimits sets the limits of readers and writers (default DefaultLimits;
// zero fields keep their default). A negative field is an error.
func WithLimits(l Limits) Option {
	return func(c *config) error {
		if l.MaxHeaderSize < 0 || l.MaxNpyHeaderSize < 0 || l.MaxTensors < 0 ||
			l.MaxDims < 0 || l.MaxNameLen < 0 || l.MaxTensorBytes < 0 {
			return fmt.Errorf("tensorfile: negative limit in %+v", l)
		}
		c.limits = l.withDefaults()
		return nil
	}
}

// WithKeepOrder makes a safetensors writer lay the tensors out in the order
// it was given them, instead of the reference order (descending dtype, then
// name; see NewSafetensorsWriter). Default false.
func WithKeepOrder(keep bool) Option {
	return func(c *config) error {
		c.keepOrder = keep
		return nil
	}
}

// WithNpyVersion makes WriteNpy write format version major.0: 1, 2 or 3
// (0, the default, picks 1 unless the header needs the 4-byte length of
// version 2, as np.save does). Version 1 with a header over 65535 bytes is
// an error. To reproduce a file byte for byte, pass its NpyHeader.Major.
func WithNpyVersion(major int) Option {
	return func(c *config) error {
		if major < 0 || major > 3 {
			return fmt.Errorf("tensorfile: npy version %d, want 1, 2, 3 or 0 for automatic", major)
		}
		c.npyVersion = major
		return nil
	}
}

// alloc returns a fresh 8-byte aligned buffer for the n bytes of tensor
// name of a file of format, or an error wrapping codec.ErrLimit, before
// allocating, when n is over MaxTensorBytes.
func (l Limits) alloc(format, what, name string, n int64) ([]byte, error) {
	if n > l.MaxTensorBytes || n > math.MaxInt {
		return nil, formatErr(format, -1, isLimit, "%s %q: %d bytes is over the limit of %d", what, name, n, l.MaxTensorBytes)
	}
	return codec.AlignedBytes(int(n)), nil
}
