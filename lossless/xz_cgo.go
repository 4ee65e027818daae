//go:build cgo && !tensorpress_nolzma

package lossless

import (
	"errors"
	"fmt"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/liblzma"
)

// liblzma backend, built when cgo is on: XZ Utils' library, the `xz`
// tool's own (internal/liblzma), for encoding (preset 6's match finder and
// modes at the dictionary the op declares: `xz -6`'s ratio) and for
// decoding each block of a stream that xzDecode has walked and bounded.
// xz_nocgo.go is its twin without cgo.
var xzBackend xzCoder = xzC{}

// xzLiblzma is the liblzma backend (the tests cross-check it with xzGo).
var xzLiblzma xzCoder = xzC{}

type xzC struct{}

func (xzC) encode(a *codec.Arena, src []byte, dict int) ([]byte, error) {
	bound := liblzma.Bound(len(src))
	if bound == 0 {
		return nil, fmt.Errorf("liblzma: %d bytes are too many", len(src))
	}
	out := a.Alloc(bound)
	n, err := liblzma.Encode(out, src, dict)
	if err != nil {
		return nil, err
	}
	return out[:n:n], nil
}

func (xzC) decodeBlock(out, data []byte, dict int64) error {
	switch err := liblzma.DecodeBlock(out, data, dict); {
	case err == liblzma.ErrTrailing:
		return fmt.Errorf("data past the end of its %d bytes", len(out))
	case errors.Is(err, liblzma.ErrMemory):
		return fmt.Errorf("%w: %v", errXzMemory, err)
	default:
		return err
	}
}
