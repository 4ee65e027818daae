package autotune

import (
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// FuzzSniff: any bytes (a peer's stream, a header claiming anything) give
// a class with an element width of 1, 2, 4 or 8, never a panic.
func FuzzSniff(f *testing.F) {
	f.Add(npyHeader("<f4"))
	f.Add(stHeader("F32", make([]byte, 100)))
	f.Add([]byte("\x93NUMPY\x01\x00\xff\xff{'descr'"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '"'})
	f.Add(weights(300, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := Sniff(codec.FrameInfo{Type: codec.FrameBytes, DType: codec.Byte, Data: b})
		switch c.Period {
		case 1, 2, 4, 8:
		default:
			t.Fatalf("period %d", c.Period)
		}
	})
}
