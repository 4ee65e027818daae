package codec

import (
	"errors"
	"fmt"
)

// Sentinel errors. Data-dependent failures wrap one of these (test with
// errors.Is); truncated input is reported as io.ErrUnexpectedEOF.
var (
	// ErrCorrupt: the input is not a valid frame or segment.
	ErrCorrupt = errors.New("codec: corrupt input")
	// ErrChecksum: a header or payload CRC-32C did not match.
	ErrChecksum = errors.New("codec: checksum mismatch")
	// ErrLimit: the input asks for more than the decoder's Limits allow.
	ErrLimit = errors.New("codec: limit exceeded")
	// ErrUnsupported: an unknown format version, frame type, stage ID,
	// dtype or critical extension.
	ErrUnsupported = errors.New("codec: unsupported")
	// ErrLossy: a lossy stage was asked for on a tensor tagged lossless.
	ErrLossy = errors.New("codec: lossy stage on a lossless tensor")
	// ErrRecipe: a recipe does not parse or does not fit the data.
	ErrRecipe = errors.New("codec: bad recipe")
	// ErrClosed: the Writer or Reader was closed.
	ErrClosed = errors.New("codec: closed")
	// ErrNonFinite: DecodeAdd with WithFiniteAdd met an entry that would
	// add a NaN or an infinity to its accumulator.
	ErrNonFinite = errors.New("codec: non-finite value")
)

// CorruptError locates a decoding failure. It wraps one of the sentinels.
type CorruptError struct {
	Offset int64  // byte offset in the stream (or buffer) where the frame starts
	What   string // what was being decoded
	Err    error  // the cause: ErrCorrupt, ErrChecksum, ErrLimit, ErrUnsupported, ...
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%v: %s (frame at offset %d)", e.Err, e.What, e.Offset)
}

func (e *CorruptError) Unwrap() error { return e.Err }

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

func limitf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrLimit}, args...)...)
}
