package cabi

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/gradient"
	"github.com/tensorpress/tensorpress/lossy"
)

// Codes returned by every entry point (TP_* in libtensorpress.h). Their
// values are part of the ABI and never change.
const (
	OK           int32 = 0
	ECORRUPT     int32 = 1  // codec.ErrCorrupt
	ECHECKSUM    int32 = 2  // codec.ErrChecksum
	ETRUNCATED   int32 = 3  // io.ErrUnexpectedEOF
	ENOTFRAME    int32 = 4  // codec.ErrNotFrame
	ELIMIT       int32 = 5  // codec.ErrLimit
	EUNSUPPORTED int32 = 6  // codec.ErrUnsupported
	ELOSSY       int32 = 7  // codec.ErrLossy
	ERECIPE      int32 = 8  // codec.ErrRecipe, a bad gradient spec or profile
	EARG         int32 = 9  // a bad argument (dtype, shape, buffer size)
	ESTATE       int32 = 10 // gradient.ErrMemory, a call not allowed now, or an update the hub refused (round closed, already counted)
	ENONFINITE   int32 = 11 // lossy.ErrNonFinite, codec.ErrNonFinite (a Receiver's update)
	ENOTFOUND    int32 = 12 // hub: no such version or tensor
	EBASE        int32 = 13 // hub: the base of a delta is not the caller's
	EUNAVAILABLE int32 = 14 // hub: unreachable
	EAUTH        int32 = 15 // hub: unauthenticated or denied
	ETIMEOUT     int32 = 16 // a deadline passed or a transfer stalled
	ECANCELED    int32 = 17 // the call was canceled
	EHANDLE      int32 = 18 // a handle that is closed or of another kind
	EINTERNAL    int32 = 99 // a bug: a recovered panic
)

// codeError is an error whose code is decided where it is made.
type codeError struct {
	code int32
	msg  string
	err  error // optional cause
}

func (e *codeError) Error() string { return e.msg }
func (e *codeError) Unwrap() error { return e.err }

func codeErrorf(code int32, format string, args ...any) error {
	return &codeError{code: code, msg: fmt.Sprintf(format, args...)}
}

// argErrorf is an EARG error.
func argErrorf(format string, args ...any) error {
	return codeErrorf(EARG, "tensorpress: "+format, args...)
}

// Code maps err to its code, with errors.Is in a fixed order: the most
// specific sentinels first (ErrNotFrame is a kind of ErrCorrupt, so it
// comes before it).
func Code(err error) int32 {
	var ce *codeError
	switch {
	case err == nil:
		return OK
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, codec.ErrLimit):
		return ELIMIT
	case errors.Is(err, codec.ErrChecksum):
		return ECHECKSUM
	case errors.Is(err, io.ErrUnexpectedEOF):
		return ETRUNCATED
	case errors.Is(err, codec.ErrNotFrame):
		return ENOTFRAME
	case errors.Is(err, codec.ErrLossy):
		return ELOSSY
	case errors.Is(err, codec.ErrRecipe):
		return ERECIPE
	case errors.Is(err, codec.ErrUnsupported):
		return EUNSUPPORTED
	case errors.Is(err, lossy.ErrNonFinite), errors.Is(err, codec.ErrNonFinite):
		return ENONFINITE
	case errors.Is(err, gradient.ErrMemory):
		return ESTATE
	case errors.Is(err, codec.ErrCorrupt):
		return ECORRUPT
	}
	return EINTERNAL
}

// fail returns err's code and message.
func fail(err error) (int32, string) { return Code(err), err.Error() }

// guard turns a panic into EINTERNAL. Every entry point defers it.
func guard(code *int32, msg *string) {
	if r := recover(); r != nil {
		*code = EINTERNAL
		*msg = fmt.Sprintf("tensorpress: internal error (please report): %v\n%s", r, debug.Stack())
	}
}
