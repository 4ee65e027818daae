package sniff

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
)

// TestByClassChoices: the recipe ByClass gives each kind of frame.
func TestByClassChoices(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	floats := func(n int, density float64, pre int) []byte {
		b := make([]byte, pre, pre+4*n)
		for i := range pre {
			b[i] = 0x0a // a protobuf field's tag, say
		}
		for range n {
			v := float32(0)
			if rng.Float64() < density {
				v = float32(rng.NormFloat64() * 0.02)
			}
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	sparseLetters := make([]byte, 1<<16)
	for i := range sparseLetters {
		if rng.IntN(20) == 0 {
			sparseLetters[i] = byte('a' + rng.IntN(26))
		}
	}
	text := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog. ", 2000))
	for _, c := range []struct {
		name string
		fi   codec.FrameInfo
		want string
	}{
		{"tiny", codec.FrameInfo{Type: codec.FrameBytes, DType: codec.Byte, Data: text[:10]}, ""},
		{"float32 tensor", codec.FrameInfo{Type: codec.FrameTensor, DType: codec.F32, Data: floats(1<<14, 1, 0)}, "shuffle4 | plane3:huff0 | plane0..2:raw"},
		{"sparse float32 tensor", codec.FrameInfo{Type: codec.FrameTensor, DType: codec.F32, Data: floats(1<<16, 0.01, 0)}, "sparse | *:zstd(1)"},
		{"sparse floats in bytes", codec.FrameInfo{Type: codec.FrameBytes, DType: codec.Byte, Data: floats(1<<16, 0.01, 0)}, "width(4) | sparse | *:zstd(1)"},
		{"sparse floats after a header", codec.FrameInfo{Type: codec.FrameBytes, DType: codec.Byte, Data: floats(1<<16, 0.01, 3)}, "width(4) | sparse | *:zstd(1)"},
		{"sparse letters", codec.FrameInfo{Type: codec.FrameBytes, DType: codec.Byte, Data: sparseLetters}, "sparse | *:zstd(1)"},
		{"text", codec.FrameInfo{Type: codec.FrameBytes, DType: codec.Byte, Data: text}, "*:zstd(1)"},
	} {
		c.fi.Len = len(c.fi.Data)
		r := ByClass{}.Choose(c.fi)
		got := ""
		if r != nil {
			got = r.String()
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if r == nil || c.fi.Type != codec.FrameBytes {
			continue
		}
		// What it chooses codes the frame and decodes to it.
		enc, _ := codec.NewEncoder()
		frame, err := enc.AppendBytes(nil, c.fi.Data, r)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		f, _, err := new(codec.Decoder).DecodeFrame(frame)
		if err != nil || string(f.Bytes) != string(c.fi.Data) {
			t.Fatalf("%s: round trip: %v", c.name, err)
		}
	}
}
