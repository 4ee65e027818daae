package tensorfile

import (
	"errors"
	"fmt"
	"io"

	"github.com/tensorpress/tensorpress/codec"
)

// ErrNotFound is returned by the readers' Read (Safetensors, ONNX, TFJS)
// for a name the file does not hold.
var ErrNotFound = errors.New("tensorfile: no such tensor")

// FormatError reports a file, or a tensor given to a writer, that is
// malformed, unsupported or over a limit.
// It wraps one or two of codec.ErrCorrupt, codec.ErrUnsupported,
// codec.ErrLimit and io.ErrUnexpectedEOF: test with errors.Is. A safetensors
// file whose tensors reach past its end wraps both codec.ErrCorrupt and
// io.ErrUnexpectedEOF (a truncated file and a corrupt header look the same).
type FormatError struct {
	Format string // "safetensors", "npy", "onnx" or "tfjs"
	Offset int64  // byte offset in the file the problem was found at, or -1
	Msg    string // what is wrong, naming the tensor where there is one
	errs   []error
}

func (e *FormatError) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("tensorfile: %s: %s (at byte %d)", e.Format, e.Msg, e.Offset)
	}
	return "tensorfile: " + e.Format + ": " + e.Msg
}

// Unwrap returns the sentinels the error wraps.
func (e *FormatError) Unwrap() []error { return e.errs }

func formatErr(format string, off int64, errs []error, msg string, args ...any) error {
	return &FormatError{Format: format, Offset: off, Msg: fmt.Sprintf(msg, args...), errs: errs}
}

var (
	isCorrupt     = []error{codec.ErrCorrupt}
	isUnsupported = []error{codec.ErrUnsupported}
	isLimit       = []error{codec.ErrLimit}
	isTruncated   = []error{io.ErrUnexpectedEOF}
	isCutShort    = []error{codec.ErrCorrupt, io.ErrUnexpectedEOF}
)

const (
	fmtST   = "safetensors"
	fmtNpy  = "npy"
	fmtTFJS = "tfjs"
	fmtONNX = "onnx"
)

// stErr, npyErr and tfjsErr build errors at no particular offset.
func stErr(kind []error, msg string, args ...any) error {
	return formatErr(fmtST, -1, kind, msg, args...)
}

func npyErr(kind []error, msg string, args ...any) error {
	return formatErr(fmtNpy, -1, kind, msg, args...)
}

func tfjsErr(kind []error, msg string, args ...any) error {
	return formatErr(fmtTFJS, -1, kind, msg, args...)
}

func onnxErr(kind []error, msg string, args ...any) error {
	return formatErr(fmtONNX, -1, kind, msg, args...)
}
