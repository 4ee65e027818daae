package lossless

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/internal/codectest"
)

func byteDeltaEncodeRef(dst, src []byte) {
	prev := byte(0)
	for i, b := range src {
		dst[i] = b - prev
		prev = b
	}
}

func byteDeltaDecodeRef(dst, src []byte) {
	prev := byte(0)
	for i, d := range src {
		prev += d
		dst[i] = prev
	}
}

func TestByteDeltaKernels(t *testing.T) {
	const guard = 0x3c
	patterns := map[string]func(n int) []byte{
		"random": func(n int) []byte { return fastTestRandom(n, uint64(n)) },
		"ramp": func(n int) []byte {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(i * 37)
			}
			return b
		},
		"ff": func(n int) []byte { return bytes.Repeat([]byte{0xff}, n) },
		"alternate": func(n int) []byte {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(0x80 * (i & 1))
			}
			return b
		},
	}
	for name, gen := range patterns {
		for n := range 70 {
			for _, size := range []int{n, n + 4000} {
				for _, off := range []int{0, 1, 5} {
					src := append(make([]byte, off), gen(size)...)[off:]
					want := make([]byte, size)
					byteDeltaEncodeRef(want, src)
					buf := bytes.Repeat([]byte{guard}, off+size+8)
					got := buf[off : off+size : off+size]
					byteDeltaEncode(got, src)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s n=%d off=%d: encode differs", name, size, off)
					}
					if !bytes.Equal(buf[off+size:], bytes.Repeat([]byte{guard}, 8)) {
						t.Fatalf("%s n=%d: encode wrote past the end", name, size)
					}
					byteDeltaDecode(got, want)
					if !bytes.Equal(got, src) {
						t.Fatalf("%s n=%d off=%d: decode differs", name, size, off)
					}
					if !bytes.Equal(buf[off+size:], bytes.Repeat([]byte{guard}, 8)) {
						t.Fatalf("%s n=%d: decode wrote past the end", name, size)
					}
				}
			}
		}
	}
}

func TestByteDeltaOp(t *testing.T) {
	op := fastTestParse(t, "bytedelta")
	fastTestStringRoundTrip(t, op, "bytedelta")
	if _, err := codec.ParseRecipe("bytedelta(1)"); !errors.Is(err, codec.ErrRecipe) {
		t.Errorf("bytedelta(1): %v, want ErrRecipe", err)
	}
	if _, err := byteDeltaStage.Load([]byte{0}); !errors.Is(err, codec.ErrCorrupt) {
		t.Errorf("Load(00): %v, want ErrCorrupt", err)
	}
	for _, n := range []int{0, 1, 7, 8, 9, 1000} {
		fastTestOpRoundTrip(t, op, "plane3", codec.Byte, fastTestRandom(n, 9))
	}
	in := codec.SegInfo{Name: "data", Elem: codec.Byte, Len: 10}
	for _, parts := range [][]codec.Segment{nil, {{Data: make([]byte, 9)}}, {{Data: make([]byte, 10)}, {Data: nil}}} {
		if _, err := op.Decode(nil, make([]byte, 0, 10), parts, in); !errors.Is(err, codec.ErrCorrupt) {
			t.Errorf("%d parts: %v, want ErrCorrupt", len(parts), err)
		}
	}
	for _, recipe := range []string{"bytedelta", "shuffle4 | bytedelta", "shuffle4 | plane3:bytedelta | *:raw"} {
		for _, n := range []int{0, 1, 3, 1000} {
			codectest.Lossless(t, fastTestTensor("w", codec.F32, fastTestFloats(n, 4)), recipe)
		}
	}
}

func BenchmarkByteDelta(b *testing.B) {
	const n = 1 << 20
	src := fastTestFloats(n/4, 1)
	dst := make([]byte, n)
	for _, k := range []struct {
		name string
		f    func(dst, src []byte)
	}{
		{"encode", byteDeltaEncode}, {"decode", byteDeltaDecode},
		{"encodeRef", byteDeltaEncodeRef}, {"decodeRef", byteDeltaDecodeRef},
	} {
		b.Run(k.name, func(b *testing.B) {
			b.SetBytes(n)
			b.ReportAllocs()
			for b.Loop() {
				k.f(dst, src)
			}
		})
	}
}
